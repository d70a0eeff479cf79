"""The image lane (pytest -m image): the project's image built by scripts/image (as root, with mmdebstrap), unpacked,
and its tools run from its own root filesystem. Never skipped: a build that fails, or a missing tool, fails it."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.image)
