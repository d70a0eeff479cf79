"""`proxy-component check` against a real cluster (pytest -m cluster): kube-apiserver, controller-manager,
scheduler and etcd built from Kubernetes' own Go modules, with three kwok fake nodes, all on 127.0.0.1
(scripts/cluster). The rendered objects are applied with kubectl; each drift is then made for real.

`check` runs as the ServiceAccount `proxy-component-check`, bound to exactly the roles that
`render --format check-rbac` writes for the settings of the test (a token from `kubectl create token`).
The API server advertises 203.0.113.10 (TEST-NET-3, which nothing here connects to), as a cloud's public
control plane does; kwok runs pods only on nodes annotated `kwok.x-k8s.io/node: fake`, so a node without
the annotation is one where DaemonSet pods never run, as on virtual-kubelet and Fargate nodes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from proxy_component.live.access import CHECK_NAME, accesses
from proxy_component.live.check import check_cluster
from proxy_component.live.cluster import REPLICA_SET_OWNERS, SERVICES, Access, connect
from proxy_component.probe import probe_pod
from proxy_component.render import plain_values
from proxy_component.render.env import pod_env
from proxy_component.settings import DEFAULT_IMAGE, PROBE_NAMESPACE, Settings, load_settings, parse_settings
from tests.integration import test_probe_live as probe_live
from tests.pki import make_ca

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster
SETTINGS = textwrap.dedent(
    """\
    cluster:
      podCidrs: ["10.0.0.0/16", "fd00::/48"]
      serviceCidrs: ["10.0.0.0/24"]
      nodeCidrs: ["192.0.2.0/24", "2001:db8::/64"]
      ipFamily: dual
    namespaces: [default, team-a]
    """
)
ADVERTISED = "203.0.113.10"
PASSWORD = "s3cr3t-P4ss"
CREDENTIALS = SETTINGS + f"proxy: {{httpProxy: 'http://checker:{PASSWORD}@proxy.corp.example:3128'}}\n"
CREDENTIALS += "deployment: {enabled: false}\n"
KYVERNO = SETTINGS + "injection: {kyverno: true}\n"
KWOKCTL = f"""\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
- name: kube-apiserver
  extraArgs:
  - {{key: advertise-address, value: {ADVERTISED}}}
- name: kwok-controller
  extraArgs:
  - {{key: manage-all-nodes, value: "false"}}
  - {{key: manage-nodes-with-annotation-selector, value: kwok.x-k8s.io/node=fake}}
"""
# What kwok answers to `kubectl logs` in kube-system and the probe's namespace (CRI log format), for the probe's
# end-to-end test: the probe pods' container and the proxy pods' (the API server reaches kwok at the nodes' Hostname,
# localhost).
KWOK_LOGS = """\
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: kube-system-logs
spec:
  selector:
    matchNamespaces: [kube-system, proxy-component-probe]
  logs:
  - containers: [probe]
    logsFile: {probe}
  - containers: [tinyproxy]
    logsFile: {tinyproxy}
"""
RBAC_LABELS = "app.kubernetes.io/part-of=proxy-component,app.kubernetes.io/component=check"
SERVICE_ACCOUNT = f"system:serviceaccount:kube-system:{CHECK_NAME}"


class Live:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig  # the cluster's admin
        self.workdir = workdir
        self.settings = self.write("proxy.yaml", SETTINGS)
        self.role_kubeconfig = workdir / "role.kubeconfig"  # the ServiceAccount bound to the rendered roles

    def write(self, name: str, text: str) -> Path:
        path = self.workdir / name
        path.write_text(text)
        return path

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def can_i(self, *args: str) -> bool:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "auth", "can-i", *args, "--as", SERVICE_ACCOUNT],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return result.stdout.strip() == "yes"

    def allowed(self, verb: str, group: str, resource: str, name: str, namespace: str | None) -> bool:
        """A SubjectAccessReview for the check account, with the API group given: `kubectl auth can-i` answers no
        for a resource the API server does not serve (Kyverno's ClusterPolicy on a cluster without its CRD), which
        the role still grants by name."""
        resource, _, subresource = resource.partition("/")
        attributes = {
            "verb": verb,
            "group": group,
            "resource": resource,
            "name": name,
            "namespace": namespace or "",
            "subresource": subresource,
        }
        groups = ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": SERVICE_ACCOUNT, "groups": groups, "resourceAttributes": attributes},
        }
        answer = json.loads(self.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(review)))
        return bool(answer.get("status", {}).get("allowed"))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "proxy_component.cli", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
        )

    def render(self, settings: Path, *args: str) -> str:
        result = self.cli("render", str(settings), *args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def check(
        self, *extra: str, kubeconfig: Path | None = None, settings: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.cli(
            "check", str(settings or self.settings), "--kubeconfig", str(kubeconfig or self.role_kubeconfig), *extra
        )

    def findings(self, settings: Path | None = None) -> list[dict[str, Any]]:
        result = self.check("--json", settings=settings)
        assert result.returncode in (0, 1), result.stderr
        findings: list[dict[str, Any]] = json.loads(result.stdout)
        assert (result.returncode == 1) == bool(findings)
        return findings

    def apply_rendered(self) -> None:
        self.kubectl("apply", "-f", "-", stdin=self.render(self.settings))
        self.rollout()

    def rollout(self) -> None:
        self.kubectl("-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=60s")

    def delete_nodes(self, *names: str) -> None:
        """Delete nodes and, at once, the proxy pods left on them or waiting for them (pod GC takes about a minute)."""
        self.kubectl("delete", "node", *names, "--wait=true")
        pods = json.loads(self.kubectl("-n", "kube-system", "get", "pods", "-l", "app=http-proxy", "-o", "json"))
        gone = [p["metadata"]["name"] for p in pods["items"] if p["spec"].get("nodeName") in (None, *names)]
        if gone:
            self.kubectl("-n", "kube-system", "delete", "pod", *gone, "--force", "--grace-period=0",
                         "--ignore-not-found")  # fmt: skip
        self.rollout()

    def grant(
        self, settings: Path, edit: Callable[[list[dict[str, Any]]], None] | None = None, probe: bool = False
    ) -> None:
        """Bind the ServiceAccount to exactly the roles rendered for `settings` (edited by `edit`), nothing else."""
        extra = ("--probe",) if probe else ()
        objects = list(yaml.safe_load_all(self.render(settings, "--format", "check-rbac", *extra)))
        if edit is not None:
            edit(objects)
        self.kubectl("delete", "clusterrole,clusterrolebinding,role,rolebinding", "-A", "-l", RBAC_LABELS)
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        for obj in objects:  # the authorizer's cache follows within moments: wait until each role is in force
            for rule in obj.get("rules", []):
                name = rule.get("resourceNames", [""])[0]
                namespace = obj["metadata"].get("namespace")
                args = (rule["verbs"][0], rule["apiGroups"][0], rule["resources"][0], name, namespace)
                _wait(functools.partial(self.allowed, *args), f"{SERVICE_ACCOUNT} may {args}")

    def token_kubeconfig(self, path: Path, token: str) -> Path:
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"] = [{"name": "token", "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = "token"
        path.write_text(yaml.safe_dump(config))
        return path

    @property
    def server(self) -> str:
        server: str = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        return server


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.5)


@contextlib.contextmanager
def granted(
    live: Live, settings: Path, edit: Callable[[list[dict[str, Any]]], None] | None = None, probe: bool = False
) -> Iterator[None]:
    """Run under the roles of other settings, then go back to the module's."""
    live.grant(settings, edit, probe)
    try:
        yield
    finally:
        live.grant(live.settings)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("cluster")
    extra = workdir / "kwokctl-extra.yaml"
    extra.write_text(KWOKCTL + KWOK_LOGS.format(probe=workdir / "probe.log", tinyproxy=workdir / "tinyproxy.log"))
    env = {
        **os.environ,
        "PROXY_COMPONENT_CLUSTER": f"pc-check-{os.getpid()}",
        "KWOK_WORKDIR": str(workdir / "kwok"),
        "PROXY_COMPONENT_CLUSTER_CONFIG": str(extra),
    }
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "3"], capture_output=True, text=True, env=env,
                        timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        live = Live(Path(up.stdout.strip().splitlines()[-1]), workdir)
        live.kubectl("create", "namespace", "team-a")
        live.apply_rendered()
        live.grant(live.settings)
        token = live.kubectl("-n", "kube-system", "create", "token", CHECK_NAME, "--duration=2h").strip()
        live.token_kubeconfig(live.role_kubeconfig, token)
        yield live
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr


