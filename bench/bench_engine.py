"""Benchmark the stack program under the real engine: `pulumi preview` and `pulumi up` of the per-cluster stack with
1, 50 and 500 namespaces, beside a hand-written program that registers the same objects (read from
`proxy-component render`) with the same provider, in one run, as ratios. Goal: at most 1.05x at 500.

Run from the repository root (scripts/engine builds or reuses the engine; .venv-engine is the pinned venv):

    .venv/bin/python bench/bench_engine.py                 # markdown table
    .venv/bin/python bench/bench_engine.py --json          # one JSON document
    .venv/bin/python bench/bench_engine.py --sizes 1 50 --repeat 3
    .venv/bin/python bench/bench_engine.py --skip-checkpoints   # PULUMI_SKIP_CHECKPOINTS=true for both programs

Both programs render into a directory (renderYamlToDirectory): no cluster, the same files written. Progress goes
to stderr; the report to stdout. Each figure is the median wall time of --repeat runs, each on a fresh stack.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tests.engine.conftest import Project, build_engine, build_engine_venv  # noqa: E402

DEFAULT_SIZES = (1, 50, 500)
CLUSTER = {
    "podCidrs": ["10.244.0.0/16"],
    "serviceCidrs": ["10.96.0.0/12"],
    "nodeCidrs": ["192.168.10.0/24"],
}
BASELINE = '''\
"""Hand-written: the same objects as the component, registered through a provider configured as the stack's."""

import pulumi
import pulumi_kubernetes as k8s
import yaml

provider = k8s.Provider(
    "cluster",
    render_yaml_to_directory=pulumi.Config().require("renderYamlToDirectory"),
    enable_config_map_mutable=True,
    enable_secret_mutable=True,
)
opts = pulumi.ResourceOptions(provider=provider)
classes = {
    "ConfigMap": k8s.core.v1.ConfigMap,
    "Secret": k8s.core.v1.Secret,
    "Service": k8s.core.v1.Service,
    "DaemonSet": k8s.apps.v1.DaemonSet,
}
with open("objects.yaml") as stream:
    for obj in yaml.safe_load_all(stream):
        kind = obj.pop("kind")
        obj.pop("apiVersion")
        meta = obj["metadata"]
        classes[kind](f"{kind}-{meta.get('namespace', '')}-{meta['name']}", opts=opts, **obj)
'''


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def namespaces(n: int) -> list[str]:
    return [f"team-{i:03d}" for i in range(n)]


def component_project(work: Path, engine: Path, venv: Path, n: int) -> Project:
    project = Project(REPO_ROOT, work, engine, venv, "bench")
    (project.dir / "Pulumi.dev.yaml").unlink()
    project.init()
    project.config("proxy-component:renderYamlToDirectory", "rendered")
    project.config("proxy-component:cluster", CLUSTER)
    project.config("proxy-component:namespaces", namespaces(n))
    return project


def baseline_project(work: Path, engine: Path, venv: Path, n: int) -> Project:
    source = work / "baseline-src"
    source.mkdir()
    (source / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "baseline", "runtime": "python"}))
    (source / "__main__.py").write_text(BASELINE)
    settings = work / "settings.yaml"
    settings.write_text(yaml.safe_dump({"cluster": CLUSTER, "namespaces": namespaces(n)}))
    rendered = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "render", str(settings)],
        capture_output=True, text=True, check=True, cwd=REPO_ROOT,
    )  # fmt: skip
    (source / "objects.yaml").write_text(rendered.stdout)
    project = Project(source, work, engine, venv, "bench")
    project.init()
    project.config("baseline:renderYamlToDirectory", "rendered")
    return project


def timed(project: Project, *args: str) -> float:
    start = time.perf_counter()
    project.run(*args, timeout=3600)
    return time.perf_counter() - start


def run_once(kind: str, n: int, engine: Path, venv: Path, skip_checkpoints: bool) -> tuple[float, float, float]:
    """One fresh stack of `kind`: (preview seconds, up seconds, the stack's checkpoint in MB after up).

    The file backend rewrites the whole checkpoint after every step (unless PULUMI_SKIP_CHECKPOINTS), so `up`
    costs grow with the number of steps times the state's size."""
    make = component_project if kind == "component" else baseline_project
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-{n}-") as tmp:
        project = make(Path(tmp), engine, venv, n)
        if skip_checkpoints:
            project.env["PULUMI_SKIP_CHECKPOINTS"] = "true"
        preview, up = timed(project, "preview"), timed(project, "up", "--yes", "--skip-preview")
        (checkpoint,) = project.state.glob(".pulumi/stacks/*/bench.json")
        return preview, up, checkpoint.stat().st_size / 1e6


def measure(n: int, repeat: int, engine: Path, venv: Path, skip_checkpoints: bool) -> dict[str, dict[str, float]]:
    """Both programs, alternating run by run, so that both see the same machine state: medians per program."""
    ops = ("preview", "up", "state_mb")
    times: dict[str, dict[str, list[float]]] = {k: {op: [] for op in ops} for k in ("component", "baseline")}
    for _ in range(repeat):
        for kind in ("component", "baseline"):
            for op, value in zip(ops, run_once(kind, n, engine, venv, skip_checkpoints), strict=True):
                times[kind][op].append(value)
    medians = {k: {op: statistics.median(v) for op, v in by_op.items()} for k, by_op in times.items()}
    for kind, m in medians.items():
        log(f"  {kind:9} n={n:<4} preview {m['preview']:6.2f}s  up {m['up']:6.2f}s  state {m['state_mb']:.2f} MB")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--skip-checkpoints", action="store_true", help="PULUMI_SKIP_CHECKPOINTS=true: no checkpoint after each step"
    )
    args = parser.parse_args()
    engine = build_engine()
    venv = build_engine_venv()
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        medians = measure(n, args.repeat, engine, venv, args.skip_checkpoints)
        component, baseline = medians["component"], medians["baseline"]
        rows.append(
            {
                "namespaces": n,
                "objects": n + 3,
                "component": component,
                "baseline": baseline,
                "ratio": {op: component[op] / baseline[op] for op in ("preview", "up")},
            }
        )
    if args.json:
        print(json.dumps({"repeat": args.repeat, "skip_checkpoints": args.skip_checkpoints, "rows": rows}, indent=2))
        return
    checkpoints = "no checkpoints (PULUMI_SKIP_CHECKPOINTS)" if args.skip_checkpoints else "file backend checkpoints"
    print(f"pulumi preview / up, median of {args.repeat} fresh stacks each (seconds), {checkpoints}\n")
    print(
        "| namespaces | objects | preview component | preview baseline | ratio | up component | up baseline | ratio "
        "| state component | state baseline |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c, b, q = r["component"], r["baseline"], r["ratio"]
        print(
            f"| {r['namespaces']} | {r['objects']} | {c['preview']:.2f} | {b['preview']:.2f} | {q['preview']:.2f}x "
            f"| {c['up']:.2f} | {b['up']:.2f} | {q['up']:.2f}x | {c['state_mb']:.2f} MB | {b['state_mb']:.2f} MB |"
        )


if __name__ == "__main__":
    main()
