"""The deployment's scheduling settings against a real API server (pytest -m cluster): the rendered DaemonSet,
applied server-side with kubectl, is accepted and stored as rendered, and the real DaemonSet controller and
scheduler put its pods exactly where nodeSelector, node affinity and tolerations say; `check --probe`'s pod, with
the same pull Secrets, nodeSelector and tolerations, is admitted in the probe's namespace.

The cluster is scripts/cluster's (kube-apiserver, controller-manager and scheduler from Kubernetes' Go modules, kwok
nodes, all on 127.0.0.1); kwok nodes take whatever labels and taints the test gives them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.live.access import CHECK_NAME
from proxy_component.probe import probe_pod
from proxy_component.settings import PROBE_NAMESPACE, parse_settings
from tests.kwok_cluster import kwok_cluster, proxy_pods_on

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster
POOL = "node.kubernetes.io/pool"
ZONE = "topology.kubernetes.io/zone"
SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.0.0.0/24"], "nodeCidrs": ["192.0.2.0/24"]},
    "deployment": {
        "imagePullSecrets": ["corp-registry"],
        "nodeSelector": {POOL: "egress"},
        "tolerateAllTaints": False,
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "egress", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In",
                                                                 "values": ["zone-a", "zone-b"]}]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [{"key": "cores", "operator": "Gt",
                                                                         "values": ["4"]}]}}
                ],
            }
        },
        "priorityClassName": "egress-critical",
    },
}  # fmt: skip
SCHEDULING_KEYS = ("imagePullSecrets", "nodeSelector", "tolerations", "affinity", "priorityClassName")
# Each node: its labels and taints, and whether the proxy must run there.
NODES: dict[str, tuple[dict[str, str], list[str], bool]] = {
    "pool-a": ({POOL: "egress", ZONE: "zone-a"}, [], True),
    "pool-b-dedicated": ({POOL: "egress", ZONE: "zone-b"}, ["dedicated=egress:NoSchedule"], True),
    "other-pool": ({POOL: "batch", ZONE: "zone-a"}, [], False),  # nodeSelector
    "pool-c": ({POOL: "egress", ZONE: "zone-c"}, [], False),  # node affinity
    "pool-a-gpu": ({POOL: "egress", ZONE: "zone-a"}, ["gpu=true:NoSchedule"], False),  # a taint not tolerated
}
PRIORITY = 1_000_000


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))


def _render(tmp_path: Path, *args: str) -> str:
    settings = tmp_path / "proxy.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    return subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(settings), *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    ).stdout  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("scheduling"), "pc-sched", 0) as kubeconfig:
        yield Cluster(kubeconfig)


def _nodes() -> list[dict[str, Any]]:
    """kwok nodes (the annotation makes kwok keep them Ready) with the labels and taints of NODES."""
    out = []
    for name, (labels, taints, _) in NODES.items():
        spec_taints = []
        for taint in taints:
            key_value, _, effect = taint.partition(":")
            key, _, value = key_value.partition("=")
            spec_taints.append({"key": key, "value": value, "effect": effect})
        out.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/os": "linux", "type": "kwok", **labels}},
            "spec": {"taints": spec_taints},
        })  # fmt: skip
    return out


def _placed(cluster: Cluster, *nodes: str) -> dict[str, dict[str, Any]]:
    """The proxy pods by node, once the DaemonSet controller has put them on exactly `nodes` and kept them there."""
    return proxy_pods_on(cluster.kubeconfig, set(nodes))


def test_the_api_server_stores_the_scheduling_and_the_pods_land_where_it_says(cluster: Cluster, tmp_path: Path) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(_nodes()))
    cluster.kubectl("create", "priorityclass", "egress-critical", f"--value={PRIORITY}")
    cluster.kubectl("-n", "kube-system", "create", "secret", "docker-registry", "corp-registry",
                    "--docker-server=registry.corp.example", "--docker-username=pull", "--docker-password=x")  # fmt: skip
    rendered = _render(tmp_path)
    cluster.kubectl("apply", "--server-side", "--field-manager=proxy-component", "-f", "-", stdin=rendered)

    (ds,) = [o for o in yaml.safe_load_all(rendered) if o["kind"] == "DaemonSet"]
    wanted = ds["spec"]["template"]["spec"]
    stored = cluster.get("-n", "kube-system", "daemonset", "http-proxy")["spec"]["template"]["spec"]
    assert {k: stored.get(k) for k in SCHEDULING_KEYS} == {k: wanted[k] for k in SCHEDULING_KEYS}
    assert stored["imagePullSecrets"] == [{"name": "corp-registry"}]
    assert stored["nodeSelector"] == {"kubernetes.io/os": "linux", POOL: "egress"}
    assert stored["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "egress", "effect": "NoSchedule"}
    ]
    terms = stored["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][-1] == {"key": ZONE, "operator": "In", "values": ["zone-a", "zone-b"]}

    placed = _placed(cluster, *(n for n, (_, _, runs) in NODES.items() if runs))
    assert sorted(placed) == ["pool-a", "pool-b-dedicated"]
    for pod in placed.values():  # both containers of each pod run with what the template says
        assert pod["spec"]["priorityClassName"] == "egress-critical"
        assert pod["spec"]["priority"] == PRIORITY, "the Priority admission plugin resolved the class"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "corp-registry"}]
        assert [c["name"] for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]] == [
            "firewall",
            "tinyproxy",
        ]

    # check judges the nodes the settings select, as the controller does: the three left out are not "missing".
    assert _check(cluster, tmp_path) == []

    # A node that leaves the pool loses its proxy pod; one that joins it gets one.
    cluster.kubectl("label", "node", "pool-a", f"{POOL}=batch", "--overwrite")
    cluster.kubectl("label", "node", "pool-c", f"{ZONE}=zone-b", "--overwrite")
    assert sorted(_placed(cluster, "pool-b-dedicated", "pool-c")) == ["pool-b-dedicated", "pool-c"]
    assert _check(cluster, tmp_path) == []
    # A taint the settings do not tolerate on a node that runs the proxy: evicted by NoExecute, and not "missing".
    cluster.kubectl("taint", "node", "pool-c", "maintenance=true:NoExecute")
    assert sorted(_placed(cluster, "pool-b-dedicated")) == ["pool-b-dedicated"]
    assert _check(cluster, tmp_path) == []


def _check(cluster: Cluster, tmp_path: Path) -> list[dict[str, Any]]:
    """`proxy-component check --json` as the cluster's admin: its findings."""
    settings = tmp_path / "proxy.yaml"
    settings.write_text(yaml.safe_dump(SETTINGS))
    result = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "check", str(settings), "--kubeconfig", str(cluster.kubeconfig),
         "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    findings: list[dict[str, Any]] = json.loads(result.stdout)
    return findings


