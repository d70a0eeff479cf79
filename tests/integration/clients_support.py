"""Helpers for test_clients.py: loopback servers, a loopback-only resolver, and one adapter per Python client.

Nothing here sends traffic beyond loopback: the servers bind 127.0.0.0/8 or ::1,
the resolver answers every name with 127.0.0.1 and refuses non-loopback
addresses, and every socket and subprocess has a timeout.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import requests.utils

from proxy_component.clients import CLIENTS, Client
from proxy_component.noproxy import Kind, NoProxy
from proxy_component.render.env import ProxyValues, env_pairs
from proxy_component.settings import Settings, load_settings, parse_settings

ROOT = Path(__file__).resolve().parents[2]
IPV6_EXAMPLE = ROOT / "examples" / "ipv6-only" / "proxy.yaml"
TIMEOUT = 5.0  # seconds, for every socket, request and subprocess

# A realistic IPv4 cluster: every test that names "the rendered value" means str(realistic().no_proxy()).
REALISTIC: dict[str, Any] = {
    "cluster": {
        "name": "prod",
        "dnsDomain": "k8s.internal",
        "podCidrs": ["10.244.0.0/16"],
        "serviceCidrs": ["10.96.0.0/12"],
        "nodeCidrs": ["192.168.0.0/24"],
        "apiServerIps": ["10.96.0.1"],
    },
    "proxy": {"noProxy": [".corp.example"]},
}

# The names every test expects NO_PROXY to bypass, with why.
BYPASSED_NAMES = (
    "kubernetes.default.svc",  # ".svc" (search-path name)
    "my-svc.my-ns.svc.k8s.internal",  # the cluster domain
    "api.k8s.internal",  # the cluster domain
    "k8s.internal",  # the cluster domain itself
    "registry.corp.example",  # proxy.noProxy ".corp.example"
    "localhost",  # loopback
)
PROXIED_NAME = "github.com"

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy")


def realistic() -> Settings:
    return parse_settings(REALISTIC)


def ipv6_example() -> Settings:
    return load_settings(str(IPV6_EXAMPLE))


def client(name: str) -> Client:
    """The CLIENTS row for `name`; a KeyError here means clients.py dropped a client these tests verify."""
    found = [c for c in CLIENTS if c.name == name]
    if len(found) != 1:
        raise KeyError(f"clients.CLIENTS has {len(found)} rows named {name!r}")
    return found[0]


def without_ipv6_cidrs(no_proxy: NoProxy) -> NoProxy:
    """The same list minus its IPv6 CIDRs: the per-workload NO_PROXY the httpx warning recommends."""
    kept = tuple(e for e in no_proxy.entries if not (e.kind is Kind.CIDR and ":" in e.value))
    return NoProxy(kept)


def has_ipv6_cidr(no_proxy: NoProxy) -> bool:
    return any(e.kind is Kind.CIDR and (n := e.network) is not None and n.version == 6 for e in no_proxy.entries)


def pod_env(proxy_url: str, no_proxy: str) -> dict[str, str]:
    """The proxy variables a pod gets (render.env, both spellings), with a loopback proxy URL."""
    pairs = env_pairs(ProxyValues(http_proxy=proxy_url, https_proxy=proxy_url, no_proxy=no_proxy))
    return {name: str(value) for name, value in pairs}


def clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove every proxy variable (any spelling) and CGI's REQUEST_METHOD, so only what a test sets counts."""
    for key in list(os.environ):
        if key.lower() in PROXY_VARS or key == "REQUEST_METHOD":
            monkeypatch.delenv(key)


def set_pod_env(monkeypatch: pytest.MonkeyPatch, proxy_url: str, no_proxy: str) -> None:
    clear_proxy_env(monkeypatch)
    for name, value in pod_env(proxy_url, no_proxy).items():
        monkeypatch.setenv(name, value)


# --- loopback HTTP servers ------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One request a server answered: its request line and Host header."""

    requestline: str
    host: str


class _RecordingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], marker: str) -> None:
        self.marker = marker
        self.hits: list[Hit] = []
        self.lock = threading.Lock()
        super().__init__(address, _RecordingHandler)


class _RecordingServer6(_RecordingServer):
    address_family = socket.AF_INET6


class _RecordingHandler(BaseHTTPRequestHandler):
    """Answers any GET with `<marker> <request line>`; never opens a connection of its own."""

    timeout = TIMEOUT
    server: _RecordingServer

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.hits.append(Hit(self.requestline, self.headers.get("Host", "")))
        body = f"{self.server.marker} {self.requestline}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class LoopbackServer:
    """A recording HTTP server on a loopback address and an ephemeral port."""

    address: str
    marker: str
    _server: _RecordingServer = field(init=False)
    _thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        ip = ipaddress.ip_address(self.address)
        if not ip.is_loopback:
            raise ValueError(f"{self.address} is not a loopback address")
        cls = _RecordingServer6 if ip.version == 6 else _RecordingServer
        self._server = cls((self.address, 0), self.marker)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def hits_for(self, path: str) -> list[Hit]:
        with self._server.lock:
            return [h for h in self._server.hits if path in h.requestline]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(TIMEOUT)


