"""The Kyverno lane (pytest -m kyverno): the Kyverno CLI built by scripts/kyverno from its Go module, `kyverno test`
over the shared table of injection cases. Never skipped: a missing CLI fails the lane with scripts/kyverno's reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.kyverno)


@pytest.fixture(scope="session")
def kyverno() -> Path:
    """scripts/kyverno: the kyverno binary (a warm cache builds nothing)."""
    result = subprocess.run(["bash", str(ROOT / "scripts/kyverno")], capture_output=True, text=True, timeout=5400)
    if result.returncode != 0:
        pytest.fail(f"scripts/kyverno failed:\n{result.stderr}")
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path.is_file(), f"scripts/kyverno printed {path}, which is not a file"
    return path


@pytest.fixture(scope="session")
def kyverno_controllers() -> tuple[Path, Path]:
    """scripts/kyverno admission background: Kyverno's admission and background controllers (Kyverno's CRDs of the
    same version beside them, crds/)."""
    result = subprocess.run(["bash", str(ROOT / "scripts/kyverno"), "admission", "background"], capture_output=True,
                            text=True, timeout=5400)  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"scripts/kyverno admission background failed:\n{result.stderr}")
    admission, background = (Path(line) for line in result.stdout.strip().splitlines()[-2:])
    for path in (admission, background, admission.parent / "crds"):
        assert path.exists(), f"scripts/kyverno printed {path}, which does not exist"
    return admission, background
