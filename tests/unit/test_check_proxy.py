"""`check` against a fake API serving the API server's JSON: the proxy's images and its Pod Security level.

The fake answers each call `check` makes from the objects given for its kind: a `read_...` by name (and
namespace) or a 404, a `list_...` in one page, honouring the namespace and an `app=` label selector. `check`
asks the client for the raw response (`_preload_content=False`) and parses its JSON, so the fake answers with
the JSON bytes of the objects (the rendered ones, as the API server sends them back).
"""

from __future__ import annotations

import base64
import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from proxy_component.live.access import rbac_objects, workload_namespaces
from proxy_component.live.check import Finding, check_cluster, injection_apis
from proxy_component.live.cluster import Cluster
from proxy_component.render import manifests
from proxy_component.render.trust import trust_namespaces
from proxy_component.settings import Settings, parse_settings
from tests.conftest import ROOT
from tests.pki import make_ca

SETTINGS = {
    "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"], "nodeCidrs": ["192.0.2.0/24"]},
    "namespaces": ["default"],
}


def _raw(body: dict[str, Any]) -> Any:
    """What the client returns for `_preload_content=False`: the HTTP response, whose `data` is the body's bytes."""
    return SimpleNamespace(data=json.dumps(body).encode())


class _Streamed:
    """What the client returns for a log with `_preload_content=False`: a response read in chunks, then released
    (chunks of 7 bytes here, so lines span them)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.released = False

    def stream(self, amt: int) -> Any:
        return (self.body[i : i + 7] for i in range(0, len(self.body), 7))

    def release_conn(self) -> None:
        self.released = True


class FakeApi:
    """Every API group at once, answering from the objects given per kind (the method's name without its verb)."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], logs: dict[str, str] | None = None) -> None:
        self.objects = objects
        self.logs = logs or {}
        self.log_calls: list[dict[str, Any]] = []

    def __getattr__(self, call: str) -> Any:
        if call == "read_namespaced_pod_log":  # streamed, as check asks for it

            def log(name: str, namespace: str, _preload_content: bool = True, **kwargs: Any) -> _Streamed:
                assert _preload_content is False, "check streams a proxy's log, never holds it whole"
                self.log_calls.append({"name": name, "namespace": namespace, **kwargs})
                for key in (f"{name}/{kwargs.get('container')}", name):  # one container's log, else the pod's
                    if key in self.logs:
                        return _Streamed(self.logs[key].encode())
                raise ApiException(status=404, reason="Not Found")

            return log
        verb, _, kind = call.partition("_")
        if verb not in ("read", "list"):
            raise AttributeError(call)

        def answer(*args: Any, _preload_content: bool = True, **kwargs: Any) -> Any:
            assert _preload_content is False, f"{call}: check reads the raw JSON, not the client's models"
            if verb == "read":
                name, namespace = args[0], (args[1] if len(args) > 1 else None)
                for obj in self.objects.get(kind, []):
                    if obj["metadata"]["name"] == name and obj["metadata"].get("namespace") == namespace:
                        return _raw(obj)
                raise ApiException(status=404, reason="Not Found")
            namespace = args[0] if args else None
            items = [o for o in self.objects.get(kind, []) if _selected(o, namespace, kwargs)]
            return _raw({"metadata": {}, "items": items})

        return answer


def _selected(obj: dict[str, Any], namespace: str | None, kwargs: dict[str, Any]) -> bool:
    meta = obj["metadata"]
    if namespace is not None and meta.get("namespace") != namespace:
        return False
    label = kwargs.get("label_selector", "")
    if label.startswith("app="):
        return bool((meta.get("labels") or {}).get("app") == label.removeprefix("app="))
    return True


def _cluster(
    settings: Settings,
    *,
    images: dict[str, str] | None = None,
    namespace_labels: dict[str, str] | None = None,
    config: dict[str, Any] | None = None,
    logs: dict[str, str] | None = None,
) -> Cluster:
    """A one-node cluster where the rendered proxy runs and is ready; `images` replaces container images by name."""
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in manifests(settings)}
    daemonset = rendered[("DaemonSet", "http-proxy")]
    pod_spec = daemonset["spec"]["template"]["spec"]
    for container in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]:
        container["image"] = (images or {}).get(container["name"], container["image"])
    daemonset["status"] = {
        "numberReady": 1,
        "desiredNumberScheduled": 1,
        "currentNumberScheduled": 1,
        "numberMisscheduled": 0,
    }
    node = {
        "metadata": {"name": "n1", "labels": {"kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]},
    }
    pod = {
        "metadata": {"name": "http-proxy-a", "namespace": "kube-system", "labels": {"app": "http-proxy"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "tinyproxy"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    namespace = {"metadata": {"name": "kube-system", "labels": namespace_labels or {}}}
    api = FakeApi(
        {
            "node": [node],
            "namespace": [namespace],
            "namespaced_daemon_set": [daemonset],
            "namespaced_pod": [pod],
            "namespaced_config_map": [
                *(o for k, o in rendered.items() if k == ("ConfigMap", "proxy-config")),
                *([config] if config is not None and config["kind"] == "ConfigMap" else []),
            ],
            "namespaced_secret": [config] if config is not None and config["kind"] == "Secret" else [],
            "service_cidr": [],
        },
        logs,
    )
    clients = {"core": api, "apps": api, "batch": api, "networking": api}
    return Cluster(clients=clients, server="https://127.0.0.1:6443")


def test_the_rendered_proxy_is_clean() -> None:
    """The baseline the other tests vary: the default images and an unlabelled namespace give no finding."""
    settings = parse_settings(SETTINGS)
    assert check_cluster(settings, _cluster(settings)) == []


@pytest.mark.parametrize(
    ("container", "image"),
    [
        ("tinyproxy", "docker.io/vimagick/tinyproxy:latest"),
        ("tinyproxy", "docker.io/vimagick/tinyproxy"),
        ("firewall", "registry.k8s.io/kube-proxy:stable"),
    ],
)
def test_a_mutable_image_tag_is_a_warning(container: str, image: str) -> None:
    settings = parse_settings(SETTINGS)
    findings = check_cluster(settings, _cluster(settings, images={container: image}))
    assert findings == [
        Finding(
            "image-mutable-tag",
            "DaemonSet kube-system/http-proxy",
            "warning",
            f"container {container}: image {image!r} has no digest and no versioned tag, so nodes may run different "
            "builds of it (set a versioned tag and pin its digest, e.g. name:1.2.3@sha256:...)",
        )
    ]


def test_a_pinned_digest_is_not_mutable_whatever_its_tag() -> None:
    settings = parse_settings(SETTINGS)
    pinned = "docker.io/vimagick/tinyproxy:latest@sha256:" + "0" * 64
    assert check_cluster(settings, _cluster(settings, images={"tinyproxy": pinned})) == []


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_a_namespace_enforcing_a_stricter_pod_security_level_is_a_warning(level: str) -> None:
    settings = parse_settings(SETTINGS)
    labels = {"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/warn": "restricted"}
    findings = check_cluster(settings, _cluster(settings, namespace_labels=labels))
    assert [str(f) for f in findings] == [
        f"warning: Namespace kube-system: enforces Pod Security level {level!r}, which refuses the proxy's pods: they "
        "need 'privileged' (hostNetwork, hostPort, and the firewall init container's root user with NET_ADMIN) "
        "(label it pod-security.kubernetes.io/enforce=privileged, or set deployment.namespace to one that is)"
    ]


@pytest.mark.parametrize("labels", [{"pod-security.kubernetes.io/enforce": "privileged"}, {}])
def test_privileged_or_no_enforce_label_is_clean(labels: dict[str, str]) -> None:
    settings = parse_settings(SETTINGS)
    assert check_cluster(settings, _cluster(settings, namespace_labels=labels)) == []


def test_without_the_deployment_neither_images_nor_pod_security_are_read() -> None:
    settings = parse_settings({**SETTINGS, "deployment": {"enabled": False}, "proxy": {"httpProxy": "http://p:3128"}})
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    cluster = _cluster(parse_settings(SETTINGS), images={"tinyproxy": "x:latest"}, namespace_labels=labels)
    kinds = {f.kind for f in check_cluster(settings, cluster)}
    assert kinds.isdisjoint({"image-mutable-tag", "pod-security-too-strict"}), kinds


# --- how many requests check makes: the check guide's formula against the count of check_cluster's own requests ----


def _guide_formula() -> list[int]:
    """The numbers of the check guide's request-count paragraph (docs/guides/check.md), in the order it states them."""
    text = (ROOT / "docs/guides/check.md").read_text().split("<!-- request-count:", 1)[1].split("-->", 1)[1]
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    pattern = (
        r"It makes (\d+) requests \(a third where ServiceCIDRs cannot be listed\), (\d+) more for the in-cluster "
        r"proxy \(.*?\), (\d+) `get` per namespace with a `proxy-config`, (\d+) per namespace with a `proxy-trust`, "
        r"(\d+) discovery request per API group version of the injection \(.*?\), (\d+) `get` of Kyverno's admission "
        r"controller with `injection.kyverno` \(.*?\) and (\d+) lists per judged "
        r"namespace \((\d+) with Kyverno or `injection.admission`\), .*?: (\d+) for the proxy and one namespace, "
        r"(\d+) for two\."
    )
    found = re.fullmatch(pattern, paragraph)
    assert found, f"the check guide's request-count paragraph no longer reads as the test expects: {paragraph}"
    return [int(n) for n in found.groups()]


class _Discovery:
    """Discovery of the injection's APIs: every resource is served."""

    def get_api_resources(self, group: str, version: str) -> Any:
        names = ["mutatingadmissionpolicies", "mutatingadmissionpolicybindings", "mutatingpolicies",
                 "generatingpolicies", "clusterpolicies"]  # fmt: skip
        return SimpleNamespace(resources=[SimpleNamespace(name=n) for n in names])


def _counting(settings: Settings, *, service_cidrs: bool) -> Cluster:
    """A cluster answering every request check makes (the proxy and its pod present, every named object absent
    but the proxy's): what counts is the number of requests, not what they find."""
    cluster = _cluster(settings) if settings.deployment.enabled else None
    objects: dict[str, list[Any]] = cluster.clients["core"].objects if cluster is not None else {
        "node": [{"metadata": {"name": "n1"}}], "namespace": []
    }  # fmt: skip
    objects["service_cidr"] = (
        [{"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/12"]}}] if service_cidrs else []
    )
    api = FakeApi(objects)
    clients = {"core": api, "apps": api, "batch": api, "networking": api, "discovery": _Discovery()}
    return Cluster(clients=clients, server="https://127.0.0.1:6443")


REQUEST_CASES: dict[str, dict[str, Any]] = {
    "one namespace": SETTINGS,
    "two namespaces": {**SETTINGS, "namespaces": ["default", "team-a"]},
    "trust, admission and Kyverno": {
        **SETTINGS,
        "namespaces": ["default", "team-a", "team-b"],
        "proxy": {"upstream": {"url": "http://192.0.2.10:3128", "trustedCa": make_ca().cert_pem}},
        "injection": {"admission": True, "kyverno": True},
    },
    "credentials and the Kyverno ClusterPolicy": {
        **SETTINGS,
        "proxy": {"httpProxy": "http://user:secret@192.0.2.10:3128"},
        "injection": {"kyverno": True, "kyvernoPolicy": "ClusterPolicy", "admission": True},
    },
    "no deployment": {**SETTINGS, "deployment": {"enabled": False}, "proxy": {"httpProxy": "http://192.0.2.10:3128"}},
}


@pytest.mark.parametrize("service_cidrs", [True, False], ids=["servicecidrs", "no-servicecidrs"])
@pytest.mark.parametrize("case", sorted(REQUEST_CASES))
def test_the_check_guides_request_count_is_the_number_check_makes(case: str, service_cidrs: bool) -> None:
    base, proxy, config, trust, discovery, kyverno, lists, admitted_lists, one, two = _guide_formula()
    settings = parse_settings(REQUEST_CASES[case])
    cluster = _counting(settings, service_cidrs=service_cidrs)
    check_cluster(settings, cluster)
    injection = settings.injection
    expected = (
        base
        + (0 if service_cidrs else 1)
        + (proxy if settings.deployment.enabled else 0)
        + config * len(settings.proxy_config_namespaces)
        + trust * (len(trust_namespaces(settings)) if settings.trusted_ca else 0)
        + discovery * len({api.group_version for api in injection_apis(settings)})
        + (kyverno if injection.kyverno else 0)  # the fake's Kyverno is not 1.20: no get of the legacy policy
        + (admitted_lists if injection.kyverno or injection.admission else lists) * len(workload_namespaces(settings))
    )
    assert cluster.requests == expected
    if case in ("one namespace", "two namespaces") and service_cidrs:
        assert cluster.requests == (one if case == "one namespace" else two)


def test_the_check_guides_cluster_role_row_names_every_rule_check_rbac_renders() -> None:
    row = next(
        line for line in (ROOT / "docs/guides/check.md").read_text().splitlines() if line.startswith("| ClusterRole |")
    )
    for case in REQUEST_CASES.values():
        (role,) = [o for o in rbac_objects(parse_settings(case)) if o["kind"] == "ClusterRole"]
        for rule in role["rules"]:
            for resource in rule["resources"]:
                assert f"`{rule['verbs'][0]}` {resource}" in row, (rule, row)
                for name in rule.get("resourceNames", []):
                    assert f"`{resource}/{name}`" in row, (rule, row)


# --- which config each node's proxy runs (issue 35 item 1) ------------------------------------------------------


def _config_object(settings: Settings, changed: str) -> dict[str, Any]:
    """The proxy's config object as the API server returns it: its data last changed at `changed`."""
    obj = next(o for o in manifests(settings) if o["metadata"]["name"] == "http-proxy-config")
    obj = dict(json.loads(json.dumps(obj)))
    if obj["kind"] == "Secret":
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in obj.pop("stringData").items()}
    obj["metadata"]["managedFields"] = [
        {"manager": "pulumi-kubernetes", "operation": "Apply", "time": changed, "fieldsV1": {"f:data": {}}}
    ]
    return obj


def _log(generation: str, files: str, *more: str) -> str:
    return "\n".join(
        [
            "NOTICE    Nov 27 03:00:00.000 [7]: Initializing tinyproxy ...",
            f"proxy-component: started tinyproxy (pid 7) with config generation {generation} (files {files})",
            "NOTICE    Nov 27 03:00:01.000 [7]: Request for the stathost.",
            *more,
        ]
    )


def test_a_node_whose_proxy_runs_an_older_config_is_named_and_a_password_change_is_told_by_time() -> None:
    upstream = {"url": "http://svc:rotated-Pa55@proxy.corp.example:3128"}
    settings = parse_settings({**SETTINGS, "proxy": {"upstream": upstream}})
    config = _config_object(settings, "2026-11-27T03:10:00Z")
    want = config["metadata"]["annotations"]["proxy-component/config-generation"]
    where = "Secret kube-system/http-proxy-config"

    def findings(log: str) -> list[Finding]:
        return [f for f in check_cluster(settings, _cluster(settings, config=config, logs={"http-proxy-a": log}))]

    # Loaded after the change: current.
    assert findings(_log(want, "..2026_11_27_03_10_40.1")) == []
    reloaded = _log("0123456789abcdef", "..2026_11_27_03_00_00.1",
                    f"proxy-component: reloaded tinyproxy with config generation {want} (files ..2026_11_27_03_11_00.2)")  # fmt: skip
    assert findings(reloaded) == []
    # Another generation.
    [old] = findings(_log("0123456789abcdef", "..2026_11_27_03_00_00.1"))
    assert (old.kind, old.object, old.severity) == ("proxy-config-not-loaded", where, "warning")
    assert "n1 (generation 0123456789abcdef, files ..2026_11_27_03_00_00.1)" in old.message
    assert f"generation {want}, changed 2026-11-27T03:10:00Z" in old.message
    # The same generation (the password alone changed) from files the kubelet wrote before the change.
    [before] = findings(_log(want, "..2026_11_27_03_00_00.1"))
    assert before.kind == "proxy-config-not-loaded"
    assert "n1 (generation" in before.message
    # Refused: the watcher kept the old config.
    refused = _log("0123456789abcdef", "..2026_11_27_03_00_00.1",
                   f"proxy-component: config generation {want} (files ..2026_11_27_03_11_00.2) refused (tinyproxy "
                   "exits 65 on it): not reloaded, the running config stays",
                   "proxy-component: running config generation 0123456789abcdef (files ..2026_11_27_03_00_00.1)")  # fmt: skip
    [error] = findings(refused)
    assert (error.kind, error.severity) == ("proxy-config-refused", "error")
    for finding in (old, before, error):
        assert "rotated-Pa55" not in str(finding)
    # A log that says nothing (an older layout) or cannot be read: not judged.
    assert findings("NOTICE only tinyproxy's own lines") == []
    assert check_cluster(settings, _cluster(settings, config=config)) == []


def test_check_reads_only_the_recent_log_of_the_tinyproxy_container() -> None:
    settings = parse_settings(SETTINGS)
    config = _config_object(settings, "2026-11-27T03:10:00Z")
    cluster = _cluster(settings, config=config, logs={"http-proxy-a": _log("x", "..2026_11_27_03_00_00.1")})
    assert [f.kind for f in check_cluster(settings, cluster)] == ["proxy-config-not-loaded"]
    api = cluster.clients["core"]
    assert api.log_calls == [
        {"name": "http-proxy-a", "namespace": "kube-system", "container": "tinyproxy", "since_seconds": 660}
    ]


def test_a_kubelet_directory_that_is_no_date_gives_no_time() -> None:
    from proxy_component.live.check import Loaded

    assert Loaded(generation="0" * 16, files="..2026_13_45_25_61_99.123").written is None
    assert Loaded(generation="0" * 16, files="..2026_11_27_03_00_00.1").written is not None


# --- a node whose proxy cannot reach the upstream (issue 35 item 3) ----------------------------------------------------

UNREACHABLE = "WARNING   Nov 27 03:0{}:00.000 [7]: Could not connect to upstream proxy."


def test_a_node_whose_proxy_could_not_reach_the_upstream_is_named_without_the_credentials() -> None:
    upstream = {"url": "http://svc:S3cret-Pa55@proxy.corp.example:3128"}
    settings = parse_settings({**SETTINGS, "proxy": {"upstream": upstream}})
    log = _log("x", "..2026_11_27_03_00_00.1", UNREACHABLE.format(1), "ERROR     Nov 27 03:01:00.000 [7]: other",
               UNREACHABLE.format(4), "WARNING   Nov 27 03:05:00.000 [7]: Upstream proxy proxy.corp.example:3128 "
               "refused the request: 407 Proxy Authentication Required")  # fmt: skip
    found = [f for f in check_cluster(settings, _cluster(settings, logs={"http-proxy-a": log}))]
    [failing] = [f for f in found if f.kind == "proxy-upstream-failing"]
    assert (failing.object, failing.severity) == ("DaemonSet kube-system/http-proxy", "error")
    assert "was not served by the upstream proxy proxy.corp.example:3128 in the last 11 minutes" in failing.message
    assert "n1 (3 times, 1 of them 407: its credentials refused, last at 03:05:00)" in failing.message
    assert "S3cret-Pa55" not in str(failing)
    assert "svc" not in failing.message
    # No such line: nothing; the same lines without an upstream configured: nothing to judge.
    quiet = _log("x", "..2026_11_27_03_00_00.1")
    assert "proxy-upstream-failing" not in {
        f.kind for f in check_cluster(settings, _cluster(settings, logs={"http-proxy-a": quiet}))
    }
    direct = parse_settings(SETTINGS)
    assert "proxy-upstream-failing" not in {
        f.kind for f in check_cluster(direct, _cluster(direct, logs={"http-proxy-a": log}))
    }


def test_with_metrics_on_the_upstream_failures_are_read_from_the_metrics_containers_log() -> None:
    """tinyproxy then logs to the file the exporter reads, and the exporter passes its lines on: the tinyproxy
    container's log has the watcher's lines alone."""
    upstream = {"url": "http://proxy.corp.example:3128"}
    settings = parse_settings(
        {**SETTINGS, "proxy": {"upstream": upstream}, "deployment": {"metrics": {"enabled": True}}}
    )
    logs = {
        "http-proxy-a/tinyproxy": _log("x", "..2026_11_27_03_00_00.1"),
        "http-proxy-a/metrics": UNREACHABLE.format(2),
    }
    cluster = _cluster(settings, logs=logs)
    kinds = [f.kind for f in check_cluster(settings, cluster)]
    assert "proxy-upstream-failing" in kinds, kinds
    assert [(c["container"], c["since_seconds"]) for c in cluster.clients["core"].log_calls] == [
        ("tinyproxy", 660),
        ("metrics", 660),
    ]
