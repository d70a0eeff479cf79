"""A proxy change made with `pulumi up` and finished by `proxy-component rollout --apply`, on the test cluster
(pytest -m "engine or cluster"): kube-apiserver, the real controller-manager (Deployment, StatefulSet, ReplicaSet
and disruption controllers) and scheduler, kwok running the pods (scripts/cluster), the program under the real
engine (tests/fixtures/programs/staleness).

The program: 50 Deployments and 10 StatefulSets in three namespaces, half reading `proxy-config` through envFrom
written by their authors, half given the env by the stack transform with `injection.transformEnv: reference`;
PodDisruptionBudgets on some (one that allows no disruption), one slow owner (minReadySeconds 20) and a bare Pod.

1. A NO_PROXY entry added: `pulumi preview --json` updates the three proxy-config ConfigMaps and no workload, and
   `pulumi up` restarts nothing.
2. `check` then names exactly the owners whose pods hold the old values: every one the test made.
3. `rollout` (as the ServiceAccount bound to exactly `render --format rollout-rbac`'s roles) restarts them in waves
   of at most 5 owners (recorded from watch events), is interrupted by SIGINT mid-wave, and a rerun restarts no
   finished owner twice; the owner whose budget allows no disruption is waited on, then reported, never forced.
4. The budget removed with `pulumi up`, a last run restarts that owner; then `check` is clean, and `pulumi preview`
   shows no change (the restarts are not drift to the program).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.live.access import ROLLOUT_NAME
from proxy_component.live.check import check_cluster
from proxy_component.live.cluster import connect
from proxy_component.live.rollout import rollout_status
from proxy_component.live.stale import current_target
from proxy_component.settings import parse_settings
from tests.kwok_cluster import kwok_cluster
from tests.rollout_watch import Recorder, wait_for

from .conftest import ROOT, Project, changes

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NAMESPACES = ("r-a", "r-b", "r-c")
DEPLOYMENTS, STATEFULSETS, PDBS, WAVE = 50, 10, 5, 5
BLOCKED = ("r-b", "dep-49-transform")  # 49 % 3 == 1: its budget allows no disruption
SLOW = "dep-30-envfrom"  # in r-a's third wave (r-a's Deployments dep-00, dep-03, ... come first)
PDB_TIMEOUT = 8
SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.0.0.0/24"], "nodeCidrs": ["192.0.2.0/24"]},
    "proxy": {"httpProxy": "http://proxy.corp.example:3128"},
    "deployment": {"enabled": False},
    "namespaces": list(NAMESPACES),
    "injection": {"transformEnv": "reference"},
}
CHANGED = {**SETTINGS, "proxy": {**SETTINGS["proxy"], "noProxy": ["registry.corp.example"]}}
Obj = dict[str, Any]


def _signal_state(pid: int) -> str:
    """Each thread's blocked, ignored and caught signals and what is pending (/proc), as the kernel saw them."""
    lines = []
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        lines.append(" ".join(f"{k}={fields.get(k, '?').strip()}" for k in ("Name", "SigPnd", "ShdPnd", "SigBlk",
                                                                            "SigIgn", "SigCgt")))  # fmt: skip
    return "; ".join(lines)


