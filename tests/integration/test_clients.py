"""Real clients against the NO_PROXY value this project renders: do clients.py's table and notes hold?

Each expectation that depends on a client's dialect is read from `proxy_component.clients.CLIENTS`
(or from the text of `compat_notes`), so a wrong row fails here. Python's urllib, requests and
httpx are checked twice: their own proxy decision, and a real request on loopback. curl is the
real binary. All traffic stays on loopback (127.0.0.0/8, ::1): names are pinned to 127.0.0.1
(curl `--resolve`, a patched resolver for Python that refuses anything else), the "proxy" only
records and answers, and every socket and subprocess has a timeout.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator

import httpx
import pytest

from proxy_component.clients import Note, compat_notes
from proxy_component.noproxy import Category, NoProxy, Source, compose, loopback_sources
from proxy_component.settings import parse_settings

from .clients_support import (
    BYPASSED_NAMES,
    PROXIED_NAME,
    PYTHON_CLIENTS,
    REALISTIC,
    Curl,
    LoopbackServer,
    PythonClient,
    clear_proxy_env,
    client,
    find_curl,
    has_ipv6_cidr,
    ipv6_example,
    loopback_getaddrinfo,
    loopback_server,
    pod_env,
    probe_path,
    realistic,
    set_pod_env,
    without_ipv6_cidrs,
)

UNUSED_PROXY = "http://127.0.0.1:9"  # for decision-only tests: nothing connects to it
CIDR_LOOPBACK = "127.64.0.7"  # an origin inside CIDR_STAND_IN, standing in for a pod IP
CIDR_STAND_IN = "127.64.0.0/16"  # a loopback range standing in for cluster.podCidrs in end-to-end tests
IPV6_CIDR_STAND_IN = "::/127"  # holds ::1, standing in for an IPv6 pod range such as fd00::/8

# Inside a listed CIDR of REALISTIC but not listed themselves: pod, service and node addresses.
IPV4_IN_CIDRS = ("10.244.3.7", "10.100.2.3", "192.168.0.17")
# What the IPv6 example bypasses by name: it has no proxy.noProxy names of its own.
IPV6_EXAMPLE_NAMES = tuple(n for n in BYPASSED_NAMES if not n.endswith("corp.example"))


def _id(py: PythonClient) -> str:
    return py.name.split()[-1]


@pytest.fixture(autouse=True)
def _no_ambient_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxy_env(monkeypatch)


def _bare_ipv6_note(no_proxy: NoProxy) -> Note:
    found = [n for n in compat_notes(no_proxy) if n.text.startswith("IPv6 addresses are listed bare")]
    assert len(found) == 1, f"expected one note on bare IPv6 addresses, got {compat_notes(no_proxy)}"
    return found[0]


def matches_bare_ipv6(name: str, no_proxy: NoProxy) -> bool:
    """What compat_notes claims: a client named in the bare-IPv6 note does not match `fd00::1`-style entries."""
    return name not in _bare_ipv6_note(no_proxy).text


def _v4_with_cidr_stand_in() -> NoProxy:
    """The realistic list plus a loopback CIDR, so a CIDR match can be observed with real traffic."""
    sources = realistic().no_proxy_sources()
    sources.append(Source(CIDR_STAND_IN, Category.POD_NETWORK, "test: loopback stand-in for cluster.podCidrs"))
    return compose(sources)


def _v6_with_cidr_stand_in() -> NoProxy:
    """The IPv6 example without its exact ::1, plus ::/127: only a CIDR match can bypass for [::1]."""
    sources = [s for s in ipv6_example().no_proxy_sources() if s.value != "::1"]
    sources.append(Source(IPV6_CIDR_STAND_IN, Category.POD_NETWORK, "test: loopback stand-in for fd00::/8"))
    return compose(sources)


def test_the_composed_values_are_the_ones_under_test() -> None:
    """Guard the premises: the tokens the other tests rely on are (or are not) in the rendered values."""
    v4 = realistic().no_proxy().tokens()
    for token in ("k8s.internal", ".k8s.internal", ".svc", "corp.example", ".corp.example", "localhost"):
        assert token in v4
    assert {"127.0.0.1", "::1", "10.96.0.1", "10.244.0.0/16", "10.96.0.0/12", "192.168.0.0/24"} <= set(v4)
    assert "[::1]" not in v4, "the project must emit IPv6 bare"
    assert not any(ip in v4 for ip in IPV4_IN_CIDRS)
    cidrs = [n for n in realistic().no_proxy().networks() if n.prefixlen < n.max_prefixlen]
    for ip in IPV4_IN_CIDRS:
        assert any(ipaddress.ip_address(ip) in n for n in cidrs), ip
    v6 = ipv6_example().no_proxy().tokens()
    assert {"fd00::/8", "fd00:10:96::1", "10.0.0.0/8", "::1"} <= set(v6)
    assert CIDR_STAND_IN in _v4_with_cidr_stand_in().tokens()
    six = _v6_with_cidr_stand_in().tokens()
    assert IPV6_CIDR_STAND_IN in six
    assert "::1" not in six


# --- 1. Python clients decide bypass vs proxy as the table says ---------------------------------

V4_DECISIONS = [
    *((name, True) for name in BYPASSED_NAMES),
    ("127.0.0.1", True),  # loopback, listed
    ("10.96.0.1", True),  # apiServerIps: kept although 10.96.0.0/12 covers it
    (PROXIED_NAME, False),
]


@pytest.mark.parametrize("py", PYTHON_CLIENTS, ids=_id)
@pytest.mark.parametrize(("host", "bypass"), V4_DECISIONS)
def test_python_client_decides_on_names_and_listed_ips(
    py: PythonClient, host: str, bypass: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = str(realistic().no_proxy())
    set_pod_env(monkeypatch, UNUSED_PROXY, value)
    assert py.bypasses(host, value) is bypass, f"{py.name}: {host} with NO_PROXY={value}"


@pytest.mark.parametrize("py", PYTHON_CLIENTS, ids=_id)
@pytest.mark.parametrize("host", IPV4_IN_CIDRS)
def test_python_client_ipv4_cidr_support_matches_table(
    py: PythonClient, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = str(realistic().no_proxy())
    set_pod_env(monkeypatch, UNUSED_PROXY, value)
    expected = py.row.cidr_v4
    assert py.bypasses(host, value) is expected, (
        f"clients.py says {py.name} cidr_v4={expected}, but {host} (inside a listed CIDR) was "
        f"{'proxied' if expected else 'bypassed'}"
    )


@pytest.mark.parametrize("py", PYTHON_CLIENTS, ids=_id)
def test_python_client_bare_ipv6_loopback_matches_note(py: PythonClient, monkeypatch: pytest.MonkeyPatch) -> None:
    no_proxy = realistic().no_proxy()
    value = str(no_proxy)
    set_pod_env(monkeypatch, UNUSED_PROXY, value)
    expected = matches_bare_ipv6(py.name, no_proxy)
    assert py.bypasses("::1", value) is expected, f"{py.name} vs compat_notes: {_bare_ipv6_note(no_proxy)}"


@pytest.mark.parametrize("py", PYTHON_CLIENTS, ids=_id)
def test_python_client_undotted_suffix_token_covers_domain_and_subdomains(
    py: PythonClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: Go, curl, wget and Python match subdomains through the first token (`k8s.internal`)."""
    set_pod_env(monkeypatch, UNUSED_PROXY, "k8s.internal")
    assert py.bypasses("api.k8s.internal", "k8s.internal") is py.row.suffix_form
    assert py.bypasses("k8s.internal", "k8s.internal") is True
    assert py.bypasses("notk8s.internal", "k8s.internal") is False


