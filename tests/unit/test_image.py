"""The project's image: the tag mapping, the one place that names it, and the settings that default to it.

The image itself (built by scripts/image, as root, from Debian packages) is tested in the image lane (tests/image,
`pytest -m image`); these are the fast checks of what the settings and the scripts agree on, and of the OCI
writer on a small root filesystem.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import re
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from proxy_component.dataplane.image import (
    DEFAULT_IMAGE,
    REPOSITORY,
    TINYPROXY_ARCHIVE,
    TINYPROXY_COMMIT,
    TINYPROXY_SHA256,
    TINYPROXY_VERSION,
    USER_ID,
    tag_for,
)
from proxy_component.probe import probe_pod
from proxy_component.settings import image_is_mutable, parse_settings

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"name": "c", "podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}


@pytest.mark.parametrize(
    ("version", "tag"),
    [
        ("1.11.2-1", "1.11.2-1"),
        ("1.11.2-1+b1", "1.11.2-1_b1"),
        ("1:1.37.0-6+b9", "1_1.37.0-6_b9"),
        ("1.0~rc1-1", "1.0-rc1-1"),
        ("2.41-12+deb13u5", "2.41-12_deb13u5"),
    ],
)
def test_a_debian_version_becomes_a_docker_tag(version: str, tag: str) -> None:
    assert tag_for(version) == tag
    assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", tag)


@pytest.mark.parametrize("version", ["", "1.0 1", "-1", ".1", "1.0/1", "1" * 129])
def test_a_version_that_makes_no_tag_is_refused_by_name(version: str) -> None:
    with pytest.raises(ValueError, match="is not a Debian package version") as caught:
        tag_for(version)
    assert str(caught.value) == (
        f"{version!r} is not a Debian package version that maps to an image tag "
        "(expected e.g. 1.11.2-1: letters, digits and . + ~ : -, starting with a digit)"
    )


def test_both_containers_and_the_probe_pods_default_to_the_projects_image() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    assert DEFAULT_IMAGE == "ghcr.io/proxy-component/proxy:1.11.3-git-364cdb6-pc7"
    assert settings.deployment.image == settings.deployment.firewall.image == DEFAULT_IMAGE
    # the image's user (scripts/image reads USER_ID too) is the UID the settings run tinyproxy and the probes as
    assert settings.deployment.run_as_user == USER_ID == 61888
    pod = probe_pod(settings, "node-a", "run", 0, "true", 30)
    assert pod["spec"]["containers"][0]["image"] == DEFAULT_IMAGE


def test_check_takes_the_default_image_for_a_versioned_tag() -> None:
    """`image-mutable-tag` warns for a reference without a digest and without a digit in its tag: not this one."""
    assert not image_is_mutable(DEFAULT_IMAGE)
    assert image_is_mutable(f"{REPOSITORY}:latest")
    assert image_is_mutable(REPOSITORY)


def _pins(arch: str) -> dict[str, str]:
    lines = (ROOT / f"images/proxy/packages.{arch}").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_scripts_image_builds_the_reference_the_settings_default_to(arch: str) -> None:
    """scripts/image takes the repository and tag from proxy_component/dataplane/image.py; the Debian pins hold no tinyproxy,
    which is built from upstream's source."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/image"), "ref", arch], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{DEFAULT_IMAGE}\n", "")
    assert {"nftables", "busybox", "libc6"} <= set(_pins(arch))
    assert not [name for name in _pins(arch) if name.startswith("tinyproxy")]


def test_the_tag_names_upstreams_commit_and_the_archive_is_the_pinned_one() -> None:
    """The version (and so the tag) names upstream's commit; the shared archive of that commit has the pinned
    digest, and it is the one tinyproxy-sources' README lists for that commit."""
    assert f"1.11.3-git-{TINYPROXY_COMMIT[:7]}-pc7" == TINYPROXY_VERSION
    assert DEFAULT_IMAGE.endswith(f":{tag_for(TINYPROXY_VERSION)}")
    sources = ROOT.parent / "shared" / "tinyproxy-sources"
    assert hashlib.sha256((sources / TINYPROXY_ARCHIVE).read_bytes()).hexdigest() == TINYPROXY_SHA256
    assert f"{TINYPROXY_SHA256}  {TINYPROXY_ARCHIVE}" in (sources / "SHA256SUMS").read_text()
    assert f"| {TINYPROXY_ARCHIVE} | {TINYPROXY_COMMIT} |" in (sources / "README.md").read_text()


