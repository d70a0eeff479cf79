"""Images and scheduling a corporate cluster needs: pull Secrets, nodeSelector, tolerations, node affinity and the
PriorityClass, on the DaemonSet (both containers share its pod spec) and on `check --probe`'s pods. The error cases
are fixtures in settings_errors/; tests/cluster/test_scheduling_live.py applies them to an API server."""

from __future__ import annotations

import random
from typing import Any

import pytest

from proxy_component.dataplane.workload import daemonset
from proxy_component.layers import Layer, merge_layers
from proxy_component.live.check import _eligible, _matches
from proxy_component.probe import probe_pod
from proxy_component.settings import DEFAULT_PRIORITY_CLASS, NodeSelectorRequirement, SettingsError, parse_settings

CLUSTER = {"podCidrs": ["10.244.0.0/16"], "nodeCidrs": ["192.168.0.0/24"]}
OURS = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
    {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate"]},
    {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]},
]
SCHEDULING: dict[str, Any] = {
    "imagePullSecrets": ["mirror-pull", "corp-registry", "mirror-pull"],
    "nodeSelector": {"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "egress", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "node.kubernetes.io/pool", "operator": "In", "values": ["b", "a"]}]},
                    {"matchExpressions": [{"key": "egress", "operator": "Exists"}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]},
                }
            ],
        }
    },
    "priorityClassName": "egress-critical",
}


def _pod_spec(deployment: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = daemonset(parse_settings({"cluster": CLUSTER, "deployment": deployment}), "d")["spec"]
    return spec["template"]["spec"]  # type: ignore[no-any-return]


def test_by_default_the_proxy_is_node_critical_on_every_linux_node_and_tolerates_every_taint() -> None:
    spec = _pod_spec({})
    assert spec["priorityClassName"] == DEFAULT_PRIORITY_CLASS == "system-node-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert "imagePullSecrets" not in spec
    assert spec["affinity"] == {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": OURS}
        ]}}
    }  # fmt: skip


def test_the_settings_reach_the_pod_spec_both_containers_share() -> None:
    spec = _pod_spec(SCHEDULING)
    assert spec["imagePullSecrets"] == [{"name": "corp-registry"}, {"name": "mirror-pull"}]
    assert spec["nodeSelector"] == {
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/pool": "general",
        "topology.kubernetes.io/zone": "eu-1a",
    }
    assert list(spec["nodeSelector"]) == sorted(spec["nodeSelector"])
    assert spec["tolerations"] == [
        {"operator": "Exists"},  # the catch-all first, the settings' after it
        {"key": "dedicated", "operator": "Equal", "value": "egress", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    node = spec["affinity"]["nodeAffinity"]
    # A node must meet the proxy's own expressions and one of the user's terms: ours lead each of them.
    assert node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [*OURS, {"key": "egress", "operator": "Exists"}]},
        {"matchExpressions": [*OURS, {"key": "node.kubernetes.io/pool", "operator": "In", "values": ["a", "b"]}]},
    ]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 50, "preference": {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["8"]}]}}
    ]
    assert spec["priorityClassName"] == "egress-critical"
    assert [c["name"] for c in [*spec["initContainers"], *spec["containers"]]] == ["firewall", "tinyproxy"]


def test_control_plane_nodes_stay_excluded_in_every_user_term_unless_asked_for() -> None:
    terms = _pod_spec({**SCHEDULING, "controlPlane": True})["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [t["matchExpressions"][:2] for t in terms] == [OURS[1:], OURS[1:]]


def test_without_the_catch_all_only_the_settings_tolerations_and_none_is_no_key() -> None:
    spec = _pod_spec({"tolerateAllTaints": False, "tolerations": SCHEDULING["tolerations"]})
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "egress", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ]
    assert "tolerations" not in _pod_spec({"tolerateAllTaints": False})


def test_an_empty_priority_class_name_sets_none_and_system_classes_are_accepted() -> None:
    assert "priorityClassName" not in _pod_spec({"priorityClassName": ""})
    assert _pod_spec({"priorityClassName": "system-cluster-critical"})["priorityClassName"] == "system-cluster-critical"


