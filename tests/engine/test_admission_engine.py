"""Injection by the API server under the real engine (pytest -m "engine and cluster"), on a test cluster of its own
(tests/engine/test_admission_live.py's): `pulumi up` applies the policy, binding and parameter ConfigMap (and Kyverno's
MutatingPolicy, which the API server checks against Kyverno's CRD schema), and a NO_PROXY change updates the
parameters only, which the next Pods get.

A cluster of its own: on kube-apiserver 1.36.3, after the policy, binding and ConfigMap that the table tests applied
with kubectl were deleted and then created again by `pulumi up`, Pod creation kept being refused with "no params
found for policy binding" for the 90 s the test waited (seen twice in the lane; not investigated further yet).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy_component.render.admission import PARAMS_NAME, POLICY_NAME
from proxy_component.settings import Settings, parse_settings

from .conftest import changes
from .test_admission_live import Cluster, _admitted_env, _in_force, cluster

__all__ = ["cluster"]  # the module-scoped fixture: a cluster for this module alone

# Kyverno's MutatingPolicy beside the admission policy: no Kyverno runs here, but the API server checks the policy
# against Kyverno's own CRD schema (its CEL validations included) and stores it.
ENGINE_SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
    "namespaces": ["team-a"],
    "injection": {"admission": True, "kyverno": True},
    "runtimes": {"namespaces": {"team-java": ["java"]}},
}


@pytest.mark.engine
@pytest.mark.cluster
def test_pulumi_up_applies_the_policy_and_a_no_proxy_change_updates_only_the_parameters(
    project_factory: Any, cluster: Cluster
) -> None:
    ns = "proxy-component"
    for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
        cluster.kubectl("delete", kind, POLICY_NAME, "--ignore-not-found")
    cluster.kubectl("delete", "configmap", PARAMS_NAME, "-n", "kube-system", "--ignore-not-found")
    project = project_factory(".", "admission", "admission")
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    project.config(f"{ns}:kubeconfig", str(cluster.kubeconfig))
    for key, value in ENGINE_SETTINGS.items():
        project.config(f"{ns}:{key}", value)
    project.up()

    policy = cluster.get("mutatingadmissionpolicy", POLICY_NAME)
    assert cluster.get("mutatingpolicies.policies.kyverno.io", POLICY_NAME)["spec"]["failurePolicy"] == "Ignore"
    binding = cluster.get("mutatingadmissionpolicybinding", POLICY_NAME)
    assert binding["spec"]["paramRef"]["name"] == PARAMS_NAME
    params = cluster.get("configmap", PARAMS_NAME, "-n", "kube-system")["data"]
    settings = profile_like(ENGINE_SETTINGS)
    _in_force(cluster, settings)
    env = {e["name"]: e["value"] for e in _admitted_env(cluster) or []}
    assert env["NO_PROXY"] == params["NO_PROXY"] == project.outputs()["noProxy"]

    project.config(f"{ns}:proxy", {"noProxy": [".corp.example"]})
    preview = changes(project.preview_json())
    # NO_PROXY moves the parameters (and team-a's proxy-config): updates only, and the policy and its binding stay.
    # Kyverno's MutatingPolicy carries the values as literals: it is updated too, in place.
    assert preview == {
        "update": ["admission-admission-params", "admission-kyverno-mutating-policy", "admission-proxy-config-team-a"]
    }, preview
    project.up()
    changed = profile_like({**ENGINE_SETTINGS, "proxy": {"noProxy": [".corp.example"]}})
    _in_force(cluster, changed)
    env = {e["name"]: e["value"] for e in _admitted_env(cluster) or []}
    assert env["NO_PROXY"].endswith(",.corp.example"), env["NO_PROXY"]
    assert (
        cluster.get("mutatingadmissionpolicy", POLICY_NAME)["metadata"]["generation"]
        == policy["metadata"]["generation"]
    )
    project.run("destroy", "--yes", "--skip-preview")
    assert cluster.kubectl("get", "mutatingadmissionpolicy", POLICY_NAME, check=False).returncode != 0


def profile_like(raw: dict[str, Any]) -> Settings:
    return parse_settings(copy.deepcopy(raw))
