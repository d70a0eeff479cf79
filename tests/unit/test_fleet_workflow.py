"""The fleet workflow's order (actionlint checks its syntax in the engine lane): previews of every cluster stack as a
matrix with one summary after them on a pull request; on a push, the installation's `up` before any cluster's."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.conftest import ROOT

WORKFLOW: dict[str, Any] = yaml.safe_load((ROOT / ".github/workflows/fleet.yml").read_text())
JOBS: dict[str, Any] = WORKFLOW["jobs"]


def test_pull_requests_preview_every_cluster_stack_then_post_one_summary() -> None:
    preview = JOBS["preview"]
    assert preview["if"] == "${{ github.event_name == 'pull_request' }}"
    assert preview["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.clusters) }}"
    assert preview["strategy"]["fail-fast"] is False
    assert any("pulumi preview" in step.get("run", "") for step in preview["steps"])
    summary = JOBS["summary"]
    assert summary["needs"] == "preview"
    assert "always()" in summary["if"]
    assert sum("gh pr comment" in step.get("run", "") for step in summary["steps"]) == 1


def test_a_push_runs_up_of_the_installation_before_any_cluster() -> None:
    assert JOBS["installation"]["if"] == "${{ github.event_name == 'push' }}"
    assert any(
        'pulumi up --stack "$INSTALLATION_STACK"' in step.get("run", "") for step in JOBS["installation"]["steps"]
    )
    assert "installation" in JOBS["up"]["needs"]
    assert JOBS["up"]["strategy"]["matrix"]["stack"] == "${{ fromJSON(needs.stacks.outputs.clusters) }}"


def test_the_cluster_list_leaves_out_the_installation_stack() -> None:
    (step,) = JOBS["stacks"]["steps"][1:]
    assert '-e "$INSTALLATION_STACK"' in step["run"]
    assert WORKFLOW["env"]["INSTALLATION_STACK"] == "installation"


def _runs_pulumi(step: dict[str, Any]) -> bool:
    """A step that runs the engine (a command line starting `pulumi up|preview|...`, or pulumi/actions), not one
    that only says its name."""
    command = re.compile(r"^\s*pulumi (up|preview|refresh|destroy|stack)\b", re.M)
    return bool(command.search(step.get("run", ""))) or str(step.get("uses", "")).startswith("pulumi/actions")


def test_credentials_and_the_engines_temporary_files_stay_in_the_jobs_own_directory() -> None:
    """pulumi-kubernetes copies a provider's kubeconfig to $TMPDIR and never removes it, and ~/.kube outlives the
    job on a self-hosted runner: every job that runs pulumi points TMPDIR (and KUBECONFIG, if it writes one) at
    $RUNNER_TEMP, which the runner empties after the job, before its first pulumi step."""
    checked = 0
    for name in ("fleet.yml", "preview.yml"):
        workflow = yaml.safe_load((ROOT / ".github/workflows" / name).read_text())
        for job_name, job in workflow["jobs"].items():
            steps = job["steps"]
            first = next((i for i, step in enumerate(steps) if _runs_pulumi(step)), None)
            if first is None:
                continue
            checked += 1
            before = "\n".join(step.get("run", "") for step in steps[:first])
            assert 'echo "TMPDIR=$RUNNER_TEMP" >> "$GITHUB_ENV"' in before, (name, job_name)
            setup = "\n".join(step.get("run", "") for step in steps)
            assert "~/.kube" not in setup, (name, job_name)
            assert "$HOME/.kube" not in setup, (name, job_name)
            if "KUBECONFIG_DATA" in setup:
                assert 'echo "KUBECONFIG=$RUNNER_TEMP/kubeconfig" >> "$GITHUB_ENV"' in before, (name, job_name)
                assert "umask 077" in before, (name, job_name)
    assert checked == 4  # preview.yml's preview; fleet.yml's preview, installation and up
