"""The docs: the README is a landing page that keeps the two commands, every relative link in the README and under
docs/ resolves (the file, and the heading an anchor names), and every `console runnable` block runs as shown. The
generated reference pages: test_docs_reference.py."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/proxy-component render\nbash scripts/test\n"
)
# What a runnable block may run: the command's subcommands that read no cluster, no cloud and no stack.
SAFE = {"render", "no-proxy", "explain", "egress"}
RUNNABLE = "console runnable"


def _tokens(page: Path) -> list[Token]:
    text = page.read_text()
    if text.startswith("---\n"):  # the Registry pages' front matter is no Markdown
        text = text.split("\n---\n", 1)[1]
    return MarkdownIt("commonmark").enable("table").parse(text)


def _slug(title: str) -> str:
    """A heading's anchor, as GitHub and MyST (myst_heading_anchors) make it."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    tokens = _tokens(page)
    return {_slug(tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"}


def _links(page: Path) -> list[str]:
    found = []
    for token in _tokens(page):
        for child in token.children or []:
            if child.type == "link_open":
                found.append(str(child.attrs["href"]))
            elif child.type == "image":
                found.append(str(child.attrs["src"]))
    return found


def _broken(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of a page whose file, or whose heading, is not there."""
    broken = []
    for href in _links(page):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not target.exists() or root not in (target, *target.parents):
            broken.append(f"{href}: no file {target}")
        elif parts.fragment and target.suffix == ".md" and parts.fragment not in _anchors(target):
            broken.append(f"{href}: no heading #{parts.fragment} in {target.relative_to(root)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = _broken(page)
    assert not broken, "\n".join(broken)


def test_the_links_are_checked_at_all() -> None:
    relative = [h for page in PAGES for h in _links(page) if not urlsplit(h).scheme]
    assert len(relative) > 100
    assert sum("#" in h for h in relative) > 10


def test_the_link_check_finds_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# B\n\n## Exit codes\n")
    page = tmp_path / "a.md"
    page.write_text(
        "# A\n\n## Exit codes\n\n[ok](#exit-codes) [ok](b.md#exit-codes) [gone](c.md) [bad](#exit) [bad](b.md#b-c)\n"
        "\n```sh\n[not a link](d.md)\n```\n"
    )
    assert _broken(page, tmp_path) == [
        f"c.md: no file {tmp_path / 'c.md'}",
        "#exit: no heading #exit in a.md",
        "b.md#b-c: no heading #b-c in b.md",
    ]


def test_anchors_are_made_as_github_makes_them() -> None:
    assert _slug("Probe egress through each node's proxy: `check --probe URL...`") == (
        "probe-egress-through-each-nodes-proxy-check---probe-url"
    )
    assert _slug("The project's image") == "the-projects-image"


# --- the README -------------------------------------------------------------------------------------------------


def test_the_readme_is_a_landing_page_under_300_lines() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) < 300


def test_the_readmes_first_command_block_is_the_two_commands() -> None:
    """CI runs the README's test command (scripts/test), and a newcomer runs both: they stay as they were."""
    fences = [t for t in _tokens(ROOT / "README.md") if t.type == "fence"]
    assert fences[0].info == "sh"
    assert fences[0].content == COMMANDS


# --- runnable command blocks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    page: str
    line: int
    command: str
    output: tuple[str, ...]  # the lines shown after it; a last line "..." shows only the beginning


def _steps(page: Path, root: Path = ROOT) -> list[Step]:
    steps: list[Step] = []
    for fence in _tokens(page):
        if fence.type != "fence" or fence.info.strip() != RUNNABLE:
            continue
        assert fence.map is not None
        for i, line in enumerate(fence.content.splitlines()):
            if line.startswith("$ "):
                where = fence.map[0] + 2 + i
                steps.append(Step(str(page.relative_to(root)), where, line[2:], ()))
            else:
                assert steps, f"{page}:{fence.map[0] + 1}: a runnable block starts with a `$ ` line"
                last = steps[-1]
                steps[-1] = Step(last.page, last.line, last.command, (*last.output, line))
    return steps


STEPS = [step for page in PAGES for step in _steps(page)]


def test_the_docs_have_runnable_blocks() -> None:
    """The marker is found at all: a renamed marker would otherwise leave nothing to run."""
    assert len(STEPS) >= 5
    assert any(step.page == "README.md" for step in STEPS)


def _unsafe(argv: list[str]) -> str:
    """Why a command may not run in a runnable block ("" when it may): it must read no cluster, cloud or stack, and
    write no file."""
    if argv[:1] != ["proxy-component"] or len(argv) < 2 or argv[1] not in SAFE:
        return f"a runnable block may run only `proxy-component {'|'.join(sorted(SAFE))}`: {shlex.join(argv)}"
    if argv[1] == "egress" and "--logs" not in argv:
        return f"a runnable block may run `proxy-component egress` only from saved logs (--logs): {shlex.join(argv)}"
    written = {"--stack", "--cwd", "-o", "--output"} & {a.split("=", 1)[0] for a in argv}
    return f"a runnable block may not use {', '.join(sorted(written))}: {shlex.join(argv)}" if written else ""


@pytest.mark.parametrize(
    "argv",
    [["kubectl", "apply"], ["proxy-component", "check", "x.yaml"], ["proxy-component", "render", "-o", "out"],
     ["proxy-component", "render", "--stack=prod"], ["proxy-component"], ["proxy-component", "egress", "x.yaml"]],
)  # fmt: skip
def test_a_runnable_block_runs_only_what_reads_and_writes_nothing(argv: list[str]) -> None:
    assert _unsafe(argv) != ""


@pytest.mark.parametrize("step", STEPS, ids=lambda s: f"{s.page}:{s.line}")
def test_each_runnable_command_runs_as_shown(step: Step) -> None:
    argv = shlex.split(step.command)
    assert _unsafe(argv) == "", f"{step.page}:{step.line}: {_unsafe(argv)}"
    command = [str(Path(sys.executable).parent / "proxy-component"), *argv[1:]]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{step.page}:{step.line}: {step.command}\n{done.stderr}"
    shown = list(step.output)
    lines = done.stdout.rstrip("\n").splitlines()
    if shown and shown[-1] == "...":
        assert lines[: len(shown) - 1] == shown[:-1], f"{step.page}:{step.line}: the output shown is not the output"
        assert lines, f"{step.page}:{step.line}: printed nothing"
    else:
        assert lines == shown, f"{step.page}:{step.line}: the output shown is not the output"


def test_a_runnable_block_is_split_into_commands_and_their_output(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# T\n\n```sh\n$ not run\n```\n\n"
        "```console runnable\n$ proxy-component no-proxy\nlocalhost\n$ proxy-component render\n...\n```\n"
    )
    assert _steps(page, tmp_path) == [
        Step("page.md", 8, "proxy-component no-proxy", ("localhost",)),
        Step("page.md", 10, "proxy-component render", ("...",)),
    ]
