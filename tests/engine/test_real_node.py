"""The proxy on real nodes (pytest -m realnode): `scripts/cluster up 0 --real 2` starts the test cluster with two
real nodes (each containerd + runc, the kubelet, kube-proxy in nftables mode and CoreDNS, in the network namespace
`<cluster>-real-<i>`, the nodes linked by a bridge of their own), the project's image and a pause image imported.
The IPv6-only example is applied with `pulumi up` under the real engine, with `trafficDistribution: PreferSameNode`
(the cluster is 1.37); then a pod on each node, IPv6-only and given nothing but `envFrom: proxy-config`, reaches an
IPv4-only origin in a network namespace of this test's own ("the internet", reachable from both nodes over IPv4
only) through `http-proxy.kube-system.svc.k8s.internal:8888`. Node 0 (`RealNode.node`) is the one most tests use.

The clients and servers are one static Go binary (realnode/tool.go, built here), mounted into the pods read-only.
Names of "the internet" (origin.example, upstream.example) are served by the node's CoreDNS from the cluster's
hosts file; the pods' own DNS is the cluster's (kube-dns, fd00:10:96::a).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.dataplane.image import DEFAULT_IMAGE
from proxy_component.live.access import CHECK_NAME
from proxy_component.settings import PROBE_NAMESPACE, ca_certificates
from tests.pki import make_ca, make_leaf

from .conftest import ROOT, Project, changes

pytestmark = pytest.mark.realnode
EXAMPLE = ROOT / "examples/ipv6-only"
ORIGIN = "198.51.100.2"  # TEST-NET-2: "the internet", IPv4 only, in this test's own network namespace
NODE_ON_INTERNET = "198.51.100.1"  # node 0's address on that network
NODES_ON_INTERNET = (NODE_ON_INTERNET, "198.51.100.3")  # each node's
NODE6 = "fd00:10::2"  # node 0's IPv6 address (scripts/cluster: fd00:10::<i+2>)
NODES = 2
UPSTREAM_USER, UPSTREAM_PASSWORD = "egress", "Upstr3am-s3cret"
PROXY_POD_LABEL = "app=http-proxy"


def run(*args: str, check: bool = True, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kwargs)
    if check:
        assert result.returncode == 0, f"{' '.join(args)}: {result.stdout}{result.stderr}"
    return result


def wait(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(1)


@dataclass
class RealNode:
    kubeconfig: Path
    workdir: Path
    netns: str  # node 0's network namespace
    node: str  # its Node name
    nodes: list[str]  # every real node's name (node i's network namespace has the same name)
    cluster: str
    internet: str  # this test's "internet" namespace
    tool: Path
    hosts: Path  # the cluster's hosts file (CoreDNS serves it on the node)
    upstream: subprocess.Popen[str] | None = None  # the corporate proxy stand-in (tinyproxy in "the internet")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def pod_on(self, node: str) -> dict[str, Any] | None:
        """The proxy pod on `node` that is not being deleted, None while there is none (mid-roll)."""
        pods = self.get("pods", "-n", "kube-system", "-l", PROXY_POD_LABEL, "--field-selector", f"spec.nodeName={node}")
        running = [p for p in pods["items"] if p["metadata"].get("deletionTimestamp") is None]
        return running[0] if len(running) == 1 else None

    def proxy_pod(self, node: str | None = None) -> dict[str, Any]:
        """The proxy pod on `node` (node 0 by default), which must be there."""
        pod = self.pod_on(node or self.node)
        assert pod is not None, f"no single proxy pod on {node or self.node}"
        return pod

    def containerd(self, node: str) -> str:
        """Node `node`'s containerd socket (scripts/cluster real_run: /run/proxy-component-<id>-<i>)."""
        index = self.nodes.index(node)
        return f"/run/proxy-component-{hashlib.sha256(self.cluster.encode()).hexdigest()[:6]}-{index}/containerd.sock"

    def fetch(self, pod: str, *urls: str, env: tuple[str, ...] = ()) -> dict[str, str]:
        """GET each URL from inside `pod` with Go's default client (`env` first: `-u NAME` or `NAME=value`)."""
        prefix = ["env", *env] if env else []
        out = self.kubectl("exec", pod, "--", *prefix, "/tools/tool", "fetch", *urls, timeout=180)
        answers: dict[str, str] = json.loads(out.strip().splitlines()[-1])
        return answers


def _upstream_conf(workdir: Path, *passwords: str) -> None:
    """The corporate proxy stand-in's config: it accepts `UPSTREAM_USER` with each of `passwords`. Where its user
    (nobody, once it has dropped root) reads it again when it reloads: a directory of its own under /tmp, not the
    test's (whose parents only root may enter)."""
    conf = _upstream_dir(workdir) / "upstream.conf"
    conf.write_text(
        f"User nobody\nGroup nogroup\nPort 3128\nListen {ORIGIN}\nTimeout 30\nLogLevel Info\n"
        f"Allow {NODE_ON_INTERNET.rsplit('.', 1)[0]}.0/24\n"
        + "".join(f"BasicAuth {UPSTREAM_USER} {password}\n" for password in passwords)
        + "ConnectPort 443\n"
    )
    conf.chmod(0o644)


def _upstream_dir(workdir: Path) -> Path:
    link = workdir / "upstream-dir"
    if not link.is_symlink():
        made = Path(tempfile.mkdtemp(prefix=f"pc-upstream-{os.getpid()}-"))
        made.chmod(0o755)
        link.symlink_to(made)
    return link.resolve()


def _pod(name: str, node: str, tools: Path, command: list[str], env_from: bool) -> dict[str, Any]:
    """A pod on the real node running the project's image as root (to read the tool's host directory)."""
    container: dict[str, Any] = {
        "name": name,
        "image": DEFAULT_IMAGE,
        "imagePullPolicy": "Never",
        "command": command,
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
        "volumeMounts": [
            {"name": "tools", "mountPath": "/tools", "readOnly": True},
            {"name": "ca", "mountPath": "/etc/ssl/certs", "readOnly": True},
        ],
    }
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "containers": [container],
            "volumes": [
                {"name": "tools", "hostPath": {"path": str(tools), "type": "Directory"}},
                {"name": "ca", "configMap": {"name": "origin-ca"}},
            ],
        },
    }