def test_the_build_root_pins_the_images_libc_for_both_architectures() -> None:
    """tinyproxy links against the image's own libc: the build root's libc6-dev (and arm64's) is the image's libc6."""
    lines = (ROOT / "images/proxy/build-packages").read_text().splitlines()
    build = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    for arch in ("amd64", "arm64"):
        libc = _pins(arch)["libc6"]
        assert build["libc6-dev" if arch == "amd64" else "libc6-dev:arm64"] == libc
    assert {"gcc", "gcc-aarch64-linux-gnu", "autoconf", "automake", "make", "patch"} <= set(build)


def test_the_pins_of_both_architectures_share_one_epoch() -> None:
    epochs = {
        re.search(r"^# epoch (\d+)$", (ROOT / f"images/proxy/packages.{arch}").read_text(), re.M).group(1)  # type: ignore[union-attr]
        for arch in ("amd64", "arm64")
    }
    assert len(epochs) == 1, epochs


def test_scripts_image_refuses_pins_that_bring_a_debian_tinyproxy(tmp_path: Path) -> None:
    """A pin file with Debian's tinyproxy would list a second tinyproxy, and its version, in the image's package
    database: the build stops before anything is built."""
    checkout = tmp_path / "checkout"
    for part in ("scripts/image", "proxy_component/dataplane/image.py", "images/proxy/packages.amd64"):
        (checkout / part).parent.mkdir(parents=True, exist_ok=True)
        (checkout / part).write_text((ROOT / part).read_text())
    pins = checkout / "images/proxy/packages.amd64"
    pins.write_text(pins.read_text() + "tinyproxy-bin=1.11.2-1\n")
    done = subprocess.run(["bash", str(checkout / "scripts/image"), "ref", "amd64"], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr == (
        "scripts/image: images/proxy/packages.amd64 pins tinyproxy-bin=1.11.2-1, but the image's tinyproxy is built "
        "from upstream's source (proxy_component/dataplane/image.py's TINYPROXY_COMMIT): remove it\n"
    )


def test_the_repository_is_named_in_one_source_file() -> None:
    """scripts/image, the workflow and the settings read it from proxy_component/dataplane/image.py; none spells it again."""
    sources = [
        *(ROOT / "proxy_component").rglob("*.py"),
        *(ROOT / "scripts").iterdir(),
        *(ROOT / "images").rglob("*"),
        *(ROOT / ".github/workflows").iterdir(),
    ]
    naming = sorted(str(p.relative_to(ROOT)) for p in sources if p.is_file() and REPOSITORY in p.read_text())
    assert naming == ["proxy_component/dataplane/image.py"]


def _oci() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oci", ROOT / "images/proxy/oci.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rootfs(path: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in (("./etc/passwd", b"root:x:0:0::/:/bin/sh\n"), ("./usr/bin/tool", b"#!/bin/sh\n")):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_oci_writer_gives_the_same_archive_for_the_same_root(tmp_path: Path) -> None:
    oci = _oci()
    rootfs = _rootfs(tmp_path / "rootfs.tar")
    args = {"ref": "registry.example/proxy:1.0-1", "arch": "arm64", "user": "61888:61888", "epoch": 1_800_000_000}
    first = oci.build(rootfs, tmp_path / "a.tar", labels={"a": "b"}, **args)
    second = oci.build(rootfs, tmp_path / "b.tar", labels={"a": "b"}, **args)
    assert first == second
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as archive:
        assert {m.mtime for m in archive.getmembers()} == {1_800_000_000}
        files = {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}  # type: ignore[union-attr]
    index = json.loads(files["index.json"])
    [entry] = index["manifests"]
    assert entry["digest"] == first
    assert entry["annotations"] == {
        "io.containerd.image.name": "registry.example/proxy:1.0-1",
        "org.opencontainers.image.ref.name": "1.0-1",
    }
    manifest_bytes = files[f"blobs/sha256/{first.removeprefix('sha256:')}"]
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == first
    manifest = json.loads(manifest_bytes)
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"])
    assert config["architecture"] == "arm64"
    assert config["created"] == "2027-01-15T08:00:00Z"
    assert config["config"]["User"] == "61888:61888"
    assert config["config"]["Env"] == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(rootfs.read_bytes()).hexdigest()]


def _deb(archives: Path, name: str, version: str, arch: str = "all") -> None:
    """A real, empty .deb of `name` at `version` (dpkg-deb --build), as apt leaves them for the extract hook."""
    tree = archives.parent / f"tree-{name}-{arch}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: t <t@example.org>\nDescription: t\n"
    )
    subprocess.run(
        ["dpkg-deb", "--build", str(tree), str(archives / f"{name}_{arch}.deb")], check=True, capture_output=True
    )