class Live:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.role_kubeconfig = workdir / "rollout.kubeconfig"
        self.settings = workdir / "proxy.yaml"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def rollout(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "proxy_component.cli", "rollout", str(self.settings), "--kubeconfig",
                str(self.role_kubeconfig), *args]  # fmt: skip

    def run_rollout(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.rollout(*args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)

    def owners(self) -> dict[tuple[str, str, str], Obj]:
        found: dict[tuple[str, str, str], Obj] = {}
        for kind in ("Deployment", "StatefulSet"):
            found |= {(kind, o["metadata"]["namespace"], o["metadata"]["name"]): o
                      for o in self.get(kind.lower() + "s", "-A")["items"]
                      if o["metadata"]["namespace"] in NAMESPACES}  # fmt: skip
        return found

    def complete(self) -> bool:
        owners = self.owners()
        return len(owners) == DEPLOYMENTS + STATEFULSETS and all(
            rollout_status(kind, obj)[0] == "done" for (kind, _, _), obj in owners.items()
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("rollout")
    with kwok_cluster(workdir, "pc-rollout", 2) as kubeconfig:
        yield Live(kubeconfig, workdir)


def _expected_owners() -> set[str]:
    """Every workload the program made, as check and rollout name them."""
    refs = {"Pod r-a/bare"}
    for kind, count in (("Deployment", DEPLOYMENTS), ("StatefulSet", STATEFULSETS)):
        refs |= {f"{kind} {NAMESPACES[i % 3]}/{kind[:3].lower()}-{i:02d}-{'envfrom' if i % 2 == 0 else 'transform'}"
                 for i in range(count)}  # fmt: skip
    return refs


def _role(live: Live) -> None:
    """The ServiceAccount bound to `render --format rollout-rbac`'s roles, and a kubeconfig with its token."""
    rbac = subprocess.run([sys.executable, "-m", "proxy_component.cli", "render", str(live.settings), "--format",
                           "rollout-rbac"], capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert rbac.returncode == 0, rbac.stderr
    live.kubectl("apply", "-f", "-", stdin=rbac.stdout)
    token = live.kubectl("-n", "kube-system", "create", "token", ROLLOUT_NAME, "--duration=2h").strip()
    config = yaml.safe_load(live.kubeconfig.read_text())
    config["users"] = [{"name": "token", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "token"
    live.role_kubeconfig.write_text(yaml.safe_dump(config))


def test_a_change_by_reference_updates_proxy_config_alone_then_rollout_finishes_it_in_waves(
    project_factory: Any, live: Live
) -> None:
    project: Project = project_factory("tests/fixtures/programs/staleness", "dev", "rollout")
    project.init()
    for name, value in (("kubeconfig", str(live.kubeconfig)), ("settings", SETTINGS), ("namespaces", list(NAMESPACES)),
                       ("deployments", DEPLOYMENTS), ("statefulsets", STATEFULSETS), ("pdbs", PDBS),
                       ("blocked", BLOCKED[1]), ("slow", SLOW), ("barePod", True)):  # fmt: skip
        project.config(f"staleness:{name}", value)
    project.up()
    wait_for(live.complete, "every owner complete and available")
    wait_for(lambda: live.get("-n", "r-a", "pod", "bare")["status"].get("phase") == "Running", "the bare pod running")
    live.settings.write_text(yaml.safe_dump(SETTINGS))
    _role(live)
    nothing = live.run_rollout()
    assert nothing.returncode == 0, nothing.stdout + nothing.stderr  # nothing is stale yet
    before = live.owners()

    # 1. The change: only proxy-config, in each namespace, is updated; no workload restarts.
    time.sleep(1.5)  # start times and managedFields times are to the second
    project.config("staleness:settings", CHANGED)
    preview = project.preview_json()
    assert changes(preview) == {"update": [f"egress-proxy-config-{ns}" for ns in NAMESPACES]}, changes(preview)
    project.up()
    assert {key: o["metadata"]["generation"] for key, o in live.owners().items()} == {
        key: o["metadata"]["generation"] for key, o in before.items()
    }, "no template changed"
    live.settings.write_text(yaml.safe_dump(CHANGED))
    settings = parse_settings(CHANGED)
    target = current_target(settings)

    # 2. check names exactly the workloads the test made: every pod holds the old values.
    findings = [f for f in check_cluster(settings, connect(str(live.kubeconfig))) if f.kind == "pods-stale"]
    assert {f.object for f in findings} == _expected_owners()
    planned = live.run_rollout("--json", "--max-concurrent", str(WAVE))
    assert planned.returncode == 1, planned.stderr
    plan = json.loads(planned.stdout)
    assert {f"{s['kind']} {s['namespace']}/{s['name']}" for wave in plan["waves"] for s in wave} == _expected_owners()
    assert all(len(wave) <= WAVE for wave in plan["waves"])
    assert plan["notRestarted"] == []
    (blocked_step,) = [s for wave in plan["waves"] for s in wave if (s["namespace"], s["name"]) == BLOCKED]
    assert blocked_step["blockingPdbs"] == [f"{BLOCKED[0]}/{BLOCKED[1]}-pdb"]

    # 3. Applied, and interrupted once its progress (stderr) says the SLOW owner is restarting: mid-wave, since that
    #    owner takes 20 s to become available.
    recorder = Recorder(live.kubeconfig)
    recorder.start(live.get("deployments", "-A")["metadata"]["resourceVersion"])
    args = ("--apply", "--max-concurrent", str(WAVE), "--pdb-timeout", str(PDB_TIMEOUT), "--timeout", "180")
    started = time.monotonic()
    proc = subprocess.Popen(live.rollout(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    progress: list[str] = []

    def read_progress() -> None:
        for line in proc.stderr or []:
            progress.append(line)  # line by line, for the loop below to see each as it comes

    reader = threading.Thread(target=read_progress, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while f"proxy-component rollout: Deployment r-a/{SLOW}: restarting\n" not in progress:
            assert proc.poll() is None, "".join(progress)
            assert time.monotonic() < deadline, "timed out waiting: the SLOW owner's restart"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        signals = _signal_state(proc.pid)  # for the failure message, should the signal not stop it
        out = proc.stdout.read() if proc.stdout else ""
        proc.wait(timeout=60)
        reader.join(timeout=60)
        err = "".join(progress)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, f"{out}{err}\nright after SIGINT: {signals}"
    stopped = re.search(r"interrupted: (\d+) restarted, (\d+) in progress; run again to continue\n$", err)
    assert stopped, err
    assert int(stopped.group(2)) >= 1, f"interrupted mid-wave: {err}"
    assert int(stopped.group(1)) >= 2 * WAVE - 1, err  # the first two waves (the bare pod may be among them)

    # The rerun finishes all but the owner its budget blocks: waited on, then reported, not forced.
    blocked = f"Deployment {BLOCKED[0]}/{BLOCKED[1]}"
    rerun = live.run_rollout(*args, timeout=900)
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    assert (f"blocked: {blocked}: blocked by PDB {BLOCKED[0]}/{BLOCKED[1]}-pdb: it allowed no disruption for "
            f"{PDB_TIMEOUT} s (not restarted)\n") in rerun.stdout  # fmt: skip
    assert f"{blocked}: waiting: PDB {BLOCKED[0]}/{BLOCKED[1]}-pdb allows no disruption now" in rerun.stderr
    assert f"Deployment r-a/{SLOW}: restarted for this configuration by an earlier run: waiting for it" in rerun.stderr
    assert all(line.startswith(("restarted: ", "evicted: ", f"blocked: {blocked}:"))
               for line in rerun.stdout.splitlines()), rerun.stdout  # fmt: skip

    # 4. The budget removed from the program with `pulumi up`, a last run restarts the owner.
    project.config("staleness:blocked", "none")
    assert changes(project.preview_json()) == {"delete": [f"{BLOCKED[1]}-pdb"]}
    project.up()
    last = live.run_rollout(*args)
    assert last.returncode == 0, last.stdout + last.stderr
    assert last.stdout == f"restarted: {blocked}: complete and available\n"
    elapsed = time.monotonic() - started
    wait_for(live.complete, "every owner complete")
    after = live.run_rollout("--json")
    assert after.returncode == 0, after.stdout + after.stderr
    assert json.loads(after.stdout) == {"target": target, "maxConcurrent": 5, "waves": [], "notRestarted": []}
    assert [f for f in check_cluster(settings, connect(str(live.kubeconfig))) if f.kind == "pods-stale"] == []
    project.run("preview", "--expect-no-changes")
    recorder.stop()

    most, stamps, rolling = recorder.replay(target)
    assert most <= WAVE, f"{most} owners rolling at once: {rolling}\n{err}\n{rerun.stderr}"
    assert most >= 2, "waves ran owners side by side"
    now = live.owners()
    for key, obj in before.items():
        assert len(stamps.get(key, set())) == 1, f"{key}: restartedAt values {stamps.get(key)}"
        assert now[key]["metadata"]["generation"] == obj["metadata"]["generation"] + 1, f"{key}: restarted once"
    print(
        f"rollout of {len(before)} owners + 1 bare pod after `pulumi up`: {elapsed:.0f} s in all three runs; "
        f"at most {most} rolling at once"
    )
