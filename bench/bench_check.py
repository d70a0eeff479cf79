"""Benchmark `proxy-component check` and the `rollout` plan against a real API server with many kwok nodes and
workloads, each workload a Deployment with one ReplicaSet and one running pod (kwok runs it).

Run from the repository root (it starts and stops its own cluster with scripts/cluster, on 127.0.0.1):

    .venv/bin/python bench/bench_check.py                       # 100/400 and 500/3000 nodes/workloads
    .venv/bin/python bench/bench_check.py --sizes 5000:20000    # one size
    .venv/bin/python bench/bench_check.py --profile             # also cProfile one more run of each (stderr)
    .venv/bin/python bench/bench_check.py --baseline ../old     # also time the code of another tree, same cluster
    .venv/bin/python bench/bench_check.py --sizes 5000:20000 --keep        # leave the cluster running, then:
    .venv/bin/python bench/bench_check.py --kubeconfig K --sizes 5000:20000 [--baseline ../old]

Half the Deployments read proxy-config through envFrom, half are opted out. Once every pod runs, a NO_PROXY entry
is added to the settings and proxy-config rewritten, so that half the pods hold old values: check reports those
owners (pods-stale) and the rollout plan holds them, in waves. For each size and code tree it reports the wall time
of each (median of 5) and the number of API requests each made, as the code runs by default (lists from the API
server's watch cache, read ahead) and with `cached` off (consistent lists from etcd, in pages of 500), and with
`prefetch` off too (each page asked for when it is wanted, as before 2026-11-26). The request count must grow only
with pages of 500 objects (and listed namespaces), never per object. Each code tree is timed in a process of its
own; an older tree ignores the modes it does not have.

The set-up makes each workload's Deployment, ReplicaSet and pod itself (the pod bound to a node, the objects linked
by ownerReferences as the controllers link them), with the deployment and replicaset controllers switched off: with
them on, the controllers made 5 workloads a second on this machine's 2 cores, and 20,000 took over an hour. Neither
command reads a Deployment's or ReplicaSet's status, which those controllers would have written.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

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
# The set-up makes the workloads' ReplicaSets and pods itself (see above); the DaemonSet controller and kwok at a
# QPS that makes 5,000 proxy pods in minutes (their default is 20).
FAST_CONTROLLERS = """\
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - {key: controllers, value: "*,-deployment,-replicaset"}
  - {key: kube-api-qps, value: "2000"}
  - {key: kube-api-burst, value: "4000"}
- name: kube-scheduler
  extraArgs:
  - {key: kube-api-qps, value: "2000"}
  - {key: kube-api-burst, value: "4000"}
"""
NAMESPACE = "default"
REPEAT = 5  # runs per median: at 5,000 nodes kwok's heartbeats load the API server in bursts


def _kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True,
                            text=True, timeout=1200)  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {result.stderr}")
    return result.stdout


def _template(name: str, envfrom: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "example/app:1"}
    if envfrom:
        container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    return {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}


def _owner(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}]  # fmt: skip


def _create_workloads(kubeconfig: str, count: int, nodes: list[str], threads: int = 8) -> None:
    """`count` workloads, `threads` at a time: a Deployment of one pod (half read proxy-config through envFrom, half
    are opted out), its ReplicaSet and its pod on a node, each owned by the one before as the controllers own them."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = threads
    api = client.ApiClient(configuration)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)

    def created(response: Any) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(response.data)
        return loaded

    def create(i: int) -> None:
        name, envfrom = f"w{i:05d}", bool(i % 2)
        template = _template(name, envfrom)
        annotations = {} if envfrom else {"proxy-component.io/inject": "false"}
        spec = {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}
        deployment = created(apps.create_namespaced_deployment(NAMESPACE, {  # type: ignore[arg-type]
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": annotations}, "spec": spec,
        }, _preload_content=False))  # fmt: skip
        replica_set = created(apps.create_namespaced_replica_set(NAMESPACE, {  # type: ignore[arg-type]
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{name}-rs", "labels": {"app": name}, "ownerReferences": _owner(deployment)},
            "spec": spec,
        }, _preload_content=False))  # fmt: skip
        core.create_namespaced_pod(NAMESPACE, {  # type: ignore[arg-type]
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-rs-pod", "labels": {"app": name}, "ownerReferences": _owner(replica_set)},
            "spec": {**template["spec"], "nodeName": nodes[i % len(nodes)]},
        }, _preload_content=False)  # fmt: skip

    with ThreadPoolExecutor(threads) as pool:
        for n, _ in enumerate(pool.map(create, range(count)), 1):
            if n % 2000 == 0:
                print(f"bench_check: {n} of {count} workloads created", file=sys.stderr)


