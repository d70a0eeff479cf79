"""The image lane's adversarial suite: each attack on the node's egress proxy as a class of parametrized tests, many
"pods" at once, against three tinyproxy binaries, each in a network namespace of its own with the DaemonSet's kernel
rules, its memory limit and its config rendered from the settings:

- `1.11.2`: upstream's tag with no patch (`scripts/image tinyproxy 1.11.2 amd64`);
- `previous`: the previous image's (patches 0001-0005: `scripts/image tinyproxy previous amd64`);
- `image`: the image's own, /usr/bin/tinyproxy of its root filesystem.

The settings are a cluster whose pod range, 10.99.0.0/24, holds the peer namespace's addresses: maxPodsPerNode 20 at
the default share of 16 connections, so MaxClients is derived (512, of which 32 are kept for loopback) and the memory
limit with it (the rendered DaemonSet's; the memory cgroup gets it). The older binaries refuse the new directives (MaxConnectionsPerClient, LoopbackReserve, the
three deadlines, and AccessLog and AccessLogRate of patch 0025), so their lines are left out, and the kernel rules they get are the previous layout's: a `ct count`
per source address (64) and one for all (MaxClients less the reserve), and rate meters without a timeout. The image
gets the rendered table as the DaemonSet loads it (per-source rate meters only; tinyproxy counts connections itself).

Each pod is an address of the peer namespace (10.99.0.10 on); the neighbour (10.99.0.3) sends plain requests to the
origin all along, and the kubelet's probe asks tinyproxy's stats host over loopback all along: for the image both
must be served under every attack. The origins are at 10.99.0.4: one answers 204, one accepts and never answers (the
silent one), and the SYNs to a third port are dropped. For the older binaries each test asserts the flaw where it
shows reliably (so the test can fail for them too) and records what happened otherwise. `test_zz_the_table` prints
each case per binary (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from proxy_component.dataplane.config import tinyproxy_conf
from proxy_component.dataplane.firewall import firewall_command, firewall_rules
from proxy_component.dataplane.lifecycle import restart_inputs
from proxy_component.dataplane.workload import daemonset
from proxy_component.settings import Settings, loopback_reserve, parse_settings, proxy_memory_needed, quantity_bytes
from tests.image.test_build import IMAGE_PATH, Built, _scripts_image, _unpack, in_image

PROXY_IP, SPARE_IP, NEIGHBOUR_IP, ORIGIN_IP = "10.99.0.1", "10.99.0.2", "10.99.0.3", "10.99.0.4"
POD_IPS = [f"10.99.0.{i}" for i in range(10, 40)]  # the pods: a source address each
OUTSIDE_IP = "10.98.0.5"  # outside every range of Allow (routed on the veth)
PROXY_LINK_LOCAL, PEER_LINK_LOCAL = "fe80::1", "fe80::2"  # a pod's link-local address: not in Allow either
SPOOF_ROUTED = "10.100.0.0/15"  # spoofed sources outside the pod range: the proxy's answers go to the peer, dropped
PORT = 8888
NORMAL_PORT, SILENT_PORT, DROPPED_PORT = 8080, 8081, 8082
FLAVOURS = ["1.11.2", "previous", "image"]
BINARIES = {"1.11.2": "/usr/local/bin/tinyproxy-1.11.2", "previous": "/usr/local/bin/tinyproxy-previous",
            "image": "/usr/bin/tinyproxy"}  # fmt: skip
NEW_DIRECTIVES = ("MaxConnectionsPerClient", "LoopbackReserve", "RequestHeadTimeout", "ConnectTimeout",
                  "ResponseHeadTimeout", "AccessLog")  # fmt: skip
PREVIOUS_SHARE = 64  # the previous layout's per-source `ct count`
MAX_PODS = 20
RESULTS: dict[str, dict[str, str]] = {}
_SERIAL = itertools.count()


def _settings(**deployment: Any) -> Settings:
    cluster = {"name": "t", "podCidrs": ["10.99.0.0/24"], "serviceCidrs": ["10.96.0.0/12"], "maxPodsPerNode": MAX_PODS}
    return parse_settings(
        {
            "cluster": cluster,
            "deployment": {"denyDestinations": [], "firewall": {"allowClusterDestinations": True}, **deployment},
        }
    )


SETTINGS = _settings()
SHARE = SETTINGS.deployment.firewall.max_connections_per_client
MAX_CLIENTS = SETTINGS.deployment.max_clients
RESERVE = loopback_reserve(MAX_CLIENTS)
MEMORY_LIMIT = quantity_bytes(SETTINGS.deployment.limits["memory"])  # the DaemonSet's (test_the_settings...)


def _previous_table(settings: Settings) -> str:
    """The rendered table with the previous layout's client limits (git show HEAD~1:proxy_component/render/proxy.py,
    `_client_limits`, at the previous default share of 64): the kernel counted each source's open connections and all
    of them, with conntrack, and its rate meters had no timeout."""
    table = firewall_rules(settings)
    start = table.index("  chain tinyproxy-client-limits {")
    end = table.index("  }", start)
    d = settings.deployment
    rate = d.firewall.new_connections_per_client_per_second
    kw = {4: "ip", 6: "ip6"}
    lines = [
        "  chain tinyproxy-client-limits {",
        f"    # At most {PREVIOUS_SHARE} open connections per source address (firewall.maxConnectionsPerClient).",
        *(
            f"    ct state new meter clients{v} size 65535 {{ {k} saddr ct count over {PREVIOUS_SHARE} }} "
            'counter reject with tcp reset comment "per-client-connections"'
            for v, k in kw.items()
        ),
        f"    # At most {rate} new connections a second per source address, bursts of {2 * rate}.",
        *(
            f"    ct state new meter rate{v} size 65535 {{ {k} saddr limit rate over {rate}/second burst {2 * rate} "
            'packets } counter reject with tcp reset comment "per-client-rate"'
            for v, k in kw.items()
        ),
        f"    # {RESERVE} of maxClients ({d.max_clients}) kept for loopback.",
        f"    ct state new ct count over {d.max_clients - RESERVE} counter reject with tcp reset "
        'comment "loopback-reserve"',
    ]
    return table[:start] + "\n".join(lines) + "\n" + table[end:]


def _conf(settings: Settings, flavour: str) -> str:
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    if flavour == "image":
        return conf
    return "".join(line for line in conf.splitlines(keepends=True) if not line.startswith(NEW_DIRECTIVES))


def test_the_settings_derive_the_limits() -> None:
    """The numbers every class below leans on: the share, MaxClients for 20 pods at it, the reserve, the memory."""
    assert (SHARE, MAX_CLIENTS, RESERVE) == (16, 512, 32)
    [container] = daemonset(SETTINGS, restart_inputs(SETTINGS))["spec"]["template"]["spec"]["containers"]
    assert quantity_bytes(container["resources"]["limits"]["memory"]) == MEMORY_LIMIT, container["resources"]
    assert proxy_memory_needed(MAX_CLIENTS) <= MEMORY_LIMIT, MEMORY_LIMIT
    conf = _conf(SETTINGS, "image")
    for line in ("MaxConnectionsPerClient 16", "LoopbackReserve 32", "Allow 10.99.0.0/24"):
        assert f"{line}\n" in conf, conf
    assert "Filter" not in conf, conf
    old = _conf(SETTINGS, "previous")
    assert not any(line.startswith(NEW_DIRECTIVES) for line in old.splitlines()), old  # comments may name them
    assert "ct count" not in firewall_rules(SETTINGS)
    assert f"ct count over {MAX_CLIENTS - RESERVE} " in _previous_table(SETTINGS)


# --- the machinery: the image's root, tinyproxy in a namespace, the origins, the clients --------------------------


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Built:
    built = _unpack(_scripts_image("amd64"), tmp_path_factory.mktemp("adversarial-image"))
    for directory in ("etc/tinyproxy", "probe"):
        (built.root / directory).mkdir(exist_ok=True)
    (built.root / "etc/resolv.conf").write_text("nameserver 127.0.0.53\n")
    (built.root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    for flavour, version in (("1.11.2", "1.11.2"), ("previous", "previous")):
        binary = built.root / BINARIES[flavour].lstrip("/")
        binary.write_bytes(_scripts_image("tinyproxy", version, "amd64").read_bytes())
        binary.chmod(0o755)
    return built


CGROUP_V2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()


@dataclass
class Proxy:
    flavour: str
    netns: str
    peer: str
    peer_dev: str
    process: subprocess.Popen[bytes]
    cgroup: Path
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def connections(self) -> int:
        """The connection threads tinyproxy runs now (every thread but the main one)."""
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text()
        except OSError:
            return -1
        return int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1)) - 1  # type: ignore[union-attr]

    def _memory(self, v1: str, v2: str) -> str:
        return (self.cgroup / (v2 if CGROUP_V2 else v1)).read_text()

    def memory_peak(self) -> int:
        return int(self._memory("memory.max_usage_in_bytes", "memory.peak"))

    def memory_limit_hits(self) -> int:
        """How often the cgroup's usage reached its limit (v1 failcnt, v2 the `max` event)."""
        if not CGROUP_V2:
            return int(self._memory("memory.failcnt", ""))
        return int(re.search(r"^max (\d+)", self._memory("", "memory.events"), re.M).group(1))  # type: ignore[union-attr]

    def oom_kills(self) -> int:
        text = self._memory("memory.oom_control", "memory.events")
        found = re.search(r"^oom_kill (\d+)", text, re.M)
        return int(found.group(1)) if found else 0

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def refused(self, cause: str, source: str | None = None) -> int:
        """Connections the image's tinyproxy refused at accept for `cause`, by its once-a-second log lines."""
        total = 0
        for count, text, last in re.findall(r"Refused (\d+) connection\(s\) at accept: (.*?) \(last from (.*?)\)",
                                            self.log_text()):  # fmt: skip
            if cause in text and (source is None or last == source):
                total += int(count)
        return total

    def exec(self, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.netns, *command], capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    def open_connections(self) -> int:
        """The stats page's "Number of open connections" (asked over loopback, so it counts that request)."""
        done = self.exec(sys.executable, "-c", FETCH_STATS, timeout=30)
        found = re.search(r"Number of open connections\D*?(\d+)", done.stdout)
        assert found, done.stdout + done.stderr
        return int(found.group(1))