def test_the_daemonset_is_ready_on_every_node(live: Live) -> None:
    ds = json.loads(live.kubectl("-n", "kube-system", "get", "daemonset", "http-proxy", "-o", "json"))
    assert ds["status"]["numberReady"] == ds["status"]["desiredNumberScheduled"] == 3
    assert ds["spec"]["template"]["spec"]["initContainers"][0]["name"] == "firewall"


def _after_judged(stderr: str, server: str, context: str = "") -> str:
    """What check printed after its first line, which names the cluster it judges (server, context) (issue 44)."""
    first, _, rest = stderr.partition("\n")
    assert first.startswith(f"proxy-component check: judging the cluster at {server} (context {context}"), stderr
    return rest


def test_check_is_clean_right_after_apply_under_exactly_the_rendered_role(live: Live) -> None:
    assert not live.can_i("list", "secrets", "--all-namespaces")
    assert not live.can_i("list", "configmaps", "-n", "default")
    assert not live.can_i("get", "configmaps/other", "-n", "default")
    assert live.can_i("get", "configmaps/proxy-config", "-n", "default")
    result = live.check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    # 19 before issue 35, then the proxy's config object and the log of each of the 3 proxy pods (which config runs).
    assert (
        _after_judged(result.stderr, live.server, "kwok-")
        == f"proxy-component check: {live.server}: clean (23 API requests)\n"
    )
    assert live.findings() == []


def test_check_makes_only_the_requests_the_role_grants(live: Live) -> None:
    settings = load_settings(str(live.settings))
    cluster = connect(str(live.role_kubeconfig))
    assert check_cluster(settings, cluster) == []
    # Every grant but the `kubernetes` Service, which is read only where ServiceCIDRs cannot be (next test), and the
    # ReplicaSets, read only in a namespace where a pod is stale (live/stale.py; the Jobs are listed as workloads).
    unread = {Access(SERVICES, "default", "kubernetes")}
    unread |= {a for a in accesses(settings) if a.api == REPLICA_SET_OWNERS}
    assert unread - {Access(SERVICES, "default", "kubernetes")}, "the role grants them"
    assert cluster.accessed == set(accesses(settings)) - unread