def test_up_with_a_real_node_and_down_leave_no_namespace_mount_process_cgroup_or_nft_table(tmp_path: Path) -> None:
    cluster = f"pc-down-{os.getpid()}"
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": cluster, "KWOK_WORKDIR": str(tmp_path / "kwok")}
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "1", "--real", "1"], capture_output=True,
                        text=True, env=env, timeout=3000)  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1]
        nodes = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"],
                               capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        ready = {
            n["metadata"]["name"]: [c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"]
            for n in json.loads(nodes.stdout)["items"]
        }
        assert ready == {f"{cluster}-real-0": ["True"], "node-000000": ["True"]}
        # The host's nft, as kube-proxy runs it (Debian 12's 1.0.6)
        tables = subprocess.run(["ip", "netns", "exec", f"{cluster}-real-0", "nft", "list", "tables"],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert "table ip6 kube-proxy" in tables.stdout, "kube-proxy (nftables) runs in the node"
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert cluster not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout == ""
    assert cluster not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{cluster}-real-*"))
    assert not any(line.startswith("pc") and cluster in line for line in Path("/proc/net/dev").read_text().splitlines())


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """realnode/tool.go, static (it runs on the host and in the pods alike)."""
    out = tmp_path_factory.mktemp("tools")
    t0 = time.monotonic()
    run("go", "build", "-trimpath", "-o", str(out / "tool"), str(Path(__file__).with_name("realnode") / "tool.go"),
        env={**os.environ, "CGO_ENABLED": "0"}, timeout=600)  # fmt: skip
    print(f"realnode: tool built in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return out / "tool"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory, tool: Path) -> Iterator[RealNode]:
    workdir = tmp_path_factory.mktemp("real")
    cluster = f"pc-real-{os.getpid()}"
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": cluster, "KWOK_WORKDIR": str(workdir / "kwok")}
    t0 = time.monotonic()
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "0", "--real", str(NODES)],
                        capture_output=True, text=True, env=env, timeout=3000)  # fmt: skip
    print(f"realnode: scripts/cluster up 0 --real {NODES} in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    internet = f"pc-inet-{os.getpid()}"
    etc = Path("/etc/netns") / internet
    servers: list[subprocess.Popen[str]] = []
    try:
        assert up.returncode == 0, f"scripts/cluster up failed: {up.stderr}"
        node = RealNode(
            kubeconfig=Path(up.stdout.strip().splitlines()[-1]),
            workdir=workdir,
            netns=f"{cluster}-real-0",
            node=f"{cluster}-real-0",
            nodes=[f"{cluster}-real-{i}" for i in range(NODES)],
            cluster=cluster,
            internet=internet,
            tool=tool,
            hosts=workdir / "kwok" / f"{cluster}.hosts",
        )
        # "The internet": IPv4 only, a bridge that each node's inet0 joins (and nothing else).
        run("ip", "netns", "add", internet)
        run("ip", "netns", "exec", internet, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        run("ip", "-n", internet, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", internet, "addr", "add", f"{ORIGIN}/24", "dev", "br0")
        run("ip", "-n", internet, "link", "set", "br0", "up")
        run("ip", "-n", internet, "link", "set", "lo", "up")
        for i, (netns, address) in enumerate(zip(node.nodes, NODES_ON_INTERNET, strict=True)):
            link = f"pci{os.getpid() % 100000}n{i}"
            run("ip", "-n", internet, "link", "add", link, "type", "veth", "peer", "name", "inet0", "netns", netns)
            run("ip", "-n", internet, "link", "set", link, "master", "br0", "up")
            run("ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "inet0")
            run("ip", "-n", netns, "link", "set", "inet0", "up")
        node.hosts.write_text(f"{ORIGIN} origin.example upstream.example\n")
        # The upstream proxy, in "the internet", resolves the origin from its own hosts file (`ip netns exec` binds
        # /etc/netns/NAME/hosts over /etc/hosts).
        etc.mkdir(parents=True)
        (etc / "hosts").write_text(f"{ORIGIN} origin.example\n")
        ca = make_ca("Real Node Lane CA")
        leaf = make_leaf(ca, "origin.example")
        (workdir / "origin.crt").write_text(leaf.cert_pem)
        (workdir / "origin.key").write_text(leaf.key_pem)
        (workdir / "ca.crt").write_text(ca.cert_pem)
        _upstream_conf(workdir, UPSTREAM_PASSWORD)
        commands = [
            [internet, str(tool), "serve", f"{ORIGIN}:80", "origin"],
            [internet, str(tool), "serve", f"{ORIGIN}:443", "origin-tls", str(workdir / "origin.crt"),
             str(workdir / "origin.key")],
            [node.netns, str(tool), "serve", ":8081", "node"],
            [internet, str(tool), "silent", f"{ORIGIN}:{SILENT_PORT}"],  # an origin that hangs (never answers)
        ]  # fmt: skip
        for netns, *command in commands:
            server = subprocess.Popen(["ip", "netns", "exec", netns, *command], stdout=subprocess.PIPE, text=True)
            servers.append(server)
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "ready", command
        with (workdir / "upstream.log").open("w") as upstream_log:
            node.upstream = subprocess.Popen(
                ["ip", "netns", "exec", internet, "tinyproxy", "-d", "-c", str(_upstream_dir(workdir) / "upstream.conf")],
                stdout=upstream_log, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            servers.append(node.upstream)
        node.kubectl("-n", "default", "create", "configmap", "origin-ca",
                     f"--from-file=ca-certificates.crt={workdir / 'ca.crt'}")  # fmt: skip
        yield node
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
        for server in servers:
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        subprocess.run(["ip", "netns", "del", internet], capture_output=True)
        shutil.rmtree(etc, ignore_errors=True)
        if (workdir / "upstream-dir").is_symlink():
            shutil.rmtree((workdir / "upstream-dir").resolve(), ignore_errors=True)
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True,
                              env=env, timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr


@pytest.fixture(scope="module")
def example(real: RealNode, engine: Path, engine_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The IPv6-only example, `pulumi up` against the real node's cluster (the provider waits for the rollout)."""
    project = Project(EXAMPLE, tmp_path_factory.mktemp("example"), engine, engine_venv, "real")
    project.env["KUBECONFIG"] = str(real.kubeconfig)
    project.init()
    (project.dir / "proxy.yaml").write_text(yaml.safe_dump(_settings(), sort_keys=False))
    t0 = time.monotonic()
    project.up()
    print(f"realnode: pulumi up of examples/ipv6-only in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    _prefers_own_nodes(real)
    return project


@pytest.fixture(scope="module")
def clients(real: RealNode, example: Project) -> dict[str, str]:
    """The seed's pod on each node (`client` on node 0, `client1` on node 1): IPv6 only, proxy-config as its whole
    environment; and `other`, a server pod on node 0. Node name to the client's pod name."""
    names = {node: "client" if i == 0 else f"client{i}" for i, node in enumerate(real.nodes)}
    pods = [(name, node, ["sleep", "86400"], True) for node, name in names.items()]
    pods.append(("other", real.node, ["/tools/tool", "serve", ":8080", "other-pod"], False))
    for name, node, command, env_from in pods:
        pod = _pod(name, node, real.tool.parent, command, env_from)
        real.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod))
    real.kubectl("-n", "default", "wait", "--for=condition=Ready", *(f"pod/{p[0]}" for p in pods), "--timeout=120s",
                 timeout=150)  # fmt: skip
    return names


@pytest.fixture(scope="module")
def client(clients: dict[str, str]) -> str:
    """The client pod on node 0."""
    return clients[next(iter(clients))]


def _pod_ip(real: RealNode, name: str) -> str:
    ips = [i["ip"] for i in real.get("pod", name, "-n", "default")["status"]["podIPs"]]
    assert len(ips) == 1, f"{name}: expected one address, got {ips}"
    assert ":" in ips[0], f"{name}: expected an IPv6 address, got {ips}"
    return str(ips[0])


def _tinyproxy_pid(real: RealNode, node: str | None = None) -> int:
    """The tinyproxy process of the proxy pod on `node` (node 0 by default): a process of the node's cgroup tree."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            cgroup = (proc / "cgroup").read_text()
        except OSError:
            continue
        # The container's tinyproxy, its watcher shell's child (dataplane.lifecycle.proxy_command); not a check of new
        # files, which names the kubelet's timestamped directory.
        if (
            cmdline[:4] == [b"tinyproxy", b"-d", b"-c", b"/etc/tinyproxy/tinyproxy.conf"]
            and f"/{node or real.netns}/" in cgroup
        ):
            pids.append(int(proc.name))
    assert len(pids) == 1, pids
    return pids[0]


def test_the_daemonset_is_ready_on_the_real_node_by_the_kubelets_own_probes(real: RealNode, example: Project) -> None:
    node = real.get("node", real.node)
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {}), "kwok leaves this node alone"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
    ds = real.get("daemonset", "http-proxy", "-n", "kube-system")
    assert ds["status"]["desiredNumberScheduled"] == ds["status"]["numberReady"] == NODES
    template = ds["spec"]["template"]["spec"]
    assert [c["image"] for c in template["initContainers"] + template["containers"]] == [DEFAULT_IMAGE] * 2
    pod = real.proxy_pod()
    assert pod["spec"]["nodeName"] == real.node
    assert [(c["name"], c["ready"], c["restartCount"]) for c in pod["status"]["containerStatuses"]] == [
        ("tinyproxy", True, 0)
    ]
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    # The readiness probe reached tinyproxy: its stats page request is in the container's log, which the API
    # server fetched from the kubelet on the node's address.
    logs = real.kubectl("-n", "kube-system", "logs", pod["metadata"]["name"], "-c", "tinyproxy")
    assert "proxy-component.invalid" in logs or "stathost" in logs.lower(), logs[-2000:]


def test_the_init_containers_nft_table_is_loaded_in_the_nodes_network_namespace(
    real: RealNode, example: Project
) -> None:
    # Listed with the host's own nft (Debian 12's 1.0.6, older than the image's 1.1.3 that loaded it), in the node's
    # network: the table holds no declared set, which that nft would crash on (the client limits' meters list fine).
    pid = _tinyproxy_pid(real)
    table = run("nsenter", "-t", str(pid), "-n", "nft", "list", "table", "inet", "proxy-component").stdout
    assert "chain tinyproxy-egress" in table
    # The kernel counts no open connection since patch 0006 (tinyproxy does): only the rate meters, with a timeout.
    assert "ct count" not in table, table
    assert "limit rate over 100/second burst 200 packets" in table, table
    assert "meta skuid 61888" in table
    assert f"meta skuid 61888 ip6 daddr {NODE6} tcp dport 53 counter" in table, table
    assert "proxy-component" not in run("nft", "list", "tables").stdout, "nothing on the host itself"


def test_tinyproxy_runs_as_the_configured_uid_read_only_without_capabilities(real: RealNode, example: Project) -> None:
    pid = _tinyproxy_pid(real)
    status = dict(
        line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line
    )
    assert status["Uid"].split() == ["61888"] * 4
    assert status["Gid"].split() == ["61888"] * 4
    for caps in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[caps], 16) == 0, (caps, status[caps])
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"
    root = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
            if line.split()[4] == "/"]  # fmt: skip
    assert len(root) >= 1, root
    assert "ro" in root[-1][5].split(","), root
    conf = Path(f"/proc/{pid}/root/etc/tinyproxy/tinyproxy.conf").stat()
    assert (oct(conf.st_mode & 0o777), conf.st_uid, conf.st_gid) == ("0o444", 0, 61888)
    # exec through the API server reaches the container on the node too
    pod = real.proxy_pod()["metadata"]["name"]
    assert real.kubectl("-n", "kube-system", "exec", pod, "-c", "tinyproxy", "--", "id", "-u").strip() == "61888"


def test_the_ipv6_only_pod_reaches_the_ipv4_only_origin_only_through_the_proxy(real: RealNode, client: str) -> None:
    env = real.get("pod", client, "-n", "default")["spec"]["containers"][0]
    assert "env" not in env
    assert env["envFrom"] == [{"configMapRef": {"name": "proxy-config"}}]
    ip = _pod_ip(real, client)
    assert ip.startswith("fd00:10:244:")
    routes = real.kubectl("exec", client, "--", "cat", "/proc/net/route").strip().splitlines()
    assert routes[1:] == [], f"the pod has no IPv4 route: {routes}"
    answers = real.fetch(client, "http://origin.example/plain", "https://origin.example/tunnel")
    assert answers == {
        "http://origin.example/plain": f"ok 200 origin saw /plain from {NODE_ON_INTERNET}",
        "https://origin.example/tunnel": f"ok 200 origin-tls saw /tunnel from {NODE_ON_INTERNET}",
    }
    unproxied = ("-u", "HTTP_PROXY", "-u", "http_proxy", "-u", "HTTPS_PROXY", "-u", "https_proxy")
    direct = real.fetch(client, "http://origin.example/plain", "https://origin.example/tunnel", env=unproxied)
    for url, answer in direct.items():
        assert answer.startswith("error "), (url, answer)
        assert "unreachable" in answer, (url, answer)


def test_no_proxy_destinations_go_direct(real: RealNode, client: str) -> None:
    ip = _pod_ip(real, client)
    other = _pod_ip(real, "other")
    answers = real.fetch(client, f"http://[{other}]:8080/direct", f"http://[{NODE6}]:8081/direct")
    assert answers == {
        f"http://[{other}]:8080/direct": f"ok 200 other-pod saw /direct from {ip}",
        f"http://[{NODE6}]:8081/direct": f"ok 200 node saw /direct from {ip}",
    }


def test_through_the_proxy_the_node_metadata_other_pods_and_the_api_server_are_refused(
    real: RealNode, client: str
) -> None:
    other = _pod_ip(real, "other")
    node4 = next(a["address"] for a in real.get("node", real.node)["status"]["addresses"]
                 if a["type"] == "InternalIP" and "." in a["address"])  # fmt: skip
    api = real.get("service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    urls = [
        f"http://{node4}:8081/", f"http://[{NODE6}]:8081/", "http://localhost.:8081/", f"http://{NODE_ON_INTERNET}:8081/",
        "http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/",
        f"http://[{other}]:8080/", f"http://{api}:443/", "http://[fd00:10:96::1]:443/",
    ]  # fmt: skip
    everything_proxied = ("NO_PROXY=", "no_proxy=")
    answers = real.fetch(client, *urls, env=everything_proxied)
    for url in urls:
        status = answers[url].split()[:2]
        assert status[0] == "ok", (url, answers[url])
        assert status[1] in ("403", "500"), (url, answers[url])
        assert " saw " not in answers[url], (url, answers[url])
    # The same pod, the same proxy: an origin on the internet still answers.
    assert real.fetch(client, "http://origin.example/", env=everything_proxied) == {
        "http://origin.example/": f"ok 200 origin saw / from {NODE_ON_INTERNET}"
    }


def test_check_probe_runs_on_the_real_node_with_the_projects_image(real: RealNode, example: Project) -> None:
    """Under exactly the role `render --format check-rbac --probe` writes (its ServiceAccount's token), its pods in
    their own namespace, where Pod Security enforces `restricted`: the kubelet runs them there."""
    rbac = run(sys.executable, "-m", "proxy_component.cli", "render", str(EXAMPLE / "proxy.yaml"), "--format",
               "check-rbac", "--probe", cwd=ROOT).stdout  # fmt: skip
    real.kubectl("apply", "-f", "-", stdin=rbac)
    token = real.kubectl("-n", "kube-system", "create", "token", CHECK_NAME).strip()
    config = yaml.safe_load(real.kubeconfig.read_text())
    config["users"] = [{"name": "check", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "check"
    role = real.workdir / "check.kubeconfig"
    role.write_text(yaml.safe_dump(config))
    account = f"system:serviceaccount:kube-system:{CHECK_NAME}"
    deadline = time.monotonic() + 60
    while real.kubectl("auth", "can-i", "create", "pods", "-n", PROBE_NAMESPACE, "--as", account,
                       check=False).strip() != "yes":  # fmt: skip
        assert time.monotonic() < deadline, "the probe role is not in force"
        time.sleep(0.5)
    assert (
        real.kubectl("auth", "can-i", "create", "pods", "-n", "kube-system", "--as", account, check=False).strip()
        == "no"
    )
    t0 = time.monotonic()
    result = run(sys.executable, "-m", "proxy_component.cli", "check", str(EXAMPLE / "proxy.yaml"), "--kubeconfig",
                 str(role), "--json", "--probe", "http://origin.example/", "http://169.254.169.254/",
                 check=False, timeout=300, cwd=ROOT)  # fmt: skip
    print(f"realnode: check --probe in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    assert result.returncode == 1, result.stderr  # one probe fails, as it should
    probes = {(f["node"], f["url"]): f for f in json.loads(result.stdout) if f["kind"] == "probe"}
    urls = ("http://origin.example/", "http://169.254.169.254/")
    assert probes.keys() == {(node, url) for node in real.nodes for url in urls}, result.stdout
    for node in real.nodes:  # a probe pod on each node, through that node's proxy
        ok, refused = probes[node, urls[0]], probes[node, urls[1]]
        assert (ok["outcome"], ok["severity"]) == ("ok", "ok"), ok
        assert "200" in ok["detail"], ok
        assert refused["outcome"] == "filtered", refused
    for namespace in ("kube-system", PROBE_NAMESPACE):
        assert real.get("pods", "-n", namespace, "-l", "app.kubernetes.io/component=check-probe")["items"] == []


PROXY_ADDRESS = "http-proxy.kube-system.svc.k8s.internal:8888"
SILENT_PORT = 81  # the silent origin's, in "the internet"
ATTACK_PODS = 20
SHARE = 16  # deployment.firewall.maxConnectionsPerClient's default


def _memory_peak(real: RealNode) -> tuple[int, int]:
    """The tinyproxy container's memory cgroup: its peak usage and its limit (cgroup v1, as the node runs)."""
    line = next(x for x in Path(f"/proc/{_tinyproxy_pid(real)}/cgroup").read_text().splitlines() if ":memory:" in x)
    cgroup = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
    return int((cgroup / "memory.max_usage_in_bytes").read_text()), int((cgroup / "memory.limit_in_bytes").read_text())


def test_one_pod_cannot_take_its_nodes_proxy_down(real: RealNode, example: Project, client: str) -> None:
    """A pod holds 1,100 idle connections to its node's proxy, then sends one request with 150 MB of headers, while
    a second pod sends 20 requests a second to the origin: every one of those succeeds, the proxy pod is neither
    restarted nor unready, and its memory stays under its limit (tinyproxy's own per-client share, patch 0006; the
    head's bound, patches 0001 and 0007)."""
    attacker = _pod("attacker", real.node, real.tool.parent, ["sleep", "86400"], env_from=False)
    real.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(attacker))
    real.kubectl("-n", "default", "wait", "--for=condition=Ready", "pod/attacker", "--timeout=120s", timeout=150)
    before = real.proxy_pod()
    kubectl = ["kubectl", "--kubeconfig", str(real.kubeconfig), "exec"]
    load = subprocess.Popen([*kubectl, client, "--", "/tools/tool", "load", "http://origin.example/steady", "60", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    hold = subprocess.Popen([*kubectl, "attacker", "--", "/tools/tool", "hold", PROXY_ADDRESS, "1100", "15"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert hold.stdout is not None
        held = json.loads(hold.stdout.readline())  # all 1,100 tried; the held ones stay open 15 s more
        during = real.proxy_pod()
        hold.wait(timeout=60)  # then the same pod floods (while it held 16, its 17th connection was reset)
        flood = json.loads(real.kubectl("exec", "attacker", "--", "/tools/tool", "flood", PROXY_ADDRESS, "150",
                                        timeout=120).strip().splitlines()[-1])  # fmt: skip
        out, err = load.communicate(timeout=180)
    finally:
        for proc in (hold, load):
            proc.kill()
            proc.wait()
        real.kubectl("delete", "pod", "attacker", "-n", "default", "--wait=false", check=False)
    figures = json.loads(out.strip().splitlines()[-1])
    after = real.proxy_pod()
    peak, limit = _memory_peak(real)
    print(
        f"realnode: one pod's attacks: hold {held}; flood sent {flood.get('sent', 0) / 1e6:.1f} MB, "
        f"{flood.get('writeError', 'no write error')}, answer {flood.get('status')!r}; the other pod's 20 req/s: "
        f"{figures['ok']} of {figures['sent']} ok, longest gap {figures['longestGapMs']} ms; the proxy's memory peak "
        f"{peak / 2**20:.1f} MiB of its {limit / 2**20:.0f} MiB limit",
        file=sys.stderr,
    )
    assert held["held"] == 16, held  # firewall.maxConnectionsPerClient, counted by tinyproxy at accept
    # Beyond its share every connection is refused: by the kernel's rate meter (refused), reset by tinyproxy at accept
    # (reset), or timed out in the backlog or reset during the handshake while tinyproxy resets the others (other).
    assert held["held"] + held["reset"] + held["refused"] + held["other"] == 1100, held
    assert flood.get("status") == "HTTP/1.0 431 Request Header Fields Too Large", flood
    assert flood.get("sent", 0) < 10_000_000, flood  # the connection was closed long before 150 MB
    assert (figures["sent"], figures["failed"]) == (1200, 0), (figures, err)
    for pod in (during, after):
        assert pod["metadata"]["uid"] == before["metadata"]["uid"]
        assert pod["status"]["containerStatuses"][0]["ready"], pod["status"]
        restarts = pod["status"]["containerStatuses"][0]["restartCount"]
        assert restarts == before["status"]["containerStatuses"][0]["restartCount"], restarts
    assert peak < limit, (peak, limit)


def test_twenty_pods_at_their_share_cannot_take_their_nodes_proxy_down(
    real: RealNode, example: Project, clients: dict[str, str]
) -> None:
    """20 pods on node 0, each at its share (16) for 60 s, its connection slots kept busy with the four kinds that
    took the previous image down: a GET to an origin that never answers, the same reset by its client 0.4 s later
    (tinyproxy's thread still waits on the origin, and still counts), a request line dripped a byte every 100 ms, and
    a 16,300-byte request line never ended; meanwhile the client pod on each node sends 20 requests a second. Every
    one of those succeeds, no proxy pod restarts or turns unready, and node 0's proxy stays under its memory limit."""
    names = [f"share-{i:02d}" for i in range(ATTACK_PODS)]
    for name in names:
        pod = _pod(name, real.node, real.tool.parent, ["sleep", "86400"], env_from=False)
        real.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(pod))
    before = {node: real.proxy_pod(node) for node in real.nodes}
    kubectl = ["kubectl", "--kubeconfig", str(real.kubeconfig), "exec"]
    attacks: list[subprocess.Popen[str]] = []
    loads: dict[str, subprocess.Popen[str]] = {}
    try:
        real.kubectl("-n", "default", "wait", "--for=condition=Ready", *(f"pod/{n}" for n in names),
                     "--timeout=180s", timeout=210)  # fmt: skip
        silent = f"http://origin.example:{SILENT_PORT}/"
        mix = ["/tools/tool", "mix", PROXY_ADDRESS, str(SHARE), "60", silent]
        pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        attacks = [subprocess.Popen([*kubectl, name, "--", *mix], **pipes) for name in names]
        load = ["/tools/tool", "load", "http://origin.example/share", "60", "20"]
        loads = {node: subprocess.Popen([*kubectl, pod, "--", *load], **pipes) for node, pod in clients.items()}
        during = {node: real.proxy_pod(node) for node in real.nodes}
        figures = {node: json.loads(load.communicate(timeout=180)[0].strip().splitlines()[-1])
                   for node, load in loads.items()}  # fmt: skip
        results = [json.loads(attack.communicate(timeout=120)[0].strip().splitlines()[-1]) for attack in attacks]
    finally:
        for proc in (*attacks, *loads.values()):
            proc.kill()
            proc.wait()
        real.kubectl("delete", "pod", *names, "-n", "default", "--wait=false", check=False)
    after = {node: real.proxy_pod(node) for node in real.nodes}
    peak, limit = _memory_peak(real)
    totals: dict[str, dict[str, int]] = {}
    for result in results:
        for kind, ends in result.items():
            for how, count in ends.items():
                totals.setdefault(kind, {}).setdefault(how, 0)
                totals[kind][how] += count
    served = "; ".join(
        f"{node}'s client: {f['ok']} of {f['sent']} ok, longest gap {f['longestGapMs']} ms"
        for node, f in figures.items()
    )
    print(
        f"realnode: {ATTACK_PODS} pods at their share of {SHARE} for 60 s, connections by kind and end: {totals}; "
        f"{served}; node 0's proxy memory peak {peak / 2**20:.1f} MiB of its {limit / 2**20:.0f} MiB limit",
        file=sys.stderr,
    )
    for node, f in figures.items():
        assert (f["sent"], f["failed"]) == (1200, 0), (node, f)
    # Every kind ran (each pod's slots were busy), and the proxy refused what went beyond a pod's share.
    assert set(totals) == {"silent", "reset", "drip", "long"}, totals
    assert totals["reset"].get("reset-by-client", 0) > 0, totals
    assert sum(ends.get("reset-by-proxy", 0) for ends in totals.values()) > 0, totals
    for node in real.nodes:
        for pod in (during[node], after[node]):
            assert pod["metadata"]["uid"] == before[node]["metadata"]["uid"], node
            assert pod["status"]["containerStatuses"][0]["ready"], pod["status"]
            restarts = pod["status"]["containerStatuses"][0]["restartCount"]
            assert restarts == before[node]["status"]["containerStatuses"][0]["restartCount"], (node, restarts)
    assert peak < limit, (peak, limit)


def _settings(**deployment: Any) -> dict[str, Any]:
    """The example's settings with `deployment` updated; a pod's own node's proxy first (the cluster is 1.37)."""
    settings: dict[str, Any] = yaml.safe_load((EXAMPLE / "proxy.yaml").read_text())
    settings["deployment"].update({"trafficDistribution": "PreferSameNode", **deployment})
    return settings


class Traffic:
    """From each client pod: 20 requests a second to the origin (a new connection each) and `tunnels` long tunnels
    (an HTTPS request a second each over one kept-alive CONNECT tunnel), until `stop()` closes their standard input.
    Started once every tunnel has its connection."""

    def __init__(self, real: RealNode, clients: dict[str, str], tunnels: int, path: str) -> None:
        self.started = time.monotonic()
        self.procs: dict[tuple[str, str], subprocess.Popen[str]] = {}
        kubectl = ["kubectl", "--kubeconfig", str(real.kubeconfig), "exec", "-i"]
        try:
            for node, pod in clients.items():
                for kind, args in (
                    ("load", ["load", f"http://origin.example/{path}", "0", "20"]),
                    ("tunnels", ["tunnels", f"https://origin.example/{path}-tunnel", str(tunnels), "0"]),
                ):
                    self.procs[node, kind] = subprocess.Popen(
                        [*kubectl, pod, "--", "/tools/tool", *args],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    )  # fmt: skip
            for (node, kind), proc in self.procs.items():
                if kind == "tunnels":
                    assert proc.stdout is not None
                    assert proc.stdout.readline().strip() == "open", (node, proc.stderr)
        except BaseException:
            self.kill()
            raise

    def stop(self) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
        """End both on every node: node -> (the load's figures, each tunnel's)."""
        self.seconds = time.monotonic() - self.started
        outs: dict[tuple[str, str], str] = {}
        try:
            for key, proc in self.procs.items():
                out, err = proc.communicate(input="", timeout=120)  # its standard input closes: it ends
                assert out.strip(), (key, err)
                outs[key] = out.strip().splitlines()[-1]
        finally:
            self.kill()
        nodes = sorted({node for node, _ in self.procs})
        return {node: (json.loads(outs[node, "load"]), json.loads(outs[node, "tunnels"])) for node in nodes}

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _replaced_and_ready(real: RealNode, node: str, old_uid: str) -> bool:
    pod = real.pod_on(node)
    return pod is not None and pod["metadata"]["uid"] != old_uid and _all_ready(pod)


def _ready(real: RealNode, node: str) -> bool:
    pod = real.pod_on(node)
    return pod is not None and _all_ready(pod)


def _all_ready(pod: dict[str, Any]) -> bool:
    return all(c["ready"] for c in (pod.get("status") or {}).get("containerStatuses") or [{"ready": False}])


# kube-proxy's (nftables mode) chain of the proxy Service's port. It sends a connection on by `dnat` to the one
# endpoint's address, or to one of several by a random map, or by a jump to the endpoint's own chain (whose name ends
# in its address, '.' for ':', and port): kube-proxy's proxier.go, writeServiceToEndpointDNATs and ...Jumps.
SERVICE_CHAIN = re.compile(r"service-\w+-kube-system/http-proxy/tcp/.*")
ENDPOINT_CHAIN = re.compile(r"endpoint-\w+-kube-system/http-proxy/tcp/.*__(.+)/\d+")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _chain_form(address: str) -> str:
    return str(ipaddress.ip_address(address)).replace(":", ".")


def _endpoints_of(rule: dict[str, Any]) -> set[str]:
    """The endpoints (addresses in chain-name form) a rule of the Service's chain sends connections to."""
    found = set()
    for expr in rule["expr"]:
        for text in _strings(expr.get("dnat") or {}):
            try:
                found.add(_chain_form(text))
            except ValueError:
                continue  # a map's keyword (numgen's "random"), not an address
        found |= {m[1] for text in _strings(expr) if (m := ENDPOINT_CHAIN.fullmatch(text))}
    return found


def _prefers_own_nodes(real: RealNode, timeout: float = 60) -> None:
    """Wait until every node's proxy pod is ready and that node's kube-proxy sends the proxy Service's connections to
    it alone (PreferSameNode). The pod's Ready status is the kubelet's; the EndpointSlice follows it, and kube-proxy
    its rules a moment later: until then a client's request goes to the other node's proxy. The condition is
    kube-proxy's own state: in the node's nftables, the Service's chains jump to that node's endpoint alone."""
    for node in real.nodes:
        wait(partial(_ready, real, node), f"{node}'s proxy ready", timeout=timeout)
    ready = time.monotonic()
    deadline = ready + timeout
    waited: dict[str, str] = {}
    for node in real.nodes:
        while True:
            slices = real.get("endpointslices", "-n", "kube-system", "-l", "kubernetes.io/service-name=http-proxy")
            own = {
                _chain_form(address)
                for item in slices["items"]
                for endpoint in item.get("endpoints") or []
                if endpoint.get("nodeName") == node and (endpoint.get("conditions") or {}).get("ready")
                for address in endpoint["addresses"]
            }
            ruleset = run("ip", "netns", "exec", node, "nft", "-j", "list", "ruleset").stdout
            rules = [e["rule"] for e in json.loads(ruleset)["nftables"] if "rule" in e]
            services = [r for r in rules if SERVICE_CHAIN.fullmatch(r["chain"])]
            targets = {endpoint for rule in services for endpoint in _endpoints_of(rule)}
            if services and own and targets == own:
                break
            waited[node] = f"{targets or 'none'}"
            if time.monotonic() > deadline:
                dump = real.workdir / f"{node}-ruleset.txt"
                dump.write_text(run("ip", "netns", "exec", node, "nft", "list", "ruleset").stdout)
                raise AssertionError(f"{node}'s kube-proxy to prefer its own proxy {own}: jumps to {targets} ({dump})")
            time.sleep(0.5)
    if waited:  # how often the pods' Ready status ran ahead of kube-proxy (what the lane would otherwise race)
        print(f"realnode: kube-proxy sent the Service elsewhere ({waited}) after the proxy pods were ready; its own "
              f"node's proxy after {time.monotonic() - ready:.1f} s", file=sys.stderr)  # fmt: skip


def _roll(
    real: RealNode, example: Project, clients: dict[str, str], settings: dict[str, Any], what: str
) -> dict[str, Any]:
    """Apply `settings`, which must roll the proxy, under `Traffic` from both nodes; what happened, per node."""
    before = {node: real.proxy_pod(node) for node in real.nodes}
    traffic = Traffic(real, clients, TUNNELS, what.replace(" ", "-"))
    try:
        (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        t0 = time.monotonic()
        example.up()  # pulumi-kubernetes waits for the DaemonSet's rollout
        took = time.monotonic() - t0
        for node in real.nodes:  # both replaced and ready: the roll is over
            wait(partial(_replaced_and_ready, real, node, before[node]["metadata"]["uid"]), f"{node} rolled")
        _prefers_own_nodes(real)
    finally:
        results = traffic.stop()
    report: dict[str, Any] = {"what": what, "up s": round(took, 1), "seconds": round(traffic.seconds)}
    for node, (load, tunnels) in results.items():
        report[node] = {
            "sent": load["sent"], "failed": load["failed"], "gap ms": load["longestGapMs"],
            "failures": sorted({f["error"].split(": ")[-1] for f in load["failures"] or []}),
            "tunnels cut": sum(t["connections"] - 1 for t in tunnels),
            "tunnel requests failed": sum(t["failed"] for t in tunnels),
            "tunnel errors": sorted({e.split(": ")[-1] for t in tunnels for e in t["errors"] or []}),
        }  # fmt: skip
    print(f"realnode: roll ({what}) under 20 req/s and {TUNNELS} tunnels from each node: {report}", file=sys.stderr)
    return report


TUNNELS = 5  # long tunnels from each node's client


def test_changes_that_must_roll_roll_both_nodes_without_a_failed_request(
    real: RealNode, example: Project, clients: dict[str, str]
) -> None:
    """Issue 35 item 2, must-show 2: changes tinyproxy cannot reload roll both nodes, one at a time, while a client
    on each node sends 20 requests a second and holds 5 long tunnels through its own node's proxy
    (`trafficDistribution: PreferSameNode`). No request fails: a deleted pod's endpoint is terminating at once, so
    every node's kube-proxy sends new connections to the other node's proxy, and the leaving proxy serves on for
    `drain.endpointSeconds` (the time that change takes to reach the nodes), then lets its open tunnels finish for
    at most `drain.connectionSeconds` before it stops; the tunnels it still held then are cut, and counted. Then
    what the drain buys: the same kind of roll with both waits 0."""
    rolled = f"{DEFAULT_IMAGE}-rolled"  # the same image under a second name, in both nodes' containerd
    for node in real.nodes:
        run("ctr", "-a", real.containerd(node), "-n", "k8s.io", "images", "tag", "--force", DEFAULT_IMAGE, rolled)
    reports = [_roll(real, example, clients, _settings(image=rolled), "image")]
    for node in real.nodes:
        pod = real.proxy_pod(node)
        assert [c["image"] for c in pod["spec"]["containers"]] == [rolled], pod["spec"]["containers"]
        assert pod["spec"]["terminationGracePeriodSeconds"] == 5 + 30 + 5
    # A new pod range (the kernel rules), and the drain turned off in the same change: the leaving pods still drain
    # (the waits are theirs), the new ones will not.
    undrained = {"endpointSeconds": 0, "connectionSeconds": 0}
    pod_range = _settings(image=rolled, drain=undrained)
    pod_range["cluster"]["podCidrs"] = [*pod_range["cluster"]["podCidrs"], "fd00:10:245::/56"]
    reports.append(_roll(real, example, clients, pod_range, "pod range, drain off"))
    for report in reports:
        for node in real.nodes:
            assert report[node]["failed"] == 0, report
            assert report[node]["sent"] >= 20 * (report["seconds"] - 15), report
    conf = real.get("configmap", "http-proxy-config", "-n", "kube-system")["data"]["tinyproxy.conf"]
    assert "Allow fd00:10:245::/56" in conf, conf
    # What the drain buys: a roll of those pods, which do not drain, for a change of the kernel rules (each client's
    # rate of new connections).
    without_drain = _settings(image=rolled, drain=undrained, firewall={"newConnectionsPerClientPerSecond": 150})
    without_drain["cluster"]["podCidrs"] = pod_range["cluster"]["podCidrs"]
    without = _roll(real, example, clients, without_drain, "client rate, pods without the drain")
    assert real.proxy_pod()["spec"]["terminationGracePeriodSeconds"] == 5
    print(
        "realnode: without the drain, failed requests per node: "
        + ", ".join(f"{node}: {without[node]['failed']} of {without[node]['sent']}" for node in real.nodes),
        file=sys.stderr,
    )
    # The clients keep working afterwards, through their own node's proxy.
    for i, (node, name) in enumerate(clients.items()):
        assert real.fetch(name, "http://origin.example/after") == {
            "http://origin.example/after": f"ok 200 origin saw /after from {NODES_ON_INTERNET[i]}"
        }, node


def test_chained_to_an_upstream_with_credentials_from_the_secret(real: RealNode, example: Project, client: str) -> None:
    settings = _settings()
    settings["proxy"]["upstream"] = {"url": f"http://{UPSTREAM_USER}:{UPSTREAM_PASSWORD}@upstream.example:3128"}
    (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    example.up()
    pod = real.proxy_pod()
    assert pod["status"]["containerStatuses"][0]["ready"], pod["status"]
    configmaps = real.kubectl("get", "configmaps", "-A", "-o", "yaml")
    assert UPSTREAM_PASSWORD not in configmaps
    secrets = [v for v in pod["spec"]["volumes"] if "secret" in v or "projected" in v]
    assert secrets, pod["spec"]["volumes"]
    answers = real.fetch(client, "http://origin.example/chained", "https://origin.example/chained")
    # The upstream, in the origin's own namespace, connects from the origin's address.
    assert answers == {
        "http://origin.example/chained": f"ok 200 origin saw /chained from {ORIGIN}",
        "https://origin.example/chained": f"ok 200 origin-tls saw /chained from {ORIGIN}",
    }
    upstream_log = (real.workdir / "upstream.log").read_text()
    assert "origin.example" in upstream_log


def _upstream_accepts(real: RealNode, *passwords: str) -> None:
    """Make the upstream stand-in accept exactly `passwords` (it reloads its config), as a test that follows the
    password rotation needs."""
    assert real.upstream is not None
    done = (real.workdir / "upstream.log").read_text().count("Reloading config file finished")
    _upstream_conf(real.workdir, *passwords)
    real.upstream.send_signal(signal.SIGUSR1)
    _upstream_reloaded(real, done + 1)


def _upstream_reloaded(real: RealNode, count: int) -> None:
    """Wait until the upstream stand-in has loaded its config `count` times (its start is the first)."""
    log = real.workdir / "upstream.log"
    try:
        wait(lambda: log.read_text().count("Reloading config file finished") >= count, "the upstream to reload", 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its log ends: {log.read_text()[-1500:]}") from None


def _proxy_log(real: RealNode, node: str | None = None) -> str:
    return real.kubectl("-n", "kube-system", "logs", real.proxy_pod(node)["metadata"]["name"], "-c", "tinyproxy")


def _reloads(real: RealNode, node: str | None = None) -> int:
    return _proxy_log(real, node).count("proxy-component: reloaded tinyproxy")


def _reloaded_since(real: RealNode, node: str, count: int) -> bool:
    return _reloads(real, node) > count


def _check_kinds(real: RealNode, example: Project) -> list[str]:
    """The kinds of `proxy-component check`'s findings, with the stack's settings, as the cluster's admin."""
    result = run(sys.executable, "-m", "proxy_component.cli", "check", str(example.dir / "proxy.yaml"),
                 "--kubeconfig", str(real.kubeconfig), "--json", check=False, timeout=120, cwd=ROOT)  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return sorted(f["kind"] for f in json.loads(result.stdout))


# The example's proxy config object (a Secret with the upstream's password).
CONFIG_OBJECT = "ipv6-only-tinyproxy-config"


def test_a_password_rotation_and_a_no_upstream_entry_reload_the_proxy_without_a_restart(
    real: RealNode, example: Project, clients: dict[str, str]
) -> None:
    """Issue 35 item 1, must-show 1, on both nodes: while a client on each node sends 20 requests a second and holds
    5 long tunnels (an HTTPS request a second each over one kept-alive CONNECT tunnel, through its node's proxy and
    the upstream), rotating the upstream's password and adding a `proxy.upstream.noUpstream` entry, each by `pulumi
    up`: no request fails, no tunnel is cut, no proxy pod is restarted (same uid, restartCount, tinyproxy PID,
    DaemonSet generation), the preview updates the config Secret alone (replaced: the example's provider keeps
    Secrets immutable), and the time each takes to be in force on both nodes is measured."""
    assert real.upstream is not None
    settings = _settings()
    upstream: dict[str, Any] = {"url": f"http://{UPSTREAM_USER}:{UPSTREAM_PASSWORD}@upstream.example:3128"}
    settings["proxy"]["upstream"] = upstream
    (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    example.up()  # as the previous test left it when run in order; else this rolls once, before anything is measured
    for node, pod in clients.items():
        wait(partial(_ready, real, node), f"{node}'s proxy ready")
        assert real.fetch(pod, "http://origin.example/chained") == {
            "http://origin.example/chained": f"ok 200 origin saw /chained from {ORIGIN}"
        }
    before = {node: real.proxy_pod(node) for node in real.nodes}
    pids = {node: _tinyproxy_pid(real, node) for node in real.nodes}
    daemonset = real.get("daemonset", "http-proxy", "-n", "kube-system")
    traffic = Traffic(real, clients, TUNNELS, "reload")
    figures: dict[str, float] = {}
    try:
        # 1. The password: the upstream accepts the old and the new one while the proxies move to the new one.
        rotated = "R0tated-upstr3am-s3cret"
        _upstream_accepts(real, UPSTREAM_PASSWORD, rotated)
        upstream["url"] = f"http://{UPSTREAM_USER}:{rotated}@upstream.example:3128"
        (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        preview = example.run("preview", "--diff")
        # The config Secret alone, never the DaemonSet: an update where the provider has enableSecretMutable (the
        # installation stack's, tests/engine/test_stack.py); with this example's default provider pulumi-kubernetes
        # replaces a Secret whose data changes (deletes it, then creates it under the same name).
        assert list(changes(example.preview_json()).values()) == [[CONFIG_OBJECT]], preview.stdout
        for secret in (UPSTREAM_PASSWORD, rotated):
            assert secret not in preview.stdout + preview.stderr
        reloads = {node: _reloads(real, node) for node in real.nodes}
        t0 = time.monotonic()
        example.up()
        figures["password up s"] = time.monotonic() - t0
        right_after = _check_kinds(real, example)
        for node in real.nodes:
            wait(partial(_reloaded_since, real, node, reloads[node]), f"{node}'s proxy to reload", timeout=240)
            figures[f"password reloaded on {node[-6:]} s"] = time.monotonic() - t0
        # From now on the upstream takes the new password only: a request through it proves each proxy sends it.
        _upstream_accepts(real, rotated)
        for pod in clients.values():
            assert real.fetch(pod, "http://origin.example/rotated") == {
                "http://origin.example/rotated": f"ok 200 origin saw /rotated from {ORIGIN}"
            }
        # 2. A noUpstream entry: new requests to the origin go direct (the origin sees each node's address).
        upstream["noUpstream"] = ["origin.example"]
        (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        assert list(changes(example.preview_json()).values()) == [[CONFIG_OBJECT]]
        t0 = time.monotonic()
        example.up()
        figures["noUpstream up s"] = time.monotonic() - t0

        for i, (node, pod) in enumerate(clients.items()):

            def direct(pod: str = pod, address: str = NODES_ON_INTERNET[i]) -> bool:
                answer = real.fetch(pod, "http://origin.example/direct")["http://origin.example/direct"]
                assert answer.startswith("ok 200 "), answer
                return answer == f"ok 200 origin saw /direct from {address}"

            wait(direct, f"the noUpstream entry in force on {node}", timeout=240)
            figures[f"noUpstream in force on {node[-6:]} s"] = time.monotonic() - t0
        after_kinds = _check_kinds(real, example)
    finally:
        results = traffic.stop()
    print(
        f"realnode: reload under 20 req/s and {TUNNELS} long tunnels from each node, {traffic.seconds:.0f} s: "
        + "; ".join(
            f"{node}: {load['failed']} of {load['sent']} requests failed, longest gap {load['longestGapMs']} ms, "
            f"tunnels (requests, failed, connections) {[(t['requests'], t['failed'], t['connections']) for t in held]}"
            for node, (load, held) in results.items()
        )
        + f"; {', '.join(f'{k} {v:.1f}' for k, v in figures.items())}; check right after the password's up: "
        f"{right_after}, after both reloads: {after_kinds}",
        file=sys.stderr,
    )
    for node, (load, held) in results.items():
        # 20 a second from before the first change until both were in force (a few ticks short at the ends at most).
        assert load["sent"] >= 20 * (traffic.seconds - 15), (node, load["sent"], traffic.seconds)
        assert (load["failed"], load["ok"]) == (0, load["sent"]), (node, load["failures"][:5])
        assert len(held) == TUNNELS
        for tunnel in held:
            assert (tunnel["failed"], tunnel["connections"]) == (0, 1), (node, tunnel)
            assert tunnel["requests"] >= traffic.seconds - 15, (node, tunnel, traffic.seconds)
    now = real.get("daemonset", "http-proxy", "-n", "kube-system")
    assert now["metadata"]["generation"] == daemonset["metadata"]["generation"]
    for node in real.nodes:
        after = real.proxy_pod(node)
        assert after["metadata"]["uid"] == before[node]["metadata"]["uid"]
        restarts = [c["restartCount"] for c in after["status"]["containerStatuses"]]
        assert restarts == [c["restartCount"] for c in before[node]["status"]["containerStatuses"]], restarts
        assert _tinyproxy_pid(real, node) == pids[node]
        log = _proxy_log(real, node)
        for secret in (UPSTREAM_PASSWORD, rotated):
            assert secret not in log
            assert secret not in json.dumps(now) + json.dumps(after)
    assert "proxy-config-not-loaded" not in after_kinds
    assert "proxy-config-refused" not in after_kinds


def _node_ipv4(real: RealNode, node: str) -> str:
    addresses = real.get("node", node)["status"]["addresses"]
    return str(next(a["address"] for a in addresses if a["type"] == "InternalIP" and "." in a["address"]))


class Prometheus:
    """Debian's Prometheus on the host's loopback, scraping each real node's exporter every second (static
    targets: the nodes' IPv4 addresses, on the links scripts/cluster made), its data in the test's directory."""

    def __init__(self, workdir: Path, targets: dict[str, str]) -> None:
        binary = shutil.which("prometheus")
        assert binary is not None, "the real-node lane runs Debian's prometheus: apt-get install prometheus"
        self.dir = workdir / "prometheus"
        self.dir.mkdir(exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{
                "job_name": "proxy",
                "static_configs": [{"targets": [address], "labels": {"node": node}}
                                   for node, address in sorted(targets.items())],
            }],
        }  # fmt: skip
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.log = (self.dir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait(self._ready, "Prometheus ready", timeout=60)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> dict[str, tuple[float, float]]:
        """An instant query: node -> (the sample's timestamp, its value)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return {r["metric"]["node"]: (float(r["value"][0]), float(r["value"][1])) for r in body["data"]["result"]}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


UPSTREAM_DOWN = """table inet pc-upstream-down {
  chain input { type filter hook input priority 0; tcp dport 3128 reject with tcp reset; }
}
"""
# What the clients sent through a node's proxy: its accepted connections less the stats page's (probes, exporter).
CLIENT_CONNECTIONS = "tinyproxy_connections_total - tinyproxy_stathost_requests_total"


def test_a_real_prometheus_counts_each_nodes_requests_and_the_metrics_hold_no_secret(
    real: RealNode, example: Project, clients: dict[str, str]
) -> None:
    """Issue 35 must-shows 3 and 4 on both nodes: with `deployment.metrics` on (and an upstream with a password),
    Debian's Prometheus scrapes each node's exporter every second; a known number of requests from the client on
    each node (through its own node's proxy) is what that node's series counts; the exporter's page and log hold no
    credential; and the metrics port is not reachable through the proxy itself (the kernel rules refuse tinyproxy's
    connections to its node)."""
    _upstream_accepts(real, UPSTREAM_PASSWORD)  # as the fixture made it (the reload test rotated it)
    settings = _settings()
    settings["deployment"]["metrics"] = {"enabled": True, "firewallCounters": True}
    # The nodes' own addresses go direct, not to the upstream: the proxy itself must refuse them.
    settings["proxy"]["upstream"] = {
        "url": f"http://{UPSTREAM_USER}:{UPSTREAM_PASSWORD}@upstream.example:3128",
        "noUpstream": ["10.0.0.0/8", "fd00:10::/64", "127.0.0.1"],
    }
    (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    example.up()
    _prefers_own_nodes(real)  # each client's requests are counted by its own node's proxy
    targets = {node: f"{_node_ipv4(real, node)}:9888" for node in real.nodes}
    prometheus = Prometheus(real.workdir, targets)
    try:
        wait(lambda: {n: v for n, (_, v) in prometheus.query('up{job="proxy"}').items()} == dict.fromkeys(real.nodes, 1.0),
             "Prometheus scraping both exporters", timeout=60)  # fmt: skip
        before = prometheus.query(CLIENT_CONNECTIONS)
        sent_at = time.time()
        kubectl = ["kubectl", "--kubeconfig", str(real.kubeconfig), "exec"]
        load = ["--", "/tools/tool", "load", "http://origin.example/counted", "10", "20"]
        procs = {}
        for node, pod in clients.items():
            procs[node] = subprocess.Popen([*kubectl, pod, *load], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)  # fmt: skip
        loads = {}
        for node, proc in procs.items():
            out, err = proc.communicate(timeout=120)
            loads[node] = json.loads(out.strip().splitlines()[-1])
            assert (loads[node]["sent"], loads[node]["failed"]) == (200, 0), (node, loads[node], err)
        done = time.time()
        # A scrape of each node that began after the last request was answered.
        wait(lambda: all(t > done + 1 for t, _ in prometheus.query(CLIENT_CONNECTIONS).values()),
             "a scrape of each node after the load", timeout=60)  # fmt: skip
        after = prometheus.query(CLIENT_CONNECTIONS)
        scrapes = {node: urllib.request.urlopen(f"http://{t}/metrics", timeout=10).read().decode()
                   for node, t in targets.items()}  # fmt: skip
        # The corporate proxy down (its port refuses, in "the internet"): each node's proxy counts the failures,
        # Prometheus sees them, and `check` names both nodes.
        run("ip", "netns", "exec", real.internet, "nft", "-f", "-", input=UPSTREAM_DOWN)
        try:
            for pod in clients.values():
                answer = real.fetch(pod, "http://origin.example/down")["http://origin.example/down"]
                assert " saw " not in answer, answer
            wait(lambda: all(v > 0 for _, v in prometheus.query("tinyproxy_upstream_failures_total").values())
                 and len(prometheus.query("tinyproxy_upstream_failures_total")) == NODES,
                 "Prometheus to see the upstream failing on both nodes", timeout=60)  # fmt: skip
            result = run(sys.executable, "-m", "proxy_component.cli", "check", str(example.dir / "proxy.yaml"),
                         "--kubeconfig", str(real.kubeconfig), "--json", check=False, timeout=120, cwd=ROOT)  # fmt: skip
        finally:
            run("ip", "netns", "exec", real.internet, "nft", "delete", "table", "inet", "pc-upstream-down")
    finally:
        prometheus.stop()
    [failing] = [f for f in json.loads(result.stdout) if f["kind"] == "proxy-upstream-failing"]
    assert "was not served by the upstream proxy upstream.example:3128" in failing["message"], failing
    for node in real.nodes:
        assert f"{node} (" in failing["message"], failing
    assert UPSTREAM_PASSWORD not in result.stdout + result.stderr
    counted = {node: after[node][1] - before[node][1] for node in real.nodes}
    print(
        f"realnode: Prometheus (scrape every 1 s) counted {counted} client connections per node; the clients sent "
        f"{ {node: load['sent'] for node, load in loads.items()} } in {done - sent_at:.1f} s",
        file=sys.stderr,
    )
    for node in real.nodes:
        # Each request is one connection (the load opens a new one each time) through its own node's proxy; a
        # probe accepted but not yet logged when a scrape read the page may count for one scrape: 1 either way.
        assert abs(counted[node] - loads[node]["sent"]) <= 1, (node, counted, loads)
        assert "tinyproxy_up 1" in scrapes[node], scrapes[node][:500]
        assert UPSTREAM_PASSWORD not in scrapes[node]
        pod = real.proxy_pod(node)["metadata"]["name"]
        for container in ("tinyproxy", "metrics"):
            assert UPSTREAM_PASSWORD not in real.kubectl("-n", "kube-system", "logs", pod, "-c", container)
    # Through the proxy, the exporter's port on its own node, by either address, is refused.
    node4 = _node_ipv4(real, real.node)
    # localhost. with its dot: Go's client never proxies localhost or 127.0.0.1 (it dials them itself).
    urls = [f"http://{node4}:9888/metrics", f"http://[{NODE6}]:9888/metrics", "http://localhost.:9888/metrics"]
    answers = real.fetch(next(iter(clients.values())), *urls, env=("NO_PROXY=", "no_proxy="))
    for url in urls:
        assert answers[url].split()[:2] in (["ok", "403"], ["ok", "500"]), (url, answers[url])
        assert "tinyproxy_up" not in answers[url], (url, answers[url])
    # The kernel refused tinyproxy's connections to its node's two addresses: the "node" rule's counter, read by the
    # firewall-counters container every 15 s, counts them.

    def node_rule() -> float:
        body = urllib.request.urlopen(f"http://{targets[real.node]}/metrics", timeout=10).read().decode()
        found = re.search(r'^tinyproxy_firewall_refusals_total\{rule="node"\} (\d+)$', body, re.MULTILINE)
        return float(found.group(1)) if found else -1.0

    wait(lambda: node_rule() >= 2, "the kernel's refusals counted on node 0", timeout=60)


def test_a_pod_mutated_by_the_admission_policy_runs_on_the_real_node_and_reaches_the_origin(
    real: RealNode, example: Project
) -> None:
    """injection.admission by `pulumi up`: a Pod written with no proxy variable at all is given them by the API server
    (the MutatingAdmissionPolicy, its parameters read at admission), runs on the real node and reaches the IPv4-only
    origin through the proxy; a Pod that opts out is left alone and cannot."""
    settings = _settings()
    settings["injection"] = {"admission": True}
    (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    example.up()
    _prefers_own_nodes(real)  # node 0's proxy answers node 0's pods
    probe = yaml.safe_dump(_pod("probe", real.node, real.tool.parent, ["true"], env_from=False))

    def in_force() -> bool:  # the API server loads a new policy within moments
        out = real.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=probe, check=False)
        return bool(out) and "env" in json.loads(out)["spec"]["containers"][0]

    wait(in_force, "the admission policy in force", timeout=60)
    for name, opt_out in (("mutated", False), ("opted-out", True)):
        pod = _pod(name, real.node, real.tool.parent, ["sleep", "86400"], env_from=False)
        if opt_out:
            pod["metadata"]["annotations"] = {"proxy-component.io/inject": "false"}
        real.kubectl("create", "-f", "-", stdin=yaml.safe_dump(pod))
    real.kubectl("-n", "default", "wait", "--for=condition=Ready", "pod/mutated", "pod/opted-out", "--timeout=120s",
                 timeout=150)  # fmt: skip
    env = {
        e["name"]: e.get("value") for e in real.get("pod", "mutated", "-n", "default")["spec"]["containers"][0]["env"]
    }
    proxy = "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert env["HTTP_PROXY"] == env["https_proxy"] == proxy, env
    assert "fd00::/8" in env["NO_PROXY"].split(","), env
    assert "env" not in real.get("pod", "opted-out", "-n", "default")["spec"]["containers"][0]
    assert real.fetch("mutated", "http://origin.example/admitted", "https://origin.example/admitted") == {
        "http://origin.example/admitted": f"ok 200 origin saw /admitted from {NODE_ON_INTERNET}",
        "https://origin.example/admitted": f"ok 200 origin-tls saw /admitted from {NODE_ON_INTERNET}",
    }
    (answer,) = real.fetch("opted-out", "http://origin.example/").values()
    assert answer.startswith("error "), answer
    assert "unreachable" in answer, answer


ROTATED = "198.51.100.4"  # a second TLS origin in "the internet", its leaf issued by the CA rotated to


def test_a_pod_trusts_the_corporate_ca_through_the_cluster_trust_bundle_before_and_after_a_rotation(
    real: RealNode, example: Project
) -> None:
    """injection.clusterTrustBundle on 1.37 real nodes: each origin's leaf stands for a site as the TLS-inspecting
    upstream re-signs it, origin.example's by the lane's CA (the corporate CA before), rotated.example's by a new
    one. A Pod given nothing of its own (not even the origin's CA in /etc/ssl/certs) gets the projected bundle from
    the admission policy and trusts origin.example and not rotated.example; after `pulumi up` with the new CA, the
    same Pod, never restarted, trusts rotated.example and no longer origin.example (each fetch is a new process: Go
    reads SSL_CERT_FILE at its first TLS handshake), and neither the proxy's pods nor the bundles were replaced."""
    old_ca = (real.workdir / "ca.crt").read_text()
    new_ca = make_ca("Rotated Corporate CA")
    leaf = make_leaf(new_ca, "rotated.example")
    (real.workdir / "rotated.crt").write_text(leaf.cert_pem)
    (real.workdir / "rotated.key").write_text(leaf.key_pem)
    run("ip", "-n", real.internet, "addr", "add", f"{ROTATED}/24", "dev", "br0")
    with real.hosts.open("a") as hosts, (Path("/etc/netns") / real.internet / "hosts").open("a") as upstream_hosts:
        hosts.write(f"{ROTATED} rotated.example\n")
        upstream_hosts.write(f"{ROTATED} rotated.example\n")
    server = subprocess.Popen(
        ["ip", "netns", "exec", real.internet, str(real.tool), "serve", f"{ROTATED}:443", "rotated-tls",
         str(real.workdir / "rotated.crt"), str(real.workdir / "rotated.key")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        _upstream_accepts(real, UPSTREAM_PASSWORD)
        settings = _settings()
        upstream = f"http://{UPSTREAM_USER}:{UPSTREAM_PASSWORD}@upstream.example:3128"
        settings["proxy"]["upstream"] = {"url": upstream, "trustedCa": old_ca}
        settings["injection"] = {"admission": True, "clusterTrustBundle": True}
        (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        example.up()
        pod = _pod("trusting", real.node, real.tool.parent, ["sleep", "86400"], env_from=False)
        pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] == "tools"]
        (container,) = pod["spec"]["containers"]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] == "tools"]

        def projected() -> bool:  # the API server loads a new policy within moments
            out = real.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(pod), check=False
            )
            volumes = json.loads(out)["spec"].get("volumes") or [] if out else []
            return any("projected" in v for v in volumes if v["name"] == "proxy-trust")

        wait(projected, "the admission policy projecting the ClusterTrustBundles", timeout=60)
        real.kubectl("create", "-f", "-", stdin=json.dumps(pod))
        real.kubectl("-n", "default", "wait", "--for=condition=Ready", "pod/trusting", "--timeout=120s", timeout=150)
        before = real.get("pod", "trusting", "-n", "default")
        (volume,) = [v for v in before["spec"]["volumes"] if v["name"] == "proxy-trust"]
        assert [s.get("clusterTrustBundle", {}).get("path") for s in volume["projected"]["sources"]] == [
            "corporate-ca.crt", "ca-bundle.crt", None,
        ]  # fmt: skip
        corporate = real.kubectl("exec", "trusting", "--", "cat", "/etc/proxy-component/trust/corporate-ca.crt")
        assert ca_certificates(corporate) == ca_certificates(old_ca)
        urls = ("https://origin.example/ctb", "https://rotated.example/ctb")
        answers = real.fetch("trusting", *urls)
        assert answers[urls[0]] == f"ok 200 origin-tls saw /ctb from {ORIGIN}", answers
        assert answers[urls[1]].startswith("error "), answers
        assert "certificate signed by unknown authority" in answers[urls[1]], answers
        proxies = {node: real.proxy_pod(node)["metadata"]["uid"] for node in real.nodes}
        bundles = {
            b["metadata"]["name"]: b["metadata"]["uid"]
            for b in real.get("clustertrustbundles", "-l", "app.kubernetes.io/part-of=proxy-component")["items"]
        }
        assert sorted(bundles) == ["proxy-component.io:trust:corporate", "proxy-component.io:trust:merged"]

        settings["proxy"]["upstream"]["trustedCa"] = new_ca.cert_pem
        (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
        example.up()
        t0 = time.monotonic()
        seen: list[dict[str, str]] = [{}]

        def trusts_the_new_ca() -> bool:
            seen[0] = real.fetch("trusting", *urls)
            return seen[0][urls[1]].startswith("ok ")

        wait(trusts_the_new_ca, f"the pod to trust the rotated CA (last: {seen})", timeout=300)
        print(f"realnode: the pod trusted the rotated CA {time.monotonic() - t0:.0f}s after pulumi up", file=sys.stderr)
        after = seen[0]
        assert after[urls[1]] == f"ok 200 rotated-tls saw /ctb from {ORIGIN}", after
        assert after[urls[0]].startswith("error "), after
        assert "certificate signed by unknown authority" in after[urls[0]], after
        corporate = real.kubectl("exec", "trusting", "--", "cat", "/etc/proxy-component/trust/corporate-ca.crt")
        assert ca_certificates(corporate) == ca_certificates(new_ca.cert_pem)
        now = real.get("pod", "trusting", "-n", "default")
        assert now["metadata"]["uid"] == before["metadata"]["uid"]
        assert now["status"]["containerStatuses"][0]["restartCount"] == 0
        assert {node: real.proxy_pod(node)["metadata"]["uid"] for node in real.nodes} == proxies
        assert {
            b["metadata"]["name"]: b["metadata"]["uid"]
            for b in real.get("clustertrustbundles", "-l", "app.kubernetes.io/part-of=proxy-component")["items"]
        } == bundles
    finally:
        real.kubectl("-n", "default", "delete", "pod", "trusting", "--ignore-not-found", "--wait=false")
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
        run("ip", "-n", real.internet, "addr", "del", f"{ROTATED}/24", "dev", "br0", check=False)


def test_egress_reports_who_reached_what_and_the_no_proxy_miss_live_and_offline(
    real: RealNode, example: Project, clients: dict[str, str]
) -> None:
    """Issue 46, must-show 1: pods in two namespaces on the real nodes. `client` (default, given proxy-config)
    reaches the origin through its node's proxy; `miss` (namespace egress-b) sets HTTP_PROXY and HTTPS_PROXY itself
    and no NO_PROXY, so its call to the API server's in-cluster name goes to the proxy. `proxy-component egress`
    from the cluster (the access lines through the metrics container, under the egress role's requests) lists both
    namespaces and workloads with their destinations and flags the second as a NO_PROXY miss with its cause and the
    pod's variables; the same report comes from the saved logs and pod list offline."""
    settings = _settings()
    settings["deployment"]["metrics"] = {"enabled": True}
    (example.dir / "proxy.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    example.up()
    _prefers_own_nodes(real)  # node 0's proxy logs node 0's pods
    proxy = "http://http-proxy.kube-system.svc.k8s.internal:8888"
    real.kubectl("create", "namespace", "egress-b")
    pod = _pod("miss", real.node, real.tool.parent, ["sleep", "86400"], env_from=False)
    pod["metadata"]["namespace"] = "egress-b"
    pod["spec"]["containers"][0]["env"] = [
        {"name": "HTTP_PROXY", "value": proxy},
        {"name": "HTTPS_PROXY", "value": proxy},
    ]
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] == "tools"]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "tools"
    ]
    try:
        real.kubectl("create", "-f", "-", stdin=json.dumps(pod))
        real.kubectl("-n", "egress-b", "wait", "--for=condition=Ready", "pod/miss", "--timeout=120s", timeout=150)
        client = clients[real.node]
        assert real.fetch(client, "http://origin.example/egress") == {
            "http://origin.example/egress": f"ok 200 origin saw /egress from {NODE_ON_INTERNET}"
        }
        in_cluster = "https://kubernetes.default.svc.k8s.internal/version"
        out = real.kubectl("-n", "egress-b", "exec", "miss", "--", "/tools/tool", "fetch", in_cluster, timeout=180)
        assert json.loads(out.strip().splitlines()[-1])[in_cluster].startswith("error "), out
        config = example.dir / "proxy.yaml"

        def report() -> dict[str, Any]:
            done = run(sys.executable, "-m", "proxy_component.cli", "egress", str(config), "--kubeconfig",
                       str(real.kubeconfig), "--since", "10m", "--json", cwd=ROOT, timeout=120)  # fmt: skip
            data: dict[str, Any] = json.loads(done.stdout)
            return data

        seen: list[dict[str, Any]] = [{}]

        def both_logged() -> bool:  # the exporter passes the file's lines on within a second or two
            seen[0] = report()
            return len(seen[0]["no_proxy_misses"]) >= 1 and any(
                w["namespace"] == "default" for w in seen[0]["workloads"]
            )

        wait(both_logged, f"the access lines in the report (last: {seen})", timeout=60)
        live = seen[0]
        by_workload = {(w["namespace"], w["workload"]): w["destinations"] for w in live["workloads"]}
        origin = [d for d in by_workload[("default", f"Pod/{client}")] if d["destination"] == "origin.example:80"]
        assert origin, by_workload
        assert origin[0]["requests"] >= 1
        assert origin[0]["bytes_to_client"] > 0
        (miss,) = [m for m in live["no_proxy_misses"] if m["namespace"] == "egress-b"]
        assert miss["workload"] == "Pod/miss"
        assert miss["destination"] == "kubernetes.default.svc.k8s.internal:443"
        assert miss["reason"] == "the name ends with .svc.k8s.internal"
        assert miss["variables"] == {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy}
        go = [c for c in miss["clients"] if c["client"] == "go"]
        assert go, miss["clients"]
        assert "no NO_PROXY" in go[0]["why"], miss["clients"]
        print(f"realnode: egress (live) {len(live['workloads'])} workloads, {live['lines']} connections, misses "
              f"{[(m['namespace'], m['workload'], m['destination']) for m in live['no_proxy_misses']]}", file=sys.stderr)  # fmt: skip

        saved = real.workdir / "egress-saved"
        (saved / "logs").mkdir(parents=True, exist_ok=True)
        for node in real.nodes:
            name = real.proxy_pod(node)["metadata"]["name"]
            text = real.kubectl("-n", "kube-system", "logs", name, "-c", "metrics", "--timestamps", "--since=10m")
            (saved / "logs" / f"{node}.log").write_text(text)
        (saved / "pods.json").write_text(real.kubectl("get", "pods", "-A", "-o", "json"))
        done = run(sys.executable, "-m", "proxy_component.cli", "egress", str(config), "--logs", str(saved / "logs"),
                   "--pods", str(saved / "pods.json"), "--json", cwd=ROOT, timeout=120)  # fmt: skip
        offline = json.loads(done.stdout)
        assert offline["no_proxy_misses"] == [m for m in live["no_proxy_misses"] if m in offline["no_proxy_misses"]]
        assert miss in offline["no_proxy_misses"]
        offline_origin = {(w["namespace"], w["workload"]): w["destinations"] for w in offline["workloads"]}
        assert any(d["destination"] == "origin.example:80" for d in offline_origin[("default", f"Pod/{client}")])
    finally:
        real.kubectl("delete", "namespace", "egress-b", "--ignore-not-found", "--wait=false")
