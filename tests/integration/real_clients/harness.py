"""Ask real HTTP clients whether they would send a request for a URL through the proxy or connect directly.

Two kinds of client:

- with a decision function of their own (no traffic): Python urllib, requests, httpx and aiohttp, Go's
  http.ProxyFromEnvironment, Ruby's URI#find_proxy, proxy-from-env 1 and 2, npm's @npmcli/agent and Java's
  default ProxySelector. Each runs in a fresh process with exactly the environment under test.
- without one (curl, wget, undici 7 and 8 EnvHttpProxyAgent, Node 24's http and fetch with NODE_USE_ENV_PROXY):
  they send real requests, inside a network namespace this module creates (only `lo` exists there), to
  recorders: a "proxy" on 127.0.0.1 that every proxy variable is pointed at, and "origins" on every URL's port,
  on every address the URLs name (IP literals are added to `lo`; host names map to documentation addresses
  through the namespace's own /etc/hosts, and its resolv.conf names a server nothing answers).

When this runs as root every client runs inside the namespace, so no packet can leave the machine; Ruby must
(its find_proxy resolves the host name), and so must the traffic-based clients. Nothing is faked: a client that
is not installed makes `decide` raise, naming `bash scripts/clients`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
REQUEST_TIMEOUT = 3  # seconds, per request of a traffic-based client
PROXY_PORT = 3128  # the recording proxy's port in the namespace (another one if a URL uses it)
MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"

REAL_CLIENTS: tuple[str, ...] = (
    "curl",
    "wget",
    "python-urllib",
    "python-requests",
    "python-httpx",
    "python-aiohttp",
    "go",
    "ruby",
    "node-proxy-from-env",
    "node-proxy-from-env-1",
    "node-undici",
    "node-undici-7",
    "node-http",
    "node-fetch",
    "npm",
    "java",
)
TRAFFIC_CLIENTS = frozenset({"curl", "wget", "node-undici", "node-undici-7", "node-http", "node-fetch"})
NETNS_CLIENTS = TRAFFIC_CLIENTS | {"ruby"}
DECISIONS = ("proxy", "bypass", "error")
CREATED_NAMESPACES: list[str] = []  # every namespace this process created (each is deleted when its call ends)
_NODE_MODE = {
    "node-proxy-from-env": "pfe2",
    "node-proxy-from-env-1": "pfe1",
    "node-undici": "undici8",
    "node-undici-7": "undici7",
    "node-http": "http",
    "node-fetch": "fetch",
    "npm": "npm",
}
_PY_CLIENTS = ("python-urllib", "python-requests", "python-httpx", "python-aiohttp")
_PY_MODULE = {"python-requests": "requests", "python-httpx": "httpx", "python-aiohttp": "aiohttp"}


class HarnessError(RuntimeError):
    """The harness could not get a trustworthy answer (a driver crashed, the evidence is contradictory...)."""


class ClientNotInstalledError(HarnessError):
    """A client (or a tool the harness needs for it) is missing: `bash scripts/clients` installs it."""


@dataclass(frozen=True)
class Answer:
    """One client's answer for one URL, with the evidence (the decision function's result, the recorders'
    events, the client's own output) so a misclassification is visible."""

    decision: str
    detail: str = ""


# ---------------------------------------------------------------- installation