def test_a_403_on_service_cidrs_falls_back_to_the_kubernetes_service(live: Live) -> None:
    def without_service_cidrs(objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            if "rules" in obj:
                obj["rules"] = [r for r in obj["rules"] if r["resources"] != ["servicecidrs"]]

    with granted(live, live.settings, without_service_cidrs):
        _wait(lambda: not live.can_i("list", "servicecidrs.networking.k8s.io"), "servicecidrs forbidden")
        settings = load_settings(str(live.settings))
        cluster = connect(str(live.role_kubeconfig))
        assert check_cluster(settings, cluster) == []
        assert Access(SERVICES, "default", "kubernetes") in cluster.accessed
        data = yaml.safe_load(SETTINGS)
        data["cluster"]["serviceCidrs"] = ["10.0.1.0/24"]
        data["cluster"]["podCidrs"] = ["10.0.1.0/24", "fd00::/48"]  # so that nothing covers 10.0.0.1
        narrow = parse_settings(data)
        found = [f for f in check_cluster(narrow, connect(str(live.role_kubeconfig)))
                 if f.kind == "services-not-in-no-proxy"]  # fmt: skip
        assert [(f.object, f.message) for f in found] == [
            (
                "Service default/kubernetes",
                "service range 10.0.0.1 is not covered by NO_PROXY: requests to Service IPs (the API server's among "
                "them) go through the proxy (add it to cluster.serviceCidrs)",
            )
        ]
        result = live.check()
        assert result.returncode == 0, result.stdout + result.stderr


def test_with_credentials_it_reads_proxy_config_secrets_by_name_and_never_shows_them(live: Live) -> None:
    creds = live.write("credentials.yaml", CREDENTIALS)
    secrets = [o for o in yaml.safe_load_all(live.render(creds)) if o["kind"] == "Secret"]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in secrets] == [
        ("default", "proxy-config"),
        ("team-a", "proxy-config"),
    ]
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(secrets))
    live.kubectl("-n", "default", "create", "secret", "generic", "other", "--from-literal=password=x")
    try:
        with granted(live, creds):
            assert not live.can_i("list", "secrets", "--all-namespaces")
            assert not live.can_i("list", "secrets", "-n", "default")
            assert not live.can_i("get", "secrets/other", "-n", "default")
            assert live.can_i("get", "secrets/proxy-config", "-n", "team-a")
            result = live.check(settings=creds)
            assert result.returncode == 0, result.stdout + result.stderr
            edited = f"http://checker:0ld-{PASSWORD}@proxy.corp.example:3128"
            live.kubectl("-n", "team-a", "patch", "secret", "proxy-config", "--type=merge",
                         "-p", json.dumps({"stringData": {"HTTP_PROXY": edited}}))  # fmt: skip
            assert live.findings(creds) == [
                {
                    "kind": "proxy-config-differs",
                    "object": "Secret team-a/proxy-config",
                    "severity": "warning",
                    "message": "differs from the settings in HTTP_PROXY: edited by hand, or the stack is not applied",
                }
            ]
            for args in ((), ("--json",)):
                result = live.check(*args, settings=creds)
                assert result.returncode == 1
                assert PASSWORD not in result.stdout + result.stderr
    finally:
        live.kubectl("-n", "default", "delete", "secret", "proxy-config", "other")
        live.kubectl("-n", "team-a", "delete", "secret", "proxy-config")


def test_an_api_server_endpoint_pods_never_use_is_not_reported(live: Live) -> None:
    slice_ = json.loads(live.kubectl("-n", "default", "get", "endpointslice", "kubernetes", "-o", "json"))
    assert [a for e in slice_["endpoints"] for a in e["addresses"]] == [ADVERTISED]
    no_proxy = live.cli("no-proxy", str(live.settings)).stdout
    assert "203.0.113" not in no_proxy
    assert live.findings() == []


def _node(name: str, addresses: dict[str, str], kwok: bool = True, **extra: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/os": "linux", **extra.pop("labels", {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels,
                     "annotations": {"kwok.x-k8s.io/node": "fake"} if kwok else {}},
        "spec": extra.pop("spec", {}),
        "status": {"addresses": [{"type": t, "address": a} for a, t in addresses.items()]},
    }  # fmt: skip


def test_a_nodes_public_external_ip_is_not_reported(live: Live) -> None:
    node = _node("node-public", {"192.0.2.60": "InternalIP", "203.0.113.60": "ExternalIP", "node-public": "Hostname"})
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(node))
    try:
        live.rollout()
        shown = json.loads(live.kubectl("get", "node", "node-public", "-o", "json"))["status"]["addresses"]
        assert {"type": "ExternalIP", "address": "203.0.113.60"} in shown
        assert live.findings() == []
    finally:
        live.delete_nodes("node-public")


def test_nodes_that_never_run_daemonsets_are_not_missing(live: Live) -> None:
    nodes = [
        _node("virtual-node", {"192.0.2.70": "InternalIP"}, kwok=False, labels={"type": "virtual-kubelet"},
              spec={"taints": [{"key": "virtual-kubelet.io/provider", "value": "mock", "effect": "NoSchedule"}]}),
        _node("fargate-ip-192-0-2-71.ec2.internal", {"192.0.2.71": "InternalIP"}, kwok=False,
              labels={"eks.amazonaws.com/compute-type": "fargate"},
              spec={"taints": [{"key": "eks.amazonaws.com/compute-type", "value": "fargate",
                                "effect": "NoSchedule"}]}),
        _node("node-without-kubelet", {"192.0.2.72": "InternalIP"}, kwok=False),
    ]  # fmt: skip
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(nodes))
    try:

        def scheduled() -> bool:
            ds = json.loads(live.kubectl("-n", "kube-system", "get", "daemonset", "http-proxy", "-o", "json"))
            return bool(ds["status"].get("currentNumberScheduled") == ds["status"].get("desiredNumberScheduled") == 4)

        # The DaemonSet's node affinity leaves out the virtual-kubelet and Fargate nodes: 3 kwok nodes and the one
        # without a kubelet, whose pod never runs.
        _wait(scheduled, "a proxy pod for each of the 4 nodes that can run DaemonSets")
        pods = json.loads(live.kubectl("-n", "kube-system", "get", "pods", "-l", "app=http-proxy", "-o", "json"))
        targets = {
            term["matchFields"][0]["values"][0]: p["status"]["phase"]
            for p in pods["items"]
            for term in p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ]
            if term.get("matchFields")
        }
        assert targets.keys() == set(live.kubectl("get", "nodes", "-o", "name").replace("node/", "").split()) - {
            "virtual-node",
            "fargate-ip-192-0-2-71.ec2.internal",
        }
        assert targets["node-without-kubelet"] == "Pending", "the pod of the node without kwok never runs"
        assert live.findings() == [
            {
                "kind": "proxy-missing-on-nodes",
                "object": "DaemonSet kube-system/http-proxy",
                "severity": "error",
                "message": "no proxy pod on 1 node(s): node-without-kubelet (a taint, a full node or a nodeSelector "
                "keeps it off; with internalTrafficPolicy Local their pods have no proxy)",
            }
        ]
    finally:
        live.delete_nodes(*(n["metadata"]["name"] for n in nodes))


