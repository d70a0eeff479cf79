"""The installation layer's merge rules (proxy_component.layers): lists concatenated, objects merged, a value set by
both layers an error naming both sources, `cluster` only in the cluster's; each value's layer recorded."""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.layers import (
    Layer,
    check_installation,
    installation_layer,
    merge_layers,
    project_config,
    with_project_config,
)
from proxy_component.settings import SettingsError, parse_settings

PASSWORD = "Inst-pw-5521"
INSTALLATION: dict[str, Any] = {
    "proxy": {
        "upstream": {"url": f"http://svc:{PASSWORD}@proxy.corp.example:3128", "noUpstream": [".corp.example"]},
        "noProxy": [".corp.example", "registry.corp.example"],
    },
    "namespaces": ["default", "monitoring"],
    "runtimes": {"namespaces": {"monitoring": ["java"]}},
}
CLUSTER: dict[str, Any] = {
    "cluster": {"name": "prod-eu", "podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
    "proxy": {"noProxy": [".eu.internal", "registry.corp.example"]},
    "namespaces": ["apps", "default"],
    "runtimes": {"namespaces": {"apps": ["node"]}},
}


def _merge(installation: dict[str, Any], cluster: dict[str, Any]) -> Any:
    return merge_layers(
        Layer("installation", "stack organization/proxy-component/fleet", installation),
        Layer("cluster", "stack prod-eu", cluster),
    )


def test_lists_concatenate_installation_first_and_objects_merge() -> None:
    merged = _merge(INSTALLATION, CLUSTER)
    assert merged.data["proxy"]["noProxy"] == [".corp.example", "registry.corp.example", ".eu.internal"]
    assert merged.data["namespaces"] == ["default", "monitoring", "apps"]
    assert merged.data["runtimes"]["namespaces"] == {"monitoring": ["java"], "apps": ["node"]}
    assert merged.data["proxy"]["upstream"] == INSTALLATION["proxy"]["upstream"]
    assert merged.data["cluster"] == CLUSTER["cluster"]
    settings = parse_settings(merged.data)
    assert settings.proxy.upstream is not None
    assert settings.namespaces == ["apps", "default", "monitoring"]


def test_each_value_names_its_layer() -> None:
    merged = _merge(INSTALLATION, CLUSTER)
    assert merged.layer_of("proxy.noProxy[0]") == "installation"
    assert merged.layer_of("proxy.noProxy[2]") == "cluster"
    assert merged.layer_of("proxy.upstream.url") == "installation"
    assert merged.layer_of("cluster.podCidrs[0]") == "cluster"
    assert merged.layer_of("namespaces[2]") == "cluster"
    assert merged.layer_of("runtimes.namespaces.apps") == "cluster"


@pytest.mark.parametrize(
    ("cluster", "path"),
    [
        ({"proxy": {"upstream": {"url": "http://other.corp.example:3128"}}}, "proxy.upstream.url"),
        ({"proxy": {"httpProxy": "http://a.example:3128"}, "x": 1}, None),
        ({"deployment": {"maxClients": 10}}, "deployment.maxClients"),
        ({"runtimes": {"namespaces": {"monitoring": "node"}}}, "runtimes.namespaces.monitoring"),
    ],
)
def test_a_value_both_layers_set_is_an_error_naming_both_sources(cluster: dict[str, Any], path: str | None) -> None:
    installation = {**INSTALLATION, "deployment": {"maxClients": 2048}, "proxy": {**INSTALLATION["proxy"]}}
    if path is None:  # a key only the cluster sets is no conflict
        assert _merge(installation, cluster).data["proxy"]["httpProxy"] == "http://a.example:3128"
        return
    with pytest.raises(SettingsError) as caught:
        _merge(installation, cluster)
    (problem,) = caught.value.problems
    assert problem == (
        f"{path}: set by the installation (stack organization/proxy-component/fleet) and by this cluster "
        "(stack prod-eu); it belongs to one layer: remove it from one of them"
    )
    assert PASSWORD not in str(caught.value)


def test_the_same_value_in_both_layers_is_no_conflict() -> None:
    cluster = {**CLUSTER, "proxy": {"upstream": {"noUpstream": [".corp.example"]}}}
    merged = _merge(INSTALLATION, cluster)
    assert merged.data["proxy"]["upstream"]["noUpstream"] == [".corp.example"]


def test_the_installation_may_not_set_a_clusters_network() -> None:
    with pytest.raises(SettingsError) as caught:
        _merge({**INSTALLATION, "cluster": {"dnsDomain": "k8s.internal"}}, CLUSTER)
    assert caught.value.problems == [
        "cluster: belongs to each cluster stack (its ranges, domain and name), not to the installation (stack "
        "organization/proxy-component/fleet): move it to the cluster stacks' config"
    ]
    with pytest.raises(SettingsError):
        check_installation({"cluster": {}}, "stack fleet")


def test_a_trusted_ca_given_once_and_as_a_list_is_concatenated() -> None:
    merged = _merge({"proxy": {"upstream": {"url": "http://p.corp:3128", "trustedCa": "A"}}},
                    {"proxy": {"upstream": {"trustedCa": ["B", "A"]}}})  # fmt: skip
    assert merged.data["proxy"]["upstream"]["trustedCa"] == ["A", "B"]


def test_merging_is_independent_of_key_order() -> None:
    reordered = {key: INSTALLATION[key] for key in reversed(list(INSTALLATION))}
    assert parse_settings(_merge(reordered, CLUSTER).data) == parse_settings(_merge(INSTALLATION, CLUSTER).data)


def test_the_installation_stack_must_give_its_output() -> None:
    with pytest.raises(SettingsError) as caught:
        installation_layer(None, "fleet", lambda name: {"other": 1})
    assert caught.value.problems[0].startswith(
        "proxy-component:installationStack: stack 'fleet' has no output 'installation' this program can read"
    )
    with pytest.raises(SettingsError, match="both set"):
        installation_layer({"proxy": {}}, "fleet", lambda name: {})
    layer = installation_layer(None, "fleet", lambda name: {"installation": INSTALLATION})
    assert layer is not None
    assert layer.source == "stack fleet"
    assert installation_layer(None, None, lambda name: {}) is None


# --- project-level config (Pulumi.yaml `config:`) under the stack's ---------------------------------------

PROJECT_FILE = {
    "name": "egress",
    "config": {
        "proxy-component:proxy": {
            "value": {"upstream": {"url": "http://proxy.corp.example:3128"}, "noProxy": [".corp"]}
        },
        "proxy-component:namespaces": {"type": "array", "default": ["default"]},
        "proxy-component:deployment": {"type": "object", "description": "declared, no value"},
        "proxy-component:runtimes": {"java": True},
        "other:key": "x",
    },
}


def test_the_project_file_gives_values_defaults_and_plain_values_of_the_settings_keys() -> None:
    keys = ("proxy", "namespaces", "deployment", "runtimes", "cluster")
    assert project_config(PROJECT_FILE, keys) == {
        "proxy": {"upstream": {"url": "http://proxy.corp.example:3128"}, "noProxy": [".corp"]},
        "namespaces": ["default"],
        "runtimes": {"java": True},
    }
    assert project_config({"name": "p"}, keys) == {}


def test_a_stack_that_sets_one_entry_keeps_the_projects_object() -> None:
    """Pulumi hands the program the stack's `proxy` alone when the stack sets `proxy.noProxy[0]`: merged, not lost."""
    project = project_config(PROJECT_FILE, ("proxy", "namespaces"))
    merged = with_project_config({"proxy": {"noProxy": [".eu.internal"]}}, project, "stack eu")
    assert merged == {
        "proxy": {"upstream": {"url": "http://proxy.corp.example:3128"}, "noProxy": [".corp", ".eu.internal"]},
        "namespaces": ["default"],
    }
    # The value the program sees when the stack does not set the key is the project's: nothing to merge.
    assert with_project_config(project, project, "stack eu") == project


def test_a_value_the_project_and_the_stack_set_differently_names_both_files() -> None:
    project = project_config(PROJECT_FILE, ("proxy",))
    stack = {"proxy": {"upstream": {"url": "http://other.corp.example:3128"}}, "namespaces": "apps"}
    with pytest.raises(SettingsError) as caught:
        with_project_config(stack, {**project, "namespaces": ["default"]}, "stack eu")
    assert caught.value.problems == [
        "proxy.upstream.url: set by the project (Pulumi.yaml config) and by this stack (stack eu); it belongs to one "
        "layer: remove it from one of them",
        "namespaces: set by the project (Pulumi.yaml config) and by this stack (stack eu); it belongs to one layer: "
        "remove it from one of them",
    ]


def test_the_project_may_set_the_clusters_own_keys() -> None:
    merged = with_project_config({"cluster": {"name": "eu"}}, {"cluster": {"dnsDomain": "k8s.internal"}}, "stack eu")
    assert merged == {"cluster": {"dnsDomain": "k8s.internal", "name": "eu"}}
