"""The image's tinyproxy and its metrics exporter, as the DaemonSet runs them: the rendered tinyproxy.conf (LogFile
included), the log-file init container's command, the metrics container's command and UIDs, in a network namespace
of the test's own (origin, upstream address and clients on its loopback, nothing outside it).

Each kind of request is counted exactly, the endpoint and the exporter's stdout hold no credential and no probe line,
a reload and the generation are seen, and tinyproxy keeps serving (and logging) while the exporter is killed. Every wait
is on a condition with a deadline; no sleep decides a result.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy_component.dataplane.config import config_object, tinyproxy_conf, tinyproxy_filter
from proxy_component.dataplane.metrics import (
    COUNTERS_FILE,
    GENERATION_KEY,
    LOG_DIR,
    LOG_FILE,
    firewall_counters_container,
    log_file_container,
    metrics_container,
)
from proxy_component.settings import Settings, parse_settings
from tests.image.test_build import Built, _scripts_image, _unpack

PASSWORD = "m3trics-Secret-pw"
ORIGIN, UPSTREAM, ELSEWHERE, OUTSIDER = "10.99.5.1", "10.99.5.2", "10.99.7.7", "127.0.0.2"
MAX_CLIENTS = 8
DEADLINE = 30.0


def _settings(firewall_counters: bool = False) -> Settings:
    return parse_settings(
        {
            # A node of one pod at a share of 4, so that MaxClients 8 holds it (and loopback can fill the rest).
            "cluster": {
                "name": "t",
                "podCidrs": ["10.99.0.0/24"],
                "serviceCidrs": ["10.96.0.0/12"],
                "maxPodsPerNode": 1,
            },
            "proxy": {
                "upstream": {
                    "url": f"http://{UPSTREAM}:3128",
                    "username": "svc",
                    "password": PASSWORD,
                    "noUpstream": [ORIGIN],
                }
            },
            "deployment": {
                "maxClients": MAX_CLIENTS,
                "firewall": {"maxConnectionsPerClient": 4},
                "metrics": {"enabled": True, "firewallCounters": firewall_counters},
            },
        }
    )


def _wait(what: str, check: Callable[[], bool], deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"waited {deadline} s for {what}")


@dataclass
class Node:
    root: Path
    netns: str
    tinyproxy: subprocess.Popen[bytes]
    exporter: subprocess.Popen[bytes] | None
    stdout: Path
    settings: Settings

    def run(self, code: str, *args: str) -> str:
        done = subprocess.run(["ip", "netns", "exec", self.netns, "python3", "-c", code, *args],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout

    def start_exporter(self) -> None:
        command = metrics_container(self.settings)["command"]
        out = self.stdout.open("ab")
        self.exporter = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "chroot", "--userspec=61889:61888", str(self.root),
             f"/usr/bin/{command[0]}", *command[1:]],
            stdout=out, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait("the exporter to serve", lambda: "tinyproxy_up 1" in self.scrape(quiet=True))

    def scrape(self, quiet: bool = False) -> str:
        code = """
import sys, urllib.request
try:
    sys.stdout.write(urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        "http://127.0.0.1:9888/metrics", timeout=5).read().decode())
except OSError as e:
    if sys.argv[1] != "quiet": raise
"""
        return self.run(code, "quiet" if quiet else "loud")

    def metrics(self) -> dict[str, float]:
        values = {}
        for line in self.scrape().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


REQUEST = """
import socket, sys
source, target = sys.argv[1], sys.argv[2].encode()
answer = b""
try:
    s = socket.create_connection(("127.0.0.1", 8888), timeout=10, source_address=(source, 0))
    s.sendall(target + b"\\r\\n\\r\\n")
    while chunk := s.recv(65536):
        answer += chunk
except ConnectionResetError:  # refused at accept (patch 0006): a client outside Allow gets a reset, no page
    answer = b"reset reset"
print(answer.split(b"\\r\\n", 1)[0].decode())
"""

ORIGIN_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((sys.argv[1], 80), H).serve_forever()
"""

