"""The real Pulumi engine for the engine lane: binaries from scripts/engine, a venv pinned to them, and a
project runner with a file backend in a temporary directory. Nothing here is mocked or skipped: a missing
binary or a failed build fails the lane with scripts/engine's own message.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.render.plan import OWNER_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints/engine.txt"
PLUGIN_CONSTRAINTS = ROOT / "constraints/plugin.txt"  # the rest of the plugin's venv
PASSPHRASE = "engine-lane"


class EngineError(RuntimeError):
    """scripts/engine failed; the message is its own (module, version, reason)."""


def build_engine(*parts: str, cli: str | None = None) -> Path:
    """scripts/engine PARTS (default: the CLI, the Python host, the Kubernetes provider): its bin directory. `cli`:
    another Pulumi CLI version than the script's (`PULUMI_VERSION`, e.g. `MINIMUM_CLI`)."""
    parts = parts or ("cli", "python", "kubernetes")
    env = {**os.environ, "PULUMI_VERSION": cli} if cli else None
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/engine"), *parts], capture_output=True, text=True, timeout=5400, env=env
    )
    if result.returncode != 0:
        raise EngineError(f"scripts/engine {' '.join(parts)} failed:\n{result.stderr}")
    return Path(result.stdout.strip().splitlines()[-1])


