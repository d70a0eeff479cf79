"""Every object `manifests()` (and `render --format check-rbac`) emits validates, strictly, against the newest
Kubernetes schema kubernetes-validate ships.

Strict means unknown fields are errors: a typo in a builder (`ipFamily` for
`ipFamilies`) fails here, not at `kubectl apply` time.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from jsonschema import Draft7Validator

from proxy_component.live.access import rbac_objects
from proxy_component.probe import probe_pod
from proxy_component.render import manifests
from proxy_component.settings import Settings, SettingsError, parse_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ipv6-only" / "proxy.yaml"

# The newest version kubernetes-validate ships schemas for (kubernetes_validate.utils.all_versions()).
K8S_VERSION = "1.37.0"

BIN = Path(sys.executable).parent
TIMEOUT = 60  # seconds, for each command


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _example_configs() -> list[Path]:
    """Every YAML file under examples/ that parses as settings (Pulumi.yaml files do not)."""
    found = []
    for path in sorted(ROOT.glob("examples/**/*.yaml")):
        try:
            parse_settings(_load(path))
        except SettingsError:
            continue
        found.append(path)
    return found


EXAMPLES = _example_configs()


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _variant(**extra: Any) -> Settings:
    return parse_settings(_merge(_load(EXAMPLE), extra))


VARIANTS: dict[str, dict[str, Any]] = {
    "admission": {"injection": {"admission": True}, "namespaces": ["default", "ci"]},
    "admission-v1beta1": {"injection": {"admission": True}, "cluster": {"kubernetesVersion": "1.35"}},
    "kyverno-credentials": {
        "injection": {"kyverno": True},
        "proxy": {"httpProxy": "http://user:pw@proxy.corp.example:3128"},
    },
    "kyverno-legacy": {"injection": {"kyverno": True, "kyvernoPolicy": "ClusterPolicy"}},
    "upstream-with-credentials": {
        "proxy": {
            "upstream": {
                "url": "http://proxy.corp.example:3128",
                "username": "svc-egress",
                "password": "s3cret",
                "noUpstream": [".corp.example", "10.0.0.0/8"],
            }
        },
    },
    "http-proxy-with-credentials": {
        "proxy": {"httpProxy": "http://user:pw@proxy.corp.example:3128"},
        "namespaces": ["default", "ci"],
    },
    "dual-stack": {
        "cluster": {
            "ipFamily": "dual",
            "podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
            "serviceCidrs": ["10.96.0.0/16", "fd00:10:96::/108"],
            "apiServerIps": ["10.96.0.1"],
        },
    },
    "scheduling": {
        "deployment": {
            "imagePullSecrets": ["corp-registry"],
            "nodeSelector": {"node.kubernetes.io/pool": "general"},
            "tolerateAllTaints": False,
            "tolerations": [
                {"key": "dedicated", "value": "egress", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                },
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "node.kubernetes.io/pool", "operator": "In", "values": ["general"]}
                                ]
                            }
                        ]
                    },
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 10,
                            "preference": {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]},
                        }
                    ],
                }
            },
            "priorityClassName": "egress-critical",
        },
    },
    "deployment-disabled": {
        "proxy": {"httpProxy": "http://proxy.corp.example:3128"},
        "deployment": {"enabled": False},
        "namespaces": ["default", "ci", "monitoring"],
    },
}


_CRD_SCHEMAS = {
    ("kyverno.io/v1", "ClusterPolicy"): "kyverno-clusterpolicy-v1.yaml",
    ("policies.kyverno.io/v1", "MutatingPolicy"): "kyverno-mutatingpolicy-v1.yaml",
    ("policies.kyverno.io/v1", "GeneratingPolicy"): "kyverno-generatingpolicy-v1.yaml",
}


def _validate_all(objects: list[dict[str, Any]]) -> None:
    """Core objects through kubernetes-validate --strict; custom resources against their CRD's schema."""
    assert objects, "manifests() emitted nothing"
    for obj in objects:
        crd = _CRD_SCHEMAS.get((obj["apiVersion"], obj["kind"]))
        if crd is not None:
            schema = yaml.safe_load((Path(__file__).parent.parent / "fixtures/crds" / crd).read_text())
            errors = [e.message for e in Draft7Validator(schema).iter_errors(obj)]
            assert errors == [], f"{obj['kind']}/{obj['metadata']['name']}: {errors}"
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.utils.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {where}: {exc.message}")


def _by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_version_is_shipped_with_strict_schemas() -> None:
    assert K8S_VERSION in kubernetes_validate.utils.all_versions()
    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    assert (schemas / f"v{K8S_VERSION}-local-strict" / "service-v1.json").is_file()


def test_examples_are_found() -> None:
    assert EXAMPLE in EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT)) for p in EXAMPLES])
