"""The image lane (pytest -m image): the project's image built by scripts/image (as root, with mmdebstrap), unpacked,
and its tools run from its own root filesystem. Never skipped: a build that fails, or a missing tool, fails it."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.image)


@dataclass(frozen=True)
class UnderTest:
    """A tinyproxy binary the framing and reload suites run: `image` is the image's own (its root filesystem's
    loader and libc, no chroot, so host paths work), `asan` and `tsan` the same sources and patches built for this
    machine with AddressSanitizer and UndefinedBehaviorSanitizer, or ThreadSanitizer (`scripts/image tinyproxy
    host-asan|host-tsan`)."""

    kind: str
    path: Path

    @property
    def sanitizer(self) -> str:
        return "none" if self.kind == "image" else self.kind


def _built(*args: str) -> Path:
    done = subprocess.run(["bash", str(ROOT / "scripts/image"), *args], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"scripts/image {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.splitlines()[-1])


def _image_runner(directory: Path) -> Path:
    """A script that runs the image's tinyproxy with the image's own loader and libraries."""
    from tests.image.test_build import _image  # the lane's session-wide unpacked image

    root = _image("amd64", _FACTORY[0]).root
    libs = ":".join(str(root / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"))
    loader = root / "usr/lib64/ld-linux-x86-64.so.2"
    script = directory / "tinyproxy"
    script.write_text(f'#!/bin/sh\nexec "{loader}" --library-path "{libs}" "{root}/usr/bin/tinyproxy" "$@"\n')
    script.chmod(0o755)
    return script


_FACTORY: list[pytest.TempPathFactory] = []


@pytest.fixture(scope="module", params=["image", "asan", "tsan"])
def tinyproxy_under_test(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> UnderTest:
    """Each suite runs three times: the image's binary, then its ASan+UBSan and TSan builds (`-k image`, `-k asan`
    or `-k tsan` picks one)."""
    kind: str = request.param
    if kind == "image":
        _FACTORY[:] = [tmp_path_factory]
        return UnderTest(kind, _image_runner(tmp_path_factory.mktemp("image-tinyproxy")))
    return UnderTest(kind, _built("tinyproxy", f"host-{kind}"))
