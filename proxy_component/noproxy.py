"""The NO_PROXY model: typed entries that remember why they are there, and one deterministic composition.

Clients parse NO_PROXY differently (see ``clients.py``). An entry is therefore
stored once, in a canonical form, and rendered as every token that some client
needs in order to match it: a host suffix becomes ``example.com`` (Go, curl,
Python, wget) and ``.example.com`` (Node's proxy-from-env and ``http``).
IPv6 addresses stay bare (``fd00::1``): the bracketed ``[fd00::1]`` form that
urllib, Ruby and npm would match makes httpx raise ``InvalidURL`` when a client
is created, and a crash is worse than a missed bypass.

This module is pure: it imports neither ``pulumi`` nor a cloud SDK.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .redaction import mask_url

__all__ = [
    "Category",
    "Entry",
    "Kind",
    "NoProxy",
    "NoProxyError",
    "Source",
    "cloud_metadata_sources",
    "cluster_domain_sources",
    "compose",
    "loopback_sources",
    "parse_entry",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class NoProxyError(ValueError):
    """An entry that no client can parse, with where it came from and what would be accepted."""


class Category(enum.IntEnum):
    """Why an entry is in NO_PROXY; composition orders entries by this, then by value."""

    LOOPBACK = 0
    CLUSTER_DOMAIN = 1
    SERVICE_NETWORK = 2
    POD_NETWORK = 3
    NODE_NETWORK = 4
    API_SERVER = 5
    CLOUD_METADATA = 6
    USER = 7
    CHART = 8  # a Helm profile's in-cluster host names, only in that profile's values

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


class Kind(enum.IntEnum):
    """The shape of an entry, which decides how it is rendered and what it covers."""

    WILDCARD = 0  # "*": every host
    SUFFIX = 1  # ".example.com" or "*.example.com": the domain and every name below it
    HOST = 2  # "example.com": that name (and, for Go/curl/Python, its subdomains)
    IP = 3  # one address
    CIDR = 4  # an address range


_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_ACCEPTED = (
    "expected a host name (example.com), a suffix (.example.com or *.example.com), "
    "an IP (10.0.0.1, fd00::1) or a CIDR (10.0.0.0/8, fd00::/8); a host or IPv4 address may end in :port"
)


@dataclass(frozen=True)
class Source:
    """One raw NO_PROXY value before parsing: its text, its category and its origin (a field path or a discovery)."""

    value: str
    category: Category
    origin: str


@dataclass(frozen=True)
class Entry:
    """One canonical NO_PROXY entry and the origins that asked for it."""

    kind: Kind
    value: str
    port: int | None = None
    category: Category = Category.USER
    origins: tuple[str, ...] = ()
    covers: tuple[str, ...] = field(default=())
    widened: bool = False  # a user's host name, also listed as .name so that exact-match clients cover subdomains

    @property
    def network(self) -> IPNetwork | None:
        if self.kind is Kind.CIDR:
            return ipaddress.ip_network(self.value)
        if self.kind is Kind.IP:
            return ipaddress.ip_network(self.value)
        return None

    def tokens(self) -> tuple[str, ...]:
        """The strings this entry contributes to the NO_PROXY value, one per client dialect it needs."""
        port = f":{self.port}" if self.port is not None else ""
        if self.kind is Kind.SUFFIX:
            return (f"{self.value}{port}", f".{self.value}{port}")
        return (f"{self.value}{port}",)

    def _identity(self) -> tuple[Kind, str, int | None]:
        return (self.kind, self.value, self.port)

    def _sort_key(self) -> tuple[int, int, int, int, int, str, int]:
        net = self.network
        if net is not None:
            return (self.category, self.kind, net.version, int(net.network_address), net.prefixlen, "", self.port or 0)
        return (self.category, self.kind, 0, 0, 0, self.value, self.port or 0)


def _bad(value: str, origin: str, reason: str) -> NoProxyError:
    """The error naming the entry; a pasted proxy URL (an '@' or '://' in it) masked whatever its shape."""
    where = f"{origin}: " if origin else ""
    shown = mask_url(value) if "@" in value or "://" in value else value
    return NoProxyError(f"{where}{shown!r} {reason} ({_ACCEPTED})")


def _parse_port(text: str, value: str, origin: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise _bad(value, origin, f"has port {text!r}, which is not a number from 1 to 65535")
    return int(text)


def _parse_hostname(name: str, value: str, origin: str) -> str:
    name = name.lower()
    body = name[:-1] if name.endswith(".") else name
    if body and body.rsplit(".", 1)[-1].isdigit():
        raise _bad(
            value, origin, "is neither an IP address nor a host name (a host name's last label is not all digits)"
        )
    if not body or len(body) > 253 or not all(_LABEL.match(label) for label in body.split(".")):
        if "*" in name:
            raise _bad(value, origin, "has a '*' that no client understands: only a whole '*' or a leading '*.' is")
        raise _bad(value, origin, "is not a valid host name")
    return name


def parse_entry(value: str, category: Category = Category.USER, origin: str = "") -> Entry:
    """Parse one NO_PROXY entry into its canonical form, or raise NoProxyError naming the origin and the value."""
    if not isinstance(value, str):
        raise _bad(str(value), origin, f"is a {type(value).__name__}, not a string")
    text = value.strip()
    if not text:
        raise _bad(value, origin, "is empty")
    if "," in text or any(ch.isspace() for ch in text):
        raise _bad(value, origin, "holds a separator: give one entry per list item, without commas or spaces")
    if "://" in text:
        raise _bad(value, origin, "is a URL, not a NO_PROXY entry: give only its host")
    if "@" in text:
        raise _bad(value, origin, "holds user info (user:password@), which no NO_PROXY entry has: give only the host")
    origins = (origin,) if origin else ()

    def make(kind: Kind, canonical: str, port: int | None = None) -> Entry:
        return Entry(kind=kind, value=canonical, port=port, category=category, origins=origins)

    if text == "*":
        return make(Kind.WILDCARD, "*")
    if "/" in text:
        try:
            network = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise _bad(value, origin, "is not a CIDR") from None
        if network.prefixlen == network.max_prefixlen:
            return make(Kind.IP, str(network.network_address))
        return make(Kind.CIDR, str(network))
    if text.startswith("["):
        inner, _, rest = text[1:].partition("]")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise _bad(value, origin, "is not a bracketed IPv6 address") from None
        if rest:
            raise _bad(
                value,
                origin,
                "is an IPv6 address with a port, which makes httpx raise InvalidURL; give the address alone",
            )
        return make(Kind.IP, str(address))
    try:
        return make(Kind.IP, str(ipaddress.ip_address(text)))
    except ValueError:
        pass
    if text.count(":") > 1:
        raise _bad(value, origin, "is not an IP address or host name")
    host, sep, port_text = text.partition(":")
    port = _parse_port(port_text, value, origin) if sep else None
    try:
        return make(Kind.IP, str(ipaddress.IPv4Address(host)), port)
    except ValueError:
        pass
    if host.startswith("*."):
        return make(Kind.SUFFIX, _parse_hostname(host[2:], value, origin), port)
    if host.startswith("."):
        return make(Kind.SUFFIX, _parse_hostname(host[1:], value, origin), port)
    return make(Kind.HOST, _parse_hostname(host, value, origin), port)


def _widen(entry: Entry) -> Entry:
    """A user's `example.com` means the domain to curl, Go, Python, wget and Ruby (and to whoever wrote it).

    Node's proxy-from-env (axios) and Node's own http match it only exactly:
    listing `.example.com` too makes them cover the subdomains.
    """
    if entry.category is Category.USER and entry.kind is Kind.HOST and "." in entry.value and entry.port is None:
        return Entry(Kind.SUFFIX, entry.value, None, entry.category, entry.origins, widened=True)
    if entry.kind is Kind.SUFFIX and entry.widened is False:
        return entry
    return entry


def _merge_duplicates(entries: Iterable[Entry]) -> list[Entry]:
    merged: dict[tuple[Kind, str, int | None], Entry] = {}
    for entry in entries:
        key = entry._identity()
        seen = merged.get(key)
        if seen is None:
            merged[key] = entry
        else:
            merged[key] = Entry(
                kind=entry.kind,
                value=entry.value,
                port=entry.port,
                category=min(seen.category, entry.category),
                origins=tuple(sorted(set(seen.origins) | set(entry.origins))),
                widened=seen.widened and entry.widened,
            )
    return list(merged.values())


def _covered_by(entry: Entry, other: Entry) -> bool:
    """True when `other` makes `entry` redundant for every client that understands `other`'s form."""
    if entry is other or other.port is not None:
        return False
    if entry.kind is Kind.CIDR and other.kind is Kind.CIDR:
        mine, wider = ipaddress.ip_network(entry.value), ipaddress.ip_network(other.value)
        return mine.version == wider.version and mine != wider and mine.subnet_of(wider)  # type: ignore[arg-type]
    if entry.kind in (Kind.HOST, Kind.SUFFIX) and other.kind is Kind.SUFFIX:
        name = entry.value.rstrip(".")
        if entry.kind is Kind.SUFFIX and name == other.value:
            return False
        return name == other.value or name.endswith("." + other.value)
    return False