def test_a_node_with_pod_ranges_outside_the_settings(live: Live) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-extra", "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"kubernetes.io/os": "linux", "type": "kwok"}},
        "spec": {"podCIDR": "172.16.9.0/24", "podCIDRs": ["172.16.9.0/24"]},
    }  # fmt: skip
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(node))
    try:
        found = {(f["kind"], f["object"]) for f in live.findings()}
        assert ("pods-outside-allow", "Node node-extra") in found
        assert ("pods-not-in-no-proxy", "Node node-extra") in found
    finally:
        live.delete_nodes("node-extra")


def test_a_node_range_far_wider_than_the_nodes(live: Live) -> None:
    """The kwok nodes' InternalIPs are in 192.0.2.0/24: a node range of 192.0.0.0/12 lets 4096 times as many hosts
    use the proxy. The settings' /24 (the other tests') is not reported."""
    wide = live.write("wide-node-range.yaml", SETTINGS.replace('"192.0.2.0/24"', '"192.0.0.0/12"'))
    found = [f for f in live.findings(wide) if f["kind"] == "node-range-wide"]
    assert [(f["object"], f["severity"]) for f in found] == [("cluster.nodeCidrs[0] 192.0.0.0/12", "warning")]
    assert (
        "addresses of 192.0.0.0/12, but the cluster's 3 node address(es) in it lie in 192.0.2.0/24"
        in found[0]["message"]
    )
    assert not [f for f in live.findings() if f["kind"] == "node-range-wide"]


def test_a_deleted_proxy_config(live: Live) -> None:
    live.kubectl("-n", "team-a", "delete", "configmap", "proxy-config")
    try:
        assert live.findings() == [
            {
                "kind": "proxy-config-missing",
                "object": "ConfigMap team-a/proxy-config",
                "severity": "error",
                "message": "missing: workloads that read it get no proxy env",
            }
        ]
    finally:
        live.apply_rendered()
    assert live.findings() == []


def test_an_edited_proxy_config(live: Live) -> None:
    live.kubectl("-n", "default", "patch", "configmap", "proxy-config", "--type=merge",
                 "-p", '{"data": {"NO_PROXY": "localhost"}}')  # fmt: skip
    try:
        (finding,) = live.findings()
        assert finding["kind"] == "proxy-config-differs"
        assert finding["object"] == "ConfigMap default/proxy-config"
        assert "NO_PROXY" in finding["message"]
    finally:
        live.apply_rendered()


def _trust_settings(live: Live, name: str, pem: str, bundles: bool = False) -> Path:
    upstream = {"url": "http://proxy.corp.example:3128", "trustedCa": pem}
    more: dict[str, Any] = {"proxy": {"upstream": upstream}}
    if bundles:
        more["injection"] = {"clusterTrustBundle": True}
    return live.write(name, SETTINGS + yaml.safe_dump(more))


def test_a_missing_or_stale_trust_bundle(live: Live) -> None:
    """proxy-trust (proxy.upstream.trustedCa) in each listed namespace, read by name under the rendered role."""
    trust = _trust_settings(live, "trust.yaml", make_ca("Corp CA").cert_pem)
    rotated = _trust_settings(live, "rotated.yaml", make_ca("Corp CA 2027").cert_pem)

    def apply(settings: Path) -> None:  # server-side: the bundle is larger than client-side apply's annotation
        live.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=live.render(settings))

    try:
        with granted(live, trust):
            apply(trust)
            live.rollout()
            assert live.findings(trust) == []
            live.kubectl("-n", "team-a", "delete", "configmap", "proxy-trust")
            assert live.findings(trust) == [
                {
                    "kind": "proxy-trust-missing",
                    "object": "ConfigMap team-a/proxy-trust",
                    "severity": "error",
                    "message": "missing: Pods given the trust group mount it and do not start without it",
                }
            ]
            apply(trust)
            stale = live.findings(rotated)  # the settings name a new CA; the cluster still has the old one
            assert [(f["kind"], f["object"]) for f in stale] == [
                ("proxy-trust-differs", "ConfigMap default/proxy-trust"),
                ("proxy-trust-differs", "ConfigMap team-a/proxy-trust"),
            ]
            assert "ca-bundle.crt, corporate-ca.crt, truststore.p12" in stale[0]["message"]
    finally:
        live.kubectl("delete", "configmap", "proxy-trust", "-n", "default", "--ignore-not-found")
        live.kubectl("delete", "configmap", "proxy-trust", "-n", "team-a", "--ignore-not-found")
        live.apply_rendered()
    assert live.findings() == []


def test_a_missing_or_stale_cluster_trust_bundle(live: Live) -> None:
    """injection.clusterTrustBundle (Kubernetes 1.37): the project's two ClusterTrustBundles, read by name under the
    rendered ClusterRole: one deleted is an error, a CA the settings rotated and the cluster has not is a warning for
    each bundle, beside each namespace's proxy-trust."""
    trust = _trust_settings(live, "ctb.yaml", make_ca("Corp CA").cert_pem, bundles=True)
    rotated = _trust_settings(live, "ctb-rotated.yaml", make_ca("Corp CA 2027").cert_pem, bundles=True)

    def apply(settings: Path) -> None:
        live.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=live.render(settings))

    merged = "ClusterTrustBundle proxy-component.io:trust:merged"
    try:
        with granted(live, trust):
            apply(trust)
            live.rollout()
            assert live.findings(trust) == []
            live.kubectl("delete", "clustertrustbundle", "proxy-component.io:trust:merged")
            (missing,) = live.findings(trust)
            assert (missing["kind"], missing["object"], missing["severity"]) == (
                "cluster-trust-bundle-missing", merged, "error",
            )  # fmt: skip
            apply(trust)
            stale = live.findings(rotated)
            assert [(f["kind"], f["object"]) for f in stale] == [
                ("proxy-trust-differs", "ConfigMap default/proxy-trust"),
                ("proxy-trust-differs", "ConfigMap team-a/proxy-trust"),
                ("cluster-trust-bundle-differs", "ClusterTrustBundle proxy-component.io:trust:corporate"),
                ("cluster-trust-bundle-differs", merged),
            ]
    finally:
        live.kubectl("delete", "clustertrustbundles", "-l", "app.kubernetes.io/part-of=proxy-component")
        live.kubectl("delete", "configmap", "proxy-trust", "-n", "default", "--ignore-not-found")
        live.kubectl("delete", "configmap", "proxy-trust", "-n", "team-a", "--ignore-not-found")
        live.apply_rendered()
    assert live.findings() == []


