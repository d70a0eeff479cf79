"""The real-client harness itself (tests/integration/real_clients): can its answers be trusted?

Controls that could fail: with no NO_PROXY every client sends external URLs to the proxy, and the recording
proxy sees them; with no proxy variable every client connects directly, and the recording origin sees it; the
parent's proxy variables never leak into a client; an unknown or missing client raises. Most tests need root
(the harness's network namespace) and `bash scripts/clients`: like the node-isolation tests they fail, never
skip, without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.real_clients import (
    REAL_CLIENTS,
    ClientNotInstalledError,
    HarnessError,
    decide,
    decide_many,
    explain_many,
    harness,
    versions,
)
from tests.integration.real_clients.harness import (
    CREATED_NAMESPACES,
    TRAFFIC_CLIENTS,
    check_installed,
    child_env,
    pins,
    redirect_proxies,
)

PROXY_HOST = "http-proxy.kube-system.svc.k8s.internal"
PROXY = f"http://{PROXY_HOST}:8888"
JAVA = f"-Dhttp.proxyHost={PROXY_HOST} -Dhttp.proxyPort=8888 -Dhttps.proxyHost={PROXY_HOST} -Dhttps.proxyPort=8888"
EXTERNAL = (
    "http://github.com/",
    "http://api.example.com:8080/",
    "http://10.1.2.3/",
    "http://[fd00::1]/",
    "http://my-svc.my-ns.svc.cluster.local/",
    "http://kubernetes/",
    "https://github.com/",
    "https://10.96.0.1/",
)
LOOPBACK = ("http://localhost/", "http://127.0.0.1/", "http://[::1]/")


def _env(no_proxy: str | None, java_non_proxy: str | None = None) -> dict[str, str]:
    env = {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "HTTPS_PROXY": PROXY, "https_proxy": PROXY}
    if no_proxy is not None:
        env |= {"NO_PROXY": no_proxy, "no_proxy": no_proxy}
    java = JAVA if java_non_proxy is None else f"{JAVA} -Dhttp.nonProxyHosts={java_non_proxy}"
    return env | {"NODE_USE_ENV_PROXY": "1", "JAVA_TOOL_OPTIONS": java}


@pytest.fixture(scope="module")
def installed() -> None:
    missing = [tool for tool in ("ip", "curl", "wget", "ruby", "java") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(
            f"the real-client harness needs root and {', '.join(missing) or 'nothing else'} "
            "(bash scripts/clients): these tests must run, not skip"
        )
    for client in REAL_CLIENTS:
        check_installed(client)  # raises ClientNotInstalledError naming `bash scripts/clients`


@pytest.fixture
def no_leftover_namespace() -> Iterator[None]:
    """The namespaces the test's calls created are gone afterwards (other processes may be using the harness)."""
    before = len(CREATED_NAMESPACES)
    yield
    created = CREATED_NAMESPACES[before:]
    assert created, "the harness created no namespace"
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert [name for name in created if name in listed] == []
    assert [name for name in created if (Path("/etc/netns") / name).exists()] == []


# ---------------------------------------------------------------- without root


def test_an_unknown_client_raises() -> None:
    with pytest.raises(ValueError, match="unknown client 'lynx'"):
        decide("lynx", _env(""), ["http://github.com/"])


@pytest.mark.parametrize("client", ["go", "node-undici", "node-proxy-from-env", "npm"])
def test_a_client_not_installed_raises_naming_the_installer(
    client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROXY_COMPONENT_CACHE", str(tmp_path))  # an empty cache: nothing installed
    with pytest.raises(ClientNotInstalledError, match="bash scripts/clients"):
        decide(client, _env(""), ["http://github.com/"])


def test_the_child_environment_is_exactly_the_given_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://parent.invalid:1")
    env = {"no_proxy": "a", "NO_PROXY": "b", "http_proxy": PROXY}
    child = child_env(env, "/nonexistent")
    assert child == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", **env}
    assert list(child)[2:] == ["no_proxy", "NO_PROXY", "http_proxy"]  # order kept (npm's agent depends on it)


def test_only_proxy_urls_are_redirected_to_the_recorder() -> None:
    env = {
        "http_proxy": PROXY,
        "HTTPS_PROXY": "proxy.example:3128",
        "ALL_PROXY": "socks5://user:pw@proxy.example:1080/x",
        "NO_PROXY": "10.0.0.0/8",
        "no_proxy": "x",
        "NODE_USE_ENV_PROXY": "1",
        "https_proxy": "",
    }
    assert redirect_proxies(env, 3128) == {
        "http_proxy": "http://127.0.0.1:3128",
        "HTTPS_PROXY": "127.0.0.1:3128",
        "ALL_PROXY": "socks5://user:pw@127.0.0.1:3128/x",
        "NO_PROXY": "10.0.0.0/8",
        "no_proxy": "x",
        "NODE_USE_ENV_PROXY": "1",
        "https_proxy": "",
    }


def test_the_pins_are_exact_versions() -> None:
    for name, version in pins().items():
        assert version.count(".") == 2, (name, version)
        assert version.replace(".", "").isdigit(), (name, version)


# ---------------------------------------------------------------- with root and the clients


@pytest.mark.usefixtures("installed", "no_leftover_namespace")
def test_without_no_proxy_every_client_sends_external_urls_to_the_proxy() -> None:
    results = explain_many(_env(""), EXTERNAL)
    wrong = {(c, u): a for c, answers in results.items() for u, a in answers.items() if a.decision != "proxy"}
    assert wrong == {}
    for client in TRAFFIC_CLIENTS:  # the recording proxy really saw them
        assert all(a.detail.startswith("proxy saw ") for a in results[client].values()), results[client]
    assert results["curl"]["https://github.com/"].detail.startswith("proxy saw CONNECT github.com:443")


@pytest.mark.usefixtures("installed", "no_leftover_namespace")
def test_without_proxy_variables_every_client_connects_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    # The parent's own proxy variables must not reach the clients.
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, PROXY)
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", JAVA)
    results = explain_many({"NODE_USE_ENV_PROXY": "1"}, EXTERNAL + LOOPBACK)
    wrong = {(c, u): a for c, answers in results.items() for u, a in answers.items() if a.decision != "bypass"}
    assert wrong == {}
    for client in TRAFFIC_CLIENTS:  # the recording origin really saw each direct connection
        assert all(a.detail.startswith("origin saw ") for a in results[client].values()), results[client]
    # ...on the address the name or literal stands for, with its own Host header / server name
    assert "'local': '10.1.2.3'" in results["wget"]["http://10.1.2.3/"].detail
    assert "'host': '[fd00::1]'" in results["curl"]["http://[fd00::1]/"].detail
    assert "'sni': 'github.com'" in results["node-fetch"]["https://github.com/"].detail


