"""Every Pulumi project in the repository: no stack must set a key the program treats as optional.

The CLI (pkg/workspace/config.go, mergeConfig) makes a key declared under `config:` in the project's own
namespace, with neither `default` nor `value`, required in every stack: `pulumi up` stops at
"Stack 'dev' is missing configuration values". The engine lane (tests/engine) runs the real CLI on them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = sorted(
    p.relative_to(ROOT)
    for p in ROOT.glob("**/Pulumi.yaml")
    if not {".venv", ".venv-engine", "node_modules"} & set(p.parts) and (p.parent / "__main__.py").exists()
)  # the Python projects (examples/yaml, examples/typescript and examples/go run in tests/engine/test_languages.py)
# Keys a program cannot run without, which it reads with `require`: every stack must set them.
REQUIRED = {("examples/aks", "corporateProxy"), ("examples/existing-program", "kubeconfig")}


def _required_keys(path: Path) -> list[str]:
    project = yaml.safe_load((ROOT / path).read_text())
    name = project["name"]
    required = []
    for key, spec in (project.get("config") or {}).items():
        namespace, _, short = key.rpartition(":")
        if namespace in ("", name) and "default" not in spec and "value" not in spec:
            required.append(short)
    return required


def test_every_project_is_checked() -> None:
    assert Path("Pulumi.yaml") in PROJECTS
    assert len(PROJECTS) >= 6


@pytest.mark.parametrize("path", PROJECTS, ids=str)
def test_only_keys_the_program_requires_are_required(path: Path) -> None:
    folder = str(path.parent) if str(path.parent) != "." else "."
    required = _required_keys(path)
    assert {(folder, key) for key in required} <= REQUIRED, f"{path}: give these keys a default: {required}"
    program = (ROOT / path.parent / "__main__.py").read_text()
    for key in required:
        assert f'require("{key}")' in program or f'require_secret("{key}")' in program, f"{path}: {key}"


def test_the_changelog_opens_with_the_version_pyproject_declares() -> None:
    """A released version is the top heading; an unreleased one is `X.Y.Z (unreleased)` and `X.Y.Z.dev0`."""
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    heading = re.search(r"^## (\S+)( \(unreleased\))?$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert version is not None
    assert heading is not None
    expected = f"{heading.group(1)}.dev0" if heading.group(2) else heading.group(1)
    assert version.group(1) == expected


@pytest.mark.parametrize(
    "example",
    ["examples/yaml/Pulumi.yaml", "examples/typescript/index.ts", "examples/go/go.mod", "examples/go/main.go"],
)
def test_the_guide_shows_each_language_example_as_the_tests_run_it(example: str) -> None:
    guide = (ROOT / "docs/guides/other-languages.md").read_text()
    block = guide.split(f"<!-- example: {example} -->\n", 1)[1].split("\n", 1)[1].split("```\n", 1)[0]
    assert block == (ROOT / example).read_text()
