"""The Service's trafficDistribution (`deployment.trafficDistribution`): PreferSameNode where the cluster's API server
takes it by default, unset (the behaviour before) where it would refuse it, and an explicit choice an older cluster
would refuse is an error naming both fields."""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.dataplane.workload import service
from proxy_component.settings import SettingsError, parse_settings

BASE: dict[str, Any] = {"cluster": {"podCidrs": ["10.244.0.0/16"]}}


def _spec(deployment: dict[str, Any], version: str | None) -> dict[str, Any]:
    cluster = {**BASE["cluster"], **({"kubernetesVersion": version} if version else {})}
    spec: dict[str, Any] = service(parse_settings({"cluster": cluster, "deployment": deployment}))["spec"]
    return spec


@pytest.mark.parametrize(
    ("version", "expected"),
    [(None, None), ("1.33", None), ("1.34", None), ("1.35", "PreferSameNode"), ("v1.36.2", "PreferSameNode")],
)
def test_auto_is_prefer_same_node_from_1_35_and_unset_before(version: str | None, expected: str | None) -> None:
    assert _spec({}, version).get("trafficDistribution") == expected


def test_an_explicit_choice_is_rendered_and_none_leaves_it_unset() -> None:
    assert _spec({"trafficDistribution": "PreferClose"}, None)["trafficDistribution"] == "PreferClose"
    assert _spec({"trafficDistribution": "PreferSameNode"}, "1.34")["trafficDistribution"] == "PreferSameNode"
    assert "trafficDistribution" not in _spec({"trafficDistribution": "none"}, "1.36")


def test_the_field_sits_in_a_fixed_place_so_the_output_is_byte_stable() -> None:
    keys = list(_spec({}, "1.35"))
    assert keys[keys.index("internalTrafficPolicy") :] == ["internalTrafficPolicy", "trafficDistribution", "ports"]


@pytest.mark.parametrize(("chosen", "version", "first"), [("PreferSameNode", "1.33", 34), ("PreferClose", "1.30", 31)])
def test_a_choice_the_clusters_api_server_refuses_is_an_error_naming_both_fields(
    chosen: str, version: str, first: int
) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({"cluster": {**BASE["cluster"], "kubernetesVersion": version},
                        "deployment": {"trafficDistribution": chosen}})  # fmt: skip
    assert caught.value.problems == [
        f"deployment.trafficDistribution: {chosen!r} is refused by the API server of cluster.kubernetesVersion "
        f"{version!r} (expected Kubernetes 1.{first} or later for {chosen}; auto or none leave it unset on older "
        "clusters)"
    ]


def test_an_unknown_value_names_what_is_accepted() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({**BASE, "deployment": {"trafficDistribution": "PreferZone"}})
    (problem,) = caught.value.problems
    assert problem.startswith("deployment.trafficDistribution: 'PreferZone'")
    assert "PreferSameNode" in problem


def test_its_error_and_the_metrics_ports_come_in_one_round() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({"cluster": {**BASE["cluster"], "kubernetesVersion": "1.33"},
                        "deployment": {"trafficDistribution": "PreferSameNode",
                                       "metrics": {"enabled": True, "port": 8888, "runAsUser": 61888}}})  # fmt: skip
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "deployment.trafficDistribution",
        "deployment.metrics.port",
        "deployment.metrics.runAsUser",
    ]
