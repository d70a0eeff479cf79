"""Who a client is for MaxConnectionsPerClient (patch 0024, `ClientKey route`, the default): the interface of the
node's host route to the client's address when there is one, else the address.

The binary under test is the image's own, then its ASan+UBSan and TSan builds (the `tinyproxy_under_test` fixture of
tests/image/conftest.py). It runs in a "node" network namespace this module makes, with the config rendered from a
dual-stack cluster's settings (share 4), beside a second instance with `ClientKey address`. The pods are network
namespaces of their own, linked to the node the ways CNIs link them:

- `a`, `b` (ptp: kindnet, Calico, AWS VPC CNI, Azure transparent): a veth each, a /32 and a /128 host route to it on
  the node, the pod's default routes via the node's veth (169.254.1.1, fe80::1). Each opens its share over IPv4 and
  its share over IPv6 at once: one pod, one key (its veth), so exactly a share in total is held and the rest reset,
  and the other pod still gets its whole share.
- `c`, `d` (a bridge with a subnet route, as flannel's cni0): each opens a share and one more per family: each
  address holds a share (keyed by address, never merged by the bridge they share).
- `e` (reached by the node's default route only) and `g` (two addresses, each a /32 via a gateway, as Calico's routes
  to addresses borrowed by another node): not a host route through a device, so keyed by address, as `c` and `d`.
- `a` again against `ClientKey address`: a share per address.

Everything waits on conditions (the proxy's stats page, what the pods saw), never for a fixed time: the run is
settled when every connection has been either admitted (open on the stats page) or refused (denied), and the pods
have seen every reset. A sanitizer build writes no report; the refusals are logged in 0006's format.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the module also runs as a script (its driver), where `tests` is not importable
    from tests.image.conftest import UnderTest

pytestmark = pytest.mark.image

ROUTE_PORT, ADDRESS_PORT = 8888, 8889
NODE_V4, NODE_V6 = "10.100.0.1", "fd00:100::1"  # the node's addresses (on its lo): what the pods connect to
STATHOST = "proxy-component.invalid"
SETTLE_SECONDS = 240.0  # the limit of the condition wait (a TSan build on a loaded 2-core machine), not a sleep


def _settings() -> Any:
    from proxy_component.settings import parse_settings

    cluster = {
        "name": "t",
        "podCidrs": ["10.99.0.0/16", "fd99::/48"],
        "serviceCidrs": ["10.96.0.0/12", "fd96::/108"],
        "maxPodsPerNode": 10,
    }
    deployment = {"denyDestinations": [], "firewall": {"allowClusterDestinations": True, "maxConnectionsPerClient": 4}}
    return parse_settings({"cluster": cluster, "deployment": deployment})


def _conf(port: int, log: Path, client_key: str | None) -> str:
    """The rendered tinyproxy.conf, with this run's port and log, deadlines long enough that idle connections stay
    (the test ends them), and `ClientKey` when given (else the default, route)."""
    from proxy_component.dataplane.config import tinyproxy_conf

    settings = _settings()
    lines = []
    for line in tinyproxy_conf(settings, settings.allowed_sources()).splitlines():
        if line.startswith(("Port ", "LogFile ")):
            continue
        if line.startswith(("RequestHeadTimeout ", "Timeout ")):
            line = f"{line.split()[0]} 900"
        lines.append(line)
    lines += [f"Port {port}", f'LogFile "{log}"']
    if client_key:
        lines.append(f"ClientKey {client_key}")
    return "\n".join(lines) + "\n"


# --- the pods: how each is linked to the node, what it opens, what it must hold ------------------------------------


@dataclass(frozen=True)
class Target:
    """`count` connections from `src` to `dst`:`port`; `held` of them must stay (the rest reset at accept)."""

    label: str
    src: str
    dst: str
    port: int
    count: int


def _pods(share: int) -> dict[str, list[Target]]:
    over = share + 1  # a share and one more: one reset per key

    def dual(pod: str, v4: str, v6: str, count: int, port: int = ROUTE_PORT) -> list[Target]:
        return [
            Target(f"{pod}-v4-{port}", v4, NODE_V4, port, count),
            Target(f"{pod}-v6-{port}", v6, NODE_V6, port, count),
        ]

    return {
        "a": dual("a", "10.99.1.10", "fd99::1:10", share) + dual("a", "10.99.1.10", "fd99::1:10", over, ADDRESS_PORT),
        "b": dual("b", "10.99.1.11", "fd99::1:11", share),
        "c": dual("c", "10.99.2.10", "fd99::2:10", over),
        "d": dual("d", "10.99.2.11", "fd99::2:11", over),
        "e": dual("e", "10.99.3.10", "fd99::3:10", over),
        "g": [
            Target("g-1", "10.99.4.10", NODE_V4, ROUTE_PORT, over),
            Target("g-2", "10.99.4.11", NODE_V4, ROUTE_PORT, over),
        ],
    }


def _topology(node: str, pods: dict[str, str], tag: str) -> tuple[list[str], dict[str, list[str]], list[list[str]]]:
    """`ip -batch` lines for the node and each pod, and the `ip link add` commands that link them (made in place:
    `ip link add NAME netns NODE type veth peer name eth0 netns POD`)."""
    links = [
        ["ip", "link", "add", f"k{tag}{p}"[:15], "netns", node, "type", "veth", "peer", "name", "eth0", "netns", ns]
        for p, ns in pods.items()
    ]
    v = {p: f"k{tag}{p}"[:15] for p in pods}
    br = f"k{tag}br"[:15]
    mine = ["link set lo up", f"addr add {NODE_V4}/32 dev lo", f"addr add {NODE_V6}/128 dev lo nodad"]
    # ptp (a, b), the default route's (e), the gateway's (g): the node's end of each veth is 169.254.1.1 and fe80::1
    for p in ("a", "b", "e", "g"):
        mine += [f"addr add 169.254.1.1/32 dev {v[p]}", f"addr add fe80::1/64 dev {v[p]} nodad", f"link set {v[p]} up"]
    mine += [f"route add 10.99.1.10/32 dev {v['a']}", f"route add fd99::1:10/128 dev {v['a']}",
             f"route add 10.99.1.11/32 dev {v['b']}", f"route add fd99::1:11/128 dev {v['b']}",
             f"route add default dev {v['e']}", f"route add ::/0 dev {v['e']}",
             f"route add 10.99.4.10/32 via 169.254.1.2 dev {v['g']} onlink",
             f"route add 10.99.4.11/32 via 169.254.1.2 dev {v['g']} onlink"]  # fmt: skip
    # the bridge (c, d): a subnet route per family, the bridge's own addresses the pods' gateways
    mine += [f"link add {br} type bridge", f"addr add 10.99.2.1/24 dev {br}", f"addr add fd99::2:1/112 dev {br} nodad",
             f"link set {br} up", f"link set {v['c']} master {br}", f"link set {v['d']} master {br}",
             f"link set {v['c']} up", f"link set {v['d']} up"]  # fmt: skip

    def ptp(addrs: list[str]) -> list[str]:
        lines = ["link set lo up", *(f"addr add {a} dev eth0 nodad" if ":" in a else f"addr add {a} dev eth0"
                                       for a in addrs), "link set eth0 up"]  # fmt: skip
        return [*lines, "route add 169.254.1.1/32 dev eth0", "route add default via 169.254.1.1 dev eth0",
                "route add ::/0 via fe80::1 dev eth0"]  # fmt: skip

    def bridged(v4: str, v6: str) -> list[str]:
        return ["link set lo up", f"addr add {v4}/24 dev eth0", f"addr add {v6}/112 dev eth0 nodad", "link set eth0 up",
                "route add default via 10.99.2.1", "route add ::/0 via fd99::2:1"]  # fmt: skip

    theirs = {
        "a": ptp(["10.99.1.10/32", "fd99::1:10/128"]),
        "b": ptp(["10.99.1.11/32", "fd99::1:11/128"]),
        "c": bridged("10.99.2.10", "fd99::2:10"),
        "d": bridged("10.99.2.11", "fd99::2:11"),
        "e": ptp(["10.99.3.10/32", "fd99::3:10/128"]),
        "g": [*ptp(["169.254.1.2/32", "10.99.4.10/32", "10.99.4.11/32"])[:-1]],  # IPv4 only
    }
    return mine, theirs, links


# --- the driver: inside the node's namespace ---------------------------------------------------------------------

HOLDER = r"""
import json, select, socket, sys
spec = json.loads(sys.argv[1])  # [[label, src, dst, port, count], ...]
state = {t[0]: {"held": 0, "reset": 0, "closed": 0, "failed": 0} for t in spec}
socks = {}
for i in range(max(t[4] for t in spec)):  # interleaved: the families and ports race at accept
    for label, src, dst, port, count in spec:
        if i >= count:
            continue
        s = socket.socket(socket.AF_INET6 if ":" in dst else socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((src, 0))
            s.settimeout(60)
            s.connect((dst, port))
        except ConnectionResetError:  # a reset at accept can beat connect() back to a slow client
            state[label]["reset"] += 1
            s.close()
            continue
        except OSError as e:
            state[label]["failed"] += 1
            print(json.dumps({"error": f"{label}: {e}"}), flush=True)
            s.close()
            continue
        s.setblocking(False)
        socks[s] = label
        state[label]["held"] += 1
print(json.dumps(state), flush=True)
while True:
    ready, _, _ = select.select([sys.stdin, *socks], [], [])
    if sys.stdin in ready:
        break
    for s in ready:
        try:
            data = s.recv(1)
        except BlockingIOError:
            continue
        except ConnectionResetError:
            data = None
        label = socks.pop(s)
        s.close()
        state[label]["held"] -= 1
        state[label]["reset" if data is None else "closed"] += 1
    print(json.dumps(state), flush=True)
"""


REFUSAL = re.compile(
    r"Refused (\d+) connection\(s\) at accept: over its client's share \(MaxConnectionsPerClient\) "
    r"\(last from ([0-9a-f.:]+)\)$"
)


def _logged_refusals(log: Path) -> int:
    """The connections the refusal lines of `log` count (0006 writes them at most once a second)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(int(m.group(1)) for line in text.splitlines() if (m := REFUSAL.search(line)))


def _stats(port: int) -> tuple[int, int] | None:
    """(open, denied) from the stats page at 127.0.0.1:port, or None."""
    request = f"GET http://{STATHOST}/ HTTP/1.1\r\nHost: {STATHOST}\r\nConnection: close\r\n\r\n".encode()
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(request)
            while chunk := c.recv(65536):
                answer += chunk
    except OSError:
        return None
    text = answer.decode("latin-1")
    opened = re.search(r"open connections: (\d+)", text)
    denied = re.search(r"denied connections: (\d+)", text)
    return (int(opened.group(1)), int(denied.group(1))) if opened and denied else None


def _wait(condition: Any, timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())


def drive(plan_path: Path) -> None:
    """Start both instances, the pods' holders, wait until every connection is admitted or refused and seen so,
    write what each pod holds and each instance counted."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.image.test_framing import stop

    plan = json.loads(plan_path.read_text())
    workdir = Path(plan["workdir"])
    proxies = {}
    for port, client_key in ((ROUTE_PORT, None), (ADDRESS_PORT, "address")):
        conf = workdir / f"tinyproxy-{port}.conf"
        conf.write_text(_conf(port, workdir / f"tinyproxy-{port}.log", client_key))
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = f"detect_leaks=0:abort_on_error=0:halt_on_error=1:log_path={workdir}/asan-{port}"
        env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={workdir}/ubsan-{port}"
        env["TSAN_OPTIONS"] = f"halt_on_error=0:log_path={workdir}/tsan-{port}"
        proxies[port] = subprocess.Popen(
            [plan["binary"], "-d", "-c", str(conf)], env=env, stdout=subprocess.DEVNULL,
            stderr=(workdir / f"stderr-{port}").open("wb"),
        )  # fmt: skip
    for port, proxy in proxies.items():
        assert _wait(lambda p=port: _stats(p) is not None or proxies[p].poll() is not None, 120), f"{port} not up"
        assert proxy.poll() is None, (workdir / f"stderr-{port}").read_text(errors="replace")

    states: dict[str, dict[str, dict[str, int]]] = {}
    errors: list[str] = []
    lock = threading.Lock()
    holders = {}
    for pod, targets in plan["pods"].items():
        holders[pod] = subprocess.Popen(
            ["ip", "netns", "exec", plan["netns"][pod], sys.executable, "-c", HOLDER, json.dumps(targets)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(workdir / f"holder-{pod}.err").open("w"), text=True,
        )  # fmt: skip

    def read(pod: str, out: Any) -> None:
        for line in out:
            got = json.loads(line)
            with lock:
                if "error" in got:
                    errors.append(got["error"])
                else:
                    states[pod] = got

    readers = [threading.Thread(target=read, args=(p, h.stdout), daemon=True) for p, h in holders.items()]
    for r in readers:
        r.start()
    ports = {t[0]: t[3] for targets in plan["pods"].values() for t in targets}
    total = {port: sum(t[4] for ts in plan["pods"].values() for t in ts if t[3] == port) for port in proxies}
    last: dict[str, Any] = {}

    def settled() -> bool:
        with lock:
            if errors or len(states) < len(holders):
                return bool(errors)
            seen = [(label, s) for pod in states.values() for label, s in pod.items()]
        resets = {port: sum(s["reset"] for label, s in seen if ports[label] == port) for port in proxies}
        stats = {port: _stats(port) for port in proxies}
        last.update(stats=stats, resets=resets)
        for port, got in stats.items():
            if got is None:
                return False
            opened, denied = got
            # every connection admitted (open, besides this request) or refused, and every refusal seen by its pod
            if opened - 1 + denied != total[port] or resets[port] != denied:
                return False
        return True

    ok = _wait(settled, SETTLE_SECONDS, every=0.1)
    # the last refusal line is written within a second of the last refusal
    logged = ok and _wait(
        lambda: all(_logged_refusals(workdir / f"tinyproxy-{p}.log") == last["stats"][p][1] for p in proxies), 60
    )
    with lock:
        final = json.loads(json.dumps(states))
    for h in holders.values():
        assert h.stdin is not None
        h.stdin.write("quit\n")
        h.stdin.close()
    for h in holders.values():
        try:
            h.wait(timeout=60)
        except subprocess.TimeoutExpired:
            h.kill()
            h.wait()
    for r in readers:
        r.join(timeout=60)
    alive = {port: stop(p) for port, p in proxies.items()}
    out = {"settled": ok, "logged": logged, "errors": errors, "states": final, "last": {k: {str(p): v for p, v in d.items()}
           for k, d in last.items()}, "alive": {str(p): a for p, a in alive.items()},
           "stderr": {p: (workdir / f"holder-{p}.err").read_text(errors="replace") for p in holders}}  # fmt: skip
    (workdir / "results.json").write_text(json.dumps(out))


# --- the run: the namespaces made and removed from here ------------------------------------------------------------

_SERIAL = iter(range(1000))


@dataclass
class Run:
    share: int
    settled: bool
    logged: bool
    errors: list[str]
    states: dict[str, dict[str, dict[str, int]]]
    last: dict[str, Any]
    alive: dict[str, bool]
    logs: dict[int, str]
    reports: dict[str, str]
    holders_stderr: dict[str, str]

    def of(self, label: str) -> dict[str, int]:
        pod = label.split("-")[0]
        return self.states.get(pod, {}).get(label, {})

    def why(self) -> str:
        return json.dumps({"settled": self.settled, "logged": self.logged, "errors": self.errors, "states": self.states,
                           "last": self.last, "holders' stderr": self.holders_stderr}, indent=1)  # fmt: skip


def _ip(*args: str, stdin: str | None = None) -> None:
    done = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}\n{stdin or ''}"


@pytest.fixture(scope="module")
def run(tinyproxy_under_test: UnderTest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    workdir = tmp_path_factory.mktemp("client-key")
    workdir.chmod(0o755)
    share = _settings().deployment.firewall.max_connections_per_client
    pods = _pods(share)
    tag = f"{os.getpid() % 10000}{next(_SERIAL)}"
    node = f"ckn-{tag}"
    netns = {p: f"ckp-{tag}-{p}" for p in pods}
    made: list[str] = []
    try:
        for name in (node, *netns.values()):
            _ip("netns", "add", name)
            made.append(name)
            for knob in ("all", "default"):
                subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw", f"net.ipv6.conf.{knob}.accept_dad=0"],
                               check=True, capture_output=True)  # fmt: skip
        mine, theirs, links = _topology(node, netns, tag)
        for link in links:
            _ip(*link[1:])
        _ip("-n", node, "-batch", "-", stdin="\n".join(mine) + "\n")
        for p, lines in theirs.items():
            _ip("-n", netns[p], "-batch", "-", stdin="\n".join(lines) + "\n")
        plan = {
            "workdir": str(workdir),
            "binary": str(tinyproxy_under_test.path),
            "netns": netns,
            "pods": {p: [[t.label, t.src, t.dst, t.port, t.count] for t in ts] for p, ts in pods.items()},
        }
        (workdir / "plan.json").write_text(json.dumps(plan))
        done = subprocess.run(
            ["ip", "netns", "exec", node, sys.executable, __file__, "drive", str(workdir / "plan.json")],
            capture_output=True, text=True, timeout=SETTLE_SECONDS + 300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)
    out = json.loads((workdir / "results.json").read_text())
    logs = {
        port: (workdir / f"tinyproxy-{port}.log").read_text(errors="replace")
        for port in (ROUTE_PORT, ADDRESS_PORT)
        if (workdir / f"tinyproxy-{port}.log").exists()
    }
    reports = {
        p.name: p.read_text(errors="replace") for p in workdir.iterdir() if p.name.startswith(("asan", "ubsan", "tsan"))
    }
    return Run(share, out["settled"], out["logged"], out["errors"], out["states"], out["last"], out["alive"], logs, reports,
               out["stderr"])  # fmt: skip


def test_the_run_settled(run: Run) -> None:
    """Every connection was admitted or refused, every refusal reached its pod, and both instances stayed up."""
    assert run.settled, run.why()
    assert not run.errors, run.why()
    assert run.alive == {str(ROUTE_PORT): True, str(ADDRESS_PORT): True}, run.why()


@pytest.mark.parametrize("pod", ["a", "b"])
def test_a_ptp_pod_holds_one_share_over_both_families(run: Run, pod: str) -> None:
    """A dual-stack pod behind its own veth (a /32 and a /128 host route to it) is one client: of its share over
    IPv4 and its share over IPv6, opened at once, exactly one share is held, the rest reset at accept; the other
    ptp pod, on its own veth, still gets its whole share."""
    v4, v6 = run.of(f"{pod}-v4-{ROUTE_PORT}"), run.of(f"{pod}-v6-{ROUTE_PORT}")
    assert v4, run.why()
    assert v6, run.why()
    assert v4["held"] + v6["held"] == run.share, run.why()
    assert v4["reset"] + v6["reset"] == run.share, run.why()
    assert v4["closed"] == v6["closed"] == v4["failed"] == v6["failed"] == 0, run.why()


@pytest.mark.parametrize(
    "label",
    [f"{p}-{f}-{ROUTE_PORT}" for p in ("c", "d") for f in ("v4", "v6")],
)
def test_pods_on_a_bridge_are_keyed_by_address(run: Run, label: str) -> None:
    """Two pods on one bridge (a subnet route through it, as flannel's cni0): the interface is shared, so each
    address is its own client with a whole share (a share and one more opened: the one more reset), never merged."""
    got = run.of(label)
    assert got == {"held": run.share, "reset": 1, "closed": 0, "failed": 0}, run.why()


@pytest.mark.parametrize("label", [f"e-v4-{ROUTE_PORT}", f"e-v6-{ROUTE_PORT}", "g-1", "g-2"])
def test_a_route_that_is_no_host_route_through_a_device_keys_by_address(run: Run, label: str) -> None:
    """A pod the node reaches by its default route (`e`), and addresses with a /32 through a gateway (`g`, as
    Calico's routes to another node's borrowed addresses): the lookup falls back to the address."""
    got = run.of(label)
    assert got == {"held": run.share, "reset": 1, "closed": 0, "failed": 0}, run.why()


@pytest.mark.parametrize("family", ["v4", "v6"])
def test_clientkey_address_keys_a_ptp_pod_by_address(run: Run, family: str) -> None:
    """`ClientKey address` (the instance at 8889): the ptp pod's addresses are a client each, as before 0024."""
    got = run.of(f"a-{family}-{ADDRESS_PORT}")
    assert got == {"held": run.share, "reset": 1, "closed": 0, "failed": 0}, run.why()


def test_refusals_are_logged_in_0006s_format(run: Run) -> None:
    """Each instance logs its refusals as 0006 does (the address, never the interface), their count is what the pods
    saw reset, and the route lookup worked (no fallback warning)."""
    for port, log in run.logs.items():
        refused = [REFUSAL.search(line) for line in log.splitlines() if "Refused" in line]
        assert refused, log[-3000:]
        assert all(refused), log[-3000:]
        seen = sum(s["reset"] for pod in run.states.values() for label, s in pod.items()
                   if label.endswith(f"-{port}") or (port == ROUTE_PORT and label.startswith("g-")))  # fmt: skip
        assert sum(int(m.group(1)) for m in refused if m) == seen, log[-3000:]
        assert all(m.group(2).startswith(("10.99.", "fd99:")) for m in refused if m), log[-3000:]
        assert "ClientKey route:" not in log, log[-3000:]
    assert run.logged, run.why()


def test_no_sanitizer_report(run: Run) -> None:
    """A sanitizer build (ASAN/UBSAN/TSAN_OPTIONS log_path set by the driver) wrote no report over the whole run."""
    assert not run.reports, "\n".join(f"{name}:\n{text[:3000]}" for name, text in run.reports.items())


def test_an_unknown_clientkey_is_refused(tinyproxy_under_test: UnderTest, tmp_path: Path) -> None:
    """`ClientKey` takes `address` or `route`, parsed like 0006's directives: anything else stops tinyproxy at start."""
    conf = tmp_path / "tinyproxy.conf"
    conf.write_text(_conf(ROUTE_PORT, tmp_path / "tinyproxy.log", "interface"))
    env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0", "TSAN_OPTIONS": f"log_path={tmp_path}/tsan"}
    done = subprocess.run(["unshare", "-n", str(tinyproxy_under_test.path), "-d", "-c", str(conf)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0, done.stderr
    assert "line" in done.stderr.lower(), done.stderr


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "drive":
    drive(Path(sys.argv[2]))
