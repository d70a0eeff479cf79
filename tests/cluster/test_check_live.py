"""`proxy-component check` against a real cluster (pytest -m cluster): kube-apiserver, controller-manager,
scheduler and etcd built from Kubernetes' own Go modules, with three kwok fake nodes, all on 127.0.0.1
(scripts/cluster). The rendered objects are applied with kubectl; each drift is then made for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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


class Live:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.settings = workdir / "proxy.yaml"
        self.settings.write_text(SETTINGS)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def check(self, *extra: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "proxy_component.cli", "check", str(self.settings)]
        cmd += ["--kubeconfig", str(kubeconfig or self.kubeconfig), *extra]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)

    def findings(self) -> list[dict[str, Any]]:
        result = self.check("--json")
        assert result.returncode in (0, 1), result.stderr
        findings: list[dict[str, Any]] = json.loads(result.stdout)
        assert (result.returncode == 1) == bool(findings)
        return findings

    def apply_rendered(self) -> None:
        render = subprocess.run(
            [sys.executable, "-m", "proxy_component.cli", "render", str(self.settings)],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        self.kubectl("apply", "-f", "-", stdin=render.stdout)
        self.kubectl("-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=60s")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"pc-check-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok")}
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "3"], capture_output=True, text=True, env=env,
                        timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        live = Live(Path(up.stdout.strip().splitlines()[-1]), workdir)
        live.kubectl("create", "namespace", "team-a")
        live.apply_rendered()
        yield live
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr


def test_the_daemonset_is_ready_on_every_node(live: Live) -> None:
    ds = json.loads(live.kubectl("-n", "kube-system", "get", "daemonset", "http-proxy", "-o", "json"))
    assert ds["status"]["numberReady"] == ds["status"]["desiredNumberScheduled"] == 3
    assert ds["spec"]["template"]["spec"]["initContainers"][0]["name"] == "firewall"


def test_check_is_clean_right_after_apply(live: Live) -> None:
    result = live.check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "clean" in result.stderr
    assert live.findings() == []


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
        live.kubectl("delete", "node", "node-extra", "--wait=true")
        live.kubectl("-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=60s")


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


def test_rbac_that_forbids_listing_nodes_is_exit_2_with_a_message(live: Live, tmp_path: Path) -> None:
    live.kubectl("-n", "default", "create", "serviceaccount", "viewer-without-nodes")
    token = live.kubectl("-n", "default", "create", "token", "viewer-without-nodes").strip()
    config = yaml.safe_load(live.kubeconfig.read_text())
    config["users"] = [{"name": "limited", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "limited"
    limited = tmp_path / "kubeconfig"
    limited.write_text(yaml.safe_dump(config))
    result = live.check(kubeconfig=limited)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "403" in result.stderr
    assert "grant list" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_workload_with_a_stale_no_proxy(live: Live) -> None:
    env = {name: "http://http-proxy.kube-system.svc.cluster.local:8888" for name in ("HTTP_PROXY", "http_proxy")}
    env |= {name: "http://http-proxy.kube-system.svc.cluster.local:8888" for name in ("HTTPS_PROXY", "https_proxy")}
    env |= {"NO_PROXY": "localhost,10.0.0.0/16", "no_proxy": "localhost,10.0.0.0/16"}
    live.kubectl("apply", "-f", "-", stdin=_deployment("stale", env=env))
    try:
        (finding,) = live.findings()
        assert finding["object"] == "Deployment default/stale"
        assert (
            finding["message"]
            == "container app: NO_PROXY is stale (differs from the composed NO_PROXY for its runtimes)"
        )
    finally:
        live.kubectl("-n", "default", "delete", "deployment", "stale")


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
