"""A reload storm under load (pytest -m image): tinyproxy reloaded with SIGUSR1 every 50 ms, its config rewritten
before each reload (two valid configs in turn, now and then one that does not parse), while ~200 requests a second go
through it (plain GETs direct and through an upstream, Filter refusals, the stats page, short CONNECT tunnels) and a
few CONNECT tunnels stay open across the whole storm.

The binary is the image's own, then the same sources built with ASan+UBSan and with TSan (the `tinyproxy_under_test`
fixture of tests/image/conftest.py). Under
a sanitizer, every report (ASan, UBSan, LSan at exit, TSan) goes to a file in this test's tmp dir and stops the proxy:
the test asserts there is none. For the plain build it asserts that the resident set does not grow with reloads.

Everything runs in a network namespace the test makes (unshare(CLONE_NEWNET) on the test's thread, whose threads and
child processes inherit it): the proxy, the origin and the echo server listen on its loopback only.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.image.conftest import UnderTest
from tests.reload_harness import serving

pytestmark = pytest.mark.image

PROXY_PORT = 8888
ORIGIN_PORT = 80
ECHO_PORT = 443
RELOADS = {"none": 2000, "asan": 600, "tsan": 600}
RELOAD_PERIOD = 0.05
REQUESTS_PER_SECOND = 200
HELD_TUNNELS = 4
INVALID_EVERY = 37
RSS_SLACK_KIB = 5 * 1024
RSS_BASELINE_AFTER = 50
TIMEOUT = 20.0
AUTH = "storm:Pa55-word"
CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Binary:
    path: Path
    sanitizer: str


@pytest.fixture(scope="module")
def storm_binary(tinyproxy_under_test: UnderTest) -> Binary:
    """The tinyproxy under test: the image's, then its ASan+UBSan and TSan builds (tests/image/conftest.py)."""
    return Binary(tinyproxy_under_test.path, tinyproxy_under_test.sanitizer)


def _libc_call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


@contextlib.contextmanager
def network_namespace() -> Iterator[None]:
    """The calling thread in a new network namespace with its loopback up; back in its own afterwards. Threads and
    processes it starts meanwhile are in the new one."""
    if os.geteuid() != 0:
        pytest.fail("the reload storm makes a network namespace: run it as root")
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _libc_call("unshare", CLONE_NEWNET)
        try:
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=TIMEOUT)
            yield
        finally:
            _libc_call("setns", own, CLONE_NEWNET)
    finally:
        os.close(own)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class _Origin(BaseHTTPRequestHandler):
    """Answers every GET with its path and the X-Reload-Gen header; /slow/ after 300 ms. As an upstream proxy it sees
    the absolute URI as the path."""

    def do_GET(self) -> None:
        if "/slow/" in self.path:
            time.sleep(0.3)
        body = f"origin {self.path} gen={self.headers.get('X-Reload-Gen', '-')}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            self.wfile.write(b"echo: " + line)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # not the default 5: a burst of connections is the load, not a refusal


class _OriginServer(ThreadingHTTPServer):
    """The origin: with the default backlog of 5, a loaded machine's burst overflowed its accept queue, the kernel
    dropped the handshakes' last ACKs, and tinyproxy got a reset for the requests it had sent (ListenOverflows)."""

    daemon_threads = True
    request_queue_size = 256


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def _connect_proxy() -> socket.socket:
    return socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=TIMEOUT)


def http_get(url: str) -> tuple[int, bytes]:
    host = url.split("/")[2]
    auth = base64.b64encode(AUTH.encode()).decode()
    request = (
        f"GET {url} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic {auth}\r\n"
        "User-Agent: reload-storm\r\nConnection: close\r\n\r\n"
    )
    with _connect_proxy() as sock:
        sock.sendall(request.encode())
        response = _recv_all(sock)
    head, _, body = response.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", head)
    if not match:
        raise AssertionError(f"no status line in {response[:200]!r}")
    return int(match.group(1)), body