def compose(sources: Iterable[Source]) -> NoProxy:
    """Parse, normalize, de-duplicate, drop what a wider entry covers, and order by category then value.

    Exact IPs are kept even inside a listed CIDR: urllib, httpx, wget and Node's
    clients do not understand CIDRs and match the address only by its own entry.
    The result does not depend on the order of `sources`.
    """
    parsed = [parse_entry(src.value, src.category, src.origin) for src in sources]
    entries = _merge_duplicates(_widen(e) for e in _merge_duplicates(parsed))
    kept: list[Entry] = []
    for entry in entries:
        wider = sorted((o for o in entries if _covered_by(entry, o)), key=Entry._sort_key)
        if not wider:
            kept.append(entry)
    result: list[Entry] = []
    for entry in kept:
        covered = sorted(
            f"{o.value} ({', '.join(o.origins) or o.category.label})" for o in entries if _covered_by(o, entry)
        )
        result.append(
            Entry(
                kind=entry.kind,
                value=entry.value,
                port=entry.port,
                category=entry.category,
                origins=entry.origins,
                covers=tuple(covered),
                widened=entry.widened,
            )
        )
    result.sort(key=Entry._sort_key)
    return NoProxy(tuple(result))


@dataclass(frozen=True)
class NoProxy:
    """A composed NO_PROXY list; `str()` gives the comma-separated value every consumer receives."""

    entries: tuple[Entry, ...]

    @property
    def brackets_ipv6(self) -> bool:
        """Also write IPv6 addresses bracketed (`[fd00::1]`), which urllib, proxy-from-env, undici 7 and npm match.

        Only when the list holds an IPv6 CIDR: httpx refuses both forms, so it already
        needs NO_PROXY_PYTHON (without either) there, and nowhere else does it lose.
        """
        return any(e.kind is Kind.CIDR and ":" in e.value for e in self.entries)

    def entry_tokens(self, entry: Entry) -> tuple[str, ...]:
        """The tokens of one entry in this list: its own, plus the bracketed form of an IPv6 address."""
        tokens = entry.tokens()
        if self.brackets_ipv6 and entry.kind is Kind.IP and ":" in entry.value and entry.port is None:
            tokens += (f"[{entry.value}]",)
        return tokens

    def tokens(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for entry in self.entries:
            for token in self.entry_tokens(entry):
                seen.setdefault(token, None)
        return tuple(seen)

    def __str__(self) -> str:
        return ",".join(self.tokens())

    def networks(self) -> tuple[IPNetwork, ...]:
        return tuple(n for e in self.entries if (n := e.network) is not None)

    def explain(self) -> list[str]:
        """One line per entry: the tokens, the category and the origins, for `proxy-component explain`."""
        lines = []
        for entry in self.entries:
            why = ", ".join(entry.origins) or entry.category.label
            line = f"{','.join(self.entry_tokens(entry)):<48} {entry.category.label:<16} {why}"
            if entry.widened:
                line += (
                    f"; .{entry.value} added: proxy-from-env (axios) and Node's http match {entry.value} only exactly"
                )
            if len(self.entry_tokens(entry)) > len(entry.tokens()):
                line += "; bracketed too, for urllib, proxy-from-env, undici 7, Node's fetch and npm"
            if entry.covers:
                line += f"; covers {'; '.join(entry.covers)}"
            lines.append(line.rstrip())
        return lines


def loopback_sources() -> list[Source]:
    """Loopback names and addresses: only Go special-cases localhost, everyone else needs them listed."""
    return [Source(v, Category.LOOPBACK, "loopback") for v in ("localhost", "127.0.0.1", "::1")]


def cluster_domain_sources(dns_domain: str, origin: str = "cluster.dnsDomain") -> list[Source]:
    """The cluster domain, `.svc` for search-path names, and the API server's short Service names."""
    return [
        Source(f".{dns_domain.strip('.')}", Category.CLUSTER_DOMAIN, origin),
        Source(".svc", Category.CLUSTER_DOMAIN, "service search path"),
        Source("kubernetes", Category.CLUSTER_DOMAIN, "service search path"),
        Source("kubernetes.default", Category.CLUSTER_DOMAIN, "service search path"),
    ]


_CLOUD_METADATA: dict[str, tuple[str, ...]] = {
    "none": (),
    "aws": ("169.254.169.254", "fd00:ec2::254", "169.254.170.23", "fd00:ec2::23"),
    "gcp": ("169.254.169.254", "metadata", "metadata.google.internal"),
    "azure": ("169.254.169.254", "168.63.129.16"),
}


def cloud_metadata_sources(cloud: str, region: str | None = None) -> list[Source]:
    """The instance metadata (and, on AWS, the Pod Identity agent and internal DNS) endpoints of a cloud."""
    sources = [Source(v, Category.CLOUD_METADATA, f"cloud {cloud}") for v in _CLOUD_METADATA[cloud]]
    if cloud == "aws" and region:
        suffix = ".ec2.internal" if region == "us-east-1" else f".{region}.compute.internal"
        sources.append(Source(suffix, Category.CLOUD_METADATA, f"cloud aws region {region}"))
    return sources