FETCH_STATS = f"""
import socket
c = socket.create_connection(("127.0.0.1", {PORT}), timeout=5)
c.sendall(b"GET / HTTP/1.1\\r\\nHost: proxy-component.invalid\\r\\n\\r\\n")
data = b""
while chunk := c.recv(65536):
    data += chunk
print(data.decode("latin-1"))
"""

LISTENING = f"""
import socket, time
for _ in range(200):
    try:
        socket.create_connection(("127.0.0.1", {PORT}), timeout=1).close(); break
    except OSError: time.sleep(0.05)
else: raise SystemExit("tinyproxy did not listen")
"""

PEER_FIREWALL = f"""table inet origins {{
  chain input {{
    type filter hook input priority 0; policy accept;
    tcp dport {DROPPED_PORT} drop
  }}
}}
"""


def _run(*command: str, stdin: str | None = None) -> None:
    done = subprocess.run(list(command), input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)


def _cgroup(tag: str) -> Path:
    if CGROUP_V2:
        with contextlib.suppress(OSError):
            Path("/sys/fs/cgroup/cgroup.subtree_control").write_text("+memory")
        cgroup = Path(f"/sys/fs/cgroup/pc-adversarial-{tag}")
    else:
        cgroup = Path(f"/sys/fs/cgroup/memory/pc-adversarial-{tag}")
    cgroup.mkdir()
    (cgroup / ("memory.max" if CGROUP_V2 else "memory.limit_in_bytes")).write_text(str(MEMORY_LIMIT))
    return cgroup


