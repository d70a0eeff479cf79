"""Kyverno 1.20 ends legacy policies (issue 45): the cluster's Kyverno version read from its admission controller's
Deployment (as Kyverno's own Helm chart renders it), the preview's refusal of `injection.kyvernoPolicy:
ClusterPolicy` there, and `check`'s finding for a ClusterPolicy this project made earlier. Mocks: a loopback server
for the stack program's read, fake clients for check's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from proxy_component.live.access import accesses, rbac_objects
from proxy_component.live.check import _kyverno_legacy
from proxy_component.live.cluster import KYVERNO_DEPLOYMENT, LEGACY_POLICY, Access, Cluster
from proxy_component.live.kyverno import version_of
from proxy_component.live.preview import _kyverno_problems
from proxy_component.render.kyverno import POLICY_NAME
from proxy_component.settings import parse_settings
from tests.fake_api import api_server

ROOT = Path(__file__).resolve().parents[2]
CHART = yaml.safe_load((ROOT / "tests/fixtures/kyverno/admission-controller-v1.20.0.yaml").read_text())
LEGACY = {"injection": {"kyverno": True, "kyvernoPolicy": "ClusterPolicy"}}


def with_image(image: str) -> dict[str, Any]:
    deployment = copy.deepcopy(CHART)
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        if container["name"] == "kyverno":
            container["image"] = image
    return dict(deployment)


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("reg.kyverno.io/kyverno/kyverno:v1.20.0", (1, 20, 0)),
        ("reg.kyverno.io/kyverno/kyverno:v1.19.1", (1, 19, 1)),
        ("mirror.corp:5000/kyverno/kyverno:v1.21.2-rc.1", (1, 21, 2)),
        ("ghcr.io/kyverno/kyverno:v1.20.1@sha256:" + "ab" * 32, (1, 20, 1)),
        ("reg.kyverno.io/kyverno/kyverno:latest", None),
        ("reg.kyverno.io/kyverno/kyverno@sha256:" + "cd" * 32, None),
        ("reg.kyverno.io/kyverno/kyvernopre:v1.20.0", None),  # the init container's image, not Kyverno's
    ],
)
def test_the_version_is_the_admission_controllers_image_tag(image: str, version: tuple[int, int, int] | None) -> None:
    found = version_of(with_image(image))
    assert (found[0] if found else None) == version
    if found:
        assert found[1] == "kyverno/kyverno-admission-controller"


def test_the_charts_own_deployment_reads_as_its_version() -> None:
    assert version_of(CHART) == ((1, 20, 0), "kyverno/kyverno-admission-controller")


def _preview_problems(settings: dict[str, Any], image: str | None) -> list[str]:
    items = [with_image(image)] if image else []

    def answer(path: str) -> tuple[int, bytes]:
        if path == "/apis/apps/v1/namespaces/kyverno/deployments/kyverno-admission-controller" and items:
            return 200, json.dumps(items[0]).encode()
        return 404, b"{}"

    with api_server(answer) as api:
        return _kyverno_problems(parse_settings(settings), api)


def test_the_preview_refuses_a_cluster_policy_where_kyverno_no_longer_runs_one() -> None:
    (line,) = _preview_problems(LEGACY, "reg.kyverno.io/kyverno/kyverno:v1.20.0")
    assert line.startswith(
        "injection.kyvernoPolicy: 'ClusterPolicy' is Kyverno's legacy policy, and the cluster runs Kyverno 1.20.0 "
        "(kyverno/kyverno-admission-controller), which no longer runs legacy policies"
    )
    assert "remove injection.kyvernoPolicy" in line
    assert _preview_problems(LEGACY, "reg.kyverno.io/kyverno/kyverno:v1.19.1") == []
    assert _preview_problems(LEGACY, None) == []  # no Kyverno to read: nothing said
    assert _preview_problems({"injection": {"kyverno": True}}, "reg.kyverno.io/kyverno/kyverno:v1.21.0") == []


class _NotFoundError(Exception):
    status = 404


class _Apps:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.asked: list[tuple[str, str]] = []

    def read_namespaced_deployment(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.asked.append((namespace, name))
        for item in self.items:
            if (item["metadata"]["namespace"], item["metadata"]["name"]) == (namespace, name):
                return SimpleNamespace(data=json.dumps(item).encode())
        raise _NotFoundError


class _Custom:
    def __init__(self, exists: bool) -> None:
        self.exists = exists

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str, **kwargs: Any) -> Any:
        if not self.exists:
            raise _NotFoundError
        return SimpleNamespace(data=json.dumps({"kind": "ClusterPolicy", "metadata": {"name": name}}).encode())


@pytest.mark.parametrize(
    ("settings", "image", "policy", "found"),
    [
        (LEGACY, "reg.kyverno.io/kyverno/kyverno:v1.20.0", True, True),
        ({"injection": {"kyverno": True}}, "reg.kyverno.io/kyverno/kyverno:v1.20.3", True, True),  # made earlier
        (LEGACY, "reg.kyverno.io/kyverno/kyverno:v1.19.1", True, False),
        (LEGACY, "reg.kyverno.io/kyverno/kyverno:v1.20.0", False, False),
        ({"injection": {"kyverno": False}}, "reg.kyverno.io/kyverno/kyverno:v1.20.0", True, False),
    ],
)
def test_check_says_a_legacy_policy_no_longer_enforces(
    settings: dict[str, Any], image: str, policy: bool, found: bool
) -> None:
    apps = _Apps([with_image(image)])
    custom = _Custom(policy)
    cluster = Cluster(clients={"apps": apps, "custom": custom}, server="https://127.0.0.1")
    findings = list(_kyverno_legacy(parse_settings(settings), cluster))
    assert bool(findings) == found
    if found:
        (finding,) = findings
        assert (finding.kind, finding.object, finding.severity) == (
            "kyverno-legacy-policy", f"ClusterPolicy {POLICY_NAME}", "error",
        )  # fmt: skip
        assert "no longer runs legacy policies" in finding.message
        assert apps.asked == [("kyverno", "kyverno-admission-controller")]
    # What check asked is what its role grants.
    granted = set(accesses(parse_settings(settings)))
    assert cluster.accessed <= granted, cluster.accessed - granted


def test_the_check_role_grants_the_kyverno_reads_by_name() -> None:
    rules = [r for o in rbac_objects(parse_settings(LEGACY)) for r in o.get("rules", [])]
    assert {"apiGroups": ["kyverno.io"], "resources": ["clusterpolicies"], "verbs": ["get"],
            "resourceNames": [POLICY_NAME]} in rules  # fmt: skip
    assert {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"],
            "resourceNames": ["kyverno-admission-controller"]} in rules  # fmt: skip
    assert Access(KYVERNO_DEPLOYMENT, None, "kyverno-admission-controller") in accesses(parse_settings(LEGACY))
    assert not [o for o in rbac_objects(parse_settings(LEGACY)) if o["metadata"].get("namespace") == "kyverno"]
    assert Access(LEGACY_POLICY, None, POLICY_NAME) in accesses(parse_settings(LEGACY))
