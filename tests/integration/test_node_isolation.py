"""No path through the proxy to the node itself or into the cluster: the rendered objects, real tinyproxy and
real nftables, live.

The test builds its own lab from two network namespaces joined by a veth pair:

    node     192.0.2.1, 2001:db8::1 (and loopback); tinyproxy runs here as the rendered UID, with the
             rendered tinyproxy.conf, Filter and nftables table (loaded by the init container's own command);
             an origin listens on [::]:443, so any request that reaches the node's own addresses is seen; a
             resolver on 127.0.0.53 (like systemd-resolved's) and an upstream stand-in on [::]:3128
    outside  192.0.2.2, 2001:db8::2 (the "internet"), plus 169.254.169.254, 168.63.129.16, 100.100.100.200
             and fd00:ec2::254 (the metadata endpoints), addresses in the cluster's pod, service and node
             ranges and just outside them, resolvers (AWS's 169.254.169.253 and fd00:ec2::253, a VPC
             resolver in the node range) and upstream addresses; an origin listens on [::]:443, resolvers
             on port 53 and an upstream stand-in on [::]:3128

Names resolve through the node namespace's own /etc/hosts (`ip netns exec` mounts /etc/netns/NAME/hosts),
and through the resolver its resolv.conf names (one of the lab's; each run writes it). Nothing is sent to
any address outside the lab. It needs root, iproute2, nftables and tinyproxy: CI has them, and a missing one
fails.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render import manifests
from proxy_component.settings import DEFAULT_DENY, Settings, parse_settings

from .spellings import spellings

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).with_name("netns_agent.py")
EXAMPLE = ROOT / "examples" / "ipv6-only" / "proxy.yaml"
TIMEOUT = 10.0
PORT = 443  # a ConnectPort of the default settings, so CONNECT is allowed by port and judged by destination

NODE_V4, NODE_V6 = "192.0.2.1", "2001:db8::1"
EXTERNAL_V4, EXTERNAL_V6 = "192.0.2.2", "2001:db8::2"
METADATA = ("169.254.169.254", "168.63.129.16", "100.100.100.200", "fd00:ec2::254")

# Each class of forbidden destination, by addresses spelled every way glibc and ipaddress accept.
EVERY_SPELLING = {
    "loopback": ("127.0.0.1", "::1"),
    "unspecified": ("0.0.0.0", "::"),
    "link-local (IMDS)": ("169.254.169.254", "fe80::1"),
    "metadata": ("168.63.129.16", "fd00:ec2::254"),
    "node": (NODE_V4, NODE_V6),
    "IPv4-mapped": ("::ffff:127.0.0.1", "::ffff:169.254.169.254"),
}
# More addresses of the same classes, canonical spelling only.
CANONICAL = ("127.1.2.3", "169.254.0.1", "100.100.100.200", "fe80::abcd", "::ffff:192.0.2.1")
# Names that resolve (through the namespace's /etc/hosts) to forbidden addresses.
BAD_NAMES = {
    "loop.test": "127.0.0.1",
    "loop6.test": "::1",
    "self.test": NODE_V4,
    "self6.test": NODE_V6,
    "imds.test": "169.254.169.254",
    "imds6.test": "fd00:ec2::254",
    "wire.test": "168.63.129.16",
}
GOOD = {"external.test": EXTERNAL_V4, EXTERNAL_V4: EXTERNAL_V4, EXTERNAL_V6: EXTERNAL_V6}

# A dual-stack cluster whose ranges the firewall refuses to tinyproxy by default.
LAB_CLUSTER = {
    "ipFamily": "dual",
    "podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
    "serviceCidrs": ["10.96.0.0/12", "fd00:10:96::/108"],
    "nodeCidrs": ["10.0.0.0/16", "fd00:10::/64"],
}
# The first and last host address of each range, every spelling of each.
IN_CLUSTER = {
    "pod": ("10.244.0.1", "10.244.255.254", "fd00:10:244::1", "fd00:10:244:ff:ffff:ffff:ffff:fffe"),
    "service": ("10.96.0.1", "10.111.255.254", "fd00:10:96::1", "fd00:10:96::f:fffe"),
    "node": ("10.0.0.1", "10.0.255.254", "fd00:10::1", "fd00:10::ffff:ffff:ffff:fffe"),
}
# Addresses just outside those ranges: the rule must not reach past them.
CLUSTER_EDGES = (
    "10.1.0.1",
    "10.95.255.254",
    "10.112.0.1",
    "10.243.255.254",
    "10.245.0.1",
    "fd00:10:0:1::1",
    "fd00:10:96::10:0",
    "fd00:10:244:100::1",
)
# Names that resolve (through /etc/hosts) into the cluster's ranges; dual.test to one of each family.
CLUSTER_NAMES = {
    "pod.test": ("10.244.0.1",),
    "pod6.test": ("fd00:10:244::1",),
    "svc.test": ("10.96.0.1",),
    "svc6.test": ("fd00:10:96::1",),
    "node.test": ("10.0.0.1",),
    "node6.test": ("fd00:10::1",),
    "dual.test": ("10.244.255.254", "fd00:10:96::f:fffe"),
}
# Resolvers tinyproxy may use, each behind one of the firewall's refusals: the node's own address, a cloud
# resolver in denyCidrs (link-local, AWS's IPv6 one) and a VPC resolver in the node range.
RESOLVERS = {
    "node loopback": "127.0.0.53",
    "AWS link-local": "169.254.169.253",
    "AWS IPv6": "fd00:ec2::253",
    "VPC, in the node range": "10.0.0.2",
}
NOT_A_RESOLVER = "10.0.0.3"  # in the node range, with a resolver listening, never in resolv.conf
BIG_NAME = "big.test"  # answered only over TCP (the UDP answer is truncated), with EXTERNAL_V4
UPSTREAMS = {"node loopback": "127.0.0.1", "link-local": "169.254.10.10", "node range": "10.0.0.50"}
UPSTREAM_PORT = 3128
OUTSIDE_EXTRA = (
    *(a for addresses in IN_CLUSTER.values() for a in addresses),
    *CLUSTER_EDGES,
    *(a for a in RESOLVERS.values() if not ipaddress.ip_address(a).is_loopback),
    NOT_A_RESOLVER,
    *(a for a in UPSTREAMS.values() if not ipaddress.ip_address(a).is_loopback),
)


@dataclass(frozen=True)
class Case:
    id: str
    host: str
    kind: str  # "literal", "name" or "good"
    cls: str = ""  # for a literal: the class of the address it spells
    port: int = PORT


def _cases() -> list[Case]:
    hosts: dict[str, str] = {}
    for cls, addresses in EVERY_SPELLING.items():
        for address in addresses:
            for text in sorted(spellings(address)):
                hosts.setdefault(text, cls)
    for address in CANONICAL:
        hosts.setdefault(address, "canonical")
    cases = [Case(f"l{i}", host, "literal", hosts[host]) for i, host in enumerate(sorted(hosts))]
    cases += [Case(f"n{i}", name, "name") for i, name in enumerate(sorted(BAD_NAMES))]
    cases += [Case(f"g{i}", host, "good") for i, host in enumerate(sorted(GOOD))]
    return cases


CASES = _cases()


def _cluster_cases() -> list[Case]:
    hosts: dict[str, str] = {}
    for cls, addresses in IN_CLUSTER.items():
        for address in addresses:
            for text in sorted(spellings(address)):
                hosts.setdefault(text, cls)
    cases = [Case(f"k{i}", host, "literal", hosts[host]) for i, host in enumerate(sorted(hosts))]
    cases += [Case(f"kn{i}", name, "name") for i, name in enumerate(sorted(CLUSTER_NAMES))]
    cases += [Case(f"ke{i}", host, "good") for i, host in enumerate(CLUSTER_EDGES)]
    return cases


CLUSTER_CASES = _cluster_cases()


def _canonical(address: str) -> str:
    return str(ipaddress.ip_address(address))


def _run(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr.strip()}")
    return result


@dataclass
class Outcome:
    get: tuple[str, str]
    connect: tuple[str, str]

    @property
    def reached(self) -> bool:
        """True when either method got a 200 from tinyproxy (a response or an open tunnel)."""
        return any(" 200 " in f"{status} " for status, _ in (self.get, self.connect))


@dataclass
class Run:
    outcomes: dict[str, Outcome]
    seen: dict[str, list[dict[str, Any]]]  # by server: node, outside (origins on 443), dns, upstream
    tinyproxy_log: str

    @property
    def node_seen(self) -> list[dict[str, Any]]:
        return self.seen["node"]

    @property
    def outside_seen(self) -> list[dict[str, Any]]:
        return self.seen["outside"]


class Lab:
    """The two namespaces, their origins, and a way to run the rendered proxy in the node namespace."""

    def __init__(self, workdir: Path) -> None:
        tag = f"{os.getpid() % 100000}"
        self.node, self.outside = f"pcnode{tag}", f"pcout{tag}"
        self.workdir = workdir
        self.procs: list[subprocess.Popen[str]] = []
        self.etc = Path("/etc/netns") / self.node
        self.logs: dict[str, list[Path]] = {}

    def serve(self, kind: str, ns: str, *args: str) -> None:
        """Start a netns_agent server in `ns`; what it sees is logged under `kind`."""
        log = self.workdir / f"{kind}-{ns}.log"
        self.logs.setdefault(kind, []).append(log)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, str(AGENT), args[0], str(log), *args[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", f"{kind} in {ns} did not start"

    def setup(self) -> None:
        node, out = self.node, self.outside
        for ns in (node, out):
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "set", "lo", "up", ns=ns)
        _run("ip", "link", "add", "pcn0", "netns", node, "type", "veth", "peer", "name", "pco0", "netns", out)
        _run("ip", "addr", "add", f"{NODE_V4}/24", "dev", "pcn0", ns=node)
        _run("ip", "addr", "add", f"{NODE_V6}/64", "dev", "pcn0", "nodad", ns=node)
        _run("ip", "addr", "add", f"{EXTERNAL_V4}/24", "dev", "pco0", ns=out)
        _run("ip", "addr", "add", f"{EXTERNAL_V6}/64", "dev", "pco0", "nodad", ns=out)
        for address in (*METADATA, *OUTSIDE_EXTRA):
            prefix = 128 if ":" in address else 32
            _run(
                "ip", "addr", "add", f"{address}/{prefix}", "dev", "pco0", *(["nodad"] if prefix == 128 else []), ns=out
            )
        for ns, dev in ((node, "pcn0"), (out, "pco0")):
            _run("ip", "link", "set", dev, "up", ns=ns)
        for address in (*METADATA, *OUTSIDE_EXTRA):
            _run("ip", "route", "add", address, "dev", "pcn0", ns=node)
        self.etc.mkdir(parents=True, exist_ok=True)
        names = {**BAD_NAMES, "external.test": EXTERNAL_V4}
        hosts = [f"{address} {name}" for name, address in names.items()]
        hosts += [f"{address} {name}" for name, addresses in CLUSTER_NAMES.items() for address in addresses]
        (self.etc / "hosts").write_text("127.0.0.1 localhost\n" + "\n".join(hosts) + "\n", encoding="utf-8")
        self.serve("node", node, "origin", str(PORT))
        self.serve("outside", out, "origin", str(PORT))
        self.serve("upstream", node, "origin", str(UPSTREAM_PORT))
        self.serve("upstream", out, "origin", str(UPSTREAM_PORT))
        answers = json.dumps({BIG_NAME: [EXTERNAL_V4]})
        on_node = [a for a in RESOLVERS.values() if ipaddress.ip_address(a).is_loopback]
        self.serve("dns", node, "dns", answers, *on_node)
        self.serve("dns", out, "dns", answers, *(a for a in RESOLVERS.values() if a not in on_node), NOT_A_RESOLVER)

    def teardown(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(TIMEOUT)
        for ns in (self.node, self.outside):
            _run("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.etc, ignore_errors=True)

    def proxy(
        self,
        settings: Settings,
        cases: list[Case],
        *,
        resolvers: tuple[str, ...] = ("127.0.0.1",),
        fill_resolvers: bool = True,
        firewall_from: Settings | None = None,
    ) -> Run:
        """Deploy the rendered objects into the node namespace, send every case, and collect what was seen.

        `resolvers` become the namespace's resolv.conf (the node's, which the pod gets with dnsPolicy
        Default). The controls: `fill_resolvers=False` loads the table with plain `nft -f`, leaving its
        resolver sets empty; `firewall_from` loads the table rendered for other settings.
        """
        config_dir = Path(tempfile.mkdtemp(prefix="pc-config-", dir=self.workdir))
        config_dir.chmod(0o755)

        def located(s: Settings) -> Settings:
            return s.model_copy(update={"deployment": s.deployment.model_copy(update={"config_dir": str(config_dir)})})

        settings = located(settings)
        objects = _proxy_objects(settings)
        data = dict(objects["ConfigMap"]["data"])
        if firewall_from is not None:
            data["nftables.conf"] = _proxy_objects(located(firewall_from))["ConfigMap"]["data"]["nftables.conf"]
        for key, text in data.items():
            (config_dir / key).write_text(text, encoding="utf-8")
            (config_dir / key).chmod(0o644)
        resolv = "".join(f"nameserver {r}\n" for r in resolvers) + "options timeout:1 attempts:1\n"
        (self.etc / "resolv.conf").write_text(resolv, encoding="utf-8")
        pod = objects["DaemonSet"]["spec"]["template"]["spec"]
        _run("nft", "flush", "ruleset", ns=self.node)
        for init in pod.get("initContainers", []):  # the firewall, exactly as the init container runs it
            assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
            command = init["command"] if fill_resolvers else ["nft", "-f", str(config_dir / "nftables.conf")]
            _run(*command, ns=self.node)
        uid = pod["securityContext"]["runAsUser"]
        command = pod["containers"][0]["command"]
        for logs in self.logs.values():
            for log in logs:
                log.write_text("", encoding="utf-8")
        proxy_log = self.workdir / "tinyproxy.log"
        with proxy_log.open("w", encoding="utf-8") as out:
            proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    self.node,
                    "setpriv",
                    f"--reuid={uid}",
                    f"--regid={uid}",
                    "--clear-groups",
                    *command,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            self._wait_listening(proc, settings.deployment.port, proxy_log)
            cases_file = self.workdir / "cases.json"
            cases_file.write_text(json.dumps([{"id": c.id, "host": c.host, "port": c.port} for c in cases]))
            result = subprocess.run(
                ["ip", "netns", "exec", self.node, sys.executable, str(AGENT), "client", str(cases_file),
                 f"127.0.0.1:{settings.deployment.port}"],
                capture_output=True, text=True, timeout=600, check=True,
            )  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(TIMEOUT)
        outcomes = {}
        for line in result.stdout.splitlines():
            row = json.loads(line)
            outcomes[row["id"]] = Outcome((row["get"][0], row["get"][1]), (row["connect"][0], row["connect"][1]))
        assert set(outcomes) == {c.id for c in cases}, "the client must answer for every case"
        time.sleep(0.2)  # let the origins write what they saw

        def seen(logs: list[Path]) -> list[dict[str, Any]]:
            return [json.loads(line) for log in logs for line in log.read_text(encoding="utf-8").splitlines()]

        return Run(outcomes, {k: seen(v) for k, v in self.logs.items()}, proxy_log.read_text(errors="replace"))

    def _wait_listening(self, proc: subprocess.Popen[str], port: int, log: Path) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"tinyproxy exited on the rendered config: {log.read_text()}")
            probe = _run("python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)",
                         ns=self.node, check=False)  # fmt: skip
            if probe.returncode == 0:
                return
            time.sleep(0.05)
        pytest.fail(f"tinyproxy did not listen on {port}: {log.read_text()}")


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    missing = [tool for tool in ("ip", "nft", "setpriv", "tinyproxy") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(
            f"the node-isolation tests need root and {', '.join(missing) or 'nothing else'} "
            "(apt-get install iproute2 nftables util-linux tinyproxy-bin): they must run, not skip"
        )
    with tempfile.TemporaryDirectory(prefix="pc-lab-") as tmp:
        workdir = Path(tmp)
        workdir.chmod(0o755)
        lab = Lab(workdir)
        try:
            lab.setup()
            yield lab
        finally:
            lab.teardown()


def _proxy_objects(settings: Settings) -> dict[str, dict[str, Any]]:
    """The rendered tinyproxy ConfigMap and DaemonSet, by kind."""
    app = settings.deployment.service_name
    return {
        obj["kind"]: obj
        for obj in manifests(settings)
        if obj["kind"] in ("ConfigMap", "DaemonSet") and obj["metadata"].get("labels", {}).get("app") == app
    }


def _settings(*, cluster: dict[str, Any] | None = None, upstream: str | None = None, **deployment: Any) -> Settings:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data.setdefault("deployment", {}).update(deployment)
    data["cluster"].update(cluster or {})
    if upstream is not None:
        data["proxy"]["upstream"] = {"url": upstream}
    return parse_settings(data)


def _reached(run: Run, cases: list[Case]) -> dict[str, Outcome]:
    """The cases that got through the proxy (a 200 to either method), by host: empty when all were refused."""
    return {c.host: run.outcomes[c.id] for c in cases if run.outcomes[c.id].reached}


def _assert_good_reached(run: Run, *, only: bool = True) -> None:
    for case in (c for c in CASES if c.kind == "good"):
        outcome = run.outcomes[case.id]
        assert outcome.get[0].startswith("HTTP/1.1 200"), f"{case.host}: plain GET must still work: {outcome}"
        assert " 200 " in f"{outcome.connect[0]} ", f"{case.host}: CONNECT must still open a tunnel: {outcome}"
        assert outcome.connect[1].startswith("HTTP/1.1 200"), (
            f"{case.host}: the tunnel must reach the origin: {outcome}"
        )
    seen_external = {row["local"] for row in run.outside_seen}
    assert seen_external >= {EXTERNAL_V4, EXTERNAL_V6}
    if only:
        assert seen_external == {EXTERNAL_V4, EXTERNAL_V6}, f"only the external origin may be reached: {seen_external}"


def test_the_generated_spellings_cover_every_class() -> None:
    literals = [c for c in CASES if c.kind == "literal"]
    # Every spelling glibc accepts: for IPv4 1-4 parts in decimal, octal, zero-padded octal and hex.
    assert len(spellings("127.0.0.1")) > 700
    assert {"0177.0.0.1", "0177.1", "2130706433", "0x7f000001", "0x7f.1", "127.1"} <= spellings("127.0.0.1")
    assert {"0::1", "0:0:0:0:0:0:0:1", "::0:1", "0000::1", "::0.0.0.1"} <= spellings("::1")
    assert len(literals) > 4000


def test_the_rendered_proxy_never_reaches_the_node_or_metadata(lab: Lab) -> None:
    """Filter and firewall as rendered: every spelling and name refused, for GET and CONNECT; the internet works."""
    run = lab.proxy(_settings(), CASES)
    bad = [c for c in CASES if c.kind != "good"]
    assert _reached(run, bad) == {}
    assert run.node_seen == [], "nothing may reach the node's own addresses"
    _assert_good_reached(run)


def test_the_kernel_rules_alone_refuse_every_spelling_and_name(lab: Lab) -> None:
    """Without the Filter, the nftables table still refuses everything: it judges the address connected to."""
    run = lab.proxy(_settings(denyDestinations=[]), CASES)
    bad = [c for c in CASES if c.kind != "good"]
    assert _reached(run, bad) == {}
    assert run.node_seen == []
    _assert_good_reached(run)


def test_the_filter_alone_refuses_every_literal_spelling_but_not_names(lab: Lab) -> None:
    """The Filter is a second layer: it catches every literal spelling, and cannot see where a name resolves."""
    run = lab.proxy(_settings(firewall={"enabled": False, "allowClusterDestinations": True}), CASES)
    literals = [c for c in CASES if c.kind == "literal" and c.cls != "node"]
    assert _reached(run, literals) == {}
    # What only the kernel rules stop: the node's own addresses (no static pattern knows them) and names.
    node = {c.host for c in CASES if c.cls == "node"}
    names = [c for c in CASES if c.kind == "name"]
    assert set(_reached(run, names)) == set(BAD_NAMES), "without the firewall, names that resolve to the node pass"
    assert {"192.0.2.1", "2001:db8::1"} <= set(_reached(run, [c for c in CASES if c.host in node]))
    assert {row["local"] for row in run.node_seen} == {"127.0.0.1", "::1", NODE_V4, NODE_V6}
    assert {row["local"] for row in run.outside_seen} - {EXTERNAL_V4, EXTERNAL_V6} == {
        "169.254.169.254", "fd00:ec2::254", "168.63.129.16"
    }  # fmt: skip
    _assert_good_reached(run, only=False)


def test_without_either_layer_the_lab_reaches_the_node(lab: Lab) -> None:
    """The control: with no Filter and no firewall the same requests do reach the node, so the tests can fail."""
    hosts = ["127.0.0.1", "0177.1", "[0::1]", "self.test", "169.254.169.254", "0xa9fea9fe"]
    cases = [Case(f"c{i}", host, "literal") for i, host in enumerate(hosts)]
    run = lab.proxy(
        _settings(denyDestinations=[], firewall={"enabled": False, "allowClusterDestinations": True}), cases
    )
    assert set(_reached(run, cases)) == set(hosts)
    assert {row["local"] for row in run.node_seen} >= {"127.0.0.1", "::1", NODE_V4}
    assert {row["local"] for row in run.outside_seen} == {"169.254.169.254"}


def test_default_filter_is_what_the_tests_ran() -> None:
    """The Filter tested above is the default one, line for line."""
    objects = _proxy_objects(_settings())
    assert objects["ConfigMap"]["data"]["filter"].splitlines() == list(DEFAULT_DENY)
    rules = objects["ConfigMap"]["data"]["nftables.conf"]
    assert "fib daddr type local" in rules
    for cidr in ("169.254.0.0/16", "fd00:ec2::/32", "0.0.0.0/8", "::/128"):
        assert str(ipaddress.ip_network(cidr)) in rules


# --- the cluster's own ranges ---------------------------------------------------------------


def _reached_fully(outcome: Outcome) -> bool:
    """A plain GET answered by an origin, and a CONNECT tunnel that reached one."""
    return (
        outcome.get[0].startswith("HTTP/1.1 200")
        and " 200 " in f"{outcome.connect[0]} "
        and outcome.connect[1].startswith("HTTP/1.1 200")
    )


def test_the_generated_cluster_cases_cover_every_range() -> None:
    literals = [c for c in CLUSTER_CASES if c.kind == "literal"]
    assert {c.cls for c in literals} == set(IN_CLUSTER)
    settings = _settings(cluster=LAB_CLUSTER)
    ranges = [ipaddress.ip_network(n) for n in settings.cluster_destinations()]
    for case in literals:  # each spelling means an address inside a refused range, as glibc reads it
        packed = socket.inet_pton(socket.AF_INET6, case.host) if ":" in case.host else socket.inet_aton(case.host)
        assert any(ipaddress.ip_address(packed) in net for net in ranges), case
    for edge in CLUSTER_EDGES:
        assert not any(ipaddress.ip_address(edge) in net for net in ranges), edge
    assert len(literals) > 5000


def test_the_kernel_rules_refuse_the_cluster_ranges_by_every_spelling_and_name(lab: Lab) -> None:
    """Without the Filter: pods', Services' and nodes' addresses are refused, just outside them is reached."""
    run = lab.proxy(_settings(cluster=LAB_CLUSTER, denyDestinations=[]), CLUSTER_CASES)
    bad = [c for c in CLUSTER_CASES if c.kind != "good"]
    assert _reached(run, bad) == {}
    in_cluster = {_canonical(a) for addresses in IN_CLUSTER.values() for a in addresses}
    seen = {_canonical(row["local"]) for row in run.outside_seen}
    assert seen & in_cluster == set(), "no connection may reach an address in the cluster's ranges"
    for case in (c for c in CLUSTER_CASES if c.kind == "good"):
        assert _reached_fully(run.outcomes[case.id]), (case.host, run.outcomes[case.id])
    assert seen == {_canonical(a) for a in CLUSTER_EDGES}
    assert run.node_seen == []


