"""`pulumi package add` of this repository at a release tag, as a user of another language adds it, under the real
engine (pytest -m engine): the repository served over git's smart HTTP with TLS on 127.0.0.1 (tests/engine/git_server),
`pulumi package add https://127.x.y.z/proxy-component/proxy-component/provider@vX.Y.Z` (the shape of
`github.com/proxy-component/proxy-component/provider@vX.Y.Z`). The plugin's venv holds exactly the pinned versions
(provider/requirements.txt: the package at the tag, the engine lane's Pulumi SDKs), and the programs run the tagged
code: neither this checkout's nor that of the commit after the tag on main, each of which sets another default port.
Also the source forms the CLI refuses, with its messages. Only PyPI is reached (pip, for the plugin's venv).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy_component._release import bump, engine_pins, project_version

from .conftest import ROOT, Project, build_engine
from .git_server import GitServer, serve_git

pytestmark = pytest.mark.engine

PORT_LINE = "    port: ListenPort = {}"  # settings.py: ProxySettings.port, the proxy URL's port
CHECKOUT_PORT, TAGGED_PORT, LATER_PORT = 8888, 8877, 8899
REPO = "proxy-component/proxy-component"


def _released_version() -> str:
    """The version the checkout is heading to (X.Y.Z of X.Y.Z.devN), else the next patch."""
    version = project_version(ROOT)
    if ".dev" in version:
        return version.split(".dev")[0]
    major, minor, patch = version.split(".")
    return f"{major}.{minor}.{int(patch) + 1}"


RELEASED = _released_version()


def _git(work: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(work), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout


def _set_port(work: Path, port: int) -> None:
    settings = work / "proxy_component/settings.py"
    text = settings.read_text()
    current = re.findall(r"^    port: ListenPort = (\d+)$", text, re.M)
    assert len(current) == 1, "settings.py: ProxySettings.port moved; update this test"
    settings.write_text(text.replace(PORT_LINE.format(current[0]), PORT_LINE.format(port)))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """This checkout's HEAD with two commits on top, as a bare repository on the git server: the release (the
    version bumped by proxy_component._release, the default port TAGGED_PORT) tagged vRELEASED, then a later commit
    on main (LATER_PORT, the next dev version), as a repository looks a while after a release."""
    work = tmp_path_factory.mktemp("release-repo")
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", "--no-tags", "--single-branch", str(ROOT), str(clone)], check=True,
                   timeout=300)  # fmt: skip
    _git(clone, "config", "user.email", "release@test.invalid")
    _git(clone, "config", "user.name", "release test")
    _git(clone, "checkout", "-q", "-B", "main")
    changelog = clone / "CHANGELOG.md"
    if f"## {RELEASED} (unreleased)" not in changelog.read_text():
        changelog.write_text(changelog.read_text().replace("# Changelog\n", f"# Changelog\n\n## {RELEASED} "
                                                                            "(unreleased)\n\n- A test release.\n", 1))  # fmt: skip
    bump(clone, RELEASED)
    _set_port(clone, TAGGED_PORT)
    _git(clone, "commit", "-qam", f"release {RELEASED}")
    _git(clone, "tag", f"v{RELEASED}")
    check = subprocess.run(["python3", "proxy_component/_release.py", "check", f"v{RELEASED}"], cwd=clone,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0, check.stderr
    major, minor, patch = RELEASED.split(".")
    bump(clone, f"{major}.{minor}.{int(patch) + 1}.dev0")
    _set_port(clone, LATER_PORT)
    _git(clone, "commit", "-qam", "after the release")
    root = work / "served"
    (root / REPO).parent.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(clone), str(root / f"{REPO}.git")], check=True, timeout=300)
    with serve_git(root, work) as server:
        yield server


@pytest.fixture(scope="module")
def hosts() -> Path:
    """The CLI, the Python host (the plugin), the Kubernetes provider and the YAML and Node.js hosts (the programs)."""
    return build_engine("cli", "python", "kubernetes", "yaml", "nodejs")


@pytest.fixture(scope="module")
def pulumi_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plugin folder for the module's projects: the first `package add` installs the plugin, the next reuse it."""
    return tmp_path_factory.mktemp("pulumi-home")


