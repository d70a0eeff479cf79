"""docs/guides/adopting.md against the test cluster (pytest -m "engine or cluster"): the runbook's hand-applied proxy
moved to a stack as the guide says, and a second stack refused by the first one's name.

The runbook's objects (tests/fixtures/runbook/http-proxy.yaml) are applied with `kubectl apply`, as the seed
document's clusters were; the guide's block then runs as written, with the cluster as the ambient kubeconfig.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kwok_cluster import kwok_cluster

from .conftest import ROOT, Project, changes
from .test_live import Cluster

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NS = "proxy-component"
RUNBOOK = ROOT / "tests/fixtures/runbook/http-proxy.yaml"
# The guide's first step with the test cluster's ranges: kwok's nodes are dual-stack (so `check` judges them right),
# the runbook's Service is IPv6 single-stack, and stays on its IPv6 cluster IP.
SETTINGS: dict[str, Any] = {
    "cluster": {
        "ipFamily": "dual",
        "podCidrs": ["fd00::/48", "10.0.0.0/16"],
        "serviceCidrs": ["fd00:10:96::/108", "10.0.0.0/24"],
        "nodeCidrs": ["2001:db8::/64", "192.0.2.0/24"],
    },
    "namespaces": ["default"],
}
# The seed's cluster is IPv6-only: the test cluster's API server gets an IPv6 service range beside its IPv4 one.
DUAL_STACK_SERVICES = """apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
- name: kube-apiserver
  extraArgs:
  - {key: service-cluster-ip-range, value: "10.0.0.0/24,fd00:10:96::/108"}
"""
TAKEN = [
    ("daemonset", "kube-system", "http-proxy"),
    ("service", "kube-system", "http-proxy"),
    ("configmap", "default", "proxy-config"),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("cluster"), "pc-adopt", 2, DUAL_STACK_SERVICES) as kubeconfig:
        live = Cluster(kubeconfig)
        for _ in range(60):
            if len(live.get("nodes")["items"]) == 2:
                break
            time.sleep(1)
        yield live


def runbook(cluster: Cluster) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Apply the runbook's objects with `kubectl apply` and wait for its proxy pods; the objects as applied."""
    cluster.kubectl("apply", "-f", str(RUNBOOK))
    cluster.kubectl("-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=90s")
    return {o: cluster.get(o[0], o[2], "-n", o[1]) for o in TAKEN}


def guide_block() -> str:
    text = (ROOT / "docs/guides/adopting.md").read_text()
    block = text.split("<!-- adopting-commands:", 1)[1].split("```sh\n", 1)[1]
    return block.split("```", 1)[0]


def stack(project_factory: Any, cluster: Cluster, name: str) -> Project:
    project: Project = project_factory(".", name, name)
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.env["KUBECONFIG"] = str(cluster.kubeconfig)  # the ambient kubeconfig: pulumi, kubectl and check
    project.init()
    for key, value in SETTINGS.items():
        project.config(f"{NS}:{key}", value)
    return project


def revisions(cluster: Cluster) -> set[str]:
    items = cluster.get("controllerrevisions", "-n", "kube-system", "-l", "app=http-proxy")["items"]
    return {r["metadata"]["name"] for r in items}