def _wait(what: str, counted: Callable[[], tuple[int, int]], limit: float = 3600) -> None:
    deadline = time.monotonic() + limit
    while True:
        done, wanted = counted()
        if done >= wanted > 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_check: {done} of {wanted} {what} after {limit:.0f} s")
        print(f"bench_check: {done} of {wanted} {what}", file=sys.stderr)
        time.sleep(15)


def set_up(nodes: int, workloads: int, env: dict[str, str]) -> str:
    """A cluster of `nodes` kwok nodes running the proxy and `workloads` workloads, proxy-config changed since every
    pod started; its kubeconfig."""
    from proxy_component.cli import dump
    from proxy_component.render import manifests
    from proxy_component.settings import parse_settings

    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", str(nodes)], capture_output=True, text=True,
                        env=env, timeout=3000)  # fmt: skip
    if up.returncode != 0:
        raise SystemExit(up.stderr)
    kubeconfig = up.stdout.strip().splitlines()[-1]
    t0 = time.perf_counter()
    _kubectl(kubeconfig, "apply", "-f", "-", stdin=dump(manifests(parse_settings(SETTINGS))))
    names = _kubectl(kubeconfig, "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split()
    _create_workloads(kubeconfig, workloads, names)

    def proxies() -> tuple[int, int]:
        status = json.loads(_kubectl(kubeconfig, "-n", "kube-system", "get", "ds", "http-proxy", "-o", "json"))[
            "status"
        ]
        return int(status.get("numberReady") or 0), int(status.get("desiredNumberScheduled") or 0)

    def running() -> tuple[int, int]:
        listed = _kubectl(kubeconfig, "get", "pods", "-n", NAMESPACE, "--field-selector=status.phase=Running", "-o",
                          "name")  # fmt: skip
        return len(listed.split()), workloads

    _wait("proxy pods ready", proxies)
    _wait("workload pods running", running)
    print(f"bench_check: set up {time.perf_counter() - t0:.0f} s after the first apply", file=sys.stderr)
    time.sleep(1.5)  # a change in a later second than every pod's start
    configs = [o for o in manifests(parse_settings(CHANGED)) if o["metadata"]["name"] == "proxy-config"]
    _kubectl(kubeconfig, "apply", "-f", "-", stdin=dump(configs))
    return kubeconfig


def _profile(run: Any, connect: Any, kubeconfig: str, top: int = 25) -> str:
    """One more run under cProfile: the functions with the most cumulative and own time."""
    cluster = connect(kubeconfig)
    profiler = cProfile.Profile()
    profiler.runcall(run, cluster)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def time_here(kubeconfig: str, profile: bool) -> dict[str, Any]:
    """Check and the rollout plan with the code this process imported, timed: run in a process of its own per tree."""
    import proxy_component
    from proxy_component.live.check import check_cluster
    from proxy_component.live.cluster import connect
    from proxy_component.live.rollout import plan_rollout
    from proxy_component.settings import parse_settings

    settings = parse_settings(CHANGED)

    def check(cluster: Any) -> Any:
        return check_cluster(settings, cluster)

    def plan(cluster: Any) -> Any:
        return plan_rollout(settings, cluster)

    def timed(run: Any, **modes: bool) -> tuple[float, int, Any]:
        times, requests, result = [], 0, None
        for _ in range(REPEAT):
            cluster = connect(kubeconfig)
            for mode, on in modes.items():  # an older tree ignores a mode it does not have
                setattr(cluster, mode, on)
            t0 = time.perf_counter()
            result = run(cluster)
            times.append(time.perf_counter() - t0)
            requests = cluster.requests
        return round(statistics.median(times), 3), requests, result

    row: dict[str, Any] = {"imported_from": str(Path(proxy_component.__file__).parent)}
    for name, run in (("check", check), ("rollout_plan", plan)):
        seconds, requests, result = timed(run)
        row[f"{name}_seconds_median"] = seconds
        row[f"{name}_api_requests"] = requests
        if name == "check":
            row["check_findings"] = len(result)
            row["stale_owners_reported"] = len([f for f in result if f.kind == "pods-stale"])
        else:
            row["rollout_plan_steps"] = len(result.steps)
        # Lists read consistently from etcd in pages (no watch cache), and also each page asked for when needed.
        row[f"{name}_seconds_median_uncached"], row[f"{name}_api_requests_uncached"], _ = timed(run, cached=False)
        row[f"{name}_seconds_median_uncached_sequential"], _, _ = timed(run, cached=False, prefetch=False)
    if profile:
        for name, run in (("check", check), ("rollout plan", plan)):
            print(f"bench_check: cProfile of one {name}", file=sys.stderr)
            print(_profile(run, connect, kubeconfig), file=sys.stderr)
    return row


def time_tree(tree: Path, kubeconfig: str, profile: bool) -> dict[str, Any]:
    """`time_here` in a new process that imports proxy_component from `tree` (a checkout, e.g. a git worktree)."""
    args = [sys.executable, str(Path(__file__).resolve()), "--time-here", kubeconfig, *(["--profile"] * profile)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=3600,
                            env={**os.environ, "PYTHONPATH": str(tree.resolve())}, cwd=tree)  # fmt: skip
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        raise SystemExit(f"bench_check: timing the code in {tree} failed")
    row: dict[str, Any] = json.loads(result.stdout)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["100:400", "500:3000"], help="NODES:WORKLOADS pairs")
    parser.add_argument("--profile", action="store_true", help="also cProfile one more run of each per size (stderr)")
    parser.add_argument("--baseline", type=Path, action="append", default=[],
                        help="also time the code in this tree (e.g. a git worktree at an older commit)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="leave the (last) cluster running")
    parser.add_argument("--kubeconfig", help="time against a cluster --keep left running (one size: its own)")
    parser.add_argument("--time-here", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_here:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(time_here(args.time_here, args.profile)))
        return
    sys.path.insert(0, str(ROOT))
    rows = []
    trees = [("this tree", ROOT), *((str(t), t) for t in args.baseline)]
    workdir = tempfile.mkdtemp(prefix="pc-bench-")
    extra = Path(workdir) / "kwokctl-fast.yaml"
    extra.write_text(FAST_CONTROLLERS)
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": "pc-bench", "KWOK_WORKDIR": workdir,
           "PROXY_COMPONENT_CLUSTER_CONFIG": str(extra)}  # fmt: skip
    for n, size in enumerate(args.sizes):
        nodes, workloads = (int(x) for x in size.split(":"))
        print(f"bench_check: {nodes} nodes, {workloads} workloads ...", file=sys.stderr)
        kubeconfig = args.kubeconfig or set_up(nodes, workloads, env)
        try:
            # Alternating trees, twice, so that a change in the machine's load shows rather than favours one.
            for _, (name, tree) in itertools.product(range(2 if args.baseline else 1), trees):
                print(f"bench_check: timing {name}", file=sys.stderr)
                row = {"nodes": nodes, "workloads": workloads, "code": name}
                rows.append({**row, **time_tree(tree, kubeconfig, args.profile)})
        finally:
            if args.kubeconfig is None and not (args.keep and n == len(args.sizes) - 1):
                subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], env=env, timeout=300, check=False)
    if args.keep and args.kubeconfig is None:
        print(f"bench_check: left running: {kubeconfig}; take it down with "
              f"PROXY_COMPONENT_CLUSTER=pc-bench KWOK_WORKDIR={workdir} scripts/cluster down", file=sys.stderr)  # fmt: skip
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