@contextmanager
def loopback_server(address: str, marker: str) -> Iterator[LoopbackServer]:
    server = LoopbackServer(address, marker)
    try:
        yield server
    finally:
        server.close()


def probe_path() -> str:
    """A unique path, so a hit can be attributed to exactly one request."""
    return f"/probe-{secrets.token_hex(6)}"


# --- a resolver that never leaves loopback --------------------------------------------------

_real_getaddrinfo = socket.getaddrinfo


def loopback_getaddrinfo(names: Mapping[str, str]) -> Callable[..., Any]:
    """A socket.getaddrinfo that maps `names` to loopback addresses and refuses everything else."""

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        text = host.decode() if isinstance(host, bytes) else str(host)
        text = text.strip("[]")
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            if text.lower() not in names:
                raise socket.gaierror(socket.EAI_NONAME, f"test resolver: {text!r} is not a test name") from None
            return _real_getaddrinfo(names[text.lower()], port, *args, **kwargs)
        if not address.is_loopback:
            raise socket.gaierror(socket.EAI_NONAME, f"test resolver: {text} is not loopback; refusing")
        return _real_getaddrinfo(text, port, *args, **kwargs)

    return getaddrinfo


# --- the Python clients ---------------------------------------------------------------------


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# Documented-by-use in CPython but missing from typeshed; on Linux it is what urllib.request.proxy_bypass
# (called by ProxyHandler.proxy_open) is bound to.
_proxy_bypass_environment: Callable[[str, Mapping[str, str]], object] = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]


def urllib_bypasses(host: str, no_proxy: str) -> bool:
    """urllib's own decision: proxy_bypass_environment on the Request's host, with the proxies read from the env."""
    proxies = urllib.request.getproxies()
    assert proxies.get("no") == no_proxy, f"urllib read no_proxy={proxies.get('no')!r}"
    request_host = urllib.request.Request(f"http://{_url_host(host)}/").host
    return bool(_proxy_bypass_environment(request_host, proxies))


def requests_bypasses(host: str, no_proxy: str) -> bool:
    return requests.utils.should_bypass_proxies(f"http://{_url_host(host)}/", no_proxy=no_proxy)


def httpx_bypasses(host: str, no_proxy: str) -> bool:
    """Which transport httpx.Client (built from the env) picks: its direct pool, or the env's http:// proxy mount.

    httpx 0.28 has no public API for this; `_transport_for_url` and `_mounts` are what `send` uses.
    """
    with httpx.Client() as c:
        chosen = c._transport_for_url(httpx.URL(f"http://{_url_host(host)}/"))
        proxy_mounts = [t for p, t in c._mounts.items() if p.pattern == "http://"]
        assert len(proxy_mounts) == 1, "httpx did not mount the env's http proxy"
        assert proxy_mounts[0] is not None
        if chosen is c._transport:
            return True
        assert chosen is proxy_mounts[0], f"httpx chose an unexpected transport {chosen!r} for {host}"
        return False


def urllib_fetch(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler())  # reads the env, as urlopen does
    with opener.open(url, timeout=TIMEOUT) as response:
        body: bytes = response.read()
    return body.decode()


def requests_fetch(url: str) -> str:
    with requests.Session() as session:
        return session.get(url, timeout=TIMEOUT).text


def httpx_fetch(url: str) -> str:
    with httpx.Client(timeout=TIMEOUT) as c:
        return c.get(url).text


@dataclass(frozen=True)
class PythonClient:
    """A Python HTTP client under test, tied to its CLIENTS row by name."""

    name: str
    bypasses: Callable[[str, str], bool]
    fetch: Callable[[str], str]

    @property
    def row(self) -> Client:
        return client(self.name)


PYTHON_CLIENTS = (
    PythonClient("Python urllib", urllib_bypasses, urllib_fetch),
    PythonClient("Python requests", requests_bypasses, requests_fetch),
    PythonClient("Python httpx", httpx_bypasses, httpx_fetch),
)


# --- curl -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Curl:
    path: str
    version: str

    def get(self, url: str, env: Mapping[str, str], resolve: tuple[str, ...] = ()) -> str:
        """`curl -s --max-time 5 URL` with exactly `env` (plus PATH); returns the body, fails the test on error."""
        args = [self.path, "-q", "-s", "-S", "--max-time", "5"]  # -q first: ignore any .curlrc
        for item in resolve:
            args += ["--resolve", item]
        args.append(url)
        full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", **env}
        result = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=TIMEOUT + 5, check=False)
        if result.returncode != 0:
            pytest.fail(f"curl {self.version} exited {result.returncode} for {url}: {result.stderr.strip()}")
        return result.stdout


def find_curl() -> Curl:
    path = shutil.which("curl")
    if path is None:
        pytest.fail("curl is not installed: run scripts/test, or `apt-get install -y curl` (Debian)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=TIMEOUT, check=True).stdout
    match = re.match(r"curl (\d+\.\d+\.\d+)", out)
    if match is None:
        pytest.fail(f"cannot read curl's version from {out.splitlines()[:1]}")
    return Curl(path, match.group(1))
