"""Issue 44: every mistake a preview can see fails the preview, at once, with field, value and what to do, and with
no stack trace: against the test cluster, under the real engine. Each preview's exit code, time and lines are printed
(-s) for the record."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kwok_cluster import kwok_cluster

from .conftest import Project
from .test_live import Cluster

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NS = "proxy-component"
COREFILE = ".:53 {\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n    }\n    forward . /etc/resolv.conf\n}\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("cluster"), "pc-preview", 1) as kubeconfig:
        live = Cluster(kubeconfig)
        # The cluster's DNS, as kubeadm's CoreDNS holds it: cluster.local.
        live.kubectl("create", "configmap", "coredns", "-n", "kube-system", f"--from-literal=Corefile={COREFILE}")
        yield live


def _preview(project: Project) -> tuple[int, float, str]:
    started = time.monotonic()
    result = project.run("preview", check=False)
    took = time.monotonic() - started
    output = result.stdout + result.stderr
    print(f"\n== preview of stack {project.stack}: exit {result.returncode} in {took:.1f} s")
    print("\n".join(line for line in output.splitlines() if ": " in line and "proxy-component" not in line[:2]))
    return result.returncode, took, output


def test_the_issues_mistakes_all_fail_one_preview(project_factory: Any, cluster: Cluster) -> None:
    project: Project = project_factory(".", "mistakes", "mistakes")
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    project.config(f"{NS}:kubeconfig", str(cluster.kubeconfig))
    project.config(
        f"{NS}:cluster", {"podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.0.0.0/24"], "dnsDomain": "k8s.internal"}
    )
    project.config(f"{NS}:deployment", {"namespace": "kube-sytem", "metrics": {"enabled": True, "podMonitor": True}})
    project.config(f"{NS}:namespaces", ["default"])
    code, _, output = _preview(project)
    assert code != 0
    assert "Traceback" not in output
    for line in (
        "deployment.namespace: 'kube-sytem' does not exist in the cluster (",
        "deployment.metrics.podMonitor: the cluster (",
        "does not serve PodMonitor (monitoring.coreos.com/v1)",
        "cluster.dnsDomain: 'k8s.internal' is not the cluster's domain: its CoreDNS (kube-system/coredns) serves "
        "'cluster.local'",
    ):
        assert line in output, output
    assert cluster.kubectl("get", "daemonsets", "-A", "-o", "name").stdout.strip() == ""  # nothing was applied

    # A context the kubeconfig does not hold: refused with the ones it holds (before, a no-op `up` recorded it).
    project.config(f"{NS}:context", "prod-ue")
    code, _, output = _preview(project)
    assert code != 0
    assert "Traceback" not in output
    assert (
        "proxy-component:context: 'prod-ue' is not a context of the kubeconfig of proxy-component:kubeconfig " in output
    )
    assert "(expected one of: " in output

    # Corrected, the same stack previews clean; kubernetesVersion, unset, is the API server's (1.36 here): the
    # Service gets PreferSameNode, which the rollout guide's lossless rolls rely on.
    project.run("config", "rm", f"{NS}:context")
    project.config(f"{NS}:cluster", {"podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.0.0.0/24"]})
    project.config(f"{NS}:deployment", {"namespace": "kube-system"})
    code, _, output = _preview(project)
    assert code == 0, output
    assert "cluster.kubernetesVersion: 1." in output, output
