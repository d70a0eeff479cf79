"""A test cluster of a module's own: `scripts/cluster up NODES` (kube-apiserver, controller-manager, scheduler and
etcd with kwok's fake nodes, on 127.0.0.1) under a name and work directory of its own, taken down on exit."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def kwok_cluster(workdir: Path, name: str, nodes: int) -> Iterator[Path]:
    """The kubeconfig of a cluster named `name`-<pid> with `nodes` kwok nodes; the test fails if it does not start
    or stop."""
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"{name}-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok")}
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", str(nodes)], capture_output=True, text=True,
                        env=env, timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        yield Path(up.stdout.strip().splitlines()[-1])
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True,
                              env=env, timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr
