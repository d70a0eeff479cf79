"""`egress` reading a cluster (live/egress.py) through the real `kubernetes` client, against a loopback server that
plays the API server: the proxy's pods by their label, each one's log from the container that holds tinyproxy's
lines (with timestamps), every pod and node; a log it may not read is named, not fatal; exactly the requests of
`egress_accesses`, which `render --format egress-rbac` grants."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from proxy_component.egress import Line, report
from proxy_component.live.access import egress_accesses, egress_rbac_objects
from proxy_component.live.cluster import Cluster
from proxy_component.live.egress import read_egress
from proxy_component.settings import parse_settings
from tests import fake_api
from tests.unit.test_egress import PODS, access

SETTINGS = parse_settings(
    {"cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}, "namespaces": ["shop"]}
)
PROXY_PODS = [
    {"metadata": {"name": "http-proxy-a", "namespace": "kube-system"}, "spec": {"nodeName": "node-a"}},
    {"metadata": {"name": "http-proxy-b", "namespace": "kube-system"}, "spec": {"nodeName": "node-b"}},
]
PROXIES = {"items": PROXY_PODS, "metadata": {}}
NODES = {
    "items": [
        {"metadata": {"name": "node-b"}, "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.11"}]}}
    ],
    "metadata": {},
}


def test_each_proxy_pods_log_joined_to_every_pod_and_node() -> None:
    seen: list[str] = []

    def answer(path: str) -> tuple[Any, ...]:
        seen.append(path)
        routes: dict[str, tuple[int, Any]] = {
            "/api/v1/namespaces/kube-system/pods": (200, PROXIES),
            "/api/v1/pods": (200, {"items": PODS, "metadata": {}}),
            "/api/v1/nodes": (200, NODES),
        }
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-a/log":
            return 200, ("2026-11-28T10:00:00.5Z " + access("10.244.1.5", "github.com") + "\n").encode(), "text/plain"
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-b/log":
            return 403, json.dumps({"kind": "Status", "code": 403, "message": "forbidden"}).encode()
        status, body = routes.get(path, (404, {"kind": "Status", "code": 404}))
        return status, json.dumps(body).encode()

    with fake_api.api_server(answer) as api:
        cluster = Cluster({"core": client.CoreV1Api(api)}, server="https://api.test")
        stream, index, unread = read_egress(SETTINGS, cluster, since_seconds=3600)
        assert len(seen) == 3, "the logs are read as the report consumes them, after the index"
        (line,) = list(stream)
    assert isinstance(line, Line)
    assert (line.node, line.host) == ("node-a", "github.com")
    assert index.client(line.client, line.time).key == ("shop", "Deployment/web")
    assert index.client("192.0.2.11", line.time).key == ("", "Node/node-b")
    assert unread == ["node-b (http-proxy-b: 403)"]
    assert seen == [
        "/api/v1/namespaces/kube-system/pods",
        "/api/v1/pods",
        "/api/v1/nodes",
        "/api/v1/namespaces/kube-system/pods/http-proxy-a/log",
        "/api/v1/namespaces/kube-system/pods/http-proxy-b/log",
    ]


def _busy_log(lines: int, cut: bool = False, every: int = 0, extra: str = "") -> Iterator[bytes]:
    """A proxy's log streamed in 64 KiB chunks: `lines` access lines (about 330 bytes each, kubectl's timestamp
    first), `extra` after every `every`-th; the connection lost before the end when `cut`."""
    chunk: list[bytes] = []
    size = 0
    for n in range(lines):
        text = (
            "2026-11-28T10:00:00.5Z "
            + access(
                f"10.244.1.{n % 200 + 1}",
                f"origin-{n % 50}.example",
                time=f"2026-11-28T10:{n // 6000 % 60:02d}:{n // 100 % 60:02d}.{n % 1000:03d}Z",
            )
            + "\n"
        )
        if every and n % every == 0:
            text += extra + "\n"
        chunk.append(text.encode())
        size += len(text)
        if size >= 1 << 16:
            yield b"".join(chunk)
            chunk, size = [], 0
    if cut:
        raise fake_api.CutShortError
    yield b"".join(chunk)


BUSY = 20_000  # lines: about 6 MB


def test_a_busy_log_is_streamed_into_the_report_never_held_whole() -> None:
    """A node's day at the access log's rate bound is gigabytes: the report holds its aggregates, never the log. Here
    20,000 lines (about 6 MB) through the real client, with this process's peak allocation measured (the log held
    whole would be more than that alone)."""

    chunks = list(_busy_log(BUSY))  # made before the measure

    def answer(path: str) -> tuple[Any, ...]:
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-a/log":
            return 200, iter(chunks), "text/plain"
        if path == "/api/v1/namespaces/kube-system/pods":
            return 200, json.dumps({"items": PROXY_PODS[:1], "metadata": {}}).encode()
        if path == "/api/v1/pods":
            return 200, json.dumps({"items": PODS, "metadata": {}}).encode()
        return 200, json.dumps(NODES).encode()

    with fake_api.api_server(answer) as api:
        cluster = Cluster({"core": client.CoreV1Api(api)}, server="https://api.test")
        tracemalloc.start()
        try:
            stream, index, unread = read_egress(SETTINGS, cluster, since_seconds=None)
            result = report(stream, index)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.lines == BUSY
    assert unread == []
    assert sum(d.requests for by in result.by_workload.values() for d in by.values()) == BUSY
    size = sum(map(len, chunks))
    assert peak < size / 4, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB log"  # 0.5 MiB here


def test_a_log_cut_short_is_named_and_what_came_before_is_counted() -> None:
    def answer(path: str) -> tuple[Any, ...]:
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-a/log":
            return 200, _busy_log(1_000, cut=True), "text/plain"
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-b/log":
            return 200, _busy_log(10), "text/plain"
        routes = {"/api/v1/namespaces/kube-system/pods": PROXIES, "/api/v1/pods": {"items": PODS, "metadata": {}}}
        return 200, json.dumps(routes.get(path, NODES)).encode()

    with fake_api.api_server(answer) as api:
        cluster = Cluster({"core": client.CoreV1Api(api)}, server="https://api.test")
        stream, _, unread = read_egress(SETTINGS, cluster, since_seconds=60)
        events = list(stream)
    # The first 64 KiB chunks of node-a's log arrived (whole lines only), then all of node-b's.
    read_a = sum(1 for e in events if isinstance(e, Line) and e.node == "node-a")
    assert 0 < read_a < 1_000
    assert sum(1 for e in events if isinstance(e, Line) and e.node == "node-b") == 10
    assert unread == [f"node-a (http-proxy-a: the read was cut short after {read_a} events)"]


def test_the_role_grants_exactly_the_requests() -> None:
    accesses = egress_accesses(SETTINGS)
    rules = {
        (o["kind"], o["metadata"].get("namespace")): o["rules"]
        for o in egress_rbac_objects(SETTINGS)
        if o["kind"] in ("Role", "ClusterRole")
    }
    assert rules == {
        ("ClusterRole", None): [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list"]}],
        ("Role", "kube-system"): [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
    }
    assert len(accesses) == 4
