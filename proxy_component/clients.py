"""How each HTTP client reads the proxy variables: a decision model, one row per client.

Given a workload's environment and a URL, `decide` says what one client does:
``bypass`` (connects directly), ``proxy`` (sends the request to the proxy) or
``error`` (refuses to work with this configuration). Each client is a row of
`Client` data: the variable spellings it reads and which one wins, its
separators, how it writes an IPv6 host, and how an entry matches (``*``,
leading dots, ``*.``, exact or subdomain names, CIDRs, ports). The few
clients whose rules are not a combination of those (requests, httpx, Ruby,
npm, Java) name a small matcher instead. Adding a client adds a row.

The rows record what the real clients did (tests/integration/test_client_model_real.py
runs them all against this model; docs/client-probe.md has the probe) and what
each client's own test suite expects (tests/fixtures/client_suites, run by
tests/unit/test_client_suites.py); the sources are named in
shared/reference/no-proxy-clients.md. This module is pure.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlsplit

__all__ = [
    "CLIENTS",
    "CLIENT_IDS",
    "TRUST",
    "Client",
    "Decision",
    "Target",
    "Trust",
    "client",
    "decide",
    "java_properties",
    "matched_entry",
    "workload_variables",
]

Decision = Literal["bypass", "proxy", "error"]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Target:
    """A URL as clients see it: scheme, lower-case host (IPv6 without brackets), effective port."""

    url: str
    scheme: str
    host: str
    port: int
    explicit_port: bool
    ip: IPAddress | None

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"--url: {url!r} is not an http:// or https:// URL with a host (expected e.g. http://my-svc.my-ns/)"
            )
        try:
            explicit = parts.port
        except ValueError:
            raise ValueError(f"--url: {url!r} has a port that is not a number from 0 to 65535") from None
        host = parts.hostname.lower()
        try:
            ip: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        port = explicit if explicit is not None else (443 if scheme == "https" else 80)
        return cls(url=url, scheme=scheme, host=host, port=port, explicit_port=explicit is not None, ip=ip)

    def host_as(self, form: str) -> str:
        """The host as a client writes it: IPv6 literals bare (``fd00::1``) or bracketed (``[fd00::1]``)."""
        if form == "bracketed" and self.ip is not None and self.ip.version == 6:
            return f"[{self.host}]"
        return self.host


Matcher = Callable[["Client", str, Target], bool]


@dataclass(frozen=True)
class Client:
    """One client's reading of the proxy variables.

    - `no_proxy_vars`, `proxy_vars`: the spellings it reads, winner first; `pick`
      says when a later spelling is used: ``set`` (the first one present, even
      empty), ``nonempty`` (the first non-empty one) or ``environ`` (the one
      later in the environment, npm).
    - `separators`: a regex of what splits entries.
    - `wildcard`: ``*`` bypasses everything as the whole ``value`` only, as any
      ``entry``, or ``none``.
    - `names`: how an entry ``x`` matches: ``domain`` (``x`` and ``*.x``),
      ``exact`` (``x`` only) or ``raw`` (any name ending in ``x``, even ``notx``).
    - `leading_dot`: ``.x`` matches ``domain`` (``x`` and ``*.x``) or ``suffix`` (``*.x`` only).
    - `star_dot`: ``*.x`` means ``suffix`` (``*.x`` only), ``domain`` (``x`` and
      ``*.x``), ``strip`` (the ``*`` is dropped and the rest is a raw suffix) or
      ``none`` (no match).
    - `cidr`: the IP versions whose CIDRs it understands; `ip_entries`: an IP
      entry matches as an ``address`` or as ``text``.
    - `entry_port`: how ``host:port`` is split: ``last`` (``^(.+):(\\d+)$``, which
      also cuts ``fd00::1``), ``hostport`` (Go's SplitHostPort), ``unbracket``
      (``[v6]:port`` or a single ``host:port``, brackets dropped: undici 8) or ``none``;
      `ports`: the entry's port is compared with the URL's ``effective`` port,
      or the entry is compared with ``host:port`` when the URL is ``explicit``
      (``explicit-names``: only for host names, requests).
    - `names_on_ips`: whether an IP host is also matched as a name (``0.1``
      covering ``10.0.0.1``), or only by equal text, address or CIDR (curl, Go).
    - `ipv6_host`: whether it writes an IPv6 host ``bare`` or ``bracketed`` when matching.
    - `loopback`: ``go`` (localhost and loopback IPs never use the proxy),
      ``resolve`` (a name resolving to loopback does not, Ruby) or ``none``.
    - `requires`: variables that must have this value for the client to use the proxy at all.
    - `fallback_vars`: what a scheme falls back to, read the same way, when its own variables give no proxy
      (ALL_PROXY for requests and httpx; undici's https takes its http proxy); `fallback_when` ``unset``: only
      when none of the scheme's own variables is set, even empty (apt).
    - `cgi`: what the client does when it runs under CGI (REQUEST_METHOD set): ``error`` when the http proxy
      would be used (Go, REQUEST_METHOD non-empty), ``drop-upper`` (Python: HTTP_PROXY is not read),
      ``cgi-var`` (Ruby: http_proxy, else CGI_HTTP_PROXY) or ``none``.
    - `ignored_proxy_schemes`: proxy URLs with these schemes are dropped, as if unset (aiohttp: ``https``).
    - `proxy_schemes`: when set, a proxy URL with another scheme, or none, is an error (apt).
    - `trailing_dot`: a trailing dot on the host and on a name entry is ignored (curl, undici 8.12).
    - `idna`: names are compared in their punycode (IDNA) form (Go).
    - `port_zero`: a URL's port 0 is the scheme's default port (proxy-from-env, undici).
    - `matcher`: replaces the generic entry match where the rules above do not describe it.
    """

    id: str
    label: str
    observed: str
    no_proxy_vars: tuple[str, ...]
    proxy_vars: Mapping[str, tuple[str, ...]]
    pick: Literal["set", "nonempty", "environ"] = "set"
    separators: str = ","
    wildcard: Literal["value", "entry", "none"] = "value"
    names: Literal["domain", "exact", "raw"] = "domain"
    leading_dot: Literal["domain", "suffix"] = "domain"
    star_dot: Literal["suffix", "domain", "strip", "none"] = "none"
    cidr: frozenset[int] = frozenset()
    ip_entries: Literal["address", "text"] = "text"
    entry_port: Literal["last", "hostport", "unbracket", "none"] = "none"
    ports: Literal["effective", "explicit", "explicit-names", "none"] = "none"
    names_on_ips: bool = True
    ipv6_host: Literal["bare", "bracketed"] = "bare"
    loopback: Literal["go", "resolve", "none"] = "none"
    requires: tuple[tuple[str, str], ...] = ()
    fallback_vars: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fallback_when: Literal["empty", "unset"] = "empty"
    cgi: Literal["error", "drop-upper", "cgi-var", "none"] = "none"
    ignored_proxy_schemes: tuple[str, ...] = ()
    proxy_schemes: tuple[str, ...] = ()
    trailing_dot: bool = False
    idna: bool = False
    port_zero: bool = False
    raises: Callable[[str], str | None] | None = None
    tokens: Callable[[str], list[str]] | None = None
    matcher: Matcher | None = None
    decider: Callable[[Mapping[str, str], Target], Decision] | None = None

    def entries(self, value: str) -> list[str]:
        if self.tokens is not None:
            return self.tokens(value)
        return [e for e in re.split(self.separators, value) if e.strip()]


# --- the generic entry match ---------------------------------------------------------------------

_PORT_LAST = re.compile(r"^(.+):(\d+)$")


def _split_port(c: Client, entry: str) -> tuple[str, int | None]:
    if c.entry_port == "last":
        m = _PORT_LAST.match(entry)
        return (m.group(1), int(m.group(2))) if m else (entry, None)
    if c.entry_port == "unbracket":  # undici 8: [v6]:port, or host:port with one colon; brackets dropped
        m = re.match(r"^\[(.+)\]:(\d+)$", entry)
        if m:
            return m.group(1), int(m.group(2))
        bare = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
        m = _PORT_LAST.match(bare) if bare.count(":") == 1 else None
        return (m.group(1), int(m.group(2))) if m else (bare, None)
    if c.entry_port == "hostport":  # Go: net.SplitHostPort, then brackets dropped
        if entry.startswith("["):
            close = entry.find("]")
            if close > 0 and entry[close + 1 : close + 2] == ":" and entry[close + 2 :].isdigit():
                return entry[1:close], int(entry[close + 2 :])
            return entry, None
        if entry.count(":") == 1:
            host, _, port = entry.partition(":")
            return host, int(port) if port.isdigit() else -1
        return entry, None
    return entry, None


def _name_match(c: Client, entry: str, host: str) -> bool:
    if entry.startswith("*."):
        if c.star_dot == "domain":
            return host == entry[2:] or host.endswith(entry[1:])
        if c.star_dot in ("suffix", "strip"):
            return host.endswith(entry[1:])
        return host == entry
    if entry.startswith("*") and c.star_dot == "strip":
        return host.endswith(entry[1:])
    if entry.startswith("."):
        if c.leading_dot == "domain":
            bare = entry.lstrip(".")
            return host == bare or host.endswith("." + bare)
        return host.endswith(entry)
    if c.names == "exact":
        return host == entry
    if c.names == "raw":
        return host.endswith(entry)
    return host == entry or host.endswith("." + entry)


def _name_form(c: Client, name: str) -> str:
    """A name as `c` compares it: without a trailing dot (curl, undici 8.12), in punycode (Go)."""
    if c.trailing_dot and len(name) > 1 and name.endswith("."):
        name = name[:-1]
    if c.idna and not name.isascii():
        name = ".".join(_punycode(label) for label in name.split("."))
    return name


def _punycode(label: str) -> str:
    try:
        return label.encode("idna").decode("ascii") if label and not label.isascii() else label
    except UnicodeError:
        return label


def _generic(c: Client, raw: str, t: Target) -> bool:
    entry = raw.strip().lower()
    if entry == "*":
        return c.wildcard == "entry" or (c.star_dot == "strip" and c.wildcard != "none")
    host_part, port = _split_port(c, entry)
    if port is not None and c.ports == "effective" and port != t.port:
        return False
    if "/" in host_part and c.cidr:
        try:
            network = ipaddress.ip_network(host_part, strict=False)
        except ValueError:
            network = None
        if network is not None:
            return (
                network.version in c.cidr and t.ip is not None and t.ip.version == network.version and t.ip in network
            )
    if c.ip_entries == "address":
        try:
            address = ipaddress.ip_address(host_part)
        except ValueError:
            address = None
        if address is not None:
            return t.ip is not None and address == t.ip
    host = t.host_as(c.ipv6_host)
    if t.ip is not None and not c.names_on_ips:
        return host_part == host
    if t.ip is None:
        host, host_part = _name_form(c, host), _name_form(c, host_part)
    if c.ports == "explicit" or (c.ports == "explicit-names" and t.ip is None):
        candidates = [host, f"{host}:{t.port}"] if t.explicit_port else [host]
        return any(_name_match(c, host_part, h) for h in candidates)
    return _name_match(c, host_part, host)


# --- matchers for clients whose rules are their own ----------------------------------------------


def _httpx_raises(entry: str) -> str | None:
    """httpx turns each entry into a mount pattern when a client is created; these raise httpx.InvalidURL."""
    host = entry.split("/")[0]
    if "/" in entry and _is_v6(host):
        return f"{entry!r}: an IPv6 CIDR becomes the pattern all://[{entry}], which httpx refuses (InvalidURL)"
    if entry.startswith("["):
        return f"{entry!r}: a bracketed IPv6 address becomes all://*{entry}, which httpx refuses (InvalidURL)"
    return None


def _is_v6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _is_v4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _httpx(c: Client, raw: str, t: Target) -> bool:
    """httpx's get_environment_proxies: IPs (and IPv4 CIDRs, by their first address) exactly, names as *name."""
    entry = raw.strip()
    if "://" in entry:
        return False
    if _is_v4(entry.split("/")[0]):
        return t.host == entry.split("/")[0]
    if _is_v6(entry.split("/")[0]):
        return t.host == entry.split("/")[0]
    if entry.lower() == "localhost":
        return t.host == "localhost"
    host_part, _, port = entry.lower().partition(":")
    if port and (not t.explicit_port or str(t.port) != port):
        return False
    pattern = "*" + host_part
    if pattern.startswith("*."):
        return t.host.endswith(pattern[1:])
    if pattern.startswith("**"):
        return False
    domain = pattern[1:]
    return t.host == domain or t.host.endswith("." + domain)


_RUBY_SCAN = re.compile(r"([^:,\s]+)(?::(\d+))?")


def _ruby_tokens(value: str) -> list[str]:
    """Ruby scans NO_PROXY as [^:,\\s]+ with an optional :port, so an IPv6 entry falls apart at its colons."""
    return [f"{host}:{port}" if port else host for host, port in _RUBY_SCAN.findall(value)]


def _ruby(c: Client, raw: str, t: Target) -> bool:
    """URI::Generic.use_proxy?: a name suffix with a dot boundary, else an IPv4 address or CIDR holding the URL's IP."""
    host_part, port = _split_port(c, raw)
    if port is not None and port != t.port:
        return False
    lowered = host_part.lower()
    if lowered.startswith("."):
        if t.host.endswith(lowered):
            return True
    elif f".{t.host}".endswith(f".{lowered}"):
        return True
    if t.ip is not None and t.ip.version == 4:
        try:
            return t.ip in ipaddress.IPv4Network(host_part, strict=False)
        except ValueError:
            return False
    return False


def _npm(c: Client, raw: str, t: Target) -> bool:
    """@npmcli/agent: the entry's dot-separated labels, empty ones dropped, equal the host's last labels."""
    host = t.host_as("bracketed").split(".")[::-1]
    labels = [s for s in raw.strip().split(".") if s][::-1]
    if not labels or len(labels) > len(host):
        return False
    return all(h == n for h, n in zip(host, labels, strict=False))


# --- Java: system properties from JAVA_TOOL_OPTIONS and JDK_JAVA_OPTIONS -------------------------

# What the JVM reads, in the order it applies them: a later -D replaces an earlier one (JDK_JAVA_OPTIONS is
# put before the command line by the java launcher, which HotSpot parses after JAVA_TOOL_OPTIONS).
JAVA_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")

JAVA_DEFAULT_NON_PROXY = "localhost|127.*|[::1]|0.0.0.0|[::0]"


def java_properties(options: str) -> dict[str, str]:
    """The -D system properties in a JAVA_TOOL_OPTIONS or JDK_JAVA_OPTIONS value (split on whitespace, as the JVM does)."""
    props: dict[str, str] = {}
    for word in options.split():
        if word.startswith("-D"):
            name, _, value = word[2:].partition("=")
            props[name] = value
    return props


def _java_pattern(pattern: str, host: str) -> bool:
    p = pattern.lower()
    if not p:
        return False
    if p.startswith("*") and p.endswith("*") and len(p) > 1:
        return p[1:-1] in host
    if p.startswith("*"):
        return host.endswith(p[1:])
    if p.endswith("*"):
        return host.startswith(p[:-1])
    return host == p


def _java_decide(env: Mapping[str, str], t: Target) -> Decision:
    props: dict[str, str] = {}
    for name in JAVA_OPTION_VARIABLES:
        options = env.get(name, "")
        if any(not word.startswith("-") for word in options.split()):
            return "error"  # the JVM splits the value at spaces and refuses to start on a word that is no option
        props.update(java_properties(options))
    host_prop = "https.proxyHost" if t.scheme == "https" else "http.proxyHost"
    if not props.get(host_prop):
        return "bypass"
    given = props.get("http.nonProxyHosts")
    # The JVM appends its defaults to a non-empty value; an empty one leaves none.
    patterns = JAVA_DEFAULT_NON_PROXY if given is None else f"{given}|{JAVA_DEFAULT_NON_PROXY}" if given else ""
    host = t.host_as(JAVA.ipv6_host)
    if any(_java_pattern(p, host) for p in patterns.split("|")):
        return "bypass"
    return "proxy"


# --- the rows ------------------------------------------------------------------------------------

_LOWER_FIRST = {"http": ("http_proxy", "HTTP_PROXY"), "https": ("https_proxy", "HTTPS_PROXY")}
_UPPER_FIRST = {"http": ("HTTP_PROXY", "http_proxy"), "https": ("HTTPS_PROXY", "https_proxy")}
_LOWER_ONLY = {"http": ("http_proxy",), "https": ("https_proxy",)}
_NO_LOWER_FIRST = ("no_proxy", "NO_PROXY")
_ALL = {"http": ("all_proxy", "ALL_PROXY"), "https": ("all_proxy", "ALL_PROXY")}

_CURL = dict(
    no_proxy_vars=_NO_LOWER_FIRST,
    proxy_vars={"http": ("http_proxy",), "https": ("https_proxy", "HTTPS_PROXY")},
    fallback_vars=_ALL,
    pick="nonempty",
    separators=r"[,\s]",
    cidr=frozenset({4}),
    names_on_ips=False,
    trailing_dot=True,
)
_URLLIB = dict(
    no_proxy_vars=_NO_LOWER_FIRST, proxy_vars=_LOWER_FIRST, ports="explicit", ipv6_host="bracketed", cgi="drop-upper"
)
_UNDICI_7 = dict(
    fallback_vars={"https": ("http_proxy", "HTTP_PROXY")},
    port_zero=True,
    separators=r"[,\s]",
    star_dot="domain",
    entry_port="last",
    ports="effective",
    ipv6_host="bracketed",
)
_NODE_EXACT = dict(
    port_zero=True,
    separators=r"[,\s]",
    wildcard="entry",
    names="exact",
    leading_dot="suffix",
    star_dot="strip",
    entry_port="last",
    ports="effective",
    ipv6_host="bracketed",
)

CLIENTS: tuple[Client, ...] = (
    Client("curl", "curl", "7.88 (Debian 12)", **_CURL),  # type: ignore[arg-type]
    Client("git", "git (libcurl)", "2.39 with libcurl 7.88", **_CURL),  # type: ignore[arg-type]
    Client(
        "wget",
        "wget",
        "1.21",
        no_proxy_vars=("no_proxy",),
        proxy_vars=_LOWER_ONLY,
        wildcard="none",
        leading_dot="suffix",
    ),
    Client(
        "apt",
        "apt",
        "2.6",
        no_proxy_vars=("no_proxy",),
        proxy_vars=_LOWER_ONLY,
        fallback_vars={"https": ("http_proxy",)},
        fallback_when="unset",
        proxy_schemes=("http", "https", "socks5h"),
        wildcard="none",
        names="raw",
        leading_dot="suffix",
    ),
    Client("python-urllib", "Python urllib", "3.11", **_URLLIB),  # type: ignore[arg-type]
    Client(
        "python-requests",
        "Python requests",
        "2.34",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        fallback_vars=_ALL,
        pick="nonempty",
        separators=r"[,]",
        cidr=frozenset({4}),
        ports="explicit-names",
        cgi="drop-upper",
    ),
    Client(
        "python-httpx",
        "Python httpx",
        "0.28",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        fallback_vars=_ALL,
        wildcard="entry",
        cgi="drop-upper",
        raises=_httpx_raises,
        matcher=_httpx,
    ),
    Client(
        "python-aiohttp",
        "Python aiohttp",
        "3.14",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        cgi="drop-upper",
        ignored_proxy_schemes=("https", "wss"),
    ),
    Client(
        "go",
        "Go net/http",
        "1.26 (ProxyFromEnvironment)",
        no_proxy_vars=("NO_PROXY", "no_proxy"),
        proxy_vars=_UPPER_FIRST,
        pick="nonempty",
        wildcard="entry",
        leading_dot="suffix",
        star_dot="suffix",
        cidr=frozenset({4, 6}),
        ip_entries="address",
        names_on_ips=False,
        entry_port="hostport",
        ports="effective",
        loopback="go",
        cgi="error",
        idna=True,
    ),
    Client(
        "ruby",
        "Ruby URI#find_proxy",
        "3.1",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        wildcard="none",
        entry_port="last",
        loopback="resolve",
        cgi="cgi-var",
        tokens=_ruby_tokens,
        matcher=_ruby,
    ),
    Client(
        "node-proxy-from-env",
        "proxy-from-env 2 (axios)",
        "2",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        fallback_vars=_ALL,
        pick="nonempty",
        **_NODE_EXACT,  # type: ignore[arg-type]
    ),
    Client(
        "node-proxy-from-env-1",
        "proxy-from-env 1",
        "1.1",
        # getProxyForUrl: npm_config_<scheme>_proxy, <scheme>_proxy, npm_config_proxy, all_proxy (each lower, then upper
        # case, the first non-empty one), and npm_config_no_proxy ahead of no_proxy.
        no_proxy_vars=("npm_config_no_proxy", "NPM_CONFIG_NO_PROXY", *_NO_LOWER_FIRST),
        proxy_vars={
            scheme: (f"npm_config_{scheme}_proxy", f"NPM_CONFIG_{scheme.upper()}_PROXY", *names)
            for scheme, names in _LOWER_FIRST.items()
        },
        fallback_vars={scheme: ("npm_config_proxy", "NPM_CONFIG_PROXY", *names) for scheme, names in _ALL.items()},
        pick="nonempty",
        **_NODE_EXACT,  # type: ignore[arg-type]
    ),
    Client(
        "node-undici",
        "undici 8 EnvHttpProxyAgent",
        "8.12",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        fallback_vars={"https": ("http_proxy", "HTTP_PROXY")},
        port_zero=True,
        trailing_dot=True,
        separators=r"[,\s]",
        wildcard="entry",
        star_dot="suffix",
        entry_port="unbracket",
        ports="effective",
    ),
    Client(
        "node-undici-7",
        "undici 7 EnvHttpProxyAgent",
        "7.30",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        **_UNDICI_7,  # type: ignore[arg-type]
    ),
    Client(
        "node-http",
        "Node 24 http (NODE_USE_ENV_PROXY=1)",
        "24.21",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        pick="nonempty",
        wildcard="entry",
        names="exact",
        star_dot="suffix",
        ports="explicit",
        requires=(("NODE_USE_ENV_PROXY", "1"),),
    ),
    Client(
        "node-fetch",
        "Node 24 fetch (NODE_USE_ENV_PROXY=1)",
        "24.21 (its bundled undici 7)",
        no_proxy_vars=_NO_LOWER_FIRST,
        proxy_vars=_LOWER_FIRST,
        requires=(("NODE_USE_ENV_PROXY", "1"),),
        **_UNDICI_7,  # type: ignore[arg-type]
    ),
    Client(
        "npm",
        "npm (@npmcli/agent)",
        "11 (@npmcli/agent 4)",
        no_proxy_vars=("no_proxy",),
        proxy_vars={"http": ("https_proxy", "http_proxy", "proxy"), "https": ("https_proxy",)},
        pick="environ",
        wildcard="none",
        matcher=_npm,
    ),
    Client(
        "java",
        "Java ProxySelector (JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS)",
        "17",
        no_proxy_vars=(),
        proxy_vars={},
        ipv6_host="bracketed",
        decider=lambda env, t: _java_decide(env, t),
    ),
)

_URLLIB_BARE = Client(
    "python-requests/urllib", "urllib within requests", "", _NO_LOWER_FIRST, _LOWER_FIRST, ipv6_host="bare"
)
JAVA = CLIENTS[-1]
CLIENT_IDS: tuple[str, ...] = tuple(c.id for c in CLIENTS)
_BY_ID = {c.id: c for c in CLIENTS}


def client(client_id: str) -> Client:
    try:
        return _BY_ID[client_id]
    except KeyError:
        raise ValueError(f"client {client_id!r} is not modelled (expected one of: {', '.join(CLIENT_IDS)})") from None


def _read(env: Mapping[str, str], names: tuple[str, ...], pick: str) -> str:
    for name in names:
        if name in env and (pick == "set" or env[name]):
            return env[name]
    return ""


def _cgi(c: Client, env: Mapping[str, str]) -> bool:
    """Whether `c` sees itself run as a CGI script: REQUEST_METHOD set (Go: set and non-empty)."""
    if c.cgi == "error":
        return bool(env.get("REQUEST_METHOD"))
    return c.cgi != "none" and "REQUEST_METHOD" in env


def _names(c: Client, env: Mapping[str, str], scheme: str) -> tuple[str, ...]:
    names = c.proxy_vars.get(scheme, ())
    if scheme == "http" and _cgi(c, env):
        if c.cgi == "drop-upper":  # Python's getproxies_environment forgets HTTP_PROXY under CGI
            names = tuple(n for n in names if n != "HTTP_PROXY")
        elif c.cgi == "cgi-var":  # Ruby: only the lower-case spelling, else CGI_HTTP_PROXY
            names = (*(n for n in names if n != "HTTP_PROXY"), "CGI_HTTP_PROXY")
    return names


def _read_proxy(c: Client, env: Mapping[str, str], names: tuple[str, ...]) -> str:
    if c.pick == "environ":
        for name in names:  # npm: each key's later spelling wins, then the keys in this order
            value = _environ_last(env, name)
            if value:
                return value
        return ""
    value = _read(env, names, c.pick)
    if value and value.split("://", 1)[0].lower() in c.ignored_proxy_schemes and "://" in value:
        return ""
    return value


def _proxy_url(c: Client, env: Mapping[str, str], scheme: str) -> str:
    """The proxy `c` would use for `scheme`, or "" for none."""
    names = _names(c, env, scheme)
    own = _read_proxy(c, env, names)
    if own or (c.fallback_when == "unset" and any(n in env for n in names)):
        return own
    return _read_proxy(c, env, c.fallback_vars.get(scheme, ()))


def workload_variables(c: Client | str, env: Mapping[str, str], scheme: str) -> tuple[str, ...]:
    """The variables beyond the scheme's usual two that decide `c`'s proxy for `scheme` in `env`: a fallback
    such as ALL_PROXY, npm's npm_config_* spellings, or REQUEST_METHOD (CGI). Empty when none of them is set."""
    c = client(c) if isinstance(c, str) else c
    usual = {f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "no_proxy", "NO_PROXY"}
    read = (*c.proxy_vars.get(scheme, ()), *c.fallback_vars.get(scheme, ()), *c.no_proxy_vars)
    found = [n for n in dict.fromkeys(read) if n not in usual and env.get(n)]
    if c.cgi != "none" and "REQUEST_METHOD" in env:
        found.append("REQUEST_METHOD")
    return tuple(found)


def _environ_last(env: Mapping[str, str], name: str) -> str:
    found = ""
    for key, value in env.items():
        if key.lower() == name:
            found = value
    return found


def _no_proxy_value(c: Client, env: Mapping[str, str]) -> str:
    """The NO_PROXY value `c` reads: its winning spelling, or npm's later one in the environment."""
    return _environ_last(env, "no_proxy") if c.pick == "environ" else _read(env, c.no_proxy_vars, c.pick)


def decide(c: Client | str, env: Mapping[str, str], url: str | Target) -> Decision:
    """What client `c` does with `url` in a workload whose environment is `env`."""
    c = client(c) if isinstance(c, str) else c
    t = url if isinstance(url, Target) else Target.parse(url)
    if c.decider is not None:
        return c.decider(env, t)
    if any(env.get(name) != value for name, value in c.requires):
        return "bypass"
    if not _proxy_url(c, env, t.scheme):
        return "bypass"
    if c.cgi == "error" and t.scheme == "http" and _cgi(c, env):
        return "error"  # Go refuses HTTP_PROXY under CGI (golang.org/s/cgihttpproxy)
    if c.port_zero and t.port == 0:
        t = replace(t, port=443 if t.scheme == "https" else 80)
    # Go special-cases localhost and loopback IPs; Ruby resolves the name (only localhost resolves to loopback).
    if c.loopback != "none" and (t.host == "localhost" or (t.ip is not None and t.ip.is_loopback)):
        return "bypass"
    value = _no_proxy_value(c, env)
    entries = c.entries(value)
    if c.raises is not None:
        for entry in entries:
            if c.raises(entry.strip()) is not None:
                return "error"
    if not value.strip():
        return _unsupported(c, env, t) or "proxy"
    if c.wildcard != "none" and value.strip() == "*":
        return "bypass"
    if c.wildcard == "entry" and any(entry.strip() == "*" for entry in entries):
        return "bypass"
    match = c.matcher or _generic
    if any(match(c, entry, t) for entry in entries):
        return "bypass"
    return _unsupported(c, env, t) or "proxy"


def _unsupported(c: Client, env: Mapping[str, str], t: Target) -> Decision | None:
    """apt refuses a proxy URL whose scheme it does not speak (or that has none): 'Unsupported proxy configured'."""
    if not c.proxy_schemes:
        return None
    value = _proxy_url(c, env, t.scheme).strip()
    scheme = value.split("://", 1)[0].lower() if "://" in value else ""
    return None if scheme in c.proxy_schemes else "error"


def matched_entry(c: Client | str, env: Mapping[str, str], url: str | Target) -> str | None:
    """The NO_PROXY entry through which `c` bypasses the proxy for `url`, if one does."""
    c = client(c) if isinstance(c, str) else c
    t = url if isinstance(url, Target) else Target.parse(url)
    if c.decider is not None:
        return None
    value = _no_proxy_value(c, env)
    match = c.matcher or _generic
    for entry in c.entries(value):
        if match(c, entry, t):
            return entry.strip()
    return None


@dataclass(frozen=True)
class Trust:
    """Where a client takes the CAs it verifies servers with, for a TLS-inspecting proxy's CA.

    `variables`: the environment variables it reads for them, the first set one winning (empty: none of the
    rendered ones); `adds`: they add to its built-in roots rather than replace them; `otherwise`: how to give
    it a CA when no variable does. Java's is a system property in JDK_JAVA_OPTIONS (`jvm`).
    """

    variables: tuple[str, ...] = ()
    adds: bool = False
    otherwise: str = ""
    jvm: bool = False


_GNUTLS = "Debian's build uses GnuTLS, which reads no SSL_CERT_FILE"
_NODE_TRUST = Trust(("NODE_EXTRA_CA_CERTS",), adds=True)

# One row per client of CLIENTS. curl, requests, httpx, Node 24, Go and the JVM were observed behind a real
# TLS-inspecting proxy, with and without the variables, and wget and git with them (test_trust_real.py); the rest
# follow the library they use (Python's ssl and Ruby's OpenSSL read SSL_CERT_FILE, as OpenSSL does).
TRUST: dict[str, Trust] = {
    "curl": Trust(("CURL_CA_BUNDLE", "SSL_CERT_FILE")),
    "git": Trust(otherwise=f"GIT_SSL_CAINFO or http.sslCAInfo ({_GNUTLS})"),
    "wget": Trust(otherwise=f"--ca-certificate or ca_certificate in .wgetrc ({_GNUTLS})"),
    "apt": Trust(otherwise="Acquire::https::CaInfo, or the CA in the image's /usr/local/share/ca-certificates"),
    "python-urllib": Trust(("SSL_CERT_FILE",)),
    "python-requests": Trust(("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")),
    "python-httpx": Trust(("SSL_CERT_FILE",)),
    "python-aiohttp": Trust(("SSL_CERT_FILE",)),
    "go": Trust(("SSL_CERT_FILE",)),
    "ruby": Trust(("SSL_CERT_FILE",)),
    "node-proxy-from-env": _NODE_TRUST,
    "node-proxy-from-env-1": _NODE_TRUST,
    "node-undici": _NODE_TRUST,
    "node-undici-7": _NODE_TRUST,
    "node-http": _NODE_TRUST,
    "node-fetch": _NODE_TRUST,
    "npm": _NODE_TRUST,
    "java": Trust(jvm=True),
}
