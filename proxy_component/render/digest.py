"""The digest of what a workload is given: the proxy values (every rendering) and the trusted CA.

Whatever injects the env stamps it on the pod template or the pod as `VALUES_ANNOTATION`, so that `check` and
`rollout` can tell a running pod that holds old values (its digest is not the current one) from a current one,
without reading a container's env (the API does not show what a running process holds).

The digest covers every value any container may get, whatever its runtime selection: the proxy URLs, both NO_PROXY
renderings, both JDK_JAVA_OPTIONS values and the trusted CA's PEM. A change to any of them makes every stamped pod
stale. When the URLs carry credentials the digest is scrypt (as the proxy's own config digest is): the annotation
is plain text, so guessing a password from it must be costly.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

from ..settings import Settings
from .env import REFERENCE, VALUES_ANNOTATION, ProxyValues

__all__ = ["REFERENCE", "VALUES_ANNOTATION", "settings_digest", "stamped", "values_digest"]

DIGEST_LENGTH = 16  # hex digits shown: 64 bits, enough to tell one configuration from the next


def values_digest(values: ProxyValues, trusted_ca: str | None, credentials: bool) -> str:
    """The digest of plain `values` (strings, not Outputs) and the trusted CA; scrypt with `credentials`."""

    def text(value: Any) -> str:
        return "" if value is None else str(value)

    parts = (
        values.http_proxy,
        values.https_proxy,
        values.no_proxy,
        values.no_proxy_python,
        values.java_options,
        values.java_trust_options,
        trusted_ca,
    )
    content = "\0".join(map(text, parts)).encode()
    if credentials:
        raw = hashlib.scrypt(content, salt=b"proxy-component/values", n=2**14, r=8, p=1, dklen=32)
        return raw.hex()[:DIGEST_LENGTH]
    return hashlib.sha256(content).hexdigest()[:DIGEST_LENGTH]


def stamped(values: ProxyValues, settings: Settings) -> ProxyValues:
    """Plain `values` with their digest, which every consumer then stamps."""
    return replace(values, digest=values_digest(values, settings.trusted_ca, settings.has_credentials))


def settings_digest(settings: Settings) -> str:
    """The current digest for plain settings (no run-time network): what `check` and `rollout` compare pods with."""
    from . import plain_values

    digest: str = plain_values(settings).digest
    return digest
