"""Asks one Python HTTP client which proxy it would use for each URL, with this process's environment.

    python decide_py.py CLIENT URL...      CLIENT: python-urllib, python-requests, python-httpx, python-aiohttp

Each client's own code path, as it runs when it sends a request with the environment trusted; no traffic.
Prints one JSON object: {"version": ..., "decisions": {url: {"decision": "proxy"|"bypass"|"error", "detail": ...}}}.
Run by the harness in a fresh process with exactly the environment under test (these clients read os.environ).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable


def _urllib(url: str) -> tuple[str, str]:
    import urllib.request

    # What urllib.request.urlopen does: a ProxyHandler built from getproxies(); its <scheme>_open handler
    # calls proxy_open, which returns early (no proxy) when proxy_bypass(req.host) says so.
    handler = urllib.request.ProxyHandler()
    proxies: dict[str, str] = handler.proxies  # type: ignore[attr-defined]
    req = urllib.request.Request(url)
    if req.type not in proxies:
        return "bypass", f"no {req.type} proxy in {sorted(proxies)}"
    proxy = proxies[req.type]
    urllib.request._parse_proxy(proxy)  # type: ignore[attr-defined]  # raises on a proxy it cannot use
    if req.host and urllib.request.proxy_bypass(req.host):
        return "bypass", f"proxy_bypass({req.host!r})"
    return "proxy", proxy


def _requests(url: str) -> tuple[str, str]:
    import requests

    # What Session.request does: merge_environment_settings (get_environ_proxies, should_bypass_proxies),
    # then the adapter picks the connection (select_proxy, a ProxyManager for a proxy): no connection is opened.
    session = requests.Session()
    prepared = session.prepare_request(requests.Request("GET", url))
    full = prepared.url or url
    settings = session.merge_environment_settings(full, {}, None, None, None)
    proxies = settings["proxies"]
    adapter = session.get_adapter(full)
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    proxy = requests.utils.select_proxy(full, proxies)
    conn = adapter.get_connection_with_tls_context(prepared, settings["verify"], proxies, settings["cert"])
    if getattr(conn, "proxy", None) is not None:
        return "proxy", str(proxy)
    return "bypass", f"proxies={proxies}"


_HTTPX_CLIENT: object | None = None


def _httpx(url: str) -> tuple[str, str]:
    import httpx

    global _HTTPX_CLIENT
    if _HTTPX_CLIENT is None:
        _HTTPX_CLIENT = httpx.Client()  # trust_env: mounts a proxy transport per *_PROXY, None per NO_PROXY entry
    client: httpx.Client = _HTTPX_CLIENT  # type: ignore[assignment]
    transport = client._transport_for_url(httpx.URL(url))
    if transport is client._transport:
        return "bypass", "default transport"
    pool = getattr(transport, "_pool", None)
    return "proxy", f"{type(pool).__name__} {getattr(pool, '_proxy_url', '')}"


def _aiohttp(url: str) -> tuple[str, str]:
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, _auth = get_env_proxy_for_url(URL(url))
    except LookupError as exc:
        return "bypass", str(exc)
    return "proxy", str(proxy)


def _version(client: str) -> str:
    if client == "python-urllib":
        return f"python {sys.version.split()[0]} urllib.request"
    module = __import__(client.removeprefix("python-"))
    return f"{client.removeprefix('python-')} {module.__version__} (python {sys.version.split()[0]})"


CLIENTS: dict[str, Callable[[str], tuple[str, str]]] = {
    "python-urllib": _urllib,
    "python-requests": _requests,
    "python-httpx": _httpx,
    "python-aiohttp": _aiohttp,
}


def main(argv: list[str]) -> int:
    client, urls = argv[0], argv[1:]
    decide = CLIENTS[client]
    decisions: dict[str, dict[str, str]] = {}
    for url in urls:
        try:
            decision, detail = decide(url)
        except Exception as exc:  # the client refuses this configuration: that is its answer
            decision, detail = "error", f"{type(exc).__name__}: {exc}"
        decisions[url] = {"decision": decision, "detail": detail}
    print(json.dumps({"version": _version(client), "decisions": decisions}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
