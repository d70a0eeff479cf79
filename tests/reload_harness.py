"""The kubelet's config volume and the tinyproxy container's command, outside a cluster: shared by the reload tests
(the integration test with Debian's tinyproxy on loopback, and the image lane's with the image's own binary).

`KubeletDir` writes a directory the way the kubelet's AtomicWriter writes a ConfigMap or Secret volume: the files in
a timestamped directory, `..data` a symlink to it, each key a symlink through `..data`; an update writes a new
directory and swaps `..data` with one rename. `Watcher` runs the rendered `proxy_command` (the watcher shell and
tinyproxy as its child) on such a directory, and reads what it logs. Every wait is on a condition, bounded.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy_component.dataplane.lifecycle import RELOAD_LOG_PREFIX, proxy_command
from proxy_component.render import manifests
from proxy_component.settings import Settings

TIMEOUT = 5.0


def wait_for(condition: Callable[[], Any], what: str, timeout: float = TIMEOUT, step: float = 0.05) -> Any:
    """Poll `condition` until it is truthy; its value. Fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


def config_files(settings: Settings) -> dict[str, str]:
    """The files of the proxy's config object (ConfigMap `data` or Secret `stringData`), as rendered."""
    for obj in manifests(settings):
        if (
            obj["kind"] in ("ConfigMap", "Secret")
            and obj["metadata"]["name"] == f"{settings.deployment.service_name}-config"
        ):
            return dict(obj.get("data") or obj.get("stringData") or {})
    raise AssertionError("no proxy config object rendered")


class KubeletDir:
    """A config volume as the kubelet writes it (AtomicWriter): `..<stamp>/`, `..data ->`, `<key> -> ..data/<key>`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)  # the image's user reads it where it is bind-mounted
        self._count = 0

    def write(self, files: Mapping[str, str]) -> float:
        """Write a new version and swap `..data` to it; the monotonic time of the swap."""
        self._count += 1
        stamp = f"..2026_11_27_00_00_{self._count:02d}.{os.getpid()}"
        target = self.path / stamp
        target.mkdir()
        target.chmod(0o755)
        for key, text in files.items():
            (target / key).write_text(text, encoding="utf-8")
            (target / key).chmod(0o444)
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        tmp = self.path / "..data_tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(stamp)
        os.rename(tmp, self.path / "..data")  # the atomic swap
        swapped = time.monotonic()
        for key in files:
            link = self.path / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")
        for link in self.path.iterdir():
            if not link.name.startswith("..") and link.name not in files:
                link.unlink()
        if old is not None:
            shutil.rmtree(self.path / old)
        return swapped


@dataclass
class Watcher:
    """The container's command, running: the shell's process and its log (stdout and stderr)."""

    proc: subprocess.Popen[bytes]
    log: Path
    port: int

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def lines(self) -> list[str]:
        return [line for line in self.text().splitlines() if line.startswith(RELOAD_LOG_PREFIX)]

    @property
    def tinyproxy_pid(self) -> int:
        started = [m for line in self.lines() for m in [re.search(r"started tinyproxy \(pid (\d+)\)", line)] if m]
        assert len(started) == 1, self.text()
        return int(started[0].group(1))

    def wait_line(self, text: str, count: int = 1, timeout: float = TIMEOUT) -> str:
        return str(
            wait_for(
                lambda: next(
                    (line for i, line in enumerate(self.lines()) if text in line and self._nth(text, i) >= count), ""
                ),
                f"{count} watcher line(s) with {text!r}; log:\n{self.text()}",
                timeout,
            )
        )

    def _nth(self, text: str, index: int) -> int:
        return sum(1 for line in self.lines()[: index + 1] if text in line)

    def count(self, text: str) -> int:
        return sum(1 for line in self.lines() if text in line)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def watcher(
    settings: Settings, log: Path, shell: list[str], env: Mapping[str, str] | None = None, wrap: Sequence[str] = ()
) -> Iterator[Watcher]:
    """Run the rendered command (`/bin/sh -c SCRIPT`, with `shell` for `/bin/sh`) until the block ends; TERM, then
    KILL, on the way out. `wrap` prefixes the whole command line (e.g. `ip netns exec NAME`)."""
    command = proxy_command(settings)
    assert command[:2] == ["/bin/sh", "-c"], command
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*wrap, *shell, "-c", command[2]],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            start_new_session=True,  # its own process group: what is left of it is killed whole on the way out
        )
    running = Watcher(proc, log, settings.deployment.port)
    try:
        running.wait_line("started tinyproxy")
        yield running
    finally:
        # SIGINT, the watcher's immediate stop: SIGTERM would drain (endpointSeconds and connectionSeconds), past
        # TIMEOUT, and killing the shell alone then left tinyproxy running after the test.
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(TIMEOUT)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(TIMEOUT)


# --- servers on loopback ---------------------------------------------------------------------


class _LineEcho(socketserver.StreamRequestHandler):
    """Echo every line with the server's prefix, until the client closes."""

    server: LineEchoServer

    def handle(self) -> None:
        self.server.connections += 1
        while True:
            try:
                line = self.rfile.readline(65536)
            except OSError:
                return
            if not line:
                return
            self.wfile.write(self.server.prefix + line)
            self.wfile.flush()


