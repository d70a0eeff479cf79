"""`proxy-component rollout --apply` against a real cluster (pytest -m cluster): kube-apiserver, the real
controller-manager (Deployment, StatefulSet, ReplicaSet and disruption controllers) and scheduler, with kwok
running the pods (scripts/cluster).

50 Deployments and 10 StatefulSets in three namespaces (half read `proxy-config` through envFrom, half through
`valueFrom.configMapKeyRef`, what the transform writes when it injects by reference), some with
PodDisruptionBudgets (one that allows no disruption) and a bare Pod, are applied with kubectl (not `pulumi up`);
a NO_PROXY entry is then added to the settings and the re-rendered `proxy-config` applied, which makes every one
of their pods stale. rollout runs as the ServiceAccount bound to exactly `render --format rollout-rbac`'s roles.

A watch on Deployments and StatefulSets records every change; replayed in resourceVersion order (etcd's revision,
one sequence for every kind), it shows how many owners were rolling at any moment, and each owner's template
changes (restartedAt values, generations) show that none was restarted twice across an interrupt and two reruns.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.live.access import ROLLOUT_NAME
from proxy_component.live.rollout import RESTARTED_AT, RESTARTED_FOR, rollout_status
from proxy_component.live.stale import current_target
from proxy_component.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster
NAMESPACES = ("r-a", "r-b", "r-c")
SETTINGS = f"""\
cluster:
  podCidrs: ["10.0.0.0/16"]
  serviceCidrs: ["10.0.0.0/24"]
  nodeCidrs: ["192.0.2.0/24"]
