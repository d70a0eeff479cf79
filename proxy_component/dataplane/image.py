"""The project's own image: where it is published, which tinyproxy it carries, and how a version becomes a tag.

One image serves the proxy container (tinyproxy), the firewall init container (nft, sh) and the `check --probe`
pods (busybox's sh, nc, base64, timeout). `images/proxy/` holds its package list and `scripts/image` builds it;
both read the repository and the tinyproxy version from here (this file imports nothing, so `scripts/image` runs it
with a plain `python3`), and the settings default to `DEFAULT_IMAGE`.
"""

from __future__ import annotations

import sys

__all__ = [
    "DEFAULT_IMAGE",
    "REPOSITORY",
    "TINYPROXY_ARCHIVE",
    "TINYPROXY_COMMIT",
    "TINYPROXY_SHA256",
    "TINYPROXY_VERSION",
    "USER_ID",
    "tag_for",
]

REPOSITORY = "ghcr.io/proxy-component/proxy"
# tinyproxy is built from upstream's source (scripts/image, images/proxy/tinyproxy/): the archive of this commit
# (`git archive`, in ../shared/tinyproxy-sources), checked against this digest, with the project's patches
# (images/proxy/tinyproxy/patches) at this level. The version names all three; the image's tag is made from it.
TINYPROXY_COMMIT = "364cdb67e0ea00a8e4a7037e2693e0711e816adb"
TINYPROXY_ARCHIVE = "tinyproxy-364cdb6.tar.gz"
TINYPROXY_SHA256 = "82e263d49decf3f3cc4e8c82c8e2e671de234ac667bbf8ee9803fd91c8788001"
_UPSTREAM_VERSION = "1.11.3"  # the archive's VERSION file: release 1.11.3 and the commits after it
_PATCH_LEVEL = 7
TINYPROXY_VERSION = f"{_UPSTREAM_VERSION}-git-{TINYPROXY_COMMIT[:7]}-pc{_PATCH_LEVEL}"
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


DEFAULT_IMAGE = f"{REPOSITORY}:{tag_for(TINYPROXY_VERSION)}"


if (
    __name__ == "__main__"
):  # scripts/image: `python3 proxy_component/dataplane/image.py` prints what it needs, one per line
    print(
        REPOSITORY,
        TINYPROXY_VERSION,
        tag_for(TINYPROXY_VERSION),
        USER_ID,
        TINYPROXY_COMMIT,
        TINYPROXY_ARCHIVE,
        TINYPROXY_SHA256,
        sep="\n",
    )
    sys.exit(0)
