"""Each known flaw of tinyproxy 1.11.2 and the two denial-of-service attacks, as exact request bytes, against upstream's
tag 1.11.2 built from the shared archive with no patch (what Debian 13's tinyproxy-bin 1.11.2-1 is) and against the
image's own binary: the first must show the flaw (so each test can fail), the second must refuse or survive it.

Both binaries run from the image's root filesystem (the image's libc), as the image's user, with the limits of the
rendered tinyproxy.conf, in a network namespace of the test's own: tinyproxy on 10.99.0.1 and loopback, the origin
on loopback (ports 80 and 443 as well: the port overflow lands there), clients on loopback, or, for the
connection flood, in a second namespace at 10.99.0.2 and 10.99.0.3 behind a veth pair. The image's run loads the
rendered nftables table with the init container's own command and the image's nft, as the DaemonSet does.
`test_zz_the_table` at the end prints what happened to each, per binary (the closing note's table).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxy_component.dataplane.firewall import firewall_command, firewall_rules
from proxy_component.settings import Settings, parse_settings
from tests.image.test_build import IMAGE_PATH, Built, _scripts_image, _unpack

ROOT = Path(__file__).resolve().parents[2]
PROXY_IP, ATTACKER_IP, NEIGHBOUR_IP, ORIGIN_IP = "10.99.0.1", "10.99.0.2", "10.99.0.3", "10.99.0.4"
PORT = 8888
MEMORY_LIMIT = 128 * 2**20  # the DaemonSet's limit before this change, under which the header flood killed it
RESULTS: dict[str, dict[str, str]] = {}
_SERIAL = itertools.count()


def _settings() -> Settings:
    cluster = {"name": "t", "podCidrs": ["10.99.0.0/24"], "serviceCidrs": ["10.96.0.0/12"]}
    return parse_settings({"cluster": cluster, "deployment": {"connectPorts": [443]}})


def _conf(max_clients: int = 1024, flavour: str = "image") -> str:
    # The rendered config's limits and Allow; no Filter (these attacks do not need a name) and the origin on loopback
    # is reachable: the kernel rules of the egress chain are not loaded for these runs, only the client limits'. The
    # image's tinyproxy counts each client's share itself (patch 0006), with the rendered default of 16; 1.11.2 does
    # not know the directive.
    share = "MaxConnectionsPerClient 16\nLoopbackReserve 32\n" if flavour == "image" else ""
    return share + textwrap.dedent(
        f"""\
        Port {PORT}
        Timeout 600
        MaxClients {max_clients}
        LogLevel Notice
        DisableViaHeader Yes
        Allow 127.0.0.1
        Allow 10.99.0.0/24
        ConnectPort 443
        StatHost "proxy-component.invalid"
        """
    )


@dataclass
class Proxy:
    flavour: str
    root: Path
    netns: str
    peer: str
    process: subprocess.Popen[bytes]
    cgroup: Path
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *command], capture_output=True, text=True, timeout=120
        )

    def memory_peak(self) -> int:
        return int((self.cgroup / "memory.max_usage_in_bytes").read_text())


def _in_netns(netns: str, code: str) -> subprocess.CompletedProcess[str]:
    """Python code run in the test's network namespace (the clients and the origin live there)."""
    return subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", code], capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Built:
    built = _unpack(_scripts_image("amd64"), tmp_path_factory.mktemp("attacks-image"))
    for directory in ("etc/tinyproxy", "probe"):
        (built.root / directory).mkdir(exist_ok=True)
    (built.root / "etc/resolv.conf").write_text("nameserver 127.0.0.53\n")
    baseline = _scripts_image("tinyproxy", "1.11.2", "amd64")
    (built.root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (built.root / "usr/local/bin/tinyproxy-1.11.2").write_bytes(baseline.read_bytes())
    (built.root / "usr/local/bin/tinyproxy-1.11.2").chmod(0o755)
    return built


@contextlib.contextmanager
def proxy(image_root: Built, flavour: str, *, rules: bool = False, max_clients: int = 1024) -> Iterator[Proxy]:
    """tinyproxy (`image` or `1.11.2`) in a namespace of its own, with a veth to an attacker's namespace, in a memory
    cgroup with the DaemonSet's old 128 MiB limit; the rendered client limits loaded when `rules`."""
    tag = f"{os.getpid() % 100000}{next(_SERIAL)}{flavour.replace('.', '')[:3]}"
    netns, peer = f"pca-{tag}", f"pcb-{tag}"
    root = image_root.root
    (root / "etc/tinyproxy/tinyproxy.conf").write_text(_conf(max_clients, flavour))
    cgroup = Path(f"/sys/fs/cgroup/memory/pc-attack-{tag}")
    for name in (netns, peer):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        setup = [
            ["ip", "link", "add", f"a{tag}"[:15], "type", "veth", "peer", "name", f"b{tag}"[:15]],
            ["ip", "link", "set", f"a{tag}"[:15], "netns", netns],
            ["ip", "link", "set", f"b{tag}"[:15], "netns", peer],
            ["ip", "-n", netns, "addr", "add", f"{PROXY_IP}/24", "dev", f"a{tag}"[:15]],
            ["ip", "-n", peer, "addr", "add", f"{ATTACKER_IP}/24", "dev", f"b{tag}"[:15]],
            ["ip", "-n", peer, "addr", "add", f"{NEIGHBOUR_IP}/24", "dev", f"b{tag}"[:15]],
            ["ip", "-n", peer, "addr", "add", f"{ORIGIN_IP}/24", "dev", f"b{tag}"[:15]],
            *(["ip", "-n", ns, "link", "set", dev, "up"] for ns, dev in ((netns, "lo"), (peer, "lo"))),
            ["ip", "-n", netns, "link", "set", f"a{tag}"[:15], "up"],
            ["ip", "-n", peer, "link", "set", f"b{tag}"[:15], "up"],
        ]
        for command in setup:
            subprocess.run(command, check=True)
        if rules:
            (root / "etc/tinyproxy/nftables.conf").write_text(_rendered_table(max_clients))
            env = {"R": str(root), "PATH": IMAGE_PATH}
            from tests.image.test_build import in_image

            load = subprocess.run(["ip", "netns", "exec", netns, *in_image(image_root, firewall_command(_settings()),
                                                                                user="0:0")],
                                  env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
            assert load.returncode == 0, load.stderr
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(MEMORY_LIMIT))
        binary = "/usr/bin/tinyproxy" if flavour == "image" else "/usr/local/bin/tinyproxy-1.11.2"
        log = root.parent / f"tinyproxy-{tag}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", netns, "chroot", "--userspec=61888:61888", str(root), binary, "-d", "-c",
                 "/etc/tinyproxy/tinyproxy.conf"],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        # `ip netns exec` and chroot exec in place: the PID is tinyproxy's (its threads follow it into the cgroup).
        (cgroup / "cgroup.procs").write_text(str(process.pid))
        started = _in_netns(
            netns,
            f"""
import socket, time
for _ in range(200):
    try:
        socket.create_connection(("127.0.0.1", {PORT}), timeout=1).close(); break
    except OSError: time.sleep(0.05)
else: raise SystemExit("tinyproxy did not listen")
""",
        )
        assert started.returncode == 0, started.stderr + log.read_text(errors="replace")
        yield Proxy(flavour, root, netns, peer, process, cgroup, log)
    finally:
        with contextlib.suppress(Exception):
            if "process" in locals():
                process.kill()
                process.wait(timeout=10)
        for name in (netns, peer):
            subprocess.run(["ip", "netns", "delete", name], check=False)
        for _ in range(50):
            try:
                cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def _rendered_table(max_clients: int) -> str:
    """The rendered table, both chains, for this namespace's cluster (10.99.0.0/24 as the pod range): the origin of
    the connection flood, 10.99.0.4, is in it, so tinyproxy may reach the cluster's ranges here."""
    settings = parse_settings(
        {
            "cluster": {
                "name": "t",
                "podCidrs": ["10.99.0.0/24"],
                "serviceCidrs": ["10.96.0.0/12"],
                "maxPodsPerNode": 20,
            },
            "deployment": {"maxClients": max_clients, "firewall": {"allowClusterDestinations": True}},
        }
    )
    return firewall_rules(settings)


