"""The oldest Pulumi CLI the install guide names (docs/guides/install.md, "The Pulumi CLI and pulumi-kubernetes
versions you need"), under the real engine (pytest -m engine): `MINIMUM_CLI` built by scripts/engine like the
default CLI, with the same language hosts, provider and SDK pins (constraints/engine.txt, which are the package's
minimum `pulumi` and `pulumi-kubernetes`). The stack transform's program runs `pulumi up` into a rendered directory
and the IPv6-only example previews, as with the default CLI (tests/engine/test_examples.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import CONSTRAINTS, ROOT, EngineError, Project, build_engine, read_rendered
from .test_examples import UNREACHABLE

pytestmark = pytest.mark.engine
MINIMUM_CLI = "v3.259.0"
"""The install guide's minimum Pulumi CLI: the oldest this lane runs."""


@pytest.fixture(scope="module")
def minimum_engine() -> Path:
    try:
        path = build_engine(cli=MINIMUM_CLI)
    except EngineError as exc:
        pytest.fail(str(exc))
    version = subprocess.run([str(path / "pulumi"), "version"], capture_output=True, text=True, timeout=60)
    assert version.stdout.strip() == MINIMUM_CLI, version
    return path


def test_the_install_guide_names_the_versions_this_lane_runs() -> None:
    guide = (ROOT / "docs/guides/install.md").read_text()
    pins = dict(re.findall(r"^([a-z-]+)==([0-9.]+)$", CONSTRAINTS.read_text(), re.M))
    assert f"| Pulumi CLI | {MINIMUM_CLI.lstrip('v')} |" in guide
    assert f"| `pulumi` (Python SDK) | {pins['pulumi']} |" in guide
    assert f"| `pulumi-kubernetes` (Python SDK and provider plugin) | {pins['pulumi-kubernetes']} |" in guide
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"pulumi>={pins["pulumi"]},' in pyproject
    assert f'"pulumi-kubernetes>={pins["pulumi-kubernetes"]},' in pyproject


def test_the_transform_program_runs_up_with_the_minimum_cli(
    minimum_engine: Path, engine_venv: Path, tmp_path: Path
) -> None:
    project = Project(ROOT / "tests/fixtures/programs/helm-transform", tmp_path, minimum_engine, engine_venv, "ci")
    project.init()
    project.config("chart", str(ROOT / "tests/fixtures/charts/egress-demo"))
    project.up()
    objects = read_rendered(project.dir / "rendered")
    env = {e["name"]: e["value"] for e in project.outputs()["env"]}
    app = objects[("Deployment", "apps", "demo-app")]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {e["name"]: e["value"] for e in app[1:]} == env
    assert project.run("preview", "--expect-no-changes").returncode == 0


def test_the_example_previews_with_the_minimum_cli(minimum_engine: Path, engine_venv: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE)
    project = Project(ROOT / "examples/ipv6-only", tmp_path, minimum_engine, engine_venv, "ci")
    project.env["KUBECONFIG"] = str(kubeconfig)
    project.init()
    preview = project.run("preview", "--json")
    steps = json.loads(preview.stdout)["steps"]
    assert {step["op"] for step in steps} == {"create"}, steps
    created = {step["urn"].split("::")[-2].split("$")[-1] for step in steps}
    assert {"kubernetes:apps/v1:DaemonSet", "kubernetes:core/v1:Service"} <= created, created
