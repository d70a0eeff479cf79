"""Shared fixtures: Pulumi mocks that record registrations, one event loop per test, and secret unwrapping."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pulumi
import pytest
from pulumi.runtime import rpc
from pulumi.runtime.settings import reset_options
from pulumi.runtime.stack import wait_for_rpcs
from pulumi.runtime.sync_await import _sync_await

from tests.durations import file_order

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "tests/fixtures/seeds"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"

T = TypeVar("T")


def _readable_copy(binary: Path) -> str:
    """A copy any user may run (the live tests run tinyproxy as its own UID, and the cache is under a private home),
    named by its content, so that workers and runs share it."""
    data = binary.read_bytes()
    directory = Path(tempfile.gettempdir()) / f"proxy-component-tinyproxy-{hashlib.sha256(data).hexdigest()[:16]}"
    target = directory / "tinyproxy"
    if not target.exists():
        directory.mkdir(mode=0o755, exist_ok=True)
        staged = directory / f".tinyproxy.{os.getpid()}"
        staged.write_bytes(data)
        staged.chmod(0o755)
        staged.replace(target)
    directory.chmod(0o755)
    return str(target)


def pytest_configure(config: pytest.Config) -> None:
    """The live tests run the image's tinyproxy (upstream's source with the project's patches, built for this machine
    by `scripts/image tinyproxy host`, cached), first on PATH: the rendered config uses the patches' directives, which
    Debian's tinyproxy refuses. PROXY_COMPONENT_TINYPROXY names another build; xdist's workers inherit it."""
    path = os.environ.get("PROXY_COMPONENT_TINYPROXY")
    if not path:
        built = subprocess.run(
            ["bash", str(ROOT / "scripts/image"), "tinyproxy", "host"], cwd=ROOT, capture_output=True, text=True
        )
        if built.returncode != 0 or not built.stdout.strip():
            raise pytest.UsageError(f"scripts/image tinyproxy host failed:\n{built.stderr[-3000:]}")
        path = _readable_copy(Path(built.stdout.splitlines()[-1]))
        os.environ["PROXY_COMPONENT_TINYPROXY"] = path
    directory = str(Path(path).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != directory:
        os.environ["PATH"] = directory + os.pathsep + os.environ.get("PATH", "")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The lanes' longest test files first (tests/durations.py: what `.ci/run`'s `--no-loadscope-reorder` session
    hands out in this order); within a file, and among the files not measured, the collection's order."""
    rank = file_order()
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def unwrap(value: Any) -> Any:
    """The value with every secret envelope of the mock inputs replaced by its content."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            return unwrap(value["value"])
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def holds_secret(value: Any) -> bool:
    """True when a secret envelope appears anywhere in `value`."""
    if isinstance(value, dict):
        return value.get(SECRET_SIG) == SECRET_VALUE or any(holds_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_secret(v) for v in value)
    return False


@dataclass
class Registered:
    """One resource the program registered, as the engine would have seen it."""

    typ: str
    name: str
    raw_inputs: dict[str, Any]
    provider: str | None

    @property
    def inputs(self) -> dict[str, Any]:
        return dict(unwrap(self.raw_inputs))


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    """Records registrations; answers invokes from `calls` and adds `state` to a resource's outputs by type."""

    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    registered: list[Registered] = field(default_factory=list)
    invoked: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    transforms: list[Any] = field(default_factory=list)

    def register_transform(self, transform: Any) -> None:
        """Keep stack transforms: the mock monitor does not run them, `new_resource` does, as the engine would."""
        self.transforms.append(transform)

    def _transformed(self, args: pulumi.runtime.MockResourceArgs) -> dict[str, Any]:
        props = dict(args.inputs)
        for transform in self.transforms:
            targs = pulumi.ResourceTransformArgs(
                custom=bool(args.custom), type_=args.typ, name=args.name, props=props, opts=pulumi.ResourceOptions()
            )
            result = transform(targs)
            if result is not None:
                # The engine serializes what a transform returns: Outputs inside it resolve here too.
                wire = _sync_await(rpc.serialize_properties(result.props, {}))
                props = dict(rpc.deserialize_properties(wire))
        return props

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        inputs = self._transformed(args) if self.transforms else dict(args.inputs)
        self.registered.append(Registered(args.typ, args.name, inputs, args.provider))
        return f"{args.name}-id", {**inputs, **self.state.get(args.typ, {})}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        self.invoked.append((args.token, dict(args.args)))
        if args.token not in self.calls:
            raise KeyError(f"unexpected invoke {args.token}")
        return self.calls[args.token], []


@dataclass
class Harness:
    """A mocked Pulumi program run: resolve Outputs, wait for registrations, look resources up."""

    loop: asyncio.AbstractEventLoop
    mocks: RecordingMocks

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(awaitable)

    def program(self, body: Callable[[], T]) -> T:
        """Run `body` inside the event loop, as the Pulumi language host runs a program."""

        async def run() -> T:
            return body()

        return self.run(run())

    def value(self, output: pulumi.Output[T]) -> T:
        value = self.run(output.future())
        assert value is not None, "the output is unknown (preview)"
        return value

    def known(self, output: pulumi.Output[Any]) -> bool:
        return self.run(output.is_known())

    def secret(self, output: pulumi.Output[Any]) -> bool:
        return self.run(output.is_secret())

    def logs(self, caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
        """(level, message) of everything the program logged to the engine."""
        self.settle()
        return [(r.levelname, r.getMessage()) for r in caplog.records if r.name.startswith("pulumi-mocks-")]

    def settle(self) -> list[Registered]:
        self.run(wait_for_rpcs())
        return self.mocks.registered

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.settle() if r.typ == typ]

    def one(self, typ: str, name: str) -> Registered:
        found = [r for r in self.settle() if r.typ == typ and r.name == name]
        assert len(found) == 1, f"expected one {typ} {name!r}, got {[r.name for r in self.mocks.registered]}"
        return found[0]


def harness(preview: bool) -> Iterator[Harness]:
    """A mocked program: its own event loop and mocks, torn down (and the executor shut down) at the end."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = RecordingMocks()
    logger = logging.getLogger(f"pulumi-mocks-{id(mocks)}")
    logger.setLevel(logging.DEBUG)
    pulumi.runtime.set_mocks(mocks, project="proxy-component", stack="test", preview=preview, logger=logger)
    try:
        yield Harness(loop, mocks)
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(wait_for_rpcs())
        reset_options()
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
        asyncio.set_event_loop(None)


@pytest.fixture
def mocked() -> Iterator[Harness]:
    """A Pulumi program under mocks, as in `pulumi up`."""
    yield from harness(preview=False)


@pytest.fixture
def mocked_preview() -> Iterator[Harness]:
    """A Pulumi program under mocks, as in `pulumi preview`: outputs missing from state are unknown."""
    yield from harness(preview=True)
