"""The release's one source of truth (proxy_component/_release.py): the version in pyproject.toml and the SDK pins in
constraints/engine.txt give provider/requirements.txt; a tag vX.Y.Z is refused unless all of them and the CHANGELOG
agree; the release notes are the CHANGELOG section of the version."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from proxy_component._release import (
    HEADER,
    INSTALLER,
    ReleaseError,
    bump,
    canonical_name,
    changelog_section,
    check_tag,
    engine_pins,
    plugin_pins,
    plugin_requirements,
    project_version,
)
from tests.conftest import ROOT

CHANGELOG = """\
# Changelog

## 0.3.0 (unreleased)

### Added

- Something new.

## 0.2.0

### Fixed

- Something old.

## 0.1.0

The first.
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The files a release touches, copied from this checkout, with a CHANGELOG of three sections."""
    for name in ("pyproject.toml", "constraints/engine.txt", "constraints/plugin.txt", "provider/requirements.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "CHANGELOG.md").write_text(CHANGELOG)
    return tmp_path


def test_the_plugin_requirements_are_what_the_release_module_writes_now() -> None:
    assert (ROOT / "provider/requirements.txt").read_text() == plugin_requirements(ROOT), (
        "run: python -m proxy_component._release requirements --write"
    )


def test_the_plugin_pins_the_package_at_its_version_and_the_engine_lanes_sdks() -> None:
    """Read back as pip reads it: `..` (the clone at the tag), the package's version, the pins the engine lane uses,
    then every other package's."""
    lines = [ln for ln in (ROOT / "provider/requirements.txt").read_text().splitlines() if not ln.startswith("#")]
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None
    constraints = [ln for ln in (ROOT / "constraints/engine.txt").read_text().splitlines() if not ln.startswith("#")]
    others = [ln for ln in (ROOT / "constraints/plugin.txt").read_text().splitlines() if not ln.startswith("#")]
    assert lines == ["..", f"proxy-component=={version.group(1)}", *constraints, *others]
    assert {ln.split("==")[0] for ln in constraints} == {"pulumi", "pulumi-kubernetes"}
    assert all(re.fullmatch(r"[a-z0-9-]+==\S+", ln) for ln in others), others


def _installs(name: str) -> set[str]:
    """What pip installs for `name` without extras: it and its requirements, all the way down (markers for this
    Python), from the metadata of the distributions installed here."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = canonical_name(todo.pop())
        if current in seen:
            continue
        seen.add(current)
        for raw in distribution(current).requires or []:
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def test_every_package_the_plugin_installs_is_pinned() -> None:
    """The package's requirements and theirs (certifi, whose roots the rendered CA bundle holds, cryptography, ...)
    and the installer's tools the Python host upgrades: each pinned in provider/requirements.txt."""
    pinned = {canonical_name(name) for name, _ in [*engine_pins(ROOT), *plugin_pins(ROOT)]} | {"proxy-component"}
    installed = _installs("proxy-component") | _installs("pulumi-kubernetes") | set(INSTALLER)
    assert {"certifi", "cryptography", "pydantic-core", "grpcio"} <= installed
    assert sorted(installed - pinned) == [], "run: python -m proxy_component._release lock --write"


def test_a_package_pinned_twice_or_in_both_files_is_named(repo: Path) -> None:
    plugin = repo / "constraints/plugin.txt"
    plugin.write_text(plugin.read_text() + "PyYAML==6.0.4\n")
    with pytest.raises(ReleaseError, match=r"^constraints/plugin.txt: PyYAML is pinned twice "):
        plugin_requirements(repo)
    plugin.write_text("pulumi==3.259.0\n")
    with pytest.raises(ReleaseError, match=r"^constraints/plugin.txt: pulumi is pinned in constraints/engine.txt "):
        plugin_requirements(repo)


def test_the_examples_for_other_languages_use_the_pinned_pulumi_sdk() -> None:
    pins = dict(engine_pins(ROOT))
    package = json.loads((ROOT / "examples/typescript/package.json").read_text())
    assert package["dependencies"]["@pulumi/pulumi"] == pins["pulumi"]
    assert f"github.com/pulumi/pulumi/sdk/v3 v{pins['pulumi']}" in (ROOT / "examples/go/go.mod").read_text()


def test_a_stale_requirements_file_or_another_version_refuses_the_tag(repo: Path) -> None:
    bump(repo, "0.3.0")
    assert check_tag(repo, "v0.3.0") == []
    (repo / "provider/requirements.txt").write_text("..\npulumi>=3.259,<4\n")
    assert check_tag(repo, "v0.3.0") == [
        "provider/requirements.txt: not what pyproject.toml, constraints/engine.txt and constraints/plugin.txt give "
        "(run: python -m proxy_component._release requirements --write)"
    ]
    assert check_tag(repo, "v0.2.0") == [
        "pyproject.toml: version '0.3.0' is not the tag's '0.2.0' (run: python -m proxy_component._release bump 0.2.0)",
        "provider/requirements.txt: not what pyproject.toml, constraints/engine.txt and constraints/plugin.txt give "
        "(run: python -m proxy_component._release requirements --write)",
    ]


