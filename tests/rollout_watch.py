"""What `proxy-component rollout --apply` does to a real cluster, recorded: a watch on Deployments and StatefulSets
from a resourceVersion on, replayed in resourceVersion order (etcd's revision, one sequence for every kind), shows
how many owners were rolling at any moment and each owner's restartedAt values (tests/engine/test_rollout_engine.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy_component.live.rollout import RESTARTED_AT, RESTARTED_FOR, rollout_status

Obj = dict[str, Any]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 180) -> None:
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
        return sum(1 for o in latest.values() if template_annotations(o).get(RESTARTED_FOR) == target)

    def replay(self, target: str) -> tuple[int, dict[tuple[str, str, str], set[str]], list[str]]:
        """The most owners rolling at once (restarted for the target, not complete), each owner's restartedAt values,
        in resourceVersion order, and the owners rolling at the first moment the most were (for a failure's
        message), each with its state."""
        assert self.errors == [], "every change was recorded"
        with self.lock:
            events = sorted(self.events, key=lambda e: e[0])
        state: dict[tuple[str, str, str], Obj] = {}
        most: list[str] = []
        stamps: dict[tuple[str, str, str], set[str]] = {}
        for version, kind, obj in events:
            key = (kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
            state[key] = obj
            stamp = template_annotations(obj).get(RESTARTED_AT)
            if stamp:
                stamps.setdefault(key, set()).add(stamp)
            rolling = [f"{k} {ns}/{name}: {rollout_status(k, o)[1]} (resourceVersion {version})"
                       for (k, ns, name), o in sorted(state.items())
                       if template_annotations(o).get(RESTARTED_FOR) == target and rollout_status(k, o)[0] != "done"]  # fmt: skip
            if len(rolling) > len(most):
                most = rolling
        return len(most), stamps, most


def template_annotations(obj: Obj) -> dict[str, str]:
    return dict((obj["spec"]["template"].get("metadata") or {}).get("annotations") or {})
