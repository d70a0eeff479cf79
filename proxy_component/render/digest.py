"""The digest of what a workload is given: the proxy values (every rendering) and the trusted CA.

Whatever injects the env stamps it on the pod template or the pod as `VALUES_ANNOTATION`, so that `check` and
`rollout` can tell a running pod that holds old values (its digest is not the current one) from a current one,
without reading a container's env (the API does not show what a running process holds). A template the stack
transform injects by reference is stamped `REFERENCE` instead: its pods follow `proxy-config`'s change time.

The digest covers every value any container may get, whatever its runtime selection: the proxy URLs, both NO_PROXY
renderings, both JDK_JAVA_OPTIONS values and the trusted CA's PEM. A change to any of them makes every stamped pod
stale, but a change of the CA alone only those that read it at start (the JVM, Node): the digest has two parts,
`<env>-<trust>`. The annotation is plain text, so nothing of a credential goes into it: a URL's user name and password
are replaced by `<credentials>` before hashing. A change of the credentials alone does not change the digest; with
credentials every injection names them by `secretKeyRef` to `proxy-config`, so its pods are judged by that Secret's
change time, as references are (live/stale.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from ..settings import Settings
from .env import REFERENCE, VALUES_ANNOTATION, ProxyValues

__all__ = [
    "NO_TRUST",
    "REFERENCE",
    "VALUES_ANNOTATION",
    "settings_digest",
    "split_digest",
    "stamped",
    "values_digest",
    "without_credentials",
]

DIGEST_LENGTH = 16  # hex digits of each part: 64 bits, enough to tell one configuration from the next
NO_TRUST = "none"  # the trust part without proxy.upstream.trustedCa


def without_credentials(url: str) -> str:
    """`url` with its user info, if any, replaced by `<credentials>`: what a digest may see of a proxy URL."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable>"
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="<credentials>@" + parts.netloc.rpartition("@")[2]).geturl()


def values_digest(values: ProxyValues, trusted_ca: str | None) -> str:
    """`<values>-<trust>`: the sha256 of plain `values` (strings, not Outputs) with the URLs' credentials left out,
    then that of the trusted CA (`none` without one). Two parts, so that a reader can tell a CA rotation, which
    reaches a pod's mounted files but not a runtime that read them at start (the JVM, Node), from a change of the env.
    No credential reaches the hash, so the digest is no oracle for guessing one."""

    def text(value: Any) -> str:
        return "" if value is None else str(value)

    def url(value: Any) -> str:
        return "" if value is None else without_credentials(str(value))

    parts = (
        url(values.http_proxy),
        url(values.https_proxy),
        text(values.no_proxy),
        text(values.no_proxy_python),
        text(values.java_options),
        text(values.java_trust_options),
    )
    content = "\0".join(parts).encode()
    env = hashlib.sha256(content).hexdigest()[:DIGEST_LENGTH]
    trust = hashlib.sha256(trusted_ca.encode()).hexdigest()[:DIGEST_LENGTH] if trusted_ca else NO_TRUST
    return f"{env}-{trust}"


def split_digest(digest: str) -> tuple[str, str]:
    """A stamped digest's env and trust parts; a value of another form is all env (it never equals the current)."""
    env, sep, trust = digest.partition("-")
    return (env, trust) if sep else (digest, "")


def stamped(values: ProxyValues, settings: Settings) -> ProxyValues:
    """Plain `values` with their digest, which every consumer then stamps."""
    return replace(values, digest=values_digest(values, settings.trusted_ca))


def settings_digest(settings: Settings) -> str:
    """The current digest for plain settings (no run-time network): what `check` and `rollout` compare pods with."""
    from . import plain_values

    digest: str = plain_values(settings).digest
    return digest
