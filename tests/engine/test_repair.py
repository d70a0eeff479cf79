"""`pulumi up --refresh` puts back what another field manager edited, after an update too, for every kind the
component owns (pytest -m "engine and cluster"), on a test cluster of its own (scripts/cluster) with the CRDs of
Kyverno's policies and trust-manager's Bundle, and the Cluster API Secrets sent to the same cluster.

The order that failed before every object carried `pulumi.com/patchForce`: `up`, a setting change and `up` again
(the objects are now applied with server-side apply), then `kubectl patch`/`kubectl set image` on each object,
then `up --refresh`: a field conflict with "kubectl-patch" and a Python traceback.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pki import make_ca
from tests.unit.test_ownership import every_kind

from .conftest import ROOT, Project, as_written, changes
from .test_admission_live import kyverno_crd as kyverno_v1_crd
from .test_live import Cluster, kyverno_crd, stack

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NS = "proxy-component"


def bundle_crd() -> dict[str, Any]:
    """trust-manager's Bundle as the API server needs it to store one: the group, the kind, any spec."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "bundles.trust.cert-manager.io"},
        "spec": {
            "group": "trust.cert-manager.io",
            "scope": "Cluster",
            "names": {"kind": "Bundle", "plural": "bundles", "singular": "bundle", "listKind": "BundleList"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("repair")
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"pc-repair-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok")}
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "1"], capture_output=True, text=True,
                        env=env, timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        live = Cluster(Path(up.stdout.strip().splitlines()[-1]))
        crds = [
            kyverno_crd(),
            kyverno_v1_crd("MutatingPolicy", "mutatingpolicies"),
            kyverno_v1_crd("GeneratingPolicy", "generatingpolicies"),
            bundle_crd(),
        ]
        live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crds))
        for crd in crds:  # `kubectl wait` fails outright while a CRD has no conditions yet
            deadline = time.monotonic() + 60
            while True:
                conditions = live.get("crd", crd["metadata"]["name"]).get("status", {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                assert time.monotonic() < deadline, f"the CRD {crd['metadata']['name']} was not established in 60 s"
                time.sleep(0.5)
        live.kubectl("create", "namespace", "team-a")
        yield live
    finally:
        subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], env=env, capture_output=True, timeout=300)


def changed(settings: dict[str, Any]) -> dict[str, Any]:
    """A change that updates every object of `every_kind` in place (the test checks it in the preview): tinyproxy's
    MaxClients (its config, so the DaemonSet's digest), the Service's traffic policy, NO_PROXY, the CA, the excluded
    namespaces and the opt-out annotation.

    Not the port: a Service's ports are a list keyed by port, and before pulumi-kubernetes' first real update moves
    the fields of its client-side create to its server-side apply manager, a preview keeps the old entry beside the
    new one (`spec.ports[1].name: Duplicate value`), as test_live.py's default-provider test shows for probes."""
    out = copy.deepcopy(settings)
    out["deployment"] = {"maxClients": 4096, "internalTrafficPolicy": "Local"}
    out["proxy"]["noProxy"] = [".corp.example"]
    out["proxy"]["upstream"]["trustedCa"] = make_ca("Another Inspecting CA").cert_pem
    out["injection"]["excludeNamespaces"] = ["kube-system", "other"]
    out["injection"]["optOutAnnotation"] = "example.com/proxy"
    return out


def render(settings: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    """What `proxy-component render` makes of the settings: the workload cluster's objects, then the management's."""
    path = tmp_path / "render.yaml"
    path.write_text(yaml.safe_dump(settings))
    objects: list[dict[str, Any]] = []
    for fmt in ([], ["--format", "capi"]):
        result = subprocess.run(
            [sys.executable, "-m", "proxy_component.cli", "render", str(path), *fmt],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        objects += [as_written(o) for o in yaml.safe_load_all(result.stdout) if o]
    return objects


def where(obj: dict[str, Any]) -> list[str]:
    """kubectl's arguments naming the object: resource (group-qualified for custom kinds), name, namespace."""
    group = obj["apiVersion"].rpartition("/")[0]
    resource = f"{obj['kind'].lower()}.{group}" if group and "." in group else obj["kind"].lower()
    namespace = obj["metadata"].get("namespace")
    return [resource, obj["metadata"]["name"], *(["-n", namespace] if namespace else [])]


# Per kind: a merge patch that sets, as another field manager ("kubectl-patch"), a field the plan sets.
SPEC_EDITS: dict[str, dict[str, Any]] = {
    "Service": {"spec": {"internalTrafficPolicy": "Cluster"}},  # rendered: Local (changed())
    "MutatingPolicy": {"spec": {"failurePolicy": "Fail"}},
    "GeneratingPolicy": {"spec": {"evaluation": {"synchronize": {"enabled": False}}}},
    "ClusterPolicy": {"spec": {"failurePolicy": "Fail"}},
    "MutatingAdmissionPolicy": {"spec": {"failurePolicy": "Ignore"}},
    "MutatingAdmissionPolicyBinding": {
        "spec": {
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["edited"]}
                    ]
                }
            }
        }
    },
    "Bundle": {"spec": {"target": {"configMap": {"key": "edited.pem"}}}},
}


