"""Benchmark `proxy-component egress` over a day of a fleet's access logs (issue 46): time and memory.

Run from the repository root:

    .venv/bin/python bench/bench_egress.py                       # 50 nodes, 24 h, 1 connection/s per node
    .venv/bin/python bench/bench_egress.py --nodes 50 --hours 24 --rate 5 --json
    .venv/bin/python bench/bench_egress.py --live                # the same logs read through the API

It writes, into a temporary directory, one saved log per node (`<node>.log`, as `kubectl logs --timestamps` of the
metrics container gives it: an RFC 3339 time, then the access line's JSON) and a pod list, then runs the real
command offline (`proxy-component egress CONFIG --logs DIR --pods pods.json --json`) in a child process and reports
its wall time, its peak resident memory (the child's ru_maxrss) and the report's size. With `--live`, the command
reads them as it does from a cluster instead (`proxy-component egress CONFIG --kubeconfig K --json`): a loopback
server in this process plays the API server (the proxy pods, every pod, the nodes) and streams each node's log as a
pod's log, in chunks, as the kubelet does.

What the logs hold (seeded, the same every run): 30 pods per node in 20 namespaces (600 Deployments' pods, some
dual-stack), each connection from a random pod of its node to one of 400 external hosts (Zipf-weighted: a few hosts
take most connections, as a registry and a code host do), 2% refused (the Filter, ConnectPort, DNS, the
upstream's 407 and 5xx), and 0.5% to in-cluster names (NO_PROXY misses), plus one refusal-at-accept line per node
an hour. "Realistic rates": a node's proxy at 1 connection a second on average is a busy CI node's egress
(86,400 a day); `--rate` scales it, and the access log's own bound (deployment.accessLog.maxLinesPerSecond, 100 by
default) caps what a node can write at all.
"""

from __future__ import annotations

import argparse
import http.server
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = """\
cluster:
  name: fleet
  dnsDomain: cluster.local
  podCidrs: ["10.244.0.0/16", "fd00:10:244::/56"]
  serviceCidrs: ["10.96.0.0/12"]
  nodeCidrs: ["192.0.2.0/24"]
  apiServerIps: ["10.96.0.1"]
proxy:
  upstream: {url: "http://proxy.corp.example:3128"}
namespaces: [default]
"""
CAUSES = [("refused", "filter", 403), ("refused", "connect-port", 403), ("error", "dns", 500),
          ("refused", "upstream-407", 407), ("error", "upstream-5xx", 503)]  # fmt: skip


def _pods(nodes: int, per_node: int) -> list[dict[str, object]]:
    pods = []
    for n in range(nodes):
        for p in range(per_node):
            i = n * per_node + p
            namespace, deployment = f"team-{i % 20:02d}", f"app-{i % 600:03d}"
            ips = [{"ip": f"10.244.{n}.{p + 2}"}] + ([{"ip": f"fd00:10:244:{n:x}::{p + 2:x}"}] if p % 3 == 0 else [])
            pods.append({
                "metadata": {"namespace": namespace, "name": f"{deployment}-5f7d8-{i:05d}",
                             "labels": {"pod-template-hash": "5f7d8"}, "creationTimestamp": "2026-11-01T00:00:00Z",
                             "ownerReferences": [{"kind": "ReplicaSet", "name": f"{deployment}-5f7d8", "controller": True}]},
                "spec": {"nodeName": f"node-{n:02d}", "containers": [{"name": "app", "envFrom": [
                    {"configMapRef": {"name": "proxy-config"}}]}]},
                "status": {"startTime": "2026-11-01T00:00:00Z", "podIPs": ips, "podIP": ips[0]["ip"]},
            })  # fmt: skip
    return pods


