"""The Kyverno policies under the real Kyverno CLI (scripts/kyverno): `kyverno test` over the shared table of
injection cases (tests/fixtures/injection-cases.yaml), each Pod's patched resource the one the stack transform
renders, and the GeneratingPolicies' clones; `kyverno apply` shows what the policy made when a case differs.

The reference is the transform under the same settings with Kyverno on: the GeneratingPolicies clone `proxy-config`
and `proxy-trust` into every namespace, so every table namespace outside the exclusions counts as listed.
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render import plain_values
from proxy_component.render.digest import settings_digest
from proxy_component.render.env import proxy_config_object
from proxy_component.render.kyverno import CLONE_CONFIG_NAME, CLONE_TRUST_NAME, POLICY_NAME, kyverno_objects
from proxy_component.render.trust import trust_bundle_object
from proxy_component.settings import Settings, parse_settings
from tests.injection_cases import cases, namespaces, profile_raw, profiles, stamp, transformed

Obj = dict[str, Any]
KINDS = ("MutatingPolicy", "ClusterPolicy")
FIELDS = ("initContainers", "containers")


def kyverno_settings(profile: str, kind: str, kubernetes_version: str | None = None) -> Settings:
    raw = profile_raw(profile)
    if kubernetes_version is not None:
        raw["cluster"] = {**raw["cluster"], "kubernetesVersion": kubernetes_version}
    injection = raw.setdefault("injection", {})
    injection.update({"kyverno": True, "kyvernoPolicy": kind})
    excluded = set(injection.get("excludeNamespaces", ["kube-system"]))
    raw["namespaces"] = sorted({*raw.get("namespaces", []), *(ns for ns in namespaces() if ns not in excluded)})
    return parse_settings(raw)


def _pods() -> list[Obj]:
    return [case.pod() for case in cases()]


def _dump(path: Path, objects: list[Obj]) -> None:
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))


def _run(kyverno: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(kyverno), *args], capture_output=True, text=True, timeout=600, cwd=cwd)


def _summary(output: str) -> tuple[int, int]:
    """Passed (skips included, as Kyverno counts them) and failed tests from `kyverno test`'s summary line."""
    passed = re.search(r"Test Summary: (\d+) tests passed and (\d+) tests failed", output)
    if passed:
        return int(passed[1]), int(passed[2])
    failed = re.search(r"Test Summary: (\d+) out of (\d+) tests failed", output)
    assert failed, output
    return int(failed[2]) - int(failed[1]), int(failed[1])


def write_mutation_test(directory: Path, settings: Settings, kind: str, expected: list[Obj]) -> tuple[int, int]:
    """A `kyverno test` directory: the policy, every table Pod, and a result per Pod (the patched resource is the
    transform's where it changes the Pod, a skip where it leaves it alone). Returns (changed, untouched)."""
    directory.mkdir(parents=True)
    policy = next(o for o in kyverno_objects(settings, plain_values(settings)) if o["kind"] == kind)
    _dump(directory / "policy.yaml", [policy])
    pods = _pods()
    _dump(directory / "resources.yaml", pods)
    _dump(directory / "patched.yaml", expected)
    results: list[Obj] = []
    changed = 0
    for pod, after in zip(pods, expected, strict=True):
        meta = pod["metadata"]
        result: Obj = {"policy": POLICY_NAME, "kind": "Pod", "resources": [f"{meta['namespace']}/{meta['name']}"]}
        if kind == "MutatingPolicy":
            result["isMutatingPolicy"] = True
        else:
            result["rule"] = "inject-containers"
        if after == pod:
            result["result"] = "skip"
        else:
            result.update({"patchedResources": "patched.yaml", "result": "pass"})
            changed += 1
        results.append(result)
    test = {
        "apiVersion": "cli.kyverno.io/v1alpha1",
        "kind": "Test",
        "metadata": {"name": f"{kind.lower()}-injection"},
        "policies": ["policy.yaml"],
        "resources": ["resources.yaml"],
        "results": results,
    }
    _dump(directory / "kyverno-test.yaml", [test])
    return changed, len(pods) - changed


@pytest.mark.parametrize("profile", profiles())
def test_kyverno_test_patches_every_pod_of_the_table_as_the_transform_does(
    kyverno: Path, tmp_path: Path, profile: str
) -> None:
    """The MutatingPolicy: each patched Pod equal to the transform's, field by field and in order."""
    kind = "MutatingPolicy"
    settings = kyverno_settings(profile, kind)
    expected = [transformed(settings, pod) for pod in _pods()]
    changed, untouched = write_mutation_test(tmp_path / "t", settings, kind, expected)
    assert changed >= 10, (changed, untouched)
    assert untouched >= 3, (changed, untouched)
    result = _run(kyverno, "test", ".", "--require-tests", "--remove-color", "--detailed-results", cwd=tmp_path / "t")
    out = result.stdout + result.stderr
    if result.returncode != 0:
        applied = _run(kyverno, "apply", "policy.yaml", "--resource", "resources.yaml", "-o", "applied",
                       "--remove-color", cwd=tmp_path / "t")  # fmt: skip
        pytest.fail(f"kyverno test failed:\n{out}\n\nkyverno apply:\n{applied.stdout}{applied.stderr}")
    passed, failed = _summary(out)
    assert failed == 0, out
    assert passed >= changed + untouched, out