EXCHANGE = """
import socket, sys, threading, time, json
received = []
def serve(port):
    s = socket.create_server(("127.0.0.1", port), backlog=64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()
def one(c):
    data = b""
    c.settimeout(1.5)
    try:
        while True:
            chunk = c.recv(65536)
            if not chunk: break
            data += chunk
            if data.endswith(b"\\r\\n\\r\\n") and b"content-length" not in data.lower() and b"chunked" not in data.lower():
                break
    except OSError: pass
    try: c.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")
    except OSError: pass
    c.close()
    received.append(data)
for port in (80, 443, 8080):
    threading.Thread(target=serve, args=(port,), daemon=True).start()
time.sleep(0.2)
request = bytes.fromhex(sys.argv[1])
c = socket.create_connection(("127.0.0.1", 8888), timeout=5)
c.sendall(request)
answer = b""
c.settimeout(4)
try:
    while True:
        chunk = c.recv(65536)
        if not chunk: break
        answer += chunk
except OSError: pass
time.sleep(0.5)
print(json.dumps({"answer": answer.decode("latin-1"), "origin": [r.decode("latin-1") for r in received]}))
"""


def exchange(p: Proxy, request: bytes) -> tuple[str, list[str]]:
    """Send `request` to tinyproxy; return its answer and what the origin received on each connection."""
    import json

    done = subprocess.run(["ip", "netns", "exec", p.netns, "python3", "-c", EXCHANGE, request.hex()],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    return result["answer"], result["origin"]


def status(answer: str) -> str:
    return answer.split("\r\n", 1)[0]


# --- the flaws, as exact bytes ------------------------------------------------------------------------------------

PORT_OVERFLOW = [
    b"CONNECT 127.0.0.1:65979 HTTP/1.1\r\nHost: 127.0.0.1:65979\r\n\r\n",
    b"CONNECT 127.0.0.1:4294967739 HTTP/1.1\r\nHost: 127.0.0.1:4294967739\r\n\r\n",
]
BODY = b"a=1"
CHUNK_SIZES = [
    b"POST http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nTransfer-Encoding: chunked\r\n\r\n"
    + size
    + b"\r\n"
    + BODY
    + b"\r\n0\r\n\r\n"
    for size in (b"7fffffffffffffff", b"-3")
]
CHUNKED_CASE = (
    b"POST http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nTransfer-Encoding: Chunked\r\n\r\n"
    b"3\r\na=1\r\n0\r\n\r\n"
)
SMUGGLE = (
    b"POST http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 41\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
)
SPACE_BEFORE_COLON = (
    b"POST http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length : 41\r\n\r\n"
    b"GET /admin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
)


@pytest.fixture(scope="module", params=["1.11.2", "image"])
def each(request: pytest.FixtureRequest, image_root: Built) -> Iterator[Proxy]:
    with proxy(image_root, request.param) as p:
        yield p


def _record(case: str, flavour: str, what: str) -> None:
    RESULTS.setdefault(case, {})[flavour] = what


def test_cve_2025_63938_connect_ports_overflow_to_443(each: Proxy) -> None:
    """1.11.2 reads :65979 and :4294967739 as 443 (an integer overflow) and opens a tunnel there. Upstream's fix
    (3c0fde9) would take them as the default port, 443 again; the image's patch 0003 refuses them (400) and connects
    nowhere."""
    for request in PORT_OVERFLOW:
        answer, origin = exchange(each, request)
        port = request.split(b" ")[1].decode()
        tunnel = answer.split("\r\n\r\n", 1)[-1].startswith("HTTP/1.1 200 OK")  # the origin on 443 answered
        _record(f"CVE-2025-63938 CONNECT {port}", each.flavour, f"{status(answer)!r}, tunnel to 443: {tunnel}")
        if each.flavour == "1.11.2":
            assert status(answer) == "HTTP/1.1 200 Connection established", answer
            assert tunnel, answer
        else:
            assert status(answer) == "HTTP/1.1 400 Bad Request", answer
            assert not tunnel, answer
            assert origin == [], origin


FLOOD = """
import socket, sys
value = b"a" * 99_980 + b"\\r\\n"
c = socket.create_connection(("127.0.0.1", 8888), timeout=30)
c.sendall(b"GET http://127.0.0.1:8080/ HTTP/1.1\\r\\nHost: 127.0.0.1:8080\\r\\n")
sent = 0
try:
    for i in range(1500):
        header = b"X-Flood-%d: " % i + value
        c.sendall(header)
        sent += len(header)
except OSError as exc:
    print("stopped", sent, exc.__class__.__name__)
answer = b""
c.settimeout(5)
try:
    while chunk := c.recv(65536):
        answer += chunk
except OSError:
    pass
print("answer", answer.split(b"\\r\\n", 1)[0].decode("latin-1"))
"""


@pytest.mark.parametrize("flavour", ["1.11.2", "image"])
def test_one_request_with_150_mb_of_headers(image_root: Built, flavour: str) -> None:
    """1,500 distinct headers of 100 kB, in a memory cgroup with the DaemonSet's former 128 MiB limit: 1.11.2 keeps
    every header in memory until the kernel OOM-kills it; the image's answers 431 once 64 KiB are read, closes the
    connection (the client's writes fail), logs the refusal and stays small. A proxy of its own: 1.11.2 dies."""
    with proxy(image_root, flavour) as each:
        _flood(each)


def _flood(each: Proxy) -> None:
    done = each.exec("python3", "-c", FLOOD)
    assert done.returncode == 0, done.stderr
    with contextlib.suppress(subprocess.TimeoutExpired):
        each.process.wait(timeout=10 if each.flavour == "1.11.2" else 0.5)
    peak = each.memory_peak()
    _record("150 MB of request headers (128 MiB cgroup)", each.flavour,
            f"{'alive' if each.alive() else f'killed ({each.process.returncode})'}, peak {peak / 2**20:.0f} MiB, "
            f"client: {' / '.join(done.stdout.splitlines())!r}")  # fmt: skip
    if each.flavour == "1.11.2":
        assert not each.alive(), (done.stdout, peak)
        assert each.process.returncode == -signal.SIGKILL, (done.stdout, peak)
        assert peak >= MEMORY_LIMIT - 2**20, peak
    else:
        assert each.alive(), done.stdout
        assert "stopped" in done.stdout, done.stdout
        assert "answer HTTP/1.0 431 Request Header Fields Too Large" in done.stdout, done.stdout
        assert peak < 16 * 2**20, peak
        assert "Refused a request whose headers exceed 65536 bytes from 127.0.0.1" in each.log.read_text(
            errors="replace"
        )


def test_cve_2026_3945_negative_and_overflowing_chunk_sizes(each: Proxy) -> None:
    for request in CHUNK_SIZES:
        answer, origin = exchange(each, request)
        size = request.split(b"\r\n\r\n", 1)[1].split(b"\r\n", 1)[0].decode()
        # The data after the size line, taken as a chunk of that size and relayed.
        forwarded = any(f"{size}\r\n{BODY.decode()}" in r for r in origin)
        _record(f"CVE-2026-3945 chunk size {size}", each.flavour, f"{status(answer)!r}, data relayed: {forwarded}")
        if each.flavour == "1.11.2":
            assert forwarded, (answer, origin)
        else:
            assert not forwarded, (answer, origin)
            assert not status(answer).endswith("200 OK"), (answer, origin)


def test_cve_2026_31842_capitalised_chunked(each: Proxy) -> None:
    answer, origin = exchange(each, CHUNKED_CASE)
    body_read = any(r.endswith("0\r\n\r\n") for r in origin)
    _record("CVE-2026-31842 Transfer-Encoding: Chunked", each.flavour, f"{status(answer)!r}, body relayed: {body_read}")
    if each.flavour == "1.11.2":
        assert not body_read, (answer, origin)
    else:
        assert body_read, (answer, origin)
        assert status(answer).endswith("200 OK"), (answer, origin)


def test_cve_2026_54387_content_length_and_chunked_together(each: Proxy) -> None:
    answer, origin = exchange(each, SMUGGLE)
    both = [r for r in origin if "content-length" in r.lower() and "transfer-encoding" in r.lower()]
    _record("CVE-2026-54387 Content-Length with chunked", each.flavour,
            f"{status(answer)!r}, both forwarded: {bool(both)}")  # fmt: skip
    if each.flavour == "1.11.2":
        assert both, (answer, origin)
    else:
        assert not both, (answer, origin)


def test_whitespace_before_a_headers_colon(each: Proxy) -> None:
    answer, origin = exchange(each, SPACE_BEFORE_COLON)
    verbatim = any("Content-Length : 41" in r for r in origin)
    _record("Content-Length : 41 (issue 623)", each.flavour, f"{status(answer)!r}, forwarded verbatim: {verbatim}")
    if each.flavour == "1.11.2":
        assert verbatim, (answer, origin)
    else:
        assert not verbatim, (answer, origin)
        assert origin == [], (answer, origin)
        assert status(answer).split(" ")[1] == "400", (answer, origin)
        assert "whitespace before a header's colon" in each.log.read_text(errors="replace")


ATTACKER = """
import selectors, socket, sys
held, refused, other = [], 0, 0
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind((sys.argv[2], 0))
    s.settimeout(5)
    try:
        s.connect(("10.99.0.1", 8888))
        held.append(s)
    except ConnectionRefusedError:
        refused += 1
        s.close()
    except OSError:
        other += 1
        s.close()
# The image's tinyproxy accepts a connection beyond the client's share and resets it at once (patch 0006): those
# become readable (a reset or an end); the held ones stay silent. Done once a second passes with none.
reset = 0
watch = selectors.DefaultSelector()
for s in held:
    watch.register(s, selectors.EVENT_READ)
while held:
    ready = watch.select(timeout=1.0)
    if not ready:
        break
    for key, _ in ready:
        s = key.fileobj
        try:
            gone = s.recv(1) == b""
        except OSError:
            gone = True
        if gone:
            watch.unregister(s)
            held.remove(s)
            s.close()
            reset += 1
print(len(held), refused, reset, other, flush=True)
sys.stdin.read()
"""

ORIGIN = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("10.99.0.4", 8080), H)
print("ready", flush=True)
srv.serve_forever()
"""

REQUEST = """
import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
s.settimeout(3)
try:
    s.connect((sys.argv[2], 8888))
    s.sendall(sys.argv[3].encode().decode("unicode_escape").encode("latin-1"))
    print(s.recv(4096).split(b"\\r\\n", 1)[0].decode("latin-1") or "closed")
