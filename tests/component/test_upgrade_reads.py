"""What the stack program reads of its live DaemonSet before an upgrade (`stack.LiveDaemonSet`): which probe handlers
pulumi-kubernetes' client-side create still owns, and whether pulumi-kubernetes applied the object at all. The
managedFields below are those the test cluster returned for a DaemonSet made by a592121's program (a client-side
create: manager pulumi-kubernetes, operation Update), trimmed to the fields read here; the engine lane runs the
whole upgrade (tests/engine/test_upgrades.py)."""

from __future__ import annotations

import contextlib
import copy
import importlib.metadata
import json
import socket
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest

from proxy_component.settings import parse_settings
from proxy_component.stack import LiveDaemonSet, read_live_daemonset
from tests import fake_api

CONTAINER = 'k:{"name":"tinyproxy"}'


def daemonset(manager: str = "pulumi-kubernetes", operation: str = "Update") -> dict[str, Any]:
    probe: dict[str, Any] = {"f:tcpSocket": {".": {}, "f:port": {}}, "f:periodSeconds": {}}
    return {
        "metadata": {
            "name": "http-proxy",
            "namespace": "kube-system",
            "managedFields": [
                {
                    "manager": manager,
                    "operation": operation,
                    "fieldsV1": {
                        "f:spec": {
                            "f:template": {
                                "f:spec": {
                                    "f:containers": {
                                        CONTAINER: {".": {}, "f:livenessProbe": probe, "f:readinessProbe": probe}
                                    }
                                }
                            }
                        }
                    },
                },
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"},
            ],
        }
    }


HTTP = {"httpGet": {"port": 8888, "path": "/"}, "periodSeconds": 10}
TCP = {"tcpSocket": {"port": 8888}, "periodSeconds": 10}


def test_a_client_side_create_owns_the_tcp_handlers_so_the_http_probes_are_stale() -> None:
    live = LiveDaemonSet.from_object(daemonset())
    assert (live.namespace, live.name, live.applied_by_pulumi) == ("kube-system", "http-proxy", True)
    assert live.csa_handlers == {
        ("tinyproxy", "livenessProbe"): {"tcpSocket"},
        ("tinyproxy", "readinessProbe"): {"tcpSocket"},
    }
    rendered = [{"name": "tinyproxy", "livenessProbe": HTTP, "readinessProbe": HTTP}]
    assert live.stale_probes(rendered) == [
        ("tinyproxy", "livenessProbe", "tcpSocket"),
        ("tinyproxy", "readinessProbe", "tcpSocket"),
    ]


def test_the_same_handler_other_containers_and_moved_managers_are_not_stale() -> None:
    live = LiveDaemonSet.from_object(daemonset())
    assert live.stale_probes([{"name": "tinyproxy", "livenessProbe": TCP, "readinessProbe": TCP}]) == []
    assert live.stale_probes([{"name": "other", "livenessProbe": HTTP}]) == []
    # After pulumi-kubernetes' first update the fields are its apply manager's: nothing left to the create.
    moved = LiveDaemonSet.from_object(daemonset("pulumi-kubernetes-8ae5cb7a", "Apply"))
    assert moved.csa_handlers == {}
    assert moved.applied_by_pulumi
    assert moved.stale_probes([{"name": "tinyproxy", "livenessProbe": HTTP}]) == []


def test_an_object_kubectl_applied_is_not_pulumis() -> None:
    live = LiveDaemonSet.from_object(daemonset("kubectl-client-side-apply"))
    assert not live.applied_by_pulumi
    assert live.csa_handlers == {}


def test_unexpected_shapes_read_as_nothing() -> None:
    odd = daemonset()
    odd["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"] = {
        "k:not json": {"f:livenessProbe": {"f:exec": {}}},
        "v:something": {},
    }
    assert LiveDaemonSet.from_object(odd).csa_handlers == {}
    assert LiveDaemonSet.from_object({}).managers == frozenset()
    broken = copy.deepcopy(daemonset())
    broken["metadata"]["managedFields"][0]["fieldsV1"] = None
    assert LiveDaemonSet.from_object(broken).csa_handlers == {}
    assert LiveDaemonSet.from_object(daemonset()).stale_probes(None) == []


# --- the live read itself: against a loopback server playing the API server ---------------------------------------


@contextlib.contextmanager
def api_server(status: int, body: bytes) -> Iterator[Any]:
    """An API client, with a password in its URL, for a loopback server that answers every GET with `status` and
    `body`."""
    with fake_api.api_server(lambda path: (status, body), userinfo=f"svc:{PASSWORD}") as api:
        yield api


PASSWORD = "Upgr4de-read-pw"
SETTINGS = parse_settings({"cluster": {"name": "t", "podCidrs": ["10.99.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}})


def test_a_daemonset_that_does_not_exist_reads_as_none() -> None:
    with api_server(404, b'{"kind":"Status","code":404,"reason":"NotFound"}') as api:
        assert read_live_daemonset(SETTINGS, api) is None


def test_a_read_daemonset_is_its_managed_fields() -> None:
    with api_server(200, json.dumps(daemonset()).encode()) as api:
        live = read_live_daemonset(SETTINGS, api)
    assert live is not None
    assert live.applied_by_pulumi


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (403, b'{"kind":"Status","code":403,"reason":"Forbidden"}', "(403 Forbidden)"),
        (500, b"{}", "(500 Internal Server Error)"),
        (200, b"not json", "(JSONDecodeError)"),
    ],
)
def test_a_daemonset_that_cannot_be_read_refuses_to_plan(status: int, body: bytes, said: str) -> None:
    """Issue 44: the upgrade guard never rests on luck. A read that fails for any reason but 404 stops the program
    with what to do, before anything is registered; the API server's URL is shown without its userinfo."""
    with api_server(status, body) as api, pytest.raises(pulumi.RunError) as raised:
        read_live_daemonset(SETTINGS, api)
    text = str(raised.value)
    assert "DaemonSet kube-system/http-proxy from http://***@127.0.0.1:" in text, text
    assert said in text, text
    assert "run the preview again" in text, text
    assert PASSWORD not in text


def test_an_unreachable_api_server_refuses_to_plan() -> None:
    from kubernetes import client

    with socket.socket() as s:  # a port that nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{s.getsockname()[1]}"
        with pytest.raises(pulumi.RunError) as raised:
            read_live_daemonset(SETTINGS, client.ApiClient(configuration))
    assert "proxy-component:kubeconfig and proxy-component:context" in str(raised.value)


def test_the_kubernetes_client_is_a_dependency_not_an_extra() -> None:
    """No install decides what an upgrade replaces: the client the live read needs comes with the package."""
    requires = importlib.metadata.requires("proxy-component") or []
    core = [r for r in requires if "extra ==" not in r]
    assert any(r.replace(" ", "").startswith("kubernetes>=") for r in core), core
