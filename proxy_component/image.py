"""The project's own image: where it is published, which tinyproxy it carries, and how a Debian version becomes a tag.

One image serves the proxy container (tinyproxy), the firewall init container (nft, sh) and the `check --probe`
pods (busybox's sh, nc, base64, timeout). `images/proxy/` holds its package list and `scripts/image` builds it;
both read the repository and the tinyproxy version from here (this file imports nothing, so `scripts/image` runs it
with a plain `python3`), and the settings default to `DEFAULT_IMAGE`.
"""

from __future__ import annotations

import sys

__all__ = ["DEFAULT_IMAGE", "REPOSITORY", "TINYPROXY_DEBIAN_VERSION", "USER_ID", "tag_for"]

REPOSITORY = "ghcr.io/proxy-component/proxy"
# The Debian version of tinyproxy in the image; images/proxy/packages.<arch> pin tinyproxy-bin at it (or at a
# binary-only rebuild of it, +bN).
TINYPROXY_DEBIAN_VERSION = "1.11.2-1"
# The image's user and group, and the settings' default deployment.runAsUser.
USER_ID = 61888

# A Docker tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}; a Debian version may also hold `:` (after the epoch), `+` and
# `~`, and never `_`. Each becomes `_`, `_` and `-`: e.g. 1:1.37.0-6+b9 -> 1_1.37.0-6_b9, 1.0~rc1-1 -> 1.0-rc1-1.
_TAG_CHARS = str.maketrans({":": "_", "+": "_", "~": "-"})
_ALLOWED = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def tag_for(debian_version: str) -> str:
    """The image tag for a Debian package version: `:` and `+` become `_`, `~` becomes `-`; errors name the value."""
    tag = debian_version.translate(_TAG_CHARS)
    if not tag or len(tag) > 128 or not set(tag) <= _ALLOWED or tag[0] in ".-":
        raise ValueError(
            f"{debian_version!r} is not a Debian package version that maps to an image tag "
            "(expected e.g. 1.11.2-1: letters, digits and . + ~ : -, starting with a digit)"
        )
    return tag


DEFAULT_IMAGE = f"{REPOSITORY}:{tag_for(TINYPROXY_DEBIAN_VERSION)}"


if __name__ == "__main__":  # scripts/image: `python3 proxy_component/image.py` prints what it needs, one per line
    print(REPOSITORY, TINYPROXY_DEBIAN_VERSION, tag_for(TINYPROXY_DEBIAN_VERSION), USER_ID, sep="\n")
    sys.exit(0)
