"""`check` reading each proxy pod's log of the last LOG_WINDOW seconds (live/check.py `_proxy_logs`) through the
real `kubernetes` client, against a loopback server that plays the API server: the log is streamed and only the
lines `check` judges are kept (the watcher's, the upstream failures), however many access lines the window holds."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from proxy_component.live.check import LOG_WINDOW, _proxy_logs, loaded_config, upstream_failures
from proxy_component.live.cluster import Cluster
from proxy_component.settings import parse_settings
from tests import fake_api
from tests.unit.test_egress import access

SETTINGS = parse_settings(
    {
        "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "namespaces": ["shop"],
        "proxy": {"upstream": {"url": "http://proxy.corp.example:3128"}},
    }
)
WATCHER = "proxy-component: running config generation 0123456789abcdef (files ..2026_11_28_10_00_00.1)"
UNREACHABLE = "WARNING   Nov 28 10:05:00.000 [7]: Could not connect to upstream proxy."


def _window(lines: int) -> Iterator[bytes]:
    """A proxy container's window at the access log's rate bound: access lines, tinyproxy's notices, one watcher
    line near the start and an upstream failure every 10,000 lines; in chunks of about 64 KiB."""
    chunk: list[bytes] = []
    size = 0
    for n in range(lines):
        text = access(f"10.244.1.{n % 200 + 1}", f"origin-{n % 50}.example", upstream=True) + "\n"
        if n == 5:
            text += WATCHER + "\n"
        if n % 10_000 == 9_999:
            text += UNREACHABLE + "\n"
        if n % 1_000 == 0:
            text += "NOTICE    Nov 28 10:00:00.000 [7]: Request for the stathost.\n"
        chunk.append(text.encode())
        size += len(text)
        if size >= 1 << 16:
            yield b"".join(chunk)
            chunk, size = [], 0
    yield b"".join(chunk)


def test_a_full_window_is_streamed_and_only_the_judged_lines_are_kept() -> None:
    """66,000 access lines: LOG_WINDOW seconds at the default bound of 100 a second (about 18 MB here)."""
    lines = LOG_WINDOW * 100
    chunks = list(_window(lines))  # made before the measure
    asked: list[str] = []

    def answer(path: str) -> tuple[Any, ...]:
        asked.append(path)
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-a/log":
            return 200, iter(chunks), "text/plain"
        return 404, json.dumps({"kind": "Status", "code": 404}).encode()

    with fake_api.api_server(answer) as api:
        cluster = Cluster({"core": client.CoreV1Api(api)}, server="https://api.test")
        tracemalloc.start()
        try:
            logs = _proxy_logs(SETTINGS, cluster, {"n1": "http-proxy-a", "n2": "http-proxy-gone"})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    # The pod whose log is gone (404) is not judged; the other's judged lines alone are kept.
    assert list(logs) == ["n1"]
    tinyproxy, upstream = logs["n1"]
    assert tinyproxy.splitlines() == [WATCHER] + [UNREACHABLE] * (lines // 10_000)
    loaded = loaded_config(tinyproxy)
    assert loaded is not None
    assert loaded.generation == "0123456789abcdef"
    assert upstream_failures(upstream) == (lines // 10_000, 0, "10:05:00")
    size = sum(map(len, chunks))
    assert size > 16_000_000
    assert peak < size / 20, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB window"
    assert asked == [
        "/api/v1/namespaces/kube-system/pods/http-proxy-a/log",
        "/api/v1/namespaces/kube-system/pods/http-proxy-gone/log",
    ]
