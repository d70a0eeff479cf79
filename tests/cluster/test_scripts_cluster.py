"""`scripts/cluster` itself (pytest -m cluster): it leaves the user's kubeconfig alone and nothing running."""

from __future__ import annotations

import os
import re
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


def test_clusters_created_at_once_each_get_their_own_ports_and_objects(tmp_path: Path) -> None:
    """kwokctl counts ports down from 32767 to the first free one: before the lock, two clusters created at once got
    the same ports and both "started", one's API server storing in the other's etcd (a CI run hung on it)."""
    names = [f"pc-race{i}-{os.getpid()}" for i in range(3)]
    envs = [{**os.environ, "PROXY_COMPONENT_CLUSTER": n, "KWOK_WORKDIR": str(tmp_path / n)} for n in names]
    command = ["bash", str(ROOT / "scripts/cluster"), "up", "0"]
    ups = [
        subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for env in envs
    ]
    try:
        kubeconfigs = []
        for up in ups:
            out, err = up.communicate(timeout=600)
            assert up.returncode == 0, err
            kubeconfigs.append(out.strip().splitlines()[-1])
        ports = []
        for name in names:
            kwok = (tmp_path / name / "clusters" / name / "kwok.yaml").read_text()
            ports.append(set(re.findall(r"^ +[a-zA-Z]+Port: ([0-9]+)$", kwok, re.M)))
            assert len(ports[-1]) == 6, kwok  # etcd (2), API server, controller-manager, scheduler, kwok
        shared = [a & b for i, a in enumerate(ports) for b in ports[i + 1 :]]
        assert not any(shared), ports
        for name, kubeconfig in zip(names, kubeconfigs, strict=True):
            kubectl = ["kubectl", "--kubeconfig", kubeconfig]
            made = subprocess.run([*kubectl, "create", "namespace", f"only-{name}"], capture_output=True, text=True,
                                  timeout=60)  # fmt: skip
            assert made.returncode == 0, made.stderr
        for name, kubeconfig in zip(names, kubeconfigs, strict=True):
            seen = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "namespaces", "-o", "name"],
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert seen.returncode == 0, seen.stderr
            assert sorted(line for line in seen.stdout.split() if "/only-" in line) == [f"namespace/only-{name}"]
    finally:
        for up in ups:
            if up.poll() is None:
                up.kill()
        for env in envs:
            subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], env=env, capture_output=True, timeout=300)
    running = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert running.stdout == "", running.stdout