@pytest.mark.usefixtures("installed", "no_leftover_namespace")
def test_the_namespace_is_deleted_when_a_client_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object) -> None:
        raise HarnessError("a client crashed")

    monkeypatch.setattr(harness, "_traffic_client", crash)
    with pytest.raises(HarnessError, match="a client crashed"):
        decide("curl", _env(""), ["http://github.com/"])


@pytest.mark.usefixtures("installed")
def test_no_proxy_star_per_client() -> None:
    """`*` alone: what each client really does (wget, Ruby and npm have no wildcard)."""
    results = decide_many(_env("*", "*"), ["http://github.com/", "http://10.1.2.3/", "http://localhost/"])
    ignore_star = {"wget", "ruby", "npm"}
    for client, answers in results.items():
        expected = "proxy" if client in ignore_star else "bypass"
        assert answers["http://github.com/"] == expected, (client, answers)
        assert answers["http://10.1.2.3/"] == expected, (client, answers)
    # Ruby never proxies a host that resolves to loopback; wget and npm do.
    assert results["ruby"]["http://localhost/"] == "bypass"
    assert results["wget"]["http://localhost/"] == results["npm"]["http://localhost/"] == "proxy"


@pytest.mark.usefixtures("installed")
def test_which_spelling_wins_is_passed_through() -> None:
    """Only HTTP_PROXY in upper case: curl and wget ignore it (they read http_proxy only), the others proxy."""
    results = decide_many({"HTTP_PROXY": PROXY, "NODE_USE_ENV_PROXY": "1"}, ["http://github.com/"],
                          [c for c in REAL_CLIENTS if c != "java"])  # fmt: skip
    assert {c for c, a in results.items() if a["http://github.com/"] == "bypass"} == {"curl", "wget"}
    assert {c for c, a in results.items() if a["http://github.com/"] == "error"} == set()


@pytest.mark.usefixtures("installed")
def test_a_refused_configuration_is_an_error_with_the_clients_words() -> None:
    env = _env("[fd00::1]", "a.test| example.com")  # httpx cannot parse the entry; the JVM will not start
    results = explain_many(env, ["http://github.com/"], ["python-httpx", "java", "curl"])
    assert results["python-httpx"]["http://github.com/"].decision == "error"
    assert "InvalidURL" in results["python-httpx"]["http://github.com/"].detail
    assert results["java"]["http://github.com/"].decision == "error"
    assert "Unrecognized option: example.com" in results["java"]["http://github.com/"].detail
    assert results["curl"]["http://github.com/"].decision == "proxy"


@pytest.mark.usefixtures("installed")
def test_ruby_resolves_names_inside_the_namespace() -> None:
    """Ruby's find_proxy resolves the host: names map to a documentation address, localhost to loopback."""
    results = decide("ruby", _env(""), ["http://github.com/", "http://localhost/", "http://kubernetes/"])
    assert results == {"http://github.com/": "proxy", "http://localhost/": "bypass", "http://kubernetes/": "proxy"}


@pytest.mark.usefixtures("installed")
def test_versions_are_the_real_ones() -> None:
    found = versions()
    assert set(found) == set(REAL_CLIENTS)
    p = pins()
    assert p["PFE2_VERSION"] in found["node-proxy-from-env"]
    assert p["PFE1_VERSION"] in found["node-proxy-from-env-1"]
    assert p["UNDICI8_VERSION"] in found["node-undici"]
    assert p["UNDICI7_VERSION"] in found["node-undici-7"]
    assert p["NODE24_VERSION"] in found["node-http"]
    assert p["NODE24_VERSION"] in found["node-fetch"]
    assert found["go"].startswith("go1.")
    assert found["curl"].startswith("curl ")
    assert "OpenJDK" in found["java"]
