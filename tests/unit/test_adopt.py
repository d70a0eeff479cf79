"""Adoption's decisions (proxy_component/live/adopt.py): who owns an existing object, what the stack may take, what
the import's update removes and what stays behind. The engine lane runs them against the test cluster
(tests/engine/test_adopting.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy_component.live.adopt import (
    HANDED_OVER,
    Existing,
    decide,
    fields_not_set,
    handed_over_entries,
    kubectl_fields_missing,
    left_behind_objects,
    object_path,
    template_changes,
)
from proxy_component.stack import integral

ME = "organization/proxy-component/prod"


def entry(
    manager: str, fields: dict[str, Any], operation: str = "Update", subresource: str | None = None
) -> dict[str, Any]:
    e = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        e["subresource"] = subresource
    return e


def existing(
    managers: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    kind: str = "DaemonSet",
) -> Existing:
    metadata = {"name": "http-proxy", "namespace": "kube-system", "managedFields": managers or [],
                "annotations": annotations or {}, "labels": labels or {}, "resourceVersion": "7"}  # fmt: skip
    return Existing(kind, "apps/v1", "kube-system", "http-proxy", {"metadata": metadata, "spec": spec or {}})


KUBECTL = entry("kubectl-client-side-apply", {"f:spec": {"f:template": {}}})
STATUS = entry("kube-controller-manager", {"f:status": {}}, subresource="status")


def test_object_paths_for_core_grouped_and_cluster_scoped_kinds() -> None:
    assert (
        object_path("v1", "Service", "kube-system", "http-proxy")
        == "/api/v1/namespaces/kube-system/services/http-proxy"
    )
    assert object_path("apps/v1", "DaemonSet", "ns", "x") == "/apis/apps/v1/namespaces/ns/daemonsets/x"
    assert object_path("kyverno.io/v1", "ClusterPolicy", None, "p") == "/apis/kyverno.io/v1/clusterpolicies/p"
    assert (
        object_path("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding", None, "b")
        == "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings/b"
    )


@pytest.mark.parametrize(
    ("item", "owner"),
    [
        (existing([KUBECTL, STATUS]), None),
        (existing(annotations={"proxy-component.io/owner": "o/p/other"}), "o/p/other"),
        (existing(annotations={"meta.helm.sh/release-name": "r", "meta.helm.sh/release-namespace": "ns"}), "helm:ns/r"),
        (existing(labels={"app.kubernetes.io/managed-by": "Helm"}), "helm:?/?"),
        (existing(annotations={"argocd.argoproj.io/tracking-id": "egress:apps/DaemonSet:kube-system/http-proxy"}),
         "argocd:egress"),
        (existing(labels={"kustomize.toolkit.fluxcd.io/name": "infra", "kustomize.toolkit.fluxcd.io/namespace": "flux"}),
         "flux:flux/infra"),
        (existing([entry("pulumi-kubernetes-1a2b3c", {}, "Apply"), KUBECTL]), "pulumi-kubernetes-1a2b3c"),
    ],
)  # fmt: skip
def test_the_owner_of_an_object(item: Existing, owner: str | None) -> None:
    found = item.owner()
    assert (found[0] if found else None) == owner


def test_nobodys_object_is_refused_without_adopt_existing_and_imported_with_it() -> None:
    item = existing([KUBECTL, STATUS])
    refused = decide([item], ME, adopt=False, adopt_from=None, deployed=False, where="https://api")
    assert refused.imports == []
    (line,) = refused.problems
    assert line.startswith("DaemonSet kube-system/http-proxy: already exists in the cluster (https://api), made by ")
    assert "kubectl-client-side-apply" in line
    assert "kube-controller-manager" not in line  # its status, not the object
    assert "set proxy-component:adoptExisting: true" in line
    taken = decide([item], ME, adopt=True, adopt_from=None, deployed=False, where="https://api")
    assert (taken.imports, taken.taken, taken.problems) == ([item], [item], [])


@pytest.mark.parametrize("adopt", [False, True])
def test_another_owners_object_is_refused_by_name_whatever_adopt_existing_says(adopt: bool) -> None:
    for item, name in [
        (existing(annotations={"proxy-component.io/owner": "organization/proxy-component/other"}),
         "stack organization/proxy-component/other (annotation proxy-component.io/owner)"),
        (existing([entry("pulumi-kubernetes-9f", {}, "Apply")]), "a Pulumi program (field manager pulumi-kubernetes-9f"),
        (existing(annotations={"meta.helm.sh/release-name": "px", "meta.helm.sh/release-namespace": "kube-system"}),
         "Helm release kube-system/px"),
    ]:  # fmt: skip
        result = decide([item], ME, adopt=adopt, adopt_from=None, deployed=False, where="https://api")
        assert result.imports == []
        (line,) = result.problems
        assert f"belongs to {name}" in line, line
        assert "set proxy-component:adoptFrom: " in line


def test_adopt_from_takes_that_owner_only() -> None:
    mine = existing(annotations={"proxy-component.io/owner": "o/p/old"})
    other = existing(annotations={"proxy-component.io/owner": "o/p/third"})
    result = decide([mine, other], ME, adopt=True, adopt_from="o/p/old", deployed=False, where="h")
    assert result.taken == [mine]
    assert len(result.problems) == 1
    assert "o/p/third" in result.problems[0]


def test_the_stacks_own_objects_pass_and_are_never_taken() -> None:
    annotated = existing(annotations={"proxy-component.io/owner": ME})
    earlier = existing([entry("pulumi-kubernetes-5e", {}, "Apply")])  # made before the annotation, this stack deployed
    for adopt in (False, True):
        result = decide([annotated, earlier], ME, adopt=adopt, adopt_from=None, deployed=True, where="h")
        assert result.problems == []
        assert result.taken == []
        assert result.imports == ([annotated, earlier] if adopt else [])


def test_kubectls_fields_are_handed_to_before_first_apply_and_the_others_kept() -> None:
    a = entry("kubectl-client-side-apply", {"f:spec": {"f:template": {"f:spec": {"f:hostNetwork": {}}}}})
    b = entry("kubectl-edit", {"f:spec": {"f:template": {"f:spec": {"f:dnsPolicy": {}}}}})
    controller = entry("some-controller", {"f:metadata": {"f:labels": {"f:x": {}}}})
    pulumi = entry("pulumi-kubernetes-1", {"f:spec": {}}, "Apply")
    entries = handed_over_entries(existing([a, STATUS, b, controller, pulumi]))
    assert entries is not None
    assert [e["manager"] for e in entries] == ["kube-controller-manager", "some-controller", "pulumi-kubernetes-1",
                                              HANDED_OVER]  # fmt: skip
    merged = entries[-1]
    assert merged["operation"] == "Update"
    assert merged["fieldsV1"] == {"f:spec": {"f:template": {"f:spec": {"f:hostNetwork": {}, "f:dnsPolicy": {}}}}}
    assert handed_over_entries(existing([pulumi, STATUS])) is None
    assert handed_over_entries(existing([entry(HANDED_OVER, {})])) is None  # already handed over


def test_what_the_update_removes_and_what_stays_behind() -> None:
    fields = {
        "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
        "f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"tinyproxy"}': {
            ".": {}, "f:args": {}, "f:image": {}, "f:name": {}}}}}},
    }  # fmt: skip
    item = existing([entry("kubectl-client-side-apply", fields), entry("vpa", {"f:spec": {"f:extra": {}}})])
    planned = {"metadata": {"annotations": {"x": "y"}},
               "spec": {"template": {"spec": {"containers": [{"name": "tinyproxy", "image": "ours"}]}}}}  # fmt: skip
    assert kubectl_fields_missing(item, planned) == [
        "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
        "spec.template.spec.containers[tinyproxy].args",
    ]
    assert fields_not_set(item, planned)["vpa"] == ["spec.extra"]
    renamed = {"spec": {"template": {"spec": {"containers": [{"name": "proxy"}]}}}}
    assert "spec.template.spec.containers[tinyproxy]" in kubectl_fields_missing(item, renamed)


def test_objects_the_live_daemonset_uses_and_the_stacks_does_not() -> None:
    live = {"template": {"spec": {
        "volumes": [{"name": "c", "configMap": {"name": "tinyproxy-config"}},
                    {"name": "p", "projected": {"sources": [{"secret": {"name": "creds"}}]}}],
        "containers": [{"name": "t", "envFrom": [{"configMapRef": {"name": "http-proxy-config"}}]}],
    }}}  # fmt: skip
    planned = {"spec": {"template": {"spec": {"volumes": [{"name": "c", "configMap": {"name": "http-proxy-config"}}]}}}}
    assert left_behind_objects(existing(spec=live), planned) == [("ConfigMap", "tinyproxy-config"), ("Secret", "creds")]


def test_template_changes_name_each_path_and_nothing_when_equal() -> None:
    before = {"spec": {"containers": [{"name": "tinyproxy", "image": "a", "args": ["-d"]}], "hostNetwork": True}}
    after = {"spec": {"containers": [{"name": "tinyproxy", "image": "b"}], "hostNetwork": True}}
    assert template_changes(before, after) == [
        "spec.template.spec.containers[tinyproxy].args",
        "spec.template.spec.containers[tinyproxy].image",
    ]
    assert template_changes(before, json.loads(json.dumps(before))) == []


def test_whole_floats_go_to_the_api_server_as_integers() -> None:
    assert integral({"ports": [{"port": 8888.0, "weight": 0.5}], "n": [1.0, "2"]}) == {
        "ports": [{"port": 8888, "weight": 0.5}],
        "n": [1, "2"],
    }
