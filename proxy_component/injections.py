"""Candidate NO_PROXY injections, scored with the client model: which rendering goes under which spelling.

A `Candidate` says which NO_PROXY rendering (the composed list, or the
Python-safe one without IPv6 CIDRs and bracketed addresses) `NO_PROXY` and
`no_proxy` carry, for a workload without a runtime selection, one that selects
python, and one that selects node. `score` asks every client of the model
(`clients.CLIENTS`) about every destination of each cluster:

- the rule: no client raises, under any runtime selection a workload may have
  (any client may run in any workload: a Node image with a Python tool in it);
- `misses`: cells whose decision is not the intent, each client in the workload
  its runtime recommends (Python clients with python, Node's and npm with node,
  the JVM with java, the others with none);
- `unannotated`: the same with no selection at all, as an upgrade leaves workloads.

`winner` is the candidate that keeps the rule with the fewest `misses`, then the
fewest `unannotated` misses. `render.env.NO_PROXY_SPELLINGS` must be the winner's
(a test holds it), and `markdown` writes the table of docs/no-proxy-injections.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations

from .clients import CLIENTS, Client, decide
from .explain import destinations, intent
from .noproxy import NoProxy
from .render.env import Rendering, env_pairs, workload_values
from .settings import RUNTIMES, NetworkValues, Runtime, Settings

__all__ = ["CANDIDATES", "Candidate", "Cluster", "Score", "markdown", "recommended", "score", "winner"]

Spellings = tuple[Rendering, Rendering]


@dataclass(frozen=True)
class Candidate:
    """What (NO_PROXY, no_proxy) carry: by default, with the python runtime, and with node (None: the default)."""

    key: str
    description: str
    default: Spellings
    python: Spellings
    node: Spellings | None = None

    def spellings(self, selection: frozenset[Runtime]) -> Spellings:
        if "python" in selection:
            return self.python
        if "node" in selection and self.node is not None:
            return self.node
        return self.default

    @property
    def table(self) -> dict[bool, Spellings]:
        """The form of `render.env.NO_PROXY_SPELLINGS` (python selected or not), for candidates without a node rule."""
        return {False: self.default, True: self.python}


CANDIDATES: tuple[Candidate, ...] = (
    Candidate("A", "the composed list in both spellings, for every workload (0.1)", ("full", "full"), ("full", "full")),
    Candidate(
        "A+py",
        "the composed list in both; Python workloads select python: the Python-safe list in both",
        ("full", "full"),
        ("python", "python"),
    ),
    Candidate(
        "B",
        "NO_PROXY the composed list, no_proxy the Python-safe one; python selects the Python-safe list in both",
        ("full", "python"),
        ("python", "python"),
    ),
    Candidate(
        "B+node",
        "as B, and Node workloads (node) get the composed list in no_proxy too, for the clients that need brackets",
        ("full", "python"),
        ("python", "python"),
        node=("full", "full"),
    ),
    Candidate(
        "C", "the Python-safe list in both spellings, for every workload", ("python", "python"), ("python", "python")
    ),
    Candidate(
        "D",
        "NO_PROXY the Python-safe list, no_proxy the composed one; python selects the Python-safe list in both",
        ("python", "full"),
        ("python", "python"),
    ),
)

SELECTIONS: tuple[frozenset[Runtime], ...] = tuple(
    frozenset(combo) for size in range(len(RUNTIMES) + 1) for combo in combinations(RUNTIMES, size)
)


def recommended(c: Client) -> frozenset[Runtime]:
    """The selection a workload running client `c` should have."""
    if c.id.startswith("python-"):
        return frozenset({"python"})
    if c.id.startswith("node-") or c.id == "npm":
        return frozenset({"node"})
    if c.id == "java":
        return frozenset({"java"})
    return frozenset()


@dataclass(frozen=True)
class Cluster:
    """One example cluster: its settings, the network discovery gives, and the URLs to judge (None: its destinations)."""

    name: str
    settings: Settings
    network: NetworkValues | None = None
    urls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Score:
    """One candidate on one cluster: cells that raise (under any selection), miss (recommended), miss (none)."""

    errors: int
    misses: int
    unannotated: int
    raising: tuple[tuple[str, str], ...]  # (client, selection) pairs with a raising cell
    by_client: tuple[tuple[str, int], ...] = ()  # misses per client, in the model's order


def _environment(
    settings: Settings, no_proxy: NoProxy, candidate: Candidate, selection: frozenset[Runtime]
) -> dict[str, str]:
    values = workload_values(settings, no_proxy, selection=selection)
    env = {name: str(value) for name, value in env_pairs(values)}
    upper, lower = candidate.spellings(selection)
    env["NO_PROXY"], env["no_proxy"] = str(values.rendering(upper)), str(values.rendering(lower))
    return env


def score(candidate: Candidate, cluster: Cluster) -> Score:
    """The candidate's cells on one cluster (see the module docstring)."""
    settings = cluster.settings
    no_proxy = settings.no_proxy(cluster.network)
    urls = list(dict.fromkeys([*(d.url for d in destinations(settings, no_proxy)), *cluster.urls]))
    wanted = {url: intent(settings, no_proxy, url) for url in urls}
    envs = {selection: _environment(settings, no_proxy, candidate, selection) for selection in SELECTIONS}

    by_id = {c.id: c for c in CLIENTS}

    @cache
    def decided(client_id: str, selection: frozenset[Runtime], url: str) -> str:
        return decide(by_id[client_id], envs[selection], url)

    def cell(client: Client, selection: frozenset[Runtime], url: str) -> str:
        return decided(client.id, selection, url)

    raising = {
        (c.id, ",".join(sorted(s)) or "none")
        for c in CLIENTS
        for s in SELECTIONS
        for u in urls
        if cell(c, s, u) == "error"
    }
    errors = sum(cell(c, s, u) == "error" for c in CLIENTS for s in SELECTIONS for u in urls)
    by_client = tuple((c.id, sum(cell(c, recommended(c), u) != wanted[u] for u in urls)) for c in CLIENTS)
    unannotated = sum(cell(c, frozenset(), u) != wanted[u] for c in CLIENTS for u in urls)
    return Score(errors, sum(n for _, n in by_client), unannotated, tuple(sorted(raising)), by_client)


