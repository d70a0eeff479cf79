"""The candidate proxy engines on the image lane's adversarial suite: the image's tinyproxy, Debian's Squid and a
small Go proxy on net/http (bench/engines/goproxy), each run by the suite's own machinery (tests/image/
test_adversarial.py: its network namespaces, the rendered kernel table, the 128Mi memory cgroup, its asyncio
driver, the neighbour pod and the kubelet's probe asking all along) with a config as close as each allows to the
rendered settings (a share of 16 per client, maxClients 512, the deadlines, Allow of the pod range).

    sudo .venv/bin/python bench/bench_engines.py [--engines tinyproxy,squid,go] [--classes ...] [--json]

Markdown tables on stdout, progress on stderr. Needs root, `scripts/image amd64` (cached), `apt-get install squid`
and Go. Not a test: pytest collects only tests/ (pyproject's testpaths)."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proxy_component.settings import Settings, loopback_reserve  # noqa: E402
from tests.image import test_adversarial as adv  # noqa: E402
from tests.image.test_build import Built, _scripts_image, _unpack  # noqa: E402

GO_SOURCES = ROOT / "bench/engines/goproxy"
UID = 61888  # the image's user: the rendered egress rules (`meta skuid 61888`) apply to every engine alike
FRAMING_PORT = 8083
PODS = adv.POD_IPS[: adv.MAX_PODS]


def log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


# --- the engines --------------------------------------------------------------------------------------------------


@dataclass
class Engine:
    name: str
    probe: str  # the kubelet's probe request (over loopback, answered 200)
    command: Callable[[Settings, Path], list[str] | None]  # None: the suite's own (the image's tinyproxy)


def _tinyproxy(settings: Settings, work: Path) -> list[str] | None:
    return None


SQUID_CONF = """# bench/bench_engines.py: Squid as close as it gets to the rendered tinyproxy.conf
http_port 8888
workers 1
max_filedescriptors {fds}
pid_filename none
cache_log {work}/cache.log
access_log none
cache_store_log none
coredump_dir {work}
cache deny all
cache_mem 8 MB
pinger_enable off
visible_hostname proxy-component.invalid
dns_nameservers 127.0.0.1
via off
forwarded_for delete
request_header_max_size 64 KB
request_start_timeout {head} seconds
request_timeout {head} seconds
connect_timeout {connect} seconds
read_timeout {response} seconds
client_idle_pconn_timeout {idle} seconds
dns_timeout {dns} seconds
shutdown_lifetime 1 seconds
acl pods src {pods}
acl over_share maxconn {share}
acl SSL_ports port 443
acl CONNECT method CONNECT
http_access deny CONNECT !SSL_ports
http_access allow localhost manager
http_access deny manager
http_access deny over_share
http_access allow pods
http_access allow localhost
http_access deny all
"""


def _squid(settings: Settings, work: Path) -> list[str]:
    d = settings.deployment
    pods = " ".join(s for s in settings.allowed_sources() if s not in ("127.0.0.1", "::1"))
    conf = work / "squid.conf"
    conf.write_text(SQUID_CONF.format(
        fds=2 * d.max_clients + 64, work=work, head=d.deadlines.request_head_seconds,
        connect=d.deadlines.connect_seconds, response=d.deadlines.response_head_seconds,
        idle=d.deadlines.idle_seconds, dns=d.deadlines.dns_seconds, pods=pods,
        share=d.firewall.max_connections_per_client,
    ))  # fmt: skip
    return ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "squid", "-N", "-f", str(conf)]


def go_binary() -> Path:
    """`go build` of bench/engines/goproxy into a cache directory named by the sources' hash."""
    digest = hashlib.sha256()
    for f in sorted(GO_SOURCES.iterdir()):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    out = Path.home() / f".cache/proxy-component/bench-goproxy-{digest.hexdigest()[:16]}/goproxy"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-trimpath", "-o", str(out), "."], cwd=GO_SOURCES, check=True,
                       env={**os.environ, "CGO_ENABLED": "0"})  # fmt: skip
    return out


