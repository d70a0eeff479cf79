"""Debian's real tinyproxy 1.11 running the config that `tinyproxy_conf` renders.

Only the `Port` line is rewritten (to a free port); everything else is exactly
what a cluster would get. All traffic stays on loopback: the origins and the
fake corporate proxy are local servers on 127.0.0.0/8 or ::1, and no test names
a host that would need a DNS query. Every socket has a timeout and every
tinyproxy is killed by a fixture finalizer.
"""

from __future__ import annotations

import base64
import copy
import ipaddress
import re
import secrets
import shutil
import socket
import socketserver
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.dataplane.config import tinyproxy_conf, tinyproxy_filter
from proxy_component.dataplane.workload import daemonset
from proxy_component.settings import Settings, parse_settings
from tests.reload_harness import serving

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ipv6-only" / "proxy.yaml"
TIMEOUT = 5.0  # seconds, for every socket and every wait
OUTSIDER = "127.0.0.2"  # a loopback source that the rendered Allow does not list

# What the image's tinyproxy answers (tests/conftest.py puts its build for this machine first on PATH).
PORT_REFUSED_STATUS = b"HTTP/1.1 403 Access violation"
PORT_REFUSED_TEXT = b"The CONNECT method not allowed with the port you tried to use."
TUNNEL_STATUS = b"HTTP/1.1 200 Connection established"  # tinyproxy's own answer to a direct CONNECT


# --- local servers -------------------------------------------------------------------------


@dataclass
class Seen:
    """One request an origin served: the request line's target and its headers."""

    path: str
    headers: dict[str, str]


class _OriginHandler(BaseHTTPRequestHandler):
    server: _Origin
    timeout = TIMEOUT

    def do_GET(self) -> None:
        self.server.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = f"origin {self.server.name} saw {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on `seen`, not on stderr."""


class _Origin(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, name: str, family: socket.AddressFamily = socket.AF_INET) -> None:
        self.address_family = family
        self.name = name
        self.seen: list[Seen] = []
        super().__init__((host, 0), _OriginHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS query for 127.0.0.3: skip it.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "localhost"
        self.server_port = self.port

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


@dataclass
class UpstreamRequest:
    """What the fake corporate proxy received: the request line and the headers (names lower-cased)."""

    line: str
    headers: dict[str, str] = field(default_factory=dict)


class _UpstreamHandler(socketserver.StreamRequestHandler):
    """A corporate proxy stand-in: records the request, answers 200, then echoes the tunnel with a prefix."""

    server: _FakeUpstream
    timeout = TIMEOUT

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1").rstrip("\r\n")
        headers: dict[str, str] = {}
        while True:
            raw = self.rfile.readline(8192).decode("latin-1").rstrip("\r\n")
            if not raw:
                break
            name, _, value = raw.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.server.requests.append(UpstreamRequest(line, headers))
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        data = self.request.recv(4096)
        if data:
            self.wfile.write(b"upstream echo: " + data)


class _FakeUpstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.requests: list[UpstreamRequest] = []
        super().__init__(("127.0.0.1", 0), _UpstreamHandler)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


@pytest.fixture
def origin() -> Iterator[_Origin]:
    """An HTTP origin on 127.0.0.1, on an ephemeral port."""
    server = _Origin("127.0.0.1", "v4")
    with serving(server):
        yield server


@pytest.fixture
def origin_other_ip() -> Iterator[_Origin]:
    """An HTTP origin on another loopback address, 127.0.0.3."""
    server = _Origin("127.0.0.3", "127.0.0.3")
    with serving(server):
        yield server


@pytest.fixture
def origin_v6() -> Iterator[_Origin]:
    """An HTTP origin on ::1."""
    try:
        server = _Origin("::1", "v6", socket.AF_INET6)
    except OSError as exc:
        pytest.fail(f"cannot listen on [::1] ({exc}): this test needs IPv6 on the loopback interface")
    with serving(server):
        yield server


@pytest.fixture
def upstream() -> Iterator[_FakeUpstream]:
    """A fake corporate proxy on 127.0.0.1 that records what tinyproxy sends it."""
    server = _FakeUpstream()
    with serving(server):
        yield server


# --- tinyproxy -----------------------------------------------------------------------------


@dataclass
class Tinyproxy:
    port: int
    conf: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="session")
