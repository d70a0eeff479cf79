"""The proxy pods and nodes use, and its upstream: proxy URLs that every client can parse, their redaction for
messages, the upstream's credentials and the warnings for a likely typo in them (`ProxySettings`,
`UpstreamSettings`)."""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Annotated
from urllib.parse import quote, unquote, urlsplit

from pydantic import AfterValidator, Field, SecretStr

from ..redaction import mask_url
from .base import _Model
from .network import NoProxyEntry
from .trust import TrustedCa


def _proxy_url(value: str, upstream: bool = False) -> str:
    """A proxy URL that every client can parse: http(s)://[user:pass@]host[:port], nothing else. For the upstream
    (`upstream`), every message offers only http://, what tinyproxy's Upstream takes (an https:// one is refused
    by the settings' own check, `_upstream_scheme`, with the reason)."""
    if upstream:
        begins = "http://"
        accepted = (
            "expected http://host:port, optionally with user:password@: tinyproxy reaches upstreams over plain HTTP"
        )
    else:
        begins = "http:// or https://"
        accepted = "expected http://host:port or https://host:port, optionally with user:password@"
    shown = mask_url(value)  # never the value: a typo may have moved its password anywhere
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        raise ValueError(f"{shown!r} is not a URL ({accepted})") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError(
            f"{shown!r} has a port that is not a number from 1 to 65535, or a password with an unencoded "
            f"'#', '/' or '?' (percent-encode it, e.g. %23) ({accepted})"
        ) from None
    if parts.scheme not in ("http", "https") or not value.strip().lower().startswith(f"{parts.scheme}://"):
        raise ValueError(f"{shown!r} does not begin with {begins} ({accepted})")
    if not parts.hostname:
        raise ValueError(f"{shown!r} has no host ({accepted})")
    if not _url_host_ok(parts.hostname):
        raise ValueError(
            f"{shown!r} has a host that is neither a host name nor an IP address: "
            "the JVM would read quotes, '|' or spaces in it as more options or patterns (expected letters, digits, "
            "'-', '_' and '.', e.g. proxy.corp, or an IP address)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{shown!r} has a path, query or fragment, which clients ignore or reject ({accepted})")
    if port == 0:
        raise ValueError(f"{shown!r} has port 0 ({accepted})")
    return parts._replace(path="").geturl()


_URL_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")


def _url_host_ok(host: str) -> bool:
    """A proxy URL's host (lower case, brackets dropped) is a DNS-style name or an IP address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_URL_HOST.match(host))
    return True


def redact_url(url: str) -> str:
    """The URL safe for messages and plain outputs, whatever its shape: userinfo, and anything that could hold it
    after a typo, replaced by `***` (see `redaction.mask_url`)."""
    return mask_url(url)


ProxyUrl = Annotated[str, AfterValidator(_proxy_url)]


def _upstream_url(value: str) -> str:
    return _proxy_url(value, upstream=True)


UpstreamUrl = Annotated[str, AfterValidator(_upstream_url)]


class UpstreamSettings(_Model):
    """A corporate proxy that tinyproxy chains to; its credentials stay in a Secret."""

    url: UpstreamUrl
    username: str | None = None
    password: SecretStr | None = None
    no_upstream: list[NoProxyEntry] = Field(
        default_factory=list, description="Destinations tinyproxy reaches directly, not through the upstream."
    )
    trusted_ca: TrustedCa | None = Field(
        default=None,
        description="PEM CA certificates of a TLS-inspecting upstream (one text, or a list): public, not a secret.",
    )

    @property
    def warnings(self) -> list[str]:
        """What is valid but likely a typo: a user name that may hold the password, no port. Never a value."""
        lines = []
        if self.username is not None:
            lines += _user_name_warnings("proxy.upstream.username:", self.username, self.password is not None)
        else:
            lines += _url_warnings("proxy.upstream.url", self.url)
        if urlsplit(self.url).port is None:
            lines.append(
                "proxy.upstream.url: gives no port, so tinyproxy reaches the upstream on port 80 (expected "
                "host:port, e.g. http://proxy.corp.example:3128; write :80 when port 80 is meant)"
            )
        return lines

    @property
    def credentials(self) -> tuple[str, str] | None:
        parts = urlsplit(self.url)
        if self.username is not None:
            return (self.username, self.password.get_secret_value() if self.password else "")
        if parts.username is not None:
            return (unquote(parts.username), unquote(parts.password or ""))
        return None

    @property
    def url_with_credentials(self) -> str:
        """The upstream URL with userinfo, for node services that talk to it directly."""
        creds = self.credentials
        if creds is None:
            return self.url
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        user, password = (quote(c, safe="") for c in creds)
        return parts._replace(netloc=f"{user}:{password}@{host}").geturl()

    @property
    def endpoint(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return (parts.hostname or "", parts.port or 80)

    @property
    def address(self) -> str | None:
        """The upstream's IPv4 address when the URL gives one (the settings refuse IPv6 and odd spellings)."""
        host = self.endpoint[0]
        return host if _inet_aton(host) == host else None


def _url_warnings(field: str, url: str) -> list[str]:
    """The warnings for a valid proxy URL's user info (see `_user_name_warnings`)."""
    parts = urlsplit(url)
    if parts.username is None:
        return []
    return _user_name_warnings(f"{field}: its user name", unquote(parts.username), bool(parts.password))


def _user_name_warnings(where: str, user: str, has_password: bool) -> list[str]:
    """A user name that may hold the password, typed with ';' for ':' or without the ':' at all: a line naming
    `where` and why, never the name (it may be the password)."""
    reasons = []
    if ";" in user or "," in user:
        reasons.append("holds ';' or ',' (a ':' mistyped?)")
    if not has_password:
        reasons.append("comes with no password")
    if len(user) >= 16 and all(re.search(c, user) for c in ("[a-z]", "[A-Z]", "[0-9]")):
        reasons.append("looks random, like a password")
    if not reasons:
        return []
    said = ", ".join(reasons[:-1]) + (" and " if len(reasons) > 1 else "") + reasons[-1]
    return [f"{where} {said}: if it holds the password, write user:password@ (value hidden)"]


def _inet_aton(host: str) -> str | None:
    """The canonical IPv4 address that the C resolver reads `host` as (e.g. 0177.1 is 127.0.0.1), else None."""
    if not host or not re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        return None
    try:
        return str(ipaddress.IPv4Address(socket.inet_aton(host)))
    except OSError:
        return None


class ProxySettings(_Model):
    """What pods and nodes use: the proxy URLs and extra NO_PROXY entries."""

    http_proxy: ProxyUrl | None = Field(default=None, description="Defaults to the in-cluster proxy's URL.")
    https_proxy: ProxyUrl | None = Field(default=None, description="Defaults to httpProxy.")
    no_proxy: list[NoProxyEntry] = Field(default_factory=list, description="Entries added after the cluster's own.")
    upstream: UpstreamSettings | None = None
    node_http_proxy: ProxyUrl | None = Field(
        default=None, description="What node services (containerd, kubelet) use; default: httpProxy, else the upstream."
    )
    node_https_proxy: ProxyUrl | None = Field(default=None, description="Default: nodeHttpProxy.")