def test_a_pin_change_makes_the_checked_in_requirements_stale(repo: Path) -> None:
    bump(repo, "0.3.0")
    engine = repo / "constraints/engine.txt"
    engine.write_text(re.sub(r"^pulumi==.*$", "pulumi==3.0.0", engine.read_text(), flags=re.M))
    assert "\npulumi==3.0.0\n" in plugin_requirements(repo)
    assert len(check_tag(repo, "v0.3.0")) == 1


def test_bump_to_a_release_sets_the_version_the_pin_and_the_changelog_heading(repo: Path) -> None:
    bump(repo, "0.3.0")
    assert project_version(repo) == "0.3.0"
    assert "\nproxy-component==0.3.0\n" in (repo / "provider/requirements.txt").read_text()
    assert (repo / "provider/requirements.txt").read_text().startswith(HEADER)
    assert "\n## 0.3.0\n" in (repo / "CHANGELOG.md").read_text()
    assert check_tag(repo, "v0.3.0") == []


def test_bump_to_the_next_dev_version_opens_its_changelog_section(repo: Path) -> None:
    bump(repo, "0.3.0")
    bump(repo, "0.3.1.dev0")
    text = (repo / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n\n## 0.3.1 (unreleased)\n\n## 0.3.0\n")
    assert project_version(repo) == "0.3.1.dev0"
    assert check_tag(repo, "v0.3.1") == [
        "pyproject.toml: version '0.3.1.dev0' is not the tag's '0.3.1' "
        "(run: python -m proxy_component._release bump 0.3.1)",
        "CHANGELOG.md: the section '## 0.3.1' is still marked (unreleased) "
        "(run: python -m proxy_component._release bump 0.3.1)",
    ]
    bump(repo, "0.3.1.dev1")  # a heading for 0.3.1 exists: not added twice
    assert (repo / "CHANGELOG.md").read_text().count("## 0.3.1 ") == 1


def test_bump_to_a_version_without_a_changelog_section_changes_nothing(repo: Path) -> None:
    before = {p: p.read_text() for p in repo.rglob("*") if p.is_file()}
    with pytest.raises(ReleaseError, match=r"^CHANGELOG.md: no section '## 0.4.0' \(sections: 0.3.0, 0.2.0, 0.1.0\)$"):
        bump(repo, "0.4.0")
    assert {p: p.read_text() for p in repo.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("version", ["0.3", "v0.3.0", "0.3.0-rc1", "0.3.0rc1", "03.0.0"])
def test_bump_refuses_a_version_that_is_not_x_y_z(repo: Path, version: str) -> None:
    with pytest.raises(ReleaseError) as error:
        bump(repo, version)
    assert str(error.value) == f"version {version!r} is neither X.Y.Z nor X.Y.Z.devN (e.g. 0.3.0, 0.3.0.dev0)"


@pytest.mark.parametrize("tag", ["0.3.0", "v0.3", "v0.3.0.dev0", "v0.3.0-rc1", "release-0.3.0", "v"])
def test_a_tag_that_is_not_v_x_y_z_is_refused(repo: Path, tag: str) -> None:
    assert check_tag(repo, tag) == [
        f"tag {tag!r} is not vX.Y.Z (e.g. v0.3.0): pulumi package add reads v-prefixed semver tags"
    ]


def test_the_release_notes_are_the_section_between_two_headings() -> None:
    assert changelog_section(CHANGELOG, "0.2.0") == "### Fixed\n\n- Something old.\n"
    assert changelog_section(CHANGELOG, "0.1.0") == "The first.\n"


def test_notes_of_an_unreleased_missing_or_empty_section_are_refused() -> None:
    with pytest.raises(ReleaseError, match=r"'## 0\.3\.0' is still marked \(unreleased\)"):
        changelog_section(CHANGELOG, "0.3.0")
    with pytest.raises(ReleaseError, match=r"^CHANGELOG.md: no section '## 0.0.9' \(sections: 0.3.0, 0.2.0, 0.1.0\)$"):
        changelog_section(CHANGELOG, "0.0.9")
    with pytest.raises(ReleaseError, match=r"^CHANGELOG.md: the section '## 0.2.0' is empty"):
        changelog_section("## 0.2.0\n\n## 0.1.0\n\nx\n", "0.2.0")


def test_a_constraint_that_is_not_an_exact_pin_is_named(repo: Path) -> None:
    (repo / "constraints/engine.txt").write_text("# pins\npulumi==3.259.0\npulumi-kubernetes>=4.32\n")
    with pytest.raises(ReleaseError) as error:
        plugin_requirements(repo)
    assert str(error.value) == (
        "constraints/engine.txt:3: 'pulumi-kubernetes>=4.32' is not an exact pin (expected name==version)"
    )
    (repo / "constraints/engine.txt").write_text("pulumi==3.259.0\n")
    with pytest.raises(ReleaseError, match=r"^constraints/engine.txt: no pin for pulumi-kubernetes "):
        plugin_requirements(repo)


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy_component._release", "--root", str(root), *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_the_command_prints_the_notes_and_refuses_a_bad_tag_without_a_traceback(repo: Path) -> None:
    notes = _cli(repo, "notes", "0.2.0")
    assert (notes.returncode, notes.stdout) == (0, "### Fixed\n\n- Something old.\n")
    refused = _cli(repo, "check", "v0.2.0")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: pyproject.toml: version ")
    assert "Traceback" not in refused.stderr
    missing = _cli(repo / "nowhere", "notes", "0.2.0")
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: [Errno 2] No such file or directory: ")
    assert "nowhere/CHANGELOG.md" in missing.stderr


def test_the_command_writes_the_requirements_and_bumps(repo: Path) -> None:
    (repo / "provider/requirements.txt").write_text("stale\n")
    assert _cli(repo, "requirements", "--write").returncode == 0
    assert (repo / "provider/requirements.txt").read_text() == plugin_requirements(repo)
    bumped = _cli(repo, "bump", "0.3.0")
    assert bumped.returncode == 0, bumped.stderr
    checked = _cli(repo, "check", "v0.3.0")
    assert (checked.returncode, checked.stdout) == (0, "v0.3.0: pyproject.toml, CHANGELOG.md and "
                                                       "provider/requirements.txt agree\n")  # fmt: skip


def test_the_release_workflow_runs_the_module_as_a_file_with_the_standard_library_alone(repo: Path) -> None:
    """-I -S: no site-packages, no checkout on sys.path: what the workflow's first job has before installing anything."""
    bump(repo, "0.3.0")
    checked = subprocess.run(
        [sys.executable, "-I", "-S", str(ROOT / "proxy_component/_release.py"), "--root", str(repo), "check", "v0.3.0"],
        capture_output=True, text=True, cwd=repo, timeout=60,
    )  # fmt: skip
    assert (checked.returncode, checked.stderr) == (0, "")
    notes = subprocess.run(
        [sys.executable, "-I", "-S", str(ROOT / "proxy_component/_release.py"), "--root", str(repo), "notes", "0.2.0"],
        capture_output=True, text=True, cwd=repo, timeout=60,
    )  # fmt: skip
    assert notes.stdout == "### Fixed\n\n- Something old.\n"


def test_the_install_guide_shows_the_requirements_a_release_of_this_version_installs() -> None:
    guide = (ROOT / "docs/guides/install.md").read_text()
    block = re.search(r"```text\n(.*?)```", guide, re.S)
    assert block is not None
    released = project_version(ROOT).split(".dev")[0]
    lines = [ln for ln in plugin_requirements(ROOT).splitlines() if not ln.startswith("#")]
    assert block.group(1).splitlines() == [re.sub(r"^proxy-component==.*", f"proxy-component=={released}", ln)
                                           for ln in lines]  # fmt: skip
    assert f"provider@v{released}" in guide


def test_the_install_guide_says_how_to_pin_a_commit_before_a_release() -> None:
    """The commit forms for pip and for `pulumi package add`, with a full hash, and the engine tests that run them
    as the tag's form is run (tests/engine/test_package_add.py)."""
    guide = (ROOT / "docs/guides/install.md").read_text()
    section = guide[guide.index("## Pinning a commit (before a release)") :]
    (commit,) = set(re.findall(r"@([0-9a-f]+)\b", section))
    assert len(commit) == 40, commit
    assert f"pip install 'proxy-component @ git+https://github.com/proxy-component/proxy-component@{commit}'" in section
    assert f"pulumi package add github.com/proxy-component/proxy-component/provider@{commit}" in section
    engine = (ROOT / "tests/engine/test_package_add.py").read_text()
    named = re.findall(r"test_package_add\.py::(\w+)", section)
    assert named
    for test in [*named, "test_pip_installs_the_package_from_a_commit"]:
        assert f"def {test}(" in engine, test


@pytest.mark.parametrize(
    "path", ["provider/venv/bin/python", "provider/__pycache__/x.pyc", "dist/x.whl", "build/lib/x.py", "x.egg-info/y"]
)
def test_what_the_plugin_and_a_build_leave_in_the_checkout_is_ignored(path: str) -> None:
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path], timeout=60)
    assert ignored.returncode == 0, f"{path} is not in .gitignore"
