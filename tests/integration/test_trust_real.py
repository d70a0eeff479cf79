"""Issue 18 end to end: behind a real TLS-inspecting proxy, what the component renders is all a client needs.

In a network namespace of this test's own (only `lo`; names from its /etc/hosts; a resolv.conf that nothing
answers), with every process started inside it:

- an HTTPS origin `site.corp.test` whose certificate comes from a private CA only the inspecting proxy trusts;
- mitmproxy (the real one, from PyPI, in the virtualenv scripts/clients makes), re-signing every site with the
  corporate CA that `proxy.upstream.trustedCa` holds;
- Debian's tinyproxy with the config the component renders, chained to mitmproxy by its rendered `Upstream`;
- a "public-root" origin `public.example.test`, in `proxy.noProxy`, so clients reach it directly. Nothing here
  reaches the internet, so its certificate comes from a test root that the test adds to certifi's roots when it
  builds the bundle (`PublicRoots`): it stands for a site any public root signs, and shows that the merged bundle
  keeps what replacing a runtime's roots would lose.

Each client (curl, Python requests and httpx, Node 24, Go, a JDK) runs with exactly the env the stack transform
gives a container, and the `proxy-trust` ConfigMap's files in a directory standing for the mount (the env's mount
path rewritten to it: the only change). With it, each reaches the origin through tinyproxy and mitmproxy (mitmproxy
logged the request) and the public-root site directly; with the env of the same settings without trustedCa each
fails certificate verification (the error says so). Node is not asked for the public-root site: NODE_EXTRA_CA_CERTS
adds to its built-in roots, which no test root can join.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import certifi
import pulumi
import pytest

from proxy_component.clients import TRUST
from proxy_component.dataplane.config import tinyproxy_conf, tinyproxy_filter
from proxy_component.render import plain_values
from proxy_component.render.trust import MOUNT_PATH, PublicRoots, trust_bundle_object
from proxy_component.settings import Settings, parse_settings
from proxy_component.transform import proxy_env_transform
from tests.integration.real_clients.harness import HERE, cache_dir, node_binary, pins, python_executable
from tests.pki import Issued, make_ca, make_leaf

INSPECTED, INSPECTED_IP = "site.corp.test", "127.0.0.10"
PUBLIC, PUBLIC_IP = "public.example.test", "127.0.0.11"
MITM_PORT = 8080
TIMEOUT = 20.0
CLIENTS = ("curl", "python-requests", "python-httpx", "node", "go", "java")

# What each client says when it cannot verify the certificate chain (not a refused connection, nor a timeout).
CERT_ERRORS = {
    "curl": r"exit 60 .*SSL certificate problem: (unable to get local issuer certificate|self.signed)",
    "python-requests": r"SSLError.*CERTIFICATE_VERIFY_FAILED",
    "python-httpx": r"ConnectError.*CERTIFICATE_VERIFY_FAILED",
    "node": r"(UNABLE_TO_GET_ISSUER_CERT_LOCALLY|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE)",
    "go": r"x509: certificate signed by unknown authority",
    "java": r"SSLHandshakeException: PKIX path building failed",
}

_PY = """
import json, sys
name, urls = sys.argv[1], sys.argv[2:]
out = {}
for url in urls:
    try:
        if name == "python-requests":
            import requests
            r = requests.get(url, timeout=10)
        else:
            import httpx
            r = httpx.get(url, timeout=10)
        out[url] = f"ok {r.status_code} {r.text}"
    except Exception as exc:
        out[url] = f"error {type(exc).__name__}: {exc}"