@pytest.fixture
def extracted(tmp_path: Path) -> Path:
    archives = tmp_path / "root/var/cache/apt/archives"
    archives.mkdir(parents=True)
    _deb(archives, "tinyproxy-bin", "1.11.2-1")
    _deb(archives, "libc6", "2.41-12+deb13u5")
    return tmp_path / "root"


def test_the_extract_step_writes_the_dpkg_database_of_the_pinned_packages(extracted: Path, tmp_path: Path) -> None:
    pins = tmp_path / "packages.amd64"
    pins.write_text("# epoch 1\nlibc6=2.41-12+deb13u5\ntinyproxy-bin=1.11.2-1\n")
    done = subprocess.run(["sh", str(ROOT / "images/proxy/rootfs.sh"), "extract", str(extracted)],
                          env={"PATH": "/usr/bin:/bin", "IMAGE_LOCK": str(pins)}, capture_output=True, text=True)  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    status = (extracted / "var/lib/dpkg/status").read_text().split("\n\n")
    assert [p.splitlines()[:3] for p in status if p] == [
        ["Package: libc6", "Status: install ok installed", "Version: 2.41-12+deb13u5"],
        ["Package: tinyproxy-bin", "Status: install ok installed", "Version: 1.11.2-1"],
    ]


def test_the_extract_step_refuses_packages_that_are_not_the_pins(extracted: Path, tmp_path: Path) -> None:
    """A dependency the mirror added, or a version it moved, stops the build and is named."""
    pins = tmp_path / "packages.amd64"
    pins.write_text("# epoch 1\nlibc6=2.41-12+deb13u4\n")
    done = subprocess.run(["sh", str(ROOT / "images/proxy/rootfs.sh"), "extract", str(extracted)],
                          env={"PATH": "/usr/bin:/bin", "IMAGE_LOCK": str(pins)}, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == (
        f"images/proxy/rootfs.sh: the mirror gave other packages than {pins} pins (run: scripts/image lock):\n"
        "  pinned: libc6=2.41-12+deb13u4\n"
        "  got:    libc6=2.41-12+deb13u5\n"
        "  got:    tinyproxy-bin=1.11.2-1\n"
    )
    assert not (extracted / "var/lib/dpkg/status").exists()


def test_the_extract_step_names_a_package_of_another_architecture_with_it(tmp_path: Path) -> None:
    """The build root holds amd64 and arm64 packages of one name (libc6-dev): the lock tells them apart."""
    archives = tmp_path / "root/var/cache/apt/archives"
    archives.mkdir(parents=True)
    _deb(archives, "libc6-dev", "2.41-12+deb13u5", "amd64")
    _deb(archives, "libc6-dev", "2.41-12+deb13u5", "arm64")
    _deb(archives, "autoconf", "2.72-3.1")
    out = tmp_path / "lock"
    done = subprocess.run(["sh", str(ROOT / "images/proxy/rootfs.sh"), "extract", str(tmp_path / "root")],
                          env={"PATH": "/usr/bin:/bin", "IMAGE_LOCK_OUT": str(out), "IMAGE_ARCH": "amd64"},
                          capture_output=True, text=True)  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert out.read_text().splitlines() == [
        "autoconf=2.72-3.1",
        "libc6-dev:arm64=2.41-12+deb13u5",
        "libc6-dev=2.41-12+deb13u5",
    ]