def build_engine_venv() -> Path:
    """A venv with this checkout (editable), the SDKs pinned to the built plugins (constraints/engine.txt) and every
    other package at the plugin's pins (constraints/plugin.txt), as `pulumi package add` installs the plugin.

    Kept beside the checkout (.venv-engine) and rebuilt when pyproject.toml or the pins change.
    """
    venv = ROOT / ".venv-engine"
    sources = (ROOT / "pyproject.toml", CONSTRAINTS, PLUGIN_CONSTRAINTS)
    key = hashlib.sha256(b"".join(path.read_bytes() for path in sources)).hexdigest()
    marker = venv / "proxy-component-key"
    # One builder at a time: the lanes run in several pytest-xdist workers, each asking for the venv.
    with (ROOT / ".venv-engine.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.is_file() and marker.read_text() == key):
            _make_engine_venv(venv)
            marker.write_text(key)
    return venv


def _make_engine_venv(venv: Path) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q"]
    result = subprocess.run(
        [*pip, "-c", str(CONSTRAINTS), "-c", str(PLUGIN_CONSTRAINTS), "-e", f"{ROOT}[check]", "pulumi",
         "pulumi-kubernetes"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="session")
def engine() -> Path:
    """The bin directory with the CLI, the Python host and the Kubernetes provider (a warm cache builds nothing)."""
    try:
        path = build_engine()
    except EngineError as exc:
        pytest.fail(str(exc))
    for binary in ("pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-kubernetes"):
        assert (path / binary).is_file(), f"scripts/engine did not build {binary} into {path}"
    return path


@pytest.fixture(scope="session")
def engine_venv() -> Path:
    return build_engine_venv()


@pytest.fixture(scope="session")
def plugin_venv(engine_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's venv: this worker's own copy of the engine venv. `pulumi package add` and `get-schema` install a
    Python plugin's dependencies each time (`python -m venv` over it, then `pip install --upgrade pip setuptools
    wheel`); run in the shared venv, that raced the other pytest-xdist workers' installs and programs (pip read a
    half-written dist-info). Packages are hard-linked where the temporary directory is on the venv's filesystem (pip
    replaces files, never writes into one), else copied; bin/ and pyvenv.cfg, which `python -m venv` rewrites in
    place, are copied."""

    rewritten = {engine_venv / "pyvenv.cfg", engine_venv / "bin"}

    def link(src: str, dst: str) -> None:
        if Path(src) in rewritten or Path(src).parent in rewritten:
            shutil.copy2(src, dst, follow_symlinks=False)
            return
        try:
            os.link(src, dst)
        except OSError:  # another filesystem (a tmpfs /tmp)
            shutil.copy2(src, dst)

    dest = tmp_path_factory.mktemp("plugin-venv") / "venv"
    shutil.copytree(engine_venv, dest, symlinks=True, copy_function=link)
    return dest


class Project:
    """A Pulumi project copied into a scratch directory, run with the real CLI and a file backend."""

    def __init__(self, source: Path, work: Path, engine: Path, venv: Path, stack: str) -> None:
        self.dir = work / "project"
        if source == ROOT:  # the root project: its program and stacks; the package comes from the venv
            self.dir.mkdir()
            for path in [*source.glob("Pulumi*.yaml"), source / "__main__.py"]:
                shutil.copy(path, self.dir)
        else:
            shutil.copytree(
                source, self.dir, ignore=shutil.ignore_patterns(".venv*", "venv", "rendered", "__pycache__")
            )
        self.stack = stack
        self.state = work / "state"
        self.state.mkdir(exist_ok=True)
        project = yaml.safe_load((self.dir / "Pulumi.yaml").read_text())
        runtime = project["runtime"]
        if (runtime if isinstance(runtime, str) else runtime["name"]) == "python":
            project["runtime"] = {"name": "python", "options": {"toolchain": "pip", "virtualenv": str(venv)}}
            (self.dir / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
        self.env = {
            **os.environ,
            "PATH": f"{engine}:{venv / 'bin'}:{os.environ['PATH']}",
            "PULUMI_BACKEND_URL": f"file://{self.state}",
            "PULUMI_HOME": str(work / "pulumi-home"),
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "PULUMI_SKIP_CONFIRMATIONS": "true",
            "NO_COLOR": "1",
        }
        # Never the ambient ~/.kube/config (kwokctl writes one): in render mode pulumi-kubernetes asks whatever
        # cluster it names for the scope of custom resources. A test that wants a cluster sets KUBECONFIG.
        (work / "no-kubeconfig").write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
        self.env["KUBECONFIG"] = str(work / "no-kubeconfig")
        # The engine's temporary files in the test's own directory: pulumi-kubernetes writes the kubeconfig of each
        # provider given one to $TMPDIR/kubeconfig<digits> and never removes it (docs/guides/security.md).
        self.tmp = work / "tmp"
        self.tmp.mkdir(exist_ok=True)
        self.env["TMPDIR"] = str(self.tmp)

    def run(self, *args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        """`pulumi ARGS --stack STACK --non-interactive` in the project; fail with its output unless told not to."""
        cmd = ["pulumi", *args, "--non-interactive"]
        if args[0] not in ("stack", "plugin", "package") or args[:2] in (("stack", "export"), ("stack", "output")):
            cmd += ["--stack", self.stack]
        try:
            result = subprocess.run(cmd, cwd=self.dir, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:  # what it was waiting on is in its output: never lose it
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            pytest.fail(f"pulumi {' '.join(args)} still running after {timeout} s:\n{out[-6000:]}\n{err[-3000:]}")
        if check and result.returncode != 0:
            pytest.fail(f"pulumi {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def init(self) -> Project:
        self.run("stack", "init", self.stack)
        return self

    def config(self, key: str, value: Any, *, secret: bool = False) -> None:
        """Set one config key: a scalar with `pulumi config set`, a structure in the stack file as a user edits it."""
        if isinstance(value, str) or not isinstance(value, (dict, list)):
            args = ["config", "set", key, str(value).lower() if isinstance(value, bool) else str(value)]
            if secret:
                args.append("--secret")
            self.run(*args)
            return
        # Structured values: written into the stack file, as a user would edit Pulumi.<stack>.yaml.
        path = self.stack_file
        data = yaml.safe_load(path.read_text()) if path.exists() else None
        data = data or {}
        data.setdefault("config", {})[key] = value
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    @property
    def stack_file(self) -> Path:
        return self.dir / f"Pulumi.{self.stack}.yaml"

    def up(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return self.run("up", "--yes", "--skip-preview", *extra)

    def preview_json(self, *extra: str) -> dict[str, Any]:
        """`pulumi preview --json`: its steps and change summary."""
        result = self.run("preview", "--json", *extra)
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def export(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.run("stack", "export").stdout)
        return data

    def outputs(self, *, show_secrets: bool = False) -> dict[str, Any]:
        args = ["stack", "output", "--json"] + (["--show-secrets"] if show_secrets else [])
        data: dict[str, Any] = json.loads(self.run(*args).stdout)
        return data


def changes(preview: dict[str, Any]) -> dict[str, list[str]]:
    """Each step's operation -> the logical names it touches, from `pulumi preview --json` (sames and the reads of
    `--refresh` left out)."""
    ops: dict[str, list[str]] = {}
    for step in preview.get("steps", []):
        if step["op"] not in ("same", "refresh"):
            ops.setdefault(step["op"], []).append(step["urn"].split("::")[-1])
    return {op: sorted(names) for op, names in ops.items()}


def as_written(obj: dict[str, Any]) -> dict[str, Any]:
    """A Secret's stringData as pulumi-kubernetes writes it (and the API server stores it): base64 in data."""
    if obj["kind"] != "Secret" or "stringData" not in obj:
        return obj
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in obj.pop("stringData").items()}
    obj["data"] = {**obj.get("data", {}), **encoded}
    return obj


OWNER = re.compile(r"^[^/\s]+/[^/\s]+/[^/\s]+$")  # proxy-component.io/owner: org/project/stack


def read_rendered(directory: Path, *, by_stack: bool = True) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every object pulumi-kubernetes' renderYamlToDirectory wrote, keyed by (kind, namespace, name), each checked to
        carry the owner annotation the component adds (`org/project/stack`; the program's own objects, a `web` Deployment,
    carry none) and returned without it: `render`, which has
        no stack, writes none, and the programs of each language name their own stacks."""
    objects: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in sorted(directory.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                key = (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
                assert key not in objects, f"{key} rendered twice"
                annotations = doc["metadata"].get("annotations") or {}
                labels = doc["metadata"].get("labels") or {}
                if by_stack and labels.get("app.kubernetes.io/part-of") == "proxy-component":  # not the program's
                    assert OWNER.match(str(annotations.pop(OWNER_ANNOTATION, ""))), (key, annotations)
                objects[key] = doc
    return objects


@pytest.fixture
def project_factory(engine: Path, engine_venv: Path, tmp_path: Path) -> Any:
    """Project(source, stack, name) in its own scratch directory."""

    def make(source: Path | str = ".", stack: str = "dev", name: str = "p") -> Project:
        work = tmp_path / name
        work.mkdir()
        return Project(ROOT / source, work, engine, engine_venv, stack)

    return make


# The layout before the component was named after the stack (it was named after cluster.name), and the one
# before the stack used one explicit provider always (it used the default provider unless a key named one).
LAYOUT_NAMED_AFTER_CLUSTER = "a592121"
LAYOUT_DEFAULT_PROVIDER = "50668ea"


@contextlib.contextmanager
def old_layout(project: Project, commit: str, *, its_config: bool = False) -> Iterator[None]:
    """Run the project with the package as it was at `commit`: beside __main__.py, so first on sys.path.

    Its Pulumi.yaml keeps only the config keys that commit declared (the program refuses unknown ones); with
    `its_config`, as that commit declared them (a592121 required `renderYamlToDirectory`, `kubeconfig` and
    `context`: no default).
    """
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "proxy_component", "Pulumi.yaml"],
                             capture_output=True, timeout=60)  # fmt: skip
    assert archive.returncode == 0, f"this clone lacks commit {commit}: {archive.stderr.decode()}"
    old = project.dir.parent / f"layout-{commit}"
    old.mkdir()
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    current = project.dir / "Pulumi.yaml"
    saved = current.read_text()
    then = set(yaml.safe_load((old / "Pulumi.yaml").read_text())["config"])
    layout = yaml.safe_load(saved)
    layout["config"] = {key: spec for key, spec in layout["config"].items() if key in then}
    if its_config:
        layout["config"] = yaml.safe_load((old / "Pulumi.yaml").read_text())["config"]
    current.write_text(yaml.safe_dump(layout, sort_keys=False))
    shutil.move(old / "proxy_component", project.dir / "proxy_component")
    try:
        yield
    finally:
        shutil.rmtree(project.dir / "proxy_component")
        current.write_text(saved)