@contextlib.contextmanager
def proxy(image_root: Built, flavour: str, settings: Settings, command: list[str] | None = None) -> Iterator[Proxy]:
    """tinyproxy (`flavour`) in a network namespace of its own at 10.99.0.1 behind a veth to a peer namespace that
    holds the pods, the neighbour and the origins; the kernel rules loaded with the init container's own command and
    the image's nft; in a memory cgroup with the DaemonSet's limit; chrooted into the image as the image's user.
    `command` runs another engine there instead (bench/bench_engines.py): it must exec in place and listen on 8888."""
    tag = f"{os.getpid() % 100000}{next(_SERIAL)}"
    netns, peer, a, b = f"pcv-{tag}", f"pcw-{tag}", f"va{tag}"[:15], f"vb{tag}"[:15]
    root = image_root.root
    (root / "etc/tinyproxy/tinyproxy.conf").write_text(_conf(settings, flavour))
    table = firewall_rules(settings) if flavour == "image" else _previous_table(settings)
    (root / "etc/tinyproxy/nftables.conf").write_text(table)
    cgroup: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    for name in (netns, peer):
        _run("ip", "netns", "add", name)
    try:
        _run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        _run("ip", "link", "set", a, "netns", netns)
        _run("ip", "link", "set", b, "netns", peer)
        mine = [f"addr add {PROXY_IP}/24 dev {a}", f"addr add {PROXY_LINK_LOCAL}/64 dev {a} nodad",
                "link set lo up", f"link set {a} up", f"route add {OUTSIDE_IP}/32 dev {a}",
                f"route add {SPOOF_ROUTED} via {SPARE_IP}"]  # fmt: skip
        theirs = [f"addr add {ip}/24 dev {b}" for ip in (SPARE_IP, NEIGHBOUR_IP, ORIGIN_IP, *POD_IPS)]
        theirs += [f"addr add {OUTSIDE_IP}/32 dev {b}", f"addr add {PEER_LINK_LOCAL}/64 dev {b} nodad",
                   "link set lo up", f"link set {b} up"]  # fmt: skip
        _run("ip", "-n", netns, "-batch", "-", stdin="\n".join(mine) + "\n")
        _run("ip", "-n", peer, "-batch", "-", stdin="\n".join(theirs) + "\n")
        # The SYN-dropping origin's rule, with the image's nft (the host's may have none).
        _run("ip", "netns", "exec", peer, "env", f"PATH={IMAGE_PATH}", "chroot", str(root), "nft", "-f", "-",
             stdin=PEER_FIREWALL)  # fmt: skip
        load = subprocess.run(
            ["ip", "netns", "exec", netns, *in_image(image_root, firewall_command(settings), user="0:0")],
            env={"R": str(root), "PATH": IMAGE_PATH}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert load.returncode == 0, load.stderr
        cgroup = _cgroup(tag)
        log = root.parent / f"tinyproxy-{flavour}-{tag}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", netns, *(command or ["chroot", "--userspec=61888:61888", str(root),
                 BINARIES[flavour], "-d", "-c", "/etc/tinyproxy/tinyproxy.conf"])],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        # `ip netns exec` and chroot exec in place: the PID is tinyproxy's (its threads follow it into the cgroup).
        (cgroup / "cgroup.procs").write_text(str(process.pid))
        started = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", LISTENING], capture_output=True,
                                 text=True, timeout=60)  # fmt: skip
        assert started.returncode == 0, started.stderr + log.read_text(errors="replace")
        yield Proxy(flavour, netns, peer, b, process, cgroup, log)
    finally:
        if process is not None:
            process.kill()
            process.wait(timeout=30)
        for name in (netns, peer):
            subprocess.run(["ip", "netns", "delete", name], check=False)
        for _ in range(100):
            if cgroup is None:
                break
            try:
                cgroup.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


ORIGINS = f"""
import http.server, socket, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer.request_queue_size = 1024
normal = http.server.ThreadingHTTPServer(("{ORIGIN_IP}", {NORMAL_PORT}), H)
threading.Thread(target=normal.serve_forever, daemon=True).start()
silent, held = socket.create_server(("{ORIGIN_IP}", {SILENT_PORT}), backlog=4096), []
def hold():
    while True:
        held.append(silent.accept()[0])
threading.Thread(target=hold, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""

# The clients: one asyncio process per role, from a JSON spec. `waves`: at `at` seconds, `count` connections from
# each of `srcs`, each of a `kind`: `hold` (send `data`, keep the connection until the proxy ends it), `reset` (send
# `data`, and reset the socket with SO_LINGER {1,0} `after` seconds later unless the proxy ended it first: then it
# was `held-reset`), `drip` (`data` a byte every `every` seconds); with `respawn`, a connection that ended is opened
# again that many seconds later. `loops`: a request every `every` seconds, each answered within `timeout` or failed,
# `expect` in the status line or failed. `syn`: spoofed SYNs (raw IPv4 and TCP headers, IP_HDRINCL). It prints a
# snapshot of the counts every 0.1 s and, once its stdin closes, every connection's record.
DRIVER = r"""
import asyncio, ipaddress, json, logging, os, random, socket, struct, sys, time
logging.getLogger("asyncio").setLevel(logging.CRITICAL)
spec = json.load(open(sys.argv[1]))
HOST, PORT = spec["proxy"]
T0 = time.monotonic()
records, loops, syn = [], {}, {"sent": 0}

def now():
    return round(time.monotonic() - T0, 3)

async def one(src, wave):
    kind, data = wave["kind"], bytes.fromhex(wave.get("data", ""))
    rec = {"src": src, "kind": wave.get("name", kind), "state": "connecting", "t0": now()}
    records.append(rec)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(HOST, PORT, local_addr=(src, 0)), wave.get("connect_timeout", 5))
    except ConnectionRefusedError:  # the kernel's reset of the SYN
        rec.update(state="refused", t2=now()); return
    except ConnectionResetError:  # the handshake done, then reset: at tinyproxy's accept
        rec.update(state="reset", t2=now()); return
    except (asyncio.TimeoutError, OSError) as exc:
        rec.update(state="connect-" + type(exc).__name__, t2=now()); return
    rec.update(state="open", t1=now())

    async def read():
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return "closed"
                rec.setdefault("status", chunk.split(b"\r\n", 1)[0].decode("latin-1")[:60])
        except ConnectionResetError:
            return "reset"
        except OSError as exc:
            return "error-" + type(exc).__name__

    reading = asyncio.ensure_future(read())
    if kind == "drip":
        for i in range(len(data)):
            writer.write(data[i:i + 1])
            await asyncio.wait([reading], timeout=wave["every"])
            if reading.done():
                break
    elif data:
        writer.write(data)
    if kind == "reset":
        await asyncio.wait([reading], timeout=wave["after"])
        if not reading.done():
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            reading.cancel()
            rec.update(state="held-reset", t2=now())
            return
    rec.update(state=await reading, t2=now())
    writer.transport.abort()

