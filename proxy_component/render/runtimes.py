"""Renderings for runtimes that one NO_PROXY string cannot serve.

- Python: httpx raises ``InvalidURL`` when a client is created with an IPv6 CIDR
  in NO_PROXY, and no Python client matches IPv6 CIDRs anyway, so
  `python_no_proxy` is the list without them (`NO_PROXY_PYTHON` in proxy-config).
- Java ignores the ``*_proxy`` variables: `java_tool_options` gives the JVM the
  proxy as system properties, with ``http.nonProxyHosts`` (``|``-separated,
  ``*`` only at the start or end, no CIDRs and no ports). An IPv4 CIDR becomes
  the octet-aligned prefixes that cover it exactly (``10.96.*``); what Java
  cannot express is returned in `JavaOptions.uncovered`.
- Node >= 24 reads the variables only with ``NODE_USE_ENV_PROXY=1``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..noproxy import Entry, Kind, NoProxy

__all__ = [
    "JAVA_TOOL_OPTIONS",
    "NODE_USE_ENV_PROXY",
    "NO_PROXY_PYTHON",
    "JavaOptions",
    "java_non_proxy_hosts",
    "java_tool_options",
    "python_no_proxy",
]

JAVA_TOOL_OPTIONS = "JAVA_TOOL_OPTIONS"
NODE_USE_ENV_PROXY = "NODE_USE_ENV_PROXY"
NO_PROXY_PYTHON = "NO_PROXY_PYTHON"

_MAX_PREFIXES = 64  # octet-aligned patterns per IPv4 CIDR before Java is said not to cover it


def python_no_proxy(no_proxy: NoProxy) -> str:
    """NO_PROXY without IPv6 CIDRs: what every Python client can be created with (httpx raises on them)."""
    kept = tuple(e for e in no_proxy.entries if not (e.kind is Kind.CIDR and ":" in e.value))
    return str(NoProxy(kept))


@dataclass(frozen=True)
class JavaOptions:
    """The JAVA_TOOL_OPTIONS value and the NO_PROXY entries Java cannot express, each with why."""

    value: str
    uncovered: tuple[str, ...]


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


def java_tool_options(http_proxy: str, https_proxy: str, no_proxy: NoProxy) -> JavaOptions:
    """JAVA_TOOL_OPTIONS for a JVM: proxy host and port per scheme, and nonProxyHosts from the composed entries.

    Credentials in the URLs are not passed: the JVM takes none from system properties.
    """
    http_host, http_port = _host_port(http_proxy)
    https_host, https_port = _host_port(https_proxy)
    patterns, uncovered = java_non_proxy_hosts(no_proxy)
    words = [
        f"-Dhttp.proxyHost={http_host}",
        f"-Dhttp.proxyPort={http_port}",
        f"-Dhttps.proxyHost={https_host}",
        f"-Dhttps.proxyPort={https_port}",
        f"-Dhttp.nonProxyHosts={'|'.join(patterns)}",
    ]
    return JavaOptions(" ".join(words), tuple(uncovered))