def _write(directory: Path, nodes: int, hours: float, rate: float, per_node: int) -> tuple[int, int]:
    rng = random.Random(46)
    hosts = [f"host-{h:03d}.example.com" for h in range(400)]
    weights = [1 / (h + 1) for h in range(400)]
    start = datetime(2026, 11, 27, tzinfo=timezone.utc)
    lines = size = 0
    per_node_lines = int(hours * 3600 * rate)
    for n in range(nodes):
        out = []
        chosen = rng.choices(hosts, weights, k=per_node_lines)
        step = 3600 * hours / max(per_node_lines, 1)
        for k in range(per_node_lines):
            when = start + timedelta(seconds=k * step)
            stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
            p = rng.randrange(per_node)
            roll = rng.random()
            host, port, method = chosen[k], 443, "CONNECT"
            result, cause, status = "ok", "", 200
            if roll < 0.02:
                result, cause, status = CAUSES[k % len(CAUSES)]
            elif roll < 0.025:
                host, port, method, status = f"svc-{k % 7}.team-{p % 20:02d}.svc.cluster.local", 8080, "GET", 502
            line = {"log": "access", "time": stamp, "client": f"10.244.{n}.{p + 2}", "client_port": 30000 + k % 30000,
                    "method": method, "host": host, "port": port, "upstream": True, "status": status,
                    "result": result, "cause": cause, "bytes_from_client": 500 + k % 4000,
                    "bytes_to_client": 2000 + k % 90000, "duration_ms": k % 3000}  # fmt: skip
            out.append(stamp[:-1] + "123456Z " + json.dumps(line, separators=(",", ":")))
            if k % int(3600 * rate or 1) == 0:
                out.append(f"{stamp} Refused 4 connection(s) at accept: over the client's share (last from "
                           f"10.244.{n}.{p + 2})")  # fmt: skip
        text = "\n".join(out) + "\n"
        (directory / f"node-{n:02d}.log").write_text(text)
        lines += len(out)
        size += len(text)
    (directory / "pods.json").write_text(json.dumps({"items": _pods(nodes, per_node)}))
    return lines, size


class _Api(http.server.BaseHTTPRequestHandler):
    """The API server's answers to `egress`: its lists in one page each, each proxy pod's log streamed (chunked)."""

    work: Path
    nodes: int

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        proxies = [{"metadata": {"name": f"http-proxy-{n:02d}", "namespace": "kube-system"},
                    "spec": {"nodeName": f"node-{n:02d}"}} for n in range(self.nodes)]  # fmt: skip
        if path.startswith("/api/v1/namespaces/kube-system/pods/http-proxy-") and path.endswith("/log"):
            node = "node-" + path.split("/")[-2].rsplit("-", 1)[1]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            with (self.work / "logs" / f"{node}.log").open("rb") as log:
                while chunk := log.read(1 << 16):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
            return
        body: object = {"kind": "Status", "code": 404}
        status = 404
        if path == "/api/v1/namespaces/kube-system/pods":
            status, body = 200, {"items": proxies, "metadata": {}}
        elif path == "/api/v1/pods":
            status, body = 200, {**json.loads((self.work / "pods.json").read_text()), "metadata": {}}
        elif path == "/api/v1/nodes":
            status, body = 200, {"items": [], "metadata": {}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _live(work: Path, nodes: int) -> list[str]:
    """Serve the API on loopback for the child; the arguments that read the cluster through it."""
    handler = type("Api", (_Api,), {"work": work, "nodes": nodes})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
    }))  # fmt: skip
    return ["--kubeconfig", str(kubeconfig)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--rate", type=float, default=1.0, help="connections a second per node (average)")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--live", action="store_true", help="read the logs through a loopback API server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-egress-") as tmp:
        work = Path(tmp)
        logs = work / "logs"
        logs.mkdir()
        t0 = time.perf_counter()
        lines, size = _write(logs, args.nodes, args.hours, args.rate, args.pods_per_node)
        (logs / "pods.json").rename(work / "pods.json")
        (work / "proxy.yaml").write_text(SETTINGS)
        generated = time.perf_counter() - t0
        print(f"generated {lines:,} lines, {size / 2**20:,.0f} MiB, in {generated:.0f} s", file=sys.stderr)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        source = _live(work, args.nodes) if args.live else ["--logs", str(logs), "--pods", str(work / "pods.json")]
        done = subprocess.run(
            [sys.executable, "-m", "proxy_component.cli", "egress", str(work / "proxy.yaml"), *source, "--json"],
            capture_output=True, text=True, cwd=ROOT, check=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        report = json.loads(done.stdout)
    figures = {
        "source": "API" if args.live else "files", "nodes": args.nodes, "hours": args.hours, "rate_per_node": args.rate, "lines": lines,
        "log_mib": round(size / 2**20, 1), "wall_s": round(wall, 1), "lines_per_s": round(lines / wall),
        "peak_rss_mib": round(max(peak, before) / 1024, 1), "connections": report["lines"],
        "workloads": len(report["workloads"]), "misses": len(report["no_proxy_misses"]),
    }  # fmt: skip
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print("| " + " | ".join(figures) + " |")
        print("|" + " --- |" * len(figures))
        print("| " + " | ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in figures.values()) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