async def slot(src, wave):
    while True:
        await one(src, wave)
        if not wave.get("respawn"):
            return
        await asyncio.sleep(wave["respawn"])

async def run_wave(wave):
    await asyncio.sleep(max(0.0, wave["at"] - (time.monotonic() - T0)))
    for src in wave["srcs"]:
        for _ in range(wave["count"]):
            asyncio.ensure_future(slot(src, wave))

async def loop(spec_loop):
    state = loops[spec_loop["name"]] = {"ok": 0, "fails": [], "last": None}
    data = bytes.fromhex(spec_loop["data"])

    async def once():
        reader, writer = await asyncio.open_connection(HOST, PORT, local_addr=(spec_loop["src"], 0))
        try:
            writer.write(data)
            answer = await reader.read()
            return answer.split(b"\r\n", 1)[0].decode("latin-1")[:60] or "closed"
        finally:
            writer.transport.abort()

    while True:
        t = now()
        try:
            status = await asyncio.wait_for(once(), spec_loop["timeout"])
        except asyncio.TimeoutError:
            status = "timeout"
        except OSError as exc:
            status = type(exc).__name__
        state["last"] = status
        if spec_loop["expect"] in status:
            state["ok"] += 1
        else:
            state["fails"].append([t, status])
        await asyncio.sleep(max(0.0, spec_loop["every"] - (now() - t)))

def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF

def syn_flood(cfg):
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    raw.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
    dst, net = socket.inet_aton(HOST), ipaddress.ip_network(cfg["net"])
    span = range(cfg["first"], cfg["last"] + 1)
    offsets = random.sample(span, cfg["count"]) if cfg["count"] <= len(span) else [random.choice(span) for _ in range(cfg["count"])]
    for offset in offsets:
        src = socket.inet_aton(str(net[offset]))
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, random.getrandbits(16), 0, 64, socket.IPPROTO_TCP, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
        tcp = struct.pack("!HHLLBBHHH", random.randrange(1024, 65535), PORT, random.getrandbits(32), 0, 5 << 4, 0x02,
                          64240, 0, 0)
        pseudo = src + dst + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
        tcp = tcp[:16] + struct.pack("!H", checksum(pseudo + tcp)) + tcp[18:]
        raw.sendto(ip + tcp, (HOST, 0))
        syn["sent"] += 1
    syn["seconds"] = now()

def counts():
    by_src, by_kind = {}, {}
    for r in records:
        for table, key in ((by_src, r["src"]), (by_kind, r["kind"])):
            d = table.setdefault(key, {})
            d[r["state"]] = d.get(r["state"], 0) + 1
    return by_src, by_kind

async def report():
    while True:
        by_src, by_kind = counts()
        summary = {k: {"ok": v["ok"], "fail": len(v["fails"]), "last": v["last"]} for k, v in loops.items()}
        print(json.dumps({"t": now(), "src": by_src, "kind": by_kind, "loops": summary, "syn": syn}), flush=True)
        await asyncio.sleep(0.1)

def finish():
    if os.read(0, 4096):
        return
    print(json.dumps({"final": {"records": records, "loops": loops, "syn": syn}}), flush=True)
    os._exit(0)

async def main():
    asyncio.get_running_loop().add_reader(0, finish)
    asyncio.ensure_future(report())
    for spec_loop in spec.get("loops", []):
        asyncio.ensure_future(loop(spec_loop))
    for wave in spec.get("waves", []):
        asyncio.ensure_future(run_wave(wave))
    if "syn" in spec:
        await asyncio.get_running_loop().run_in_executor(None, syn_flood, spec["syn"])
    await asyncio.Event().wait()

