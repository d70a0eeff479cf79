"""The real Pulumi CLI (scripts/engine) on this repository's projects, before any program runs (pytest -m engine):
the projects' config declarations, the pinned version, and the workflow that runs previews. The programs
themselves run in test_stack.py, test_examples.py and test_live.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.engine
# Stack config a user must give these examples (their programs `require` it); tests/unit/test_projects.py
# checks that nothing else is required.
REQUIRED = {
    "examples/aks": {"corporateProxy": "http://proxy.corp.example:3128"},
    "examples/existing-program": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
}


Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(engine: Path, tmp_path: Path) -> Cli:
    env = {
        **os.environ,
        "PATH": f"{engine}:{os.environ['PATH']}",
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
        "PULUMI_HOME": str(tmp_path / "home"),
        "PULUMI_CONFIG_PASSPHRASE": "test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
    }
    (tmp_path / "state").mkdir()

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["pulumi", *args, "--non-interactive"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
        )

    return run


def _copy(project: Path, tmp_path: Path) -> Path:
    """The project in a scratch directory (the CLI writes stack files beside Pulumi.yaml)."""
    dest = tmp_path / "project"
    # Never a venv (`.venv-engine` is the lanes' own, built by another worker under its lock while this one copies),
    # nor the repository's own build output: the project's files only.
    ignore = shutil.ignore_patterns(".venv*", ".git", "build", "node_modules", "rendered", "__pycache__")
    shutil.copytree(ROOT / project, dest, ignore=ignore)
    return dest


def test_the_cli_is_the_pinned_version(engine: Path) -> None:
    pinned = re.search(
        r"^PULUMI_VERSION=\$\{PULUMI_VERSION:-(v[0-9.]+)\}$", (ROOT / "scripts/engine").read_text(), re.M
    )
    assert pinned, "scripts/engine: no PULUMI_VERSION default"
    version = subprocess.run([str(engine / "pulumi"), "version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == pinned.group(1) == "v3.276.0"


# The Python projects; examples/yaml and examples/typescript run in test_languages.py.
PROJECTS = [
    p.parent.relative_to(ROOT)
    for p in sorted(ROOT.glob("**/Pulumi.yaml"))
    if not {".venv", ".venv-engine", "node_modules"} & set(p.parts) and (p.parent / "__main__.py").exists()
]


@pytest.mark.parametrize("project", PROJECTS, ids=str)
def test_a_new_stack_needs_only_the_config_its_program_requires(cli: Cli, project: Path, tmp_path: Path) -> None:
    work = _copy(project, tmp_path)
    stack = "dev" if (work / "Pulumi.dev.yaml").exists() else "ci"
    init = cli("stack", "init", stack, cwd=work)
    assert init.returncode == 0, init.stderr
    for key, value in REQUIRED.get(str(project), {}).items():
        assert cli("config", "set", "--secret", key, value, cwd=work).returncode == 0
    preview = cli("preview", "--stack", stack, cwd=work)
    output = preview.stdout + preview.stderr
    assert "missing configuration" not in output
    assert "Previewing update" in output, f"the CLI must get past config validation:\n{output}"


def test_the_check_catches_a_key_declared_without_a_default(cli: Cli, tmp_path: Path) -> None:
    """The control: the root project as it shipped (no defaults) stops at config validation."""
    work = _copy(Path("."), tmp_path)
    project = yaml.safe_load((work / "Pulumi.yaml").read_text())
    for spec in project["config"].values():
        spec.pop("default", None)
    (work / "Pulumi.yaml").write_text(yaml.safe_dump(project))
    assert cli("stack", "init", "dev", cwd=work).returncode == 0
    preview = cli("preview", "--stack", "dev", cwd=work)
    assert "Stack 'dev' is missing configuration values" in preview.stderr + preview.stdout


def test_the_workflows_pass_actionlint() -> None:
    """Every workflow: the preview diffs, the fleet's previews and updates, the release and the image it calls
    (.github/workflows/*.yml, scripts/actionlint's default)."""
    workflows = {p.name for p in (ROOT / ".github/workflows").glob("*.yml")}
    assert workflows == {"preview.yml", "fleet.yml", "image.yml", "release.yml"}
    result = subprocess.run(["bash", str(ROOT / "scripts/actionlint")], capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = subprocess.run(
        ["bash", str(ROOT / "scripts/actionlint"), "-"],
        input="on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n        with: {ref: ${{ github.nope }}}\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert broken.returncode != 0, "actionlint must catch an unknown context property"
