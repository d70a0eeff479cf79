"""The `check --probe` pod's script run for real, and its transcripts judged: Debian's tinyproxy with the rendered
config, busybox's sh, nc, base64 and timeout (the applets the project's image links; tests/image runs them from the image
itself), and local servers.

Everything is on loopback. tinyproxy runs in a mount namespace of its own whose /etc/resolv.conf names 127.0.0.1,
where nothing answers: a name that is not in /etc/hosts fails to resolve without a packet leaving the machine.
The script is the one the pod runs, byte for byte, with the node's address 127.0.0.1 and its scratch directory a
temporary one (PROBE_DIR; the pod's is /probe).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from proxy_component.dataplane.config import tinyproxy_conf, tinyproxy_filter
from proxy_component.probe import (
    ProbeResult,
    Target,
    TlsClient,
    classify,
    parse_targets,
    parse_transcript,
    pod_script,
    tls_client,
)
from proxy_component.settings import Settings
from tests.integration.test_tinyproxy_live import example_settings, with_port
from tests.pki import Issued, make_ca, make_leaf

WAIT = 3  # seconds per URL in the script
APPLETS = ("sh", "nc", "base64", "timeout", "sleep", "cat")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Tls(socketserver.ThreadingTCPServer):
    """A TLS origin on 127.0.0.1 with a leaf for 127.0.0.1 signed by `issuer`; it answers one line and closes."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, issuer: Issued, tmp: Path, maximum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> None:
        leaf = make_leaf(issuer, "127.0.0.1")
        cert, key = tmp / f"leaf-{id(self)}.pem", tmp / f"key-{id(self)}.pem"
        cert.write_text(leaf.cert_pem)
        key.write_text(leaf.key_pem)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.maximum_version = maximum
        self.context.load_cert_chain(cert, key)
        super().__init__(("127.0.0.1", 0), _TlsHandler)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


class _TlsHandler(socketserver.BaseRequestHandler):
    server: _Tls

    def handle(self) -> None:
        self.request.settimeout(WAIT * 2)
        with contextlib.suppress(OSError), self.server.context.wrap_socket(self.request, server_side=True) as conn:
            conn.sendall(b"hello\n")


class _Silent(socketserver.ThreadingTCPServer):
    """Accepts and never answers (a black hole behind an open port)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SilentHandler)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


class _SilentHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(WAIT * 3)
        with contextlib.suppress(OSError):
            while self.request.recv(4096):
                pass


class _Auth(socketserver.ThreadingTCPServer):
    """An upstream proxy that wants credentials: 407 to every request."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _AuthHandler)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


class _AuthHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(WAIT)
        with contextlib.suppress(OSError):
            while self.rfile.readline(8192).strip():
                pass
            self.wfile.write(
                b'HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm="corp"\r\n'
                b"Content-Length: 0\r\nConnection: close\r\n\r\n"
            )


