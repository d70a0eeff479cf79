"""A test cluster of a module's own: `scripts/cluster up NODES` (kube-apiserver, controller-manager, scheduler and
etcd with kwok's fake nodes, on 127.0.0.1) under a name and work directory of its own, taken down on exit."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def kwok_cluster(workdir: Path, name: str, nodes: int, config: str | None = None) -> Iterator[Path]:
    """The kubeconfig of a cluster named `name`-<pid> with `nodes` kwok nodes; the test fails if it does not start
    or stop. `config`: a KwokctlConfiguration document added to the script's (PROXY_COMPONENT_CLUSTER_CONFIG)."""
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"{name}-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok")}
    if config is not None:
        (workdir / "kwokctl-extra.yaml").write_text(config)
        env["PROXY_COMPONENT_CLUSTER_CONFIG"] = str(workdir / "kwokctl-extra.yaml")
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


def proxy_pods_on(
    kubeconfig: Path, expected: set[str], timeout: float = 90, hold: float = 2
) -> dict[str, dict[str, Any]]:
    """The live proxy pods by node once the DaemonSet controller has put them on exactly `expected` and kept them
    there for `hold` seconds; the test fails with what it saw if that does not happen within `timeout`.

    Waiting for the set rather than for a settled status: the controller reports a settled status for the state it
    has seen so far (nodes created or relabelled a moment ago may not be in its cache yet, and a relabel does not
    change the DaemonSet's generation), so "settled" alone returned an empty or an old placement."""
    deadline = time.monotonic() + timeout
    since: float | None = None
    seen: tuple[dict[str, Any], list[str]] = ({}, [])
    while True:
        ds = _get(kubeconfig, "-n", "kube-system", "daemonset", "http-proxy")
        pods = _get(kubeconfig, "-n", "kube-system", "pods", "-l", "app=http-proxy")["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        bound = {p["spec"].get("nodeName") or "(unbound)": p for p in live}
        status = ds.get("status", {})
        settled = status.get("observedGeneration") == ds["metadata"]["generation"] and len(live) == len(
            bound
        ) == status.get("desiredNumberScheduled") == len(expected)
        seen = (status, sorted(bound))
        now = time.monotonic()
        if settled and set(bound) == expected:
            since = now if since is None else since
            if now - since >= hold:
                return bound
        else:
            since = None
        assert now < deadline, f"the proxy pods did not settle on {sorted(expected)}: status {seen[0]}, on {seen[1]}"
        time.sleep(0.5)


def _get(kubeconfig: Path, *args: str) -> dict[str, Any]:
    result = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "get", *args, "-o", "json"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, f"kubectl get {' '.join(args)}: {result.stderr}"
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded
