"""Where the proxy's pods run, decided by the real DaemonSet controller (pytest -m cluster): never on nodes that
cannot run DaemonSet pods (virtual-kubelet, EKS Fargate), although the proxy tolerates every taint.

The cluster is scripts/cluster's: kube-apiserver, controller-manager and scheduler built from Kubernetes' Go
modules, three kwok nodes, all on 127.0.0.1. The nodes get the labels those platforms put on theirs.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kwok_cluster import kwok_cluster, proxy_pods_on

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster
SETTINGS = """\
cluster:
  podCidrs: ["10.0.0.0/16"]
  serviceCidrs: ["10.0.0.0/24"]
  nodeCidrs: ["192.0.2.0/24"]
"""
# What EKS puts on a Fargate node and virtual-kubelet (AKS virtual nodes, ACI) on its node, labels and taints.
PLATFORMS = {
    "fargate": (
        "eks.amazonaws.com/compute-type=fargate",
        "eks.amazonaws.com/compute-type=fargate:NoSchedule",
    ),
    "virtual-kubelet": ("type=virtual-kubelet", "virtual-kubelet.io/provider=azure:NoSchedule"),
}


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def nodes(self) -> list[str]:
        return sorted(self.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split())

    def placed(self, *nodes: str) -> tuple[int, set[str]]:
        """How many proxy pods there are and the nodes they are bound to, once the DaemonSet controller has put
        them on exactly `nodes` and kept them there."""
        bound = proxy_pods_on(self.kubeconfig, set(nodes))
        return len(bound), set(bound)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("placement"), "pc-place", 3) as kubeconfig:
        yield Cluster(kubeconfig)


def test_the_proxy_leaves_nodes_that_become_fargate_or_virtual_kubelet_and_skips_them(
    cluster: Cluster, tmp_path: Path
) -> None:
    settings = tmp_path / "proxy.yaml"
    settings.write_text(SETTINGS)
    rendered = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(settings)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=rendered)
    nodes = cluster.nodes()
    assert len(nodes) == 3
    assert cluster.placed(*nodes) == (3, set(nodes)), "every ordinary node runs the proxy"

    plain, *special = nodes
    for node, (label, taint) in zip(special, PLATFORMS.values(), strict=True):
        cluster.kubectl("label", "node", node, label, "--overwrite")
        cluster.kubectl("taint", "node", node, taint, "--overwrite")
    assert cluster.placed(plain) == (1, {plain}), (
        "the controller removed the pods from Fargate and virtual-kubelet nodes"
    )

    cluster.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/http-proxy")
    assert cluster.placed(plain) == (1, {plain}), "a new revision places no pod there either"
