"""Upgrades from recorded states (pytest -m "engine or cluster"): stacks made by earlier commits of the root stack
program, each upgraded to this checkout under the real engine against the test cluster.

Each earlier layout has a fixture under tests/fixtures/upgrades/<commit>/: `stack.yaml`, the stack's config as that
commit's program was run (its Pulumi.yaml declared the keys), and `state.json`, the state as `pulumi stack export`
gave it after that commit's `up`. Pulumi's own packages record a state and replay a preview against it without a
cloud; here the subject lives in the cluster as much as in the state: which field manager owns each live field
(pulumi-kubernetes' client-side create, moved to its apply manager only by an `up`) decides whether the probe
handler change can be applied, and no recorded state can make live objects with those owners. So each test runs
the old commit's program (its package from `git archive`, its Pulumi.yaml's config keys) against a fresh test
cluster to create the live objects through the real provider, then asserts that its exported state *is* the recorded
one, modulo what differs run to run (times, uids, resource versions, cluster IPs, provider ids, field manager
suffixes, ciphertexts: `comparable`), before upgrading. A change in how the old program or the engine makes a stack
fails that comparison instead of silently testing something else; `PROXY_COMPONENT_RECORD_UPGRADES=1` rewrites the
fixtures, to be reviewed in the diff.

The upgrade then follows the CHANGELOG's upgrade notes for that layout and asserts what they say: the preview's
counts exactly (no replace, no delete, no create), a green `pulumi up` (with its preview: no `--skip-preview`), the
same live object (uid) for every object before and after, the DaemonSet's probes with one handler, a second
preview with no change, and `proxy-component check` clean.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render.kyverno import POLICY_NAME
from proxy_component.stack import PROVIDER_KEYS
from tests.kwok_cluster import kwok_cluster

from .conftest import ROOT, Project, changes, old_layout
from .test_admission_live import kyverno_crd as kyverno_v1_crd
from .test_live import Cluster, kyverno_crd

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NS = "proxy-component"
NODES = 3
FIXTURES = ROOT / "tests/fixtures/upgrades"
RECORD = os.environ.get("PROXY_COMPONENT_RECORD_UPGRADES") == "1"
STACK = "prod"
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
# Every object the stacks below make, as (kind, namespace, name).
OBJECTS = [
    ("daemonset", "kube-system", "http-proxy"),
    ("service", "kube-system", "http-proxy"),
    ("configmap", "kube-system", "http-proxy-config"),
    ("configmap", "default", "proxy-config"),
    ("configmap", "team-a", "proxy-config"),
    ("secret", "kube-system", "cert-manager-proxy-values"),
    ("clusterpolicy", "", POLICY_NAME),
]


@dataclass(frozen=True)
class Upgrade:
    """A stack made by `commit`'s program, and what upgrading it to this checkout shows."""

    commit: str
    why: str  # what makes this layout one to test
    its_config: bool  # the commit's Pulumi.yaml config declarations (a592121 required the provider keys)
    ambient: bool  # no kubeconfig key: the program's provider (or the default one) read $KUBECONFIG
    # `pulumi preview`'s changeSummary before the upgrade notes' step (the Kyverno default moved) and after it
    unstepped: dict[str, int]
    summary: dict[str, int]