def test_the_probe_pod_takes_the_same_scheduling_and_is_admitted_in_its_namespace(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The probe's pod, as `check --probe` builds it, created under the rendered probe role (impersonated), on the
    tainted node: Pod Security `restricted` admits it with the pull Secret, nodeSelector and tolerations."""
    cluster.kubectl("apply", "-f", "-", stdin=_render(tmp_path, "--format", "check-rbac", "--probe"))
    namespace = cluster.get("namespace", PROBE_NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    cluster.kubectl("-n", PROBE_NAMESPACE, "create", "secret", "docker-registry", "corp-registry",
                    "--docker-server=registry.corp.example", "--docker-username=pull", "--docker-password=x")  # fmt: skip
    settings = parse_settings(SETTINGS)
    pod = probe_pod(settings, "pool-b-dedicated", "sched", 0, "echo probe", 60)
    account = f"system:serviceaccount:kube-system:{CHECK_NAME}"
    deadline = time.monotonic() + 60
    while (created := cluster.run("create", "-f", "-", "--as", account, stdin=json.dumps(pod))).returncode != 0:
        assert "forbidden" in created.stderr, created.stderr  # until the authorizer's cache has the new role
        assert time.monotonic() < deadline, created.stderr
        time.sleep(0.5)
    assert "violate" not in created.stderr, "no Pod Security warning either"
    stored = cluster.get("-n", PROBE_NAMESPACE, "pod", pod["metadata"]["name"])["spec"]
    assert stored["imagePullSecrets"] == [{"name": "corp-registry"}]
    assert stored["nodeSelector"] == {"kubernetes.io/os": "linux", POOL: "egress"}
    assert stored["tolerations"][0] == {
        "key": "dedicated",
        "operator": "Equal",
        "value": "egress",
        "effect": "NoSchedule",
    }
    assert stored["nodeName"] == "pool-b-dedicated"
    cluster.kubectl("-n", PROBE_NAMESPACE, "delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force")


def test_system_node_critical_outside_kube_system_is_admitted_by_a_cluster_that_does_not_limit_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Kubernetes itself admits the default class in any namespace (GKE limits it with a ResourceQuota: docs/guides/images.md)."""
    settings = dict(SETTINGS, deployment={"namespace": "egress"})
    path = tmp_path / "egress.yaml"
    path.write_text(yaml.safe_dump(settings))
    rendered = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    (ds,) = [o for o in yaml.safe_load_all(rendered) if o["kind"] == "DaemonSet"]
    template = ds["spec"]["template"]
    assert template["spec"]["priorityClassName"] == "system-node-critical"
    cluster.kubectl("create", "namespace", "egress")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "proxy", "namespace": "egress"},
           "spec": template["spec"]}  # fmt: skip
    admitted = json.loads(cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod)))
    assert admitted["spec"]["priority"] == 2_000_001_000