class Tunnel:
    """A CONNECT tunnel through the proxy to the echo server."""

    def __init__(self) -> None:
        self.sock = _connect_proxy()
        auth = base64.b64encode(AUTH.encode()).decode()
        self.sock.sendall(
            f"CONNECT 127.0.0.1:{ECHO_PORT} HTTP/1.1\r\nHost: 127.0.0.1:{ECHO_PORT}\r\n"
            f"Proxy-Authorization: Basic {auth}\r\n\r\n".encode()
        )
        head = _read_head(self.sock)
        if not re.match(rb"HTTP/1\.[01] 200 ", head):
            self.sock.close()
            raise AssertionError(f"CONNECT answered {head[:200]!r}")
        self.reader = self.sock.makefile("rb")

    def echo(self, text: str) -> str:
        self.sock.sendall(text.encode() + b"\n")
        return self.reader.readline().decode().rstrip("\n")

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


@dataclass
class Load:
    """~REQUESTS_PER_SECOND requests a second through the proxy, each checked; the failures listed."""

    ok: int = 0
    failed: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def one(self, n: int) -> None:
        kind = ("direct", "upstream", "direct", "blocked", "stats", "connect", "direct", "slow")[n % 8]
        try:
            if kind == "connect":
                tunnel = Tunnel()
                try:
                    got = tunnel.echo(f"short {n}")
                finally:
                    tunnel.close()
                if got != f"echo: short {n}":
                    raise AssertionError(f"echoed {got!r}")
            else:
                url = {
                    "direct": f"http://127.0.0.1/direct/{n}",
                    "slow": f"http://127.0.0.1/slow/{n}",
                    "upstream": f"http://n{n}.upstream.example/up/{n}",
                    "blocked": "http://blocked.example/",
                    "stats": "http://stats.storm/",
                }[kind]
                status, body = http_get(url)
                want = 403 if kind == "blocked" else 200
                if status != want:
                    raise AssertionError(f"status {status}, body {body[:120]!r}")
                if kind in ("direct", "slow") and not body.startswith(f"origin /{kind}/{n} ".encode()):
                    raise AssertionError(f"body {body[:120]!r}")
                if kind == "upstream" and not body.startswith(
                    f"origin http://n{n}.upstream.example:80/up/{n} ".encode()
                ):
                    raise AssertionError(f"body {body[:120]!r}")
        except (OSError, AssertionError) as error:
            with self.lock:
                self.failed.append(f"{kind} #{n} at {time.monotonic():.3f}: {error!r}")
            return
        with self.lock:
            self.ok += 1

    def run(self) -> None:
        with ThreadPoolExecutor(max_workers=64) as pool:
            n, start = 0, time.monotonic()
            while not self.stop.is_set():
                pool.submit(self.one, n)
                n += 1
                delay = start + n / REQUESTS_PER_SECOND - time.monotonic()
                if delay > 0:
                    time.sleep(delay)