def test_the_guide_moves_the_runbooks_proxy_to_a_stack(project_factory: Any, cluster: Cluster) -> None:
    before = runbook(cluster)
    revisions_before = revisions(cluster)
    project = stack(project_factory, cluster, "prod")

    # Without adoptExisting: the preview fails at once, every object named with what to do; nothing written.
    started = time.monotonic()
    plain = project.run("preview", check=False)
    took = time.monotonic() - started
    output = plain.stdout + plain.stderr
    assert plain.returncode != 0, output
    for kind, namespace, name in [("DaemonSet", "kube-system", "http-proxy"), ("Service", "kube-system", "http-proxy"),
                                  ("ConfigMap", "default", "proxy-config")]:  # fmt: skip
        line = f"{kind} {namespace}/{name}: already exists in the cluster"
        assert line in output, output
    assert "set proxy-component:adoptExisting: true to import it" in output, output
    assert "made by kubectl-client-side-apply" in output, output
    assert "Traceback" not in output
    print(f"\npreview without adoptExisting: exit {plain.returncode} in {took:.1f} s")
    first = next(line for line in output.splitlines() if "already exists in the cluster" in line)
    print(f"  {first.strip()[:300]}")

    # The guide's preview: imports and their diffs, what rolls and what stays behind.
    project.config(f"{NS}:adoptExisting", True)
    preview = project.preview_json()
    ops = changes(preview)
    assert sorted(ops.get("import", [])) == ["prod-proxy-config-default", "prod-service", "prod-tinyproxy"], ops
    assert set(ops) <= {"import", "update", "create"}, ops
    shown = project.run("preview", "--diff")
    diagnostics = shown.stdout + shown.stderr
    assert re.search(r"=\s+kubernetes:apps/v1:DaemonSet", diagnostics), diagnostics
    assert "DaemonSet kube-system/http-proxy: the import's update changes its pod template" in diagnostics, diagnostics
    assert "spec.template.spec.containers[tinyproxy].args" in diagnostics, diagnostics
    assert "left behind, ConfigMap kube-system/tinyproxy-config" in diagnostics, diagnostics
    print("preview --diff (diagnostics):")
    for line in diagnostics.splitlines():
        if "kube-system/http-proxy" in line or "left behind" in line or "default/proxy-config" in line:
            print(f"  {line.strip()[:400]}")

    script = project.dir / "adopting.sh"
    script.write_text("set -euo pipefail\n" + guide_block())
    result = subprocess.run(
        ["bash", str(script)], cwd=project.dir, env=project.env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    replaced = [line for line in result.stdout.splitlines() if re.search(r"\b(replaced|deleted)\b", line)]
    assert replaced == ['configmap "tinyproxy-config" deleted'], replaced  # kubectl's line: the guide's own step

    after = {o: cluster.get(o[0], o[2], "-n", o[1], "--show-managed-fields") for o in TAKEN}
    for key in TAKEN:
        assert after[key]["metadata"]["uid"] == before[key]["metadata"]["uid"], key
    service = after[("service", "kube-system", "http-proxy")]
    assert service["spec"]["clusterIP"] == before[("service", "kube-system", "http-proxy")]["spec"]["clusterIP"]
    new_revisions = revisions(cluster) - revisions_before
    assert len(new_revisions) == 1, new_revisions  # one roll
    daemonset = after[("daemonset", "kube-system", "http-proxy")]
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert "args" not in container, container  # kubectl's field went with the import's update
    for obj in after.values():
        annotations = obj["metadata"].get("annotations") or {}
        assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations, obj["metadata"]
        assert annotations.get("proxy-component.io/owner") == "organization/proxy-component/prod"
        managers = {e["manager"] for e in obj["metadata"]["managedFields"] if not e.get("subresource")}
        assert not any(m.startswith("kubectl") or m == "before-first-apply" for m in managers), managers
    assert not cluster.exists("configmap", "tinyproxy-config", "-n", "kube-system")
    volumes = json.dumps(daemonset["spec"]["template"]["spec"].get("volumes"))
    assert "tinyproxy-config" not in volumes
    print(f"after: uids kept, clusterIP {service['spec']['clusterIP']} kept, {len(new_revisions)} roll")

    # The second stack: same cluster, adoptExisting on, refused by the first one's name; nothing written.
    second = stack(project_factory, cluster, "prod-2")
    second.config(f"{NS}:adoptExisting", True)
    refused = second.run("preview", check=False)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0, output
    assert "DaemonSet kube-system/http-proxy: already exists in the cluster" in output, output
    assert "belongs to stack organization/proxy-component/prod (annotation proxy-component.io/owner)" in output
    assert "set proxy-component:adoptFrom: 'organization/proxy-component/prod'" in output, output
    up = second.run("up", "--yes", "--skip-preview", check=False)
    assert up.returncode != 0
    assert second.export()["deployment"].get("resources") in (None, []) or all(
        not r["type"].startswith("kubernetes:") or r["type"] == "pulumi:providers:kubernetes"
        for r in second.export()["deployment"]["resources"]
    )
    assert (
        cluster.get("daemonset", "http-proxy", "-n", "kube-system")["metadata"]["annotations"][
            "proxy-component.io/owner"
        ]
        == "organization/proxy-component/prod"
    )

    project.run("destroy", "--yes", "--skip-preview")
    assert not cluster.exists("daemonset", "http-proxy", "-n", "kube-system")


PASSWORD = "Ad0pt-S3cret-9140"


def test_adopting_secrets_says_nothing_of_their_values(project_factory: Any, cluster: Cluster) -> None:
    """With upstream credentials the proxy's config is a Secret: one made beforehand with kubectl, holding the
    password, is imported and its fields named, and the password is in no line of the preview or `up` (nor in the
    state outside the Secret's ciphertext)."""
    cluster.kubectl("create", "secret", "generic", "http-proxy-config", "-n", "kube-system",
                    f"--from-literal=tinyproxy.conf=Upstream http user:{PASSWORD}@192.0.2.10:3128",
                    "--from-literal=OLD_KEY=kept-by-kubectl")  # fmt: skip
    project = stack(project_factory, cluster, "creds")
    project.config(f"{NS}:proxy", {"upstream": {"url": "http://192.0.2.10:3128", "username": "user"}})
    project.run("config", "set", "--secret", "--path", f"{NS}:proxy.upstream.password", PASSWORD)
    refused = project.run("preview", check=False)
    assert refused.returncode != 0, refused.stdout
    assert "Secret kube-system/http-proxy-config: already exists in the cluster" in refused.stdout + refused.stderr
    project.config(f"{NS}:adoptExisting", True)
    shown = project.run("preview", "--diff")
    up = project.run("up", "--yes", "--skip-preview")
    for output in (refused, shown, up):
        assert PASSWORD not in output.stdout + output.stderr
    assert PASSWORD not in json.dumps(project.export())
    assert "Secret kube-system/http-proxy-config: imported (made by kubectl-create)" in shown.stderr, shown.stderr
    assert "removes what kubectl set that the plan does not: data.OLD_KEY" in shown.stderr, shown.stderr
    secret = cluster.get("secret", "http-proxy-config", "-n", "kube-system")
    assert "OLD_KEY" not in secret["data"]
    assert "tinyproxy.conf" in secret["data"]
    project.run("destroy", "--yes", "--skip-preview")
