"""The Kyverno ClusterPolicy: what it injects, where, and what it leaves alone."""

from __future__ import annotations

import copy
from typing import Any

import jmespath
import jmespath.functions
import pytest

from proxy_component.render import plain_values
from proxy_component.render.env import ENV_NAMES, additions, pod_env
from proxy_component.render.kyverno import POLICY_NAME, cluster_policy
from proxy_component.render.runtimes import python_no_proxy
from proxy_component.settings import Settings, parse_settings

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


def _kyverno_split(text: str, sep: str) -> list[str]:
    return text.split(sep)


class _KyvernoFunctions(jmespath.functions.Functions):
    """Kyverno's JMESPath extension the policy uses: split(string, separator) (Go's strings.Split)."""

    @jmespath.functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_split(self, text: str, sep: str) -> list[str]:
        return _kyverno_split(text, sep)


_OPTIONS = jmespath.Options(custom_functions=_KyvernoFunctions())


def _holds(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    key = condition["key"]
    assert key.startswith("{{ "), key
    assert key.endswith(" }}"), key
    value = jmespath.search(key[3:-3], context, options=_OPTIONS)
    assert condition["operator"] in ("Equals", "GreaterThanOrEquals")
    if condition["operator"] == "GreaterThanOrEquals":
        return bool(value >= condition["value"])
    return bool(value == condition["value"])


def _admit(policy: dict[str, Any], pod: dict[str, Any], namespace: str, refresh: bool) -> dict[str, Any]:
    """Pod CREATE through the inject-containers rule as Kyverno runs it: each foreach over the containers, its
    preconditions per element, its strategic merge of `env` by name. `refresh`: later foreach entries see the
    Pod as patched by earlier ones (else all see the original): the policy must not depend on which."""
    rule = _rule(policy, "inject-containers")
    original = copy.deepcopy(pod)
    current = copy.deepcopy(pod)
    for foreach in rule["mutate"]["foreach"]:
        seen = current if refresh else original
        for index, element in enumerate(seen["spec"]["containers"]):
            context = {"request": {"object": seen, "namespace": namespace}, "element": element}
            if not all(_holds(c, context) for c in foreach["preconditions"]["all"]):
                continue
            target = current["spec"]["containers"][index]
            env = target.setdefault("env", [])
            for entry in foreach["patchStrategicMerge"]["spec"]["containers"][0]["env"]:
                existing = [e for e in env if e["name"] == entry["name"]]
                if existing:
                    existing[0].clear()
                    existing[0].update(entry)  # strategic merge by name replaces: the preconditions prevent it
                else:
                    env.append(dict(entry))
    return current


CONTAINERS: list[dict[str, Any]] = [
    {"name": "plain", "image": "i"},
    {"name": "own-java", "image": "i", "env": [{"name": "JDK_JAVA_OPTIONS", "value": "-Xmx1g"}]},
    {"name": "opted-out", "image": "i", "env": [{"name": "HTTP_PROXY", "value": ""}]},
    {"name": "no-proxy-star", "image": "i", "env": [{"name": "NO_PROXY", "value": "*"}]},
    {"name": "lower", "image": "i", "env": [{"name": "no_proxy", "value": "mine"}]},
    {"name": "from-config", "image": "i", "envFrom": [{"configMapRef": {"name": "proxy-config"}}]},
    {"name": "from-secret", "image": "i", "envFrom": [{"secretRef": {"name": "proxy-config"}}]},
    {
        "name": "other-config",
        "image": "i",
        "envFrom": [{"configMapRef": {"name": "app"}}],
        "env": [{"name": "A", "value": "b"}],
    },
]
RUNTIME_SETTINGS: list[dict[str, Any]] = [
    {},
    {"java": True, "node": True},
    {"python": True, "namespaces": {"legacy": [], "apps": ["node"]}},
    {"namespaces": {"apps": ["java", "python"], "web": ["node"]}},
]
ANNOTATIONS: list[dict[str, str] | None] = [
    None,
    {"proxy-component.io/runtimes": "none"},
    {"proxy-component.io/runtimes": "java"},
    {"proxy-component.io/runtimes": "node,python"},
    {"proxy-component.io/runtimes": "java,node,python"},
    {"other": "x"},
]


@pytest.mark.parametrize("runtimes", RUNTIME_SETTINGS)
@pytest.mark.parametrize("refresh", [True, False])
def test_the_policy_gives_each_container_what_the_one_decision_gives(runtimes: dict[str, Any], refresh: bool) -> None:
    """The policy's preconditions, evaluated by a JMESPath engine (with Kyverno's split), and the strategic merge,
    give every container exactly `additions(container, pod_env(values of its Pod's selection))`: the six are one
    group, the runtime variables follow the annotation, else the namespace, else the cluster."""
    settings = parse_settings(
        {"cluster": {"podCidrs": ["fd00:10:244::/56"], "serviceCidrs": ["fd00:10:96::/108"]}, "proxy": {"noProxy": ["fd00::/8"]},
         "injection": {"kyverno": True}, "runtimes": runtimes}
    )  # fmt: skip
    values = plain_values(settings)
    policy = cluster_policy(settings, values)
    checked = 0
    for namespace in ("default", "apps", "web", "legacy"):
        for annotated in ANNOTATIONS:
            pod = {"metadata": {"annotations": annotated} if annotated else {}, "spec": {"containers": CONTAINERS}}
            admitted = _admit(policy, pod, namespace, refresh)
            selection = settings.runtimes.select(namespace, annotated)
            entries = pod_env(settings, values.select(selection))
            for before, after in zip(CONTAINERS, admitted["spec"]["containers"], strict=True):
                expected = [*before.get("env", []), *additions(before, entries)]
                got = after.get("env", [])
                by_name = {e["name"]: e for e in got}  # the policy adds the runtime variables first: order aside
                assert len(by_name) == len(got) == len(expected), (namespace, annotated, before["name"])
                assert by_name == {e["name"]: e for e in expected}, (namespace, annotated, before["name"])
                checked += 1
    assert checked == 4 * len(ANNOTATIONS) * len(CONTAINERS)


def test_an_opted_out_container_gets_nothing_and_its_neighbour_everything() -> None:
    settings = parse_settings({**BASE, "runtimes": {"java": True, "node": True}})
    pod = {"metadata": {}, "spec": {"containers": [CONTAINERS[0], CONTAINERS[2]]}}
    admitted = _admit(cluster_policy(settings, plain_values(settings)), pod, "default", refresh=True)
    plain, opted_out = admitted["spec"]["containers"]
    assert [e["name"] for e in plain["env"]] == ["NODE_USE_ENV_PROXY", "JDK_JAVA_OPTIONS", *ENV_NAMES]
    assert opted_out["env"] == [{"name": "HTTP_PROXY", "value": ""}]


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
