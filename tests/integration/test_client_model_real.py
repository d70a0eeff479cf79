"""The client model against the real clients, for every example configuration.

For each example (the two YAML examples and the clusters the stack-per-cluster
examples discover), the environment workloads get (`explain.workload_env`: both
spellings, with the java and node runtimes: NODE_USE_ENV_PROXY, JDK_JAVA_OPTIONS) is handed to the 16 real
clients of `tests/integration/real_clients` (curl, wget, Python urllib, requests,
httpx, aiohttp, Go, Ruby, proxy-from-env 1 and 2, undici 7 and 8, npm's agent,
Node 24 http and fetch, Java's ProxySelector) on the representative destinations
plus extra ones, and every real decision must be the model's. The same holds for
Python clients given NO_PROXY_PYTHON. No traffic leaves loopback: decision
functions where a client has one, else a network namespace with only `lo`.
"""

from __future__ import annotations

import pytest

from proxy_component.clients import CLIENT_IDS
from proxy_component.explain import destinations, evaluate, workload_env
from proxy_component.render.runtimes import NO_PROXY_PYTHON
from proxy_component.settings import NetworkValues, Settings
from tests.examples import EXAMPLES, EXTRA_URLS, example
from tests.integration.real_clients import REAL_CLIENTS, decide_many
from tests.integration.real_clients.compare import mismatches


def _urls(settings: Settings, network: NetworkValues | None) -> list[str]:
    no_proxy = settings.no_proxy(network)
    return list(dict.fromkeys([d.url for d in destinations(settings, no_proxy)] + list(EXTRA_URLS)))


def test_the_real_clients_are_the_modelled_ones() -> None:
    assert set(REAL_CLIENTS) == set(CLIENT_IDS) - {"git", "apt"}
    assert len(REAL_CLIENTS) == 16


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_model_predicts_every_real_decision(name: str) -> None:
    settings, network = example(name)
    no_proxy = settings.no_proxy(network)
    env = workload_env(settings, no_proxy, {"java", "node"})
    urls = _urls(settings, network)
    differ = mismatches(env, urls, REAL_CLIENTS)
    assert not differ, f"{name}: NO_PROXY={no_proxy}\n" + "\n".join(differ)


@pytest.mark.parametrize("name", EXAMPLES)
def test_python_clients_with_no_proxy_python(name: str) -> None:
    """NO_PROXY_PYTHON in both spellings: no Python client errors, and the model still predicts each decision."""
    settings, network = example(name)
    no_proxy = settings.no_proxy(network)
    python = workload_env(settings, no_proxy, {"python"})
    python_value = next(v for k, v in _proxy_config(settings, network).items() if k == NO_PROXY_PYTHON)
    assert python["NO_PROXY"] == python["no_proxy"] == python_value
    pythons = tuple(c for c in REAL_CLIENTS if c.startswith("python-"))
    urls = _urls(settings, network)
    real = decide_many(python, urls, pythons)
    assert not [(c, u) for c in pythons for u in urls if real[c][u] == "error"]
    assert not mismatches(python, urls, pythons)


def _proxy_config(settings: Settings, network: NetworkValues | None) -> dict[str, str]:
    from proxy_component.render import plain_values
    from proxy_component.render.env import proxy_config_object

    obj = proxy_config_object(settings, "default", plain_values(settings, network))
    data: dict[str, str] = obj.get("data") or obj["stringData"]
    return data


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_cell_that_misses_its_intent_is_explained(name: str) -> None:
    """After composition and renderings: a client does what is intended, or its cell carries a warning."""
    settings, network = example(name)
    no_proxy = settings.no_proxy(network)
    cells = evaluate(settings, no_proxy)
    assert cells
    for cell in cells:
        assert (cell.warning == "") == (cell.decision == cell.intended), cell
    # The external host goes through the proxy for every client, but those that need a runtime nothing selects
    # by default (the JVM, Node 24's http and fetch), whose cells say how to select it.
    external = [c for c in cells if c.url == "http://github.com/"]
    needs_runtime = {"java", "node-http", "node-fetch"}
    assert {c.decision for c in external if c.client not in needs_runtime} == {"proxy"}
    assert all("select the" in c.warning for c in external if c.client in needs_runtime)