def test_the_same_settings_in_any_order_and_spelling_render_the_same_bytes() -> None:
    base = daemonset(parse_settings({"cluster": CLUSTER, "deployment": SCHEDULING}), "d")
    shuffled: dict[str, Any] = {
        "priority_class_name": "egress-critical",
        "image_pull_secrets": ["corp-registry", "mirror-pull"],
        "node_selector": dict(reversed(list(SCHEDULING["nodeSelector"].items()))),
        "tolerations": [*reversed(SCHEDULING["tolerations"]), SCHEDULING["tolerations"][0]],
        "affinity": {
            "node_affinity": {
                "required_during_scheduling_ignored_during_execution": {
                    "node_selector_terms": list(
                        reversed(
                            [
                                {"matchExpressions": [{"key": "node.kubernetes.io/pool", "operator": "In",
                                                       "values": ["a", "b", "a"]}]},
                                {"matchExpressions": [{"key": "egress", "operator": "Exists"}]},
                            ]
                        )
                    )
                },
                "preferredDuringSchedulingIgnoredDuringExecution": SCHEDULING["affinity"]["nodeAffinity"][
                    "preferredDuringSchedulingIgnoredDuringExecution"
                ],
            }
        },
    }  # fmt: skip
    assert daemonset(parse_settings({"cluster": CLUSTER, "deployment": shuffled}), "d") == base
    random.seed(7)
    for _ in range(5):
        tolerations = random.sample(SCHEDULING["tolerations"], k=2)
        same = daemonset(
            parse_settings({"cluster": CLUSTER, "deployment": {**SCHEDULING, "tolerations": tolerations}}), "d"
        )
        assert same == base


def test_the_probe_pods_take_the_pull_secrets_node_selector_and_tolerations() -> None:
    settings = parse_settings({"cluster": CLUSTER, "deployment": SCHEDULING})
    spec = probe_pod(settings, "node-a", "run1", 0, "true", 60)["spec"]
    proxy = daemonset(settings, "d")["spec"]["template"]["spec"]
    assert spec["imagePullSecrets"] == proxy["imagePullSecrets"] == [{"name": "corp-registry"}, {"name": "mirror-pull"}]
    assert spec["nodeSelector"] == proxy["nodeSelector"]
    assert spec["tolerations"] == proxy["tolerations"]
    # Pinned by nodeName to a node that runs a proxy pod: no affinity of its own, and no PriorityClass (a system-
    # class would be refused outside kube-system where critical classes are limited, and a probe must preempt none).
    assert "affinity" not in spec
    assert "priorityClassName" not in spec
    off = parse_settings({"cluster": CLUSTER, "deployment": {"tolerateAllTaints": False}})
    assert "tolerations" not in probe_pod(off, "node-a", "run1", 0, "true", 60)["spec"]


