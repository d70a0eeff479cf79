"""Every object the component owns carries pulumi-kubernetes' `pulumi.com/patchForce: "true"`, in the plan and so
in `render`: `pulumi up` takes back any field another field manager edited. What the component does not own (the
check roles, patches for the user's objects) does not carry it.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import yaml

from proxy_component.cli import main
from proxy_component.render import plain_plan, plain_values
from proxy_component.render.kyverno import cluster_policy
from proxy_component.render.plan import PATCH_FORCE
from proxy_component.settings import parse_settings
from tests.pki import make_ca


@functools.cache
def _ca() -> str:
    return make_ca().cert_pem


def every_kind(kyverno_policy: str = "MutatingPolicy") -> dict[str, Any]:
    """Settings under which the plan makes every kind it can: the proxy, proxy-config and proxy-trust per namespace,
    the admission policy, Kyverno's policies, trust-manager's Bundle, a Helm values Secret, the Cluster API Secrets."""
    return {
        "cluster": {
            "name": "every",
            "podCidrs": ["10.244.0.0/16"],
            "serviceCidrs": ["10.96.0.0/12"],
            "nodeCidrs": ["192.0.2.0/24"],
        },
        "proxy": {"upstream": {"url": "http://192.0.2.10:3128", "trustedCa": _ca()}},
        "namespaces": ["default", "team-a"],
        "injection": {"admission": True, "kyverno": True, "kyvernoPolicy": kyverno_policy, "trustManager": True},
        "helmValuesSecrets": [{"profile": "cert-manager", "namespace": "kube-system"}],
        "capi": {"enabled": True, "tkgAddons": True},
    }


@pytest.mark.parametrize("kyverno_policy", ["MutatingPolicy", "ClusterPolicy"])
def test_every_planned_object_takes_back_the_fields_it_sets(kyverno_policy: str) -> None:
    planned = plain_plan(parse_settings(every_kind(kyverno_policy)))
    kinds = {p.obj["kind"] for p in planned}
    assert kinds >= {"DaemonSet", "Service", "ConfigMap", "Secret", "MutatingAdmissionPolicy", "Bundle"}, kinds
    assert {p.cluster for p in planned} == {"workload", "management"}
    for p in planned:
        assert p.obj["metadata"]["annotations"][PATCH_FORCE] == "true", p.key
        assert PATCH_FORCE not in str(p.obj.get("spec", {}).get("template", {})), "never on a pod template: it rolls"


def test_the_annotation_joins_the_objects_own_annotations() -> None:
    settings = parse_settings(every_kind("ClusterPolicy"))
    built = cluster_policy(settings, plain_values(settings))["metadata"]["annotations"]
    assert len(built) >= 2
    planned = next(p.obj for p in plain_plan(settings) if p.obj["kind"] == "ClusterPolicy")
    assert planned["metadata"]["annotations"] == {**built, PATCH_FORCE: "true"}


@pytest.mark.parametrize(
    ("fmt", "owned"),
    [
        ([], True),
        (["--format", "capi"], True),
        (["--format", "kyverno"], True),
        (["--format", "admission"], True),
        (["--format", "check-rbac"], False),
        (["--format", "capi-patches"], False),
        (["--format", "kustomize-patch", "--target-name", "web"], False),
    ],
)
def test_render_marks_what_the_component_owns_and_nothing_else(
    fmt: list[str], owned: bool, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(every_kind()))
    assert main(["render", str(path), *fmt]) == 0, capsys.readouterr().err
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert docs
    marks = {(d.get("metadata", {}).get("annotations") or {}).get(PATCH_FORCE) for d in docs}
    assert marks == ({"true"} if owned else {None}), (fmt, marks)