def test_example_objects_validate(path: Path) -> None:
    _validate_all(manifests(parse_settings(_load(path))))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_objects_validate(name: str) -> None:
    objects = manifests(_variant(**VARIANTS[name]))
    _validate_all(objects)

    kinds = [o["kind"] for o in objects]
    for secret in ("s3cret", "user:pw@"):  # the variants' credentials reach no ConfigMap
        assert not [o["metadata"]["name"] for o in _by_kind(objects, "ConfigMap") if secret in yaml.safe_dump(o)]
    configs = [o for o in objects if o["metadata"]["name"] == "http-proxy-config"]
    proxy_configs = [o for o in objects if o["metadata"]["name"] == "proxy-config"]
    if name == "upstream-with-credentials":
        assert [o["kind"] for o in configs] == ["Secret"]  # the config holds the upstream password
        assert "svc-egress:s3cret@" in configs[0]["stringData"]["tinyproxy.conf"]
        assert [o["kind"] for o in proxy_configs] == ["ConfigMap"]  # the URLs pods get carry no credentials
    elif name == "http-proxy-with-credentials":
        assert [o["kind"] for o in proxy_configs] == ["Secret", "Secret"]
        assert {o["metadata"]["namespace"] for o in proxy_configs} == {"default", "ci"}
        assert [o["kind"] for o in configs] == ["ConfigMap"]
    elif name == "dual-stack":
        (svc,) = _by_kind(objects, "Service")
        assert svc["spec"]["ipFamilyPolicy"] == "PreferDualStack"
    elif name == "scheduling":
        (ds,) = _by_kind(objects, "DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        assert (spec["imagePullSecrets"], spec["priorityClassName"]) == ([{"name": "corp-registry"}], "egress-critical")
        assert len(spec["tolerations"]) == 2
        # The probe's pod, with the same scheduling, validates too.
        _validate_all([probe_pod(_variant(**VARIANTS[name]), "node-a", "run1", 0, "true", 60)])
    elif name.startswith("admission"):
        api = "admissionregistration.k8s.io/" + ("v1beta1" if name.endswith("v1beta1") else "v1")
        assert [(o["apiVersion"], o["kind"]) for o in objects[-2:]] == [
            (api, "MutatingAdmissionPolicy"), (api, "MutatingAdmissionPolicyBinding")
        ]  # fmt: skip
    elif name.startswith("kyverno"):
        wanted = ["ClusterPolicy"] if name == "kyverno-legacy" else ["GeneratingPolicy", "MutatingPolicy"]
        assert [k for k in kinds if "Policy" in k] == wanted
    else:
        assert kinds == ["ConfigMap", "ConfigMap", "ConfigMap"]  # only proxy-config: no tinyproxy objects
        assert {o["metadata"]["namespace"] for o in proxy_configs} == {"default", "ci", "monitoring"}


@pytest.mark.parametrize("name", ["example", *sorted(VARIANTS), "kyverno", "probe"])
def test_check_rbac_objects_validate(name: str) -> None:
    """The ServiceAccount and roles of `render --format check-rbac` (with `--probe`, the probe's Namespace too)."""
    extra = {"injection": {"kyverno": True}} if name == "kyverno" else VARIANTS.get(name, {})
    objects = rbac_objects(_variant(**extra), probe=name == "probe")
    _validate_all(objects)
    assert {o["kind"] for o in objects} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        *(["Namespace"] if name == "probe" else []),
    }


def test_ipv6_example_service_is_ipv6_single_stack() -> None:
    objects = manifests(parse_settings(_load(EXAMPLE)))
    (svc,) = _by_kind(objects, "Service")
    assert svc["spec"]["ipFamilies"] == ["IPv6"]
    assert svc["spec"]["ipFamilyPolicy"] == "SingleStack"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False, cwd=ROOT)


def test_cli_render_validates_with_kubernetes_validate_cli(tmp_path: Path) -> None:
    proxy_component, validator = BIN / "proxy-component", BIN / "kubernetes-validate"
    for exe in (proxy_component, validator):
        assert exe.is_file(), f"{exe} is missing: install the package with its test extra into this venv"

    out = tmp_path / "rendered"
    rendered = _run([str(proxy_component), "render", str(EXAMPLE.relative_to(ROOT)), "-o", str(out)])
    assert rendered.returncode == 0, rendered.stderr
    files = sorted(out.glob("*.yaml"))
    assert len(files) == len(manifests(parse_settings(_load(EXAMPLE))))

    checked = _run([str(validator), "--strict", "-k", K8S_VERSION, *map(str, files)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # A missing schema is only a WARN with exit 0: require a pass line for every file and nothing else.
    lines = checked.stdout.splitlines()
    assert [line for line in lines if not line.startswith("INFO ")] == []
    for path in files:
        assert any(line.startswith(f"INFO {path} passed for resource ") for line in lines), (path, checked.stdout)

    (service_file,) = [p for p in files if "-service-" in p.name]
    (svc,) = list(yaml.safe_load_all(service_file.read_text(encoding="utf-8")))
    assert svc["spec"]["ipFamilies"] == ["IPv6"]
    assert svc["spec"]["ipFamilyPolicy"] == "SingleStack"