def test_layers_merge_node_selectors_by_key_and_concatenate_tolerations_and_pull_secrets() -> None:
    installation = Layer("installation", "stack installation", {"deployment": {
        "imagePullSecrets": ["corp-registry"], "nodeSelector": {"node.kubernetes.io/pool": "general"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }})  # fmt: skip
    cluster = Layer("cluster", "stack prod-eu", {"deployment": {
        "imagePullSecrets": ["mirror-pull"], "nodeSelector": {"topology.kubernetes.io/zone": "eu-1a"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }})  # fmt: skip
    d = parse_settings(merge_layers(installation, cluster).data).deployment
    assert d.image_pull_secrets == ["corp-registry", "mirror-pull"]
    assert d.node_selector == {"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a"}
    assert [t.key for t in d.tolerations] == ["dedicated", "gpu"]
    clash = Layer("cluster", "stack prod-eu", {"deployment": {"nodeSelector": {"node.kubernetes.io/pool": "egress"}}})
    with pytest.raises(SettingsError) as caught:
        merge_layers(installation, clash)
    assert caught.value.problems == [
        "deployment.nodeSelector.node.kubernetes.io/pool: set by the installation (stack installation) and by this "
        "cluster (stack prod-eu); it belongs to one layer: remove it from one of them"
    ]


def _node(labels: dict[str, str], *taints: tuple[str, str, str]) -> dict[str, Any]:
    """A Node as the API server's JSON (check reads the raw response): a taint's empty value is absent."""
    spec = {"taints": [{"key": k, **({"value": v} if v else {}), "effect": e} for k, v, e in taints]} if taints else {}
    return {"metadata": {"name": "n", "labels": {"kubernetes.io/os": "linux", **labels}}, "spec": spec}


@pytest.mark.parametrize(
    ("labels", "taints", "eligible"),
    [
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a", "egress": ""}, [], True),
        ({"node.kubernetes.io/pool": "batch", "topology.kubernetes.io/zone": "eu-1a", "egress": ""}, [], False),
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a"}, [], False),  # no term
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a", "egress": ""},
         [("dedicated", "egress", "NoSchedule")], True),
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a", "egress": ""},
         [("dedicated", "batch", "NoSchedule")], False),  # another value
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a", "egress": ""},
         [("gpu", "", "NoExecute")], False),
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a", "egress": ""},
         [("gpu", "", "PreferNoSchedule"), ("node.kubernetes.io/unschedulable", "", "NoSchedule")], True),
        ({"node.kubernetes.io/pool": "general", "topology.kubernetes.io/zone": "eu-1a", "egress": ""},
         [("node.kubernetes.io/unreachable", "", "NoExecute")], True),
    ],
)  # fmt: skip
def test_check_judges_only_the_nodes_the_settings_select(
    labels: dict[str, str], taints: list[tuple[str, str, str]], eligible: bool
) -> None:
    """`check`'s proxy-missing-on-nodes follows the DaemonSet controller: a node the settings keep the proxy off is
    not missing it (tests/cluster/test_scheduling_live.py runs check against the real controller's placement)."""
    settings = parse_settings({"cluster": CLUSTER, "deployment": {**SCHEDULING, "tolerateAllTaints": False}})
    assert _eligible(settings, _node(labels, *taints)) is eligible
    every_taint = parse_settings({"cluster": CLUSTER, "deployment": SCHEDULING})
    assert _eligible(every_taint, _node(labels, *taints)) is ("batch" not in labels.values() and "egress" in labels)


@pytest.mark.parametrize(
    ("operator", "values", "label", "matches"),
    [
        ("In", ["a", "b"], "b", True), ("In", ["a"], None, False), ("NotIn", ["a"], None, True),
        ("NotIn", ["a"], "a", False), ("Exists", [], "", True), ("DoesNotExist", [], "x", False),
        ("Gt", ["8"], "16", True), ("Gt", ["8"], "8", False), ("Lt", ["8"], "4", True), ("Gt", ["8"], "many", False),
    ],
)  # fmt: skip
def test_node_selector_requirements_match_as_the_scheduler_reads_them(
    operator: str, values: list[str], label: str | None, matches: bool
) -> None:
    requirement = NodeSelectorRequirement(key="k", operator=operator, values=values)
    assert _matches(requirement, {} if label is None else {"k": label}) is matches


def test_the_provider_reads_the_settings_as_another_language_sends_them() -> None:
    """Nested inputs arrive with snake_case keys and every number as a float (protobuf's one number type): the
    component provider gives the model the YAML file's keys and integral numbers as integers."""
    from proxy_component.provider import settings_from_inputs

    sent = {
        "deployment": {
            "port": 8888.0,
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute", "toleration_seconds": 30.0}],
            "affinity": {"node_affinity": {"preferred_during_scheduling_ignored_during_execution": [
                {"weight": 10.0, "preference": {"match_expressions": [{"key": "cores", "operator": "Gt",
                                                                       "values": ["8"]}]}}
            ]}},
            "node_selector": {"node.kubernetes.io/pool": "egress"},
        }
    }  # fmt: skip
    d = parse_settings(settings_from_inputs(sent)).deployment
    assert (d.port, d.tolerations[0].toleration_seconds) == (8888, 30)
    assert d.affinity is not None
    assert d.affinity.node_affinity is not None
    assert d.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution[0].weight == 10
    assert d.node_selector == {"node.kubernetes.io/pool": "egress"}, "a map's keys stay as given"
    with pytest.raises(SettingsError) as caught:
        parse_settings(settings_from_inputs({"deployment": {"tolerations": [{"key": "gpu", "effect": "NoExecute",
                                                                              "toleration_seconds": 2.5}]}}))  # fmt: skip
    assert caught.value.problems == [
        "deployment.tolerations[0].tolerationSeconds: 2.5: Input should be a valid integer"
    ]