def test_allow_cluster_destinations_lets_tinyproxy_reach_them(lab: Lab) -> None:
    """The setting, and the control: the same lab does reach the cluster's addresses when the rule is off."""
    hosts = [*(a for addresses in IN_CLUSTER.values() for a in addresses), *CLUSTER_NAMES]
    cases = [Case(f"a{i}", host, "literal") for i, host in enumerate(hosts)]
    settings = _settings(cluster=LAB_CLUSTER, denyDestinations=[], firewall={"allowClusterDestinations": True})
    run = lab.proxy(settings, cases)
    assert all(_reached_fully(run.outcomes[c.id]) for c in cases), run.outcomes
    in_cluster = {_canonical(a) for addresses in IN_CLUSTER.values() for a in addresses}
    assert {_canonical(row["local"]) for row in run.outside_seen} == in_cluster


# --- DNS over TCP -----------------------------------------------------------------------------


@pytest.mark.parametrize("resolver", list(RESOLVERS))
def test_dns_over_tcp_reaches_the_resolver_tinyproxy_uses(lab: Lab, resolver: str) -> None:
    """An answer too large for UDP comes over TCP from the resolv.conf resolver, behind each kind of refusal."""
    address = RESOLVERS[resolver]
    settings = _settings(cluster=LAB_CLUSTER)
    cases = [Case("d0", BIG_NAME, "good")]
    run = lab.proxy(settings, cases, resolvers=(address,))
    assert _reached_fully(run.outcomes["d0"]), (run.outcomes, run.tinyproxy_log)
    assert {_canonical(row["local"]) for row in run.outside_seen} == {EXTERNAL_V4}
    udp = {(row["local"], row["name"]) for row in run.seen["dns"] if row["transport"] == "udp"}
    tcp = {(row["local"], row["name"]) for row in run.seen["dns"] if row.get("event") == "query"}
    assert udp == tcp == {(address, BIG_NAME)}, run.seen["dns"]

    # The control, without the exemption (as the rules were for the node's and the clouds' resolvers; the node
    # range is refused since this change): the same table with its resolver sets empty refuses the TCP lookup.
    before = lab.proxy(settings, cases, resolvers=(address,), fill_resolvers=False)
    assert not before.outcomes["d0"].reached, before.outcomes
    assert [row for row in before.seen["dns"] if row["transport"] == "tcp"] == []
    assert {(row["local"], row["name"]) for row in before.seen["dns"]} == {(address, BIG_NAME)}
    assert before.outside_seen == []


