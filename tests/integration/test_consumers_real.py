"""The consumers against real tools and schemas: kubectl's kustomize, the CRDs' own schemas, kubernetes-validate."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pulumi
import pytest
import yaml
from jsonschema import Draft7Validator

from proxy_component.render import capi_manifests, capi_patches, manifests, plain_values
from proxy_component.render.kustomize import json_patch, kustomization
from proxy_component.render.kyverno import cluster_policy
from proxy_component.render.runtimes import python_no_proxy
from proxy_component.settings import Settings, parse_settings
from proxy_component.transform import proxy_env_transform
from tests.conftest import ROOT, SEEDS
from tests.integration.test_kubernetes_validate import K8S_VERSION

CRDS = ROOT / "tests/fixtures/crds"
SEED_000 = (SEEDS / "000_9330ad59d1de74a0.txt").read_text()

CAPI: dict[str, Any] = {
    "cluster": {"name": "mycluster", "podCidrs": ["100.64.0.0/13"], "serviceCidrs": ["100.96.0.0/11"]},
    "proxy": {
        "httpProxy": "http://user:s3cret@192.168.52.220:3128",
        "nodeHttpProxy": "http://192.168.52.220:3128",
        "noProxy": ["internal.corpdomain.net"],
    },
    "capi": {"enabled": True, "namespace": "org-giantswarm", "tkgAddons": True, "exportToKubeadm": True},
    "injection": {"kyverno": True},
    "helmValuesSecrets": [{"profile": "argo-cd", "namespace": "argocd"}],
    "namespaces": ["apps"],
}
PLAIN = parse_settings(yaml.safe_load((ROOT / "examples/ipv6-only/proxy.yaml").read_text()))


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (for its built-in kustomize) is needed: apt-get install kubectl")
    return kubectl


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = yaml.safe_load((CRDS / name).read_text())
    return schema


def _errors(schema: dict[str, Any], obj: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in Draft7Validator(schema).iter_errors(obj)]


def test_capi_objects_match_the_cluster_api_crds() -> None:
    objects = capi_patches(parse_settings(CAPI))
    kcp = next(o for o in objects if o["kind"] == "KubeadmControlPlane")
    kct = next(o for o in objects if o["kind"] == "KubeadmConfigTemplate")
    kcp_schema = _schema("kubeadmcontrolplane-v1beta1.yaml")
    fragment_schema = kcp_schema["properties"]["spec"]["properties"]["kubeadmConfigSpec"]
    assert _errors(fragment_schema, kcp["spec"]["kubeadmConfigSpec"]) == []
    assert _errors(_schema("kubeadmconfigtemplate-v1beta1.yaml"), kct) == []
    misspelt = {**kct["spec"]["template"]["spec"]["files"][0]}
    misspelt["contentForm"] = misspelt.pop("contentFrom")
    assert _errors(fragment_schema, {"files": [misspelt]}), "the schema check must catch a misspelt field"


@pytest.mark.parametrize("credentials", [False, True])
def test_kyverno_policy_matches_the_clusterpolicy_crd(credentials: bool) -> None:
    settings = parse_settings(CAPI) if credentials else PLAIN
    policy = cluster_policy(settings, plain_values(settings))
    assert _errors(_schema("kyverno-clusterpolicy-v1.yaml"), policy) == []
    text = yaml.safe_dump(policy)
    assert ("s3cret" in text) is False
    assert ("valueFrom" in text) is credentials


def test_every_core_object_passes_kubernetes_validate_strict() -> None:
    settings = parse_settings(CAPI)
    objects = [o for o in (*manifests(settings), *capi_manifests(settings)) if o["apiVersion"] in ("v1", "apps/v1")]
    assert {o["kind"] for o in objects} == {"Secret", "ConfigMap", "DaemonSet", "Service"}
    assert len(objects) >= 10
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("kind", "api_version", "spec"),
    [
        ("Deployment", "apps/v1", {"selector": {"matchLabels": {"a": "b"}}, "template": None}),
        ("StatefulSet", "apps/v1", {"selector": {"matchLabels": {"a": "b"}}, "serviceName": "s", "template": None}),
        ("DaemonSet", "apps/v1", {"selector": {"matchLabels": {"a": "b"}}, "template": None}),
        ("Job", "batch/v1", {"template": None}),
        ("CronJob", "batch/v1", {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": None}}}),
    ],
)
def test_workloads_after_the_transform_pass_kubernetes_validate(
    kind: str, api_version: str, spec: dict[str, Any]
) -> None:
    template = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {
            "restartPolicy": "OnFailure" if "Job" in kind else "Always",
            "containers": [{"name": "c", "image": "i"}],
        },
    }
    if "template" in spec:
        spec = {**spec, "template": template}
    else:
        spec = {**spec, "jobTemplate": {"spec": {"template": template}}}
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "apps"}, "spec": spec}
    token = f"kubernetes:{api_version}:{kind}"
    result = proxy_env_transform(PLAIN, plain_values(PLAIN))(
        pulumi.ResourceTransformArgs(custom=True, type_=token, name="w", props=obj, opts=pulumi.ResourceOptions())
    )
    assert result is not None
    kubernetes_validate.validate(result.props, K8S_VERSION, strict=True)


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: my-app}
spec:
  selector: {matchLabels: {app: my-app}}
  template:
    metadata: {labels: {app: my-app}}
    spec:
      containers:
      - {name: my-app, image: my-image, env: [{name: OTHER, value: x}]}
      - {name: sidecar, image: s}
"""