asyncio.run(main())
"""

Snapshot = dict[str, Any]


class Driver:
    """A DRIVER process in `netns`; `latest` is its last snapshot, `stop()` returns its records."""

    def __init__(self, netns: str, spec: dict[str, Any]) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as out:
            json.dump(spec, out)  # a spec may be longer than one argument may be
        self.spec = Path(out.name)
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", DRIVER, str(self.spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
        )  # fmt: skip
        self.latest: Snapshot = {"t": 0.0, "src": {}, "kind": {}, "loops": {}, "syn": {}}
        self.final: Snapshot = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            data = json.loads(line)
            if "final" in data:
                self.final = data["final"]
            else:
                self.latest = data

    def wait(self, predicate: Callable[[Snapshot], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.latest):
                return True
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        return predicate(self.latest)

    def ok(self, name: str) -> int:
        return int(self.latest["loops"].get(name, {}).get("ok", 0))

    def stop(self) -> Snapshot:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            self.process.wait(timeout=60)
        self.reader.join(timeout=60)
        self.stderr.seek(0)
        errors = self.stderr.read().decode(errors="replace")
        self.stderr.close()
        self.spec.unlink(missing_ok=True)
        assert self.final, f"the driver ended without its records: {errors[-3000:]}"
        return self.final


def _wait(condition: Callable[[], bool], timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return condition()


def _settled(value: Callable[[], int], window: float = 0.6, timeout: float = 15) -> int:
    """`value` once its minimum over a window stays the same for the next window (the neighbour's and the probe's
    short-lived connections come and go on top of what an attack holds)."""
    deadline, previous = time.monotonic() + timeout, None
    while True:
        end, low = time.monotonic() + window, value()
        while time.monotonic() < end:
            low = min(low, value())
            time.sleep(0.03)
        if low == previous or time.monotonic() > deadline:
            return low
        previous = low


def _states(snapshot: Snapshot, key: str = "src") -> dict[str, int]:
    total: dict[str, int] = {}
    for states in snapshot[key].values():
        for state, n in states.items():
            total[state] = total.get(state, 0) + n
    return total


def _in_flight(snapshot: Snapshot) -> int:
    return _states(snapshot).get("connecting", 0)


def _request(host: str, port: int, path: str = "/") -> str:
    return f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"


PROBE = "GET / HTTP/1.1\r\nHost: proxy-component.invalid\r\n\r\n"


@dataclass
class Served:
    """What the neighbour and the probe got through a run."""

    neighbour_ok: int
    neighbour_fails: list[list[Any]]
    probe_ok: int
    probe_fails: list[list[Any]]

    def text(self) -> str:
        def fails(f: list[list[Any]]) -> str:
            return f" ({sorted({s for _, s in f})[:2]})" if f else ""

        return (f"neighbour {self.neighbour_ok} ok / {len(self.neighbour_fails)} failed{fails(self.neighbour_fails)}, "
                f"probe {self.probe_ok} ok / {len(self.probe_fails)} failed{fails(self.probe_fails)}")  # fmt: skip

    @property
    def all_served(self) -> bool:
        return not self.neighbour_fails and not self.probe_fails and self.neighbour_ok > 0 and self.probe_ok > 0


@dataclass
class Scene:
    p: Proxy
    probe: Driver
    neighbour: Driver
    drivers: list[Driver] = field(default_factory=list)
    served: Served | None = None
    peaks: list[int] = field(default_factory=list)

    def attack(self, spec: dict[str, Any]) -> Driver:
        driver = Driver(self.p.peer, {"proxy": [PROXY_IP, PORT], **spec})
        self.drivers.append(driver)
        return driver

    def served_again(self, timeout: float = 8) -> None:
        """Wait until the neighbour and the probe each got one more answer than now (or `timeout`)."""
        n, p = self.neighbour.ok("neighbour"), self.probe.ok("probe")
        _wait(lambda: self.neighbour.ok("neighbour") > n and self.probe.ok("probe") > p, timeout)

    def finish(self) -> Served:
        """Stop the neighbour and the probe (once each answered again: the image's must, so it gets longer to) and
        read what they got."""
        self.served_again(8 if self.p.flavour == "image" else 2)
        probe, neighbour = self.probe.stop()["loops"]["probe"], self.neighbour.stop()["loops"]["neighbour"]
        self.served = Served(neighbour["ok"], neighbour["fails"], probe["ok"], probe["fails"])
        return self.served

    def health(self) -> str:
        peak = self.p.memory_peak()
        return (f"{'alive' if self.p.alive() else f'DEAD ({self.p.process.returncode})'}, "
                f"OOM kills {self.p.oom_kills()}, peak {peak / 2**20:.1f} of {MEMORY_LIMIT / 2**20:.0f} MiB")  # fmt: skip


@contextlib.contextmanager
def scene(
    image_root: Built,
    flavour: str,
    settings: Settings = SETTINGS,
    neighbour_every: float = 0.1,
    command: list[str] | None = None,
    probe_request: str = PROBE,
) -> Iterator[Scene]:
    """The proxy, its origins, and the neighbour and the probe asking all along (each answered once before).
    `command` and `probe_request`: another engine and its health request (bench/bench_engines.py)."""
    with proxy(image_root, flavour, settings, command) as p:
        origins = subprocess.Popen(["ip", "netns", "exec", p.peer, sys.executable, "-c", ORIGINS],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        drivers: list[Driver] = []
        try:
            assert origins.stdout is not None
            assert origins.stdout.readline().strip() == "ready"
            probe = Driver(p.netns, {"proxy": ["127.0.0.1", PORT], "loops": [
                {"name": "probe", "src": "127.0.0.1", "every": 0.2, "timeout": 3, "expect": " 200 ",
                 "data": probe_request.encode().hex()}]})  # fmt: skip
            drivers.append(probe)
            neighbour = Driver(p.peer, {"proxy": [PROXY_IP, PORT], "loops": [
                {"name": "neighbour", "src": NEIGHBOUR_IP, "every": neighbour_every, "timeout": 3, "expect": " 204 ",
                 "data": _request(ORIGIN_IP, NORMAL_PORT).encode().hex()}]})  # fmt: skip
            drivers.append(neighbour)
            assert probe.wait(lambda s: probe.ok("probe") > 0, 10), probe.latest
            assert neighbour.wait(lambda s: neighbour.ok("neighbour") > 0, 10), neighbour.latest
            s = Scene(p, probe, neighbour, drivers)  # the attacks' drivers join the list
            yield s
        finally:
            for driver in drivers:
                if driver.process.poll() is None:
                    driver.process.kill()
                    driver.process.wait()
            origins.kill()
            origins.wait()


def _record(case: str, flavour: str, what: str) -> None:
    RESULTS.setdefault(case, {})[flavour] = what


def _image_survived(s: Scene) -> None:
    """What every class asserts for the image: the neighbour and the probe served throughout, alive, never OOM,
    the memory cgroup's usage never at its limit."""
    assert s.served is not None
    assert s.served.all_served, s.served
    assert s.p.alive(), s.p.log_text()[-2000:]
    assert s.p.oom_kills() == 0
    assert s.p.memory_peak() < MEMORY_LIMIT, (s.p.memory_peak(), MEMORY_LIMIT)
    assert s.p.memory_limit_hits() == 0, (s.p.memory_peak(), MEMORY_LIMIT)


def _held_by_pod(records: list[dict[str, Any]], states: tuple[str, ...]) -> dict[str, int]:
    held: dict[str, int] = {}
    for r in records:
        if r["state"] in states:
            held[r["src"]] = held.get(r["src"], 0) + 1
    return held


# --- 1. reset after the request --------------------------------------------------------------------------------


RESET_CASES = [(1, 100, "silent"), (8, 32, "dropped"), (20, 16, "silent"), (20, 100, "dropped")]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("pods", "n", "origin"), RESET_CASES, ids=[f"{p}pods-{n}-{o}" for p, n, o in RESET_CASES])
def test_reset_after_request(image_root: Built, flavour: str, pods: int, n: int, origin: str) -> None:
    """Each pod opens `n` connections, sends a request for the silent origin (or one whose SYNs are dropped) and
    resets its own socket 0.4 s later; twice, a second apart. The thread serving each still waits for the origin.
    The conntrack of the previous layout forgot a reset connection at once, so each round passed the kernel's
    counts anew and tinyproxy filled up; the image counts a connection until its thread ends: each pod holds its
    share, whatever it resets, and the rest is refused at accept."""
    port = SILENT_PORT if origin == "silent" else DROPPED_PORT
    data = _request(ORIGIN_IP, port).encode().hex()
    waves = [{"at": at, "srcs": POD_IPS[:pods], "count": n, "kind": "reset", "data": data, "after": 0.4}
             for at in (0.0, 1.0)]  # fmt: skip
    with scene(image_root, flavour) as s:
        attack = s.attack({"waves": waves})
        done = attack.wait(lambda snap: snap["t"] > 1.2 and _in_flight(snap) == 0 and
                           not _states(snap).get("open"), 30)  # fmt: skip
        live = _settled(s.p.connections)
        if flavour == "image":  # every refusal is logged within a second of it
            refused_after_accept = _states(attack.latest).get("reset", 0)
            _wait(lambda: s.p.refused("over its client's share") >= refused_after_accept, 5)
        served = s.finish()
        records = attack.stop()["records"]
        held = _held_by_pod(records, ("held-reset",))
        states: dict[str, int] = {}
        for r in records:
            states[r["state"]] = states.get(r["state"], 0) + 1
        logged = s.p.refused("over its client's share")
        _record(f"1. reset after request: {pods} pod(s) x {n} x 2 rounds, {origin} origin", flavour,
                f"threads held {live} (most by one pod, client side: {max(held.values(), default=0)}); "
                f"clients saw {states}; {served.text()}; {s.health()}")  # fmt: skip
        assert done, attack.latest
        if flavour == "image":
            _image_survived(s)
            assert live == pods * min(n, SHARE), live
            assert all(held.get(pod, 0) <= SHARE for pod in POD_IPS[:pods]), held
            assert logged == states.get("reset", 0), (logged, states)
        else:  # the flaw: one pod past the old share, or the proxy past what the kernel meant to leave free
            assert (pods == 1 and live > PREVIOUS_SHARE) or live > MAX_CLIENTS - RESERVE, (live, served)


