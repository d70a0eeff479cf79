"""The legacy Kyverno ClusterPolicy's shape: its rules, exclusions and literals. What it injects is judged by
Kyverno's own engine over the shared table (tests/kyverno, `kyverno apply`), no longer by a JMESPath stand-in."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from proxy_component.render import plain_values
from proxy_component.render.env import ENV_NAMES
from proxy_component.render.kyverno import POLICY_NAME, cluster_policy
from proxy_component.render.runtimes import python_no_proxy
from proxy_component.settings import Settings, parse_settings

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = {"cluster": {"podCidrs": ["10.244.0.0/16"]}, "injection": {"kyverno": True}}


def _policy(**overrides: Any) -> tuple[Settings, dict[str, Any]]:
    settings = parse_settings({**BASE, **overrides})
    return settings, cluster_policy(settings, plain_values(settings))


def _rule(policy: dict[str, Any], name: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [r for r in policy["spec"]["rules"] if r["name"] == name]
    assert len(rules) == 1
    return rules[0]


def _env_names(foreach: dict[str, Any], field: str) -> list[str]:
    return [e["name"] for e in foreach["patchStrategicMerge"]["spec"][field][0]["env"]]


def test_one_rule_per_container_list_runtime_variables_first_then_the_six() -> None:
    _, policy = _policy()
    assert policy["metadata"]["name"] == POLICY_NAME
    assert policy["metadata"]["annotations"]["pod-policies.kyverno.io/autogen-controllers"] == "none"
    for name, field, kind in (
        ("inject-containers", "containers", "Pod"),
        ("inject-initcontainers", "initContainers", "Pod"),
        ("inject-ephemeralcontainers", "ephemeralContainers", "Pod/ephemeralcontainers"),
    ):
        rule = _rule(policy, name)
        assert rule["match"] == {"any": [{"resources": {"kinds": [kind]}}]}
        foreach = rule["mutate"]["foreach"]
        assert [_env_names(f, field) for f in foreach] == [
            ["NODE_USE_ENV_PROXY"],
            ["JDK_JAVA_OPTIONS"],
            list(ENV_NAMES),
            list(ENV_NAMES),
        ]
        assert "JAVA_TOOL_OPTIONS" not in repr(policy), "a workload's own JAVA_TOOL_OPTIONS is never written"
        assert all(f["list"] == f"request.object.spec.{field}" for f in foreach)
        assert all(f["patchStrategicMerge"]["spec"][field][0]["(name)"] == "{{ element.name }}" for f in foreach)


def test_optional_lists_are_guarded() -> None:
    _, policy = _policy()
    assert "preconditions" not in _rule(policy, "inject-containers")
    guard = _rule(policy, "inject-initcontainers")["preconditions"]["all"][0]
    assert guard["key"] == "{{ request.object.spec.initContainers[] || `[]` | length(@) }}"


@pytest.mark.parametrize(
    ("injection", "namespaces", "annotation"),
    [
        ({}, ["kube-system"], "proxy-component.io/inject"),
        (
            {"excludeNamespaces": ["legacy", "kube-system", "flux-system"], "optOutAnnotation": "example.com/no-proxy"},
            ["flux-system", "kube-system", "legacy"],
            "example.com/no-proxy",
        ),
    ],
)
def test_exclusions_and_opt_out(injection: dict[str, Any], namespaces: list[str], annotation: str) -> None:
    _, policy = _policy(injection={"kyverno": True, **injection})
    assert _rule(policy, "inject-containers")["exclude"] == {
        "any": [
            {"resources": {"namespaces": namespaces}},
            {"resources": {"kinds": ["Pod"], "annotations": {annotation: "false"}}},
        ]
    }


def _six(policy: dict[str, Any], python: bool) -> list[dict[str, Any]]:
    foreach = _rule(policy, "inject-containers")["mutate"]["foreach"]
    six = [f for f in foreach if _env_names(f, "containers") == list(ENV_NAMES)]
    assert [f["preconditions"]["all"][-1]["value"] for f in six] == [False, True]  # python not selected, selected
    env: list[dict[str, Any]] = six[python]["patchStrategicMerge"]["spec"]["containers"][0]["env"]
    return env


def test_literals_without_credentials_no_proxy_per_the_python_runtime() -> None:
    settings, policy = _policy(cluster={"podCidrs": ["fd00:10:244::/56"]})
    full, python = str(settings.no_proxy()), python_no_proxy(settings.no_proxy())
    assert full != python
    assert _six(policy, False)[4:] == [{"name": "NO_PROXY", "value": full}, {"name": "no_proxy", "value": python}]
    assert _six(policy, True)[4:] == [{"name": "NO_PROXY", "value": python}, {"name": "no_proxy", "value": python}]
    assert policy["spec"]["rules"][0]["name"] == "inject-containers"


def test_credentials_use_secret_refs_and_a_clone_of_the_secret() -> None:
    _, policy = _policy(proxy={"httpProxy": "http://u:hunter2@proxy.corp:3128"})
    assert "hunter2" not in repr(policy)
    clone = _rule(policy, "clone-proxy-config")
    assert clone["generate"]["clone"] == {"namespace": "kube-system", "name": "proxy-config"}
    assert clone["generate"]["synchronize"] is True
    assert clone["exclude"] == {"any": [{"resources": {"names": ["kube-system"]}}]}
    assert _six(policy, False)[2] == {
        "name": "HTTPS_PROXY",
        "valueFrom": {"secretKeyRef": {"name": "proxy-config", "key": "HTTPS_PROXY"}},
    }
    # NO_PROXY is no secret: a literal, so a cloned Secret of another namespace's selection serves every Pod.
    assert "value" in _six(policy, True)[4]
    names = [_env_names(f, "containers") for f in _rule(policy, "inject-containers")["mutate"]["foreach"]]
    assert ["JDK_JAVA_OPTIONS"] not in names, "JVMs get no options they cannot use (credentials)"


def test_no_excluded_namespaces_leaves_out_the_clause_instead_of_excluding_everything() -> None:
    _, policy = _policy(injection={"kyverno": True, "excludeNamespaces": []})
    exclude = _rule(policy, "inject-containers")["exclude"]["any"]
    assert exclude == [{"resources": {"kinds": ["Pod"], "annotations": {"proxy-component.io/inject": "false"}}}]


def test_the_clone_never_targets_its_source_or_namespaces_the_component_manages() -> None:
    _, policy = _policy(
        proxy={"httpProxy": "http://u:pw@proxy.corp:3128"},
        injection={"kyverno": True, "excludeNamespaces": []},
        deployment={"namespace": "egress"},
        namespaces=["apps"],
    )
    assert _rule(policy, "clone-proxy-config")["exclude"] == {"any": [{"resources": {"names": ["apps", "egress"]}}]}


def test_an_injection_only_policy_never_blocks_pod_creation() -> None:
    settings = parse_settings({"cluster": {"podCidrs": ["10.0.0.0/16"]}, "injection": {"kyverno": True}})
    assert cluster_policy(settings, plain_values(settings))["spec"]["failurePolicy"] == "Ignore"


def test_scripts_kyverno_refuses_an_unknown_target_before_building_anything(tmp_path: Path) -> None:
    """scripts/kyverno builds `cli`, `admission` and `background`; any other name is an error naming it and the three,
    and nothing is built or downloaded (the cache stays empty)."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/kyverno"), "admission", "reports"],
        capture_output=True, text=True, check=False, env={**os.environ, "PROXY_COMPONENT_CACHE": str(tmp_path)},
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "scripts/kyverno: unknown target 'reports' (expected cli, admission or background)\n"
    assert list(tmp_path.iterdir()) == []