def _kustomize(tmp_path: Path, settings: Settings, **kwargs: Any) -> dict[str, Any]:
    (tmp_path / "deploy.yaml").write_text(DEPLOYMENT)
    kz = kustomization(settings, plain_values(settings), kind="Deployment", name="my-app", **kwargs)
    kz["resources"] = ["deploy.yaml"]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kz))
    out = subprocess.run(
        [_kubectl(), "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    built: dict[str, Any] = yaml.safe_load(out.stdout)
    return built


def _env_of(built: dict[str, Any], container: str) -> dict[str, str]:
    (c,) = [c for c in built["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return {e["name"]: e["value"] for e in c.get("env", [])}


def test_json_patch_follows_seed_000_method_3() -> None:
    ops = json_patch(PLAIN, plain_values(PLAIN))
    assert {op["op"] for op in ops} == {"add"}
    assert {op["path"] for op in ops} == {"/spec/template/spec/containers/0/env/-"}
    seed = yaml.safe_load(textwrap.dedent(SEED_000.split("patch: |\n", 1)[1].split("```", 1)[0]))
    seed_names = {op["value"]["name"] for op in seed}
    assert seed_names <= {op["value"]["name"] for op in ops}
    assert all(op["path"] == seed[0]["path"] for op in seed)


def test_kubectl_kustomize_applies_the_json_patch_to_container_0(tmp_path: Path) -> None:
    built = _kustomize(tmp_path, PLAIN)
    assert built["spec"]["template"]["spec"]["containers"][0]["name"] == "my-app"
    env = _env_of(built, "my-app")
    assert env["OTHER"] == "x"
    assert env["HTTPS_PROXY"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert _env_of(built, "sidecar") == {}


def test_kubectl_kustomize_applies_the_strategic_merge_patch_by_container_name(tmp_path: Path) -> None:
    # The sidecar is not container 0 and has no env at all: the JSON patch could not reach it.
    built = _kustomize(tmp_path, PLAIN, container="sidecar")
    env = _env_of(built, "sidecar")
    assert env["NO_PROXY"] == str(PLAIN.no_proxy())
    assert env["no_proxy"] == python_no_proxy(PLAIN.no_proxy())
    assert _env_of(built, "my-app") == {"OTHER": "x"}