# IPv6 example: hosts, and the CLIENTS flag (or note) that decides each.
def _ipv6_expectation(py: PythonClient, host: str) -> bool:
    no_proxy = ipv6_example().no_proxy()
    if host == "fd00:10:96::1":  # apiServerIps, listed bare
        return matches_bare_ipv6(py.name, no_proxy)
    if host == "fd00:10:244::5":  # a pod, inside fd00::/8 only
        return py.row.cidr_v6
    if host == "10.1.2.3":  # a node, inside 10.0.0.0/8 only
        return py.row.cidr_v4
    return host != PROXIED_NAME


IPV6_HOSTS = (*IPV6_EXAMPLE_NAMES, PROXIED_NAME, "fd00:10:96::1", "fd00:10:244::5", "10.1.2.3")


@pytest.mark.parametrize("py", [p for p in PYTHON_CLIENTS if not p.row.raises_on_ipv6_cidr], ids=_id)
@pytest.mark.parametrize("host", IPV6_HOSTS)
def test_python_client_with_ipv6_example(py: PythonClient, host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    value = str(ipv6_example().no_proxy())
    set_pod_env(monkeypatch, UNUSED_PROXY, value)
    assert py.bypasses(host, value) is _ipv6_expectation(py, host), f"{py.name}: {host} with NO_PROXY={value}"


# --- 2. httpx and IPv6 -----------------------------------------------------------------------


@pytest.mark.parametrize("py", PYTHON_CLIENTS, ids=_id)
def test_ipv6_cidr_crashes_exactly_the_flagged_clients(py: PythonClient, monkeypatch: pytest.MonkeyPatch) -> None:
    value = str(ipv6_example().no_proxy())
    set_pod_env(monkeypatch, UNUSED_PROXY, value)
    if py.row.raises_on_ipv6_cidr:
        with pytest.raises(httpx.InvalidURL):
            py.bypasses(PROXIED_NAME, value)
    else:
        assert py.bypasses(PROXIED_NAME, value) is False


@pytest.mark.parametrize("with_proxy_vars", [True, False], ids=["with-proxy", "no_proxy-only"])
def test_httpx_raises_invalid_url_with_ipv6_example(with_proxy_vars: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    assert client("Python httpx").raises_on_ipv6_cidr
    value = str(ipv6_example().no_proxy())
    assert "fd00::/8" in value.split(",")
    if with_proxy_vars:
        set_pod_env(monkeypatch, UNUSED_PROXY, value)
    else:  # a workload that never uses the proxy still crashes: httpx parses NO_PROXY regardless
        monkeypatch.setenv("NO_PROXY", value)
        monkeypatch.setenv("no_proxy", value)
    with pytest.raises(httpx.InvalidURL):
        httpx.Client()
    with pytest.raises(httpx.InvalidURL):
        httpx.AsyncClient()


def test_httpx_trust_env_false_avoids_the_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workaround the compat_notes warning gives."""
    set_pod_env(monkeypatch, UNUSED_PROXY, str(ipv6_example().no_proxy()))
    with httpx.Client(trust_env=False) as c:
        assert c._transport_for_url(httpx.URL("http://github.com/")) is c._transport


def test_httpx_accepts_ipv6_example_without_ipv6_cidrs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other workaround: a NO_PROXY without the IPv6 CIDRs; its bare IPv6 address is then honoured."""
    no_proxy = without_ipv6_cidrs(ipv6_example().no_proxy())
    value = str(no_proxy)
    assert not has_ipv6_cidr(no_proxy)
    assert "fd00:10:96::1" in value.split(",")
    set_pod_env(monkeypatch, UNUSED_PROXY, value)
    httpx.Client().close()
    httpx_ = next(p for p in PYTHON_CLIENTS if p.name == "Python httpx")
    for name in IPV6_EXAMPLE_NAMES:
        assert httpx_.bypasses(name, value), name
    assert httpx_.bypasses("registry.corp.example", value) is False
    assert httpx_.bypasses("fd00:10:96::1", value) is matches_bare_ipv6(httpx_.name, no_proxy)
    assert httpx_.bypasses("fd00:10:244::5", value) is False
    assert httpx_.bypasses(PROXIED_NAME, value) is False


@pytest.mark.parametrize(("entry", "raises"), [("::1", False), ("[::1]", True), ("fd00:10:96::1", False)])
def test_httpx_bare_ipv6_is_safe_and_bracketed_is_not(
    entry: str, raises: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_pod_env(monkeypatch, UNUSED_PROXY, entry)
    if raises:
        with pytest.raises(httpx.InvalidURL):
            httpx.Client()
    else:
        with httpx.Client() as c:
            host = entry.strip("[]")
            assert c._transport_for_url(httpx.URL(f"http://[{host}]/")) is c._transport


def test_project_renders_bracketed_ipv6_bare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why: `[::1]` is what urllib would match, but it crashes httpx; the project writes `::1`."""
    assert str(compose([Source("[::1]", Category.USER, "test")])) == "::1"
    set_pod_env(monkeypatch, UNUSED_PROXY, "[::1]")
    urllib_ = next(p for p in PYTHON_CLIENTS if p.name == "Python urllib")
    assert urllib_.bypasses("::1", "[::1]") is True  # bracketed: urllib would match...
    set_pod_env(monkeypatch, UNUSED_PROXY, "::1")
    assert urllib_.bypasses("::1", "::1") is False  # ...bare: it does not (the documented trade-off)


# --- 4. compat_notes warns exactly when httpx would crash --------------------------------------


def _dual_stack() -> NoProxy:
    data = {
        **REALISTIC,
        "cluster": {
            **REALISTIC["cluster"],
            "podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
            "serviceCidrs": ["10.96.0.0/12", "fd00:10:96::/108"],
        },
    }
    return parse_settings(data).no_proxy()


NOTE_CASES: dict[str, Callable[[], NoProxy]] = {
    "ipv4": lambda: realistic().no_proxy(),
    "ipv6-example": lambda: ipv6_example().no_proxy(),
    "ipv6-example-without-v6-cidrs": lambda: without_ipv6_cidrs(ipv6_example().no_proxy()),
    "dual-stack": _dual_stack,
    "ipv6-address-only": lambda: compose([*loopback_sources(), Source("fd00:10:96::1", Category.API_SERVER, "t")]),
}


@pytest.mark.parametrize("case", list(NOTE_CASES))
def test_compat_warning_iff_ipv6_cidr_iff_httpx_raises(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    no_proxy = NOTE_CASES[case]()
    warnings = [n for n in compat_notes(no_proxy) if n.severity == "warning"]
    set_pod_env(monkeypatch, UNUSED_PROXY, str(no_proxy))
    try:
        httpx.Client().close()
        raised = False
    except httpx.InvalidURL:
        raised = True
    assert bool(warnings) is has_ipv6_cidr(no_proxy) is raised, f"{case}: warnings={warnings}, httpx raised={raised}"
    assert len(warnings) <= 1
    if warnings:
        text = warnings[0].text
        assert "Python httpx" in text
        assert "InvalidURL" in text
        v6_cidrs = [str(n) for n in no_proxy.networks() if n.version == 6 and n.prefixlen < n.max_prefixlen]
        assert v6_cidrs
        assert all(cidr in text for cidr in v6_cidrs), text


# --- 3. real traffic on loopback: curl and the Python clients ----------------------------------


@pytest.fixture(scope="module")
def curl() -> Curl:
    return find_curl()


@pytest.fixture(scope="module")
def proxy() -> Iterator[LoopbackServer]:
    with loopback_server("127.0.0.1", "PROXY") as server:
        yield server


@pytest.fixture(scope="module")
def origin() -> Iterator[LoopbackServer]:
    with loopback_server("127.0.0.1", "ORIGIN") as server:
        yield server


@pytest.fixture(scope="module")
def cidr_origin() -> Iterator[LoopbackServer]:
    with loopback_server(CIDR_LOOPBACK, "ORIGIN") as server:
        yield server


@pytest.fixture(scope="module")
def origin6() -> Iterator[LoopbackServer]:
    with loopback_server("::1", "ORIGIN") as server:
        yield server


def _assert_route(
    body: str, host: str, path: str, origin: LoopbackServer, proxy: LoopbackServer, direct: bool, who: str
) -> None:
    """`direct`: the origin served `path` and the proxy never saw it; else the proxy got the absolute-form GET."""
    authority = f"[{host}]:{origin.port}" if ":" in host else f"{host}:{origin.port}"
    if direct:
        assert body == f"ORIGIN GET {path} HTTP/1.1", f"{who}: {host} should bypass the proxy, got {body!r}"
        assert len(origin.hits_for(path)) == 1
        assert proxy.hits_for(path) == []
    else:
        assert body == f"PROXY GET http://{authority}{path} HTTP/1.1", (
            f"{who}: {host} should use the proxy, got {body!r}"
        )
        assert [h.host for h in proxy.hits_for(path)] == [authority]
        assert origin.hits_for(path) == []


def test_curl_version(curl: Curl) -> None:
    """The reference table describes curl 7.88; the behaviour tests below hold for the version found here."""
    major, minor, _patch = (int(p) for p in curl.version.split("."))
    assert (major, minor) >= (7, 86), f"curl {curl.version} predates CIDR support in NO_PROXY (7.86, curl/curl#9775)"


CURL_V4_DIRECT = ("api.k8s.internal", "kubernetes.default.svc", "registry.corp.example", *BYPASSED_NAMES)


@pytest.mark.parametrize("name", [*dict.fromkeys(CURL_V4_DIRECT), PROXIED_NAME])
def test_curl_routes_names(name: str, curl: Curl, origin: LoopbackServer, proxy: LoopbackServer) -> None:
    value = str(realistic().no_proxy())
    path = probe_path()
    body = curl.get(
        f"http://{name}:{origin.port}{path}",
        env=pod_env(proxy.url, value),
        resolve=(f"{name}:{origin.port}:127.0.0.1",),
    )
    _assert_route(body, name, path, origin, proxy, direct=name != PROXIED_NAME, who=f"curl {curl.version}")


def test_curl_direct_to_loopback_ip(curl: Curl, origin: LoopbackServer, proxy: LoopbackServer) -> None:
    path = probe_path()
    body = curl.get(f"{origin.url}{path}", env=pod_env(proxy.url, str(realistic().no_proxy())))
    _assert_route(body, "127.0.0.1", path, origin, proxy, direct=True, who=f"curl {curl.version}")


def test_curl_ipv4_cidr_matches_table(curl: Curl, cidr_origin: LoopbackServer, proxy: LoopbackServer) -> None:
    path = probe_path()
    body = curl.get(f"{cidr_origin.url}{path}", env=pod_env(proxy.url, str(_v4_with_cidr_stand_in())))
    direct = client("curl / git").cidr_v4
    _assert_route(body, CIDR_LOOPBACK, path, cidr_origin, proxy, direct=direct, who=f"curl {curl.version}")


def test_curl_bare_ipv6_matches_note(curl: Curl, origin6: LoopbackServer, proxy: LoopbackServer) -> None:
    no_proxy = realistic().no_proxy()
    path = probe_path()
    body = curl.get(f"{origin6.url}{path}", env=pod_env(proxy.url, str(no_proxy)))
    direct = matches_bare_ipv6("curl", no_proxy)
    _assert_route(body, "::1", path, origin6, proxy, direct=direct, who=f"curl {curl.version}")


def test_curl_ipv6_cidr_matches_table(curl: Curl, origin6: LoopbackServer, proxy: LoopbackServer) -> None:
    path = probe_path()
    body = curl.get(f"{origin6.url}{path}", env=pod_env(proxy.url, str(_v6_with_cidr_stand_in())))
    direct = client("curl / git").cidr_v6
    _assert_route(body, "::1", path, origin6, proxy, direct=direct, who=f"curl {curl.version}")


@pytest.mark.parametrize("name", ["api.k8s.internal", "kubernetes.default.svc", PROXIED_NAME])
def test_curl_with_ipv6_example(name: str, curl: Curl, origin: LoopbackServer, proxy: LoopbackServer) -> None:
    """curl is not disturbed by fd00::/8 (unlike httpx) and still routes names by the rest of the list."""
    path = probe_path()
    body = curl.get(
        f"http://{name}:{origin.port}{path}",
        env=pod_env(proxy.url, str(ipv6_example().no_proxy())),
        resolve=(f"{name}:{origin.port}:127.0.0.1",),
    )
    _assert_route(body, name, path, origin, proxy, direct=name != PROXIED_NAME, who=f"curl {curl.version}")


def test_curl_undotted_suffix_token_covers_subdomains(
    curl: Curl, origin: LoopbackServer, proxy: LoopbackServer
) -> None:
    path = probe_path()
    name = "api.k8s.internal"
    body = curl.get(
        f"http://{name}:{origin.port}{path}",
        env=pod_env(proxy.url, "k8s.internal"),
        resolve=(f"{name}:{origin.port}:127.0.0.1",),
    )
    _assert_route(body, name, path, origin, proxy, direct=client("curl / git").suffix_form, who="curl")


def _e2e_expectation(py: PythonClient, host: str) -> bool:
    if host == CIDR_LOOPBACK:
        return py.row.cidr_v4
    if host == "::1":
        return matches_bare_ipv6(py.name, realistic().no_proxy())
    return host != PROXIED_NAME


E2E_HOSTS = (*BYPASSED_NAMES, PROXIED_NAME, "127.0.0.1", CIDR_LOOPBACK, "::1")


@pytest.mark.parametrize("py", PYTHON_CLIENTS, ids=_id)
@pytest.mark.parametrize("host", E2E_HOSTS)
def test_python_client_real_request(
    py: PythonClient,
    host: str,
    monkeypatch: pytest.MonkeyPatch,
    origin: LoopbackServer,
    cidr_origin: LoopbackServer,
    origin6: LoopbackServer,
    proxy: LoopbackServer,
) -> None:
    """A real GET through each client, every name pinned to 127.0.0.1 by a resolver that refuses anything else."""
    target = {CIDR_LOOPBACK: cidr_origin, "::1": origin6}.get(host, origin)
    set_pod_env(monkeypatch, proxy.url, str(_v4_with_cidr_stand_in()))
    names = {name: "127.0.0.1" for name in (*BYPASSED_NAMES, PROXIED_NAME)}
    monkeypatch.setattr(socket, "getaddrinfo", loopback_getaddrinfo(names))
    path = probe_path()
    authority = f"[{host}]:{target.port}" if ":" in host else f"{host}:{target.port}"
    body = py.fetch(f"http://{authority}{path}")
    _assert_route(body, host, path, target, proxy, direct=_e2e_expectation(py, host), who=py.name)
