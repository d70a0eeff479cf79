"""The MutatingAdmissionPolicy rendering: its API version, where the values are, where it applies.

What it injects is proven against the real kube-apiserver over the shared table (tests/engine/test_admission_live.py);
these hold the parts a reader of the YAML relies on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import V1APIResource, V1APIResourceList

from proxy_component.render import manifests, plain_values
from proxy_component.render.admission import (
    POLICY_NAME,
    VALUE_VARIABLES,
    admission_api_version,
    admission_objects,
    admission_policy,
    admission_policy_binding,
    cel_literal,
)
from proxy_component.render.digest import settings_digest
from proxy_component.settings import SettingsError, parse_settings

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = {"cluster": {"podCidrs": ["10.244.0.0/16"]}, "injection": {"admission": True}}


def _settings(**overrides: Any) -> Any:
    return parse_settings({**BASE, **overrides})


@pytest.mark.parametrize(
    ("version", "api"),
    [
        (None, "admissionregistration.k8s.io/v1"),
        ("1.36", "admissionregistration.k8s.io/v1"),
        ("v1.37.1", "admissionregistration.k8s.io/v1"),
        ("1.35", "admissionregistration.k8s.io/v1beta1"),
        ("v1.34.2", "admissionregistration.k8s.io/v1beta1"),
    ],
)
def test_the_api_version_follows_the_clusters_kubernetes_version(version: str | None, api: str) -> None:
    settings = _settings(cluster={"podCidrs": ["10.244.0.0/16"], "kubernetesVersion": version})
    assert admission_api_version(settings) == api
    objects = admission_objects(settings, plain_values(settings))
    assert [(o["apiVersion"], o["kind"]) for o in objects] == [
        (api, "MutatingAdmissionPolicy"),
        (api, "MutatingAdmissionPolicyBinding"),
    ]


def test_a_cluster_without_mutating_admission_policies_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        _settings(cluster={"podCidrs": ["10.244.0.0/16"], "kubernetesVersion": "1.33"})
    assert str(caught.value).endswith(
        "injection.admission: cluster.kubernetesVersion '1.33' has no MutatingAdmissionPolicy (expected Kubernetes "
        "1.34 or later: v1beta1 on 1.34 and 1.35 with the MutatingAdmissionPolicy feature gate and runtime-config, v1 "
        "from 1.36; or injection.kyverno instead)"
    )


@pytest.mark.parametrize("bad", ["1.x", "2.0", "1.36.3-rc.1", "136", ""])
def test_a_kubernetes_version_that_is_none_is_refused(bad: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _settings(cluster={"kubernetesVersion": bad})
    assert f"cluster.kubernetesVersion: {bad!r} is not a Kubernetes version (expected e.g. '1.35' or 'v1.36.3')" in str(
        caught.value
    )


def _values_of(policy: dict[str, Any]) -> dict[str, str]:
    names = set(VALUE_VARIABLES.values())
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"] if v["name"] in names}


def test_each_value_that_follows_the_network_is_one_literal_variable_and_nothing_else_holds_it() -> None:
    settings = _settings(runtimes={"java": True}, cluster={"podCidrs": ["10.244.0.0/16", "fd00::/48"]})
    values = plain_values(settings)
    policy = admission_policy(settings, values)
    assert "paramKind" not in policy["spec"]
    assert "paramRef" not in admission_policy_binding(settings)["spec"]
    assert _values_of(policy) == {
        "httpProxy": cel_literal(settings.http_proxy),
        "httpsProxy": cel_literal(settings.https_proxy),
        "noProxy": cel_literal(str(settings.no_proxy())),
        "noProxyPython": cel_literal(values.no_proxy_python),
        "jdkJavaOptions": cel_literal(values.java_options),
        "valuesDigest": cel_literal(settings_digest(settings)),
    }
    # The values come first, and the expressions that place them read the variables, never a copy of a value.
    names = [v["name"] for v in policy["spec"]["variables"]]
    assert names[:6] == ["httpProxy", "httpsProxy", "noProxy", "noProxyPython", "jdkJavaOptions", "valuesDigest"]
    rest = yaml.safe_dump([policy["spec"]["variables"][6:], policy["spec"]["mutations"]])
    for literal in _values_of(policy).values():
        assert literal[1:-1] not in rest
    # A NO_PROXY change moves the NO_PROXY variables alone (and JDK_JAVA_OPTIONS, which carries it, and the digest
    # of them all): the same policy otherwise, the same binding.
    other = _settings(runtimes={"java": True}, cluster={"podCidrs": ["10.244.0.0/16", "fd00::/48"]},
                      proxy={"noProxy": [".corp.example"]})  # fmt: skip
    changed = admission_policy(other, plain_values(other))
    moved = {k for k, v in _values_of(changed).items() if _values_of(policy)[k] != v}
    assert moved == {"noProxy", "noProxyPython", "jdkJavaOptions", "valuesDigest"}
    for key in moved:
        changed["spec"]["variables"][names.index(key)] = policy["spec"]["variables"][names.index(key)]
    assert changed == policy
    assert admission_policy_binding(other) == admission_policy_binding(settings)


def test_with_credentials_the_policy_holds_no_url_and_only_namespaces_with_the_secret_are_injected() -> None:
    settings = _settings(
        proxy={"httpProxy": "http://u:hunter2@proxy.corp:3128"}, deployment={"enabled": False}, namespaces=["apps"]
    )
    objects = admission_objects(settings, plain_values(settings))
    text = yaml.safe_dump_all(objects)
    assert "hunter2" not in text
    assert "proxy.corp" not in text
    policy, _ = objects
    assert set(_values_of(policy)) == {"noProxy", "noProxyPython", "valuesDigest"}
    assert policy["spec"]["matchConditions"][1] == {
        "name": "has-proxy-config-secret",
        "expression": "request.namespace in ['apps']",
    }
    assert (
        "'secretKeyRef': dyn({'name': dyn('proxy-config'), 'key': dyn('HTTPS_PROXY')})"
        in next(v for v in policy["spec"]["variables"] if v["name"] == "entries")["expression"]
    )


def test_the_binding_leaves_out_the_excluded_namespaces_and_the_proxys_own() -> None:
    settings = _settings(
        deployment={"namespace": "egress"},
        injection={"admission": True, "excludeNamespaces": ["legacy", "kube-system"]},
    )
    binding = admission_policy_binding(settings)
    assert binding["spec"] == {
        "policyName": POLICY_NAME,
        "matchResources": {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["egress", "kube-system", "legacy"],
                    }
                ]
            }
        },
    }
    none = _settings(deployment={"enabled": False, "namespace": "egress"}, proxy={"httpProxy": "http://proxy.corp:3128"},
                     injection={"admission": True, "excludeNamespaces": []})  # fmt: skip
    assert admission_policy_binding(none)["spec"]["matchResources"] == {}


def test_the_opt_out_annotation_is_a_match_condition() -> None:
    settings = _settings(injection={"admission": True, "optOutAnnotation": "example.com/no-proxy"})
    policy = admission_policy(settings, plain_values(settings))
    assert policy["spec"]["matchConditions"] == [
        {
            "name": "not-opted-out",
            "expression": "!(has(object.metadata.annotations) && 'example.com/no-proxy' in object.metadata.annotations "
            "&& object.metadata.annotations['example.com/no-proxy'] == 'false')",
        }
    ]
    assert policy["spec"]["failurePolicy"] == "Fail"
    # Pods at CREATE, and the containers `kubectl debug` adds to a running Pod through its subresource.
    assert policy["spec"]["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"]},
    ]


def test_the_plan_and_the_command_render_the_same_objects_in_the_order_to_apply_them(tmp_path: Path) -> None:
    settings = _settings(namespaces=["team-a"])
    kinds = [(o["kind"], o["metadata"]["name"]) for o in manifests(settings)]
    assert kinds[-2:] == [
        ("MutatingAdmissionPolicy", POLICY_NAME),
        ("MutatingAdmissionPolicyBinding", POLICY_NAME),
    ]
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump({**BASE, "namespaces": ["team-a"]}))
    result = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path), "--format", "admission"],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert list(yaml.safe_load_all(result.stdout)) == manifests(settings)[-2:]


def test_without_a_trusted_ca_the_policy_has_no_trust_part() -> None:
    settings = _settings()
    policy = admission_policy(settings, plain_values(settings))
    assert [v["name"] for v in policy["spec"]["variables"]] == [
        "httpProxy", "httpsProxy", "noProxy", "noProxyPython", "jdkJavaOptions", "valuesDigest", "selected", "python",
        "entries", "injected",
    ]  # fmt: skip
    assert "proxy-trust" not in yaml.safe_dump(policy)


class _Discovery:
    """CustomObjectsApi.get_api_resources (GET /apis/<group>/<version>): the resources each group/version holds."""

    def __init__(self, served: dict[str, list[str]]) -> None:
        self.served = served
        self.asked: list[str] = []

    def get_api_resources(self, group: str, version: str) -> V1APIResourceList:
        group_version = f"{group}/{version}"
        self.asked.append(group_version)
        if group_version not in self.served:
            raise _NotFoundError
        resources = [
            V1APIResource(name=name, kind="K", namespaced=False, singular_name="", verbs=["get"])
            for name in self.served[group_version]
        ]
        return V1APIResourceList(group_version=group_version, resources=resources)


class _NotFoundError(Exception):
    status = 404


@pytest.mark.parametrize(
    ("injection", "served", "missing"),
    [
        ({"admission": True}, {"admissionregistration.k8s.io/v1": ["mutatingadmissionpolicies",
                                                                  "mutatingadmissionpolicybindings"]}, []),
        ({"admission": True}, {"admissionregistration.k8s.io/v1": ["mutatingwebhookconfigurations"]},
         ["admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
          "admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"]),
        ({"kyverno": True}, {"kyverno.io/v1": ["clusterpolicies"]},
         ["policies.kyverno.io/v1/mutatingpolicies", "policies.kyverno.io/v1/generatingpolicies"]),
        ({"kyverno": True, "kyvernoPolicy": "ClusterPolicy"}, {"kyverno.io/v1": ["clusterpolicies"]}, []),
        ({"kyverno": True, "kyvernoPolicy": "ClusterPolicy"}, {}, ["kyverno.io/v1/clusterpolicies"]),
        ({}, {}, []),
    ],
)  # fmt: skip
def test_check_names_the_injection_api_the_api_server_does_not_serve(
    injection: dict[str, Any], served: dict[str, list[str]], missing: list[str]
) -> None:
    from proxy_component.live.check import _injection_apis
    from proxy_component.live.cluster import Cluster

    settings = _settings(injection=injection)
    discovery = _Discovery(served)
    findings = list(_injection_apis(settings, Cluster(clients={"discovery": discovery}, server="https://127.0.0.1")))
    assert [f.object for f in findings] == [f"API {m}" for m in missing]
    assert all(f.kind == "injection-api-missing" and f.severity == "error" for f in findings)
    if injection.get("admission") and missing:
        assert findings[0].message == (
            "injection.admission: the API server does not serve admissionregistration.k8s.io/v1 "
            "mutatingadmissionpolicies, so no Pod gets the proxy env from it (expected Kubernetes 1.36 or later, or "
            "cluster.kubernetesVersion naming an older cluster's version)"
        )
    assert len(discovery.asked) == len(set(discovery.asked)), "one discovery request per group/version"
    assert bool(discovery.asked) == bool(injection), "no injection chosen, nothing asked"
