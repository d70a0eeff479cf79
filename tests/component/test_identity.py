"""Resource identities: turning a setting on never renames (and so deletes and recreates) a live object."""

from __future__ import annotations

import copy
import json
import signal
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from pulumi.runtime.config import set_all_config

from proxy_component import ClusterProxy, ClusterProxyArgs, SettingsError, merge_values, parse_settings
from proxy_component.render import plain_plan
from tests.conftest import ROOT, Harness

DEV = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
CAPI = {
    "proxy-component:capi": {"enabled": True},
    "proxy-component:proxy": {"noProxy": ["fd00::/8"], "nodeHttpProxy": "http://proxy.corp:3128"},
}
# Each a change a platform team makes to a running stack; none may move an object that already exists.
CHANGES: dict[str, dict[str, Any]] = {
    "as shipped": {},
    "cluster.name unset": {"proxy-component:cluster": {**DEV["proxy-component:cluster"], "name": None}},
    "cluster.name changed": {"proxy-component:cluster": {**DEV["proxy-component:cluster"], "name": "renamed"}},
    "capi on": CAPI,
    "kyverno on": {"proxy-component:injection": {"kyverno": True}},
    "credentials": {"proxy-component:proxy": {"upstream": {"url": "http://u:p@proxy.corp:3128"}}},
    "helm values Secrets": {"proxy-component:helmValuesSecrets": [{"profile": "argo-cd", "namespace": "argocd"}]},
    "no firewall, control plane": {
        "proxy-component:deployment": {
            "firewall": {"enabled": False, "allowClusterDestinations": True},
            "controlPlane": True,
        }
    },
    "scheduling": {
        "proxy-component:deployment": {
            "imagePullSecrets": ["corp-registry"],
            "nodeSelector": {"node.kubernetes.io/pool": "egress"},
            "tolerateAllTaints": False,
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "egress", "operator": "Exists"}]}]
                    }
                }
            },
            "priorityClassName": "",
        }
    },
    "another pod CIDR": {"proxy-component:cluster": {**DEV["proxy-component:cluster"], "podCidrs": ["fd00:20::/56"]}},
}


def _config(change: dict[str, Any]) -> dict[str, str]:
    config = {**copy.deepcopy(DEV), **change}
    if config["proxy-component:cluster"].get("name") is None:
        config["proxy-component:cluster"] = {k: v for k, v in config["proxy-component:cluster"].items() if k != "name"}
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def _urns(harness: Harness, change: dict[str, Any]) -> dict[str, str]:
    from proxy_component.stack import main

    set_all_config(_config(change))
    interrupt = signal.getsignal(signal.SIGINT)  # main() sets the stack's own
    try:
        proxy = harness.program(main)
        harness.settle()
        assert proxy is not None, "a cluster stack's program returns its ClusterProxy"
        return {key: harness.value(resource.urn) for key, resource in proxy.resources.items()}
    finally:
        set_all_config({})
        signal.signal(signal.SIGINT, interrupt)


@pytest.mark.parametrize("change", list(CHANGES))
def test_no_setting_change_moves_an_existing_object(mocked: Harness, change: str) -> None:
    base = _urns(mocked, {})
    assert set(base) == {"config", "daemonset", "service", "proxy-config/default"}
    after = _urns(mocked, CHANGES[change])
    # Credentials turn the tinyproxy config and proxy-config from ConfigMaps into Secrets: a new object of
    # another kind (same name, no clash), created before the old one goes. Every other URN stays the same.
    kind_changes = {"config", "proxy-config/default"} if change == "credentials" else set()
    assert {key: after[key] for key in base if key not in kind_changes} == {
        key: urn for key, urn in base.items() if key not in kind_changes
    }
    for key in kind_changes:
        assert after[key].replace("core/v1:Secret", "core/v1:ConfigMap") == base[key]
    assert all("::test-" in urn for urn in base.values()), "children are named after the stack"


