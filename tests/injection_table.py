"""Writes docs/no-proxy-injections.md: the injection candidates scored over the example clusters.

.venv/bin/python -m tests.injection_table
"""

from __future__ import annotations

from proxy_component.injections import markdown
from tests.examples import ROOT, clusters

DOC = ROOT / "docs" / "no-proxy-injections.md"


def render() -> str:
    return markdown(clusters())


if __name__ == "__main__":
    DOC.write_text(render())
    print(f"wrote {DOC}")