except OSError as exc:
    print(exc.__class__.__name__)
"""


def _request(p: Proxy, netns: str, source: str, proxy_ip: str, request: str) -> str:
    done = subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", REQUEST, source, proxy_ip, request],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


PROBE = "GET / HTTP/1.1\\r\\nHost: proxy-component.invalid\\r\\n\\r\\n"
NEIGHBOUR = "GET http://10.99.0.4:8080/ HTTP/1.1\\r\\nHost: 10.99.0.4:8080\\r\\n\\r\\n"


@pytest.mark.parametrize("flavour", ["1.11.2", "image"])
def test_one_client_holding_1030_idle_connections(image_root: Built, flavour: str) -> None:
    """MaxClients 1024: one client (10.99.0.2) opens 1,030 idle connections. 1.11.2 alone (no kernel rules) is full:
    the kubelet's probe (loopback) and a neighbour pod (10.99.0.3) get no answer. The image's, behind the rendered
    table loaded by the init container's command: the client holds its share of 16, tinyproxy resets the rest at
    accept (the kernel's rate meter refuses some of them first), and the probe and the neighbour are served."""
    with proxy(image_root, flavour, rules=flavour == "image") as p:
        origin = subprocess.Popen(["ip", "netns", "exec", p.peer, "python3", "-c", ORIGIN], stdout=subprocess.PIPE,
                                  text=True)  # fmt: skip
        attacker = subprocess.Popen(["ip", "netns", "exec", p.peer, "python3", "-c", ATTACKER, "1030", ATTACKER_IP],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert origin.stdout is not None
            assert origin.stdout.readline().strip() == "ready"
            assert attacker.stdout is not None
            held, refused, reset, other = (int(n) for n in attacker.stdout.readline().split())
            probe = _request(p, p.netns, "127.0.0.1", "127.0.0.1", PROBE)
            neighbour = _request(p, p.peer, NEIGHBOUR_IP, PROXY_IP, NEIGHBOUR)
        finally:
            for proc in (attacker, origin):
                proc.kill()
                proc.wait()
        _record("1,030 idle connections from one client", flavour,
                f"held {held}, refused by the kernel {refused}, reset by tinyproxy {reset}, other {other}; probe: "
                f"{probe!r}; neighbour: {neighbour!r}")  # fmt: skip
        if flavour == "1.11.2":
            assert held == 1030, (held, refused, reset, other)
            assert not probe.startswith("HTTP/1.0 200"), probe
            assert " 204 " not in neighbour, neighbour
        else:
            # Beyond its share every connection is refused: by the kernel's rate meter, reset by tinyproxy at accept,
            # or (on a loaded machine) left to time out in the backlog while tinyproxy resets the others; never held.
            assert held == 16, (held, refused, reset, other)
            assert held + refused + reset + other == 1030, (held, refused, reset, other)
            assert probe.startswith("HTTP/1.0 200"), probe
            assert neighbour.endswith(" 204 No Content"), neighbour
            assert p.alive()


def test_zz_the_table() -> None:
    """Not a check of its own: prints each reproducer's outcome per binary (named to run last; -s shows it)."""
    rows = [f"| {case} | {r.get('1.11.2', '-')} | {r.get('image', '-')} |" for case, r in sorted(RESULTS.items())]
    print("\n| reproducer | upstream 1.11.2 | the image's binary |\n|---|---|---|\n" + "\n".join(rows))
    assert RESULTS, "the reproducers ran first"