namespaces: [{", ".join(NAMESPACES)}]
"""
CHANGED = SETTINGS + "proxy:\n  noProxy: [registry.corp.example]\n"
DEPLOYMENTS, STATEFULSETS, WAVE = 50, 10, 5
BLOCKED = ("r-b", "d049")  # its PDB allows no disruption
SLOW = "d030"  # in r-a's third wave (r-a's Deployments d000, d003, ... come first)
PDB_TIMEOUT = 8
Obj = dict[str, Any]


def _container(index: int, keys: list[str]) -> Obj:
    container: Obj = {"name": "app", "image": "registry.example/app:1"}
    if index % 2 == 0:
        container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    else:  # by reference, as the transform injects without the storm
        container["env"] = [{"name": k, "valueFrom": {"configMapKeyRef": {"name": "proxy-config", "key": k}}}
                            for k in keys]  # fmt: skip
    return container


def _workloads(keys: list[str]) -> list[Obj]:
    objects: list[Obj] = []
    for i in range(DEPLOYMENTS + STATEFULSETS):
        kind = "Deployment" if i < DEPLOYMENTS else "StatefulSet"
        name = f"d{i:03d}" if kind == "Deployment" else f"s{i - DEPLOYMENTS:03d}"
        namespace = NAMESPACES[i % 3]
        labels = {"app": name}
        spec: Obj = {
            "replicas": 1 + i % 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [_container(i, keys)]}},
        }
        if kind == "StatefulSet":
            spec.update(serviceName=name, podManagementPolicy="Parallel")
        if name == SLOW:
            spec["minReadySeconds"] = 20  # its rollout lasts 20 s at least: the interrupt lands mid-wave
        objects.append({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace},
                        "spec": spec})  # fmt: skip
        if i % 10 == 1 or (namespace, name) == BLOCKED:  # some with budgets; one allows no disruption
            budget = {"maxUnavailable": 0} if (namespace, name) == BLOCKED else {"minAvailable": 1}
            objects.append({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                            "metadata": {"name": f"{name}-pdb", "namespace": namespace},
                            "spec": {"selector": {"matchLabels": labels}, **budget}})  # fmt: skip
    objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": "r-a",
                    "labels": {"app": "bare"}}, "spec": {"containers": [_container(0, keys)]}})  # fmt: skip
    return objects


class Live:
    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.role_kubeconfig = workdir / "rollout.kubeconfig"
        self.settings = workdir / "proxy.yaml"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig), *args], input=stdin,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "proxy_component.cli", *args], capture_output=True, text=True,
                              timeout=900, cwd=ROOT)  # fmt: skip

    def rollout(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "proxy_component.cli", "rollout", str(self.settings), "--kubeconfig",
                str(self.role_kubeconfig), *args]  # fmt: skip

    def proxy_config(self, settings: str) -> None:
        path = self.workdir / "render.yaml"
        path.write_text(settings)
        rendered = self.cli("render", str(path))
        assert rendered.returncode == 0, rendered.stderr
        configs = [o for o in yaml.safe_load_all(rendered.stdout) if o["metadata"]["name"] == "proxy-config"]
        assert sorted(o["metadata"]["namespace"] for o in configs) == list(NAMESPACES)
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(configs))

    def owners(self) -> dict[tuple[str, str, str], Obj]:
        found: dict[tuple[str, str, str], Obj] = {}
        for kind in ("Deployment", "StatefulSet"):
            items = json.loads(self.kubectl("get", kind.lower() + "s", "-A", "-o", "json"))["items"]
            found |= {(kind, o["metadata"]["namespace"], o["metadata"]["name"]): o for o in items
                      if o["metadata"]["namespace"] in NAMESPACES}  # fmt: skip
        return found


def _wait(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(1)


class Recorder:
    """Every watch event of Deployments and StatefulSets, as the API server's JSON, from a resourceVersion on."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config, watch

        self.api = client.AppsV1Api(config.new_client_from_config(config_file=str(kubeconfig)))  # type: ignore[no-untyped-call]
        self.watch = watch
        self.events: list[tuple[int, str, Obj]] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def start(self, resource_version: str) -> None:
        for kind, method in (("Deployment", self.api.list_deployment_for_all_namespaces),
                             ("StatefulSet", self.api.list_stateful_set_for_all_namespaces)):  # fmt: skip
            thread = threading.Thread(target=self._run, args=(kind, method, resource_version), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _run(self, kind: str, method: Any, resource_version: str) -> None:
        try:
            self._watch(kind, method, resource_version)
        except Exception as exc:  # the connection closes when the cluster goes down: only an error before counts
            if not self.stopped.is_set():
                self.errors.append(f"watch of {kind}: {exc!r}")

    def _watch(self, kind: str, method: Any, resource_version: str) -> None:
        version = resource_version
        while not self.stopped.is_set():
            stream = self.watch.Watch()  # type: ignore[no-untyped-call]
            for event in stream.stream(method, resource_version=version, timeout_seconds=30):  # type: ignore[no-untyped-call]
                raw = event["raw_object"]
                if event["type"] == "ERROR":  # e.g. 410 Gone: the test fails on the missing events, not silently
                    raise AssertionError(f"watch of {kind}: {raw}")
                version = raw["metadata"]["resourceVersion"]
                with self.lock:
                    self.events.append((int(version), kind, raw))
                if self.stopped.is_set():
                    stream.stop()  # type: ignore[no-untyped-call]

    def stop(self) -> None:
        self.stopped.set()

    def restarted(self, target: str) -> int:
        """How many owners carry restarted-for the target now."""
        with self.lock:
            latest = {(k, o["metadata"]["namespace"], o["metadata"]["name"]): o for _, k, o in sorted(self.events,
                      key=lambda e: e[0])}  # fmt: skip
        return sum(1 for o in latest.values() if _annotations(o).get(RESTARTED_FOR) == target)

    def replay(self, target: str) -> tuple[int, dict[tuple[str, str, str], set[str]]]:
        """The most owners rolling at once (restarted for the target, not complete), and each owner's restartedAt
        values, in resourceVersion order."""
        assert self.errors == [], "every change was recorded"
        with self.lock:
            events = sorted(self.events, key=lambda e: e[0])
        state: dict[tuple[str, str, str], Obj] = {}
        most = 0
        stamps: dict[tuple[str, str, str], set[str]] = {}
        for _, kind, obj in events:
            key = (kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
            state[key] = obj
            stamp = _annotations(obj).get(RESTARTED_AT)
            if stamp:
                stamps.setdefault(key, set()).add(stamp)
            rolling = sum(1 for (k, _, _), o in state.items()
                          if _annotations(o).get(RESTARTED_FOR) == target and rollout_status(k, o)[0] != "done")  # fmt: skip
            most = max(most, rolling)
        return most, stamps


def _annotations(obj: Obj) -> dict[str, str]:
    return dict((obj["spec"]["template"].get("metadata") or {}).get("annotations") or {})


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("rollout")
    env = {**os.environ, "PROXY_COMPONENT_CLUSTER": f"pc-rollout-{os.getpid()}", "KWOK_WORKDIR": str(workdir / "kwok")}
    up = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "up", "2"], capture_output=True, text=True, env=env,
                        timeout=3000)  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"scripts/cluster up failed: {up.stderr}")
    try:
        yield Live(Path(up.stdout.strip().splitlines()[-1]), workdir)
    finally:
        down = subprocess.run(["bash", str(ROOT / "scripts/cluster"), "down"], capture_output=True, text=True, env=env,
                              timeout=300)  # fmt: skip
        assert down.returncode == 0, down.stderr


def _complete(live: Live) -> bool:
    owners = live.owners()
    return len(owners) == DEPLOYMENTS + STATEFULSETS and all(rollout_status(k, o)[0] == "done"
                                                              for (k, _, _), o in owners.items())  # fmt: skip