def _go(settings: Settings, work: Path) -> list[str]:
    d = settings.deployment
    binary = work / "goproxy"
    shutil.copy(go_binary(), binary)  # readable by the unprivileged user (the cache is under root's home)
    return ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", str(binary), "-listen", ":8888",
            "-share", str(d.firewall.max_connections_per_client), "-max-clients", str(d.max_clients),
            "-loopback-reserve", str(loopback_reserve(d.max_clients)),
            "-allow", ",".join(s if "/" in s else f"{s}/{128 if ':' in s else 32}" for s in settings.allowed_sources()),
            "-request-head", f"{d.deadlines.request_head_seconds}s", "-connect", f"{d.deadlines.connect_seconds}s",
            "-response-head", f"{d.deadlines.response_head_seconds}s", "-idle", f"{d.deadlines.idle_seconds}s",
            "-max-header-bytes", str(64 * 1024)]  # fmt: skip


ENGINES = {
    "tinyproxy": Engine("tinyproxy", adv.PROBE, _tinyproxy),
    "squid": Engine(
        "squid",
        "GET http://proxy-component.invalid:8888/squid-internal-mgr/info HTTP/1.1\r\n"
        "Host: proxy-component.invalid:8888\r\n"
        "Connection: close\r\n\r\n",
        _squid,
    ),
    "go": Engine("go", "GET / HTTP/1.1\r\nHost: proxy-component.invalid\r\nConnection: close\r\n\r\n", _go),
}


# --- measuring ------------------------------------------------------------------------------------------------------


def established(p: adv.Proxy, port: str) -> int:
    """Established TCP connections in the proxy's namespace matching an ss filter (`sport = :8888`: the clients')."""
    done = p.exec("ss", "-Htn", "state", "established", f"( {port} )")
    return len([line for line in done.stdout.splitlines() if line.strip()])


def usage(p: adv.Proxy) -> int:
    return int(p._memory("memory.usage_in_bytes", "memory.current"))


def threads(p: adv.Proxy) -> int:
    """Threads of every process in the cgroup (Squid's helpers, if any, included)."""
    total = 0
    for pid in (p.cgroup / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError, AttributeError):
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
    return total


def processes(p: adv.Proxy) -> int:
    return len((p.cgroup / "cgroup.procs").read_text().split())


def goroutines(p: adv.Proxy, engine: str) -> int | None:
    if engine != "go":
        return None
    fetch = adv.FETCH_STATS.replace(
        "proxy-component.invalid\\r\\n", "proxy-component.invalid\\r\\nConnection: close\\r\\n"
    )
    found = re.search(r"Goroutines: (\d+)", p.exec(sys.executable, "-c", fetch, timeout=30).stdout)
    return int(found.group(1)) if found else None