def test_a_stack_that_set_cluster_name_keeps_its_objects_through_an_alias(mocked: Harness) -> None:
    from proxy_component.stack import component_options

    named = parse_settings({"cluster": {"name": "ipv6-only", "podCidrs": ["10.0.0.0/16"]}})
    opts = mocked.program(lambda: component_options(named, k8s.Provider("cluster")))
    assert [a.name for a in opts.aliases or [] if isinstance(a, pulumi.Alias)] == ["ipv6-only"]
    unnamed = parse_settings({"cluster": {"podCidrs": ["10.0.0.0/16"]}})
    assert mocked.program(lambda: component_options(unnamed, k8s.Provider("cluster"))).aliases is None


def test_capi_from_a_stack_needs_the_management_cluster(mocked: Harness) -> None:
    from proxy_component.stack import main

    config = _config(CAPI)
    config["proxy-component:renderYamlToDirectory"] = ""
    set_all_config(config)
    try:
        # A RunError: the engine prints its message alone, with no Python stack trace (tests/engine).
        with pytest.raises(
            pulumi.RunError,
            match=r"invalid settings:\n  proxy-component:capi: .* \(expected proxy-component:managementKubeconfig",
        ):
            mocked.program(main)
    finally:
        set_all_config({})


def test_capi_secrets_go_to_the_management_provider(mocked: Harness) -> None:
    from proxy_component.stack import main

    config = _config(CAPI)
    config["proxy-component:managementKubeconfig"] = "apiVersion: v1\nkind: Config\n"
    set_all_config(config)
    try:
        mocked.program(main)
        registered = mocked.settle()
    finally:
        set_all_config({})
    secrets = {r.name: r.provider for r in registered if r.typ == "kubernetes:core/v1:Secret"}
    assert set(secrets) == {"test-systemd-proxy", "test-cluster-values"}
    assert all(p is not None and "::management::" in p for p in secrets.values())
    management = next(r for r in registered if r.typ == "pulumi:providers:kubernetes" and r.name == "management")
    assert management.inputs["kubeconfig"] == "apiVersion: v1\nkind: Config\n"
    assert "kubeconfig" in {k for k, v in management.raw_inputs.items() if isinstance(v, dict)}, "kept secret"


def test_the_service_family_is_replaced_not_patched() -> None:
    plan = {p.key: p for p in plain_plan(parse_settings({"cluster": {"podCidrs": ["10.0.0.0/16"]}}))}
    assert plan["service"].replace_on_changes == ("spec.ipFamilies",)
    assert all(not p.replace_on_changes for key, p in plan.items() if key != "service")


def test_outputs_in_settings_say_what_to_do_instead(mocked: Harness) -> None:
    def program() -> None:
        password = pulumi.Output.secret("s3cret")
        namespace = pulumi.Output.from_input("team-a")
        settings = {
            "cluster": {"podCidrs": ["10.0.0.0/16"]},
            "proxy": {"upstream": {"url": "http://proxy.corp:3128", "username": "u", "password": password}},
            "namespaces": ["default", namespace],
        }
        ClusterProxy("p", ClusterProxyArgs(settings=settings))

    with pytest.raises(SettingsError) as raised:
        mocked.program(program)
    assert raised.value.problems == [
        "proxy.upstream.password: is a pulumi.Output, which settings cannot take (read the secret as a string, e.g. "
        "pulumi.Config().require('proxyPassword') instead of require_secret: the component keeps credentials in "
        "Secrets and makes every output that carries them secret)",
        "namespaces[1]: is a pulumi.Output, which settings cannot take (pass the plain value you gave the resource "
        "(e.g. the Namespace's metadata.name string) and order with depends_on; the set of objects cannot wait for "
        "an Output)",
    ]
    assert "s3cret" not in str(raised.value)


def test_merge_values_takes_the_components_outputs(mocked: Harness) -> None:
    def program() -> pulumi.Output[Any]:
        proxy = ClusterProxy("p", ClusterProxyArgs(settings={"cluster": {"podCidrs": ["10.0.0.0/16"]}}))
        return merge_values({"global": {"domain": "argocd.example.com"}}, proxy.helm_values["argo-cd"])

    merged = mocked.value(mocked.program(program))
    assert merged["global"] == {"domain": "argocd.example.com"}
    assert {e["name"] for e in merged["repoServer"]["env"]} >= {"HTTPS_PROXY", "NO_PROXY", "https_proxy"}