print(json.dumps(out))
"""

_NODE = """
const out = {};
for (const url of process.argv.slice(1)) {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(10000) });
    out[url] = `ok ${r.status} ${await r.text()}`;
  } catch (e) {
    out[url] = `error ${e.cause?.code ?? ''} ${e.cause?.message ?? e.message}`;
  }
}
console.log(JSON.stringify(out));
"""


@dataclass
class Lab:
    """The namespace, its servers, the directory standing for the mount, and the two envs under test."""

    name: str
    work: Path
    trust_dir: Path
    with_ca: dict[str, str]
    without_ca: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        home = self.work / f"home-{secrets.token_hex(3)}"
        home.mkdir()
        full = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), **env}
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *argv], env=full, capture_output=True, text=True, timeout=120,
            check=False, cwd=home, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def log(self, name: str) -> str:
        path = self.work / name
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _fail_unless(path: str | Path | None, what: str) -> str:
    if path is None or not Path(path).exists():
        pytest.fail(f"{what} is needed: bash scripts/clients (as root) installs it")
    return str(path)


def _mitmdump() -> str:
    base = cache_dir().parent.parent
    return _fail_unless(base / f"mitmproxy-{pins()['MITMPROXY_VERSION']}" / "bin" / "mitmdump", "mitmproxy")


def _settings(trusted_ca: str | None, config_dir: Path) -> Settings:
    upstream: dict[str, Any] = {"url": f"http://127.0.0.1:{MITM_PORT}"}
    if trusted_ca is not None:
        upstream["trustedCa"] = trusted_ca
    return parse_settings(
        {
            "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
            "proxy": {"upstream": upstream, "noProxy": [PUBLIC]},
            "deployment": {"configDir": str(config_dir)},
            "namespaces": ["apps"],
            "runtimes": {"java": True, "node": True},
        }
    )


def _transformed(settings: Settings) -> dict[str, Any]:
    """The pod spec the stack transform makes of a Deployment with one bare container in `apps`."""
    props = {
        "metadata": {"name": "app", "namespace": "apps"},
        "spec": {"selector": {}, "template": {"metadata": {}, "spec": {"containers": [{"name": "app", "image": "i"}]}}},
    }
    args = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:apps/v1:Deployment", name="app", props=copy.deepcopy(props),
        opts=pulumi.ResourceOptions(),
    )  # fmt: skip
    result = proxy_env_transform(settings, plain_values(settings))(args)
    assert result is not None
    assert isinstance(result.props, dict)
    spec: dict[str, Any] = result.props["spec"]["template"]["spec"]
    return spec


def _env(pod_spec: dict[str, Any], mount: Path) -> dict[str, str]:
    (container,) = pod_spec["containers"]
    return {e["name"]: e["value"].replace(MOUNT_PATH, str(mount)) for e in container["env"]}


def lab_proxy(pod_spec: dict[str, Any]) -> str:
    """The HTTPS_PROXY the container got: tinyproxy's Service URL, never mitmproxy's (reached only as its upstream)."""
    (container,) = pod_spec["containers"]
    value: str = next(e["value"] for e in container["env"] if e["name"] == "HTTPS_PROXY")
    return value


def _write_bundle(obj: dict[str, Any], directory: Path) -> None:
    """The ConfigMap's keys as files, as the kubelet mounts them."""
    directory.mkdir()
    for key, text in obj["data"].items():
        (directory / key).write_text(text, encoding="utf-8")
    for key, data in obj["binaryData"].items():
        (directory / key).write_bytes(base64.b64decode(data))


def _pem(*issued: Issued) -> str:
    return "".join(i.cert_pem for i in issued)