def pins() -> dict[str, str]:
    """The pinned npm versions (pins.env, shared with scripts/clients)."""
    values: dict[str, str] = {}
    for line in (HERE / "pins.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def cache_dir() -> Path:
    """Where scripts/clients installs the npm packages, Node 24 and the Go driver."""
    p = pins()
    base = Path(os.environ.get("PROXY_COMPONENT_CACHE") or Path.home() / ".cache" / "proxy-component")
    key = (
        f"pfe1-{p['PFE1_VERSION']}-pfe2-{p['PFE2_VERSION']}-undici7-{p['UNDICI7_VERSION']}"
        f"-undici8-{p['UNDICI8_VERSION']}-node-{p['NODE24_VERSION']}"
    )
    return base / "clients" / key


def _missing(what: str) -> ClientNotInstalledError:
    return ClientNotInstalledError(f"{what}: run `bash scripts/clients` (as root) to install the real clients")


def python_executable() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def node_binary() -> Path:
    return cache_dir() / "node_modules" / "node24" / "bin" / "node"


@cache
def _python_has(module: str) -> bool:
    probe = subprocess.run(
        [python_executable(), "-c", f"import {module}"], capture_output=True, text=True, timeout=60, check=False
    )
    return probe.returncode == 0


def _npm_agent() -> dict[str, str]:
    path = cache_dir() / "npm-agent.json"
    if not path.exists():
        raise _missing(f"npm's @npmcli/agent is not recorded ({path} is missing)")
    data: dict[str, str] = json.loads(path.read_text())
    if not (Path(data["path"]) / "package.json").exists():
        raise _missing(f"npm's @npmcli/agent is gone from {data['path']}")
    return data


def check_installed(client: str, need_root: bool = True) -> None:
    """Raise ClientNotInstalledError (naming `bash scripts/clients`) unless `client` can run here."""
    if client not in REAL_CLIENTS:
        raise ValueError(f"unknown client {client!r}; the real clients are {', '.join(REAL_CLIENTS)}")
    tools = {"curl": "curl", "wget": "wget", "ruby": "ruby", "java": "java"}
    if client in tools and shutil.which(tools[client]) is None:
        raise _missing(f"{client} needs `{tools[client]}` on PATH")
    if client in NETNS_CLIENTS and shutil.which("ip") is None:
        raise _missing(f"{client} runs in a network namespace and needs `ip` (iproute2)")
    if client in _PY_MODULE and not _python_has(_PY_MODULE[client]):
        raise ClientNotInstalledError(
            f"{client}: {python_executable()} cannot import {_PY_MODULE[client]} "
            "(pip install -e '.[all,test]'; `bash scripts/clients` does not install Python packages)"
        )
    cache = cache_dir()
    if client == "go":
        binary, stamp = cache / "decide-go", cache / "decide-go.stamp"
        digest = hashlib.sha256((HERE / "decide.go").read_bytes()).hexdigest()
        if not binary.exists() or not stamp.exists() or stamp.read_text().split()[0] != digest:
            raise _missing(f"the Go driver {binary} is missing or older than decide.go")
    if client in _NODE_MODE:
        if not (cache / "npm.stamp").exists() or not node_binary().exists():
            raise _missing(f"{client} needs the npm packages and Node 24 in {cache}")
        p = pins()
        wanted = {"pfe1": "PFE1_VERSION", "pfe2": "PFE2_VERSION", "undici7": "UNDICI7_VERSION"}
        wanted |= {"undici8": "UNDICI8_VERSION", "node24": "NODE24_VERSION"}
        for package, pin in wanted.items():
            manifest = cache / "node_modules" / package / "package.json"
            if not manifest.exists() or json.loads(manifest.read_text())["version"] != p[pin]:
                raise _missing(f"{client}: {manifest} is not {package}@{p[pin]}")
    if client == "npm":
        _npm_agent()
    if need_root and client in NETNS_CLIENTS and os.geteuid() != 0:
        raise HarnessError(f"{client} runs in a network namespace this harness creates: that needs root")


# ---------------------------------------------------------------- the environment


def child_env(env: Mapping[str, str], home: str) -> dict[str, str]:
    """Exactly `env`, plus a minimal PATH and HOME when it has none: nothing of this process leaks in (its proxy
    variables least of all). Order is kept: a client that scans the whole environment (npm) sees `env`'s order."""
    out = {"PATH": MINIMAL_PATH, "HOME": home}
    for key in env:
        out.pop(key, None)
    out.update(env)
    return out


_PROXY_VALUE = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?P<auth>[^@/]*@)?(?P<hostport>[^/?#]*)(?P<rest>.*)$"
)


def _is_proxy_variable(name: str, value: str) -> bool:
    """A variable holding a proxy URL: http_proxy, HTTPS_PROXY, ALL_PROXY... (not NO_PROXY, nor a switch such as
    NODE_USE_ENV_PROXY=1)."""
    lower = name.lower()
    if not lower.endswith("_proxy") or lower in ("no_proxy", "node_use_env_proxy"):
        return False
    return bool(value.strip()) and not re.fullmatch(r"\d+|true|false|yes|no|on|off", value.strip(), re.IGNORECASE)


def redirect_proxies(env: Mapping[str, str], port: int) -> dict[str, str]:
    """`env` with the host:port of every non-empty proxy URL variable (*_proxy / *_PROXY other than NO_PROXY)
    replaced by the recording proxy's, keeping the scheme (or its absence), any credentials and the path."""
    out = dict(env)
    for name, value in env.items():
        if _is_proxy_variable(name, value):
            match = _PROXY_VALUE.match(value.strip())
            assert match is not None  # the pattern matches every string
            out[name] = f"{match['scheme'] or ''}{match['auth'] or ''}127.0.0.1:{port}{match['rest']}"
    return out


# ---------------------------------------------------------------- URLs and the namespace's view of them


@dataclass(frozen=True)
class Target:
    url: str
    scheme: str
    host: str  # lower case, no brackets; an IP literal in its compressed form
    port: int

    @property
    def key(self) -> tuple[str, int]:
        return self.host, self.port


def _norm_host(host: str) -> str:
    host = host.strip().strip("[]").lower()
    try:
        return ipaddress.ip_address(host.split("%")[0]).compressed
    except ValueError:
        return host


def target(url: str) -> Target:
    parts = urlsplit(url)
    if parts.hostname is None:
        raise ValueError(f"not a URL with a host: {url!r}")
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower(), 80)
    return Target(url, parts.scheme.lower(), _norm_host(parts.hostname), port)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