@pytest.mark.parametrize("name", ["corporate-proxy", "eks-prod", "gke-prod", "aks-prod"])
def test_a_real_jvm_with_the_rendered_jdk_java_options_does_what_is_intended(name: str) -> None:
    """IPv4 clusters: the JVM, configured only by JDK_JAVA_OPTIONS, bypasses every in-cluster destination it
    can be told about (names, the octet prefixes of the IPv4 CIDRs) and proxies the external hosts."""
    from proxy_component.explain import intent

    settings, network = example(name)
    no_proxy = settings.no_proxy(network)
    env = workload_env(settings, no_proxy, {"java"})
    assert "-Dhttp.nonProxyHosts=" in env["JDK_JAVA_OPTIONS"]
    assert "JAVA_TOOL_OPTIONS" not in env
    short = {"http://my-svc/", *(f"http://my-svc.{ns}/" for ns in ("default", *settings.namespaces))}
    urls = [u for u in _urls(settings, network) if u not in short]
    real = decide_many(env, urls, ("java",))["java"]
    wrong = {u: real[u] for u in urls if real[u] != intent(settings, no_proxy, u)}
    assert not wrong, wrong
    assert real["http://github.com/"] == "proxy"
    assert real[f"http://my-svc.{settings.namespaces[0]}.svc/"] == "bypass"


# What the clients' own test suites showed the model lacked (tests/fixtures/client_suites), on the real clients:
# ALL_PROXY, npm_config_*, CGI, trailing dots, punycode, port 0, undici's https fallback, aiohttp's https:// proxy.
# Port 0 is left to the decision-function clients: a traffic-based client cannot connect to port 0 at all.
_P = "http://proxy.example:3128"
_SUITE_FIXES: list[tuple[dict[str, str], list[str], list[str]]] = [
    (
        {"http_proxy": _P, "no_proxy": "*.example"},
        ["http://example/", "http://sub.example/"],
        ["node-undici", "node-undici-7"],
    ),
    (
        {"http_proxy": _P, "https_proxy": "", "NODE_USE_ENV_PROXY": "1"},
        ["https://example.com/"],
        ["node-undici", "node-undici-7", "node-fetch", "node-http"],
    ),
    (
        {"ALL_PROXY": _P},
        ["http://example.com/", "https://example.com/"],
        [
            "node-proxy-from-env",
            "node-proxy-from-env-1",
            "python-requests",
            "python-httpx",
            "curl",
            "python-urllib",
            "go",
        ],
    ),
    ({"all_proxy": _P, "https_proxy": ""}, ["https://example.com/"], ["python-requests", "python-httpx", "curl"]),
    ({"npm_config_http_proxy": _P}, ["http://example.com/"], ["node-proxy-from-env-1", "node-proxy-from-env", "npm"]),
    (
        {"HTTP_PROXY": _P, "NO_PROXY": "otherwebsite", "npm_config_no_proxy": "example"},
        ["http://example/", "http://otherwebsite/"],
        ["node-proxy-from-env-1", "node-proxy-from-env"],
    ),
    (
        {"HTTP_PROXY": _P, "NO_PROXY": "example:80"},
        ["http://example:0/"],
        ["node-proxy-from-env-1", "node-proxy-from-env"],
    ),
    (
        {"HTTP_PROXY": _P, "REQUEST_METHOD": "GET"},
        ["http://example.com/"],
        ["go", "python-urllib", "python-requests", "python-httpx", "python-aiohttp", "ruby"],
    ),
    ({"CGI_HTTP_PROXY": _P, "REQUEST_METHOD": "GET"}, ["http://example.com/"], ["ruby"]),
    ({"https_proxy": "https://proxy.example:3128"}, ["https://example.com/"], ["python-aiohttp"]),
    ({"HTTP_PROXY": _P, "NO_PROXY": ".示例.com"}, ["http://www.示例.com/"], ["go"]),
    (
        {"http_proxy": _P, "no_proxy": "example.com"},
        ["http://www.example.com./", "http://example.com./"],
        ["curl", "node-undici", "python-requests"],
    ),
    ({"http_proxy": _P, "no_proxy": "example.com."}, ["http://www.example.com/"], ["curl", "node-undici"]),
    # A fully qualified in-cluster name with its root dot, without and with the dotted entries (explain's advice).
    *(
        (
            {"http_proxy": _P, "HTTP_PROXY": _P, "no_proxy": v, "NO_PROXY": v, "NODE_USE_ENV_PROXY": "1"},
            ["http://kubernetes.default.svc.cluster.local./"],
            list(REAL_CLIENTS),
        )
        for v in ("cluster.local", "cluster.local,.cluster.local,cluster.local.,.cluster.local.")
    ),
]


@pytest.mark.parametrize(("env", "urls", "clients"), _SUITE_FIXES, ids=[str(sorted(e)) for e, _, _ in _SUITE_FIXES])
def test_the_client_suite_fixes_agree_with_the_real_clients(
    env: dict[str, str], urls: list[str], clients: list[str]
) -> None:
    from proxy_component.clients import decide

    real = decide_many(env, urls, tuple(clients))
    differ = [(c, u, real[c][u], decide(c, env, u)) for c in clients for u in urls if real[c][u] != decide(c, env, u)]
    assert not differ, differ