class _Http(socketserver.ThreadingTCPServer):
    """A plain HTTP origin: 204 to everything."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _HttpHandler)

    @property
    def port(self) -> int:
        port: int = self.server_address[1]
        return port


class _HttpHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(WAIT)
        with contextlib.suppress(OSError):
            while self.rfile.readline(8192).strip():
                pass
            self.wfile.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def busybox_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PATH of busybox applets only."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.fail("busybox is not on PATH: the probe script runs busybox's applets (apt-get install busybox)")
    bin_dir = tmp_path_factory.mktemp("busybox-bin")
    for applet in APPLETS:
        (bin_dir / applet).symlink_to(busybox)
    return str(bin_dir)


class Proxy:
    def __init__(self, port: int, log: Path, proc: subprocess.Popen[bytes]) -> None:
        self.port, self.log, self.proc = port, log, proc

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[Callable[[Settings], Proxy]]:
    """tinyproxy with the rendered config (Port rewritten), its resolver pointing at loopback where nothing answers."""
    if shutil.which("tinyproxy") is None or shutil.which("unshare") is None:
        pytest.fail("tinyproxy and unshare are needed: apt-get install tinyproxy-bin util-linux")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings) -> Proxy:
        config_dir = tmp_path / f"config-{len(procs)}"
        config_dir.mkdir()
        deployment = settings.deployment.model_copy(update={"config_dir": str(config_dir)})
        settings = settings.model_copy(update={"deployment": deployment})
        (config_dir / "filter").write_text(tinyproxy_filter(settings))
        rendered = tinyproxy_conf(settings, settings.allowed_sources())
        port = settings.deployment.port
        if port == 8888:  # the default: another free one; a test that chose the port keeps the config as rendered
            port = _free_port()
            rendered = with_port(rendered, port)
        conf = config_dir / "tinyproxy.conf"
        conf.write_text(rendered)
        log = config_dir / "tinyproxy.log"
        script = f"mount --bind {resolv} /etc/resolv.conf && exec tinyproxy -d -c {conf}"
        with log.open("wb") as out:
            proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        procs.append(proc)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return Proxy(port, log, proc)
            time.sleep(0.05)
        pytest.fail(f"tinyproxy did not start: {log.read_text()}")

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_probe(
    proxy: Proxy, settings: Settings, urls: list[str], busybox_path: str, tmp_path: Path
) -> list[ProbeResult]:
    """The pod's script, run by busybox against `proxy`; its output judged as check judges a pod's log."""
    targets = parse_targets(urls)
    clients: dict[int, TlsClient] = {
        i: tls_client(t.host, settings.trusted_ca) for i, t in enumerate(targets) if t.scheme == "https"
    }
    hellos = [clients[i].hello if i in clients else None for i in range(len(targets))]
    script = pod_script(targets, hellos, proxy.port, WAIT)
    scratch = tmp_path / f"scratch-{time.monotonic_ns()}"
    scratch.mkdir()
    env = {"PATH": busybox_path, "PROXY_HOST": "127.0.0.1", "PROBE_DIR": str(scratch)}
    started = time.monotonic()
    done = subprocess.run([f"{busybox_path}/sh", "-c", script], env=env, capture_output=True, text=True,
                          timeout=WAIT * 4)  # fmt: skip
    assert time.monotonic() - started < WAIT + 2, "every URL runs at once, each within WAIT seconds"
    assert done.returncode == 0, done.stderr
    transcripts = parse_transcript(done.stdout, len(targets))
    assert transcripts is not None, done.stdout
    log = proxy.log_text()
    upstream = settings.proxy.upstream is not None
    return [
        classify("node-a", t, transcripts[i], wait=WAIT, tls=clients.get(i), proxy_log=log, upstream=upstream)
        for i, t in enumerate(targets)
    ]


CONFIGURED = make_ca("Corp Inspecting CA")
OTHER = make_ca("Somebody Else's CA")


def _settings(ports: list[int], upstream: str | None = None, **deployment: Any) -> Settings:
    """The example with a Filter for blocked.example, these CONNECT ports and an upstream with the configured CA.

    Without `upstream` the upstream is a closed port that no probe reaches: every host of the first test is in
    noUpstream, so tinyproxy connects to it directly.
    """
    deployment |= {"denyDestinations": [r"^169\.254\.", r"^blocked\.example$"], "connectPorts": [443, *ports]}
    direct = ["127.0.0.1", "blocked.example", "nothing.invalid"] if upstream is None else []
    url = upstream or f"http://127.0.0.1:{_free_port()}"
    proxy = {"upstream": {"url": url, "noUpstream": direct, "trustedCa": CONFIGURED.cert_pem}}
    return example_settings(deployment=deployment, proxy=proxy)


def test_each_outcome_from_a_real_tinyproxy(
    start_proxy: Callable[[Settings], Proxy], busybox_path: str, tmp_path: Path
) -> None:
    closed = _free_port()
    with (
        serving(_Tls(CONFIGURED, tmp_path)) as good,
        serving(_Tls(CONFIGURED, tmp_path, ssl.TLSVersion.TLSv1_2)) as good12,
        serving(_Tls(OTHER, tmp_path)) as bad,
        serving(_Tls(OTHER, tmp_path, ssl.TLSVersion.TLSv1_2)) as bad12,
        serving(_Silent()) as silent,
        serving(_Http()) as plain,
    ):
        ports = [good.port, good12.port, bad.port, bad12.port, silent.port, closed]
        settings = _settings(ports)
        assert settings.trusted_ca == CONFIGURED.cert_pem
        proxy = start_proxy(settings)
        urls = {
            "ok": f"https://127.0.0.1:{good.port}/",
            "ok-tls12": f"https://127.0.0.1:{good12.port}/",
            "filtered": "https://blocked.example/",
            "filtered-http": "http://blocked.example/",
            "dns": "https://nothing.invalid/",
            "refused": f"https://127.0.0.1:{closed}/",
            "tls": f"https://127.0.0.1:{bad.port}/",
            "tls12": f"https://127.0.0.1:{bad12.port}/",
            "timeout": f"https://127.0.0.1:{silent.port}/",
            "port": "https://127.0.0.1:1/",
            "http": f"http://127.0.0.1:{plain.port}/x",
        }
        results = dict(zip(urls, run_probe(proxy, settings, list(urls.values()), busybox_path, tmp_path), strict=True))
    outcome = {key: (r.outcome, r.detail) for key, r in results.items()}
    assert outcome["ok"] == ("ok", "TLSv1.3: the certificate verifies against proxy.upstream.trustedCa")
    assert outcome["ok-tls12"] == ("ok", "TLS 1.2: the certificate verifies against proxy.upstream.trustedCa")
    assert outcome["filtered"] == ("filtered", "tinyproxy's Filter refused blocked.example: HTTP/1.1 403 Filtered")
    assert outcome["filtered-http"][0] == "filtered"
    assert outcome["dns"] == (
        "dns-failure",
        "tinyproxy could not resolve nothing.invalid (HTTP/1.1 500 Unable to connect; its log: DNS)",
    )
    assert outcome["refused"] == (
        "connect-failed",
        f"tinyproxy could not connect to 127.0.0.1:{closed} (HTTP/1.1 500 Unable to connect)",
    )
    for key in ("tls", "tls12"):
        assert outcome[key] == (
            "tls-failure",
            "the certificate does not verify against proxy.upstream.trustedCa: unable to get local issuer certificate",
        ), key
    assert outcome["timeout"] == (
        "timeout",
        f"the tunnel opened but the origin sent no TLS answer within {WAIT} s",
    )
    assert outcome["port"] == (
        "not-allowed",
        "tinyproxy refused: HTTP/1.1 403 Access violation (The CONNECT method not allowed with the port you tried "
        "to use.)",
    )
    assert outcome["http"] == ("ok", "the origin answered HTTP/1.1 204 No Content")
    assert "Could not retrieve address info for nothing.invalid:443" in proxy.log_text()


def test_an_upstream_that_refuses_and_one_that_wants_credentials(
    start_proxy: Callable[[Settings], Proxy], busybox_path: str, tmp_path: Path
) -> None:
    closed = _free_port()
    refusing = _settings([], upstream=f"http://127.0.0.1:{closed}")
    proxy = start_proxy(refusing)
    (result,) = run_probe(proxy, refusing, ["https://registry.example/"], busybox_path, tmp_path)
    assert (result.outcome, result.detail) == (
        "upstream-refused",
        "tinyproxy could not reach the upstream proxy: HTTP/1.1 502 Unable to connect to upstream proxy",
    )
    with serving(_Auth()) as auth:
        wanting = _settings([], upstream=f"http://127.0.0.1:{auth.port}")
        proxy = start_proxy(wanting)
        results = run_probe(proxy, wanting, ["https://registry.example/", "http://registry.example/"], busybox_path,
                            tmp_path)  # fmt: skip
    assert [(r.outcome, r.detail) for r in results] == [
        ("upstream-auth", "the upstream proxy wants credentials: HTTP/1.1 407 Proxy Authentication Required")
    ] * 2


def test_a_proxy_that_is_not_there_and_a_pod_that_never_finished(busybox_path: str, tmp_path: Path) -> None:
    port = _free_port()
    (target,) = parse_targets(["http://example.test/"])
    script = pod_script([target], [None], port, WAIT)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"PATH": busybox_path, "PROXY_HOST": "127.0.0.1", "PROBE_DIR": str(scratch)}
    done = subprocess.run([f"{busybox_path}/sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    transcripts = parse_transcript(done.stdout, 1)
    assert transcripts is not None, done.stdout
    result = classify("node-a", target, transcripts[0], wait=WAIT)
    assert result.outcome == "proxy-unreachable"
    assert "Connection refused" in result.detail
    assert parse_transcript(done.stdout.replace("proxy-component-probe end", ""), 1) is None
    assert classify("node-a", target, None, wait=WAIT).outcome == "timeout"


def test_the_script_is_what_the_pod_runs_but_for_its_scratch_directory() -> None:
    target = Target("https://a.example/", "https", "a.example", 443, "/")
    script = pod_script([target], [b"\x16\x03\x01"], 8888, 10)
    assert 'cd "${PROBE_DIR:-/probe}"' in script
    assert 'printf %s "$3" | base64 -d' in script
    assert "\nprobe 0 'CONNECT a.example:443 HTTP/1.1\\r\\nHost: a.example:443\\r\\n\\r\\n' FgMB &\n" in script


# --- check.probe_cluster end to end, with a stand-in for the API server and kubelet -----------------------------


class _Kubelet:
    """The core API calls probe_cluster makes, answered here; a created probe pod's command really runs (busybox
    against the real tinyproxy, as its node's kubelet would run it) and its output is the pod's log."""

    def __init__(self, proxy: Proxy, busybox_path: str, scratch: Path) -> None:
        self.proxy, self.busybox_path, self.scratch = proxy, busybox_path, scratch
        self.pods: dict[str, Any] = {
            "http-proxy-a1b2c": _pod("http-proxy-a1b2c", "node-a", "Running", {"app": "http-proxy"}, "kube-system"),
        }
        self.logs: dict[str, str] = {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def list_namespaced_pod(self, namespace: str, label_selector: str = "", **kwargs: Any) -> Any:
        key, _, value = label_selector.partition("=")
        items = [p for p in self.pods.values() if p.metadata.labels.get(key) == value and p.namespace == namespace]
        return SimpleNamespace(items=items, metadata=SimpleNamespace(_continue=None))

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any]) -> Any:
        assert namespace == body["metadata"]["namespace"]
        self.created.append(body)
        name = body["metadata"]["name"]
        command = body["spec"]["containers"][0]["command"]
        scratch = self.scratch / name
        scratch.mkdir()
        env = {"PATH": self.busybox_path, "PROXY_HOST": "127.0.0.1", "PROBE_DIR": str(scratch)}
        done = subprocess.run([f"{self.busybox_path}/sh", *command[1:]], env=env, capture_output=True, text=True,
                              timeout=WAIT * 4)  # fmt: skip
        self.logs[name] = done.stdout
        phase = "Succeeded" if done.returncode == 0 else "Failed"
        self.pods[name] = _pod(name, body["spec"]["nodeName"], phase, body["metadata"]["labels"], namespace)
        return self.pods[name]

    def read_namespaced_pod_log(self, name: str, namespace: str, container: str, **_: Any) -> str:
        assert self.pods[name].namespace == namespace
        if name.startswith("http-proxy-"):
            assert container == "tinyproxy"
            return self.proxy.log_text()
        assert container == "probe"
        return self.logs[name]

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
        assert grace_period_seconds == 0
        assert self.pods[name].namespace == namespace
        self.deleted.append(name)
        del self.pods[name]


def _pod(name: str, node: str, phase: str, labels: dict[str, str], namespace: str) -> Any:
    return SimpleNamespace(
        namespace=namespace,
        metadata=SimpleNamespace(name=name, labels=labels, deletion_timestamp=None),
        spec=SimpleNamespace(node_name=node),
        status=SimpleNamespace(phase=phase),
    )


def test_probe_cluster_end_to_end_through_a_real_tinyproxy(
    start_proxy: Callable[[Settings], Proxy], busybox_path: str, tmp_path: Path
) -> None:
    """probe_cluster's own path: the pod it builds, the script run as its kubelet would run it, the log read back
    and judged with the proxy pod's log, the TLS answer fed into the client that made the ClientHello, the pod
    deleted."""
    from proxy_component.live import Cluster, probe_cluster

    port = _free_port()
    with serving(_Tls(CONFIGURED, tmp_path)) as good, serving(_Tls(OTHER, tmp_path)) as bad:
        settings = _settings([good.port, bad.port], port=port)
        assert settings.deployment.port == port
        proxy = start_proxy(settings)
        assert proxy.port == port
        kubelet = _Kubelet(proxy, busybox_path, tmp_path)
        cluster = Cluster({"core": kubelet}, server="https://api.test")
        urls = [f"https://127.0.0.1:{good.port}/", f"https://127.0.0.1:{bad.port}/", "https://nothing.invalid/"]
        results = probe_cluster(settings, cluster, urls, wait=WAIT, deadline=WAIT + 10)
    assert [(r.node, r.url, r.outcome) for r in results] == [
        ("node-a", urls[0], "ok"),
        ("node-a", urls[1], "tls-failure"),
        ("node-a", urls[2], "dns-failure"),
    ]
    (pod,) = kubelet.created
    assert pod["spec"]["nodeName"] == "node-a"
    assert pod["metadata"]["namespace"] == "proxy-component-probe", "the probe's own namespace, not the proxy's"
    assert kubelet.deleted == [pod["metadata"]["name"]]
    assert list(kubelet.pods) == ["http-proxy-a1b2c"]
