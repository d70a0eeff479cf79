"""How each HTTP client reads NO_PROXY, and what a composed list means for each of them.

The facts come from each client's own matching code (shared/reference/no-proxy-clients.md)
and, for httpx, from running it: they feed `proxy-component explain` and the
component's preview warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .noproxy import Kind, NoProxy

__all__ = ["CLIENTS", "Client", "Note", "compat_notes"]


@dataclass(frozen=True)
class Client:
    """One client's NO_PROXY dialect."""

    name: str
    cidr_v4: bool
    cidr_v6: bool
    suffix_form: bool  # matches subdomains through a ".example.com" or "example.com" entry
    raises_on_ipv6_cidr: bool = False


CLIENTS: tuple[Client, ...] = (
    Client("Go (kubelet, containerd, operators)", cidr_v4=True, cidr_v6=True, suffix_form=True),
    Client("curl / git", cidr_v4=True, cidr_v6=False, suffix_form=True),
    Client("wget", cidr_v4=False, cidr_v6=False, suffix_form=True),
    Client("apt", cidr_v4=False, cidr_v6=False, suffix_form=True),
    Client("Python urllib", cidr_v4=False, cidr_v6=False, suffix_form=True),
    Client("Python requests", cidr_v4=True, cidr_v6=False, suffix_form=True),
    Client("Python httpx", cidr_v4=False, cidr_v6=False, suffix_form=True, raises_on_ipv6_cidr=True),
    Client("Python aiohttp", cidr_v4=False, cidr_v6=False, suffix_form=True),
    Client("Ruby Net::HTTP", cidr_v4=True, cidr_v6=False, suffix_form=True),
    Client("Node proxy-from-env (axios)", cidr_v4=False, cidr_v6=False, suffix_form=True),
    Client("Node undici", cidr_v4=False, cidr_v6=False, suffix_form=True),
    Client("npm", cidr_v4=False, cidr_v6=False, suffix_form=True),
)


@dataclass(frozen=True)
class Note:
    """A caveat about a composed list: `warning` when a client breaks, `info` when it only misses a bypass."""

    severity: Literal["warning", "info"]
    text: str

    def __str__(self) -> str:
        return self.text


def _names(clients: list[Client]) -> str:
    return ", ".join(c.name for c in clients)


def compat_notes(no_proxy: NoProxy) -> list[Note]:
    """Plain-language notes on which clients will not honour (or will choke on) parts of the list."""
    notes: list[Note] = []
    v4 = [e.value for e in no_proxy.entries if e.kind is Kind.CIDR and ":" not in e.value]
    v6 = [e.value for e in no_proxy.entries if e.kind is Kind.CIDR and ":" in e.value]
    if v6:
        raising = [c for c in CLIENTS if c.raises_on_ipv6_cidr]
        notes.append(
            Note(
                "warning",
                f"IPv6 CIDRs ({', '.join(v6)}) are matched only by {_names([c for c in CLIENTS if c.cidr_v6])}; "
                f"{_names(raising)} raises InvalidURL when a client is created with them in NO_PROXY "
                "(httpx.Client(trust_env=False) or a per-workload NO_PROXY without them avoids it).",
            )
        )
    if v4:
        blind = [c for c in CLIENTS if not c.cidr_v4]
        notes.append(
            Note(
                "info",
                f"IPv4 CIDRs ({', '.join(v4)}) are not understood by {_names(blind)}: "
                "those clients send requests to pod or service IPs through the proxy.",
            )
        )
    if any(e.kind is Kind.IP and ":" in e.value for e in no_proxy.entries):
        notes.append(
            Note(
                "info",
                "IPv6 addresses are listed bare (fd00::1): Python urllib, Ruby, Node proxy-from-env and npm match only "
                "the bracketed form, which httpx cannot parse; requests to IPv6 literals from those clients use the proxy.",
            )
        )
    return notes