def _deployment(
    name: str, annotations: dict[str, str] | None = None, env_from: bool = False, env: dict[str, str] | None = None
) -> str:
    container: dict[str, Any] = {"name": "app", "image": "example/app:1"}
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
            },
        }
    )


def test_a_workload_without_the_env(live: Live) -> None:
    live.kubectl("apply", "-f", "-", stdin=_deployment("no-env"))
    live.kubectl("apply", "-f", "-", stdin=_deployment("opted-out", {"proxy-component.io/inject": "false"}))
    live.kubectl("apply", "-f", "-", stdin=_deployment("with-env", env_from=True))
    try:
        findings = live.findings()
        assert [(f["kind"], f["object"]) for f in findings] == [("workload-env", "Deployment default/no-env")]
        assert "lacks the proxy env" in findings[0]["message"]
    finally:
        for name in ("no-env", "opted-out", "with-env"):
            live.kubectl("-n", "default", "delete", "deployment", name)
    assert live.findings() == []


def _pod(name: str, env: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "app", "image": "example/app:1", "env": env}]},
    }


def test_with_kyverno_injection_pods_are_checked_not_their_workloads(live: Live) -> None:
    kyverno = live.write("kyverno.yaml", KYVERNO)
    settings: Settings = load_settings(str(kyverno))
    injected = pod_env(settings, plain_values(settings).select(settings.runtimes.for_namespace("default")))
    objects = [
        yaml.safe_load(_deployment("web")),  # Kyverno mutates its Pods, never the Deployment
        _pod("injected", injected),  # as Kyverno admits it
        _pod("missed", []),  # created while Kyverno was down (failurePolicy Ignore)
        _pod("opted-out", [], {"proxy-component.io/inject": "false"}),
    ]
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    try:
        with granted(live, kyverno):
            assert live.can_i("list", "pods", "-n", "team-a")
            assert not live.can_i("list", "deployments.apps", "-n", "team-a")
            # Discovery: this API server has no Kyverno, so the policies the settings chose would inject nothing.
            missing = (
                "injection.kyvernoPolicy: the API server does not serve policies.kyverno.io/v1 {}, so no Pod gets the "
                "proxy env from it (expected Kyverno 1.17 or later, or injection.kyvernoPolicy: ClusterPolicy for an "
                "older Kyverno)"
            )
            assert live.findings(kyverno) == [
                *(
                    {
                        "kind": "injection-api-missing",
                        "object": f"API policies.kyverno.io/v1/{resource}",
                        "severity": "error",
                        "message": missing.format(resource),
                    }
                    for resource in ("mutatingpolicies", "generatingpolicies")
                ),
                {
                    "kind": "workload-env",
                    "object": "Pod default/missed",
                    "severity": "warning",
                    "message": "container app: lacks the proxy env (HTTP_PROXY, http_proxy, HTTPS_PROXY, https_proxy, "
                    "NO_PROXY, no_proxy; expected envFrom proxy-config or the variables)",
                },
            ]
    finally:
        live.kubectl("-n", "default", "delete", "deployment", "web")
        live.kubectl("-n", "default", "delete", "pod", "injected", "missed", "opted-out", "--grace-period=0")


