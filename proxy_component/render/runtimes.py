"""Renderings for runtimes that one NO_PROXY string cannot serve.

- Python: httpx raises ``InvalidURL`` when a client is created with an IPv6 CIDR
  in NO_PROXY, and no Python client matches IPv6 CIDRs anyway, so
  `python_no_proxy` is the list without them (`NO_PROXY_PYTHON` in proxy-config).
- Java ignores the ``*_proxy`` variables: `java_options` gives the JVM the
  proxy as system properties, with ``http.nonProxyHosts`` (``|``-separated,
  ``*`` only at the start or end, no CIDRs and no ports). An IPv4 CIDR becomes
  the octet-aligned prefixes that cover it exactly (``10.96.*``); what Java
  cannot express is returned in `JavaOptions.uncovered`. The value goes into
  ``JDK_JAVA_OPTIONS``, which the ``java`` launcher (JDK 9 and later) reads
  beside ``JAVA_TOOL_OPTIONS``: a workload's own ``JAVA_TOOL_OPTIONS`` (an APM
  agent, heap flags) is never written, so no consumer can replace it. It is
  not rendered when the proxy needs credentials or is an ``https://`` URL
  (`JavaOptions.skipped` says why).
- Node >= 24 reads the variables only with ``NODE_USE_ENV_PROXY=1``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..noproxy import Entry, Kind, NoProxy
from ..settings import redact_url

__all__ = [
    "JDK_JAVA_OPTIONS",
    "NODE_USE_ENV_PROXY",
    "NO_PROXY_PYTHON",
    "JavaOptions",
    "java_non_proxy_hosts",
    "java_options",
    "java_skip_reason",
    "python_no_proxy",
]

JDK_JAVA_OPTIONS = "JDK_JAVA_OPTIONS"
NODE_USE_ENV_PROXY = "NODE_USE_ENV_PROXY"
NO_PROXY_PYTHON = "NO_PROXY_PYTHON"

_MAX_PREFIXES = 64  # octet-aligned patterns per IPv4 CIDR before Java is said not to cover it


def python_no_proxy(no_proxy: NoProxy) -> str:
    """NO_PROXY without IPv6 CIDRs: what every Python client can be created with (httpx raises on them)."""
    kept = tuple(e for e in no_proxy.entries if not (e.kind is Kind.CIDR and ":" in e.value))
    return str(NoProxy(kept))


@dataclass(frozen=True)
class JavaOptions:
    """The JDK_JAVA_OPTIONS value (None when `skipped` says why not) and the entries Java cannot express."""

    value: str | None
    uncovered: tuple[str, ...]
    skipped: str = ""


def _ipv4_prefixes(network: ipaddress.IPv4Network) -> list[str] | None:
    """`10.96.*`-style patterns that match exactly the addresses of `network`, or None when too many."""
    if network.prefixlen == 32:
        return [str(network.network_address)]
    aligned = min(32, -(-network.prefixlen // 8) * 8) if network.prefixlen else 8
    count = 2 ** (aligned - network.prefixlen)
    if count > _MAX_PREFIXES:
        return None
    octets = aligned // 8
    out = []
    for subnet in network.subnets(new_prefix=aligned) if aligned != network.prefixlen else [network]:
        head = ".".join(str(subnet.network_address).split(".")[:octets])
        out.append(f"{head}.*" if octets < 4 else head)
    return out


def java_non_proxy_hosts(no_proxy: NoProxy) -> tuple[list[str], list[str]]:
    """The `http.nonProxyHosts` patterns for the composed entries, and what Java cannot express."""
    patterns: list[str] = []
    uncovered: list[str] = []

    def token(entry: Entry) -> str:
        return entry.tokens()[0]

    for entry in no_proxy.entries:
        if entry.port is not None:
            uncovered.append(f"{token(entry)}: Java's nonProxyHosts has no ports")
            continue
        if entry.kind is Kind.WILDCARD:
            patterns.append("*")
        elif entry.kind is Kind.SUFFIX:
            patterns += [entry.value, f"*.{entry.value}"]
        elif entry.kind is Kind.HOST:
            patterns.append(entry.value)
        elif entry.kind is Kind.IP:
            patterns.append(f"[{entry.value}]" if ":" in entry.value else entry.value)
        else:
            network = ipaddress.ip_network(entry.value)
            prefixes = _ipv4_prefixes(network) if isinstance(network, ipaddress.IPv4Network) else None
            if prefixes is None:
                why = "IPv6 ranges" if network.version == 6 else f"a range that needs over {_MAX_PREFIXES} patterns"
                uncovered.append(f"{entry.value}: Java's nonProxyHosts has no CIDRs, nor {why} as prefixes")
            else:
                patterns += prefixes
    return list(dict.fromkeys(patterns)), uncovered


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    return parts.hostname or "", parts.port or default


def java_skip_reason(http_proxy: str, https_proxy: str) -> str:
    """Why the JVM cannot be given these proxy URLs as system properties, or "" when it can."""
    for url in (http_proxy, https_proxy):
        parts = urlsplit(url)
        if parts.username is not None:
            return (
                "the proxy needs credentials, which the JVM takes from no system property (it would get 407 Proxy "
                "Authentication Required, and the JDK disables Basic authentication for HTTPS tunnels): give JVMs a "
                "proxy without credentials, e.g. the in-cluster tinyproxy with proxy.upstream holding them"
            )
        if parts.scheme == "https":
            return (
                f"the proxy URL {redact_url(url)} is https://, and the JVM speaks plain HTTP to a proxy (it would send "
                "plain requests to port 443): give JVMs an http:// proxy"
            )
    return ""


def java_options(http_proxy: str, https_proxy: str, no_proxy: NoProxy) -> JavaOptions:
    """JDK_JAVA_OPTIONS for a JVM: proxy host and port per scheme, and nonProxyHosts from the composed entries.

    Not rendered (value None) when the proxy needs credentials or speaks TLS: see `java_skip_reason`.
    """
    patterns, uncovered = java_non_proxy_hosts(no_proxy)
    skipped = java_skip_reason(http_proxy, https_proxy)
    if skipped:
        return JavaOptions(None, tuple(uncovered), skipped)
    http_host, http_port = _host_port(http_proxy)
    https_host, https_port = _host_port(https_proxy)
    words = [
        f"-Dhttp.proxyHost={http_host}",
        f"-Dhttp.proxyPort={http_port}",
        f"-Dhttps.proxyHost={https_host}",
        f"-Dhttps.proxyPort={https_port}",
        f"-Dhttp.nonProxyHosts={'|'.join(patterns)}",
    ]
    return JavaOptions(" ".join(words), tuple(uncovered))
