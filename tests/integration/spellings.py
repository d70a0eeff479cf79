"""Every way to spell an address that a resolver will turn back into it.

IPv4: glibc's `inet_aton` (which getaddrinfo, and so tinyproxy, uses for a
numeric host) accepts one to four parts, each decimal, octal (leading 0) or hex
(0x/0X); Python's `ipaddress` accepts the canonical dotted quad. IPv6: both
`inet_pton` and `ipaddress` accept any group with or without leading zeros, `::`
in place of any run of zero groups, either case, a dotted IPv4 tail, and (for
ipaddress) a zone. Each generated spelling is checked against glibc's own parser
(`socket.inet_aton` / `socket.inet_pton`), so the set holds only spellings that
really mean the address.
"""

from __future__ import annotations

import ipaddress
import itertools
import socket

__all__ = ["ipv4_spellings", "ipv6_spellings", "spellings"]


def _part(value: int, form: str, width: int) -> str:
    if form == "dec":
        return str(value)
    if form == "oct":
        return "0" + format(value, "o") if value else "00"
    if form == "hex":
        return "0x" + format(value, "x")
    if form == "HEX":
        return "0X" + format(value, "X")
    if form == "pad":  # zero-padded decimal, which inet_aton reads as octal: a different address unless all 0-7
        return "0" * 2 + format(value, "o")
    raise ValueError(form)


def ipv4_spellings(address: str) -> set[str]:
    """Every inet_aton spelling of `address` in 1-4 parts and decimal, octal and hex forms."""
    packed = ipaddress.IPv4Address(address).packed
    a, b, c, d = packed
    forms = ("dec", "oct", "hex", "HEX", "pad")
    layouts: list[tuple[tuple[int, int], ...]] = [
        ((a, 8), (b, 8), (c, 8), (d, 8)),
        ((a, 8), (b, 8), ((c << 8) | d, 16)),
        ((a, 8), ((b << 16) | (c << 8) | d, 24)),
        ((int.from_bytes(packed, "big"), 32),),
    ]
    out: set[str] = set()
    for layout in layouts:
        for combo in itertools.product(forms, repeat=len(layout)):
            text = ".".join(_part(value, form, width) for (value, width), form in zip(layout, combo, strict=True))
            try:
                if socket.inet_aton(text) == packed:
                    out.add(text)
            except OSError:
                continue
    return out


def _groups_spellings(groups: list[int]) -> set[str]:
    """All `::` placements and group paddings of eight 16-bit groups."""
    short = [format(g, "x") for g in groups]
    padded = [format(g, "04x") for g in groups]
    # Every group short, every group padded, and each single group padded among short ones.
    variants = [short, padded, *([*short[:i], padded[i], *short[i + 1 :]] for i in range(8))]
    out: set[str] = set()
    for texts in variants:
        out.add(":".join(texts))
    for start in range(8):
        for end in range(start + 1, 9):
            if not all(g == 0 for g in groups[start:end]):
                continue
            # Either side of the `::` short or padded, independently.
            for left, right in ((short, short), (padded, padded), (padded, short), (short, padded)):
                out.add(":".join(left[:start]) + "::" + ":".join(right[end:]))
    return out


def ipv6_spellings(address: str) -> set[str]:
    """Every inet_pton spelling of an IPv6 address: paddings, `::` placements, case, dotted IPv4 tails."""
    ip = ipaddress.IPv6Address(address)
    packed = ip.packed
    groups = [int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2)]
    texts = _groups_spellings(groups)
    tail = str(ipaddress.IPv4Address(packed[12:]))
    for head in _groups_spellings([*groups[:6], 1, 1]):  # the same heads, with two groups to swap for the tail
        if head.endswith(":1:1"):
            texts.add(head[: -len("1:1")] + tail)
    texts |= {t.upper() for t in texts}
    out = set()
    for text in texts:
        try:
            if socket.inet_pton(socket.AF_INET6, text) == packed:
                out.add(text)
        except OSError:
            continue
    return out


def spellings(address: str) -> set[str]:
    ip = ipaddress.ip_address(address)
    return ipv4_spellings(address) if ip.version == 4 else ipv6_spellings(address)
