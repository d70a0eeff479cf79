"""`pulumi package add` of this repository at a release tag, as a user of another language adds it, under the real
engine (pytest -m engine): the repository served over git's smart HTTP with TLS on 127.x.y.z (tests/engine/git_server),
`pulumi package add git.proxy-component.test/proxy-component/proxy-component/provider@vX.Y.Z` (the form of
`github.com/proxy-component/proxy-component/provider@vX.Y.Z`; the name is in the CLI's own /etc/hosts). The plugin's
venv holds exactly the pinned versions (provider/requirements.txt: the package at the tag, the engine lane's Pulumi
SDKs), and the TypeScript example's `up` runs the tagged code: neither this checkout's nor that of the commit after
the tag on main, each of which sets another default port. Also the source forms the CLI refuses or panics on, with
its messages. Only PyPI and npm are reached (pip for the plugin's venv, npm for the example's packages).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component._release import bump, canonical_name, engine_pins, plugin_pins, project_version

from .conftest import ROOT, Project, build_engine
from .git_server import GIT_HOST, GitServer, cli_wrapper, serve_git

pytestmark = pytest.mark.engine

PORT_LINE = "    port: ListenPort = {}"  # settings/deployment.py: ProxySettings.port, the proxy URL's port
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
    settings = work / "proxy_component/settings/deployment.py"
    text = settings.read_text()
    current = re.findall(r"^    port: ListenPort = (\d+)$", text, re.M)
    assert len(current) == 1, "settings/deployment.py: ProxySettings.port moved; update this test"
    settings.write_text(text.replace(PORT_LINE.format(current[0]), PORT_LINE.format(port)))


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This checkout's HEAD with two commits on top, as a bare repository: the release (the version bumped by
    proxy_component._release, the default port TAGGED_PORT) tagged vRELEASED, then a later commit on main
    (LATER_PORT, the next dev version), as a repository looks a while after a release. The folder with the
    repositories, and the later commit's hash (no tag names it)."""
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
    return root, _git(clone, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def served(released: tuple[Path, str]) -> Iterator[GitServer]:
    """The repositories of `released` on the git server."""
    root, _ = released
    with serve_git(root, root.parent) as server:
        yield server


@pytest.fixture(scope="module")
def hosts() -> Path:
    """The CLI, the Python host (the plugin), the Kubernetes provider and the YAML and Node.js hosts (the programs)."""
    return build_engine("cli", "python", "kubernetes", "yaml", "nodejs")


@pytest.fixture(scope="module")
def pulumi_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plugin folder for the module's projects: the first `package add` installs the plugin, the next reuse it."""
    return tmp_path_factory.mktemp("pulumi-home")


def _project(project_factory: Any, example: str, hosts: Path, home: Path, served: GitServer, name: str) -> Project:
    """The example with the CLI run through `cli_wrapper` (GIT_HOST names the git server) and the built hosts."""
    project: Project = project_factory(example, "ci", name)
    wrapper = cli_wrapper(served, hosts / "pulumi", project.dir.parent / "bin")
    project.env["PATH"] = f"{wrapper.parent}:{hosts}:{project.env['PATH']}"
    project.env["PULUMI_HOME"] = str(home)
    project.env["SSL_CERT_FILE"] = str(served.ca_file)  # Go's TLS roots: the git server's CA alone
    project.run(
        "plugin", "install", "resource", "kubernetes", "4.32.0", "--file", str(hosts / "pulumi-resource-kubernetes")
    )
    return project


def _plugin_dir(home: Path, host: str, version: str = RELEASED) -> Path:
    found = sorted(home.glob(f"plugins/resource-{host}_*provider-v{version}/provider"))
    assert len(found) == 1, sorted(p.name for p in home.glob("plugins/*"))
    return found[0]


def _venv_versions(plugin: Path) -> dict[str, str]:
    listing = subprocess.run([str(plugin / "venv/bin/python"), "-m", "pip", "list", "--format", "json"],
                             capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(listing.stdout)}


def _assert_pinned_tagged_plugin(plugin: Path, version: str = RELEASED, port: int = TAGGED_PORT) -> None:
    """The plugin's venv holds exactly the pinned versions, every package it installed pinned (certifi and
    cryptography too), and the package in it is the tag's files (copied into the venv, not an editable link to a
    checkout)."""
    versions = _venv_versions(plugin)
    pins = {canonical_name(name): pin for name, pin in [*engine_pins(ROOT), *plugin_pins(ROOT)]}
    assert versions == {"proxy-component": version, **pins}, "a package the plugin installs is unpinned or off its pin"
    assert project_version(ROOT) != version  # neither the checkout's version nor the later commit's
    installed = subprocess.run(
        [str(plugin / "venv/bin/python"), "-c", "import proxy_component.settings.deployment as s; print(s.__file__)"],
        capture_output=True, text=True, check=True, timeout=120, cwd=plugin.parent.parent,
    ).stdout.strip()  # fmt: skip
    assert installed.startswith(str(plugin / "venv")), installed
    assert PORT_LINE.format(port) in Path(installed).read_text()


def test_package_add_from_the_tag_then_the_typescript_example_runs_up_with_the_tagged_code(
    project_factory: Any, hosts: Path, pulumi_home: Path, served: GitServer
) -> None:
    """`pulumi package add GIT_HOST/ORG/REPO/provider@vX.Y.Z`, the form of `github.com/ORG/REPO/provider@vX.Y.Z`,
    in examples/typescript: the CLI clones the tag from the server, installs the pinned plugin, generates and links
    the TypeScript SDK and records the package; then `up` runs the tag's code (its default port is in the proxy's
    URL), the server asked only for its refs, and a preview after it changes nothing."""
    project = _project(project_factory, "examples/typescript", hosts, pulumi_home, served, "typescript-tag")
    npm = subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=project.dir, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert npm.returncode == 0, npm.stderr
    added = project.run("package", "add", f"{GIT_HOST}/{REPO}/provider@v{RELEASED}", timeout=1500)
    output = added.stdout + added.stderr
    assert "Added package proxy-component" in output, output
    assert ("POST", f"/{REPO}.git/git-upload-pack") in served.requests  # cloned from the server, nowhere else
    recorded = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())["packages"]
    assert recorded == {"proxy-component": f"{GIT_HOST}/{REPO}/provider@v{RELEASED}"}
    # From a git source the SDK is named after the repository's owner: @proxy-component/proxy-component, where a
    # local path gives @pulumi/proxy-component. The program imports it by that name (docs/guides/install.md).
    package = json.loads((project.dir / "package.json").read_text())
    sdk = "@proxy-component/proxy-component"
    assert package["dependencies"][sdk] == "file:sdks/proxy-component-proxy-component"
    source = (project.dir / "index.ts").read_text()
    assert source.count('from "@pulumi/proxy-component"') == 1
    (project.dir / "index.ts").write_text(source.replace('from "@pulumi/proxy-component"', f'from "{sdk}"'))
    _assert_pinned_tagged_plugin(_plugin_dir(pulumi_home, GIT_HOST))
    before = len(served.requests)
    packs = len(served.upload_pack)
    project.init()
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    outputs = project.outputs()
    assert outputs["proxyUrl"] == f"http://http-proxy.kube-system.svc.k8s.internal:{TAGGED_PORT}"
    service = yaml.safe_load(next((project.dir / "rendered").rglob("*service-kube-system-http-proxy.yaml")).read_text())
    assert [port["port"] for port in service["spec"]["ports"]] == [TAGGED_PORT]
    project.run("preview", "--expect-no-changes")
    # `up` and `preview` ran the installed plugin: each listed the repository's refs (the CLI resolves the tag on
    # every run, so the git server must be reachable then), and nothing was cloned again.
    after = served.requests[before:]
    assert after, "up and preview asked the server for nothing"
    # CLI 3.259.0 (go-git v5) listed them by GET info/refs alone; 3.276.0 (go-git v6, git protocol v2) follows it
    # with a POST of `ls-refs`. Either way no object is fetched.
    assert set(after) <= {("GET", f"/{REPO}.git/info/refs"), ("POST", f"/{REPO}.git/git-upload-pack")}, after
    assert set(served.upload_pack[packs:]) <= {"ls-refs"}, served.upload_pack[packs:]


