"""The SPDX 2.3 document that declares the image's tinyproxy, which no Debian package does any more.

    python3 images/proxy/spdx.py --version V --commit SHA --arch ARCH --epoch SOURCE_DATE_EPOCH \
        --binary PATH --source ARCHIVE [PATCH ...] > tinyproxy.spdx.json

scripts/image writes it to /usr/share/doc/tinyproxy/tinyproxy.spdx.json, where image scanners (Trivy, Syft) find SBOM
documents in a root filesystem: they then judge upstream tinyproxy at that commit, with the project's patches named,
not Debian's tinyproxy-bin 1.11.2-1, which the image's dpkg database no longer lists. Deterministic: the creation
time is the epoch and the namespace is made of the digests. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

REPOSITORY = "https://github.com/tinyproxy/tinyproxy"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def document(
    version: str, commit: str, arch: str, epoch: int, binary: Path, source: Path, patches: list[Path]
) -> dict[str, object]:
    binary_sha = _sha256(binary)
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch_list = "; ".join(f"{p.name} (sha256 {_sha256(p)})" for p in patches) or "none"
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"tinyproxy-{version}-{arch}",
        "documentNamespace": f"https://proxy-component.invalid/spdx/tinyproxy/{version}/{arch}/{binary_sha}",
        "creationInfo": {"created": created, "creators": ["Tool: proxy-component-scripts-image"]},
        "packages": [
            {
                "SPDXID": "SPDXRef-Package-tinyproxy",
                "name": "tinyproxy",
                "versionInfo": version,
                "supplier": "Organization: proxy-component",
                "originator": "Organization: tinyproxy",
                "downloadLocation": f"git+{REPOSITORY}.git@{commit}",
                "sourceInfo": (
                    f"built from upstream commit {commit} (git archive, sha256 {_sha256(source)}) with the patches: "
                    f"{patch_list}"
                ),
                "filesAnalyzed": False,
                "licenseConcluded": "GPL-2.0-or-later",
                "licenseDeclared": "GPL-2.0-or-later",
                "copyrightText": "NOASSERTION",
                "primaryPackagePurpose": "APPLICATION",
                "checksums": [{"algorithm": "SHA256", "checksumValue": binary_sha}],
                "externalRefs": [
                    {
                        "referenceCategory": "PACKAGE-MANAGER",
                        "referenceType": "purl",
                        "referenceLocator": f"pkg:github/tinyproxy/tinyproxy@{commit}",
                    }
                ],
            }
        ],
        "relationships": [
            {
                "spdxElementId": "SPDXRef-DOCUMENT",
                "relationshipType": "DESCRIBES",
                "relatedSpdxElement": "SPDXRef-Package-tinyproxy",
            }
        ],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--epoch", required=True, type=int)
    parser.add_argument("--binary", required=True, type=Path)
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("patches", nargs="*", type=Path)
    args = parser.parse_args(argv)
    doc = document(args.version, args.commit, args.arch, args.epoch, args.binary, args.source, sorted(args.patches))
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
