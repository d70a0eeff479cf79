"""Invalid settings from TypeScript, Go and YAML under the real engine (pytest -m engine): every problem in one run,
as `render` reports them, and no stack trace of any language, run after run. Before, a file with seven mistakes
took five runs, and a TypeScript validation error printed a Node stack trace in 3 of 7 runs (Node 20)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from . import test_languages as languages
from .conftest import ROOT, Project
from .test_languages import _home, typescript_project, yaml_project

hosts = languages.hosts  # the fixtures, shared with the languages' tests
plugin = languages.plugin

pytestmark = pytest.mark.engine

# What a stack trace of each language starts its lines with: Node's frames, Python's traceback, Go's panic.
TRACES = ("    at ", "Traceback", 'File "', "goroutine ", "panic:")
SEVEN = ROOT / "tests/unit/settings_errors/seven_mistakes.yaml"
NODE_RUNS = 7  # the issue saw the trace in 3 of 7


def _render_problems(settings: Any, tmp_path: Path) -> list[str]:
    """The lines `proxy-component render` prints for these settings: what every language must print too."""
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(settings))
    cli = subprocess.run([sys.executable, "-m", "proxy_component.cli", "render", str(path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)  # fmt: skip
    assert cli.returncode == 2, cli.stderr
    header, *lines = cli.stderr.splitlines()
    assert header == "proxy-component: invalid settings:"
    return [line.strip() for line in lines]


def _fails_cleanly(project: Project, problems: list[str], runs: int) -> None:
    """`runs` times, alternating preview and up: the run fails, with every problem, and no line of a stack trace."""
    for run in range(runs):
        command = ("preview",) if run % 2 else ("up", "--yes", "--skip-preview")
        result = project.run(*command, check=False)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        missing = [problem for problem in problems if problem not in output]
        assert missing == [], f"run {run + 1} ({command[0]}) lacks {missing}:\n{output}"
        traces = [marker for marker in TRACES if marker in output]
        assert traces == [], f"run {run + 1} ({command[0]}) printed a stack trace ({traces}):\n{output}"


def test_typescript_seven_mistakes_all_at_once_and_never_a_stack_trace(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """The seven-mistake file as an untyped program sends it (`<any>`: tsc checks no key): the 13 lines `render`
    prints, from the provider's construct, in each of 7 runs, and no Node stack trace."""
    settings = yaml.safe_load(SEVEN.read_text())
    problems = _render_problems(settings, tmp_path)
    assert len(problems) == 13
    project = typescript_project(project_factory, hosts, plugin, "typescript-seven")
    source = (project.dir / "index.ts").read_text()
    program, count = re.subn(r"    settings: \{.*?\n    \},\n", f"    settings: <any>{json.dumps(settings)},\n", source,
                             count=1, flags=re.S)  # fmt: skip
    assert count == 1
    (project.dir / "index.ts").write_text(program)
    project.init()
    _fails_cleanly(project, problems, NODE_RUNS)
    assert "S3CRET" not in json.dumps(project.export())


def test_go_bad_settings_all_at_once_and_never_a_stack_trace(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """A field error (a bad node CIDR) beside a check across fields that does not read it (ipFamily ipv6 with an
    IPv4 Service range): both lines in each run, and no goroutine dump or panic."""
    project: Project = project_factory("examples/go", "ci", "go-bad")
    project.env["PATH"] = f"{hosts}:{project.env['PATH']}"
    _home(project, hosts)
    project.run("package", "add", str(plugin), timeout=900)
    source = (project.dir / "main.go").read_text()
    bad = source.replace('"10.0.0.0/8"', '"10.0.0.1/33"').replace('"fd00:10:96::/108"', '"10.96.0.0/12"')
    assert bad.count("10.0.0.1/33") == 1
    assert bad.count("10.96.0.0/12") == 1
    (project.dir / "main.go").write_text(bad)
    settings = yaml.safe_load((ROOT / "examples/ipv6-only/proxy.yaml").read_text())
    settings["cluster"]["nodeCidrs"] = ["10.0.0.1/33", "fd00:10::/64"]
    settings["cluster"]["serviceCidrs"] = ["10.96.0.0/12"]
    problems = _render_problems(settings, tmp_path)
    assert [p.split(":")[0] for p in problems] == ["cluster.nodeCidrs[0]", "cluster.ipFamily"]
    project.init()
    _fails_cleanly(project, problems, 3)


def test_yaml_bad_settings_all_at_once_and_never_a_stack_trace(
    project_factory: Any, hosts: Path, plugin: Path, tmp_path: Path
) -> None:
    """The same in YAML, with a toleration of two problems beside them: every line in each run, no trace."""
    project = yaml_project(project_factory, hosts, plugin, "yaml-bad")
    program = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    settings = program["resources"]["proxy"]["properties"]["settings"]
    settings["cluster"]["nodeCidrs"] = ["10.0.0.1/33", "fd00:10::/64"]
    settings["cluster"]["serviceCidrs"] = ["10.96.0.0/12"]
    settings["deployment"] = {"tolerations": [{"operator": "Equal", "value": "egress", "tolerationSeconds": 30}]}
    (project.dir / "Pulumi.yaml").write_text(yaml.safe_dump(program, sort_keys=False))
    problems = _render_problems(settings, tmp_path)
    assert len(problems) == 4
    _fails_cleanly(project, problems, 3)