def steady(value: Callable[[], int], timeout: float = 10) -> int:
    """`value` once three readings 0.3 s apart are within 1 % (or `timeout`)."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = [*seen[-2:], value()]
        if len(seen) == 3 and max(seen) - min(seen) <= 0.01 * max(seen):
            break
        time.sleep(0.3)
    return seen[-1]


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def tally(records: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[key(r)] = out.get(key(r), 0) + 1
    return out


def answer(r: dict[str, Any]) -> str:
    """A connection's end as the client saw it: the status line's code, else how it ended."""
    status = r.get("status", "")
    code = re.match(r"HTTP/1\.[01] (\d{3})", status)
    return f"{r['state']} {code.group(1)}" if code else r["state"]


@dataclass
class Row:
    engine: str
    case: str
    figures: dict[str, Any]

    def cell(self) -> str:
        f = self.figures
        parts = [str(f["outcome"])]
        if "served" in f:
            parts.append(f["served"])
        if "peak" in f:
            parts.append(f"peak {mib(f['peak'])}")
        if f.get("alive") is False:
            parts.append("**DIED**")
        if f.get("oom_kills"):
            parts.append(f"OOM kills {f['oom_kills']}")
        return "; ".join(parts)


def _served(s: adv.Scene) -> dict[str, Any]:
    served = s.finish()
    return {
        "served": ("served" if served.all_served else "NOT served")
        + f" (neighbour {served.neighbour_ok} ok/{len(served.neighbour_fails)} failed, "
        f"probe {served.probe_ok} ok/{len(served.probe_fails)} failed)",
        "neighbour_ok": served.neighbour_ok, "neighbour_failed": len(served.neighbour_fails),
        "probe_ok": served.probe_ok, "probe_failed": len(served.probe_fails),
        "fails": sorted({str(st) for _, st in served.neighbour_fails + served.probe_fails})[:3],
    }  # fmt: skip


def _health(s: adv.Scene) -> dict[str, Any]:
    return {"peak": s.p.memory_peak(), "alive": s.p.alive(), "oom_kills": s.p.oom_kills(),
            "limit_hits": s.p.memory_limit_hits(), "threads": threads(s.p), "processes": processes(s.p)}  # fmt: skip


# --- the classes ----------------------------------------------------------------------------------------------------


@dataclass
class Bench:
    image: Built
    engine: Engine
    work: Path

    @contextlib.contextmanager
    def scene(self, settings: Settings = adv.SETTINGS, neighbour_every: float = 0.1) -> Iterator[adv.Scene]:
        work = Path(tempfile.mkdtemp(prefix=f"{self.engine.name}-", dir=self.work))
        work.chmod(0o755)
        os.chown(work, UID, UID)
        command = self.engine.command(settings, work)
        with adv.scene(self.image, "image", settings, neighbour_every, command, self.engine.probe) as s:
            yield s

    def silent(self) -> dict[str, Any]:
        """20 pods x 16 GETs to the origin that accepts and never answers, held."""
        data = adv._request(adv.ORIGIN_IP, adv.SILENT_PORT).encode().hex()
        total = len(PODS) * adv.SHARE
        with self.scene() as s:
            attack = s.attack({"waves": [{"at": 0, "srcs": PODS, "count": adv.SHARE, "kind": "hold", "data": data}]})
            attack.wait(lambda snap: adv._in_flight(snap) == 0 and sum(adv._states(snap).values()) == total, 20)
            upstream = adv._settled(lambda: established(s.p, f"dport = :{adv.SILENT_PORT}"))
            figures: dict[str, Any] = {"held_upstream": upstream, "threads_at_load": threads(s.p),
                       "goroutines": goroutines(s.p, self.engine.name)}  # fmt: skip
            figures |= _served(s) | _health(s)
            records = attack.stop()["records"]
        states = tally(records, answer)
        figures |= {"clients": states, "outcome": f"{upstream} waiting on the origin; clients {states}"}
        return figures

    def reset(self) -> dict[str, Any]:
        """20 pods x 16, each resetting its socket 0.4 s after a GET to the silent origin; twice, a second apart."""
        data = adv._request(adv.ORIGIN_IP, adv.SILENT_PORT).encode().hex()
        waves = [{"at": at, "srcs": PODS, "count": adv.SHARE, "kind": "reset", "data": data, "after": 0.4}
                 for at in (0.0, 1.0)]  # fmt: skip
        with self.scene() as s:
            attack = s.attack({"waves": waves})
            attack.wait(lambda snap: snap["t"] > 1.2 and adv._in_flight(snap) == 0 and
                        not adv._states(snap).get("open"), 30)  # fmt: skip
            upstream = adv._settled(lambda: established(s.p, f"dport = :{adv.SILENT_PORT}"))
            figures = {"held_upstream": upstream, "threads_at_load": threads(s.p)} | _served(s) | _health(s)
            records = attack.stop()["records"]
        states = tally(records, answer)
        figures |= {"clients": states, "outcome": f"{upstream} still waiting on the origin; clients {states}"}
        return figures

    def drip(self) -> dict[str, Any]:
        """20 pods x 16 drip a request line a byte every 0.1 s; the request head's deadline is 3 s (as the suite)."""
        deadline = 3
        settings = adv._settings(deadlines={"requestHeadSeconds": deadline})
        data = f"GET http://{adv.ORIGIN_IP}:{adv.NORMAL_PORT}/".encode() + b"a" * 100_000
        total = len(PODS) * adv.SHARE
        ended = ("closed", "reset")
        with self.scene(settings) as s:
            attack = s.attack({"waves": [{"at": 0, "srcs": PODS, "count": adv.SHARE, "kind": "drip",
                                          "data": data.hex(), "every": 0.1}]})  # fmt: skip
            attack.wait(lambda snap: adv._in_flight(snap) == 0, 20)
            attack.wait(lambda snap: sum(adv._states(snap).get(k, 0) for k in ended) >= total, deadline + 12)
            figures = {"threads_at_load": threads(s.p)} | _served(s) | _health(s)
            records = attack.stop()["records"]
        lasted = sorted(r["t2"] - r["t1"] for r in records if r["state"] in ended and "t1" in r)
        states = tally(records, answer)
        span = f" {lasted[0]:.1f}-{lasted[-1]:.1f} s after accept" if lasted else ""
        figures |= {"clients": states, "ended": len(lasted), "lasted": [lasted[0], lasted[-1]] if lasted else [],
                    "outcome": f"{len(lasted)} of {total} ended{span} (deadline {deadline} s); clients {states}"}  # fmt: skip
        return figures

    def long_line(self) -> dict[str, Any]:
        """20 pods x 16 send a request line of just under 16 KiB and never end it."""
        head = f"GET http://{adv.ORIGIN_IP}:{adv.NORMAL_PORT}/".encode()
        data = head + b"a" * (16 * 1024 - 2 - len(head))
        total = len(PODS) * adv.SHARE
        with self.scene() as s:
            attack = s.attack({"waves": [{"at": 0, "srcs": PODS, "count": adv.SHARE, "kind": "hold",
                                          "data": data.hex()}]})  # fmt: skip
            attack.wait(lambda snap: adv._in_flight(snap) == 0 and sum(adv._states(snap).values()) == total, 20)
            time.sleep(1)
            held = adv._settled(lambda: established(s.p, "sport = :8888"))
            figures = {"held": held, "threads_at_load": threads(s.p)} | _served(s) | _health(s)
            records = attack.stop()["records"]
        states = tally(records, answer)
        figures |= {"clients": states, "outcome": f"{held} held; clients {states}"}
        return figures

    def long_over(self) -> dict[str, Any]:
        """20 pods x 16 send a complete GET whose request line is over 16 KiB (17,000-byte path)."""
        head = f"GET http://{adv.ORIGIN_IP}:{adv.NORMAL_PORT}/".encode()
        data = head + b"a" * 17_000 + f" HTTP/1.1\r\nHost: {adv.ORIGIN_IP}:{adv.NORMAL_PORT}\r\n\r\n".encode()
        total = len(PODS) * adv.SHARE
        with self.scene() as s:
            attack = s.attack({"waves": [{"at": 0, "srcs": PODS, "count": adv.SHARE, "kind": "hold",
                                          "data": data.hex()}]})  # fmt: skip
            attack.wait(lambda snap: sum(adv._states(snap).get(k, 0) for k in ("closed", "reset")) == total, 30)
            figures = _served(s) | _health(s)
            records = attack.stop()["records"]
        states = tally(records, lambda r: r.get("status", r["state"]))
        figures |= {"clients": states, "outcome": f"answers {states}"}
        return figures

    def share(self) -> dict[str, Any]:
        """20 pods x 40 idle connections at once (nothing sent): each pod's share is 16."""
        per_pod, total = 40, len(PODS) * 40
        with self.scene() as s:
            attack = s.attack({"waves": [{"at": 0, "srcs": PODS, "count": per_pod, "kind": "hold"}]})
            attack.wait(lambda snap: adv._in_flight(snap) == 0 and sum(adv._states(snap).values()) == total, 20)
            time.sleep(1)
            held = adv._settled(lambda: established(s.p, "sport = :8888"))
            figures = {"held": held, "threads_at_load": threads(s.p)} | _served(s) | _health(s)
            records = attack.stop()["records"]
        by_pod = adv._held_by_pod(records, ("open",))
        states = tally(records, answer)
        lo, hi = min(by_pod.values(), default=0), max(by_pod.values(), default=0)
        figures |= {"clients": states, "per_pod": [lo, hi],
                    "outcome": f"per pod held {lo}-{hi}, proxy side {held}; clients {states}"}  # fmt: skip
        return figures

    def not_in_allow(self) -> dict[str, Any]:
        """150 idle connections from 10.98.0.5, outside every range of Allow."""
        count = 150
        with self.scene() as s:
            attack = s.attack({"waves": [{"at": 0, "srcs": [adv.OUTSIDE_IP], "count": count, "kind": "hold"}]})
            attack.wait(lambda snap: adv._in_flight(snap) == 0 and sum(adv._states(snap).values()) == count, 20)
            time.sleep(1)
            held = adv._settled(lambda: established(s.p, f"sport = :8888 and dst {adv.OUTSIDE_IP}"))
            figures = {"held": held} | _served(s) | _health(s)
            records = attack.stop()["records"]
        states = tally(records, answer)
        figures |= {"clients": states, "outcome": f"{held} held by the proxy; clients {states}"}
        return figures

    def mix(self) -> dict[str, Any]:
        """The suite's mix for 15 s: 20 pods at their share, a quarter each silent, reset, drip and long line,
        reopened half a second after each ends; the neighbour asks 20 times a second (requestHeadSeconds 5)."""
        settings = adv._settings(deadlines={"requestHeadSeconds": 5})
        quarter = adv.SHARE // 4
        head = f"GET http://{adv.ORIGIN_IP}:{adv.NORMAL_PORT}/".encode()
        silent = adv._request(adv.ORIGIN_IP, adv.SILENT_PORT).encode().hex()
        kinds: list[dict[str, Any]] = [
            {"name": "silent", "kind": "hold", "data": silent},
            {"name": "reset", "kind": "reset", "data": silent, "after": 0.4},
            {"name": "drip", "kind": "drip", "data": (head + b"a" * 10_000).hex(), "every": 0.1},
            {"name": "long", "kind": "hold", "data": (head + b"a" * (16 * 1024 - 2 - len(head))).hex()},
        ]
        waves = [{"at": 0, "srcs": PODS, "count": quarter, "respawn": 0.5, **k} for k in kinds]
        with self.scene(settings, neighbour_every=0.05) as s:
            start = s.neighbour.ok("neighbour") + s.neighbour.latest["loops"]["neighbour"]["fail"]
            attack = s.attack({"waves": waves})
            most = {"threads": 0, "upstream": 0}

            def over() -> bool:
                most["threads"] = max(most["threads"], threads(s.p))
                most["upstream"] = max(most["upstream"], established(s.p, f"dport = :{adv.SILENT_PORT}"))
                return bool(attack.latest["t"] >= adv.MIX_SECONDS)

            adv._wait(over, adv.MIX_SECONDS + 15, every=0.2)
            loops = s.neighbour.latest["loops"]["neighbour"]
            asked = loops["ok"] + loops["fail"] - start
            figures = {"most_threads": most["threads"], "most_upstream": most["upstream"], "asked": asked}
            figures |= _served(s) | _health(s)
            attack.stop()
        figures["outcome"] = (f"neighbour asked {asked} times in {adv.MIX_SECONDS} s; at most {most['threads']} "
                              f"threads, {most['upstream']} waiting on the silent origin")  # fmt: skip
        return figures

    def memory(self) -> dict[str, Any]:
        """0, 200 and 400 connections held on the silent origin (25 pods x 8, twice): the cgroup's usage at each
        once steady, and the slope per connection."""
        data = adv._request(adv.ORIGIN_IP, adv.SILENT_PORT).encode().hex()
        pods = adv.POD_IPS[:25]
        points: dict[int, int] = {}
        extra: dict[str, Any] = {}
        with self.scene() as s:
            time.sleep(1)
            points[0] = steady(lambda: usage(s.p))
            for held in (200, 400):
                s.attack({"waves": [{"at": 0, "srcs": pods, "count": 8, "kind": "hold", "data": data}]})
                adv._wait(lambda h=held: established(s.p, f"dport = :{adv.SILENT_PORT}") >= h, 20)  # type: ignore[misc]
                time.sleep(1)
                points[held] = steady(lambda: usage(s.p))
            extra = {"upstream": established(s.p, f"dport = :{adv.SILENT_PORT}"), "threads_at_load": threads(s.p),
                     "goroutines": goroutines(s.p, self.engine.name)}  # fmt: skip
            extra |= _served(s) | _health(s)
        slope = (points[400] - points[0]) / 400
        slope_hi = (points[400] - points[200]) / 200
        extra |= {"usage": points, "per_connection": slope, "per_connection_200_400": slope_hi,
                  "outcome": f"{mib(points[0])} / {mib(points[200])} / {mib(points[400])}; "
                  f"{slope / 1024:.0f} KiB a connection ({slope_hi / 1024:.0f} KiB from 200 to 400)"}  # fmt: skip
        return extra

    def framing(self) -> dict[str, Any]:
        """Four ambiguous framings sent to a recording origin: what the client got and what the origin got."""
        with adv.proxy(self.image, "image", adv.SETTINGS, self._command()) as p:
            origin = subprocess.Popen(["ip", "netns", "exec", p.peer, sys.executable, "-c", RECORDER],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
            try:
                assert origin.stdout is not None
                assert origin.stdout.readline().strip() == "ready"
                sent = subprocess.run(["ip", "netns", "exec", p.peer, sys.executable, "-c", FRAMING_CLIENT],
                                      capture_output=True, text=True, timeout=120)  # fmt: skip
                assert sent.returncode == 0, sent.stderr
                clients = json.loads(sent.stdout)
            finally:
                assert origin.stdin is not None
                origin.stdin.close()
                received = json.loads(origin.stdout.read() or "{}") if origin.stdout else {}
                origin.wait(timeout=30)
        cases = {}
        for i, (case, status) in enumerate(clients.items()):
            got = received.get(f"case{i}")
            if got is None:
                origin_saw = "nothing"
            else:
                lines = [ln for ln in got.split("\r\n") if re.match(r"(?i)(content-length|transfer-encoding|x-folded"
                                                                      r"|\s)", ln)]  # fmt: skip
                origin_saw = " / ".join(lines) or "no framing header"
            cases[case] = {"client": status, "origin": origin_saw}
        return {"cases": cases, "outcome": "; ".join(f"{k}: {v['client']}" for k, v in cases.items())}

    def _command(self) -> list[str] | None:
        work = Path(tempfile.mkdtemp(prefix=f"{self.engine.name}-", dir=self.work))
        work.chmod(0o755)
        os.chown(work, UID, UID)
        return self.engine.command(adv.SETTINGS, work)


# The framing cases: each a POST whose body is "hello" by one reading; the origin's path names the case.
FRAMING = {
    "TE+CL": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "TE: chunked,": "Transfer-Encoding: chunked,\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "obs-fold": "X-Folded: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
    "two Content-Lengths": "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
}

RECORDER = f"""
import json, socket, sys, threading
srv = socket.create_server(("{adv.ORIGIN_IP}", {FRAMING_PORT}), backlog=64)
got = {{}}
def serve(c):
    c.settimeout(0.7); data = b""
    try:
        while chunk := c.recv(65536):
            data += chunk
    except OSError:
        pass
    text = data.decode("latin-1")
    path = text.split(" ", 2)[1] if text.count(" ") >= 2 else "?"
    got[path.rsplit("/", 1)[-1]] = got.get(path.rsplit("/", 1)[-1], "") + text
    try:
        c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
    except OSError:
        pass
    c.close()
def accept():
    while True:
        threading.Thread(target=serve, args=(srv.accept()[0],), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
print(json.dumps(got), flush=True)
"""

FRAMING_CLIENT = f"""
import json, socket
cases = {json.dumps(list(FRAMING.items()))}
out = {{}}
for i, (name, rest) in enumerate(cases):
    c = socket.create_connection(("{adv.PROXY_IP}", {adv.PORT}), timeout=5, source_address=("{adv.POD_IPS[-1]}", 0))
    head = "POST http://{adv.ORIGIN_IP}:{FRAMING_PORT}/case%d HTTP/1.1\\r\\nHost: {adv.ORIGIN_IP}:{FRAMING_PORT}\\r\\n" % i
    c.sendall((head + "Connection: close\\r\\n" + rest).encode())
    data = b""
    try:
        while chunk := c.recv(65536):
            data += chunk
    except OSError as exc:
        data = data or type(exc).__name__.encode()
    out[name] = data.split(b"\\r\\n", 1)[0].decode("latin-1")[:60] or "closed, no answer"
    c.close()
print(json.dumps(out))
"""

CLASSES: dict[str, str] = {
    "silent": "1. 20 pods x 16 GETs held by the silent origin",
    "reset": "2. 20 pods x 16 x 2 rounds, each reset by its client 0.4 s after a GET to the silent origin",
    "drip": "3. 20 pods x 16 drip a request line a byte every 0.1 s (request-head deadline 3 s)",
    "long_line": "4. 20 pods x 16, a request line just under 16 KiB never ended",
    "long_over": "5. 20 pods x 16, a request line over 16 KiB",
    "share": "6. 20 pods x 40 idle connections at once (share 16)",
    "not_in_allow": "7. 150 idle connections from 10.98.0.5 (outside Allow)",
    "mix": "8. the mix for 15 s (20 pods at their share; silent, reset, drip, long line), neighbour 20/s",
    "memory": "9. memory at 0 / 200 / 400 connections held on the silent origin",
    "framing": "10. framing: what the client got",
}


# What each engine has natively, what it would need; from the engines' documentation and sources, not measured here.
PROPERTIES: list[tuple[str, dict[str, str]]] = [
    (
        "per-client count at accept",
        {
            "tinyproxy": "patched (MaxConnectionsPerClient, LoopbackReserve: a scan of the live threads at accept)",
            "squid": "no: `acl maxconn` is an http_access check, made once a request's head is parsed; an idle or "
            "unfinished connection is never counted against it (a patch to ConnStateData, or the kernel)",
            "go": "written here (a net.Listener that counts per address and resets beyond the share): ~60 lines",
        },
    ),
    (
        "deadline per phase",
        {
            "tinyproxy": "patched (RequestHeadTimeout, ConnectTimeout, ResponseHeadTimeout, Timeout)",
            "squid": "native: request_start_timeout/request_timeout, connect_timeout, read_timeout (between reads, not "
            "the response head as such), client_idle_pconn_timeout",
            "go": "native: ReadHeaderTimeout, Dialer.Timeout, Transport.ResponseHeaderTimeout, IdleTimeout",
        },
    ),
    (
        "bounded memory per connection",
        {
            "tinyproxy": "patched (16 KiB request line, 64 KiB headers, buffers freed after the head); a thread each",
            "squid": "native buffers (request_header_max_size, client_request_buffer_max_size), one process; no "
            "maxClients (max_filedescriptors only)",
            "go": "native (MaxHeaderBytes; goroutine stacks grow) but the runtime's GC decides when memory is returned",
        },
    ),
    (
        "strict framing",
        {
            "tinyproxy": "patched (src/framing.c, the framing suite's 3,203 requests)",
            "squid": "native (its own parser; see the framing rows)",
            "go": "native (net/http's parser; see the framing rows); the request is re-serialized upstream",
        },
    ),
    (
        "reload without dropping connections",
        {
            "tinyproxy": "patched (SIGHUP, config reference-counted; the reload storm suite)",
            "squid": "native (`squid -k reconfigure`; it closes and reopens listening ports)",
            "go": "would need code (re-exec with the listener's fd, or config swap behind an atomic pointer)",
        },
    ),
    (
        "the exporter's metrics",
        {
            "tinyproxy": "native stats page + the patched refusal log lines the exporter reads",
            "squid": "cache manager (`/squid-internal-mgr/info`, `counters`): a new exporter parser; no refusal-at-"
            "accept counts (it refuses nothing at accept)",
            "go": "its own stats page here; the exporter's format would be written to match",
        },
    ),
    (
        "security support",
        {
            "tinyproxy": "built from source by the project (1.11.3-git + 23 patches); the project tracks upstream and "
            "CVEs itself",
            "squid": "Debian's package, 5.7-2+deb12u6 from bookworm-security (2026-07-20, 4 CVEs; its changelog "
            "lists earlier bookworm-security uploads, deb12u3 and deb12u4, too)",
            "go": "Go's standard library (security releases every month or so); the ~300 lines are the project's own",
        },
    ),
]


def run(engines: list[str], classes: list[str]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-engines-"))
    work.chmod(0o755)
    results: dict[str, Any] = {"engines": {}, "machine": machine()}
    try:
        log("unpacking the image (scripts/image amd64, cached)")
        image = _unpack(_scripts_image("amd64"), work / "image")
        for directory in ("etc/tinyproxy", "probe"):
            (image.root / directory).mkdir(exist_ok=True)
        (image.root / "etc/resolv.conf").write_text("nameserver 127.0.0.53\n")
        results["image_digest"] = image.digest
        for name in engines:
            bench = Bench(image, ENGINES[name], work)
            out = results["engines"][name] = {}
            for case in classes:
                log(f"{name}: {case}")
                started = time.monotonic()
                try:
                    out[case] = getattr(bench, case)()
                except Exception as exc:  # a class that cannot run is reported, the rest go on
                    out[case] = {"outcome": f"could not run: {type(exc).__name__}: {str(exc)[:300]}", "error": True}
                out[case]["seconds"] = round(time.monotonic() - started, 1)
                log(f"  {Row(name, case, out[case]).cell()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def machine() -> dict[str, Any]:
    squid = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "squid"], capture_output=True, text=True)
    go = subprocess.run(["go", "version"], capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "kernel": os.uname().release, "cgroup": "v2" if adv.CGROUP_V2 else "v1",
            "squid": squid.stdout.strip(), "go": go.stdout.strip()}  # fmt: skip


def markdown(results: dict[str, Any]) -> str:
    engines = list(results["engines"])
    m = results["machine"]
    out = [f"Measured {m['date']}, {m['cpus']} CPUs, kernel {m['kernel']}, cgroup {m['cgroup']}; image "
           f"{results.get('image_digest', '?')[:19]}, squid {m['squid']}, {m['go']}.", ""]  # fmt: skip
    out += ["| class | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
    for case, title in CLASSES.items():
        if not any(case in results["engines"][e] for e in engines):
            continue
        cells = [Row(e, case, results["engines"][e].get(case, {"outcome": "-"})).cell() for e in engines]
        out.append(f"| {title} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    if any("memory" in results["engines"][e] for e in engines):
        out += ["", "| engine | 0 | 200 | 400 | per connection | threads at 400 | processes | goroutines at 400 |",
                "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for e in engines:
            f = results["engines"][e].get("memory", {})
            if "usage" not in f:
                continue
            u = {int(k): v for k, v in f["usage"].items()}
            out.append(f"| {e} | {mib(u[0])} | {mib(u[200])} | {mib(u[400])} | {f['per_connection'] / 1024:.0f} KiB "
                       f"| {f['threads_at_load']} | {f['processes']} | {f.get('goroutines') or '-'} |")  # fmt: skip
    if any("framing" in results["engines"][e] for e in engines):
        out += ["", "| framing case | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
        for case in FRAMING:
            cells = []
            for e in engines:
                c = results["engines"][e].get("framing", {}).get("cases", {}).get(case)
                cells.append(f"client: {c['client']}; origin got: {c['origin']}" if c else "-")
            out.append(f"| {case!r} | " + " | ".join(x.replace("|", "/") for x in cells) + " |")
    out += ["", "| property | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
    for prop, by in PROPERTIES:
        out.append(f"| {prop} | " + " | ".join(by.get(e, "-") for e in engines) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default="tinyproxy,squid,go")
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the tables")
    parser.add_argument("--from-json", type=Path, help="print the tables of a saved --json run instead of running")
    args = parser.parse_args()
    if args.from_json:
        print(markdown(json.loads(args.from_json.read_text())))
        return
    if os.geteuid() != 0:
        raise SystemExit("run as root: network namespaces, a memory cgroup, nft")
    engines = [e for e in args.engines.split(",") if e]
    classes = [c for c in args.classes.split(",") if c]
    unknown = [e for e in engines if e not in ENGINES] + [c for c in classes if c not in CLASSES]
    if unknown:
        raise SystemExit(f"unknown: {unknown}")
    results = run(engines, classes)
    print(json.dumps(results, indent=1, default=str) if args.json else markdown(results))


if __name__ == "__main__":
    main()
