"""The fleet workflow's order (actionlint checks its syntax in the engine lane): previews of every cluster stack as a
matrix with one summary after them on a pull request; on a push, the installation's `up` before any cluster's."""

from __future__ import annotations

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
