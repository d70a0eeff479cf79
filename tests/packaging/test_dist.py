"""What PyPI would get (pytest -m package, run by scripts/package): the sdist and the wheel built by `python -m build`
(the wheel from the unpacked sdist, as PyPI users' pip would build it) out of a copy of this checkout's files with the
litter a working checkout has planted beside them, `twine check --strict`, the files each holds and must not hold, the
metadata PyPI shows, and the installed wheel running `render` in a clean venv away from the checkout."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from proxy_component._release import project_version
from proxy_component.dataplane.image import REPOSITORY
from tests.conftest import ROOT

pytestmark = pytest.mark.package

VERSION = project_version(ROOT)
DIST_NAME = f"proxy_component-{VERSION}"
# What a working checkout has beside its files, none of which may reach PyPI: the plugin's venv
# (`pulumi package add <checkout>/provider`), the dev venvs, caches, stale build output and an old egg-info whose
# SOURCES.txt names a file that no longer exists.
LITTER = {
    "provider/venv/lib/python3.11/site-packages/pulumi/__init__.py": "",
    "provider/venv/pyvenv.cfg": "home = /usr/bin\n",
    "provider/__pycache__/__main__.cpython-311.pyc": "",
    ".venv/pyvenv.cfg": "home = /usr/bin\n",
    ".venv-engine/pyvenv.cfg": "home = /usr/bin\n",
    "proxy_component/__pycache__/cli.cpython-311.pyc": "",
    ".mypy_cache/3.10/cache.db": "",
    ".pytest_cache/v/cache/nodeids": "[]",
    ".ruff_cache/CACHEDIR.TAG": "",
    "build/lib/proxy_component/stale.py": "raise SystemExit('stale build output')\n",
    "dist/proxy_component-0.0.1-py3-none-any.whl": "",
    "proxy_component.egg-info/SOURCES.txt": "proxy_component/stale.py\ntests/conftest.py\n",
    "examples/typescript/node_modules/x/index.js": "",
    "rendered/ConfigMap-x.yaml": "",
}
FORBIDDEN = ("tests/", "bench/", "scripts/", "examples/", ".github/", ".ci/", "images/", "provider/venv/", ".venv",
             "__pycache__", ".pyc", "_cache/", "build/", "dist/", "node_modules/", "rendered/", "proxy_component/stale.py")  # fmt: skip


def _sources() -> list[str]:
    """The checkout's files as git sees them (tracked, and new ones not ignored)."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return [name for name in listing.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` of a copy of the checkout with LITTER planted: the folder with the sdist and the wheel."""
    work = tmp_path_factory.mktemp("package")
    src = work / "src"
    for name in _sources():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    for name, content in LITTER.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(content)
    out = work / "dist"
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"{DIST_NAME}-py3-none-any.whl", f"{DIST_NAME}.tar.gz"]
    return out


def _wheel_files(dist: Path) -> list[str]:
    with zipfile.ZipFile(dist / f"{DIST_NAME}-py3-none-any.whl") as wheel:
        return wheel.namelist()


def _sdist_files(dist: Path) -> list[str]:
    with tarfile.open(dist / f"{DIST_NAME}.tar.gz") as sdist:
        names = [m.name for m in sdist.getmembers() if m.isfile()]
    assert all(name.startswith(f"{DIST_NAME}/") for name in names), names
    return [name.removeprefix(f"{DIST_NAME}/") for name in names]


def _package_sources() -> set[str]:
    return {name for name in _sources() if name.startswith("proxy_component/")}


def test_twine_check_strict_passes(dist: Path) -> None:
    checked = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2, checked.stdout


def test_the_wheel_holds_the_package_its_data_and_its_license_and_nothing_else(dist: Path) -> None:
    files = _wheel_files(dist)
    package = {name for name in files if not name.startswith(f"{DIST_NAME}.dist-info/")}
    assert package == _package_sources()  # every module, py.typed, data/, the provider; no stray file
    assert {"proxy_component/py.typed", "proxy_component/data/example.yaml", "proxy_component/provider.py",
            "proxy_component/provider_types.py", "proxy_component/cli.py"} <= package  # fmt: skip
    info = {name.removeprefix(f"{DIST_NAME}.dist-info/") for name in files} - package
    assert info == {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt", "licenses/LICENSE"}
    for name in files:
        assert not any(bad in name for bad in FORBIDDEN), name


def test_the_sdist_holds_what_a_rebuild_and_the_plugin_need_and_nothing_else(dist: Path) -> None:
    files = set(_sdist_files(dist))
    plugin = {"provider/PulumiPlugin.yaml", "provider/__main__.py", "provider/requirements.txt", "provider/schema.json"}
    top = {"PKG-INFO", "pyproject.toml", "setup.cfg", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in",
           "constraints/engine.txt"}  # fmt: skip
    egg_info = {f"proxy_component.egg-info/{name}" for name in ("PKG-INFO", "SOURCES.txt", "dependency_links.txt",
                "entry_points.txt", "requires.txt", "top_level.txt")}  # fmt: skip
    assert files == _package_sources() | plugin | top | egg_info
    for name in files - egg_info:
        assert not any(bad in name for bad in FORBIDDEN), name


def test_the_metadata_pypi_shows(dist: Path) -> None:
    with zipfile.ZipFile(dist / f"{DIST_NAME}-py3-none-any.whl") as wheel:
        metadata = email.parser.Parser().parsestr(wheel.read(f"{DIST_NAME}.dist-info/METADATA").decode())
    assert metadata["Name"] == "proxy-component"
    assert metadata["Version"] == VERSION
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Requires-Python"] == ">=3.10"
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload() == (ROOT / "README.md").read_text()
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it (PEP 639)
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL") or [])
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    organization = REPOSITORY.split("/")[1]  # the image's registry organization is the repository's owner
    assert all(u.startswith(f"https://github.com/{organization}/proxy-component") for u in urls.values()), urls
    requires = metadata.get_all("Requires-Dist") or []
    assert any(r.startswith("pulumi<4,>=") or r.startswith("pulumi>=") for r in requires), requires


def test_the_installed_wheel_renders_in_a_clean_venv(dist: Path, tmp_path: Path) -> None:
    """What a user gets from `pip install proxy-component`: the command on its embedded example, no checkout on
    sys.path, py.typed beside the installed package."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin/pip"), "install", "-q", str(dist / f"{DIST_NAME}-py3-none-any.whl")],
                               capture_output=True, text=True, timeout=1200)  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    away = tmp_path / "away"
    away.mkdir()
    rendered = subprocess.run([str(venv / "bin/proxy-component"), "render"], cwd=away, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered.stdout)]
    assert kinds == ["ConfigMap", "DaemonSet", "Service", "ConfigMap"]
    where = subprocess.run(
        [str(venv / "bin/python"), "-c",
         "import importlib.metadata as m, pathlib, proxy_component as p; "
         "print(p.__file__); print((pathlib.Path(p.__file__).parent / 'py.typed').is_file()); "
         "print(m.version('proxy-component'))"],
        cwd=away, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    path, typed, version = where.stdout.splitlines()
    assert path.startswith(str(venv)), path
    assert "site-packages" in path
    assert typed == "True"
    assert version == VERSION