class LogTail:
    """Counts lines of the proxy's log file as it grows."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.pending = path, 0, b""
        self.counts: dict[str, int] = {}

    def count(self, needle: str) -> int:
        if self.path.exists():
            with self.path.open("rb") as log:
                log.seek(self.offset)
                data = self.pending + log.read()
            self.offset += len(data) - len(self.pending)
            *lines, self.pending = data.split(b"\n")
            for line in lines:
                for key in ("Reloading config file finished", "Reloading config file failed", "Starting main loop"):
                    if key.encode() in line:
                        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts.get(needle, 0)

    def reloads(self) -> int:
        return self.count("Reloading config file finished") + self.count("Reloading config file failed")


def _config(tmp: Path, generation: int, log: Path) -> str:
    """Config A (even) or B (odd): each replaces what the other holds (ACL, Filter, upstreams, headers...)."""
    side = "AB"[generation % 2]
    common = (
        f'Port {PROXY_PORT}\nListen 127.0.0.1\nTimeout 60\nMaxClients 512\nLogFile "{log}"\nLogLevel Info\n'
        f'Allow 127.0.0.1\nConnectPort {ECHO_PORT}\nStatHost "stats.storm"\nFilter "{tmp / f"filter-{side}"}"\n'
        f'AddHeader "X-Reload-Gen" "{generation}"\nViaProxyName "storm-{side}"\n'
        f'Upstream http 127.0.0.1:{ORIGIN_PORT} ".upstream.example"\n'
    )
    if side == "A":
        return common + (
            "FilterType ere\nAllow ::1\nConnectPort 8443\n"
            'Upstream none "a.example"\nUpstream none ".internal.example"\n'
            'Anonymous "Host"\nAnonymous "User-Agent"\nAnonymous "X-Reload-Gen"\n'
        )
    return common + (
        "FilterType bre\nDeny 10.0.0.0/8\nConnectPort 563\n"
        'Upstream none "b.example"\n'
        f'BasicAuth {AUTH.replace(":", " ")}\nBasicAuthRealm "storm"\n'
        'AddHeader "X-Second" "yes"\nErrorFile 404 "/nonexistent/404.html"\n'
    )


def _write(path: Path, text: str) -> None:
    """As a volume update does: the new file renamed over the old one."""
    temp = path.with_name(path.name + ".new")
    temp.write_text(text)
    os.replace(temp, path)


def _rss_kib(pid: int) -> int:
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert match, f"no VmRSS for {pid}"
    return int(match.group(1))


def _reports(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file())


def _sanitizer_env(reports: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = f"log_path={reports}/asan:halt_on_error=1:detect_leaks=1:abort_on_error=0"
    env["LSAN_OPTIONS"] = f"log_path={reports}/lsan"
    env["UBSAN_OPTIONS"] = f"log_path={reports}/ubsan:halt_on_error=1:print_stacktrace=1"
    env["TSAN_OPTIONS"] = f"log_path={reports}/tsan:halt_on_error=1:second_deadlock_stack=1"
    return env


def _port_open() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=1):
            return True
    except OSError:
        return False


@dataclass
class Storm:
    """What a storm did and saw."""

    reloads: int
    sent: int = 0
    invalid: int = 0
    done: int = 0
    seconds: float = 0.0
    rss_start: int = 0
    rss_end: int = 0
    alive: bool = False
    exit: int | None = None
    tunnel_failures: list[str] = field(default_factory=list)
    echoes: list[str] = field(default_factory=list)
    last: tuple[int, bytes] = (0, b"")
    error: str = ""
    invalid_refused: int = 0
    load: Load = field(default_factory=Load)


def _reloaded(tail: LogTail, proc: subprocess.Popen[bytes], before: int) -> bool:
    return tail.reloads() > before or proc.poll() is not None


def _storm(binary: Binary, tmp: Path, storm: Storm, reports: Path, log: Path) -> None:
    conf = tmp / "tinyproxy.conf"
    (tmp / "filter-A").write_text("^blocked\\.example$\n^(www\\.)?denied\\.example$\n")
    (tmp / "filter-B").write_text("blocked\\.example\n# a comment\nnope\\.example\n")
    _write(conf, _config(tmp, 0, log))
    origin = _OriginServer(("127.0.0.1", ORIGIN_PORT), _Origin)
    echo = _EchoServer(("127.0.0.1", ECHO_PORT), _Echo)
    with serving(origin), serving(echo), (tmp / "stderr").open("wb") as stderr:
        proc = subprocess.Popen(
            [str(binary.path), "-d", "-c", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=subprocess.STDOUT,
            env=_sanitizer_env(reports),
        )
        tail, load = LogTail(log), storm.load
        loader = threading.Thread(target=load.run, daemon=True)
        tunnels: list[Tunnel] = []

        def held(at: str) -> None:
            for i, tunnel in enumerate(tunnels):
                try:
                    got = tunnel.echo(f"held {i} {at}")
                except OSError as error:
                    got = repr(error)
                if got != f"echo: held {i} {at}":
                    storm.tunnel_failures.append(f"tunnel {i} {at}: {got!r}")

        try:
            wait_for(lambda: tail.count("Starting main loop") > 0 and _port_open(), "the proxy to listen")
            initial = tail.reloads()  # the load at start logs the same lines
            tunnels = [Tunnel() for _ in range(HELD_TUNNELS)]
            loader.start()
            wait_for(lambda: load.ok >= 200 or proc.poll() is not None, "the load to run")
            start = time.monotonic()
            for n in range(1, storm.reloads + 1):
                if proc.poll() is not None:
                    break
                due = time.monotonic() + RELOAD_PERIOD
                if n % INVALID_EVERY == 0 and n != storm.reloads:
                    storm.invalid += 1
                    _write(conf, f"Port {PROXY_PORT}\nThisIsNoDirective yes\n")
                else:
                    _write(conf, _config(tmp, n, log))
                before = tail.reloads()
                proc.send_signal(signal.SIGUSR1)
                storm.sent = n
                wait_for(partial(_reloaded, tail, proc, before), f"reload {n} to be done")
                if n % 200 == 0:
                    held(f"after {n} reloads")
                if n == RSS_BASELINE_AFTER and proc.poll() is None:
                    storm.rss_start = _rss_kib(proc.pid)
                time.sleep(max(0.0, due - time.monotonic()))
            storm.seconds = time.monotonic() - start
            if proc.poll() is None:
                storm.rss_end = _rss_kib(proc.pid)
            storm.done = tail.reloads() - initial
            load.stop.set()
            loader.join(TIMEOUT * 2)
            storm.alive = proc.poll() is None
            if storm.alive:
                held("after the storm")
                storm.last = http_get("http://127.0.0.1/direct/last")
            storm.done = tail.reloads() - initial
        except (OSError, AssertionError) as error:
            storm.error = repr(error)
        finally:
            load.stop.set()
            for tunnel in tunnels:
                tunnel.close()
            if loader.is_alive():
                loader.join(TIMEOUT * 2)
            if proc.poll() is None:
                # No connection left, then SIGTERM: a normal exit, where LSan looks for leaks.
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(TIMEOUT)
            storm.exit = proc.returncode
            storm.invalid_refused = tail.count("Reloading config file failed")


def test_a_reload_storm_under_load_keeps_every_request_tunnel_and_byte(storm_binary: Binary, tmp_path: Path) -> None:
    storm = Storm(int(os.environ.get("TINYPROXY_STORM_RELOADS", RELOADS[storm_binary.sanitizer])))
    reports = tmp_path / "sanitizer"
    reports.mkdir()
    started = time.monotonic()
    # tinyproxy fsyncs its log after each line, under the lock every thread logs through: on a disk that paces the
    # whole proxy (a reload took 300 ms here at 200 requests a second). The log goes to a tmpfs, then to tmp_path.
    shm = Path(tempfile.mkdtemp(prefix="reload-storm-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    try:
        with network_namespace():
            _storm(storm_binary, tmp_path, storm, reports, shm / "tinyproxy.log")
    finally:
        if (shm / "tinyproxy.log").exists():
            shutil.move(shm / "tinyproxy.log", tmp_path / "tinyproxy.log")
        shutil.rmtree(shm, ignore_errors=True)
    load = storm.load

    found = _reports(reports)
    texts = "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[:60]) for p in found)
    print(
        f"\nreload storm ({storm_binary.sanitizer}, {storm_binary.path}): {storm.sent} reloads sent ({storm.invalid} "
        f"invalid), {storm.done} done in {storm.seconds:.1f} s; {load.ok} requests ok, {len(load.failed)} failed; "
        f"RSS {storm.rss_start} KiB after {RSS_BASELINE_AFTER} reloads, {storm.rss_end} KiB at the end; "
        f"{len(found)} sanitizer reports; exit {storm.exit}; {time.monotonic() - started:.1f} s in all"
    )
    assert found == [], f"{len(found)} sanitizer reports:\n{texts}"
    assert storm.error == "", storm.error
    assert storm.alive, f"the proxy died during the storm (exit {storm.exit}) after {storm.done} reloads"
    assert storm.done >= storm.reloads, f"{storm.reloads} reloads signalled, {storm.done} done"
    assert load.failed == [], f"{len(load.failed)} of {load.ok + len(load.failed)} requests failed:\n" + "\n".join(
        load.failed
    )
    assert load.ok >= storm.seconds * REQUESTS_PER_SECOND * 0.5, f"only {load.ok} requests in {storm.seconds:.1f} s"
    assert storm.tunnel_failures == [], storm.tunnel_failures
    assert storm.last[0] == 200, storm.last
    assert storm.last[1].endswith(f"gen={storm.reloads}\n".encode()), f"the last config not in force: {storm.last[1]!r}"
    assert storm.invalid_refused == storm.invalid, f"{storm.invalid} invalid configs, {storm.invalid_refused} refused"
    assert storm.exit == 0, f"exit {storm.exit} on SIGTERM"
    if storm_binary.sanitizer == "none":
        assert storm.rss_end - storm.rss_start <= RSS_SLACK_KIB, (
            f"RSS grew {storm.rss_end - storm.rss_start} KiB from reload {RSS_BASELINE_AFTER} ({storm.rss_start} "
            f"KiB) to reload {storm.reloads} ({storm.rss_end} KiB)"
        )
