"""`check --probe` without a cluster: its role, its pod, its URLs, and how it judges what cannot come from a real
tinyproxy (a pod that gave no log, an upstream's own refusal). tests/integration/test_probe_live.py judges real
transcripts; tests/cluster runs it against an API server."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from proxy_component.cli import main
from proxy_component.live.access import CHECK_NAME, accesses, rbac_objects
from proxy_component.live.cluster import CheckError, Cluster
from proxy_component.live.probe import probe_cluster, stalled
from proxy_component.probe import (
    PROBE_COMPONENT,
    RUN_LABEL,
    Transcript,
    classify,
    parse_targets,
    pod_script,
    probe_pod,
    tls_client,
)
from proxy_component.settings import DEFAULT_IMAGE, PROBE_NAMESPACE, parse_settings

BASE: dict[str, Any] = {"cluster": {"podCidrs": ["10.0.0.0/16"], "nodeCidrs": ["192.0.2.0/24"]}, "namespaces": ["default"]}  # fmt: skip


def test_the_probe_role_creates_pods_only_in_its_own_restricted_namespace() -> None:
    settings = parse_settings(BASE)
    plain = rbac_objects(settings)
    probing = rbac_objects(settings, probe=True)
    roles = {(o["kind"], o["metadata"].get("namespace")): o["rules"] for o in probing if "rules" in o}
    # In the proxy's namespace (kube-system) the probe adds nothing: check itself reads the proxy pods' logs (which
    # config each node's proxy runs) and the config object by name. No create, no delete.
    assert roles[("Role", "kube-system")] == [
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"], "resourceNames": ["http-proxy"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["http-proxy-config"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    assert roles[("Role", PROBE_NAMESPACE)] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
    ]
    creators = {k for k, rules in roles.items() for r in rules if {"create", "delete"} & set(r["verbs"])}
    assert creators == {("Role", PROBE_NAMESPACE)}
    # The namespace comes with the role, right after the ServiceAccount (before the Role in it), and its labels
    # make the API server enforce Pod Security `restricted` on every pod created there.
    assert [o["kind"] for o in probing[:2]] == ["ServiceAccount", "Namespace"]
    assert probing[1]["metadata"] == {
        "name": PROBE_NAMESPACE,
        "labels": {
            "app.kubernetes.io/part-of": "proxy-component",
            "app.kubernetes.io/component": "check-probe",
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/warn": "restricted",
        },
    }
    assert all(o["kind"] != "Namespace" for o in plain)
    plain_roles = {(o["kind"], o["metadata"].get("namespace")): o["rules"] for o in plain if "rules" in o}
    assert {k: v for k, v in roles.items() if k != ("Role", PROBE_NAMESPACE)} == plain_roles
    assert set(accesses(settings, probe=True)) - set(accesses(settings)) == {
        a for a in accesses(settings, probe=True) if a.namespace == PROBE_NAMESPACE
    }
    # Without the proxy there is nothing to probe, and nothing more is granted.
    off = parse_settings({**BASE, "proxy": {"httpProxy": "http://proxy.corp:3128"}, "deployment": {"enabled": False}})
    assert rbac_objects(off, probe=True) == rbac_objects(off)


def test_render_check_rbac_probe_and_its_misuse(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(yaml.safe_dump(BASE))
    assert main(["render", str(config), "--format", "check-rbac", "--probe"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert docs[0]["metadata"]["name"] == CHECK_NAME
    assert any("pods/log" in r["resources"] for d in docs for r in d.get("rules", []))
    with pytest.raises(SystemExit) as exit_info:
        main(["render", str(config), "--format", "manifests", "--probe"])
    assert exit_info.value.code == 2
    assert (
        "--probe: only for --format check-rbac (the role of `check --probe`), not manifests" in capsys.readouterr().err
    )


def test_the_probe_pod_is_pinned_hardened_and_uses_the_proxys_image() -> None:
    settings = parse_settings(BASE)
    pod = probe_pod(settings, "node-a", "abc123", 0, "echo", 90)
    spec = pod["spec"]
    assert pod["metadata"] == {
        "name": "proxy-component-probe-abc123-0",
        "namespace": PROBE_NAMESPACE,
        "labels": {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": PROBE_COMPONENT,
                   RUN_LABEL: "abc123"},
    }  # fmt: skip
    assert (spec["nodeName"], spec["activeDeadlineSeconds"], spec["restartPolicy"]) == ("node-a", 90, "Never")
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert "imagePullSecrets" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["image"] == DEFAULT_IMAGE
    assert container["command"] == ["/bin/sh", "-c", "echo"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["env"] == [{"name": "PROXY_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://a.example/", "'ftp://a.example/' is not an http:// or https:// URL with a host"),
        ("https://", "'https://' is not an http:// or https:// URL with a host"),
        ("https://a.example:99999/", "'https://a.example:99999/' has an invalid port"),
        ("https://u:p@a.example/", "'https://u:p@a.example/' carries credentials"),
    ],
)
def test_probe_urls_are_checked(url: str, error: str) -> None:
    with pytest.raises(ValueError, match=r"^--probe: ") as info:
        parse_targets([url])
    assert error in str(info.value)
    assert "(expected e.g. https://registry-1.docker.io/v2/)" in str(info.value)


def test_targets_and_their_requests() -> None:
    v6, plain = parse_targets(["https://[2001:db8::1]:8443/v2/", "http://mirror.example/x?y=%41"])
    assert (v6.host, v6.port, v6.authority) == ("2001:db8::1", 8443, "[2001:db8::1]:8443")
    script = pod_script([v6, plain], [b"hello", None], 8888, 5)
    assert "CONNECT [2001:db8::1]:8443 HTTP/1.1\\r\\nHost: [2001:db8::1]:8443" in script
    assert "GET http://mirror.example:80/x HTTP/1.1" in script  # the query is not sent (parse keeps the path)
    assert 'timeout -s KILL 5 nc "$PROXY_HOST" 8888' in script


@pytest.mark.parametrize("server", ["tinyproxy/1.11.2", "tinyproxy"])
def test_tinyproxys_own_refusal_is_known_by_its_server_header_with_or_without_a_version(server: str) -> None:
    """tinyproxy up to 1.11.2 sends `Server: tinyproxy/VERSION`; upstream's master (the image's build) `tinyproxy`."""
    (https,) = parse_targets(["https://registry.example/"])
    body = b"<html><body><h1>Access denied</h1><p>The administrator of this proxy has not configured it</p></body>"
    answer = Transcript(b"HTTP/1.1 403 Access denied\r\nServer: " + server.encode() + b"\r\n\r\n" + body, "")
    result = classify("n", https, answer, wait=5, tls=tls_client("registry.example", None), upstream=True)
    assert result.outcome == "not-allowed", result


def test_an_upstreams_own_refusal_and_an_incomplete_answer() -> None:
    (https,) = parse_targets(["https://registry.example/"])
    tls = tls_client("registry.example", None)
    refused = Transcript(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", "")
    assert classify("n", https, refused, wait=5, tls=tls, upstream=True).outcome == "upstream-refused"
    assert classify("n", https, refused, wait=5, tls=tls, upstream=False).outcome == "error"
    partial = Transcript(b"HTTP/1.0 200 Connection established\r\n", "")
    assert classify("n", https, partial, wait=5, tls=tls).detail == "the proxy's answer was incomplete after 5 s"
    truncated = Transcript(b"HTTP/1.0 200 Connection established\r\n\r\n\x16\x03\x03\x00\x40\x02", "")
    result = classify("n", https, truncated, wait=5, tls=tls)
    assert (result.outcome, result.detail) == ("timeout", "the origin's TLS answer was incomplete after 5 s")
    assert (
        str(result)
        == "FAIL: Node n: https://registry.example/: timeout: the origin's TLS answer was incomplete after 5 s"
    )


class _Api:
    """The core API calls probe_cluster makes: a proxy pod on node-a; `create` fails with `refuse` (an HTTP status)
    or makes a pod that stays Pending, its container waiting with `waiting`."""

    def __init__(self, refuse: int | None = None, waiting: tuple[str, str] | None = None) -> None:
        self.refuse, self.waiting = refuse, waiting
        self.pods: dict[tuple[str, str], Any] = {
            ("kube-system", "http-proxy-a"): self._pod("http-proxy-a", {"app": "http-proxy"})
        }
        self.deleted: list[tuple[str, str]] = []

    def _pod(self, name: str, labels: dict[str, str]) -> Any:
        state = SimpleNamespace(waiting=SimpleNamespace(reason=self.waiting[0], message=self.waiting[1])) if (
            self.waiting) else SimpleNamespace(waiting=None)  # fmt: skip
        return SimpleNamespace(
            metadata=SimpleNamespace(name=name, labels=labels, deletion_timestamp=None),
            spec=SimpleNamespace(node_name="node-a"),
            status=SimpleNamespace(
                phase="Pending", conditions=None, container_statuses=[SimpleNamespace(name="probe", state=state)]
            ),
        )

    def list_namespaced_pod(self, namespace: str, label_selector: str, **kwargs: Any) -> Any:
        key, _, value = label_selector.partition("=")
        items = [p for (ns, _name), p in self.pods.items() if ns == namespace and p.metadata.labels.get(key) == value]
        return SimpleNamespace(items=items, metadata=SimpleNamespace(_continue=None))

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> Any:
        if self.refuse is not None:
            raise _ApiError(self.refuse)
        pod = self._pod(body["metadata"]["name"], body["metadata"]["labels"])
        self.pods[namespace, pod.metadata.name] = pod
        return pod

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
        self.deleted.append((namespace, name))
        self.pods.pop((namespace, name), None)


class _ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def test_probe_without_its_namespace_says_how_to_make_it() -> None:
    api = _Api(refuse=404)
    with pytest.raises(CheckError) as caught:
        probe_cluster(parse_settings(BASE), Cluster({"core": api}, server="https://api.test"), ["http://a.example/"],
                      wait=1, deadline=6)  # fmt: skip
    assert str(caught.value) == (
        "--probe: the namespace proxy-component-probe does not exist: the probe's pods run there, where Pod Security "
        "enforces 'restricted' (apply `proxy-component render CONFIG --format check-rbac --probe`, which makes it)"
    )


@pytest.mark.parametrize("secrets", [[], ["corp-registry"]])
def test_a_probe_pod_that_cannot_pull_its_image_says_so_and_names_the_secrets(secrets: list[str]) -> None:
    api = _Api(waiting=("ImagePullBackOff", 'Back-off pulling image "registry.corp.example/proxy:1.11.2-1"'))
    settings = parse_settings({**BASE, "deployment": {"imagePullSecrets": secrets}})
    (result,) = probe_cluster(settings, Cluster({"core": api}, server="https://api.test"), ["http://a.example/"],
                              wait=1, deadline=6)  # fmt: skip
    assert result.outcome == "timeout"
    where = (
        "the Secrets deployment.imagePullSecrets names (corp-registry) must exist in namespace proxy-component-probe too"
        if secrets
        else "if its registry needs credentials, name their Secret in deployment.imagePullSecrets and copy it into "
        "namespace proxy-component-probe"
    )
    assert (
        '(phase Pending; container probe ImagePullBackOff: Back-off pulling image "registry.corp.example/proxy:1.11.2-1"); '
        f"its image could not be pulled: {where}; its events outlive it: kubectl -n proxy-component-probe get events"
    ) in result.detail
    assert [ns for ns, _ in api.deleted] == [PROBE_NAMESPACE]


# --- a probe pod that gave no result: what its last listing showed, and where to look next ------------------------


def _probe_pod_status(phase: str, **status: Any) -> Any:
    from kubernetes.client import V1ObjectMeta, V1Pod, V1PodStatus

    return V1Pod(metadata=V1ObjectMeta(name="proxy-component-probe-x-0"), status=V1PodStatus(phase=phase, **status))


EVENTS = "kubectl -n kube-system get events --field-selector involvedObject.name=proxy-component-probe-x-0"


def test_a_pending_probe_pod_names_its_image_pull_and_its_events() -> None:
    from kubernetes.client import V1ContainerState, V1ContainerStateWaiting, V1ContainerStatus

    waiting = V1ContainerState(
        waiting=V1ContainerStateWaiting(reason="ImagePullBackOff", message='Back-off pulling "x"')
    )
    pod = _probe_pod_status(
        "Pending",
        container_statuses=[V1ContainerStatus(name="probe", state=waiting, image="x", image_id="", ready=False,
                                              restart_count=0)],
    )  # fmt: skip
    assert stalled("proxy-component-probe-x-0", "kube-system", "n1", 120, "Pending", pod) == (
        "the probe pod proxy-component-probe-x-0 gave no complete result within 120 s (phase Pending; container "
        'probe ImagePullBackOff: Back-off pulling "x"); a Pending pod waits for its image (deployment.image, pulled '
        f"by node n1 from its registry) or for room on the node; its events outlive it: {EVENTS}"
    )


def test_an_unscheduled_probe_pod_says_why() -> None:
    from kubernetes.client import V1PodCondition

    pod = _probe_pod_status(
        "Pending",
        conditions=[V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable",
                                   message="0/1 nodes are available: 1 Insufficient memory.")],
    )  # fmt: skip
    detail = stalled("proxy-component-probe-x-0", "kube-system", "n1", 120, "Pending", pod)
    assert "(phase Pending; not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient memory.)" in detail
    assert detail.endswith(EVENTS)


@pytest.mark.parametrize(("phase", "pod"), [("Running", _probe_pod_status("Running")), ("Pending", None)])
def test_a_running_or_unlisted_probe_pod_says_what_to_do(phase: str, pod: Any) -> None:
    detail = stalled("proxy-component-probe-x-0", "kube-system", "n1", 15, phase, pod)
    assert detail.startswith(
        f"the probe pod proxy-component-probe-x-0 gave no complete result within 15 s (phase {phase})"
    )
    assert ("had not finished its URLs (raise --probe-deadline)" in detail) == (phase == "Running")
    assert detail.endswith(EVENTS)


def test_probe_cluster_reports_a_stalled_pod_with_its_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through probe_cluster: a pod still pulling its image when the deadline passes (the wait is cut short)."""
    from types import SimpleNamespace

    from kubernetes.client import V1ContainerState, V1ContainerStateWaiting, V1ContainerStatus

    from proxy_component import live as check

    class Core:
        def __init__(self) -> None:
            self.pods: dict[str, Any] = {"http-proxy-a": SimpleNamespace(
                metadata=SimpleNamespace(name="http-proxy-a", labels={"app": "http-proxy"}, deletion_timestamp=None),
                spec=SimpleNamespace(node_name="n1"), status=SimpleNamespace(phase="Running"))}  # fmt: skip

        def list_namespaced_pod(self, namespace: str, label_selector: str = "", **_: Any) -> Any:
            key, value = label_selector.split("=", 1)
            items = [p for p in self.pods.values() if p.metadata.labels.get(key) == value]
            return SimpleNamespace(items=items, metadata=SimpleNamespace(_continue=None))

        def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> Any:
            waiting = V1ContainerState(waiting=V1ContainerStateWaiting(reason="ErrImagePull", message="not found"))
            pod = _probe_pod_status("Pending", container_statuses=[
                V1ContainerStatus(name="probe", state=waiting, image="x", image_id="", ready=False, restart_count=0)])  # fmt: skip
            pod.metadata.name, pod.metadata.labels = body["metadata"]["name"], body["metadata"]["labels"]
            self.pods[pod.metadata.name] = pod
            return pod

        def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
            self.pods.pop(name, None)

    def cut_short(condition: Any, deadline: float, interval: float = 1.0) -> bool:
        return bool(condition())

    monkeypatch.setattr("proxy_component.live.probe.wait_until", cut_short)
    core = Core()
    results = check.probe_cluster(parse_settings(BASE), check.Cluster({"core": core}, server="https://api.test"),
                                  ["http://a.example/"], wait=1, deadline=6)  # fmt: skip
    ((result),) = results
    assert result.outcome == "timeout"
    assert "(phase Pending; container probe ErrImagePull: not found)" in result.detail
    assert (
        "kubectl -n proxy-component-probe get events --field-selector involvedObject.name=proxy-component-probe-"
        in result.detail
    )
    assert list(core.pods) == ["http-proxy-a"], "the probe pod is deleted"
