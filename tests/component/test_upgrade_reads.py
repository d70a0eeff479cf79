"""What the stack program reads of its live DaemonSet before an upgrade (`stack.LiveDaemonSet`): which probe handlers
pulumi-kubernetes' client-side create still owns, and whether pulumi-kubernetes applied the object at all. The
managedFields below are those the test cluster returned for a DaemonSet made by a592121's program (a client-side
create: manager pulumi-kubernetes, operation Update), trimmed to the fields read here; the engine lane runs the
whole upgrade (tests/engine/test_upgrades.py)."""

from __future__ import annotations

import copy
from typing import Any

from proxy_component.stack import LiveDaemonSet

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