# --- 2. a long request line -------------------------------------------------------------------------------------


LONG_CASES = ["under-16KiB-never-ended", "over-16KiB"]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("case", LONG_CASES)
def test_long_request_line(image_root: Built, flavour: str, case: str) -> None:
    """20 pods at their share each send a request line just under 16 KiB and never end it (the proxy holds each
    line read so far), or one over 16 KiB (the image answers 414 and connects nowhere; the older binaries read up to
    128 KiB and forward it)."""
    head = f"GET http://{ORIGIN_IP}:{NORMAL_PORT}/".encode()
    if case.startswith("under"):
        data = head + b"a" * (16 * 1024 - 2 - len(head))  # with a CRLF, 16 KiB exactly: no line end is ever sent
    else:
        data = head + b"a" * 17_000 + f" HTTP/1.1\r\nHost: {ORIGIN_IP}:{NORMAL_PORT}\r\n\r\n".encode()
    total = MAX_PODS * SHARE
    with scene(image_root, flavour) as s:
        attack = s.attack({"waves": [{"at": 0, "srcs": POD_IPS[:MAX_PODS], "count": SHARE, "kind": "hold",
                                      "data": data.hex()}]})  # fmt: skip
        if case.startswith("under"):
            done = attack.wait(lambda snap: _states(snap).get("open", 0) == total, 20)
            done = done and _wait(lambda: s.p.connections() >= total, 10)
        else:
            done = attack.wait(lambda snap: sum(_states(snap).get(k, 0) for k in ("closed", "reset")) == total, 30)
        live = _settled(s.p.connections)
        served = s.finish()
        records = attack.stop()["records"]
        answers: dict[str, int] = {}
        for r in records:
            answers[r.get("status", r["state"])] = answers.get(r.get("status", r["state"]), 0) + 1
        _record(
            f"2. request line {case}: {MAX_PODS} pods x {SHARE}",
            flavour,
            f"answers {answers}; threads {live}; {served.text()}; {s.health()}",
        )
        assert done, attack.latest
        if flavour == "image":
            _image_survived(s)
            if case.startswith("under"):
                assert live == total, live
                assert answers == {"open": total}, answers
            else:
                assert answers == {"HTTP/1.0 414 URI Too Long": total}, answers
                assert "Refused a request whose request line exceeds 16384 bytes from 10.99.0." in s.p.log_text()
        elif not case.startswith("under"):  # the flaw: forwarded, never 414
            assert not any(" 414 " in a for a in answers), answers


# --- 3. a request line dripped a byte at a time -----------------------------------------------------------------


DRIP_CASES = [(4, 0.02), (20, 0.1)]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("pods", "every"), DRIP_CASES, ids=[f"{p}pods-every-{e}s" for p, e in DRIP_CASES])
def test_drip(image_root: Built, flavour: str, pods: int, every: float) -> None:
    """Each pod's share of connections drips a request line a byte at a time, never ending it. RequestHeadTimeout
    (3 s here) closes each at that deadline from accept; the older binaries have none (a byte resets their idle
    Timeout), and 1.11.2 kept a heap node per read of the line."""
    deadline = 3
    settings = _settings(deadlines={"requestHeadSeconds": deadline})
    data = f"GET http://{ORIGIN_IP}:{NORMAL_PORT}/".encode() + b"a" * 100_000
    total = pods * SHARE
    with scene(image_root, flavour, settings) as s:
        attack = s.attack({"waves": [{"at": 0, "srcs": POD_IPS[:pods], "count": SHARE, "kind": "drip",
                                      "data": data.hex(), "every": every}]})  # fmt: skip
        opened = attack.wait(lambda snap: _states(snap).get("open", 0) == total, 20)
        last_open = attack.latest["t"]
        ended = ("closed", "reset")
        if flavour == "image":
            done = attack.wait(lambda snap: sum(_states(snap).get(k, 0) for k in ended) == total, deadline + 5)
            _wait(lambda: s.p.log_text().count("no complete request within RequestHeadTimeout (3s)") >= total, 3)
        else:  # the deadline and a margin pass (the driver's clock) with every connection still open
            attack.wait(lambda snap: snap["t"] > last_open + deadline + 2 or
                        sum(_states(snap).get(k, 0) for k in ended) > 0, deadline + 5)  # fmt: skip
            done = sum(_states(attack.latest).get(k, 0) for k in ended) == 0
        served = s.finish()
        records = attack.stop()["records"]
        lasted = sorted(r["t2"] - r["t1"] for r in records if r["state"] in ended)
        states: dict[str, int] = {}
        for r in records:
            states[r["state"]] = states.get(r["state"], 0) + 1
        closed_log = s.p.log_text().count("no complete request within RequestHeadTimeout")
        _record(f"3. drip: {pods} pods x {SHARE}, a byte every {every}s (RequestHeadTimeout {deadline}s)", flavour,
                f"ended {len(lasted)} of {total}"
                + (f" after {lasted[0]:.1f}-{lasted[-1]:.1f}s" if lasted else "")
                + f"; {served.text()}; {s.health()}")  # fmt: skip
        assert opened, attack.latest
        if flavour == "image":
            _image_survived(s)
            assert done, attack.latest
            assert len(lasted) == total, lasted
            assert deadline - 0.2 <= lasted[0], lasted
            assert lasted[-1] <= deadline + 1.5, lasted
            assert closed_log == total, closed_log
        else:  # the flaw: no deadline for the request's head
            assert done, states
            assert states == {"open": total}, states


