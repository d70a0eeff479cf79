"""A root filesystem tarball (mmdebstrap's) into a one-layer OCI image archive, byte for byte the same for the same input.

    python3 images/proxy/oci.py ROOTFS.tar OUT.tar --ref REPOSITORY:TAG --arch amd64 --user 61888:61888 \
        --epoch SOURCE_DATE_EPOCH [--label key=value ...]
    python3 images/proxy/oci.py index OUT.tar AMD64.tar ARM64.tar --ref REPOSITORY:TAG --epoch SOURCE_DATE_EPOCH

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) in a tar: `ctr images import`,
`skopeo copy oci-archive:OUT.tar docker://...` and `docker load` read it. index.json names the image twice, as
BuildKit's OCI exporter does: `io.containerd.image.name` (the whole reference, what containerd imports it as) and
`org.opencontainers.image.ref.name` (the tag, what `oci-archive:OUT.tar:TAG` selects). Every time stamp is the
epoch, every owner root, entries sorted, gzip without a name or time: the same rootfs gives the same digest.
Prints the manifest's digest (what a registry reports after a push that keeps the manifest).
Standard library only, so that the release workflow and this machine build it the same way.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import sys
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _blob(blobs: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layer(rootfs: Path, blobs: Path) -> tuple[dict[str, object], str]:
    """The gzipped layer (no file name, mtime 0, level 9) and the diff_id, the digest of the uncompressed tar."""
    plain = hashlib.sha256()
    with tempfile.TemporaryFile() as packed:
        with rootfs.open("rb") as src, gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
            while chunk := src.read(1 << 20):
                plain.update(chunk)
                gz.write(chunk)
        packed.seek(0)
        digest = hashlib.sha256()
        size = 0
        tmp = blobs / "layer.partial"
        with tmp.open("wb") as out:
            while chunk := packed.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
        tmp.rename(blobs / digest.hexdigest())
    return {
        "mediaType": MEDIA_LAYER,
        "digest": f"sha256:{digest.hexdigest()}",
        "size": size,
    }, f"sha256:{plain.hexdigest()}"


def build(rootfs: Path, out: Path, ref: str, arch: str, user: str, epoch: int, labels: dict[str, str]) -> str:
    created = datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    tag = ref.rsplit(":", 1)[1]
    with tempfile.TemporaryDirectory() as tmp:
        layout = Path(tmp)
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layer, diff_id = _layer(rootfs, blobs)
        config = {
            "architecture": arch,
            "os": "linux",
            "created": created,
            "config": {
                "User": user,
                "Env": [f"PATH={PATH}"],
                "Entrypoint": ["/usr/bin/tinyproxy"],
                "Cmd": ["-d", "-c", "/etc/tinyproxy/tinyproxy.conf"],
                "WorkingDir": "/",
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": created, "created_by": "scripts/image (mmdebstrap --variant=extract)"}],
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {"mediaType": MEDIA_CONFIG, **_blob(blobs, _json(config))},
            "layers": [layer],
            "annotations": {"org.opencontainers.image.created": created},
        }
        described = {"mediaType": MEDIA_MANIFEST, **_blob(blobs, _json(manifest))}
        top = {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    **described,
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
                }
            ],
        }
        _write_archive(layout, top, out, epoch)
    return str(described["digest"])


def _write_archive(layout: Path, index: dict[str, object], out: Path, epoch: int) -> None:
    """index.json and oci-layout into `layout`, then the layout as a tar: sorted, root-owned, every time the epoch."""
    (layout / "index.json").write_bytes(_json(index))
    (layout / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(layout.rglob("*"), key=lambda p: p.relative_to(layout).as_posix()):
            info = archive.gettarinfo(str(path), arcname=path.relative_to(layout).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            info.mode = 0o755 if path.is_dir() else 0o644
            if path.is_file():
                with path.open("rb") as data:
                    archive.addfile(info, data)
            else:
                archive.addfile(info)
    shutil.move(partial, out)


def index(archives: list[Path], out: Path, ref: str, epoch: int) -> str:
    """One archive holding the images of `archives` (one architecture each) under an image index, named `ref`:
    `skopeo copy --all` pushes the index and every manifest, a runtime pulls its own architecture.
    Prints the index's digest."""
    tag = ref.rsplit(":", 1)[1]
    with tempfile.TemporaryDirectory() as tmp:
        layout = Path(tmp) / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        manifests = []
        for number, archive in enumerate(archives):
            unpacked = Path(tmp) / str(number)
            with tarfile.open(archive) as source:
                if hasattr(tarfile, "data_filter"):
                    source.extractall(unpacked, filter="data")
                else:  # a Python without extraction filters; these archives are the ones build() wrote
                    source.extractall(unpacked)
            for blob in (unpacked / "blobs" / "sha256").iterdir():
                shutil.copyfile(blob, blobs / blob.name)
            [entry] = json.loads((unpacked / "index.json").read_bytes())["manifests"]
            manifests.append({k: entry[k] for k in ("mediaType", "digest", "size", "platform")})
        manifests.sort(key=lambda m: json.dumps(m["platform"], sort_keys=True))
        nested = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests}
        described = {"mediaType": MEDIA_INDEX, **_blob(blobs, _json(nested))}
        top = {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    **described,
                    "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
                }
            ],
        }
        _write_archive(layout, top, out, epoch)
    return str(described["digest"])


def main(argv: list[str]) -> int:
    if argv[:1] == ["index"]:
        parser = argparse.ArgumentParser(prog="oci.py index", description=index.__doc__)
        parser.add_argument("out", type=Path)
        parser.add_argument("archives", type=Path, nargs="+")
        parser.add_argument("--ref", required=True)
        parser.add_argument("--epoch", type=int, required=True)
        found = parser.parse_args(argv[1:])
        print(index(found.archives, found.out, found.ref, found.epoch))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--user", required=True)
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--label", action="append", default=[])
    args = parser.parse_args(argv)
    labels = dict(item.split("=", 1) for item in args.label)
    print(build(args.rootfs, args.out, args.ref, args.arch, args.user, args.epoch, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
