"""No path through the proxy to the node itself: the rendered objects, real tinyproxy and real nftables, live.

The test builds its own lab from two network namespaces joined by a veth pair:

    node     192.0.2.1, 2001:db8::1 (and loopback); tinyproxy runs here as the rendered UID, with the
             rendered tinyproxy.conf, Filter and nftables table (loaded by the init container's own command);
             an origin listens on [::]:443, so any request that reaches the node's own addresses is seen
    outside  192.0.2.2, 2001:db8::2 (the "internet"), plus 169.254.169.254, 168.63.129.16, 100.100.100.200
             and fd00:ec2::254 (the metadata endpoints); an origin listens on [::]:443

Names resolve through the node namespace's own /etc/hosts (`ip netns exec` mounts /etc/netns/NAME/hosts);
its resolv.conf names only 127.0.0.1, so no lookup leaves the namespace. Nothing is sent to any address
outside the lab. It needs root, iproute2, nftables and tinyproxy: CI has them, and a missing one fails.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
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


@dataclass(frozen=True)
class Case:
    id: str
    host: str
    kind: str  # "literal", "name" or "good"
    cls: str = ""  # for a literal: the class of the address it spells


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
    node_seen: list[dict[str, Any]]
    outside_seen: list[dict[str, Any]]
    tinyproxy_log: str


class Lab:
    """The two namespaces, their origins, and a way to run the rendered proxy in the node namespace."""

    def __init__(self, workdir: Path) -> None:
        tag = f"{os.getpid() % 100000}"
        self.node, self.outside = f"pcnode{tag}", f"pcout{tag}"
        self.workdir = workdir
        self.procs: list[subprocess.Popen[str]] = []
        self.etc = Path("/etc/netns") / self.node

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
        for address in METADATA:
            prefix = 128 if ":" in address else 32
            _run(
                "ip", "addr", "add", f"{address}/{prefix}", "dev", "pco0", *(["nodad"] if prefix == 128 else []), ns=out
            )
        for ns, dev in ((node, "pcn0"), (out, "pco0")):
            _run("ip", "link", "set", dev, "up", ns=ns)
        for address in METADATA:
            _run("ip", "route", "add", address, "dev", "pcn0", ns=node)
        self.etc.mkdir(parents=True, exist_ok=True)
        hosts = [f"{address} {name}" for name, address in {**BAD_NAMES, "external.test": EXTERNAL_V4}.items()]
        (self.etc / "hosts").write_text("127.0.0.1 localhost\n" + "\n".join(hosts) + "\n", encoding="utf-8")
        (self.etc / "resolv.conf").write_text("nameserver 127.0.0.1\n", encoding="utf-8")
        self.node_log, self.outside_log = self.workdir / "node-origin.log", self.workdir / "outside-origin.log"
        for ns, log in ((node, self.node_log), (out, self.outside_log)):
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, str(AGENT), "origin", str(log), str(PORT)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            self.procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", f"origin in {ns} did not start"

    def teardown(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait(TIMEOUT)
        for ns in (self.node, self.outside):
            _run("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.etc, ignore_errors=True)

    def proxy(self, settings: Settings, cases: list[Case]) -> Run:
        """Deploy the rendered objects into the node namespace, send every case, and collect what was seen."""
        config_dir = Path(tempfile.mkdtemp(prefix="pc-config-", dir=self.workdir))
        config_dir.chmod(0o755)
        deployment = settings.deployment.model_copy(update={"config_dir": str(config_dir)})
        settings = settings.model_copy(update={"deployment": deployment})
        objects = _proxy_objects(settings)
        for key, text in objects["ConfigMap"]["data"].items():
            (config_dir / key).write_text(text, encoding="utf-8")
            (config_dir / key).chmod(0o644)
        pod = objects["DaemonSet"]["spec"]["template"]["spec"]
        _run("nft", "flush", "ruleset", ns=self.node)
        for init in pod.get("initContainers", []):  # the firewall, exactly as the init container runs it
            assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
            _run(*init["command"], ns=self.node)
        uid = pod["securityContext"]["runAsUser"]
        command = pod["containers"][0]["command"]
        for log in (self.node_log, self.outside_log):
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
            cases_file.write_text(json.dumps([{"id": c.id, "host": c.host, "port": PORT} for c in cases]))
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

        def seen(log: Path) -> list[dict[str, Any]]:
            return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]

        return Run(outcomes, seen(self.node_log), seen(self.outside_log), proxy_log.read_text(errors="replace"))

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


def _settings(**deployment: Any) -> Settings:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data.setdefault("deployment", {}).update(deployment)
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