# The corporate proxy refusing the credentials: every request gets 407 (patch 0005 makes tinyproxy log it).
UPSTREAM_407 = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(407); self.send_header("Proxy-Authenticate", 'Basic realm="corp"')
        self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer((sys.argv[1], 3128), H).serve_forever()
"""
HOLD = """
import socket, sys
held, reset = [], 0
for i in range(int(sys.argv[1])):
    try:
        held.append(socket.create_connection(("127.0.0.1", 8888), timeout=10))
    except ConnectionResetError:  # reset at accept before connect() returned (a loaded machine's scheduling)
        reset += 1
    except OSError as e:  # the test shows which connection failed and how
        print(f"connection {i + 1} failed: {e!r}", flush=True)
        sys.exit(1)
print(f"held, {reset} reset in connect", flush=True)
sys.stdin.read()
"""

LISTENING = """
import socket, sys, time
end = time.monotonic() + 30
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > end:
            raise
        time.sleep(0.05)
"""


def _request(node: Node, target: str, source: str = "127.0.0.1") -> str:
    return node.run(REQUEST, source, target).strip()


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return _unpack(_scripts_image("amd64"), tmp_path_factory.mktemp("metrics-image"))


@contextlib.contextmanager
def node(image: Built) -> Iterator[Node]:
    settings = _settings()
    root = image.root
    netns = f"pcm-{os.getpid() % 100000}"
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    data = config_object(settings, conf)["stringData"]
    config = root / "etc/tinyproxy"
    config.mkdir(exist_ok=True)
    for key, text in data.items():
        (config / key).write_text(text)
        (config / key).chmod(0o644)
    assert (config / "filter").read_text() == tinyproxy_filter(settings)
    logs = root / LOG_FILE.lstrip("/")
    logs.parent.mkdir(parents=True, exist_ok=True)
    shutil.chown(logs.parent, 0, 61888)
    logs.parent.chmod(0o2770)  # an emptyDir with the pod's fsGroup
    for name in logs.parent.iterdir():
        name.unlink()
    stdout = root.parent / "exporter.out"
    stdout.write_bytes(b"")
    subprocess.run(["ip", "netns", "add", netns], check=True)
    origin = tinyproxy = None
    try:
        for command in (["ip", "-n", netns, "link", "set", "lo", "up"],
                        ["ip", "-n", netns, "addr", "add", f"{ORIGIN}/32", "dev", "lo"],
                        ["ip", "-n", netns, "addr", "add", f"{UPSTREAM}/32", "dev", "lo"]):  # fmt: skip
            subprocess.run(command, check=True)
        origin = subprocess.Popen(["ip", "netns", "exec", netns, "python3", "-c", ORIGIN_SERVER, ORIGIN])
        init = log_file_container(settings)["command"]
        subprocess.run(["ip", "netns", "exec", netns, "chroot", "--userspec=61888:61888", str(root), *init], check=True)
        assert oct(logs.stat().st_mode & 0o777) == "0o660"
        tinyproxy = subprocess.Popen(
            ["ip", "netns", "exec", netns, "chroot", "--userspec=61888:61888", str(root), "/usr/bin/tinyproxy", "-d",
             "-c", "/etc/tinyproxy/tinyproxy.conf"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        n = Node(root, netns, tinyproxy, None, stdout, settings)
        n.run(LISTENING, ORIGIN, "80")
        n.run(LISTENING, "127.0.0.1", "8888")
        n.start_exporter()
        yield n
    finally:
        for process in (tinyproxy, origin, locals().get("n") and n.exporter):
            if process:
                with contextlib.suppress(Exception):
                    process.kill()
                    process.wait(timeout=10)
        subprocess.run(["ip", "netns", "delete", netns], check=False)


def test_every_kind_of_request_is_counted_exactly_and_nothing_secret_is_served(image_root: Built) -> None:
    with node(image_root) as n:
        before = n.metrics()
        assert before["tinyproxy_starts_total"] == 1
        assert before['tinyproxy_config_reloads_total{result="success"}'] == 0
        generation = (n.root / f"etc/tinyproxy/{GENERATION_KEY}").read_text().strip()
        assert before[f'tinyproxy_config_info{{generation="{generation}"}}'] == 1
        assert before["tinyproxy_max_clients"] == MAX_CLIENTS

        sent = {"ok": 5, "allow": 3, "filter": 2, "port": 2, "upstream": 2, "auth": 2}
        statuses = [_request(n, f"GET http://{ORIGIN}/ HTTP/1.1\r\nHost: {ORIGIN}") for _ in range(sent["ok"])]
        statuses += [_request(n, f"GET http://{ORIGIN}/ HTTP/1.1\r\nHost: {ORIGIN}", OUTSIDER) for _ in range(3)]
        statuses += [_request(n, "GET http://127.0.0.1:9888/metrics HTTP/1.1\r\nHost: 127.0.0.1") for _ in range(2)]
        statuses += [_request(n, f"CONNECT {ORIGIN}:22 HTTP/1.1\r\nHost: {ORIGIN}:22") for _ in range(2)]
        statuses += [_request(n, f"GET http://{ELSEWHERE}/ HTTP/1.1\r\nHost: {ELSEWHERE}") for _ in range(2)]
        expected = ["200"] * 5 + ["res"] * 3 + ["403"] * 4 + ["502"] * 2  # Allow's refusals: a reset at accept
        assert [s.split(" ", 1)[1][:3] for s in statuses] == expected, statuses
        # Then the corporate proxy is up but refuses the credentials: the client gets its 407.
        upstream = subprocess.Popen(["ip", "netns", "exec", n.netns, "python3", "-c", UPSTREAM_407, UPSTREAM])
        try:
            n.run(LISTENING, UPSTREAM, "3128")
            refused = [_request(n, f"GET http://{ELSEWHERE}/ HTTP/1.1\r\nHost: {ELSEWHERE}") for _ in range(2)]
        finally:
            upstream.kill()
            upstream.wait(timeout=10)
        assert [s.split(" ", 1)[1][:3] for s in refused] == ["407"] * sent["auth"], refused

        after = n.metrics()
        delta = {k: after[k] - before.get(k, 0) for k in after}
        clients = delta["tinyproxy_connections_total"] - delta["tinyproxy_stathost_requests_total"]
        # The exporter's own stats requests are the stathost ones; a client outside Allow is reset at accept (patch
        # 0006), before tinyproxy counts a connection, and counted as denied.
        assert clients == sum(sent.values()) - sent["allow"]
        assert delta['tinyproxy_refusals_total{cause="allow"}'] == sent["allow"]
        assert delta['tinyproxy_refusals_total{cause="filter"}'] == sent["filter"]
        assert delta['tinyproxy_refusals_total{cause="connect_port"}'] == sent["port"]  # patch 0005: at Notice
        assert delta["tinyproxy_denied_connections_total"] == sent["allow"] + sent["filter"]
        # tinyproxy counts a filtered request as bad too (process_request fails): bad less the Filter's refusals is
        # the CONNECT ports refused, here exactly (no malformed request was sent).
        assert delta["tinyproxy_bad_connections_total"] == sent["port"] + sent["filter"]
        assert delta['tinyproxy_upstream_failures_total{cause="unreachable"}'] == sent["upstream"]
        assert delta['tinyproxy_upstream_failures_total{cause="auth"}'] == sent["auth"]  # patch 0005
        assert delta['tinyproxy_upstream_failures_total{cause="no_upstream"}'] == 0
        assert after["tinyproxy_connections_open"] == 0

        # The endpoint and the passed-on log: no credential, no probe line, each refusal and failure with its cause.
        body = n.scrape()
        assert PASSWORD not in body
        assert "svc" not in body
        _wait("the exporter to pass the upstream failures on",
              lambda: n.stdout.read_text().lower().count("upstream proxy") >= sent["upstream"] + sent["auth"])  # fmt: skip
        log = n.stdout.read_text()
        assert PASSWORD not in log
        assert "stathost" not in log
        assert log.count('Unauthorized connection from "127.0.0.2"') == sent["allow"]
        assert log.count('Proxying refused on filtered domain "127.0.0.1"') == sent["filter"]
        assert log.count("Could not connect to upstream proxy.") == sent["upstream"]
        line = f"Upstream proxy {UPSTREAM}:3128 refused the request: 407 Proxy Authentication Required"
        assert log.count(line) == sent["auth"], log[-2000:]
        assert log.count("Refused CONNECT method on port 22") == sent["port"]
        assert "svc" not in log
        # The whole file tinyproxy wrote holds the probes' lines; the exporter freed what it read (a sparse file).
        raw = n.root / LOG_FILE.lstrip("/")
        assert raw.stat().st_blocks * 512 < raw.stat().st_size or raw.stat().st_size < 4096

        # Connections open, and capacity: hold all of MaxClients, tinyproxy logs it once, the exporter counts it.
        holder = subprocess.Popen(["ip", "netns", "exec", n.netns, "python3", "-c", HOLD, str(MAX_CLIENTS - 2)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held, 0 reset in connect\n"
        _wait("the held connections to be open", lambda: n.metrics()["tinyproxy_connections_open"] == MAX_CLIENTS - 2)
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        # Their threads end once they read the close: wait for that, or the next holder would find them still counted.
        _wait("the held connections to end", lambda: n.metrics()["tinyproxy_connections_open"] == 0)
        full = subprocess.Popen(["ip", "netns", "exec", n.netns, "python3", "-c", HOLD, str(MAX_CLIENTS + 2)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        assert full.stdout is not None
        # Two beyond MaxClients are reset at accept: connect() may already have returned (the reset shows later) or
        # not (it fails with the reset); either way the log below counts exactly two.
        assert re.fullmatch(rb"held, [012] reset in connect\n", full.stdout.readline())
        _wait("tinyproxy to log its capacity", lambda: "at accept: MaxClients in use" in n.stdout.read_text())
        assert full.stdin is not None
        full.stdin.close()
        full.wait(timeout=10)

        # tinyproxy resets the two beyond MaxClients at accept (patch 0006) and logs them a line a second with their
        # count: what is counted is what the log says.
        def refused_full() -> int:
            lines = re.findall(r"Refused (\d+) connection\(s\) at accept: MaxClients in use", n.stdout.read_text())
            return sum(int(count) for count in lines)

        _wait("both refusals to be logged (the second within a second)", lambda: refused_full() == 2)
        _wait("the capacity to be counted", lambda: n.metrics()["tinyproxy_capacity_reached_total"] == 2)

        # A reload (SIGUSR1, as the DaemonSet's config watcher will send) with a new generation file.
        (n.root / f"etc/tinyproxy/{GENERATION_KEY}").write_text("0123456789abcdef\n")
        os.kill(n.tinyproxy.pid, signal.SIGUSR1)
        _wait("the reload to be counted", lambda: n.metrics()['tinyproxy_config_reloads_total{result="success"}'] == 1)
        assert n.metrics()['tinyproxy_config_info{generation="0123456789abcdef"}'] == 1


def test_tinyproxy_keeps_serving_when_the_exporter_dies(image_root: Built) -> None:
    with node(image_root) as n:
        assert n.exporter is not None
        n.exporter.kill()
        n.exporter.wait(timeout=10)
        raw = n.root / LOG_FILE.lstrip("/")
        size = raw.stat().st_size
        for _ in range(3):
            assert _request(n, f"GET http://{ORIGIN}/ HTTP/1.1\r\nHost: {ORIGIN}").split(" ", 1)[1][:3] == "200"
            assert _request(n, f"GET http://{ORIGIN}/ HTTP/1.1\r\nHost: {ORIGIN}", OUTSIDER) == "reset reset"
        assert n.tinyproxy.poll() is None
        assert raw.stat().st_size > size  # still logging, to a file nobody reads
        # A new exporter goes on where the last one stopped: the refusals logged meanwhile are passed on once.
        n.start_exporter()
        _wait("the new exporter to read the log", lambda: n.stdout.read_text().count("Unauthorized connection") >= 3)
        assert n.stdout.read_text().count("Unauthorized connection") == 3
        assert n.metrics()['tinyproxy_refusals_total{cause="allow"}'] == 3
        assert re.search(r"^tinyproxy_up 1$", n.scrape(), re.MULTILINE)


def test_the_metrics_port_is_not_reachable_through_the_proxy_and_the_firewall_spares_the_exporter(
    image_root: Built,
) -> None:
    """With the rendered nftables table loaded by the init container's command, as the DaemonSet does: tinyproxy's
    UID is refused the node's own addresses, the metrics port among them, by any name the Filter lets pass; the
    exporter (its own UID) still reads the stats page on loopback. With `metrics.firewallCounters`, the counters
    container's command (the image's nft, root with the log volume alone writable) lists the table, and the exporter
    counts that refusal under the kernel rule that made it."""
    from proxy_component.dataplane.firewall import firewall_command
    from tests.image.test_build import IMAGE_PATH, in_image

    (image_root.root / "etc/resolv.conf").write_text("nameserver 127.0.0.53\n")
    with node(image_root) as n:
        load = subprocess.run(
            ["ip", "netns", "exec", n.netns, *in_image(image_root, firewall_command(n.settings), user="0:0")],
            env={"R": str(n.root), "PATH": IMAGE_PATH}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert load.returncode == 0, load.stderr
        # 10.99.5.1 is an address of this "node" (on its loopback) that no Filter pattern names.
        answer = _request(n, f"GET http://{ORIGIN}:9888/metrics HTTP/1.1\r\nHost: {ORIGIN}:9888")
        assert answer.split(" ", 1)[1][:3] == "500", answer
        assert _request(n, "GET http://127.0.0.1:9888/metrics HTTP/1.1\r\nHost: 127.0.0.1").split(" ")[1] == "403"
        metrics = n.metrics()
        assert metrics["tinyproxy_up"] == 1
        assert metrics['tinyproxy_refusals_total{cause="filter"}'] == 1
        assert not any(k.startswith("tinyproxy_firewall_") for k in metrics), "off by default"

        counting = _settings(firewall_counters=True)
        listing = n.root / COUNTERS_FILE.lstrip("/")
        log_dir = n.root / LOG_DIR.lstrip("/")
        errors = n.root.parent / "counters.err"  # a file: the loop's `sleep` outlives the shell, and a pipe with it
        command = firewall_counters_container(counting)["command"]
        with errors.open("wb") as err:
            lister = subprocess.Popen(
                ["ip", "netns", "exec", n.netns,
                 *in_image(image_root, command, user="0:61888", binds={LOG_DIR: log_dir}, writable=True)],
                env={"R": str(n.root), "PATH": IMAGE_PATH}, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        try:
            _wait("the counters listing", lambda: listing.exists() and b'"node"' in listing.read_bytes())
        finally:
            lister.terminate()
            lister.wait(timeout=30)
        assert lister.returncode == 0, errors.read_text()  # its TERM trap: a clean stop
        assert (oct(listing.stat().st_mode & 0o777), listing.stat().st_gid) == ("0o640", 61888)
        assert n.exporter is not None
        n.exporter.kill()
        n.exporter.wait(timeout=10)
        n.settings = counting
        n.start_exporter()
        metrics = n.metrics()
        assert metrics['tinyproxy_firewall_refusals_total{rule="node"}'] == 1  # the request for :9888 above
        for rule in ("deny-ranges", "cluster-ranges", "per-client-rate"):
            assert metrics[f'tinyproxy_firewall_refusals_total{{rule="{rule}"}}'] == 0, rule


def test_the_exporters_own_go_tests() -> None:
    """Its parsing, resuming and hole punching, by `go test` with the pinned toolchain (no other is fetched)."""
    exporter = Path(__file__).resolve().parents[2] / "images/proxy/exporter"
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": ""}
    done = subprocess.run(["go", "test", "-count=1", "./..."], cwd=exporter, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