def test_an_address_as_the_git_host_installs_the_plugin_then_the_cli_panics(
    project_factory: Any, hosts: Path, pulumi_home: Path, served: GitServer
) -> None:
    """https://127.x.y.z/ORG/REPO/provider@vX.Y.Z: the clone, the venv and the SDK succeed; then CLI 3.276.0 records
    the source without its scheme, takes it for a local path (an address is not a domain name to its urlRegex),
    and panics in package_add.go:230 (os.Stat fails, it calls IsDir on nil) before writing Pulumi.yaml. Users of
    a git server reached by address: this test fails when a CLI no longer panics, and then the README can say so."""
    project = _project(project_factory, "examples/yaml", hosts, pulumi_home, served, "yaml-address")
    added = project.run("package", "add", f"{served.url}/{REPO}/provider@v{RELEASED}", check=False, timeout=1500)
    output = added.stdout + added.stderr
    assert "Successfully generated an SDK for the proxy-component package" in output, output
    assert added.returncode != 0, "the CLI no longer panics on an address: say so in docs/guides/installation.md"
    assert "packagecmd/package_add.go:230" in output, output
    assert "packages" not in yaml.safe_load((project.dir / "Pulumi.yaml").read_text())
    _assert_pinned_tagged_plugin(_plugin_dir(pulumi_home, served.address))


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
    project = _project(project_factory, "examples/yaml", hosts, tmp_path / "home", served, "yaml-refused")
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