# --- 4. a source not in Allow -----------------------------------------------------------------------------------


ALLOW_CASES = [OUTSIDE_IP, PEER_LINK_LOCAL]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("source", ALLOW_CASES)
def test_not_in_allow(image_root: Built, flavour: str, source: str) -> None:
    """A source outside Allow (an address outside every range, or a pod's IPv6 link-local address) opens 150 idle
    connections at once. The image resets each at accept, before a thread or a byte, and logs it; the older ones
    start a thread for each that waits for a request to answer 403 to, up to Timeout (the previous kernel rules let
    64 through)."""
    count = 150
    with scene(image_root, flavour) as s:
        # The stats page counts its own request, and the neighbour's and the probe's come and go: the settled least.
        before = _settled(s.p.open_connections)
        target = [f"{PROXY_LINK_LOCAL}%{s.p.peer_dev}", PORT] if ":" in source else [PROXY_IP, PORT]
        src = f"{source}%{s.p.peer_dev}" if ":" in source else source
        attack = s.attack({"proxy": target, "waves": [{"at": 0, "srcs": [src], "count": count, "kind": "hold"}]})
        done = attack.wait(lambda snap: _in_flight(snap) == 0 and sum(_states(snap).values()) == count, 20)
        live = _settled(s.p.connections)
        after = _settled(s.p.open_connections)
        if flavour == "image":
            reached = _states(attack.latest).get("reset", 0)
            _wait(lambda: s.p.refused("not in Allow", source) >= reached, 5)
        served = s.finish()
        records = attack.stop()["records"]
        answers: dict[str, int] = {}
        for r in records:
            key = f"{r['state']}: {r['status']}" if "status" in r else r["state"]
            answers[key] = answers.get(key, 0) + 1
        logged = s.p.refused("not in Allow", source)
        _record(f"4. not in Allow: {source} x {count} idle", flavour,
                f"clients saw {answers}; open connections (stats) {before} -> {after}; threads {live}; "
                f"{served.text()}; {s.health()}")  # fmt: skip
        assert done, attack.latest
        if flavour == "image":
            _image_survived(s)
            assert set(answers) <= {"reset", "refused"}, answers
            assert answers.get("reset", 0) > 0, answers
            assert logged == answers.get("reset", 0), (logged, answers)
            assert before == after == 1, (before, after)
            assert live == 0, live
        else:  # the flaw: each connection the kernel let through holds a thread (until a request's 403 or Timeout)
            assert live == answers.get("open", 0) > 0, (live, answers)


# --- 5. every pod at its share at once --------------------------------------------------------------------------


POOL_CASES = [SHARE, 40]


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("per_pod", POOL_CASES, ids=[f"{n}-each" for n in POOL_CASES])
def test_every_pod_at_its_share(image_root: Built, flavour: str, per_pod: int) -> None:
    """All maxPodsPerNode pods open `per_pod` idle connections at once. MaxClients is derived as room for all of
    them at their share: the image gives each exactly its share, refuses the rest at accept, and still serves the
    neighbour (a pod with its own share) and the probe (the loopback reserve). With the previous rules a pod held
    up to 64 (asserted), and once the kernel's count for all reached MaxClients less 32 every other pod was reset
    (recorded in the table: that count is conntrack's, collected lazily, so how soon it bites varies by machine)."""
    total = MAX_PODS * per_pod
    with scene(image_root, flavour) as s:
        attack = s.attack({"waves": [{"at": 0, "srcs": POD_IPS[:MAX_PODS], "count": per_pod, "kind": "hold"}]})
        done = attack.wait(lambda snap: _in_flight(snap) == 0 and sum(_states(snap).values()) == total, 20)
        live = _settled(s.p.connections)
        snapshot = attack.latest
        served = s.finish()
        records = attack.stop()["records"]
        held = _held_by_pod(records, ("open",))
        states: dict[str, int] = {}
        for r in records:
            states[r["state"]] = states.get(r["state"], 0) + 1
        _record(f"5. {MAX_PODS} pods x {per_pod} idle at once (share {SHARE}, MaxClients {MAX_CLIENTS})", flavour,
                f"per pod held {min(held.values(), default=0)}-{max(held.values(), default=0)}; threads {live}; "
                f"clients saw {states}; {served.text()}; {s.health()}")  # fmt: skip
        assert done, snapshot
        if flavour == "image":
            _image_survived(s)
            assert held == dict.fromkeys(POD_IPS[:MAX_PODS], SHARE), held
            assert live == MAX_PODS * SHARE, live
            assert s.p.refused("over its client's share") == states.get("reset", 0), states
        elif per_pod > SHARE:  # the flaw: nothing in the proxy counts a pod's connections; the kernel let a pod hold
            # up to 64 (whether the neighbour is then reset depends on conntrack's lazy count for all: recorded above)
            assert max(held.values(), default=0) > SHARE, held


# --- 6. spoofed SYNs --------------------------------------------------------------------------------------------