def _unordered(pod: Obj) -> Obj:
    """What a Pod holds, order aside: each container by name with its env by name and its mounts by name, and the
    Pod's volumes by name."""
    spec = pod["spec"]

    def by_name(items: Any) -> dict[str, Any]:
        return {item["name"]: item for item in items or []}

    return {
        "containers": {
            field: {
                c["name"]: {"env": by_name(c.get("env")), "volumeMounts": by_name(c.get("volumeMounts"))}
                for c in spec.get(field) or []
            }
            for field in FIELDS
        },
        "volumes": by_name(spec.get("volumes")),
    }


@pytest.mark.parametrize("profile", profiles())
def test_the_legacy_cluster_policy_adds_what_the_transform_adds_in_its_own_order(
    kyverno: Path, tmp_path: Path, profile: str
) -> None:
    """The ClusterPolicy under `kyverno apply`: every container gets the entries, mounts and volume the transform
    gives it, none else, and keeps its own; but its strategic merge patches put the added entries before the
    container's own and reorder the containers, so the order is not the transform's (measured here: Kyverno's own
    engine, not a stand-in, decides it)."""
    settings = kyverno_settings(profile, "ClusterPolicy")
    pods = _pods()
    expected = [transformed(settings, pod) for pod in pods]
    directory = tmp_path / "t"
    write_mutation_test(directory, settings, "ClusterPolicy", expected)
    result = _run(kyverno, "apply", "policy.yaml", "--resource", "resources.yaml", "-o", "applied.yaml",
                  "--remove-color", cwd=directory)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    applied = {
        (doc["metadata"]["namespace"], doc["metadata"]["name"]): doc
        for doc in yaml.safe_load_all((directory / "applied.yaml").read_text())
        if doc
    }
    reordered = stamped = 0
    for pod, after in zip(pods, expected, strict=True):
        got = applied[(pod["metadata"]["namespace"], pod["metadata"]["name"])]
        assert _unordered(got) == _unordered(after), pod["metadata"]["name"]
        assert stamp(got) == stamp(after), pod["metadata"]["name"]  # the add anchor keeps a Pod's own
        stamped += stamp(got) == settings_digest(settings)
        reordered += got["spec"] != after["spec"]
    assert reordered > 0, "the legacy policy's order now equals the transform's: hold it to the exact comparison"
    assert stamped >= 10, stamped


@pytest.mark.parametrize("kind", KINDS)
def test_a_patched_resource_that_differs_from_the_policys_fails(kyverno: Path, tmp_path: Path, kind: str) -> None:
    """The comparison is real: one env entry less in one expected Pod, and `kyverno test` fails on that Pod."""
    settings = kyverno_settings("trust", kind)
    expected = [transformed(settings, pod) for pod in _pods()]
    spoiled = next(i for i, (pod, after) in enumerate(zip(_pods(), expected, strict=True)) if pod != after)
    expected[spoiled] = copy.deepcopy(expected[spoiled])
    expected[spoiled]["spec"]["containers"][0]["env"].pop()
    write_mutation_test(tmp_path / "t", settings, kind, expected)
    result = _run(kyverno, "test", ".", "--require-tests", "--remove-color", cwd=tmp_path / "t")
    assert result.returncode != 0
    assert _summary(result.stdout + result.stderr)[1] >= 1, result.stdout


@pytest.mark.parametrize(
    ("profile", "policy", "source"),
    [("credentials", CLONE_CONFIG_NAME, "proxy-config"), ("trust", CLONE_TRUST_NAME, "proxy-trust")],
)
def test_the_generating_policy_clones_the_source_into_a_new_namespace(
    kyverno: Path, tmp_path: Path, profile: str, policy: str, source: str
) -> None:
    settings = kyverno_settings(profile, "MutatingPolicy")
    home = settings.deployment.namespace
    origin = (
        proxy_config_object(settings, home, plain_values(settings))
        if source == "proxy-config"
        else trust_bundle_object(settings, home)
    )
    directory = tmp_path / "t"
    directory.mkdir()
    generating = next(o for o in kyverno_objects(settings, plain_values(settings)) if o["metadata"]["name"] == policy)
    _dump(directory / "policy.yaml", [generating])
    _dump(directory / "resources.yaml", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}])
    context = {"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Context", "metadata": {"name": "context"},
               "spec": {"resources": [origin]}}  # fmt: skip
    _dump(directory / "context.yaml", [context])
    clone = copy.deepcopy(origin)
    clone["metadata"]["namespace"] = "fresh"
    _dump(directory / "generated.yaml", [clone])
    test = {
        "apiVersion": "cli.kyverno.io/v1alpha1",
        "kind": "Test",
        "metadata": {"name": "clone"},
        "context": "context.yaml",
        "policies": ["policy.yaml"],
        "resources": ["resources.yaml"],
        "results": [
            {
                "policy": policy,
                "isGeneratingPolicy": True,
                "kind": "Namespace",
                "resources": ["fresh"],
                "generatedResource": "generated.yaml",
                "result": "pass",
            }
        ],
    }
    _dump(directory / "kyverno-test.yaml", [test])
    result = _run(kyverno, "test", ".", "--require-tests", "--remove-color", "--detailed-results", cwd=directory)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert _summary(out) == (1, 0), out