def test_a_workload_with_the_python_safe_no_proxy_is_not_stale(live: Live, tmp_path: Path) -> None:
    """The env of `render --format kustomize-patch --runtimes python`, for a workload without the annotation (as a
    chart's values rendered for python are): NO_PROXY without the IPv6 CIDRs, in both spellings."""
    deployment = yaml.safe_load(_deployment("py", env={"APP_MODE": "worker"}))
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(deployment))
    patch = live.render(live.settings, "--format", "kustomize-patch", "--target-name", "py", "--runtimes", "python")
    (tmp_path / "kustomization.yaml").write_text(patch + "resources: [deployment.yaml]\n")
    built = subprocess.run(["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, check=True)
    env = {
        e["name"]: e["value"] for e in yaml.safe_load(built.stdout)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    full = live.cli("no-proxy", str(live.settings)).stdout.strip()
    assert env["NO_PROXY"] == env["no_proxy"] != full
    assert "fd00::/48" in full
    assert "fd00::/48" not in env["NO_PROXY"]
    live.kubectl("apply", "-f", "-", stdin=built.stdout)
    try:
        assert live.findings() == []
    finally:
        live.kubectl("-n", "default", "delete", "deployment", "py")


def test_a_workload_with_a_stale_no_proxy(live: Live) -> None:
    env = {name: "http://http-proxy.kube-system.svc.cluster.local:8888" for name in ("HTTP_PROXY", "http_proxy")}
    env |= {name: "http://http-proxy.kube-system.svc.cluster.local:8888" for name in ("HTTPS_PROXY", "https_proxy")}
    env |= {"NO_PROXY": "localhost,10.0.0.0/16", "no_proxy": "localhost,10.0.0.0/16"}
    live.kubectl("apply", "-f", "-", stdin=_deployment("stale", env=env))
    try:
        (finding,) = live.findings()
        assert finding["object"] == "Deployment default/stale"
        assert finding["message"] == (
            "container app: NO_PROXY is stale: it lacks 127.0.0.1, ::1, cluster.local, .cluster.local, svc and 4 "
            "more, which the composed NO_PROXY holds (re-apply its env and recreate its pods)"
        )
    finally:
        live.kubectl("-n", "default", "delete", "deployment", "stale")


def test_check_runs_in_a_pod_with_its_service_account(live: Live, tmp_path: Path) -> None:
    """The in-cluster config: KUBERNETES_SERVICE_HOST/PORT and the token and CA at
    /var/run/secrets/kubernetes.io/serviceaccount, mounted in a mount namespace of its own (a tmpfs on /run)."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(live.kubectl("-n", "kube-system", "create", "token", CHECK_NAME).strip())
    cluster = yaml.safe_load(live.kubeconfig.read_text())["clusters"][0]["cluster"]
    (account / "ca.crt").write_bytes(Path(cluster["certificate-authority"]).read_bytes())
    home = tmp_path / "home"
    home.mkdir()
    server = urlsplit(live.server)
    check = [sys.executable, "-m", "proxy_component.cli", "check", str(live.settings)]
    script = (
        "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io && "
        f"cp -r {shlex.quote(str(account))} /run/secrets/kubernetes.io/serviceaccount && exec {shlex.join(check)}"
    )
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),  # no ~/.kube/config, no $KUBECONFIG: as in a Pod
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
    }
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    url = f"https://{server.hostname}:{server.port}"
    assert (
        _after_judged(result.stderr, url, "(in-cluster)") == f"proxy-component check: {url}: clean (23 API requests)\n"
    )
    assert not Path("/var/run/secrets/kubernetes.io").exists(), "the real path is untouched"


def test_a_wrong_token_is_401_exit_2(live: Live, tmp_path: Path) -> None:
    result = live.check(kubeconfig=live.token_kubeconfig(tmp_path / "kubeconfig", "not-a-token"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert _after_judged(result.stderr, live.server) == (
        f"proxy-component check: {live.server}: 401 Unauthorized: the API server does not accept these credentials "
        "(a wrong or expired token, or a client certificate it does not trust): renew them (e.g. kubectl create "
        "token) or choose another --kubeconfig or --context\n"
    )


def test_a_token_without_rights_is_403_exit_2_naming_what(live: Live, tmp_path: Path) -> None:
    live.kubectl("-n", "default", "create", "serviceaccount", "viewer-without-rights")
    token = live.kubectl("-n", "default", "create", "token", "viewer-without-rights").strip()
    result = live.check(kubeconfig=live.token_kubeconfig(tmp_path / "kubeconfig", token))
    assert result.returncode == 2, result.stdout + result.stderr
    assert _after_judged(result.stderr, live.server) == (
        f"proxy-component check: {live.server}: 403 Forbidden: nodes is forbidden: User "
        '"system:serviceaccount:default:viewer-without-rights" cannot list resource "nodes" in API group "" at the '
        "cluster scope: check needs the roles that `proxy-component render CONFIG --format check-rbac` writes (with "
        "--probe for check --probe), bound to this identity\n"
    )


def test_an_unreachable_server_is_exit_2_with_a_message(live: Live, tmp_path: Path) -> None:
    config = yaml.safe_load(live.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    broken = tmp_path / "kubeconfig"
    broken.write_text(yaml.safe_dump(config))
    result = live.check(kubeconfig=broken)
    assert result.returncode == 2
    assert "cannot reach the API server" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_wrong_context_is_exit_2_with_a_message(live: Live) -> None:
    result = live.check("--context", "no-such-context")
    assert result.returncode == 2
    assert "no-such-context" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_proxy_image_with_a_mutable_tag(live: Live) -> None:
    live.kubectl("-n", "kube-system", "set", "image", "daemonset/http-proxy", "tinyproxy=docker.io/vimagick/tinyproxy")
    try:
        live.kubectl("-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=60s")
        assert live.findings() == [
            {
                "kind": "image-mutable-tag",
                "object": "DaemonSet kube-system/http-proxy",
                "severity": "warning",
                "message": "container tinyproxy: image 'docker.io/vimagick/tinyproxy' has no digest and no versioned "
                "tag, so nodes may run different builds of it (set a versioned tag and pin its digest, "
                "e.g. name:1.2.3@sha256:...)",
            }
        ]
    finally:
        live.apply_rendered()
    assert live.findings() == []


def test_a_namespace_that_enforces_a_stricter_pod_security_level(live: Live) -> None:
    live.kubectl("label", "namespace", "kube-system", "pod-security.kubernetes.io/enforce=baseline")
    try:
        (finding,) = live.findings()
        assert (finding["kind"], finding["object"]) == ("pod-security-too-strict", "Namespace kube-system")
        assert "enforces Pod Security level 'baseline'" in finding["message"]
    finally:
        live.kubectl("label", "namespace", "kube-system", "pod-security.kubernetes.io/enforce-")
    assert live.findings() == []


# --- check --probe ------------------------------------------------------------------------------------------------
# kwok's nodes run no containers: a probe pod is Running there but never runs its script. What this shows: one pod
# per node with a proxy pod, pinned and built as documented, created and deleted under exactly the rendered role,
# the deadline turning "no result" into a timeout per node and URL, and no pod left after an interrupt. The
# script's transcripts and their judging are shown with a real tinyproxy (tests/integration/test_probe_live.py).

PROBE_SELECTOR = "app.kubernetes.io/part-of=proxy-component,app.kubernetes.io/component=check-probe"
# The real tinyproxy and busybox of the integration test, as fixtures here too.
start_proxy = probe_live.start_proxy
busybox_path = probe_live.busybox_path


def _probe_pods(live: Live, namespace: str = PROBE_NAMESPACE) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = json.loads(
        live.kubectl("-n", namespace, "get", "pods", "-l", PROBE_SELECTOR, "-o", "json")
    )["items"]
    return pods


def _check_process(live: Live, *args: str) -> subprocess.Popen[str]:
    command = ["check", str(live.settings), "--kubeconfig", str(live.role_kubeconfig), *args]
    return subprocess.Popen([sys.executable, "-m", "proxy_component.cli", *command], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip


def test_probe_pins_a_pod_per_node_under_exactly_the_rendered_role_and_removes_them(live: Live) -> None:
    ds = json.loads(live.kubectl("-n", "kube-system", "get", "daemonset", "http-proxy", "-o", "json"))
    proxies = json.loads(live.kubectl("-n", "kube-system", "get", "pods", "-l", "app=http-proxy", "-o", "json"))
    proxy_nodes = sorted(p["spec"]["nodeName"] for p in proxies["items"])
    assert len(proxy_nodes) == 3
    with granted(live, live.settings, probe=True):
        assert live.can_i("create", "pods", "-n", PROBE_NAMESPACE)
        assert live.can_i("delete", "pods", "-n", PROBE_NAMESPACE)
        assert live.can_i("get", "pods", "--subresource=log", "-n", PROBE_NAMESPACE)
        assert live.can_i("get", "pods", "--subresource=log", "-n", "kube-system")
        assert not live.can_i("create", "pods", "-n", "kube-system")
        assert not live.can_i("delete", "pods", "-n", "kube-system")
        assert not live.can_i("create", "pods", "-n", "default")
        for namespace in ("kube-system", PROBE_NAMESPACE):
            assert not live.can_i("create", "pods", "--subresource=exec", "-n", namespace)
            assert not live.can_i("create", "pods", "--subresource=portforward", "-n", namespace)
            assert not live.can_i("get", "pods", "-n", namespace)
        urls = ["https://registry.example/v2/", "http://mirror.example/"]
        proc = _check_process(live, "--json", "--probe", *urls, "--probe-timeout", "2", "--probe-deadline", "15")
        seen: dict[str, dict[str, Any]] = {}
        try:
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                for pod in _probe_pods(live):
                    seen[pod["metadata"]["name"]] = pod
                time.sleep(0.3)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1, stdout + stderr
        assert _probe_pods(live) == [], "every probe pod is deleted"
        assert _probe_pods(live, "kube-system") == [], "none in the proxy's namespace"
    assert sorted(p["spec"]["nodeName"] for p in seen.values()) == proxy_nodes
    for pod in seen.values():
        spec = pod["spec"]
        (container,) = spec["containers"]
        assert container["image"] == ds["spec"]["template"]["spec"]["containers"][0]["image"]
        assert container["command"][:2] == ["/bin/sh", "-c"]
        assert spec["activeDeadlineSeconds"] == 15
        assert spec["tolerations"] == [{"operator": "Exists"}]
        assert spec["nodeSelector"] == ds["spec"]["template"]["spec"]["nodeSelector"]
        assert spec["restartPolicy"] == "Never"
        assert spec["automountServiceAccountToken"] is False
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        }
        assert pod["metadata"]["namespace"] == PROBE_NAMESPACE
    rows = [r for r in json.loads(stdout) if r["kind"] == "probe"]
    assert [(r["node"], r["url"], r["outcome"]) for r in rows] == [
        (node, url, "timeout") for node in proxy_nodes for url in urls
    ]
    assert all(r["severity"] == "error" and "gave no complete result within 15 s" in r["detail"] for r in rows)
    # kwok runs the pods without running them: Running, no log. The detail says where to look next.
    assert all("(phase Running); a Running pod had not finished its URLs (raise --probe-deadline); its events "
               f"outlive it: kubectl -n {PROBE_NAMESPACE} get events --field-selector involvedObject.name=" in r["detail"]
               for r in rows)  # fmt: skip
    assert stderr.endswith(f"clean, 0 of 6 probe(s) ok ({stderr.rsplit('(', 1)[1]}")


def test_an_interrupted_probe_leaves_no_pod(live: Live) -> None:
    with granted(live, live.settings, probe=True):
        for signum in (signal.SIGINT, signal.SIGTERM):
            proc = _check_process(live, "--probe", "https://registry.example/", "--probe-deadline", "60")
            try:
                _wait(lambda: len(_probe_pods(live)) == 3, "three probe pods")
                proc.send_signal(signum)
                _, stderr = proc.communicate(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert proc.returncode == 130, stderr
            assert "interrupted (probe pods deleted)" in stderr
            assert _probe_pods(live) == [], signum


def test_probe_without_the_probe_role_is_403_exit_2_and_leaves_nothing(live: Live) -> None:
    result = live.check("--probe", "https://registry.example/", "--probe-deadline", "20")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f'cannot create resource "pods" in API group "" in the namespace "{PROBE_NAMESPACE}"' in result.stderr
    assert "--format check-rbac" in result.stderr
    assert _probe_pods(live) == []


def _cri_log(text: str) -> str:
    """Container output as the kubelet stores it (CRI log format, stamped now: check asks for recent lines only),
    which kwok serves as a pod's log."""
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return "".join(f"{stamp} stdout F {line}\n" for line in text.splitlines())


def test_probe_end_to_end_with_a_real_transcript_served_as_the_pods_log(
    live: Live, start_proxy: Callable[[Settings], Any], busybox_path: str, tmp_path: Path
) -> None:
    """kwok runs no container, so the test plays the kubelet: it runs a created probe pod's own script (the node's
    proxy port rewritten to a real tinyproxy's on loopback) with busybox, hands the output to kwok as the probe
    container's log and tinyproxy's as the proxy pods', and marks the pods Succeeded. `check` then reads both
    logs through the API server and judges them: the Filter, a DNS failure told by the proxy pod's log, an http
    origin. (TLS is left out here: every pod's ClientHello is its own, and kwok serves one log to all of them.)"""
    with probe_live.serving(probe_live._Http()) as plain:
        proxy = start_proxy(probe_live._settings([plain.port]))
        urls = ["https://blocked.example/", "https://nothing.invalid/", f"http://127.0.0.1:{plain.port}/"]
        with granted(live, live.settings, probe=True):
            proc = _check_process(live, "--json", "--probe", *urls, "--probe-timeout", "3", "--probe-deadline", "60")
            try:
                _wait(lambda: len(_probe_pods(live)) == 3, "three probe pods")
                pods = _probe_pods(live)
                script = pods[0]["spec"]["containers"][0]["command"][2]
                assert script.count('nc "$PROXY_HOST" 8888') == 1
                scratch = tmp_path / "scratch"
                scratch.mkdir()
                env = {"PATH": busybox_path, "PROXY_HOST": "127.0.0.1", "PROBE_DIR": str(scratch)}
                ran = subprocess.run(
                    [f"{busybox_path}/sh", "-c", script.replace('"$PROXY_HOST" 8888', f'"$PROXY_HOST" {proxy.port}')],
                    env=env, capture_output=True, text=True, timeout=30,
                )  # fmt: skip
                assert ran.returncode == 0, ran.stderr
                (live.workdir / "probe.log").write_text(_cri_log(ran.stdout))
                (live.workdir / "tinyproxy.log").write_text(_cri_log(proxy.log_text()))
                for pod in pods:
                    live.kubectl("-n", PROBE_NAMESPACE, "patch", "pod", pod["metadata"]["name"], "--subresource=status",
                                 "--type=merge", "-p", '{"status": {"phase": "Succeeded"}}')  # fmt: skip
                stdout, stderr = proc.communicate(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert proc.returncode == 1, stdout + stderr
            assert _probe_pods(live) == []
    rows = [r for r in json.loads(stdout) if r["kind"] == "probe"]
    nodes = sorted({p["spec"]["nodeName"] for p in pods})
    assert [(r["node"], r["url"], r["outcome"]) for r in rows] == [
        (node, url, outcome) for node in nodes
        for url, outcome in zip(urls, ["filtered", "dns-failure", "ok"], strict=True)
    ]  # fmt: skip
    assert rows[2]["detail"] == "the origin answered HTTP/1.1 204 No Content"


# --- what the probe role cannot do ----------------------------------------------------------------------------------
# Root on a node by three doors: a privileged pod in the host's PID namespace with / mounted, a hostPath of /, and the
# node's network (its loopback services, the kubelet's ports, the metadata endpoint as the node).


def _escape(door: str, namespace: str, node: str) -> dict[str, Any]:
    """The privileged pod (root, the host's PIDs, / mounted), or a pod Pod Security `restricted` admits but for one
    door: a hostPath of /, or the node's network."""
    container: dict[str, Any] = {"name": "c", "image": DEFAULT_IMAGE, "command": ["sleep", "3600"]}
    spec: dict[str, Any] = {"nodeName": node, "containers": [container]}
    if door == "privileged":
        spec["hostPID"] = True
        container["securityContext"] = {"privileged": True, "runAsUser": 0}
    else:
        spec["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 61888,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if door in ("privileged", "hostpath"):
        spec["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
        container["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    if door == "hostnetwork":
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"escape-{door}", "namespace": namespace},
            "spec": spec}  # fmt: skip


# What Pod Security `restricted` says of each: the door itself (for the two otherwise restricted pods, only it).
REFUSALS = {
    "privileged": ('privileged (container "c" must not set securityContext.privileged=true)', "hostPID=true",
                   'volume "host" uses restricted volume type "hostPath"'),
    "hostpath": ('violates PodSecurity "restricted:latest": restricted volume types (volume "host" uses restricted '
                 'volume type "hostPath")\n',),
    "hostnetwork": ('violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true)\n',),
}  # fmt: skip


def _dry_run(live: Live, obj: dict[str, Any], *as_: str) -> subprocess.CompletedProcess[str]:
    """`kubectl create --dry-run=server`: authorization and admission run in full, nothing is stored."""
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(live.kubeconfig), "create", "--dry-run=server", "-o", "json", "-f", "-", *as_],
        input=json.dumps(obj), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_probe_role_cannot_create_a_privileged_host_path_or_host_network_pod_but_admits_its_own(
    live: Live,
) -> None:
    node = _probe_pods_nodes(live)[0]
    as_check = ("--as", SERVICE_ACCOUNT)
    with granted(live, live.settings, probe=True):
        _wait(lambda: live.can_i("create", "pods", "-n", PROBE_NAMESPACE), "the probe role in force")
        for door in ("privileged", "hostpath", "hostnetwork"):
            for namespace in ("kube-system", "default"):  # RBAC: no create there
                refused = _dry_run(live, _escape(door, namespace, node), *as_check)
                assert refused.returncode != 0, (door, namespace, refused.stdout)
                assert f'cannot create resource "pods" in API group "" in the namespace "{namespace}"' in refused.stderr
            # Where the role may create pods, Pod Security `restricted` refuses it, whoever asks (the admin too).
            for who in (as_check, ()):
                refused = _dry_run(live, _escape(door, PROBE_NAMESPACE, node), *who)
                assert refused.returncode != 0, (door, who, refused.stdout)
                assert 'violates PodSecurity "restricted:latest"' in refused.stderr, refused.stderr
                assert all(text in refused.stderr for text in REFUSALS[door]), refused.stderr
        # The probe's own pod, as check --probe builds it, is admitted under the role.
        settings = load_settings(str(live.settings))
        own = probe_pod(settings, node, "dryrun", 0, "echo probe", 60)
        admitted = _dry_run(live, own, *as_check)
        assert admitted.returncode == 0, admitted.stderr
        assert "Warning" not in admitted.stderr, admitted.stderr
        assert json.loads(admitted.stdout)["metadata"]["namespace"] == PROBE_NAMESPACE


def test_the_grant_the_probe_role_had_before_admits_the_privileged_pod_in_kube_system(live: Live) -> None:
    """The control: `create pods` in the proxy's namespace, what `render --format check-rbac --probe` granted before
    the probe had a namespace of its own, lets the same identity create the privileged pod the test above refuses."""
    node = _probe_pods_nodes(live)[0]
    name = "proxy-component-check-before"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": "kube-system"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]}  # fmt: skip
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": "kube-system"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": CHECK_NAME, "namespace": "kube-system"}]}  # fmt: skip
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([role, binding]))
    try:
        _wait(lambda: live.can_i("create", "pods", "-n", "kube-system"), "the former grant in force")
        for door in ("privileged", "hostpath", "hostnetwork"):
            admitted = _dry_run(live, _escape(door, "kube-system", node), "--as", SERVICE_ACCOUNT)
            assert admitted.returncode == 0, (door, admitted.stderr)
    finally:
        live.kubectl("-n", "kube-system", "delete", "role,rolebinding", name)


def _probe_pods_nodes(live: Live) -> list[str]:
    proxies = json.loads(live.kubectl("-n", "kube-system", "get", "pods", "-l", "app=http-proxy", "-o", "json"))
    return sorted(p["spec"]["nodeName"] for p in proxies["items"])