SYN_CASES = [(2_000, "10.99.0.0/24", 100, 249), (20_000, SPOOF_ROUTED, 1, 20_000), (70_000, SPOOF_ROUTED, 1, 70_000)]
METER_SIZE = 65_535  # the rendered rate meters' size (proxy_component/dataplane/firewall.py)


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize(("count", "net", "first", "last"), SYN_CASES, ids=[f"{c}-syns" for c, *_ in SYN_CASES])
def test_spoofed_syns(image_root: Built, flavour: str, count: int, net: str, first: int, last: int) -> None:
    """SYNs with spoofed sources (crafted IPv4 and TCP headers through a raw socket, never answered): 2,000 from
    the pod range's unused addresses, or 20,000 or 70,000 from as many sources (each an entry of the rate meter,
    forgotten after a minute; the meter holds 65,535). The previous layout's `ct count` for all counted these
    half-open connections, which tinyproxy never sees, and reset every pod until they expired. The image's tinyproxy
    counts what it accepts, so the neighbour is served at once; and a real pod over its rate must still be refused by
    the kernel's meter."""
    with scene(image_root, flavour) as s:
        flood = s.attack({"syn": {"count": count, "net": net, "first": first, "last": last}})
        sent = flood.wait(lambda snap: snap["syn"].get("sent") == count and "seconds" in snap["syn"], 30)
        seconds = flood.latest["syn"].get("seconds", 0)
        # A pod opens 300 connections at once: over its rate (100 a second, bursts of 200), the kernel resets some.
        burst = s.attack({"waves": [{"at": 0, "srcs": [POD_IPS[0]], "count": 300, "kind": "hold"}]})
        burst_done = burst.wait(lambda snap: _in_flight(snap) == 0 and sum(_states(snap).values()) == 300, 20)
        burst_states = _states(burst.latest)
        tracked = s.p.exec("sh", "-c", f"grep -c 'dport={PORT} ' /proc/net/nf_conntrack || true").stdout.strip()
        served = s.finish()
        flood.stop()
        burst.stop()
        _record(f"6. {count} spoofed SYNs from {net}", flavour,
                f"sent in {seconds:.1f}s; conntrack entries to the port after {tracked}; "
                f"a pod's 300 at once: {burst_states}; {served.text()}; {s.health()}")  # fmt: skip
        assert sent, flood.latest
        assert burst_done, burst.latest
        if flavour == "image":
            _image_survived(s)
            assert burst_states.get("open", 0) == SHARE, burst_states  # tinyproxy's own share holds, whatever came
            if count < METER_SIZE:
                assert burst_states.get("refused", 0) >= 50, burst_states  # the rate meter
            else:
                # A known limit of the kernel's rate layer (docs/guides/security.md): as many spoofed sources as the
                # meter holds fill it, and a full meter adds no entry, so its rule matches no new source. The share
                # above and every neighbour's request still hold; this records that the meter refused nothing.
                assert burst_states.get("refused", 0) == 0, burst_states
        else:  # the flaw: the kernel's count for all holds the half-open connections, and resets every pod
            assert burst_states == {"refused": 300}, burst_states
            assert served.neighbour_fails, served


# --- 7. all of it at once ---------------------------------------------------------------------------------------


MIX_SECONDS = 15


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_mix(image_root: Built, flavour: str) -> None:
    """20 pods, each at its share: a quarter waiting on the silent origin, a quarter resetting 0.4 s after their
    request, a quarter dripping, a quarter holding a request line just under 16 KiB; each reopened half a second
    after it ends. Meanwhile the neighbour sends 20 requests a second for 15 s and the probe asks: all must be served
    by the image, which stays within its memory limit and never holds more than each pod's share."""
    settings = _settings(deadlines={"requestHeadSeconds": 5})
    quarter = SHARE // 4
    head = f"GET http://{ORIGIN_IP}:{NORMAL_PORT}/".encode()
    silent = _request(ORIGIN_IP, SILENT_PORT).encode().hex()
    kinds: list[dict[str, Any]] = [
        {"name": "silent", "kind": "hold", "data": silent},
        {"name": "reset", "kind": "reset", "data": silent, "after": 0.4},
        {"name": "drip", "kind": "drip", "data": (head + b"a" * 10_000).hex(), "every": 0.1},
        {"name": "long", "kind": "hold", "data": (head + b"a" * (16 * 1024 - 2 - len(head))).hex()},
    ]
    waves = [{"at": 0, "srcs": POD_IPS[:MAX_PODS], "count": quarter, "respawn": 0.5, **k} for k in kinds]
    with scene(image_root, flavour, settings, neighbour_every=0.05) as s:
        start = s.neighbour.ok("neighbour") + s.neighbour.latest["loops"]["neighbour"]["fail"]
        attack = s.attack({"waves": waves})
        most = [0]

        def over() -> bool:  # the mix's 15 s on the driver's clock, the most threads sampled meanwhile
            most[0] = max(most[0], s.p.connections())
            return bool(attack.latest["t"] >= MIX_SECONDS)

        ran = _wait(over, MIX_SECONDS + 15, every=0.1)
        loops = s.neighbour.latest["loops"]["neighbour"]
        asked = loops["ok"] + loops["fail"] - start
        served = s.finish()
        records = attack.stop()["records"]
        by_kind: dict[str, dict[str, int]] = {}
        for r in records:
            d = by_kind.setdefault(r["kind"], {})
            d[r["state"]] = d.get(r["state"], 0) + 1
        _record(f"7. the mix: {MAX_PODS} pods x {SHARE} (4 kinds, reopened) for {MIX_SECONDS}s, neighbour 20/s",
                flavour, f"most threads {most[0]}; connections by kind {by_kind}; neighbour asked {asked} times in "
                f"{MIX_SECONDS}s; {served.text()}; {s.health()}")  # fmt: skip
        assert ran, (s.neighbour.latest, attack.latest)
        if flavour == "image":
            _image_survived(s)
            assert asked >= MIX_SECONDS * 20 * 0.9, asked  # 20 a second, each answered at once
            assert most[0] <= MAX_PODS * SHARE + 3, most[0]  # the neighbour's and the probe's few besides
        else:  # the flaw: reset connections pile up past the kernel's counts until tinyproxy is full
            assert not served.all_served, served


def test_zz_the_table() -> None:
    """Not a check of its own: prints each case's outcome per binary (named to run last; -s shows it)."""
    rows = [f"| {case} | " + " | ".join(r.get(f, "-") for f in FLAVOURS) + " |" for case, r in sorted(RESULTS.items())]
    print(
        "\n| case | upstream 1.11.2 | previous image (0001-0005) | the image's |\n|---|---|---|---|\n" + "\n".join(rows)
    )
    assert RESULTS, "the cases ran first"