def _project(project_factory: Any, example: str, hosts: Path, home: Path, served: GitServer) -> Project:
    project: Project = project_factory(example, "ci", Path(example).name)
    project.env["PATH"] = f"{hosts}:{project.env['PATH']}"
    project.env["PULUMI_HOME"] = str(home)
    project.env["SSL_CERT_FILE"] = str(served.ca_file)  # Go's TLS roots: the git server's CA alone
    project.run(
        "plugin", "install", "resource", "kubernetes", "4.32.0", "--file", str(hosts / "pulumi-resource-kubernetes")
    )
    return project


def _source(served: GitServer) -> str:
    return f"{served.url}/{REPO}/provider@v{RELEASED}"


def _plugin_dir(home: Path, served: GitServer) -> Path:
    host = served.url.removeprefix("https://")
    return home / f"plugins/resource-{host}_{REPO.replace('/', '_')}.git_provider-v{RELEASED}/provider"


def _venv_versions(plugin: Path) -> dict[str, str]:
    listing = subprocess.run([str(plugin / "venv/bin/python"), "-m", "pip", "list", "--format", "json"],
                             capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listing.stdout)}


def test_package_add_from_the_tag_installs_the_pinned_plugin_with_the_tagged_code(
    project_factory: Any, hosts: Path, pulumi_home: Path, served: GitServer
) -> None:
    """The clone, the venv and the SDK succeed; then CLI 3.259.0 panics in package_add.go:224 (it takes the https
    source for a local path, os.Stat fails, and it calls IsDir on nil) before recording the package in Pulumi.yaml:
    this test asserts that panic, so that it fails, and is to be extended to `up`, when the CLI no longer panics."""
    project = _project(project_factory, "examples/yaml", hosts, pulumi_home, served)
    added = project.run("package", "add", _source(served), check=False, timeout=1500)
    output = added.stdout + added.stderr
    assert "Successfully generated an SDK for the proxy-component package" in output, output
    assert ("POST", f"/{REPO}.git/git-upload-pack") in served.requests  # cloned from the server, nowhere else
    assert added.returncode != 0, "the CLI no longer panics: record the package and run `up` here"
    assert "packagecmd/package_add.go:224" in output, output
    plugin = _plugin_dir(pulumi_home, served)
    versions = _venv_versions(plugin)
    pins = {name: version for name, version in engine_pins(ROOT)}
    assert {name: versions[name] for name in ("proxy-component", *pins)} == {"proxy-component": RELEASED, **pins}
    assert project_version(ROOT) != RELEASED  # neither the checkout's version nor the later commit's
    # The installed package is the tag's files, copied into the venv (not an editable link to a checkout).
    installed = subprocess.run(
        [str(plugin / "venv/bin/python"), "-c", "import proxy_component.settings as s; print(s.__file__)"],
        capture_output=True, text=True, check=True, timeout=120, cwd=plugin.parent.parent,
    ).stdout.strip()  # fmt: skip
    assert installed.startswith(str(plugin / "venv")), installed
    assert PORT_LINE.format(TAGGED_PORT) in Path(installed).read_text()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ("http://{host}/{repo}/provider@v{version}", "failed to get schema: unable to install http://"),
        ("file://{root}/{repo}.git/provider@v{version}", "failed to get schema: unable to install file://"),
    ],
    ids=["http", "file"],
)
def test_the_sources_the_cli_refuses(
    project_factory: Any, hosts: Path, served: GitServer, tmp_path: Path, form: str, message: str
) -> None:
    """Plain http:// and file:// URLs of the same repository: refused, before anything is cloned or installed."""
    project = _project(project_factory, "examples/yaml", hosts, tmp_path / "home", served)
    before = list(served.requests)
    source = form.format(host=served.url.removeprefix("https://"), repo=REPO, version=RELEASED, root=tmp_path)
    refused = project.run("package", "add", source, check=False, timeout=300)
    assert refused.returncode != 0
    output = refused.stdout + refused.stderr
    assert message in output, output
    assert ": no such file or directory" in output, output  # read as a local path, which does not exist
    assert served.requests == before
    assert not list((tmp_path / "home").glob("plugins/resource-127*"))
    shutil.rmtree(tmp_path / "home", ignore_errors=True)