def _start(lab: Lab, name: str, argv: list[str], ready: str | None = None) -> None:
    log = lab.work / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", lab.name, *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )
    lab.procs.append(proc)
    if ready is not None:
        deadline = time.monotonic() + TIMEOUT
        while ready not in lab.log(f"{name}.log"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{name} did not start (exit {proc.poll()}):\n{lab.log(f'{name}.log')}")
            time.sleep(0.05)


def _wait_ports(lab: Lab, ports: list[tuple[str, int]]) -> None:
    probe = (
        "import socket, sys, time\n"
        f"deadline = time.monotonic() + {TIMEOUT}\n"
        f"for host, port in {ports!r}:\n"
        "    while True:\n"
        "        try:\n"
        "            socket.create_connection((host, port), timeout=0.5).close(); break\n"
        "        except OSError:\n"
        "            if time.monotonic() > deadline: sys.exit(f'{host}:{port} does not accept')\n"
        "            time.sleep(0.05)\n"
    )
    result = lab.run([sys.executable, "-c", probe], {})
    assert result.returncode == 0, (result.stderr, lab.log("mitmdump.log"), lab.log("tinyproxy.log"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.fail("this test creates a network namespace: it needs root")
    tinyproxy = _fail_unless(shutil.which("tinyproxy"), "tinyproxy (apt-get install tinyproxy-bin)")
    mitmdump = _mitmdump()
    work = tmp_path_factory.mktemp("trust")
    corp, origin_ca, public_root = (
        make_ca("Corp Inspecting CA"),
        make_ca("Origin Private CA"),
        make_ca("Test Public Root"),
    )
    files = {
        "site.crt": make_leaf(origin_ca, INSPECTED),
        "public.crt": make_leaf(public_root, PUBLIC),
    }
    for name, leaf in files.items():
        (work / name).write_text(leaf.cert_pem)
        (work / name.replace(".crt", ".key")).write_text(leaf.key_pem)
    confdir = work / "mitmproxy"
    confdir.mkdir()
    (confdir / "mitmproxy-ca.pem").write_text(corp.key_pem + corp.cert_pem)
    (work / "upstream-cas.pem").write_text(_pem(origin_ca, public_root))

    config_dir = work / "tinyproxy"
    config_dir.mkdir()
    settings = _settings(corp.cert_pem, config_dir)
    roots = PublicRoots(certifi.contents() + public_root.cert_pem, f"certifi {certifi.__version__} + Test Public Root")
    trust_dir = work / "mount"
    _write_bundle(trust_bundle_object(settings, "apps", roots), trust_dir)
    with_ca = _transformed(settings)
    assert with_ca["volumes"] == [{"name": "proxy-trust", "configMap": {"name": "proxy-trust"}}]
    assert with_ca["containers"][0]["volumeMounts"] == [
        {"name": "proxy-trust", "mountPath": MOUNT_PATH, "readOnly": True}
    ]
    without_ca = _transformed(_settings(None, config_dir))
    assert "volumes" not in without_ca

    assert lab_proxy(with_ca) == lab_proxy(without_ca) == settings.http_proxy != f"http://127.0.0.1:{MITM_PORT}"
    name = f"pctrust{secrets.token_hex(3)}"
    etc = Path("/etc/netns") / name
    lab = Lab(name, work, trust_dir, _env(with_ca, trust_dir), _env(without_ca, trust_dir))
    proxy_host = settings.http_proxy.split("//")[1].rsplit(":", 1)[0]
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, timeout=30)
        etc.mkdir(parents=True)
        hosts = f"127.0.0.1 localhost {proxy_host}\n{INSPECTED_IP} {INSPECTED}\n{PUBLIC_IP} {PUBLIC}\n"
        (etc / "hosts").write_text(hosts)
        (etc / "resolv.conf").write_text("nameserver 127.0.0.53\noptions timeout:1 attempts:1\n")
        origin = str(Path(__file__).with_name("tls_origin.py"))
        for label, host, ip, cert in (
            ("site", INSPECTED, INSPECTED_IP, "site"),
            ("public", PUBLIC, PUBLIC_IP, "public"),
        ):
            argv = [sys.executable, origin, host, ip, "443", str(work / f"{cert}.crt"), str(work / f"{cert}.key")]
            _start(lab, label, [*argv, str(work / "requests.jsonl")], ready="ready")
        _start(lab, "mitmdump", [mitmdump, "--mode", "regular", "--listen-host", "127.0.0.1", "--listen-port",
                                 str(MITM_PORT), "--set", f"confdir={confdir}", "--set",
                                 f"ssl_verify_upstream_trusted_ca={work / 'upstream-cas.pem'}", "--set",
                                 "flow_detail=1"])  # fmt: skip
        (config_dir / "filter").write_text(tinyproxy_filter(settings))
        conf = tinyproxy_conf(settings, settings.allowed_sources())
        assert f"Upstream http 127.0.0.1:{MITM_PORT}" in conf.splitlines()
        (work / "tinyproxy.conf").write_text(conf)
        _start(lab, "tinyproxy", [tinyproxy, "-d", "-c", str(work / "tinyproxy.conf")])
        _wait_ports(lab, [("127.0.0.1", MITM_PORT), ("127.0.0.1", 8888), (INSPECTED_IP, 443), (PUBLIC_IP, 443)])
        yield lab
    finally:
        for proc in lab.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)
        shutil.rmtree(etc, ignore_errors=True)


def _fetch(lab: Lab, client: str, env: dict[str, str], urls: list[str]) -> dict[str, str]:
    """Each URL's outcome for one real client: "ok <status> <body>" or "error ..."."""
    if client == "curl":
        out = {}
        for url in urls:
            r = lab.run(["curl", "-sS", "--max-time", "10", url], env)
            out[url] = f"ok 200 {r.stdout}" if r.returncode == 0 else f"error exit {r.returncode} {r.stderr.strip()}"
        return out
    if client == "java":
        java = _fail_unless(shutil.which("java"), "java (a JDK 17: default-jdk-headless)")
        r = lab.run([java, "-XX:+UseSerialGC", "-Xshare:auto", str(HERE / "Fetch.java"), *urls], env)
        lines = [line for line in r.stdout.splitlines() if line.split(" ", 1)[0] in urls]
        assert len(lines) == len(urls), (r.stdout, r.stderr)
        return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines}
    if client == "go":
        argv = [_fail_unless(cache_dir() / "fetch-go", "the Go fetcher (fetch-go)"), *urls]
    elif client == "node":
        argv = [_fail_unless(node_binary(), "Node 24"), "--input-type=module", "-e", _NODE, *urls]
    else:
        argv = [python_executable(), "-I", "-c", _PY, client, *urls]
    r = lab.run(argv, env)
    assert r.returncode == 0, r.stderr
    result: dict[str, str] = json.loads(r.stdout.strip().splitlines()[-1])
    return result