# What GKE's API server is configured with (and any cluster may be): pods of a critical class only where a
# ResourceQuota covers that class.
LIMITED_CRITICAL = """\
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - {scopeName: PriorityClass, operator: In, values: [system-node-critical, system-cluster-critical]}
"""
# The ResourceQuota of docs/guides/images.md, for the proxy's namespace.
QUOTA = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: proxy-critical-pods, namespace: egress}
spec:
  hard: {pods: "1000"}   # at least one per node
  scopeSelector:
    matchExpressions: [{scopeName: PriorityClass, operator: In, values: [system-node-critical]}]
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster whose admission configuration limits critical classes, as GKE's does; three kwok nodes."""
    workdir = tmp_path_factory.mktemp("limited")
    admission = workdir / "admission.yaml"
    admission.write_text(LIMITED_CRITICAL)
    extra = workdir / "kwokctl-extra.yaml"
    extra.write_text(
        "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokctlConfiguration\ncomponentsPatches:\n"
        f"- name: kube-apiserver\n  extraArgs:\n  - {{key: admission-control-config-file, value: {admission}}}\n"
    )
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"pc-limit-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok"),
           "PROXY_COMPONENT_CLUSTER_CONFIG": str(extra)}  # fmt: skip
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "3"], capture_output=True, text=True, env=env,
                        timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        yield Cluster(Path(up.stdout.strip().splitlines()[-1]))
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr


def test_where_critical_classes_are_limited_the_readmes_quota_lets_the_proxy_run_outside_kube_system(
    limited: Cluster, tmp_path: Path
) -> None:
    """As docs/guides/images.md says for GKE: outside kube-system, system-node-critical pods are refused until a ResourceQuota
    covers the class; `check` reports the missing pods meanwhile; the guide's ResourceQuota makes them run."""
    path = tmp_path / "egress.yaml"
    path.write_text(yaml.safe_dump(dict(SETTINGS, deployment={"namespace": "egress"})))
    rendered = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    ).stdout  # fmt: skip
    limited.kubectl("create", "namespace", "egress")
    limited.kubectl("apply", "--server-side", "-f", "-", stdin=rendered)
    deadline = time.monotonic() + 60
    while True:
        events = limited.get("-n", "egress", "events", "--field-selector", "reason=FailedCreate")["items"]
        if any("insufficient quota to match these scopes" in e.get("message", "") for e in events):
            break
        assert time.monotonic() < deadline, [e.get("message") for e in events]
        time.sleep(0.5)
    assert limited.get("-n", "egress", "pods")["items"] == []
    check = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "check", str(path), "--kubeconfig", str(limited.kubeconfig),
         "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert check.returncode == 1, check.stderr
    proxy = [f for f in json.loads(check.stdout) if f["object"] == "DaemonSet egress/http-proxy"]
    assert [(f["kind"], f["message"].split(":")[0]) for f in proxy] == [
        ("proxy-missing-on-nodes", "no proxy pod on 3 node(s)")
    ]

    limited.kubectl("apply", "-f", "-", stdin=QUOTA)
    deadline = time.monotonic() + 90
    while len(limited.get("-n", "egress", "pods", "-l", "app=http-proxy")["items"]) < 3:
        assert time.monotonic() < deadline, "the DaemonSet made no pods once the quota covered the class"
        time.sleep(0.5)