def tinyproxy_bin() -> str:
    path = shutil.which("tinyproxy")
    if path is None:
        pytest.fail("tinyproxy is not on PATH: these tests run Debian's real tinyproxy (apt-get install tinyproxy-bin)")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def with_port(conf: str, port: int) -> str:
    """The rendered config with only its `Port` line changed."""
    new, count = re.subn(r"^Port \d+$", f"Port {port}", conf, flags=re.MULTILINE)
    assert count == 1, f"expected exactly one Port line in the rendered config, found {count}"
    before, after = conf.splitlines(), new.splitlines()
    assert len(before) == len(after), "the rewrite must not add or drop lines"
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(changed) == 1, f"the rewrite must change exactly one line, changed {changed}"
    assert after[changed[0]] == f"Port {port}"
    return new


def _wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> bool:
    """Poll the port until tinyproxy accepts; False when it exited first. Bounded by TIMEOUT."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    pytest.fail(f"tinyproxy did not accept on 127.0.0.1:{port} within {TIMEOUT}s; log:\n{log.read_text()}")


@pytest.fixture
def start_tinyproxy(tinyproxy_bin: str, tmp_path: Path) -> Iterator[Callable[[Settings], Tinyproxy]]:
    """Start tinyproxy in the foreground with the rendered config; every process started is killed on teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings) -> Tinyproxy:
        # The config directory is a setting: point it here, so the rendered Filter line finds its file.
        config_dir = tmp_path / f"config-{len(procs)}"
        config_dir.mkdir()
        deployment = settings.deployment.model_copy(update={"config_dir": str(config_dir)})
        settings = settings.model_copy(update={"deployment": deployment})
        (config_dir / "filter").write_text(tinyproxy_filter(settings), encoding="utf-8")
        rendered = tinyproxy_conf(settings, settings.allowed_sources())
        failures = []
        for attempt in range(3):  # another process may take the free port between the probe and tinyproxy's bind
            port = _free_port()
            conf = with_port(rendered, port)
            conf_path = tmp_path / f"tinyproxy-{len(procs)}-{attempt}.conf"
            conf_path.write_text(conf, encoding="utf-8")
            log = conf_path.with_suffix(".log")
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [tinyproxy_bin, "-d", "-c", str(conf_path)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            procs.append(proc)
            if _wait_ready(proc, port, log):
                return Tinyproxy(port, conf, log)
            text = log.read_text(encoding="utf-8", errors="replace")
            failures.append(f"exit {proc.returncode}, log:\n{text}")
            if "Address already in use" not in text:
                break
        pytest.fail(f"tinyproxy did not start on the rendered config:\n{rendered}\n" + "\n".join(failures))

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(TIMEOUT)


# --- settings ------------------------------------------------------------------------------


def _example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# The tests' origins listen on loopback, which the default Filter refuses: these settings keep only the
# link-local rule, and test_default_filter_refuses_the_node_itself checks the defaults.
REACHABLE_LOOPBACK = {"deployment": {"denyDestinations": [r"^169\.254\."]}}


def example_settings(**extra: Any) -> Settings:
    """The IPv6-only example (pods in fd00:10:244::/56, nodes in 10.0.0.0/8 and fd00:10::/64) plus `extra`."""
    return parse_settings(_merge(_merge(_example(), REACHABLE_LOOPBACK), extra))


# --- client --------------------------------------------------------------------------------


def _client(proxy: Tinyproxy, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", proxy.port))
    return sock


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read up to the end of the response head; returns (head, bytes already read past it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise AssertionError(f"connection closed before the end of the response head: {data!r}")
        data += chunk
        assert len(data) < 65536, "response head too long"
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _read_to_eof(sock: socket.socket, already: bytes = b"") -> bytes:
    data = already
    while chunk := sock.recv(4096):
        data += chunk
        assert len(data) < 1 << 20, "response too long"
    return data


def _connect(proxy: Tinyproxy, target: str, source: str = "127.0.0.1") -> tuple[socket.socket, bytes, bytes]:
    sock = _client(proxy, source)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head, rest = _read_head(sock)
    return sock, head, rest


def _status_line(head: bytes) -> bytes:
    return head.split(b"\r\n", 1)[0]


def _get_through_tunnel(sock: socket.socket, host: str, path: str) -> bytes:
    """Send an HTTP request inside an established tunnel and return the origin's whole response."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    return _read_to_eof(sock)


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- the rendered config as tinyproxy runs it ---------------------------------------------


def test_port_rewrite_changes_one_line() -> None:
    conf = tinyproxy_conf(example_settings(), ["127.0.0.1"])
    rewritten = with_port(conf, 40404)
    assert "Port 8888" in conf.splitlines()
    assert "Port 40404" in rewritten.splitlines()
    assert [line for line in rewritten.splitlines() if line.startswith("Port ")] == ["Port 40404"]


def test_allowed_client_connect_tunnels_both_ways(
    start_tinyproxy: Callable[[Settings], Tinyproxy], origin: _Origin
) -> None:
    proxy = start_tinyproxy(example_settings(deployment={"connectPorts": [443, origin.port]}))
    assert "Allow 127.0.0.1" in proxy.conf.splitlines()
    assert f"ConnectPort {origin.port}" in proxy.conf.splitlines()

    nonce = secrets.token_hex(8)
    sock, head, rest = _connect(proxy, f"127.0.0.1:{origin.port}")
    with sock:
        assert rest == b""
        assert re.match(rb"^HTTP/1\.[01] 200 ", _status_line(head)), head
        assert _status_line(head) == TUNNEL_STATUS
        response = _get_through_tunnel(sock, f"127.0.0.1:{origin.port}", f"/tunnel/{nonce}")
    # Client -> origin: the origin saw the request sent inside the tunnel; origin -> client: its answer came back.
    assert [s.path for s in origin.seen] == [f"/tunnel/{nonce}"]
    assert response.startswith(b"HTTP/1.0 200 OK\r\n"), response
    assert response.endswith(f"origin v4 saw /tunnel/{nonce}\n".encode()), response


def test_connect_to_port_not_in_connectport_is_refused(start_tinyproxy: Callable[[Settings], Tinyproxy]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        other.setblocking(False)
        port = other.getsockname()[1]
        proxy = start_tinyproxy(example_settings(deployment={"connectPorts": [443]}))
        assert [line for line in proxy.conf.splitlines() if line.startswith("ConnectPort")] == ["ConnectPort 443"]

        sock, head, rest = _connect(proxy, f"127.0.0.1:{port}")
        with sock:
            body = _read_to_eof(sock, rest)
        assert _status_line(head) == PORT_REFUSED_STATUS
        assert PORT_REFUSED_TEXT in body
        # The listening port was never even dialled.
        with pytest.raises(BlockingIOError):
            other.accept()


def test_client_outside_allow_is_refused(start_tinyproxy: Callable[[Settings], Tinyproxy], origin: _Origin) -> None:
    proxy = start_tinyproxy(example_settings(deployment={"connectPorts": [443, origin.port]}))
    allowed = [ipaddress.ip_network(line.split()[1]) for line in proxy.conf.splitlines() if line.startswith("Allow ")]
    assert ipaddress.ip_network("127.0.0.1/32") in allowed
    assert not any(ipaddress.ip_address(OUTSIDER) in net for net in allowed), allowed

    # Refused at accept (patch 0006), before a thread or a byte of the request: a reset, no answer at all.
    sock = _client(proxy, OUTSIDER)
    with sock:
        try:
            sock.sendall(f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = sock.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            answer = b""
    assert answer == b""
    assert origin.seen == []
    deadline = time.monotonic() + TIMEOUT
    while "at accept: not in Allow" not in proxy.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"Refused 1 connection(s) at accept: not in Allow (last from {OUTSIDER})" in proxy.log_text()

    # The same request from an allowed source goes through, so the refusal is the ACL's doing.
    sock, head, _ = _connect(proxy, f"127.0.0.1:{origin.port}")
    sock.close()
    assert _status_line(head) == TUNNEL_STATUS


def test_plain_http_get_absolute_form(start_tinyproxy: Callable[[Settings], Tinyproxy], origin: _Origin) -> None:
    proxy = start_tinyproxy(example_settings())
    nonce = secrets.token_hex(8)
    target = f"http://127.0.0.1:{origin.port}/plain?n={nonce}"
    with _client(proxy) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}\r\nUser-Agent: it\r\n\r\n".encode())
        response = _read_to_eof(sock)
    assert re.match(rb"^HTTP/1\.[01] 200 OK\r\n", response), response
    assert response.endswith(f"origin v4 saw /plain?n={nonce}\n".encode()), response
    # tinyproxy turned the absolute-form URI into origin-form, and `DisableViaHeader Yes` kept Via out.
    assert [s.path for s in origin.seen] == [f"/plain?n={nonce}"]
    assert origin.seen[0].headers["host"] == f"127.0.0.1:{origin.port}"
    assert "via" not in origin.seen[0].headers


# --- upstream chaining ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "password", "in_url"),
    [
        ("user", "secret", True),
        ("svc-proxy", "p:ss#w0rd!", False),  # ':' and '#' must survive tinyproxy's config parser
    ],
)
def test_connect_is_chained_to_upstream_with_basic_credentials(
    start_tinyproxy: Callable[[Settings], Tinyproxy],
    origin: _Origin,
    upstream: _FakeUpstream,
    user: str,
    password: str,
    in_url: bool,
) -> None:
    if in_url:
        spec: dict[str, Any] = {"url": f"http://{user}:{password}@127.0.0.1:{upstream.port}"}
    else:
        spec = {"url": f"http://127.0.0.1:{upstream.port}", "username": user, "password": password}
    proxy = start_tinyproxy(example_settings(proxy={"upstream": spec}, deployment={"connectPorts": [443, origin.port]}))
    assert f"Upstream http {user}:{password}@127.0.0.1:{upstream.port}" in proxy.conf.splitlines()

    sock, head, rest = _connect(proxy, f"127.0.0.1:{origin.port}")
    with sock:
        assert _status_line(head) == b"HTTP/1.1 200 Connection established"  # the upstream's answer, relayed
        sock.sendall(b"hello through the chain")
        echoed = _read_to_eof(sock, rest)
    assert echoed == b"upstream echo: hello through the chain"
    assert len(upstream.requests) == 1
    request = upstream.requests[0]
    assert request.line == f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"
    assert request.headers["proxy-authorization"] == _basic(user, password)
    assert "via" not in request.headers
    assert origin.seen == []  # nothing went direct


def test_no_upstream_destinations_go_direct(
    start_tinyproxy: Callable[[Settings], Tinyproxy],
    origin: _Origin,
    origin_other_ip: _Origin,
    upstream: _FakeUpstream,
) -> None:
    settings = example_settings(
        proxy={
            "upstream": {
                "url": f"http://user:secret@127.0.0.1:{upstream.port}",
                "noUpstream": ["*.localhost", "127.0.0.2/31"],
            }
        },
        deployment={"connectPorts": [443, origin.port, origin_other_ip.port]},
    )
    proxy = start_tinyproxy(settings)
    lines = proxy.conf.splitlines()
    for spec in ('"localhost"', '".localhost"', '"127.0.0.2/31"'):
        assert f"Upstream none {spec}" in lines
    # tinyproxy takes every rule: none is dropped as nonsense.
    assert "Nonsense" not in proxy.log_text()

    # A suffix covers the domain itself (tinyproxy's ".localhost" alone would not): direct, via /etc/hosts' localhost.
    sock, head, _ = _connect(proxy, f"localhost:{origin.port}")
    with sock:
        assert _status_line(head) == TUNNEL_STATUS
        response = _get_through_tunnel(sock, "localhost", "/by-name")
    assert response.endswith(b"origin v4 saw /by-name\n"), response

    # An IPv4 CIDR: 127.0.0.3 is in 127.0.0.2/31, so direct too.
    sock, head, _ = _connect(proxy, f"127.0.0.3:{origin_other_ip.port}")
    with sock:
        assert _status_line(head) == TUNNEL_STATUS
        response = _get_through_tunnel(sock, "127.0.0.3", "/by-cidr")
    assert response.endswith(b"origin 127.0.0.3 saw /by-cidr\n"), response
    assert upstream.requests == []

    # Anything else still goes through the upstream.
    sock, head, _ = _connect(proxy, f"127.0.0.1:{origin.port}")
    sock.close()
    assert _status_line(head) == b"HTTP/1.1 200 Connection established"
    assert [r.line for r in upstream.requests] == [f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"]
    assert [s.path for s in origin.seen] == ["/by-name"]


def test_no_upstream_ipv6_entry_goes_direct(
    start_tinyproxy: Callable[[Settings], Tinyproxy], origin_v6: _Origin, upstream: _FakeUpstream
) -> None:
    settings = example_settings(
        proxy={"upstream": {"url": f"http://127.0.0.1:{upstream.port}", "noUpstream": ["[::1]"]}},
        deployment={"connectPorts": [443, origin_v6.port]},
    )
    proxy = start_tinyproxy(settings)
    assert 'Upstream none "::1"' in proxy.conf.splitlines()  # unbracketed: tinyproxy drops "[::1]" as nonsense
    assert "Nonsense" not in proxy.log_text()

    sock, head, _ = _connect(proxy, f"[::1]:{origin_v6.port}")
    with sock:
        assert _status_line(head) == TUNNEL_STATUS
        response = _get_through_tunnel(sock, "[::1]", "/v6")
    assert response.endswith(b"origin v6 saw /v6\n"), response
    assert upstream.requests == []


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "127.0.0.2", "0.0.0.0", "2130706433", "0x7f000001", "[::1]", "[::ffff:127.0.0.1]"],
)
def test_default_filter_refuses_the_node_itself(
    start_tinyproxy: Callable[[Settings], Tinyproxy], origin: _Origin, host: str
) -> None:
    """With the default denyDestinations, neither plain HTTP nor CONNECT reaches the node's own services."""
    settings = parse_settings(_example())
    assert settings.deployment.deny_destinations, "the default must deny something"
    proxy = start_tinyproxy(
        settings.model_copy(
            update={"deployment": settings.deployment.model_copy(update={"connect_ports": [443, origin.port]})}
        )
    )
    sock = _client(proxy)
    with sock:
        sock.sendall(f"GET http://{host}:{origin.port}/secret HTTP/1.1\r\nHost: {host}:{origin.port}\r\n\r\n".encode())
        head, _ = _read_head(sock)
    assert _status_line(head) == b"HTTP/1.1 403 Filtered", head
    sock, head, _ = _connect(proxy, f"{host}:{origin.port}")
    with sock:
        assert _status_line(head) == b"HTTP/1.1 403 Filtered", head
    assert origin.seen == [], "the origin must never see a request"


# --- the kubelet's probes --------------------------------------------------------------------


def _kubelet_get(http: Mapping[str, Any], port: int) -> bytes:
    """The request the kubelet's HTTP prober sends for an httpGet probe (no keep-alive, no compression)."""
    headers = {"Host": f"{http['host']}:{http['port']}", "User-Agent": "kube-probe/1.36", "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in http.get("httpHeaders", [])})
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    with socket.create_connection((http["host"], port), timeout=TIMEOUT) as sock:
        sock.sendall(f"GET {http['path']} HTTP/1.1\r\n{head}Connection: close\r\n\r\n".encode())
        return _read_to_eof(sock)


def _wait_for_log(proxy: Tinyproxy, text: str, count: int) -> str:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        log = proxy.log_text()
        if log.count(text) >= count:
            return log
        time.sleep(0.02)
    pytest.fail(f"tinyproxy did not log {text!r} {count} times: {proxy.log_text()}")


def test_the_rendered_probes_get_tinyproxys_own_answer_and_reach_nothing(
    start_tinyproxy: Callable[[Settings], Tinyproxy], origin: _Origin, upstream: _FakeUpstream
) -> None:
    """Both probes as rendered, through the default Filter and an upstream: 200 from tinyproxy, no ERROR line."""
    settings = parse_settings(_merge(_example(), {"proxy": {"upstream": {"url": f"http://127.0.0.1:{upstream.port}"}}}))
    proxy = start_tinyproxy(settings)
    # The fixture's own readiness poll is a bare TCP connect, which tinyproxy logs as an ERROR (see below):
    # only what the probes add counts.
    _wait_for_log(proxy, "closed socket before read", 1)
    start = len(proxy.log_text())
    container = daemonset(settings, "digest")["spec"]["template"]["spec"]["containers"][0]
    for kind in ("readinessProbe", "livenessProbe"):
        probe = container[kind]
        assert "tcpSocket" not in probe
        assert probe["httpGet"]["port"] == settings.deployment.port  # the Port line the test rewrote
        response = _kubelet_get(probe["httpGet"], proxy.port)
        assert response.startswith(b"HTTP/1.0 200 OK\r\n"), response
        assert b"Generated by tinyproxy." in response
    log = _wait_for_log(proxy, "Request for the stathost.", 2)[start:]
    assert log.count("Request for the stathost.") == 2, log
    assert "ERROR" not in log, log
    assert upstream.requests == []
    assert origin.seen == []


def test_a_bare_tcp_probe_makes_tinyproxy_log_an_error(start_tinyproxy: Callable[[Settings], Tinyproxy]) -> None:
    """What a tcpSocket probe does (connect, close) and why the probes no longer do it."""
    proxy = start_tinyproxy(example_settings())
    socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT).close()
    log = _wait_for_log(proxy, "closed socket before read", 1)
    assert "ERROR" in log
