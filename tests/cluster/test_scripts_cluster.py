"""`scripts/cluster` itself (pytest -m cluster): it leaves the user's kubeconfig alone and nothing running."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster


def test_up_and_down_leave_the_users_kubeconfig_alone_and_nothing_running(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    mine = "apiVersion: v1\nkind: Config\ncurrent-context: mine\ncontexts: [{name: mine, context: {cluster: c}}]\n"
    (home / ".kube/config").write_text(mine)
    cache = os.environ.get("PROXY_COMPONENT_CACHE", str(Path.home() / ".cache/proxy-component"))
    env = {
        **os.environ,
        "HOME": str(home),  # kwokctl's default kubeconfig is $HOME/.kube/config
        "PROXY_COMPONENT_CACHE": cache,  # the built binaries, as every other test uses them
        "PROXY_COMPONENT_CLUSTER": f"pc-home-{os.getpid()}",
        "KWOK_WORKDIR": str(tmp_path / "kwok"),
    }
    env.pop("KUBECONFIG", None)
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "1"], capture_output=True, text=True, env=env,
                        timeout=3000)  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        assert Path(up.stdout.strip().splitlines()[-1]).is_file(), "the cluster's own kubeconfig is printed last"
        assert (home / ".kube/config").read_text() == mine
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert (home / ".kube/config").read_text() == mine
    running = subprocess.run(["pgrep", "-f", str(tmp_path / "kwok")], capture_output=True, text=True)
    assert running.stdout == "", running.stdout