def test_rollout_restarts_stale_owners_in_waves_waits_on_a_pdb_and_resumes_after_sigint(live: Live) -> None:
    for namespace in NAMESPACES:
        live.kubectl("create", "namespace", namespace)
    live.settings.write_text(SETTINGS)
    live.proxy_config(SETTINGS)
    keys = sorted(json.loads(live.kubectl("-n", "r-a", "get", "configmap", "proxy-config", "-o", "json"))["data"])
    live.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(_workloads(keys)))
    _wait(lambda: _complete(live), "every owner complete and available")
    _wait(lambda: json.loads(live.kubectl("-n", "r-a", "get", "pod", "bare", "-o", "json"))["status"].get("phase")
          == "Running", "the bare pod running")  # fmt: skip
    # The role, and a token for it.
    rbac = live.cli("render", str(live.settings), "--format", "rollout-rbac")
    assert rbac.returncode == 0, rbac.stderr
    live.kubectl("apply", "-f", "-", stdin=rbac.stdout)
    token = live.kubectl("-n", "kube-system", "create", "token", ROLLOUT_NAME, "--duration=2h").strip()
    config = yaml.safe_load(live.kubeconfig.read_text())
    config["users"] = [{"name": "token", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "token"
    live.role_kubeconfig.write_text(yaml.safe_dump(config))

    # Nothing is stale yet; then the change.
    clean = subprocess.run(live.rollout(), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    time.sleep(1.5)  # start times and managedFields times are to the second
    live.settings.write_text(CHANGED)
    live.proxy_config(CHANGED)
    target = current_target(load_settings(str(live.settings)))
    before = live.owners()

    planned = subprocess.run(live.rollout("--json", "--max-concurrent", str(WAVE)), capture_output=True, text=True,
                             timeout=300, cwd=ROOT)  # fmt: skip
    assert planned.returncode == 1, planned.stderr
    plan = json.loads(planned.stdout)
    refs = {f"{s['kind']} {s['namespace']}/{s['name']}" for wave in plan["waves"] for s in wave}
    expected = {f"{k} {ns}/{n}" for k, ns, n in before} | {"Pod r-a/bare"}
    assert refs == expected, "the stale owners are exactly what the test changed"
    assert all(len(wave) <= WAVE for wave in plan["waves"])
    assert plan["notRestarted"] == []
    (blocked_step,) = [s for wave in plan["waves"] for s in wave if (s["namespace"], s["name"]) == BLOCKED]
    assert blocked_step["blockingPdbs"] == ["r-b/d049-pdb"]

    resource_version = json.loads(live.kubectl("get", "deployments", "-A", "-o", "json"))["metadata"]["resourceVersion"]
    recorder = Recorder(live.kubeconfig)
    recorder.start(resource_version)
    args = ("--apply", "--max-concurrent", str(WAVE), "--pdb-timeout", str(PDB_TIMEOUT), "--timeout", "180")
    started = time.monotonic()
    # 1. Interrupted mid-wave: once the third wave is being restarted.
    proc = subprocess.Popen(live.rollout(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 300
        while recorder.restarted(target) <= 2 * WAVE:  # the third wave restarted (its SLOW owner takes 20 s)
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out waiting: the third wave"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    stopped = re.search(r"interrupted: (\d+) restarted, (\d+) in progress; run again to continue\n$", err)
    assert stopped, err
    assert int(stopped.group(2)) >= 1, f"interrupted mid-wave: {err}"
    assert int(stopped.group(1)) >= 2 * WAVE - 1, err  # the first two waves (the bare pod may be among them)
    patched_at_interrupt = recorder.restarted(target)

    # 2. The rerun finishes all but the owner its PDB blocks, and reports that one.
    rerun = subprocess.run(live.rollout(*args), capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    assert (f"blocked: Deployment r-b/d049: blocked by PDB r-b/d049-pdb: it allowed no disruption for {PDB_TIMEOUT} s "
            "(not restarted)\n") in rerun.stdout  # fmt: skip
    assert "Deployment r-b/d049: waiting: PDB r-b/d049-pdb allows no disruption now" in rerun.stderr
    assert f"Deployment r-a/{SLOW}: restarted for this configuration by an earlier run: waiting for it" in rerun.stderr
    assert all(line.startswith(("restarted: ", "evicted: ", "blocked: Deployment r-b/d049:"))
               for line in rerun.stdout.splitlines()), rerun.stdout  # fmt: skip

    # 3. The budget removed, a last run restarts it; then nothing is stale.
    live.kubectl("-n", "r-b", "delete", "pdb", "d049-pdb")
    last = subprocess.run(live.rollout(*args), capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert last.returncode == 0, last.stdout + last.stderr
    assert last.stdout == "restarted: Deployment r-b/d049: complete and available\n"
    elapsed = time.monotonic() - started
    _wait(lambda: _complete(live), "every owner complete")
    after = subprocess.run(live.rollout("--json"), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert after.returncode == 0, after.stdout + after.stderr
    assert json.loads(after.stdout) == {"target": target, "maxConcurrent": 5, "waves": [], "notRestarted": []}
    recorder.stop()

    most, stamps = recorder.replay(target)
    assert most <= WAVE, f"{most} owners rolling at once"
    assert most >= 2, "waves ran owners side by side"
    now = live.owners()
    for key, obj in before.items():
        assert len(stamps.get(key, set())) == 1, f"{key}: restartedAt values {stamps.get(key)}"
        assert now[key]["metadata"]["generation"] == obj["metadata"]["generation"] + 1, f"{key}: restarted once"
    print(
        f"rollout of {len(before)} owners + 1 bare pod: interrupted after {patched_at_interrupt} restarted; "
        f"{elapsed:.0f} s in all three runs; at most {most} rolling at once"
    )
