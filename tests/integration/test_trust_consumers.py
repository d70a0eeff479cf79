"""The trust group through real tools: kubectl's kustomize applies both patch forms, the objects pass
kubernetes-validate --strict."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy_component.render import manifests, plain_values
from proxy_component.render.kustomize import kustomization
from proxy_component.render.kyverno import cluster_policy
from proxy_component.render.trust import JAVA_TRUST_OPTIONS, MOUNT_PATH, trust_volume, trust_volume_mount
from proxy_component.settings import Settings, parse_settings
from tests.integration.test_consumers_real import _errors, _schema
from tests.integration.test_kubernetes_validate import K8S_VERSION
from tests.pki import make_ca

SETTINGS = parse_settings(
    {
        "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "proxy": {"upstream": {"url": "http://10.1.2.3:3128", "trustedCa": make_ca().cert_pem}},
        "namespaces": ["apps"],
        "injection": {"kyverno": True, "trustManager": True},
    }
)

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "app"},
    "spec": {
        "selector": {"matchLabels": {"app": "app"}},
        "template": {
            "metadata": {"labels": {"app": "app"}},
            "spec": {
                "containers": [
                    {"name": "app", "image": "i", "env": [], "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                    {"name": "sidecar", "image": "s"},
                ],
                "volumes": [{"name": "data", "emptyDir": {}}],
            },
        },
    },
}


def _kustomize(tmp_path: Path, settings: Settings, container: str | None) -> dict[str, Any]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (for its built-in kustomize) is needed: apt-get install kubectl")
    (tmp_path / "deploy.yaml").write_text(yaml.safe_dump(DEPLOYMENT))
    kz = kustomization(
        settings, plain_values(settings).select({"java"}), kind="Deployment", name="app", container=container
    )
    kz["resources"] = ["deploy.yaml"]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kz))
    out = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    built: dict[str, Any] = yaml.safe_load(out.stdout)
    kubernetes_validate.validate(built, K8S_VERSION, strict=True)
    return built


@pytest.mark.parametrize("container", [None, "app", "sidecar"])
def test_kubectl_kustomize_adds_the_trust_group_beside_what_the_workload_has(
    tmp_path: Path, container: str | None
) -> None:
    spec = _kustomize(tmp_path, SETTINGS, container)["spec"]["template"]["spec"]
    volumes = sorted(spec["volumes"], key=lambda v: str(v["name"]))
    assert volumes == [{"name": "data", "emptyDir": {}}, trust_volume()]
    by_name = {c["name"]: c for c in spec["containers"]}
    target = by_name[container or "app"]
    env = {e["name"]: e["value"] for e in target["env"]}
    assert env["SSL_CERT_FILE"] == f"{MOUNT_PATH}/ca-bundle.crt"
    assert env["NODE_EXTRA_CA_CERTS"] == f"{MOUNT_PATH}/corporate-ca.crt"
    assert env["JDK_JAVA_OPTIONS"].endswith(JAVA_TRUST_OPTIONS)
    assert trust_volume_mount() in target["volumeMounts"]
    if (container or "app") == "app":
        assert {"name": "data", "mountPath": "/data"} in target["volumeMounts"], "the workload's own mount stays"
    other = by_name["sidecar" if (container or "app") == "app" else "app"]
    assert trust_volume_mount() not in other.get("volumeMounts", [])


def test_the_trust_objects_pass_kubernetes_validate_strict() -> None:
    objects = [o for o in manifests(SETTINGS) if o["metadata"]["name"] == "proxy-trust"]
    assert {o["metadata"]["namespace"] for o in objects} == {"apps", "kube-system"}
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_policy_with_the_trust_group_matches_the_clusterpolicy_crd() -> None:
    policy = cluster_policy(SETTINGS, plain_values(SETTINGS))
    assert "clone-proxy-trust" in [r["name"] for r in policy["spec"]["rules"]]
    assert any(
        "any" in f["preconditions"] for r in policy["spec"]["rules"] for f in r.get("mutate", {}).get("foreach", [])
    )
    assert _errors(_schema("kyverno-clusterpolicy-v1.yaml"), policy) == []