# Documentation / benchmarking addresses (RFC 5737, RFC 2544) for host names, never loopback.
def _name_addresses() -> Iterator[str]:
    for net in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "198.18.0.0/15"):
        for address in ipaddress.ip_network(net).hosts():
            yield str(address)


@dataclass
class Namespace:
    """A network namespace with only `lo`, the URLs' addresses on it, a hosts file and the recorders."""

    targets: list[Target]
    name: str = field(default_factory=lambda: f"pcx-clients-{secrets.token_hex(4)}")
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="pcx-clients-")))
    proxy_port: int = PROXY_PORT
    names: dict[str, str] = field(default_factory=dict)  # host name -> the address it resolves to
    recorder: subprocess.Popen[str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def etc(self) -> Path:
        return Path("/etc/netns") / self.name

    @property
    def log(self) -> Path:
        return self.workdir / "recorder.jsonl"

    def _ip(self, *args: str) -> None:
        result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
        if result.returncode != 0:
            raise HarnessError(f"ip {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")

    def setup(self) -> None:
        ports = {t.port for t in self.targets}
        while self.proxy_port in ports:
            self.proxy_port += 1
        free = (a for a in _name_addresses() if a not in {t.host for t in self.targets})
        self.etc.mkdir(parents=True, exist_ok=True)
        CREATED_NAMESPACES.append(self.name)
        self._ip("netns", "add", self.name)
        self._ip("-n", self.name, "link", "set", "lo", "up")
        on_lo = {"127.0.0.1", "::1"}
        hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        for t in self.targets:
            address = _ip(t.host)
            if address is None and t.host not in self.names and t.host.rstrip(".") != "localhost":
                self.names[t.host] = next(free)
                hosts.append(f"{self.names[t.host]} {t.host}")
        literals = {t.host for t in self.targets if _ip(t.host) is not None} | set(self.names.values())
        for literal in sorted(literals - on_lo):
            address = ipaddress.ip_address(literal)
            if (address.is_loopback and address.version == 4) or address.is_unspecified:
                continue  # 127.0.0.0/8 is on lo already; 0.0.0.0 and :: reach the local listeners as they are
            if address.version == 4:
                self._ip("-n", self.name, "addr", "add", f"{address}/32", "dev", "lo")
            else:
                self._ip("-n", self.name, "addr", "add", f"{address}/128", "dev", "lo", "nodad")
        (self.etc / "hosts").write_text("\n".join(hosts) + "\n")
        # Nothing listens on 127.0.0.53 in the namespace: a query the hosts file does not answer fails at once.
        (self.etc / "resolv.conf").write_text("nameserver 127.0.0.53\noptions timeout:1 attempts:1\n")
        self.log.write_text("")
        self.recorder = subprocess.Popen(
            ["ip", "netns", "exec", self.name, "python3", str(HERE / "recorder.py"), str(self.log),
             str(self.proxy_port), *sorted(str(p) for p in ports)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.recorder.stdout is not None
        ready = self.recorder.stdout.readline().strip()
        if ready != "ready":
            self.recorder.kill()
            _, err = self.recorder.communicate(timeout=10)
            raise HarnessError(f"the recorder did not start in {self.name}: {ready} {err.strip()}")

    def teardown(self) -> None:
        if self.recorder is not None and self.recorder.poll() is None:
            self.recorder.kill()
            self.recorder.communicate(timeout=10)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30, check=False)
        shutil.rmtree(self.etc, ignore_errors=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def wrap(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@contextmanager
def namespace(targets: list[Target]) -> Iterator[Namespace]:
    if os.geteuid() != 0:
        raise HarnessError("the real-client harness creates a network namespace: that needs root")
    ns = Namespace(targets)
    try:
        ns.setup()
        yield ns
    finally:
        ns.teardown()


# ---------------------------------------------------------------- running one client


def _run(argv: list[str], env: Mapping[str, str], timeout: float, cwd: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, env=dict(env), capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"{argv[:6]} did not finish in {timeout} s: {exc.stderr!r}") from exc


def _driver_json(result: subprocess.CompletedProcess[str], what: str) -> dict[str, Any]:
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        raise HarnessError(
            f"{what} exited {result.returncode} without an answer: {result.stderr.strip()[-2000:]} {result.stdout[-500:]}"
        )
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def _argv(client: str, urls: Sequence[str]) -> list[str]:
    """The command that runs a decision-function driver (or, for the traffic clients, the client itself)."""
    cache = cache_dir()
    if client in _PY_CLIENTS:
        return [python_executable(), "-I", str(HERE / "decide_py.py"), client, *urls]
    if client == "go":
        return [str(cache / "decide-go"), *urls]
    if client == "ruby":
        return ["ruby", str(HERE / "decide.rb"), *urls]
    if client == "java":
        return ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", str(HERE / "Decide.java"), *urls]
    if client in _NODE_MODE:
        agent = _npm_agent()["path"] if client == "npm" else "-"
        return [str(node_binary()), str(HERE / "decide.mjs"), _NODE_MODE[client], str(cache), agent, *urls]
    if client == "curl":
        argv = ["curl", "-q", "--globoff", "--silent", "--show-error", "--insecure"]
        argv += [
            "--max-time",
            str(REQUEST_TIMEOUT),
            "--write-out",
            "%{url_effective} -> %{http_code} exit %{exitcode}\\n",
        ]
        for url in urls:
            argv += ["--output", "/dev/null", url]
        return argv
    if client == "wget":
        return ["wget", "--no-verbose", "--output-document=/dev/null", "--tries=1", f"--timeout={REQUEST_TIMEOUT}",
                "--no-check-certificate", *urls]  # fmt: skip
    raise ValueError(f"unknown client {client!r}")


def _decision_client(
    client: str, env: Mapping[str, str], urls: Sequence[str], ns: Namespace | None
) -> dict[str, Answer]:
    argv = _argv(client, urls)
    with tempfile.TemporaryDirectory(prefix="pcx-home-") as home:
        result = _run(ns.wrap(argv) if ns else argv, child_env(env, home), 60 + 2 * len(urls), home)
    if client == "java" and result.returncode != 0 and "Could not create the Java Virtual Machine" in result.stderr:
        # JAVA_TOOL_OPTIONS the JVM refuses (e.g. a space inside -Dhttp.nonProxyHosts): no request is possible.
        words = " ".join(result.stderr.split())
        return {url: Answer("error", f"the JVM does not start: {words}") for url in urls}
    data = _driver_json(result, client)
    answers: dict[str, Answer] = {}
    for url in urls:
        entry = data["decisions"].get(url)
        if entry is None or entry["decision"] not in DECISIONS:
            raise HarnessError(f"{client} gave no decision for {url}: {data}")
        answers[url] = Answer(entry["decision"], entry["detail"])
    return answers


def _event_key(event: dict[str, Any]) -> tuple[str, int] | None:
    """The (host, port) a recorded request was for, or None when the event does not say."""
    if event.get("tls"):
        if event["role"] == "proxy":
            return None  # TLS to the proxy itself (an https:// proxy URL): the target is hidden
        sni = event.get("sni", "")
        return _norm_host(sni or event["local"]), int(event["port"])
    method, _, rest = event.get("line", "").partition(" ")
    request_target = rest.rsplit(" ", 1)[0]
    if event["role"] == "proxy" and method.upper() == "CONNECT":
        host, _, port = request_target.rpartition(":")
        return (_norm_host(host), int(port)) if port.isdigit() else None
    if event["role"] == "proxy" and "://" in request_target:
        try:
            return target(request_target).key
        except ValueError:
            return None
    host_header = event.get("host", "")
    if event["role"] == "origin":  # where the connection really arrived; the Host header tells names apart
        return _norm_host(re.sub(r":\d+$", "", host_header) or event["local"]), int(event["port"])
    if not host_header:
        return None
    try:
        return target(f"http://{host_header}/").key
    except ValueError:
        return None


def _traffic_client(client: str, env: Mapping[str, str], urls: Sequence[str], ns: Namespace) -> dict[str, Answer]:
    targets = [target(url) for url in urls]
    argv = _argv(client, urls)
    with ns._lock:  # one traffic client at a time: the recorders' events are attributed by position in the log
        before = len(ns.events())
        with tempfile.TemporaryDirectory(prefix="pcx-home-") as home:
            os.chmod(home, 0o755)
            result = _run(ns.wrap(argv), child_env(redirect_proxies(env, ns.proxy_port), home),
                          15 + (REQUEST_TIMEOUT + 1) * len(urls), home)  # fmt: skip
        events = ns.events()[before:]
    outcomes: dict[str, str] = {}
    if client in _NODE_MODE:
        outcomes = _driver_json(result, client).get("outcomes", {})
    client_output = (result.stdout + result.stderr).strip()
    seen: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
    unattributed: list[dict[str, Any]] = []
    for event in events:
        key = _event_key(event)
        if key is None:
            unattributed.append(event)
            continue
        seen.setdefault(key, {"proxy": [], "origin": []})[event["role"]].append(event)
    answers: dict[str, Answer] = {}
    for t in targets:
        by_role = seen.get(t.key, {"proxy": [], "origin": []})
        via_proxy, direct = by_role["proxy"], by_role["origin"]
        outcome = outcomes.get(t.url, "")
        if via_proxy and direct:
            raise HarnessError(f"{client}: {t.url} reached both the proxy and the origin: {via_proxy} {direct}")
        if via_proxy:
            decision, evidence = "proxy", f"proxy saw {via_proxy[0].get('line') or via_proxy[0]}"
        elif direct:
            decision, evidence = "bypass", f"origin saw {direct[0]}"
        else:
            decision, evidence = "error", "no recorder saw it"
            if unattributed:
                raise HarnessError(f"{client}: {t.url} unattributed events {unattributed}; output {client_output}")
        detail = f"{evidence}; client: {outcome or _client_lines(client_output, t.url)}"
        answers[t.url] = Answer(decision, detail)
    return answers


def _client_lines(output: str, url: str) -> str:
    host = urlsplit(url).netloc
    lines = [line for line in output.splitlines() if host in line or url in line]
    return " | ".join(lines[-3:]) if lines else output[-300:]


# ---------------------------------------------------------------- the public API


def _check(clients: Sequence[str]) -> None:
    for client in clients:
        check_installed(client)


def explain_many(
    env: Mapping[str, str], urls: Sequence[str], clients: Sequence[str] = REAL_CLIENTS
) -> dict[str, dict[str, Answer]]:
    """client -> url -> Answer (decision and evidence). One namespace for the whole call; one process per client
    (all URLs in it); the decision-function clients run in parallel with the traffic ones, which run one at a time."""
    clients = list(dict.fromkeys(clients))
    _check(clients)
    urls = list(dict.fromkeys(urls))
    targets = [target(url) for url in urls]
    root = os.geteuid() == 0
    results: dict[str, dict[str, Answer]] = {}

    def run_all(ns: Namespace | None) -> None:
        with ThreadPoolExecutor(max_workers=3) as pool:
            futures: dict[str, Future[dict[str, Answer]]] = {}
            traffic = [c for c in clients if c in TRAFFIC_CLIENTS]
            if traffic:
                assert ns is not None

                def chain() -> dict[str, dict[str, Answer]]:
                    return {c: _traffic_client(c, env, urls, ns) for c in traffic}

                chained = pool.submit(chain)
            # The slow starters first.
            order = sorted((c for c in clients if c not in TRAFFIC_CLIENTS), key=lambda c: c != "java")
            for c in order:
                futures[c] = pool.submit(_decision_client, c, env, urls, ns)
            for c, future in futures.items():
                results[c] = future.result()
            if traffic:
                results.update(chained.result())

    if root:
        with namespace(targets) as ns:
            run_all(ns)
    else:
        run_all(None)  # check_installed already refused the clients that need the namespace
    return {c: results[c] for c in clients}


def decide_many(
    env: Mapping[str, str], urls: Sequence[str], clients: Sequence[str] = REAL_CLIENTS
) -> dict[str, dict[str, str]]:
    """client -> url -> "proxy" | "bypass" | "error"."""
    return {c: {u: a.decision for u, a in answers.items()} for c, answers in explain_many(env, urls, clients).items()}


def decide(client: str, env: Mapping[str, str], urls: Sequence[str]) -> dict[str, str]:
    """For each url: "proxy" (the client sends it to the proxy), "bypass" (it connects directly) or "error" (it
    raises / refuses to work because of its proxy configuration, before connecting)."""
    return decide_many(env, urls, [client])[client]


def explain(client: str, env: Mapping[str, str], urls: Sequence[str]) -> dict[str, Answer]:
    return explain_many(env, urls, [client])[client]


def _first_line(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return (result.stdout or result.stderr).strip().splitlines()[0]


@cache
def _version(client: str) -> str:
    check_installed(client, need_root=False)
    if client == "curl":
        return _first_line(["curl", "--version"])
    if client == "wget":
        return _first_line(["wget", "--version"])
    env = {"PATH": MINIMAL_PATH}
    with tempfile.TemporaryDirectory(prefix="pcx-home-") as home:
        if client in ("node-undici", "node-undici-7", "node-http", "node-fetch"):
            mode = _NODE_MODE[client]
            if mode.startswith("undici"):
                manifest = cache_dir() / "node_modules" / mode / "package.json"
                return (
                    f"undici {json.loads(manifest.read_text())['version']} EnvHttpProxyAgent on node {_node_version()}"
                )
            return f"node {_node_version()} {'http.get' if mode == 'http' else 'fetch'} (NODE_USE_ENV_PROXY)"
        data = _driver_json(_run(_argv(client, []), child_env(env, home), 120, home), client)
    version = str(data["version"])
    if client == "npm":
        version += f" (npm {_npm_agent()['npm']}, on node {data['node']})"
    elif client.startswith("node-"):
        version += f" on node {data['node']}"
    return version


def _node_version() -> str:
    return _first_line([str(node_binary()), "--version"])


def versions() -> dict[str, str]:
    """client id -> the real version string found (for reports)."""
    return {client: _version(client) for client in REAL_CLIENTS}


__all__ = [
    "REAL_CLIENTS",
    "Answer",
    "ClientNotInstalledError",
    "HarnessError",
    "decide",
    "decide_many",
    "explain",
    "explain_many",
    "versions",
]