def winner(scores: Mapping[str, Sequence[Score]], candidates: Iterable[Candidate] = CANDIDATES) -> Candidate:
    """The candidate under which no client raises, with the fewest misses, then the fewest unannotated misses."""
    kept = [c for c in candidates if not any(s.errors for s in scores[c.key])]
    if not kept:
        raise ValueError("no candidate keeps every client from raising")
    return min(kept, key=lambda c: (sum(s.misses for s in scores[c.key]), sum(s.unannotated for s in scores[c.key])))


def markdown(clusters: Sequence[Cluster], candidates: Sequence[Candidate] = CANDIDATES) -> str:
    """The scored table: one row per candidate, per cluster `errors / misses / unannotated`, the totals, the verdict."""
    scores = {c.key: [score(c, cluster) for cluster in clusters] for c in candidates}
    best = winner(scores, candidates)
    lines = [
        "# Which NO_PROXY each spelling carries: the candidates, scored",
        "",
        "Generated by `python -m tests.injection_table` from the client model (`proxy_component/injections.py`);",
        "`tests/unit/test_injections.py` checks that this file is what the code generates now, and that",
        "`render.env.NO_PROXY_SPELLINGS` is the winner's.",
        "",
        "Renderings: **full** is the composed NO_PROXY; **python** is it without IPv6 CIDRs and bracketed IPv6",
        "addresses (`NO_PROXY_PYTHON`), on which httpx raises `InvalidURL` when a client is created. Each cell is",
        "`errors / misses / unannotated` over the cluster's destinations and the extra URLs, for "
        f"{len(CLIENTS)} clients:",
        "",
        f"- **errors**: cells where a client raises, under every runtime selection ({len(SELECTIONS)}: any client",
        "  may run in any workload); a candidate with one is out (no default may make a client fail at start);",
        "- **misses**: cells whose decision is not the intent, each client in the workload its runtime recommends",
        "  (Python clients with `python`, Node's and npm with `node`, the JVM with `java`, the rest with none);",
        "- **unannotated**: the same with no runtime selected anywhere, as an upgrade leaves workloads.",
        "",
        "| candidate | NO_PROXY / no_proxy (none; python; node) | "
        + " | ".join(c.name for c in clusters)
        + " | total | verdict |",
        "|---|---|" + "---|" * len(clusters) + "---|---|",
    ]
    for c in candidates:
        row = scores[c.key]
        shapes = f"{'/'.join(c.default)}; {'/'.join(c.python)}; {'/'.join(c.node or c.default)}"
        total = _total(row)
        if total.errors:
            selections: dict[str, list[str]] = {}
            for client_id, selection in sorted({r for s in row for r in s.raising}):
                selections.setdefault(client_id, []).append(selection)
            raising = "; ".join(f"{cid} with {', '.join(sel)}" for cid, sel in selections.items())
            verdict = f"out: raises ({raising})"
        else:
            verdict = (
                "**winner**" if c is best else f"keeps the rule; against {best.key}: {_worse(row, scores[best.key])}"
            )
        cells = " | ".join(f"{s.errors} / {s.misses} / {s.unannotated}" for s in row)
        lines.append(
            f"| {c.key}: {c.description} | {shapes} | {cells} | "
            f"{total.errors} / {total.misses} / {total.unannotated} | {verdict} |"
        )
    deciding = [
        cluster.name
        for i, cluster in enumerate(clusters)
        if len({(scores[c.key][i].errors, scores[c.key][i].misses) for c in candidates}) > 1
    ]
    lines += [
        "",
        f"**Winner: {best.key}**: {best.description}. It is the candidate under which no client raises with the",
        f"fewest misses. Clusters where the candidates differ: {', '.join(deciding) or 'none'}.",
        "",
    ]
    return "\n".join(lines)


def _total(row: Sequence[Score]) -> Score:
    misses: dict[str, int] = {}
    for s in row:
        for client_id, n in s.by_client:
            misses[client_id] = misses.get(client_id, 0) + n
    return Score(
        sum(s.errors for s in row),
        sum(s.misses for s in row),
        sum(s.unannotated for s in row),
        (),
        tuple(misses.items()),
    )


def _worse(row: Sequence[Score], best: Sequence[Score]) -> str:
    """Which clients miss more (or fewer) cells than under the winner, e.g. `go +4`."""
    mine, theirs = dict(_total(row).by_client), dict(_total(best).by_client)
    changes = [f"{cid} {mine[cid] - theirs[cid]:+d}" for cid in mine if mine[cid] != theirs[cid]]
    return f"misses {', '.join(changes)}" if changes else "the same misses"
