"""The release workflow's order and trust (actionlint checks its syntax in the engine lane, tests/engine/test_cli.py):
a tag is checked, then tested, then built; PyPI gets the build through trusted publishing only; the image comes from
image.yml, called, not copied; the GitHub release comes last, with the CHANGELOG section."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import ROOT

RELEASE: dict[Any, Any] = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text())
IMAGE: dict[Any, Any] = yaml.safe_load((ROOT / ".github/workflows/image.yml").read_text())
JOBS: dict[str, Any] = RELEASE["jobs"]


def _runs(job: str) -> str:
    return "\n".join(step.get("run", "") for step in JOBS[job]["steps"])


def _uses(job: str) -> list[str]:
    return [step["uses"] for step in JOBS[job]["steps"] if "uses" in step]


def test_only_a_v_tag_releases_and_nothing_is_granted_by_default() -> None:
    assert RELEASE[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads the key `on` as True
    assert RELEASE["permissions"] == {}
    assert RELEASE["concurrency"]["cancel-in-progress"] is False


def test_the_tag_is_checked_then_tested_then_built() -> None:
    assert 'python proxy_component/_release.py check "$GITHUB_REF_NAME"' in _runs("check")
    assert 'git merge-base --is-ancestor "$GITHUB_SHA" origin/main' in _runs("check")
    assert JOBS["check"]["steps"][0]["with"]["fetch-depth"] == 0
    assert JOBS["test"]["needs"] == "check"
    assert [line for line in _runs("test").splitlines() if line.startswith("bash ")] == [
        "bash scripts/test",
        "bash scripts/package",
        "bash scripts/actionlint",
    ]
    assert JOBS["test"]["container"]["image"] == "debian:bookworm"
    assert JOBS["build"]["needs"] == "test"
    assert "python -m build --outdir dist ." in _runs("build")
    assert "python -m twine check --strict dist/*" in _runs("build")


def test_pypi_gets_the_build_through_trusted_publishing_alone() -> None:
    pypi = JOBS["pypi"]
    assert pypi["needs"] == "build"
    assert pypi["permissions"] == {"id-token": "write"}
    assert pypi["environment"]["name"] == "pypi"
    assert _uses("pypi") == ["actions/download-artifact@v4", "pypa/gh-action-pypi-publish@release/v1"]
    publish = pypi["steps"][-1]
    assert "with" not in publish  # no password, no token: OIDC


def test_the_image_is_image_yml_called_with_the_rights_it_declares() -> None:
    image = JOBS["image"]
    assert image["uses"] == "./.github/workflows/image.yml"
    assert image["needs"] == "test"
    assert IMAGE[True] == {"workflow_call": IMAGE[True]["workflow_call"]}  # only called: one push per tag
    assert set(IMAGE[True]["workflow_call"]["outputs"]) == {"ref", "digest"}
    assert image["permissions"] == IMAGE["jobs"]["image"]["permissions"]
    steps = "\n".join(str(step) for step in IMAGE["jobs"]["image"]["steps"])
    for needed in ("anchore/sbom-action", "actions/attest-build-provenance", "cosign sign --yes", "cosign attest"):
        assert needed in steps


def test_the_github_release_comes_last_with_the_changelog_section() -> None:
    release = JOBS["release"]
    assert release["needs"] == ["pypi", "image"]
    assert release["permissions"] == {"contents": "write"}
    run = _runs("release")
    assert 'python proxy_component/_release.py notes "${GITHUB_REF_NAME#v}"' in run
    assert 'gh release create "$GITHUB_REF_NAME" --verify-tag' in run
    assert "--notes-file notes.md dist/*" in run
    assert release["steps"][-1]["env"]["IMAGE_DIGEST"] == "${{ needs.image.outputs.digest }}"


def test_every_job_says_what_it_may_do() -> None:
    for name, job in JOBS.items():
        assert "permissions" in job, name