def _through_mitmproxy(lab: Lab, path: str) -> bool:
    return f"https://{INSPECTED}{path}" in lab.log("mitmdump.log")


@pytest.mark.parametrize("client", CLIENTS)
def test_with_the_rendered_trust_a_real_client_passes_the_inspecting_proxy(lab: Lab, client: str) -> None:
    inspected = f"https://{INSPECTED}/via-{client}"
    public = f"https://{PUBLIC}/direct-{client}"
    urls = [inspected] if client == "node" else [inspected, public]
    got = _fetch(lab, client, lab.with_ca, urls)
    assert got[inspected] == f"ok 200 {INSPECTED} saw /via-{client}", got
    assert _through_mitmproxy(lab, f"/via-{client}"), "the request must have gone through the inspecting proxy"
    if client != "node":
        assert got[public] == f"ok 200 {PUBLIC} saw /direct-{client}", got
        assert f"/direct-{client}" not in lab.log("mitmdump.log"), "the public-root site is reached directly"


@pytest.mark.parametrize("client", CLIENTS)
def test_without_the_corporate_ca_a_real_client_fails_verification(lab: Lab, client: str) -> None:
    inspected = f"https://{INSPECTED}/no-ca-{client}"
    assert not any(name in lab.without_ca for name in ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")), lab.without_ca
    assert "trustStore" not in lab.without_ca["JDK_JAVA_OPTIONS"]
    got = _fetch(lab, client, lab.without_ca, [inspected])
    assert re.search(CERT_ERRORS[client], got[inspected]), got
    assert f"{INSPECTED} saw /no-ca-{client}" not in lab.log("requests.jsonl"), "the origin must not have answered"


def test_the_merged_bundle_is_what_keeps_a_public_root_site_working(lab: Lab) -> None:
    """SSL_CERT_FILE replaces the roots: pointed at the corporate CA alone, Go and curl lose the public-root site."""
    corporate_only = {
        **lab.with_ca,
        "SSL_CERT_FILE": str(lab.trust_dir / "corporate-ca.crt"),
        "CURL_CA_BUNDLE": str(lab.trust_dir / "corporate-ca.crt"),
    }
    for client in ("go", "curl"):
        url = f"https://{PUBLIC}/corporate-only-{client}"
        got = _fetch(lab, client, corporate_only, [url])
        assert re.search(CERT_ERRORS[client], got[url]), got


@pytest.mark.parametrize("client", ["wget", "git"])
def test_wget_and_git_read_none_of_the_trust_variables(lab: Lab, client: str) -> None:
    """What `explain` says of them (clients.TRUST): Debian's builds use GnuTLS, which reads no SSL_CERT_FILE, so
    even with the rendered env they fail verification through the inspecting proxy."""
    url = f"https://{INSPECTED}/{client}"
    if client == "wget":
        r = lab.run(["wget", "--no-verbose", "--tries=1", "--timeout=10", "-O", "/dev/null", url], lab.with_ca)
        assert r.returncode == 5, (r.returncode, r.stderr)  # 5: SSL verification failure
        assert "certificate" in r.stderr, r.stderr
    else:
        r = lab.run(["git", "ls-remote", url], lab.with_ca)
        assert r.returncode != 0
        assert "server certificate verification failed" in r.stderr, r.stderr
    assert TRUST[client].variables == ()
