"""Injection by the API server under the real engine (pytest -m "engine and cluster"), on a test cluster of its own
(tests/engine/test_admission_live.py's): `pulumi up` applies the policy and its binding (and Kyverno's MutatingPolicy,
which the API server checks against Kyverno's CRD schema), and a NO_PROXY change updates the policy's NO_PROXY
variables only, in place, which the next Pods get.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy_component.render.admission import POLICY_NAME, VALUE_VARIABLES
from proxy_component.render.digest import VALUES_ANNOTATION
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
def test_pulumi_up_applies_the_policy_and_a_no_proxy_change_updates_only_its_no_proxy_variables(
    project_factory: Any, cluster: Cluster
) -> None:
    ns = "proxy-component"
    for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
        cluster.kubectl("delete", kind, POLICY_NAME, "--ignore-not-found")
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
    assert "paramRef" not in binding["spec"]
    settings = profile_like(ENGINE_SETTINGS)
    _in_force(cluster, settings)
    env = {e["name"]: e["value"] for e in _admitted_env(cluster) or []}
    assert env["NO_PROXY"] == project.outputs()["noProxy"]

    project.config(f"{ns}:proxy", {"noProxy": [".corp.example"]})
    preview = project.preview_json()
    # NO_PROXY moves the policies' NO_PROXY variables and the values digest (and team-a's proxy-config): updates only,
    # in place; the binding stays. Kyverno's MutatingPolicy carries the same variables.
    assert changes(preview) == {
        "update": ["admission-admission-policy", "admission-kyverno-mutating-policy", "admission-proxy-config-team-a"]
    }, preview
    names = [v["name"] for v in policy["spec"]["variables"]]
    moved = {
        f"spec.variables[{names.index(VALUE_VARIABLES[k])}].expression"
        for k in ("NO_PROXY", "NO_PROXY_PYTHON", "JDK_JAVA_OPTIONS", VALUES_ANNOTATION)
    }
    for step in preview["steps"]:
        if step["op"] == "update" and "policy" in step["urn"].rsplit("::", 1)[-1]:
            assert step.get("detailedDiff"), step
            assert set(step["detailedDiff"]) <= moved, step["detailedDiff"]
    project.up()
    changed = profile_like({**ENGINE_SETTINGS, "proxy": {"noProxy": [".corp.example"]}})
    _in_force(cluster, changed)
    env = {e["name"]: e["value"] for e in _admitted_env(cluster) or []}
    assert env["NO_PROXY"].endswith(",.corp.example"), env["NO_PROXY"]
    assert (
        cluster.get("mutatingadmissionpolicybinding", POLICY_NAME)["metadata"]["generation"]
        == binding["metadata"]["generation"]
    )
    updated = cluster.get("mutatingadmissionpolicy", POLICY_NAME)
    assert updated["metadata"]["uid"] == policy["metadata"]["uid"], "updated in place, never replaced"
    project.run("destroy", "--yes", "--skip-preview")
    assert cluster.kubectl("get", "mutatingadmissionpolicy", POLICY_NAME, check=False).returncode != 0


def profile_like(raw: dict[str, Any]) -> Settings:
    return parse_settings(copy.deepcopy(raw))
