"""How long each test file took, for pytest-xdist to start the longest first.

`--dist loadfile` gives each worker a whole file (a lane module's test cluster stays in one process) and hands them
out in order; by default xdist orders them by their number of tests, which starts the engine lanes' longest files
(one to six slow tests each: rolls, upgrades, repairs) last, and the unit suite's longest (the node-isolation file:
17 tests, 177 s) 34th of 81, so a session ended on one busy worker while the others sat idle. `scripts/test` and
`.ci/run` pass `--no-loadscope-reorder`, and `pytest_collection_modifyitems` (tests/conftest.py) puts the files in the
order of DURATIONS, longest first; files not in it keep their order after them. It only orders: a stale figure makes
a session a little longer, never a test different.

Regenerate after the suites change much, from the JUnit reports (`--junitxml=FILE`) of `scripts/test`'s pytest and
of the lanes' session:

    python -m tests.durations UNIT.xml LANES.xml > tests/durations.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = Path(__file__).with_name("durations.json")


def file_order() -> dict[str, int]:
    """Each measured file's rank, longest first ('tests/engine/test_languages.py': 0, ...)."""
    seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    return {path: rank for rank, path in enumerate(sorted(seconds, key=lambda p: (-seconds[p], p)))}


def main(*reports: str) -> None:
    """Each file's seconds (setup, call and teardown of its tests) from JUnit reports, as JSON."""
    seconds: dict[str, float] = {}
    for case in (case for report in reports for case in ET.parse(report).iter("testcase")):
        parts = case.get("classname", "").split(".")  # tests.engine.test_x, or tests.engine.test_x.TestClass
        while parts and not (ROOT / ("/".join(parts) + ".py")).is_file():
            parts.pop()
        if parts:
            path = "/".join(parts) + ".py"
            seconds[path] = seconds.get(path, 0.0) + float(case.get("time") or 0)
    json.dump({path: round(s) for path, s in sorted(seconds.items())}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