def test_the_dns_exemption_is_port_53_of_the_resolvers_only(lab: Lab) -> None:
    """Other ports of the resolver and port 53 elsewhere stay refused; what passes is its port 53 itself."""
    resolver = RESOLVERS["VPC, in the node range"]
    cases = [
        Case("x0", resolver, "literal"),
        Case("x1", NOT_A_RESOLVER, "literal", port=53),
        Case("x2", "127.0.0.53", "literal", port=53),
        Case("x3", resolver, "literal", port=53),
    ]
    run = lab.proxy(_settings(cluster=LAB_CLUSTER, denyDestinations=[]), cases, resolvers=(resolver,))
    assert not run.outcomes["x0"].reached
    assert run.outside_seen == []
    assert run.node_seen == []
    accepted = [row["local"] for row in run.seen["dns"] if row.get("event") == "accept"]
    # A pod's plain-HTTP request to the resolver's own port 53 is let through (CONNECT is not: ConnectPort).
    assert accepted == [resolver]
    assert run.outcomes["x3"].connect[0] == "HTTP/1.1 403 Access violation"


# --- an upstream proxy on the node or in a refused range ---------------------------------------


@pytest.mark.parametrize("where", list(UPSTREAMS))
def test_an_upstream_given_by_address_is_reached_on_its_port_only(lab: Lab, where: str) -> None:
    """The node's loopback, link-local or the node range: exempt at exactly that address and port."""
    address = UPSTREAMS[where]
    settings = _settings(cluster=LAB_CLUSTER, upstream=f"http://{address}:{UPSTREAM_PORT}")
    cases = [Case("u0", "external.test", "good")]
    run = lab.proxy(settings, cases)
    outcome = run.outcomes["u0"]
    assert outcome.get[0].startswith("HTTP/1.1 200"), outcome
    assert outcome.connect[0].startswith("HTTP/1.1 200"), outcome
    lines = sorted((row["local"], row.get("line", "")) for row in run.seen["upstream"] if row["event"] == "request")
    assert lines == [
        (address, f"CONNECT external.test:{PORT} HTTP/1.1"),
        (address, f"GET http://external.test:{PORT}/get-u0 HTTP/1.1"),
    ]
    assert run.outside_seen == []
    assert run.node_seen == []

    # The controls: rules rendered for the same address on another port, or another address, refuse it.
    for other in (f"http://{address}:{UPSTREAM_PORT + 1}", f"http://192.0.2.3:{UPSTREAM_PORT}"):
        before = lab.proxy(settings, cases, firewall_from=_settings(cluster=LAB_CLUSTER, upstream=other))
        assert not before.outcomes["u0"].reached, (other, before.outcomes)
        assert before.seen["upstream"] == [], other