class LineEchoServer(socketserver.ThreadingTCPServer):
    """A destination for tunnels: echoes each line, prefixed with `prefix`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # not the default 5: a burst of connections is the load, not a refusal

    def __init__(self, prefix: bytes, host: str = "127.0.0.1") -> None:
        self.prefix = prefix
        self.connections = 0
        super().__init__((host, 0), _LineEcho)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


@dataclass
class SeenConnect:
    line: str
    authorization: str | None


class _Upstream(socketserver.StreamRequestHandler):
    """A corporate proxy stand-in: records each CONNECT and its Proxy-Authorization, answers 200, then echoes lines
    prefixed with `upstream: ` (it connects nowhere)."""

    server: UpstreamServer

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1").rstrip("\r\n")
        auth = None
        while True:
            raw = self.rfile.readline(8192).decode("latin-1").rstrip("\r\n")
            if not raw:
                break
            name, _, value = raw.partition(":")
            if name.strip().lower() == "proxy-authorization":
                auth = value.strip()
        with self.server.lock:
            self.server.seen.append(SeenConnect(line, auth))
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        while True:
            try:
                data = self.rfile.readline(65536)
            except OSError:
                return
            if not data:
                return
            self.wfile.write(b"upstream: " + data)
            self.wfile.flush()


class UpstreamServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.seen: list[SeenConnect] = []
        self.lock = threading.Lock()
        super().__init__((host, 0), _Upstream)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


# --- clients -----------------------------------------------------------------------------------


class Tunnel:
    """A CONNECT tunnel through the proxy, held open; `echo(line)` sends a line and returns what came back."""

    def __init__(self, proxy: tuple[str, int], target: tuple[str, int], source: str | None = None) -> None:
        family = socket.AF_INET6 if ":" in proxy[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        if source is not None:
            self.sock.bind((source, 0))
        self.sock.connect(proxy)
        host = f"[{target[0]}]" if ":" in target[0] else target[0]
        self.sock.sendall(f"CONNECT {host}:{target[1]} HTTP/1.1\r\nHost: {host}:{target[1]}\r\n\r\n".encode())
        self.file = self.sock.makefile("rb")
        self.status = self.file.readline().decode("latin-1").strip()
        while self.file.readline() not in (b"\r\n", b"\n", b""):
            pass

    @property
    def ok(self) -> bool:
        return " 200 " in f"{self.status} "

    def echo(self, line: str) -> str:
        self.sock.sendall(line.encode() + b"\n")
        return self.file.readline().decode("latin-1").rstrip("\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
            self.sock.close()


def once(proxy: tuple[str, int], target: tuple[str, int], line: str = "x", source: str | None = None) -> str:
    """One short tunnel: the status line when refused, else what `line` echoed; closed either way."""
    try:
        tunnel = Tunnel(proxy, target, source)
    except OSError as exc:
        return f"error: {exc!r}"
    try:
        return tunnel.echo(line) if tunnel.ok else tunnel.status
    except OSError as exc:
        return f"error: {exc!r}"
    finally:
        tunnel.close()


@dataclass
class Load:
    """Requests at a steady rate (CONNECT, one line echoed, close), counted, until stopped: what a node's pods do."""

    proxy: tuple[str, int]
    target: tuple[str, int]
    rate: float = 20.0
    source: str | None = None
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _one(self, i: int) -> None:
        tunnel = None
        try:
            tunnel = Tunnel(self.proxy, self.target, self.source)
            if not tunnel.ok:
                self.failed.append(f"request {i}: {tunnel.status}")
                return
            answer = tunnel.echo(f"load {i}")
            if not answer.endswith(f"load {i}"):
                self.failed.append(f"request {i}: echoed {answer!r}")
                return
            self.ok += 1
        except OSError as exc:
            self.failed.append(f"request {i}: {exc!r}")
        finally:
            if tunnel is not None:
                tunnel.close()

    def _run(self) -> None:
        start = time.monotonic()
        i = 0
        workers: list[threading.Thread] = []
        while not self._stop.is_set():
            worker = threading.Thread(target=self._one, args=(i,), daemon=True)
            worker.start()
            workers.append(worker)
            i += 1
            self._stop.wait(max(0.0, start + i / self.rate - time.monotonic()))
        for worker in workers:
            worker.join(TIMEOUT * 2)

    def __enter__(self) -> Load:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(TIMEOUT * 3)
