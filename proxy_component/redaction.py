"""How a value that may hold a credential appears in a message: by what it could hold, never by its shape.

A proxy URL is masked whether or not it is well formed. A typo (a missing `/`, `@` or `:`, a `;` for `:`, no
scheme at all) moves the password to where a well-formed URL has its host, port or path, so nothing is shown
because of where it sits in a URL that parses: a scheme only when it is one of a few known names, a host and port
only when they are exactly that (letters, digits, `-`, `_`, `.`; a port of digits), after the last `@` or with no
`@` at all; everything else is `***`.
"""

from __future__ import annotations

import re

__all__ = ["mask_url"]

_SCHEMES = ("http", "https", "socks4", "socks4a", "socks5", "socks5h", "ftp")
"""Schemes shown by name: a known word is never part of a password."""
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
_HOST = re.compile(rf"(?P<host>{_LABEL}(?:\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{{1,5}}))?")
_TAIL = re.compile(r"[A-Za-z0-9_.~/-]*")
"""A path shown after a host: only characters a path of a proxy URL typo holds; anything else is masked."""


def mask_url(value: str) -> str:
    """The text of a value that may be a proxy URL with credentials, safe for any message, whatever its shape.

    `http://svc:PASSWORD@proxy.corp:3128` is `http://***@proxy.corp:3128`; `http//svc:PASSWORD@proxy.corp:3128`
    is `***@proxy.corp:3128`; `http://svc:PASSWORDproxy.corp:3128` (no `@`) is `http://***`. With no `@` and
    something after the host (`http://svc:1234/proxy.corp:3128`, an `@` typed as `/`), the port is masked too:
    it could be a password of digits.
    """
    text = value.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    shown = ""
    if sep:
        shown = f"{scheme.lower()}://" if scheme.lower() in _SCHEMES else "***://"
    _, at, tail = rest.rpartition("@")
    if at:
        shown += "***@"
    cut = re.search(r"[/?#]", tail)
    authority, after = (tail[: cut.start()], tail[cut.start() :]) if cut else (tail, "")
    match = _HOST.fullmatch(authority)
    if match is None:
        return shown + "***"
    shown += match.group("host")
    if match.group("port") is not None:
        shown += ":***" if after and not at else f":{match.group('port')}"
    if after:
        shown += after if _TAIL.fullmatch(after) else f"{after[0]}***"
    return shown
