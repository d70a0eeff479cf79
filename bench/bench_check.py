"""Benchmark `proxy-component check` and the `rollout` plan against a real API server with many kwok nodes and
workloads, each workload a Deployment with one running pod (kwok runs it).

Run from the repository root (it starts and stops its own cluster with scripts/cluster, on 127.0.0.1):

    .venv/bin/python bench/bench_check.py                       # 100/400 and 500/2000 nodes/workloads
    .venv/bin/python bench/bench_check.py --sizes 5000:20000    # one size
    .venv/bin/python bench/bench_check.py --profile             # also cProfile one more run of each (stderr)

Half the Deployments read proxy-config through envFrom, half are opted out. Once every pod runs, a NO_PROXY entry
is added to the settings and proxy-config rewritten, so that half the pods hold old values: check reports those
owners (pods-stale) and the rollout plan holds them, in waves. For each size it reports the wall time of each
(median of 3; also with each list's pages read one after the other, as before the next page was asked for while
one is parsed) and the number of API requests each made. The request count must grow only with pages of 500 objects
(and listed namespaces), never per object.
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
from proxy_component.live.cluster import Cluster, connect  # noqa: E402
from proxy_component.live.rollout import plan_rollout  # noqa: E402
from proxy_component.render import manifests  # noqa: E402
from proxy_component.settings import parse_settings  # noqa: E402

SETTINGS = {
    "cluster": {
        "podCidrs": ["10.0.0.0/8", "fd00::/40"],
        "serviceCidrs": ["10.0.0.0/24"],
        "nodeCidrs": ["192.0.0.0/8", "2001:db8::/32"],
        "ipFamily": "dual",
    },
    "namespaces": ["default"],
}
CHANGED = {**SETTINGS, "proxy": {"noProxy": ["registry.corp.example"]}}
# The controllers and the scheduler at a QPS that makes 20,000 pods in minutes, not an hour (their default is 20).
FAST_CONTROLLERS = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - {key: kube-api-qps, value: "2000"}
  - {key: kube-api-burst, value: "4000"}
  - {key: concurrent-deployment-syncs, value: "20"}
  - {key: concurrent-replicaset-syncs, value: "20"}
- name: kube-scheduler
  extraArgs:
  - {key: kube-api-qps, value: "2000"}
  - {key: kube-api-burst, value: "4000"}
"""


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True,
                            text=True, timeout=1200)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


def _workloads(count: int) -> str:
    """`count` Deployments of one pod each, half with the env, half opted out."""
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
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": f"w{i:05d}"}},
                    "template": {"metadata": {"labels": {"app": f"w{i:05d}"}}, "spec": {"containers": [container]}},
                },
            }
        )
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items})


def _profile(run: Any, kubeconfig: str, top: int = 25) -> str:
    """One more run under cProfile: the functions with the most cumulative and own time."""
    cluster = connect(kubeconfig)
    profiler = cProfile.Profile()
    profiler.runcall(run, cluster)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def _running(kubeconfig: str) -> int:
    listed = _kubectl(kubeconfig, "get", "pods", "-n", "default", "--field-selector=status.phase=Running", "-o", "name")
    return len(listed.split())


def _timed(run: Any, kubeconfig: str, prefetch: bool = True) -> tuple[float, int, Any]:
    """Median wall time of 3 runs, the requests of one, and its result; `prefetch` off: each list's pages one
    after the other, as before lists asked for the next page while parsing one."""
    times, requests, result = [], 0, None
    for _ in range(3):
        cluster: Cluster = connect(kubeconfig)
        cluster.prefetch = prefetch
        t0 = time.perf_counter()
        result = run(cluster)
        times.append(time.perf_counter() - t0)
        requests = cluster.requests
    return round(statistics.median(times), 3), requests, result


def measure(nodes: int, workloads: int, env: dict[str, str], profile: bool = False) -> dict[str, Any]:
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", str(nodes)], capture_output=True, text=True,
                        env=env, timeout=3000)  # fmt: skip
    if up.returncode != 0:
        raise SystemExit(up.stderr)
    kubeconfig = up.stdout.strip().splitlines()[-1]
    try:
        settings = parse_settings(SETTINGS)
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=dump(manifests(settings)))
        t0 = time.perf_counter()
        for start in range(0, workloads, 500):
            _kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=_workloads(min(500, workloads - start))
                     .replace("w0", f"b{start}-w0"))  # fmt: skip
        _kubectl(kubeconfig, "-n", "kube-system", "rollout", "status", "daemonset/http-proxy", "--timeout=600s")
        deadline = time.monotonic() + 3600
        while (running := _running(kubeconfig)) < workloads:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench_check: {running} of {workloads} pods running after an hour")
            time.sleep(10)
        print(
            f"bench_check: {workloads} pods running {time.perf_counter() - t0:.0f} s after the first apply",
            file=sys.stderr,
        )
        time.sleep(1.5)  # a change in a later second than every pod's start
        settings = parse_settings(CHANGED)
        configs = [o for o in manifests(settings) if o["metadata"]["name"] == "proxy-config"]
        _kubectl(kubeconfig, "apply", "-f", "-", stdin=dump(configs))

        def check(cluster: Cluster) -> Any:
            return check_cluster(settings, cluster)

        def plan(cluster: Cluster) -> Any:
            return plan_rollout(settings, cluster)

        check_seconds, check_requests, findings = _timed(check, kubeconfig)
        plan_seconds, plan_requests, planned = _timed(plan, kubeconfig)
        check_sequential, _, _ = _timed(check, kubeconfig, prefetch=False)
        plan_sequential, _, _ = _timed(plan, kubeconfig, prefetch=False)
        if profile:
            for name, run in (("check", check), ("rollout plan", plan)):
                print(f"bench_check: cProfile of one {name} at {nodes}:{workloads}", file=sys.stderr)
                print(_profile(run, kubeconfig), file=sys.stderr)
        stale = [f for f in findings if f.kind == "pods-stale"]
        return {
            "nodes": nodes,
            "workloads": workloads,
            "pods": workloads,
            "check_seconds_median": check_seconds,
            "check_seconds_median_without_prefetch": check_sequential,
            "check_api_requests": check_requests,
            "check_findings": len(findings),
            "stale_owners_reported": len(stale),
            "rollout_plan_seconds_median": plan_seconds,
            "rollout_plan_seconds_median_without_prefetch": plan_sequential,
            "rollout_plan_api_requests": plan_requests,
            "rollout_plan_steps": len(planned.steps),
        }
    finally:
        subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], env=env, timeout=300, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["100:400", "500:2000"], help="NODES:WORKLOADS pairs")
    parser.add_argument("--profile", action="store_true", help="also cProfile one more run of each per size (stderr)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pc-bench-") as tmp:
        extra = Path(tmp) / "kwokctl-fast.yaml"
        extra.write_text(FAST_CONTROLLERS)
        env = {**os.environ, "PROXY_COMPONENT_CLUSTER": "pc-bench", "KWOK_WORKDIR": tmp,
               "PROXY_COMPONENT_CLUSTER_CONFIG": str(extra)}  # fmt: skip
        for size in args.sizes:
            nodes, workloads = (int(x) for x in size.split(":"))
            print(f"bench_check: {nodes} nodes, {workloads} workloads ...", file=sys.stderr)
            rows.append(measure(nodes, workloads, env, args.profile))
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
