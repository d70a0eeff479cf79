"""The Helm lane (pytest -m helm): Helm 3 and Helm 4 built by scripts/helm and the real charts of ../shared/charts,
unpacked once per session. Every test that renders runs once with each Helm (the `helm` fixture's parameter).
Never skipped: a missing Helm or chart fails the lane with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helm.lane import HELM_MAJORS, HelmBuildError, Lane, build_helm, extract_charts


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.helm)


@pytest.fixture(scope="session", params=HELM_MAJORS, ids=lambda major: f"helm{major}")
def helm(request: pytest.FixtureRequest) -> Path:
    try:
        path = build_helm(request.param)
    except HelmBuildError as exc:
        pytest.fail(str(exc))
    assert path.is_file(), f"scripts/helm printed {path}, which is not a file"
    return path


@pytest.fixture(scope="session")
def charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return extract_charts(tmp_path_factory.mktemp("charts"))


@pytest.fixture(scope="session")
def lane(helm: Path, charts: dict[str, Path]) -> Lane:
    return Lane(helm, charts)