def _later_version() -> str:
    major, minor, patch = RELEASED.split(".")
    return f"{major}.{minor}.{int(patch) + 1}.dev0"


def test_package_add_from_a_commit_then_the_typescript_example_runs_up_with_its_code(
    project_factory: Any, hosts: Path, pulumi_home: Path, served: GitServer, released: tuple[Path, str]
) -> None:
    """Before any release (docs/guides/install.md, "Pinning a commit"): `pulumi package add
    GIT_HOST/ORG/REPO/provider@<full hash>` of a commit no tag names, in examples/typescript, the way the tag is
    added above: the CLI clones and checks that commit out, the plugin's venv holds exactly the pins with the
    package at that commit's version, the record names the hash, and `up` runs that commit's code (its default
    port), neither the tag's nor this checkout's."""
    _, commit = released
    project = _project(project_factory, "examples/typescript", hosts, pulumi_home, served, "typescript-commit")
    npm = subprocess.run(["npm", "install", "--no-audit", "--no-fund"], cwd=project.dir, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert npm.returncode == 0, npm.stderr
    added = project.run("package", "add", f"{GIT_HOST}/{REPO}/provider@{commit}", timeout=1500)
    output = added.stdout + added.stderr
    assert "Added package proxy-component" in output, output
    recorded = yaml.safe_load((project.dir / "Pulumi.yaml").read_text())["packages"]
    assert recorded == {"proxy-component": f"{GIT_HOST}/{REPO}/provider@{commit}"}
    sdk = "@proxy-component/proxy-component"
    source = (project.dir / "index.ts").read_text()
    (project.dir / "index.ts").write_text(source.replace('from "@pulumi/proxy-component"', f'from "{sdk}"'))
    _assert_pinned_tagged_plugin(
        _plugin_dir(pulumi_home, GIT_HOST, f"0.0.0-x{commit}"), version=_later_version(), port=LATER_PORT
    )
    project.init()
    up = project.up()
    assert "Traceback" not in up.stdout + up.stderr
    assert project.outputs()["proxyUrl"] == f"http://http-proxy.kube-system.svc.k8s.internal:{LATER_PORT}"
    project.run("preview", "--expect-no-changes")


def test_pip_installs_the_package_from_a_commit(served: GitServer, released: tuple[Path, str], tmp_path: Path) -> None:
    """`pip install 'proxy-component @ git+https://HOST/ORG/REPO@<full hash>'` (docs/guides/install.md): that
    commit's code and version, from the git server (by address: pip's git has no cli_wrapper)."""
    _, commit = released
    venv = tmp_path / "venv"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=300)
    env = {**os.environ, "GIT_SSL_CAINFO": str(served.ca_file), "GIT_TERMINAL_PROMPT": "0"}
    before = len(served.requests)
    installed = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps",
         f"proxy-component @ git+{served.url}/{REPO}.git@{commit}"],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    assert ("POST", f"/{REPO}.git/git-upload-pack") in served.requests[before:]
    listing = subprocess.run([str(venv / "bin/python"), "-m", "pip", "list", "--format", "json"],
                             capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    versions = {p["name"]: p["version"] for p in json.loads(listing.stdout)}
    assert versions["proxy-component"] == _later_version()
    path = subprocess.run(
        [str(venv / "bin/python"), "-c",  # where the file is, without importing the package (--no-deps)
         "import importlib.metadata as m; print(m.distribution('proxy-component').locate_file('proxy_component/settings/deployment.py'))"],
        capture_output=True, text=True, check=True, timeout=120, cwd=tmp_path,
    ).stdout.strip()  # fmt: skip
    assert path.startswith(str(venv)), path
    assert PORT_LINE.format(LATER_PORT) in Path(path).read_text()
