"""Issue 44: every command acts on the cluster its stack names. Two test clusters, two stacks under the real engine:
stack `a` names cluster A's kubeconfig file, stack `b` holds a kubeconfig of both clusters (its contents, a secret)
and the context `b`, while the ambient kubeconfig's current context is A. `check --stack` and `rollout --stack` each
judge their stack's cluster, say so first, and refuse a flag that names the other one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kwok_cluster import kwok_cluster

from .conftest import Project

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NS = "proxy-component"
SETTINGS: dict[str, Any] = {  # the kwok nodes' addresses and pod ranges (as tests/engine/test_live.py)
    "cluster": {
        "podCidrs": ["10.0.0.0/16", "fd00::/48"],
        "serviceCidrs": ["10.0.0.0/24"],
        "nodeCidrs": ["192.0.2.0/24", "2001:db8::/64"],
        "ipFamily": "dual",
    },
    "namespaces": ["default"],
}


def _both(a: Path, b: Path) -> str:
    """One kubeconfig holding both clusters as contexts `a` and `b`, current `a`."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "current-context": "a"}
    for name, path in (("a", a), ("b", b)):
        config = yaml.safe_load(path.read_text())
        context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
        cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
        user = next(u for u in config["users"] if u["name"] == context["user"])["user"]
        merged.setdefault("clusters", []).append({"name": name, "cluster": cluster})
        merged.setdefault("users", []).append({"name": name, "user": user})
        merged.setdefault("contexts", []).append({"name": name, "context": {"cluster": name, "user": name}})
    return yaml.safe_dump(merged)


def _server(path: Path) -> str:
    config = yaml.safe_load(path.read_text())
    return str(config["clusters"][0]["cluster"]["server"])


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    with (
        kwok_cluster(tmp_path_factory.mktemp("a"), "pc-target-a", 1) as a,
        kwok_cluster(tmp_path_factory.mktemp("b"), "pc-target-b", 1) as b,
    ):
        yield a, b


def _cli(project: Project, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", *argv],
        capture_output=True, text=True, timeout=300, cwd=project.dir, env=project.env,
    )  # fmt: skip


def test_each_command_judges_the_cluster_its_stack_names(
    project_factory: Any, clusters: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = clusters
    both = _both(a, b)
    ambient = tmp_path / "ambient"
    ambient.write_text(both)  # current context: a
    project: Project = project_factory(".", "a", "targets")
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.env["KUBECONFIG"] = str(ambient)
    project.init()
    project.config(f"{NS}:kubeconfig", str(a))
    for key, value in SETTINGS.items():
        project.config(f"{NS}:{key}", value)
    project.up()
    project.stack = "b"
    project.init()
    project.config(f"{NS}:kubeconfig", both, secret=True)
    project.config(f"{NS}:context", "b")
    for key, value in SETTINGS.items():
        project.config(f"{NS}:{key}", value)
    project.up()
    try:
        for stack, server, origin in (
            ("a", _server(a), "proxy-component:kubeconfig"),
            ("b", _server(b), "proxy-component:kubeconfig and proxy-component:context"),
        ):
            checked = _cli(project, "check", "--stack", stack)
            first = checked.stderr.splitlines()[0]
            assert first.startswith(f"proxy-component check: judging the cluster at {server} (context "), checked.stderr
            assert f"from stack {stack}'s {origin})" in first, first
            assert checked.returncode == 0, checked.stdout + checked.stderr  # clean: its own stack's objects
            planned = _cli(project, "rollout", "--stack", stack)
            assert planned.stderr.startswith(f"proxy-component rollout: judging the cluster at {server} "), (
                planned.stderr
            )
        # The ambient current context (a) named with stack b's settings: refused, before anything is read.
        refused = _cli(project, "check", "--stack", "b", "--context", "a")
        assert refused.returncode == 2, refused.stderr
        assert (
            "--context 'a': stack b targets the cluster of its proxy-component:context, which is 'b'" in refused.stderr
        )
        assert "token" not in refused.stderr.lower()
        # Without --stack, a context the kubeconfig does not hold is refused with the ones it does.
        settings = tmp_path / "proxy.yaml"
        settings.write_text(yaml.safe_dump({**SETTINGS, "cluster": {**SETTINGS["cluster"], "name": "t"}}))
        typo = _cli(project, "check", str(settings), "--context", "c")
        assert typo.returncode == 2, typo.stderr
        assert f"context 'c' is not in kubeconfig {ambient} (expected one of: a, b)" in typo.stderr, typo.stderr
    finally:
        for stack in ("a", "b"):
            project.stack = stack
            project.run("destroy", "--yes", "--skip-preview")
