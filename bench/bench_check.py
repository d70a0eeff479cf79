"""Benchmark `proxy-component check` against a real API server with many kwok nodes and workloads.

Run from the repository root (it starts and stops its own cluster with scripts/cluster, on 127.0.0.1):

    .venv/bin/python bench/bench_check.py                       # 100/400 and 500/2000 nodes/workloads
    .venv/bin/python bench/bench_check.py --sizes 500:2000      # one size
    .venv/bin/python bench/bench_check.py --profile             # also cProfile one more run per size (stderr)

For each size it reports check's wall time (median of 3) and the number of API requests it made. The
request count must grow only with pages of 500 objects (and listed namespaces), never per object.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy_component.cli import dump  # noqa: E402
from proxy_component.live.check import check_cluster  # noqa: E402
from proxy_component.live.cluster import connect  # noqa: E402
from proxy_component.render import manifests  # noqa: E402
from proxy_component.settings import Settings, parse_settings  # noqa: E402

SETTINGS = {
    "cluster": {
        "podCidrs": ["10.0.0.0/8", "fd00::/40"],
        "serviceCidrs": ["10.0.0.0/24"],
        "nodeCidrs": ["192.0.0.0/8", "2001:db8::/32"],
        "ipFamily": "dual",
    },
    "namespaces": ["default"],
}


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True,
                            text=True, timeout=1200)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


def _workloads(count: int) -> str:
    """`count` Deployments with no replicas (no pods to fake), half with the env, half opted out."""
    items: list[dict[str, Any]] = []
    for i in range(count):
        container: dict[str, Any] = {"name": "app", "image": "example/app:1"}
        annotations = {}
        if i % 2:
            container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
        else:
            annotations = {"proxy-component.io/inject": "false"}
        items.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": f"w{i:05d}", "namespace": "default", "annotations": annotations},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": f"w{i:05d}"}},
                    "template": {"metadata": {"labels": {"app": f"w{i:05d}"}}, "spec": {"containers": [container]}},
                },
            }
        )
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def _profile(settings: Settings, kubeconfig: str, top: int = 25) -> str:
    """One more check run under cProfile: the functions with the most cumulative and own time."""
    cluster = connect(kubeconfig)
    profiler = cProfile.Profile()
    profiler.runcall(check_cluster, settings, cluster)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def measure(nodes: int, workloads: int, env: dict[str, str], profile: bool = False) -> dict[str, Any]:
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", str(nodes)], capture_output=True, text=True,
                        env=env, timeout=3000)  # fmt: skip
    if up.returncode != 0:
        raise SystemExit(up.stderr)
    kubeconfig = up.stdout.strip().splitlines()[-1]
    try:
        settings = parse_settings(SETTINGS)
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=dump(manifests(settings)))
        for start in range(0, workloads, 500):
            _kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=_workloads(min(500, workloads - start))
                     .replace("name: w", f"name: b{start}-w"))  # fmt: skip
        _kubectl(kubeconfig, "-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=600s")
        times, requests, findings = [], [], 0
        for _ in range(3):
            cluster = connect(kubeconfig)
            t0 = time.perf_counter()
            result = check_cluster(settings, cluster)
            times.append(time.perf_counter() - t0)
            requests.append(cluster.requests)
            findings = len(result)
        if profile:
            print(f"bench_check: cProfile of one check run at {nodes}:{workloads}", file=sys.stderr)
            print(_profile(settings, kubeconfig), file=sys.stderr)
        return {
            "nodes": nodes,
            "workloads": workloads,
            "check_seconds_median": round(statistics.median(times), 3),
            "api_requests": requests[0],
            "findings": findings,
        }
    finally:
        subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], env=env, timeout=300, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["100:400", "500:2000"], help="NODES:WORKLOADS pairs")
    parser.add_argument("--profile", action="store_true", help="also cProfile one more check run per size (stderr)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp:
        env = {**os.environ, "PROXY_COMPONENT_CLUSTER": "pc-bench", "KWOK_WORKDIR": tmp}
        for size in args.sizes:
            nodes, workloads = (int(x) for x in size.split(":"))
            print(f"bench_check: {nodes} nodes, {workloads} workloads ...", file=sys.stderr)
            rows.append(measure(nodes, workloads, env, args.profile))
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
