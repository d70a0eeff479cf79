"""`scripts/cluster` itself (pytest -m cluster): it leaves the user's kubeconfig alone and nothing running."""

from __future__ import annotations

import json
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


@pytest.mark.realnode
def test_up_with_a_real_node_and_down_leave_no_namespace_mount_process_cgroup_or_nft_table(tmp_path: Path) -> None:
    cluster = f"pc-down-{os.getpid()}"
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": cluster, "KWOK_WORKDIR": str(tmp_path / "kwok")}
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "1", "--real", "1"], capture_output=True,
                        text=True, env=env, timeout=3000)  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip().splitlines()[-1]
        nodes = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "nodes", "-o", "json"],
                               capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        ready = {
            n["metadata"]["name"]: [c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"]
            for n in json.loads(nodes.stdout)["items"]
        }
        assert ready == {f"{cluster}-real-0": ["True"], "node-000000": ["True"]}
        # kube-proxy's own nft (the image's: Debian 12's segfaults on the named sets a newer nft made)
        nft = tmp_path / "kwok" / f"{cluster}.real-0" / "nft-bin" / "nft"
        tables = subprocess.run(["ip", "netns", "exec", f"{cluster}-real-0", str(nft), "list", "tables"],
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        assert "table ip6 kube-proxy" in tables.stdout, "kube-proxy (nftables) runs in the node"
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert cluster not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    assert subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout == ""
    assert cluster not in subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{cluster}-real-*"))
    assert not any(line.startswith("pc") and cluster in line for line in Path("/proc/net/dev").read_text().splitlines())