def edit(cluster: Cluster, obj: dict[str, Any], manager: str | None, mark: str) -> None:
    """Change one field the plan sets, as an operator would with kubectl (its own field manager, kubectl-set or
    kubectl-patch, unless `manager` names another)."""
    kind = obj["kind"]
    named = ["--field-manager", manager] if manager else []
    if kind == "DaemonSet":
        cluster.kubectl("set", "image", f"daemonset/{obj['metadata']['name']}", f"tinyproxy=example.invalid/{mark}:1",
                        "-n", obj["metadata"]["namespace"], *named)  # fmt: skip
        return
    if kind in ("ConfigMap", "Secret"):
        key = sorted(obj["data"])[0]
        value = base64.b64encode(mark.encode()).decode() if kind == "Secret" else mark
        patch: dict[str, Any] = {"data": {key: value}}
    else:
        patch = SPEC_EDITS[kind]
    cluster.kubectl("patch", *where(obj), "--type=merge", "-p", json.dumps(patch), *named)


def differences(rendered: Any, live: Any, path: str = "") -> list[str]:
    """Where the live object lacks or differs from what was rendered (fields the API server adds are not counted)."""
    if isinstance(rendered, dict):
        if not isinstance(live, dict):
            return [f"{path}: {live!r}"]
        return [d for key, value in rendered.items() for d in differences(value, live.get(key), f"{path}.{key}")]
    if isinstance(rendered, list):
        if not isinstance(live, list) or len(live) != len(rendered):
            return [f"{path}: {live!r}"]
        return [
            d for i, (r, v) in enumerate(zip(rendered, live, strict=True)) for d in differences(r, v, f"{path}[{i}]")
        ]
    return [] if rendered == live else [f"{path}: {live!r}, rendered {rendered!r}"]


def live_differences(cluster: Cluster, obj: dict[str, Any]) -> list[str]:
    return differences(obj, cluster.get(*where(obj)))


@pytest.mark.parametrize("kyverno_policy", ["MutatingPolicy", "ClusterPolicy"])
def test_up_refresh_puts_back_an_edit_of_every_object_after_an_update(
    project_factory: Any, cluster: Cluster, tmp_path: Path, kyverno_policy: str
) -> None:
    first = every_kind(kyverno_policy)
    project: Project = stack(project_factory, cluster, f"repair-{kyverno_policy.lower()}", first)
    project.config(f"{NS}:managementKubeconfig", str(cluster.kubeconfig))
    project.up()

    second = changed(first)
    for key, value in second.items():
        project.config(f"{NS}:{key}", value)
    objects = render(second, tmp_path)
    kinds = {o["kind"] for o in objects}
    assert {"DaemonSet", "Service", "ConfigMap", "Secret", "MutatingAdmissionPolicy", "Bundle"} <= kinds, kinds
    assert kyverno_policy in kinds
    steps = changes(project.preview_json())
    assert list(steps) == ["update"], steps  # the premise: every object is updated, so applied server-side
    kubernetes = [r for r in project.export()["deployment"]["resources"] if r["type"].startswith("kubernetes:")]
    owned = sorted(r["urn"].split("::")[-1] for r in kubernetes if not r["type"].startswith("pulumi:providers"))
    assert len(owned) == len(objects)
    assert [name for name in steps["update"] if name not in ("cluster", "management")] == owned, steps
    project.up()
    for obj in objects:
        assert live_differences(cluster, obj) == [], obj["metadata"]

    # kubectl's own managers (kubectl-patch, kubectl-set: pulumi-kubernetes takes their fields over before a real
    # update, not in the server-side dry run of a preview), then a manager of another name (a controller, a team's
    # tool), whose fields it never takes over: `up --refresh` as a user runs it, its preview included, then the
    # update alone.
    for manager, mark, skip in ((None, "edited", ()), ("platform-team", "edited-again", ("--skip-preview",))):
        for obj in objects:
            edit(cluster, obj, manager, mark)
            assert live_differences(cluster, obj) != [], f"the edit of {where(obj)} changed nothing"
        if not skip:
            preview = project.run("preview", "--refresh", "--json", check=False)
            assert "Traceback" not in preview.stdout + preview.stderr, preview.stdout + preview.stderr
            assert preview.returncode == 0, preview.stdout + preview.stderr
            assert changes(json.loads(preview.stdout)) == {"update": owned}
        repaired = project.run("up", "--yes", "--refresh", *skip, check=False)
        output = repaired.stdout + repaired.stderr
        assert "Traceback" not in output, output
        assert "KeyboardInterrupt" not in output, output
        assert repaired.returncode == 0, output
        for obj in objects:
            assert live_differences(cluster, obj) == [], (manager, where(obj))
    project.run("preview", "--refresh", "--expect-no-changes")
    project.run("destroy", "--yes", "--skip-preview")
    leftover = [where(o) for o in objects if cluster.exists(*where(o))]
    assert leftover == [], leftover


def test_a_failed_update_names_the_api_servers_reason_with_no_traceback(project_factory: Any, cluster: Cluster) -> None:
    """An update the API server refuses (a proxy-config someone made immutable) fails `preview` and `up` with its
    reason, and no Python traceback: the engine stops the program (SIGINT) when a step fails."""
    settings = {"cluster": {"podCidrs": ["10.244.0.0/16"], "nodeCidrs": ["192.0.2.0/24"]}, "namespaces": ["team-a"]}
    project: Project = stack(project_factory, cluster, "refused", settings)
    project.up()
    cluster.kubectl("patch", "configmap", "proxy-config", "-n", "team-a", "--type=merge", "-p", '{"immutable":true}')
    project.config(f"{NS}:proxy", {"noProxy": [".corp.example"]})
    for command in (("preview",), ("up", "--yes"), ("up", "--yes", "--skip-preview")):
        result = project.run(*command, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert "field is immutable when `immutable` is set" in output, output
        assert "Traceback" not in output, output
        assert "KeyboardInterrupt" not in output, output
    project.run("destroy", "--yes", "--skip-preview")
