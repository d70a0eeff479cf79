"""Issue 44: what the stack program reads of the cluster before it plans (`live.preview`), against a loopback server
playing the API server: every mistake a preview can see, at once, each naming its field, its value and what to do;
nothing when the cluster cannot say (the engine then reports on the objects). The engine lane runs the preview
itself against the test cluster (tests/engine/test_preview_errors.py)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from proxy_component.live.preview import (
    cluster_problems,
    context_problems,
    corefile_zones,
    live_kubernetes_version,
)
from proxy_component.settings import parse_settings
from tests import fake_api

COREFILE = """.:53 {
    errors
    health
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
}
"""


def api_server(routes: dict[str, tuple[int, Any]]) -> contextlib.AbstractContextManager[Any]:
    """An API client for a loopback server answering GET `path` with `routes[path]` (status, JSON), else 404."""

    def answer(path: str) -> tuple[int, bytes]:
        status, body = routes.get(path.rstrip("/"), (404, {"kind": "Status", "code": 404}))
        return status, json.dumps(body).encode()

    return fake_api.api_server(answer)


def namespace(name: str) -> tuple[int, Any]:
    return 200, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


CLUSTER = {
    "/api/v1/namespaces/kube-system": namespace("kube-system"),
    "/api/v1/namespaces/default": namespace("default"),
    "/api/v1/namespaces/kube-system/configmaps/coredns": (
        200,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns"}, "data": {"Corefile": COREFILE}},
    ),
    "/version": (200, {"major": "1", "minor": "35+", "gitVersion": "v1.35.1-eks"}),
}


def settings(**overrides: Any) -> Any:
    data: dict[str, Any] = {
        "cluster": {"name": "t", "podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "namespaces": ["default"],
    }
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return parse_settings(data)


def test_a_cluster_that_matches_the_settings_has_no_problem() -> None:
    with api_server(CLUSTER) as api:
        assert cluster_problems(settings(), api) == []
        assert live_kubernetes_version(api) == "1.35"


def test_every_mistake_at_once_each_with_its_field_value_and_what_to_do() -> None:
    """The issue's mistakes: a namespace typo, prometheus-operator's CRDs missing, k8s.internal on a cluster.local
    cluster; in the settings' order, in one answer."""
    chosen = settings(
        cluster={"dnsDomain": "k8s.internal"},
        deployment={
            "namespace": "kube-sytem",
            "metrics": {"enabled": True, "podMonitor": True, "prometheusRule": True},
        },
        namespaces=["default", "team-a"],
    )
    with api_server(CLUSTER) as api:
        problems = cluster_problems(chosen, api)
    host = problems[0].split("(", 1)[1].split(")", 1)[0]
    assert problems == [
        f"deployment.namespace: 'kube-sytem' does not exist in the cluster ({host}): create it before `pulumi up`, "
        "or correct deployment.namespace",
        f"namespaces: 'team-a' does not exist in the cluster ({host}): create it before `pulumi up`, or correct "
        "namespaces",
        f"deployment.metrics.podMonitor: the cluster ({host}) does not serve PodMonitor (monitoring.coreos.com/v1), "
        "so `pulumi up` would fail on it: install what provides it (prometheus-operator's CRDs), or turn the setting "
        "off",
        f"deployment.metrics.prometheusRule: the cluster ({host}) does not serve PrometheusRule "
        "(monitoring.coreos.com/v1), so `pulumi up` would fail on it: install what provides it (prometheus-operator's "
        "CRDs), or turn the setting off",
        "cluster.dnsDomain: 'k8s.internal' is not the cluster's domain: its CoreDNS (kube-system/coredns) serves "
        "'cluster.local', so the proxy's in-cluster URL (http://http-proxy.kube-sytem.svc.k8s.internal:8888) and "
        "the cluster's names in NO_PROXY would not match (expected 'cluster.local')",
    ]


def test_served_kinds_are_no_problem() -> None:
    served = {
        "/apis/monitoring.coreos.com/v1": (
            200,
            {"kind": "APIResourceList", "resources": [{"name": "podmonitors", "kind": "PodMonitor"},
                                                       {"name": "podmonitors/status", "kind": "PodMonitor"}]},
        ),
    }  # fmt: skip
    chosen = settings(deployment={"metrics": {"enabled": True, "podMonitor": True}})
    with api_server({**CLUSTER, **served}) as api:
        assert cluster_problems(chosen, api) == []


@pytest.mark.parametrize("status", [403, 500])
def test_what_the_cluster_cannot_say_is_left_to_the_engine(status: int) -> None:
    """Forbidden or failing reads are no finding: only a definite 404 or a CoreDNS that serves another zone is."""
    failing = {path: (status, {"kind": "Status", "code": status}) for path in CLUSTER}
    chosen = settings(cluster={"dnsDomain": "k8s.internal"}, deployment={"namespace": "nope"})
    with api_server(failing) as api:
        assert cluster_problems(chosen, api) == []
        assert live_kubernetes_version(api) is None


def test_corefile_zones_read_the_kubernetes_plugins_zones() -> None:
    assert corefile_zones(COREFILE) == ["cluster.local", "in-addr.arpa", "ip6.arpa"]
    assert corefile_zones("k8s.internal:53 {\n  kubernetes k8s.internal. {\n  }\n}\n") == ["k8s.internal"]
    assert corefile_zones("kubernetes\n") == []  # the plugin with the server block's zones: not judged
    assert corefile_zones("# kubernetes cluster.local\n") == []


def test_a_context_that_is_not_in_the_kubeconfig_names_those_that_are() -> None:
    assert context_problems(["prod-eu", "prod-us"], "prod-ue", "the ambient kubeconfig (~/.kube/config)") == [
        "proxy-component:context: 'prod-ue' is not a context of the ambient kubeconfig (~/.kube/config) (expected "
        "one of: prod-eu, prod-us)"
    ]
    assert context_problems(["a"], None, "x") == []
    assert context_problems(["a"], "a", "x") == []
