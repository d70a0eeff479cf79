"""tests/durations.py: the test files' measured seconds that order a session (the unit suite's, the lanes'), longest
first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.durations import DURATIONS, ROOT, file_order


def test_every_measured_file_is_a_test_file_of_the_tree() -> None:
    seconds = json.loads(DURATIONS.read_text())
    assert len(seconds) >= 60
    for path, value in seconds.items():
        assert (ROOT / path).is_file(), f"{path} is in tests/durations.json but not in the tree: regenerate it"
        assert path.startswith("tests/"), path
        assert Path(path).name.startswith("test_"), path
        assert isinstance(value, int), (path, value)
        assert value >= 0, (path, value)
    # Both sessions are measured: the unit suite's files and the lanes'.
    assert any(p.startswith("tests/unit/") for p in seconds)
    assert any(p.startswith("tests/engine/") for p in seconds)


def test_the_order_is_longest_first() -> None:
    seconds = json.loads(DURATIONS.read_text())
    ordered = sorted(file_order(), key=file_order().__getitem__)
    assert [seconds[p] for p in ordered] == sorted(seconds.values(), reverse=True)


@pytest.mark.parametrize(
    "select",
    [
        pytest.param(["-m", "((engine or cluster or helm or image or kyverno) and not older) or oldest"], id="lanes"),
        pytest.param([], id="scripts-test"),  # pyproject's own -m: the unit suite
    ],
)
def test_a_session_collects_the_measured_files_longest_first_and_keeps_each_files_tests_together(
    select: list[str],
) -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", *select, "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    files = [line.split("::", 1)[0] for line in out.stdout.splitlines() if "::" in line]
    runs = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    assert len(runs) == len(set(runs)), "a file's tests were split"
    rank = file_order()
    measured = [f for f in runs if f in rank]
    assert measured == sorted(measured, key=rank.__getitem__)
    assert runs[: len(measured)] == measured, "an unmeasured file came before a measured one"
    assert len(measured) >= 20, measured


def test_main_sums_a_junit_report_by_file(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.engine.test_languages" name="a" time="1.4"/>'
        '<testcase classname="tests.engine.test_languages" name="b[x]" time="2.2"/>'
        '<testcase classname="tests.image.test_build.TestImage" name="c" time="0.6"/>'
        "</testsuite></testsuites>"
    )
    unit = tmp_path / "unit.xml"
    unit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_render" name="a" time="7.6"/>'
        '<testcase classname="tests.engine.test_languages" name="c" time="0.5"/>'
        "</testsuite></testsuites>"
    )
    out = subprocess.run([sys.executable, "-m", "tests.durations", str(report)], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=60)  # fmt: skip
    assert json.loads(out.stdout) == {"tests/engine/test_languages.py": 4, "tests/image/test_build.py": 1}
    both = subprocess.run([sys.executable, "-m", "tests.durations", str(report), str(unit)], capture_output=True,
                          text=True, cwd=ROOT, check=True, timeout=60)  # fmt: skip
    assert json.loads(both.stdout) == {
        "tests/engine/test_languages.py": 4,  # 1.4 + 2.2 + 0.5, summed across the reports
        "tests/image/test_build.py": 1,
        "tests/unit/test_render.py": 8,
    }


@pytest.mark.parametrize("missing", ["tests.engine.test_nothing_here"])
def test_main_leaves_out_what_names_no_file(tmp_path: Path, missing: str) -> None:
    report = tmp_path / "report.xml"
    report.write_text(
        f'<testsuites><testsuite><testcase classname="{missing}" name="a" time="3"/></testsuite></testsuites>'
    )
    out = subprocess.run([sys.executable, "-m", "tests.durations", str(report)], capture_output=True, text=True,
                         cwd=ROOT, check=True, timeout=60)  # fmt: skip
    assert json.loads(out.stdout) == {}
