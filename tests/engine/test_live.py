"""The stack program under the real engine against the test cluster (pytest -m "engine or cluster"): etcd,
kube-apiserver, controller-manager and scheduler built from Kubernetes' Go modules with three kwok nodes, all on
127.0.0.1 (scripts/cluster). `pulumi up`, `refresh`, drift repair, `check` and `destroy`, then adopting
objects made beforehand with kubectl: by `adoptExisting` and by the upgrades guide's `pulumi import` commands.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render.kyverno import POLICY_NAME
from tests.kwok_cluster import kwok_cluster

from .conftest import LAYOUT_DEFAULT_PROVIDER, ROOT, Project, changes, old_layout

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NS = "proxy-component"
NODES = 3
PROVIDER = "pulumi:providers:kubernetes"
SETTINGS: dict[str, Any] = {
    "cluster": {
        "podCidrs": ["10.0.0.0/16", "fd00::/48"],
        "serviceCidrs": ["10.0.0.0/24"],
        "nodeCidrs": ["192.0.2.0/24", "2001:db8::/64"],
        "ipFamily": "dual",
    },
    "injection": {"kyverno": True, "kyvernoPolicy": "ClusterPolicy"},  # the MutatingPolicy: test_admission_live.py
    "helmValuesSecrets": [{"profile": "cert-manager", "namespace": "kube-system"}],
    "namespaces": ["default", "team-a"],
}


def kyverno_crd() -> dict[str, Any]:
    """Kyverno's ClusterPolicy CRD, from the trimmed schema in tests/fixtures/crds (made structural)."""

    def structural(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: structural(v) for k, v in node.items() if not (k == "additionalProperties" and v is False)}
            if out.get("type") == "array" and "items" not in out:  # trimmed away: keep whatever is there
                out["items"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            return out
        return [structural(v) for v in node] if isinstance(node, list) else node

    schema = structural(yaml.safe_load((ROOT / "tests/fixtures/crds/kyverno-clusterpolicy-v1.yaml").read_text()))
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusterpolicies.kyverno.io"},
        "spec": {
            "group": "kyverno.io",
            "scope": "Cluster",
            "names": {
                "kind": "ClusterPolicy",
                "plural": "clusterpolicies",
                "singular": "clusterpolicy",
                "listKind": "ClusterPolicyList",
            },
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def exists(self, *args: str) -> bool:
        return self.kubectl("get", *args, check=False).returncode == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("cluster"), "pc-engine", NODES) as kubeconfig:
        live = Cluster(kubeconfig)
        for _ in range(60):
            if len(live.get("nodes")["items"]) == NODES:
                break
            time.sleep(1)
        live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(kyverno_crd()))
        for _ in range(120):  # `kubectl wait` fails outright while the CRD has no conditions yet
            conditions = live.get("crd", "clusterpolicies.kyverno.io").get("status", {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the ClusterPolicy CRD was not established in 60 s")
        live.kubectl("create", "namespace", "team-a")
        yield live


@pytest.fixture(autouse=True)
def _clean(cluster: Cluster) -> Iterator[None]:
    """Each test starts with none of the component's objects, whatever the one before left."""
    yield
    for kind, namespace, name in OBJECTS:
        cluster.kubectl("delete", kind, name, "--ignore-not-found", *(["-n", namespace] if namespace else []))


def stack(project_factory: Any, cluster: Cluster, name: str, settings: dict[str, Any], **provider: Any) -> Project:
    project: Project = project_factory(".", name, name)
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    project.config(f"{NS}:kubeconfig", str(cluster.kubeconfig))
    for key, value in {**settings, **provider}.items():
        project.config(f"{NS}:{key}", value)
    return project


def apply_rendered(cluster: Cluster, settings: dict[str, Any], tmp_path: Path) -> None:
    """Make the objects beforehand as the runbook did: `proxy-component render` applied with kubectl."""
    path = tmp_path / "beforehand.yaml"
    path.write_text(yaml.safe_dump(settings))
    rendered = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(path)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=rendered.stdout)


def check(cluster: Cluster, settings: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check-settings.yaml"
    path.write_text(yaml.safe_dump(settings))
    return subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "check", str(path), "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


OBJECTS = [
    ("daemonset", "kube-system", "http-proxy"),
    ("service", "kube-system", "http-proxy"),
    ("configmap", "kube-system", "http-proxy-config"),
    ("configmap", "default", "proxy-config"),
    ("configmap", "team-a", "proxy-config"),
    ("secret", "kube-system", "cert-manager-proxy-values"),
    ("clusterpolicy", "", POLICY_NAME),
]


def _present(cluster: Cluster) -> list[tuple[str, str, str]]:
    return [o for o in OBJECTS if cluster.exists(o[0], o[2], *(["-n", o[1]] if o[1] else []))]


def assert_copied_kubeconfig(project: Project, cluster: Cluster) -> None:
    """pulumi-kubernetes copies the kubeconfig it is given, credentials included, to $TMPDIR/kubeconfig<digits> and
    never removes the copy: docs/guides/security.md tells users to run pulumi with a TMPDIR of its own."""
    copies = sorted(project.tmp.glob("kubeconfig*"))
    assert copies, sorted(p.name for p in project.tmp.iterdir())
    given = {u["name"]: u["user"] for u in yaml.safe_load(cluster.kubeconfig.read_text())["users"]}
    for copy in copies:
        assert copy.stat().st_mode & 0o077 == 0, oct(copy.stat().st_mode)  # mode 0600: the user's own
        users = {u["name"]: u["user"] for u in yaml.safe_load(copy.read_text())["users"]}
        assert users == given, (copy, users, given)


def test_up_refresh_drift_check_and_destroy_against_the_test_cluster(
    project_factory: Any, cluster: Cluster, tmp_path: Path
) -> None:
    project = stack(project_factory, cluster, "live", SETTINGS)
    project.up()
    assert_copied_kubeconfig(project, cluster)

    daemonset = cluster.get("daemonset", "http-proxy", "-n", "kube-system")
    status = daemonset["status"]
    assert status["desiredNumberScheduled"] == NODES
    assert status["numberReady"] == NODES, status
    pods = cluster.get("pods", "-n", "kube-system", "-l", "app=http-proxy")["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(
        n["metadata"]["name"] for n in cluster.get("nodes")["items"]
    )
    slices = cluster.get("endpointslices", "-n", "kube-system", "-l", "kubernetes.io/service-name=http-proxy")["items"]
    ready = [e for s in slices for e in s.get("endpoints") or [] if e["conditions"].get("ready")]
    assert len(ready) >= NODES, slices
    assert _present(cluster) == OBJECTS
    no_proxy = cluster.get("configmap", "proxy-config", "-n", "team-a")["data"]["NO_PROXY"]
    assert no_proxy == project.outputs()["noProxy"]

    project.run("refresh", "--yes", "--expect-no-changes")

    cluster.kubectl(
        "patch", "configmap", "proxy-config", "-n", "team-a", "--type=merge", "-p", '{"data":{"NO_PROXY":"edited"}}'
    )
    drift = changes(project.preview_json("--refresh"))
    assert drift == {"update": ["live-proxy-config-team-a"]}, drift
    project.up("--refresh")
    assert cluster.get("configmap", "proxy-config", "-n", "team-a")["data"]["NO_PROXY"] == no_proxy
    project.run("preview", "--refresh", "--expect-no-changes")

    result = check(cluster, SETTINGS, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr

    project.run("destroy", "--yes", "--skip-preview")
    assert _present(cluster) == []


def test_adopt_existing_takes_over_objects_made_with_kubectl(
    project_factory: Any, cluster: Cluster, tmp_path: Path
) -> None:
    settings = {"cluster": SETTINGS["cluster"], "namespaces": ["default"]}
    apply_rendered(cluster, settings, tmp_path)
    project = stack(project_factory, cluster, "adopt", settings)
    plain = project.run("up", "--yes", "--skip-preview", check=False)
    assert plain.returncode != 0, "the control: without adoptExisting the objects are in the way"
    assert "already exists" in plain.stdout + plain.stderr
    project.config(f"{NS}:adoptExisting", True)
    project.up()
    project.run("preview", "--expect-no-changes")
    kinds = sorted(
        r["type"]
        for r in project.export()["deployment"]["resources"]
        if r["type"].startswith("kubernetes:core") or r["type"].startswith("kubernetes:apps")
    )
    assert kinds == [
        "kubernetes:apps/v1:DaemonSet",
        "kubernetes:core/v1:ConfigMap",
        "kubernetes:core/v1:ConfigMap",
        "kubernetes:core/v1:Service",
    ]
    project.run("destroy", "--yes", "--skip-preview")
    assert not cluster.exists("daemonset", "http-proxy", "-n", "kube-system")


REPLACING = {"replace", "create-replacement", "delete-replaced", "delete"}


def test_a_default_provider_stack_moves_to_the_one_explicit_provider_and_adopt_toggles_replace_nothing(
    project_factory: Any, cluster: Cluster
) -> None:
    """Stacks made by the layout that used the default provider, then adoptExisting on and off: nothing replaced."""
    settings = {"cluster": SETTINGS["cluster"], "namespaces": ["default"]}
    project: Project = project_factory(".", "moved", "moved")
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    for key, value in settings.items():
        project.config(f"{NS}:{key}", value)
    project.env["KUBECONFIG"] = str(cluster.kubeconfig)  # the ambient kubeconfig, as the default provider reads it
    with old_layout(project, LAYOUT_DEFAULT_PROVIDER):
        project.up()
    providers = [r["urn"].split("::")[-1] for r in project.export()["deployment"]["resources"] if r["type"] == PROVIDER]
    assert providers == ["default_4_32_0"], providers
    before = {r["urn"] for r in project.export()["deployment"]["resources"] if r["type"].startswith("kubernetes:")}

    # pulumi-kubernetes creates with a client-side create and moves the fields to its server-side apply manager on
    # the first update, but not in a preview (pkg/await/await.go, fixCSAFieldManagers): a dry run would keep the old
    # probes' tcpSocket beside the new httpGet, which the API server refuses ("may not specify more than 1 handler
    # type"; the first preview failed so before). The stack program sees the old owner and previews those probes as
    # unknown; `up` applies them (tests/engine/test_upgrades.py runs the recorded layouts).
    first = project.run("preview", "--json")
    ops = changes(json.loads(first.stdout))
    assert set(ops) == {"update"}, ops
    assert "moved-tinyproxy" in ops["update"], ops
    up = project.run("up", "--yes")
    summary = [line for line in up.stdout.splitlines() if re.search(r"\b(replaced|deleted)\b", line)]
    assert summary == [], summary
    after = {r["urn"] for r in project.export()["deployment"]["resources"] if r["type"].startswith("kubernetes:")}
    assert after == before
    providers = [r["urn"].split("::")[-1] for r in project.export()["deployment"]["resources"] if r["type"] == PROVIDER]
    assert providers == ["cluster"], providers

    for adopt in (True, False):
        project.config(f"{NS}:adoptExisting", adopt)
        ops = changes(project.preview_json())
        assert ops == {"update": ["cluster"]}, (adopt, ops)
        project.up()
    project.run("preview", "--expect-no-changes")
    project.run("destroy", "--yes", "--skip-preview")
    # No kubeconfig in the stack's config, only $KUBECONFIG in the environment: copied all the same (the provider
    # takes the variable as its kubeconfig setting).
    assert_copied_kubeconfig(project, cluster)


def guide_import_commands() -> str:
    """The upgrades guide's `pulumi import` block (docs/guides/upgrades.md), as written."""
    text = (ROOT / "docs/guides/upgrades.md").read_text()
    block = text.split("<!-- import-commands:", 1)[1].split("```sh\n", 1)[1]
    return block.split("```", 1)[0]


def test_the_guides_import_commands_take_over_objects_made_with_kubectl(
    project_factory: Any, cluster: Cluster, tmp_path: Path
) -> None:
    settings = {"cluster": SETTINGS["cluster"], "namespaces": ["default"]}
    apply_rendered(cluster, settings, tmp_path)
    cluster.kubectl("-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=60s")
    generation = cluster.get("daemonset", "http-proxy", "-n", "kube-system")["metadata"]["generation"]
    pods = {p["metadata"]["uid"] for p in cluster.get("pods", "-n", "kube-system", "-l", "app=http-proxy")["items"]}
    cluster_ip = cluster.get("service", "http-proxy", "-n", "kube-system")["spec"]["clusterIP"]

    project = stack(project_factory, cluster, "imported", settings)
    script = tmp_path / "import.sh"
    script.write_text("set -euo pipefail\n" + guide_import_commands())
    result = subprocess.run(
        ["bash", str(script)], cwd=project.dir, env=project.env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = [line for line in result.stdout.splitlines() if re.search(r"\b(replaced|deleted)\b", line)]
    assert summary == [], summary
    project.run("preview", "--expect-no-changes")
    types = sorted(
        r["type"] for r in project.export()["deployment"]["resources"] if r["type"].startswith("kubernetes:")
    )
    assert types == [
        "kubernetes:apps/v1:DaemonSet",
        *["kubernetes:core/v1:ConfigMap"] * 2,
        "kubernetes:core/v1:Service",
    ]
    assert cluster.get("daemonset", "http-proxy", "-n", "kube-system")["metadata"]["generation"] == generation
    after = {p["metadata"]["uid"] for p in cluster.get("pods", "-n", "kube-system", "-l", "app=http-proxy")["items"]}
    assert after == pods, "the pods were not rolled"
    assert cluster.get("service", "http-proxy", "-n", "kube-system")["spec"]["clusterIP"] == cluster_ip
    project.run("destroy", "--yes", "--skip-preview")


def test_a_listed_namespace_that_does_not_exist_is_named_before_any_object(
    project_factory: Any, cluster: Cluster
) -> None:
    """Before: a minute of retries, then `3 errored`. Now the preview names it at once and writes nothing."""
    project = stack(project_factory, cluster, "nons", {**SETTINGS, "namespaces": ["default", "team-a", "no-such-ns"]})
    started = time.monotonic()
    for command in (("preview",), ("up", "--yes", "--skip-preview")):
        result = project.run(*command, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0
        assert "namespaces: 'no-such-ns' does not exist in the cluster (" in output, output
        assert "Traceback" not in output
    assert time.monotonic() - started < 60
    assert _present(cluster) == []


def test_check_of_a_stack_reads_both_layers_with_no_settings_file(project_factory: Any, cluster: Cluster) -> None:
    """`check --stack NAME` reads the settings as the stack program does (the installation stack's too): clean right
    after `up`, a drift named after a kubectl edit."""
    project: Project = project_factory(".", "fleet", "checkstack")
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    project.config(f"{NS}:layer", "installation")
    project.config(f"{NS}:proxy", {"noProxy": [".corp.example"]})
    project.config(f"{NS}:namespaces", ["default"])
    project.up()
    project.stack = "cluster-a"
    project.init()
    project.config(f"{NS}:kubeconfig", str(cluster.kubeconfig))
    project.config(f"{NS}:installationStack", "fleet")
    cluster_layer = {key: value for key, value in SETTINGS.items() if key != "namespaces"}
    for key, value in {**cluster_layer, "namespaces": ["team-a"]}.items():
        project.config(f"{NS}:{key}", value)
    project.up()
    assert ".corp.example" in cluster.get("configmap", "proxy-config", "-n", "team-a")["data"]["NO_PROXY"]

    def check_stack() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "proxy_component.cli", "check", "--stack", "cluster-a",
             "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True, text=True, timeout=300, cwd=project.dir, env=project.env,
        )  # fmt: skip

    clean = check_stack()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert ": clean (" in clean.stderr
    cluster.kubectl(
        "patch", "configmap", "proxy-config", "-n", "team-a", "--type=merge", "-p", '{"data":{"NO_PROXY":"edited"}}'
    )
    drifted = check_stack()
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "team-a" in drifted.stdout
    assert "NO_PROXY" in drifted.stdout
    project.run("destroy", "--yes", "--skip-preview")