UPGRADES = [
    Upgrade(
        "a592121",
        "Pulumi.yaml required renderYamlToDirectory, kubeconfig and context ('' to apply); the component named "
        "after cluster.name",
        its_config=True,
        ambient=False,
        unstepped={"update": 7, "create": 1, "delete": 1, "same": 2},
        summary={"update": 8, "same": 2},
    ),
    Upgrade(
        "50668ea",
        "the default provider when no provider key is set (the first layout whose upgrade the issue saw work)",
        its_config=False,
        ambient=True,
        unstepped={"update": 7, "create": 1, "delete": 1, "same": 2},
        summary={"update": 8, "same": 2},
    ),
    Upgrade(
        "f0b6270",
        "the last commit before the CHANGELOG's 0.2.0 section began (b637890): 0.1.0's last layout, with an "
        "explicit provider from the kubeconfig key (no mutable ConfigMaps or Secrets)",
        its_config=False,
        ambient=False,
        unstepped={"update": 7, "create": 1, "delete": 1, "same": 2},
        summary={"update": 8, "same": 2},
    ),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("cluster"), "pc-upgrades", NODES) as kubeconfig:
        live = Cluster(kubeconfig)
        deadline = time.monotonic() + 60
        while len(live.get("nodes")["items"]) < NODES:  # kwok registers its nodes after the API server is up
            assert time.monotonic() < deadline, "the kwok nodes did not register in 60 s"
            time.sleep(0.5)
        # Kyverno's CRDs, as a cluster with Kyverno 1.17 or later has them: the preview refuses kinds the cluster does
        # not serve (issue 44), and the unstepped upgrade plans the MutatingPolicy and GeneratingPolicy.
        crds = [
            kyverno_crd(),
            kyverno_v1_crd("MutatingPolicy", "mutatingpolicies"),
            kyverno_v1_crd("GeneratingPolicy", "generatingpolicies"),
        ]
        live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crds))
        for crd in crds:
            deadline = time.monotonic() + 60
            while True:  # `kubectl wait` fails outright while the CRD has no conditions yet
                conditions = live.get("crd", crd["metadata"]["name"]).get("status", {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    break
                assert time.monotonic() < deadline, f"the {crd['metadata']['name']} CRD was not established in 60 s"
                time.sleep(0.5)
        live.kubectl("create", "namespace", "team-a")
        yield live


@pytest.fixture(autouse=True)
def _clean(cluster: Cluster) -> Iterator[None]:
    """Each test starts with none of the stacks' objects, whatever the one before left."""
    yield
    for kind, namespace, name in OBJECTS:
        cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait", *(["-n", namespace] if namespace else []))


def uids(cluster: Cluster) -> dict[tuple[str, str, str], str]:
    """The live object behind each of OBJECTS that exists: a delete and re-create changes it."""
    found = {}
    for kind, namespace, name in OBJECTS:
        result = cluster.kubectl(
            "get", kind, name, "-o", "json", *(["-n", namespace] if namespace else []), check=False
        )
        if result.returncode == 0:
            found[(kind, namespace, name)] = json.loads(result.stdout)["metadata"]["uid"]
    return found


def fixture_config(upgrade: Upgrade) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((FIXTURES / upgrade.commit / "stack.yaml").read_text())["config"]
    return config


def settings_of(config: dict[str, Any]) -> dict[str, Any]:
    """The settings a stack's config holds (its proxy-component keys but the provider's), as `check` reads them."""
    provider = set(PROVIDER_KEYS)
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.split(":", 1)[1] not in provider}


def old_stack(project_factory: Any, cluster: Cluster, upgrade: Upgrade) -> Project:
    """The stack made by the old commit's program, from the fixture's config; its state checked against the fixture."""
    project: Project = project_factory(".", STACK, upgrade.commit)
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    for key, value in fixture_config(upgrade).items():
        if value == "$KUBECONFIG":
            value = str(cluster.kubeconfig)
        project.config(key, value)
    if upgrade.ambient:
        project.env["KUBECONFIG"] = str(cluster.kubeconfig)
    with old_layout(project, upgrade.commit, its_config=upgrade.its_config):
        project.up()
    state = project.export()
    recorded = FIXTURES / upgrade.commit / "state.json"
    if RECORD:
        recorded.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    differing = differences(comparable(json.loads(recorded.read_text())), comparable(state))
    assert differing == [], (
        f"the state {upgrade.commit}'s program makes is not the recorded one ({recorded}) at {differing[:20]}: "
        "record it again with PROXY_COMPONENT_RECORD_UPGRADES=1 and read the diff"
    )
    return project


def differences(recorded: Any, made: Any, at: str = "") -> list[str]:
    """The paths where two states differ."""
    if isinstance(recorded, dict) and isinstance(made, dict):
        return [
            p
            for k in sorted(recorded.keys() | made.keys())
            for p in differences(recorded.get(k), made.get(k), f"{at}.{k}")
        ]
    if isinstance(recorded, list) and isinstance(made, list) and len(recorded) == len(made):
        return [p for i, (r, m) in enumerate(zip(recorded, made, strict=True)) for p in differences(r, m, f"{at}[{i}]")]
    return [] if recorded == made else [at]


VOLATILE_METADATA = ("creationTimestamp", "resourceVersion", "uid")


def comparable(export: dict[str, Any]) -> list[dict[str, Any]]:
    """A state's resources, sorted by URN, without what differs from run to run: the times, the provider's id (in
    each provider reference too), the objects' uids, resource versions, creation and field manager times, the
    Service's cluster IPs, pulumi-kubernetes' apply manager's random suffix, the DaemonSet's status and the
    controllers' field manager entries for it (which status fields they own depends on when the engine read it),
    the secrets' ciphertexts (salted per stack) and the stack trace of each registration. What the old program's
    create owns, field by field, is compared: it decides what the upgrade's first update can change."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            if "ciphertext" in value:
                return "[secret]"
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    resources = []
    for resource in export["deployment"]["resources"]:
        r = {k: v for k, v in resource.items() if k not in ("created", "modified", "stackTrace", "sourcePosition")}
        if r["type"].startswith("pulumi:providers:"):
            r["id"] = "[id]"
        if "provider" in r:
            r["provider"] = r["provider"].rsplit("::", 1)[0]
        outputs = dict(r.get("outputs") or {})
        outputs.pop("__fieldManager", None)
        outputs.pop("status", None)
        if isinstance(outputs.get("metadata"), dict):
            metadata = {k: v for k, v in outputs["metadata"].items() if k not in VOLATILE_METADATA}
            metadata["managedFields"] = [
                {k: v for k, v in m.items() if k != "time"}
                for m in metadata.get("managedFields") or []
                if m.get("subresource") != "status"  # the controllers': which status fields, by timing
            ]
            outputs["metadata"] = metadata
        if isinstance(outputs.get("spec"), dict):
            outputs["spec"] = {k: v for k, v in outputs["spec"].items() if k not in ("clusterIP", "clusterIPs")}
        if outputs:
            r["outputs"] = outputs
        resources.append(clean(r))
    return sorted(resources, key=lambda r: str(r["urn"]))


def check(cluster: Cluster, settings: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "check-settings.yaml"
    path.write_text(yaml.safe_dump(settings))
    return subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "check", str(path), "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


def summary(preview: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = preview["changeSummary"]
    return counts


@pytest.mark.parametrize("upgrade", UPGRADES, ids=[u.commit for u in UPGRADES])
def test_a_recorded_stack_upgrades_with_a_normal_up(
    project_factory: Any, cluster: Cluster, tmp_path: Path, upgrade: Upgrade
) -> None:
    project = old_stack(project_factory, cluster, upgrade)
    before = uids(cluster)
    assert len(before) == len(OBJECTS), before
    probes = cluster.get("daemonset", "http-proxy", "-n", "kube-system")["spec"]["template"]["spec"]["containers"][0]
    assert "tcpSocket" in probes["livenessProbe"], "the control: the old layout's probes are TCP"

    # The upgrade notes' step: the Kyverno default moved to the MutatingPolicy (Kyverno 1.17 and later); without it
    # the ClusterPolicy is deleted and the new policies created.
    unstepped = project.preview_json()
    assert summary(unstepped) == upgrade.unstepped, changes(unstepped)
    assert [name.split("-", 1)[1] for name in changes(unstepped)["delete"]] == ["kyverno-policy"]
    project.config(f"{NS}:injection", {**fixture_config(upgrade)[f"{NS}:injection"], "kyvernoPolicy": "ClusterPolicy"})

    preview = project.preview_json()
    assert summary(preview) == upgrade.summary, changes(preview)
    assert set(changes(preview)) == {"update"}, changes(preview)
    notes = [d["message"] for d in preview.get("diagnostics", []) if "moves from tcpSocket" in d.get("message", "")]
    assert notes, "the preview says why the probes are unknown"

    up = project.run("up", "--yes")  # with its preview
    lines = [line for line in up.stdout.splitlines() if re.search(r"\b(replaced|deleted|created|failed)\b", line)]
    assert lines == [], lines
    assert uids(cluster) == before, "a live object was deleted and made again"
    containers = cluster.get("daemonset", "http-proxy", "-n", "kube-system")["spec"]["template"]["spec"]["containers"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert [h for h in HANDLERS if h in containers[0][probe]] == ["httpGet"], containers[0][probe]

    project.run("preview", "--expect-no-changes")
    settings = settings_of(yaml.safe_load(project.stack_file.read_text())["config"])
    result = check(cluster, settings, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    project.run("destroy", "--yes", "--skip-preview")


# The release before issue 37's fix: what a user who upgraded a592121's stack to it ran.
BEFORE_THE_FIX = "7ab9a09"


def guide_block(marker: str) -> str:
    """A block of the upgrades guide (docs/guides/upgrades.md) after `<!-- MARKER:`, as written."""
    text = (ROOT / "docs/guides/upgrades.md").read_text()
    block = text.split(f"<!-- {marker}:", 1)[1].split("```sh\n", 1)[1]
    return block.split("```", 1)[0]


def test_a_half_applied_upgrade_recovers_as_the_guide_says(
    project_factory: Any, cluster: Cluster, tmp_path: Path
) -> None:
    """a592121's stack upgraded to the release before the fix, whose `up` fails half-way (twice, as the issue saw),
    then recovered with the guide's commands under this checkout: the state is forgotten (not the cluster), the live
    objects are imported again, and a normal `up` updates them."""
    upgrade = UPGRADES[0]
    project = old_stack(project_factory, cluster, upgrade)
    project.config(f"{NS}:injection", {**fixture_config(upgrade)[f"{NS}:injection"], "kyvernoPolicy": "ClusterPolicy"})
    with old_layout(project, BEFORE_THE_FIX):
        for _ in range(2):
            failed = project.run("up", "--yes", "--skip-preview", check=False)
            assert failed.returncode != 0, "the control: the release before the fix fails half-way"
            assert "already exists" in failed.stdout, failed.stdout
    # Its state now holds the objects under their old names beside the new ones, on a replaced provider: an `up`
    # would create them again (AlreadyExists) and delete the old names, the same live objects; refresh changes
    # nothing of it.
    half = changes(project.preview_json())
    assert half.get("delete"), half
    assert sorted(n.split("-", 1)[1] for n in half["delete"]) == sorted(n.split("-", 1)[1] for n in half["create"])
    project.run("refresh", "--yes")
    assert changes(project.preview_json()) == half

    before = uids(cluster)
    imports = guide_block("import-commands").replace("for ns in default;", "for ns in default team-a;")
    imports = imports.replace("\npulumi up --yes\n", "\n" + guide_block("import-more") + "pulumi up --yes\n")
    # The guide: import each object that still exists (the failed `up` may have deleted the Service, before it
    # made it again: delete before replace); `up` makes the others.
    missing = set(OBJECTS) - set(before)
    assert missing <= {("service", "kube-system", "http-proxy")}, missing
    if missing:
        imports = "\n".join(line for line in imports.splitlines() if "kubernetes:core/v1:Service" not in line)
    script = tmp_path / "recover.sh"
    script.write_text("set -euo pipefail\n" + guide_block("recovery-commands") + imports + "\n")
    result = subprocess.run(
        ["bash", str(script)], cwd=project.dir, env={**project.env, "PULUMI_STACK": STACK},
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if re.search(r"\b(replaced|deleted|failed)\b", line)]
    assert lines == ["Resources deleted"], lines  # `pulumi state delete --all`'s own: the state's, not the cluster's
    after = uids(cluster)
    assert set(after) == set(OBJECTS), after
    assert {key: after[key] for key in before} == before, "a live object was deleted and made again"
    containers = cluster.get("daemonset", "http-proxy", "-n", "kube-system")["spec"]["template"]["spec"]["containers"]
    assert [h for h in HANDLERS if h in containers[0]["livenessProbe"]] == ["httpGet"], containers[0]
    project.run("preview", "--expect-no-changes")
    settings = settings_of(yaml.safe_load(project.stack_file.read_text())["config"])
    result = check(cluster, settings, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    project.run("destroy", "--yes", "--skip-preview")
