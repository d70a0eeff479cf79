"""`rollout` without a cluster: a fake API server whose controllers make one step per tick (the runner's sleep),
so that waves, PodDisruptionBudgets, refused evictions, timeouts and an interrupt mid-wave play out in
milliseconds. Stale pods carry an old values digest (as admission stamps pods); a pod a controller makes after
a restart carries the current one. The stale owners come from `live.stale` itself, through the same fake.
tests/engine/test_rollout_engine.py runs it against a real API server and controllers, after `pulumi up`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiException

from proxy_component.cli import main
from proxy_component.live import rollout as rollout_module
from proxy_component.live.access import ROLLOUT_NAME, rollout_accesses, rollout_rbac_objects
from proxy_component.live.cluster import CheckError, Cluster
from proxy_component.live.rollout import (
    RESTARTED_AT,
    RESTARTED_FOR,
    RolloutInterruptedError,
    Runner,
    capi_plan,
    plan_rollout,
    rollout_status,
    selects,
)
from proxy_component.live.stale import current_target, stale_owners
from proxy_component.render.digest import REFERENCE, VALUES_ANNOTATION
from proxy_component.settings import Settings, parse_settings
from tests.unit.test_check import _grants

Obj = dict[str, Any]
BASE: dict[str, Any] = {"cluster": {"podCidrs": ["10.0.0.0/16"], "nodeCidrs": ["192.0.2.0/24"]},
                        "namespaces": ["apps", "web"]}  # fmt: skip
OLD = "0123456789abcdef-none"  # the digest the running pods were given before the change
KINDS = {  # the client's method suffix -> kind
    "namespaced_deployment": "Deployment",
    "namespaced_stateful_set": "StatefulSet",
    "namespaced_daemon_set": "DaemonSet",
    "namespaced_replica_set": "ReplicaSet",
    "namespaced_pod": "Pod",
    "namespaced_job": "Job",
    "namespaced_cron_job": "CronJob",
    "namespaced_config_map": "ConfigMap",
    "namespaced_secret": "Secret",
    "namespaced_pod_disruption_budget": "PodDisruptionBudget",
}


def _raw(body: Obj) -> Any:
    return SimpleNamespace(data=json.dumps(body).encode())


def _api_error(status: int, message: str, causes: list[str] | None = None) -> ApiException:
    error = ApiException(status=status, reason={404: "Not Found", 429: "Too Many Requests"}.get(status, "Error"))
    details = {"causes": [{"reason": "DisruptionBudget", "message": c} for c in causes or []]}
    error.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status,
                             "details": details})  # fmt: skip
    return error


class World:
    """The objects of a fake cluster, and its controllers: a restarted owner needs `steps` ticks to roll (its
    status says so meanwhile, as the real controllers' do), then its pods are new ones with the current digest."""

    def __init__(self, settings: Settings, steps: int = 2) -> None:
        self.target = current_target(settings)
        self.steps = steps
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (kind, namespace, name)
        self.now = 0.0
        self.rolling: dict[tuple[str, str, str], int] = {}  # owner -> ticks left
        self.max_rolling = 0
        self.patches: list[tuple[str, str, str, Obj, str]] = []
        self.evictions: list[tuple[str, str]] = []
        self.refuse: dict[str, int] = {}  # pod -> how many evictions to refuse with 429 (-1: always)
        self.interrupt_at: float | None = None
        self.pdb_allows_at: dict[str, float] = {}  # PDB name -> when it starts to allow a disruption
        self.counter = 0
        self.list_versions: list[str | None] = []  # each list request's resourceVersion

    # --- building -------------------------------------------------------------------------------------------------
    def add(self, kind: str, namespace: str, name: str, **fields: Any) -> Obj:
        obj: Obj = {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}-{self.counter}", **fields.pop("meta", {})}, **fields}  # fmt: skip
        self.counter += 1
        self.objects[(kind, namespace, name)] = obj
        return obj

    def pod(self, namespace: str, name: str, labels: dict[str, str], owner: tuple[str, str] | None = None,
            digest: str = OLD) -> Obj:  # fmt: skip
        meta: Obj = {"labels": dict(labels), "annotations": {VALUES_ANNOTATION: digest}}
        if owner:
            meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
        spec = {"containers": [{"name": "app", "image": "app:1"}]}
        return self.add("Pod", namespace, name, meta=meta, spec=spec, status={"phase": "Running"})

    def workload(self, kind: str, namespace: str, name: str, replicas: int = 2, **spec: Any) -> Obj:
        labels = {"app": name}
        template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}}
        obj = self.add(kind, namespace, name, meta={"generation": 1},
                       spec={"replicas": replicas, "selector": {"matchLabels": labels}, "template": template, **spec},
                       status={})  # fmt: skip
        self._settle(kind, obj)
        self._pods(kind, namespace, name, 1, OLD)
        return obj

    def _pods(self, kind: str, namespace: str, name: str, revision: int, digest: str) -> None:
        for key in [k for k, o in self.objects.items() if k[0] == "Pod" and k[1] == namespace
                    and (o["metadata"].get("labels") or {}).get("app") == name]:  # fmt: skip
            del self.objects[key]
        replicas = int(self.objects[(kind, namespace, name)]["spec"].get("replicas", 1))
        owner = (kind, name)
        if kind == "Deployment":
            rs = f"{name}-{revision}"
            self.add("ReplicaSet", namespace, rs, meta={"ownerReferences": [
                {"kind": "Deployment", "name": name, "controller": True}]}, spec={"replicas": replicas})  # fmt: skip
            owner = ("ReplicaSet", rs)
        for i in range(replicas):
            self.pod(namespace, f"{name}-{revision}-{i}", {"app": name}, owner, digest)

    def _settle(self, kind: str, obj: Obj) -> None:
        """The status of a complete, available owner."""
        replicas = int(obj["spec"].get("replicas", 1))
        gen = obj["metadata"].setdefault("generation", 1)
        obj["status"] = {
            "Deployment": {"observedGeneration": gen, "replicas": replicas, "updatedReplicas": replicas,
                           "availableReplicas": replicas, "readyReplicas": replicas},
            "StatefulSet": {"observedGeneration": gen, "replicas": replicas, "readyReplicas": replicas,
                            "availableReplicas": replicas, "updatedReplicas": replicas, "currentRevision": f"r{gen}",
                            "updateRevision": f"r{gen}"},
            "DaemonSet": {"observedGeneration": gen, "desiredNumberScheduled": replicas,
                          "updatedNumberScheduled": replicas, "numberAvailable": replicas},
            "ReplicaSet": {"observedGeneration": gen, "replicas": replicas, "readyReplicas": replicas,
                           "availableReplicas": replicas},
        }[kind]  # fmt: skip

    def pdb(self, namespace: str, name: str, labels: dict[str, str], allowed: int) -> None:
        self.add("PodDisruptionBudget", namespace, name, spec={"selector": {"matchLabels": labels}},
                 status={"disruptionsAllowed": allowed})  # fmt: skip

    # --- time -----------------------------------------------------------------------------------------------------
    def tick(self, seconds: float) -> None:
        self.now += seconds
        if self.interrupt_at is not None and self.now >= self.interrupt_at:
            self.interrupt_at = None
            raise KeyboardInterrupt
        for key in list(self.rolling):
            self.rolling[key] -= 1
            kind, namespace, name = key
            obj = self.objects[key]
            gen = obj["metadata"]["generation"]
            obj["status"].update({"observedGeneration": gen, "updatedReplicas": 0, "updateRevision": f"r{gen}",
                                  "updatedNumberScheduled": 0})  # seen, new pods not yet there  # fmt: skip
            if self.rolling[key] <= 0:
                del self.rolling[key]
                self._settle(kind, obj)
                self._pods(kind, namespace, name, obj["metadata"]["generation"], self.target)
        for (kind, _, name), obj in self.objects.items():
            if kind == "PodDisruptionBudget" and name in self.pdb_allows_at and self.now >= self.pdb_allows_at[name]:
                obj["status"]["disruptionsAllowed"] = 1
            if kind == "ReplicaSet":
                self._settle("ReplicaSet", obj)  # a replacement pod is available one tick after an eviction
        for key, obj in list(self.objects.items()):
            if key[0] == "Pod" and obj["metadata"].get("deletionTimestamp"):
                del self.objects[key]
                refs = obj["metadata"].get("ownerReferences") or []
                if refs and refs[0]["kind"] == "ReplicaSet":
                    self.pod(key[1], f"{key[2]}-new", obj["metadata"]["labels"], ("ReplicaSet", refs[0]["name"]),
                             self.target)  # fmt: skip

    # --- the API --------------------------------------------------------------------------------------------------
    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        verb, _, rest = method.partition("_")
        if method == "create_namespaced_pod_eviction":
            return self._evict(args[0], args[1])
        kind = KINDS[rest]
        if verb == "list":
            self.list_versions.append(kwargs.get("resource_version"))
            namespace = args[0]
            selector = kwargs.get("label_selector")
            items = [copy.deepcopy(o) for (k, ns, _), o in sorted(self.objects.items())
                     if k == kind and ns == namespace and _label_match(o, selector)]  # fmt: skip
            return _raw({"metadata": {}, "items": items})
        name, namespace = args[0], args[1]
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            raise _api_error(404, f'{kind.lower()}s "{name}" not found')
        if verb == "read":
            return _raw(copy.deepcopy(obj))
        assert verb == "patch", method
        body = args[2]
        assert kwargs["_content_type"] == "application/strategic-merge-patch+json"
        self.patches.append((kind, namespace, name, body, kwargs["_content_type"]))
        annotations = body["spec"]["template"]["metadata"]["annotations"]
        template_meta = obj["spec"]["template"].setdefault("metadata", {})
        template_meta.setdefault("annotations", {}).update(annotations)
        obj["metadata"]["generation"] += 1
        self.rolling[(kind, namespace, name)] = self.steps
        self.max_rolling = max(self.max_rolling, len(self.rolling))
        return _raw(copy.deepcopy(obj))

    def _evict(self, name: str, namespace: str) -> Any:
        pod = self.objects.get(("Pod", namespace, name))
        if pod is None:
            raise _api_error(404, f'pods "{name}" not found')
        left = self.refuse.get(name, 0)
        if left:
            self.refuse[name] = left - 1 if left > 0 else left
            raise _api_error(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                             ["The disruption budget bare-pdb needs 1 healthy pods and has 1 currently"])  # fmt: skip
        self.evictions.append((namespace, name))
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return _raw({"kind": "Status", "status": "Success"})

    def patched(self) -> list[str]:
        return [f"{kind} {ns}/{name}" for kind, ns, name, _, _ in self.patches]


def _label_match(obj: Obj, selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (part.split("=") for part in selector.split(",")))


class _Client:
    def __init__(self, world: World) -> None:
        self.world = world

    def __getattr__(self, method: str) -> Any:
        if not method.startswith(("list_", "read_", "patch_", "create_")):
            raise AttributeError(method)
        return lambda *args, **kwargs: self.world.call(method, *args, **kwargs)


def _cluster(world: World) -> Cluster:
    client = _Client(world)
    return Cluster({name: client for name in ("core", "apps", "batch", "networking", "policy")},
                   server="https://127.0.0.1:6443")  # fmt: skip


def _runner(settings: Settings, world: World, cluster: Cluster, plan: Any, **options: Any) -> Runner:
    return Runner(settings, cluster, plan, sleep=world.tick, clock=lambda: world.now, now=lambda: "2026-11-26T06:00:00Z",
                  **options)  # fmt: skip


@pytest.fixture
def settings() -> Settings:
    return parse_settings(BASE)


def _fleet(settings: Settings, deployments: int = 7, statefulsets: int = 2) -> World:
    world = World(settings)
    for i in range(deployments):
        world.workload("Deployment", ["apps", "web"][i % 2], f"d{i:02d}")
    for i in range(statefulsets):
        world.workload("StatefulSet", "apps", f"s{i:02d}")
    return world


# --- the plan -------------------------------------------------------------------------------------------------------


def test_the_plan_lists_stale_owners_in_waves_and_changes_nothing(settings: Settings) -> None:
    world = _fleet(settings)
    world.workload("Deployment", "apps", "fresh")
    for key, obj in world.objects.items():  # a current owner: its pods carry the current digest
        if key[0] == "Pod" and key[2].startswith("fresh-"):
            obj["metadata"]["annotations"][VALUES_ANNOTATION] = world.target
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster, max_concurrent=4)
    assert [[s.owner.ref for s in wave] for wave in plan.waves] == [
        ["Deployment apps/d00", "Deployment apps/d02", "Deployment apps/d04", "Deployment apps/d06"],
        ["StatefulSet apps/s00", "StatefulSet apps/s01", "Deployment web/d01", "Deployment web/d03"],
        ["Deployment web/d05"],
    ]
    assert {s.action for s in plan.steps} == {"restart"}
    reason = plan.steps[0].owner.pods[0].reason
    assert OLD[:4] in reason, "the stale pods' reason names their digest"
    assert plan.steps[0].why == f"2 pods: {reason}", "two pods, one reason: said once"
    assert world.patches == []
    assert world.evictions == []
    assert all(a.api.verb in ("get", "list") for a in cluster.accessed)


def test_jobs_cronjobs_and_what_a_restart_cannot_fix_are_listed_never_restarted(settings: Settings) -> None:
    world = World(settings)
    world.add("Job", "apps", "migrate")
    world.pod("apps", "migrate-x", {"job": "migrate"}, ("Job", "migrate"))
    world.add("Job", "apps", "nightly-1", meta={"ownerReferences": [{"kind": "CronJob", "name": "nightly", "controller": True}]})  # fmt: skip
    world.pod("apps", "nightly-1-x", {"job": "nightly"}, ("Job", "nightly-1"))
    world.workload("StatefulSet", "apps", "ondelete", updateStrategy={"type": "OnDelete"})
    stamped = world.workload("Deployment", "apps", "stamped")
    stamped["spec"]["template"]["metadata"]["annotations"] = {VALUES_ANNOTATION: OLD}
    world.workload("Deployment", "apps", "paused", paused=True)
    plan = plan_rollout(settings, _cluster(world))
    assert plan.waves == ()
    reasons = {item.owner.ref: item.reason for item in plan.listed}
    assert reasons == {
        "CronJob apps/nightly": "a CronJob's Jobs are never restarted: its next Job gets the new values",
        "Deployment apps/paused": "it is paused: a restart waits until `kubectl rollout resume`",
        "Deployment apps/stamped": f"its pod template holds values-digest {OLD}, not the current {world.target}: a "
        "restart would bring the old values back (apply the stack, chart or patch that injects them first)",
        "Job apps/migrate": "a Job's pods run to completion and are never restarted: run it again to give it the new "
        "values",
        "StatefulSet apps/ondelete": "its updateStrategy is OnDelete: a template change restarts no pod (delete its "
        "pods one at a time, or switch it to RollingUpdate)",
    }
    outcomes = _runner(settings, world, _cluster(world), plan).run()
    assert outcomes == []
    assert world.patches == []
    assert world.evictions == []


def test_an_owner_injected_by_reference_is_restarted_not_listed(settings: Settings) -> None:
    """A template the transform injects by reference is stamped `reference`, never the current digest: a restart
    reads proxy-config's current values, so it is restarted (listed, it would never get them)."""
    world = World(settings)
    by_reference = world.workload("Deployment", "apps", "by-reference")
    by_reference["spec"]["template"]["metadata"]["annotations"] = {VALUES_ANNOTATION: REFERENCE}
    plan = plan_rollout(settings, _cluster(world))
    assert plan.listed == ()
    assert [(s.owner.ref, s.action) for s in plan.steps] == [("Deployment apps/by-reference", "restart")]


# --- apply ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 5])
def test_waves_never_exceed_max_concurrent_and_each_waits_for_complete_and_available(
    settings: Settings, size: int
) -> None:
    world = _fleet(settings)
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster, max_concurrent=size)
    outcomes = _runner(settings, world, cluster, plan).run()
    assert [o.status for o in outcomes] == ["restarted"] * 9
    assert world.max_rolling == size
    assert sorted(world.patched()) == sorted(s.owner.ref for s in plan.steps), "each owner patched once"
    for _, _, _, body, _ in world.patches:
        assert body == {"spec": {"template": {"metadata": {"annotations": {
            RESTARTED_AT: "2026-11-26T06:00:00Z", RESTARTED_FOR: world.target}}}}}  # fmt: skip
    assert stale_owners(settings, cluster) == []
    assert plan_rollout(settings, cluster).waves == ()


def test_an_owner_already_restarted_for_the_target_is_waited_for_not_patched_again(settings: Settings) -> None:
    world = _fleet(settings, deployments=2, statefulsets=0)
    cluster = _cluster(world)
    first = plan_rollout(settings, cluster)
    world.call("patch_namespaced_deployment", "d00", "apps", {"spec": {"template": {"metadata": {"annotations": {
        RESTARTED_FOR: world.target}}}}}, _content_type="application/strategic-merge-patch+json")  # fmt: skip
    world.patches.clear()
    plan = plan_rollout(settings, cluster)
    assert [(s.owner.ref, s.action) for s in plan.steps] == [("Deployment apps/d00", "wait"),
                                                             ("Deployment web/d01", "restart")]  # fmt: skip
    assert [(s.owner.ref, s.action) for s in first.steps] == [("Deployment apps/d00", "restart"),
                                                              ("Deployment web/d01", "restart")]  # fmt: skip
    outcomes = _runner(settings, world, cluster, plan).run()
    assert [(o.ref, o.status) for o in outcomes] == [("Deployment apps/d00", "restarted"),
                                                     ("Deployment web/d01", "restarted")]  # fmt: skip
    assert world.patched() == ["Deployment web/d01"]
    # Restarted for another configuration: restarted again for this one.
    world2 = _fleet(settings, deployments=1, statefulsets=0)
    world2.objects[("Deployment", "apps", "d00")]["spec"]["template"]["metadata"]["annotations"] = {RESTARTED_FOR: "other"}  # fmt: skip
    assert [s.action for s in plan_rollout(settings, _cluster(world2)).steps] == ["restart"]


def test_an_owner_a_lagging_cache_shows_unrestarted_is_read_again_and_not_restarted_twice(
    settings: Settings,
) -> None:
    """A plan's lists may lag a restart another or an interrupted run made (the plan alone reads the API server's
    watch cache); that restart must not be made again: the owner is read again by name, consistently, before its
    restart."""
    world = _fleet(settings, deployments=2, statefulsets=0)
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)  # as the cache had it: neither restarted
    assert [s.action for s in plan.steps] == ["restart", "restart"]
    world.call("patch_namespaced_deployment", "d00", "apps", {"spec": {"template": {"metadata": {"annotations": {
        RESTARTED_FOR: world.target}}}}}, _content_type="application/strategic-merge-patch+json")  # fmt: skip
    world.patches.clear()  # what the interrupted run did, after the cache was read
    outcomes = _runner(settings, world, cluster, plan).run()
    assert [(o.ref, o.status) for o in outcomes] == [("Deployment apps/d00", "restarted"),
                                                     ("Deployment web/d01", "restarted")]  # fmt: skip
    assert world.patched() == ["Deployment web/d01"], "d00 waited for, not patched again"


def test_an_owner_still_rolling_without_an_old_pod_is_waited_on_first_and_counts_against_the_waves(
    settings: Settings,
) -> None:
    """An interrupted run's restart of a StatefulSet: its old pods are gone, its new ones not yet ready. No pod of
    it is stale, but it is rolling: the rerun waits on it in its first wave, not beside a full wave of restarts."""
    world = _fleet(settings, deployments=4, statefulsets=1)
    key = ("StatefulSet", "apps", "s00")
    world.call("patch_namespaced_stateful_set", "s00", "apps", {"spec": {"template": {"metadata": {"annotations": {
        RESTARTED_FOR: world.target}}}}}, _content_type="application/strategic-merge-patch+json")  # fmt: skip
    world._pods(*key, 2, world.target)  # the new pods, created and not yet ready
    world.objects[key]["status"].update(observedGeneration=2, readyReplicas=1, updateRevision="r2")
    world.patches.clear()
    world.max_rolling = 0
    cluster = _cluster(world)
    assert "StatefulSet apps/s00" not in {o.ref for o in stale_owners(settings, cluster)}, "no stale pod of it"
    plan = plan_rollout(settings, cluster, max_concurrent=2)
    assert [[(s.owner.ref, s.action) for s in wave] for wave in plan.waves] == [
        [("StatefulSet apps/s00", "wait"), ("Deployment apps/d00", "restart")],
        [("Deployment apps/d02", "restart"), ("Deployment web/d01", "restart")],
        [("Deployment web/d03", "restart")],
    ]
    assert plan.waves[0][0].why == "no old pod left, not yet complete: 1 of 2 pods ready"
    assert plan.waves[0][0].as_dict()["pods"] == []
    outcomes = _runner(settings, world, cluster, plan).run()
    assert [o.status for o in outcomes] == ["restarted"] * 5
    assert world.max_rolling == 2, "never a third owner rolling beside the wave"
    assert "StatefulSet apps/s00" not in world.patched()
    assert plan_rollout(settings, cluster).waves == ()  # complete: nothing left to wait on


def test_only_the_plan_reads_the_watch_cache_apply_reads_consistently(
    config: Path, connected: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A list from the watch cache (resourceVersion=0) may lag what an interrupted run just restarted; the waves of
    --apply are made from consistent lists (no resourceVersion)."""
    assert main(["rollout", str(config)]) == 1
    assert connected.list_versions
    assert set(connected.list_versions) == {"0"}
    connected.list_versions.clear()
    assert main(["rollout", str(config), "--apply"]) == 0
    assert connected.list_versions
    assert set(connected.list_versions) == {None}
    capsys.readouterr()


def test_a_pdb_without_disruptions_blocks_then_times_out_with_a_report(settings: Settings) -> None:
    world = _fleet(settings, deployments=3, statefulsets=0)
    world.pdb("apps", "d00-pdb", {"app": "d00"}, allowed=0)
    world.pdb("web", "d01-pdb", {"app": "d01"}, allowed=0)
    world.pdb_allows_at["d01-pdb"] = 5.0  # this one allows a disruption after 5 s: it waits, then restarts
    world.pdb("apps", "other", {"app": "other"}, allowed=0)  # selects none of them
    lines: list[str] = []
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)
    assert [s.pdbs for s in plan.steps] == [("apps/d00-pdb",), (), ("web/d01-pdb",)]
    outcomes = _runner(settings, world, cluster, plan, pdb_timeout=30, progress=lines.append).run()
    result = {o.ref: (o.status, o.detail) for o in outcomes}
    assert result["Deployment apps/d00"] == (
        "blocked",
        "blocked by PDB apps/d00-pdb: it allowed no disruption for 30 s (not restarted)",
    )
    assert result["Deployment web/d01"][0] == result["Deployment apps/d02"][0] == "restarted"
    assert "Deployment apps/d00" not in world.patched()
    assert world.now >= 30, "it waited the whole --pdb-timeout"
    assert "Deployment apps/d00: waiting: PDB apps/d00-pdb allows no disruption now" in lines
    assert sum("d00-pdb allows no disruption" in line for line in lines) == 1, "said once, not per poll"


def test_an_owner_that_never_completes_is_a_failure_after_the_timeout_not_a_hang(settings: Settings) -> None:
    world = _fleet(settings, deployments=2, statefulsets=0)
    world.steps = 10**9  # its controller never finishes
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster, max_concurrent=1)
    outcomes = _runner(settings, world, cluster, plan, timeout=20).run()
    assert [(o.status, o.detail) for o in outcomes] == [
        ("failed", "not complete after 20 s (--timeout): 0 of 2 new replicas updated")
    ] * 2
    assert world.now < 50


def test_bare_pods_are_evicted_a_429_retried_then_reported_never_deleted(settings: Settings) -> None:
    world = World(settings)
    world.pod("apps", "bare-a", {"app": "bare-a"})
    world.pod("apps", "bare-b", {"app": "bare-b"})
    world.refuse["bare-a"] = 2  # refused twice, then allowed
    world.refuse["bare-b"] = -1  # always refused
    lines: list[str] = []
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)
    assert [(s.owner.ref, s.action) for s in plan.steps] == [("Pod apps/bare-a", "evict"), ("Pod apps/bare-b", "evict")]
    outcomes = _runner(settings, world, cluster, plan, pdb_timeout=10, progress=lines.append).run()
    assert next((o.ref, o.status) for o in outcomes) == ("Pod apps/bare-a", "evicted")
    assert outcomes[1].ref == "Pod apps/bare-b"
    assert outcomes[1].status == "blocked"
    assert outcomes[1].detail == (
        "eviction of pod bare-b refused for 10 s: Cannot evict pod as it would violate the pod's disruption budget.; "
        "The disruption budget bare-pdb needs 1 healthy pods and has 1 currently (not evicted, never deleted)"
    )
    assert world.evictions == [("apps", "bare-a")]
    assert ("Pod", "apps", "bare-b") in world.objects
    assert all(a.api.verb != "delete" for a in cluster.accessed)


def test_a_replicaset_without_a_deployment_has_its_pods_evicted_one_at_a_time(settings: Settings) -> None:
    world = World(settings)
    world.add("ReplicaSet", "apps", "lone", spec={"replicas": 2, "template": {"metadata": {"labels": {"app": "lone"}}}},
              status={})  # fmt: skip
    world._settle("ReplicaSet", world.objects[("ReplicaSet", "apps", "lone")])
    for i in range(2):
        world.pod("apps", f"lone-{i}", {"app": "lone"}, ("ReplicaSet", "lone"))
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)
    assert [(s.owner.ref, s.action) for s in plan.steps] == [("ReplicaSet apps/lone", "evict")]
    times: list[float] = []
    original = world._evict

    def evict(name: str, namespace: str) -> Any:
        times.append(world.now)
        return original(name, namespace)

    world._evict = evict  # type: ignore[method-assign]
    outcomes = _runner(settings, world, cluster, plan).run()
    assert [(o.status, o.detail) for o in outcomes] == [("evicted", "2 pod(s) evicted")]
    assert world.evictions == [("apps", "lone-0"), ("apps", "lone-1")]
    assert times[1] > times[0], "the second only after the first is gone and its replacement available"
    assert stale_owners(settings, cluster) == []


def test_an_interrupt_mid_wave_leaves_a_consistent_state_and_a_rerun_restarts_nothing_twice(
    settings: Settings,
) -> None:
    world = _fleet(settings)
    world.steps = 3
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster, max_concurrent=3)
    world.interrupt_at = 4.0  # in the second wave: the first is complete, the second restarted, rolling
    with pytest.raises(RolloutInterruptedError) as stopped:
        _runner(settings, world, cluster, plan).run()
    first = list(world.patched())
    assert first == [s.owner.ref for s in plan.steps[:6]]
    assert stopped.value.message == "interrupted: 3 restarted, 3 in progress; run again to continue"
    assert stopped.value.in_progress == [s.owner.ref for s in plan.waves[1]]
    assert [o.ref for o in stopped.value.outcomes] == [s.owner.ref for s in plan.waves[0]]
    rerun = plan_rollout(settings, cluster, max_concurrent=3)
    actions = {s.owner.ref: s.action for s in rerun.steps}
    assert not set(actions) & {s.owner.ref for s in plan.waves[0]}, "finished owners are no longer stale"
    assert actions == dict.fromkeys(stopped.value.in_progress, "wait") | {
        s.owner.ref: "restart" for s in plan.steps[6:]
    }
    outcomes = _runner(settings, world, cluster, rerun).run()
    assert all(o.status == "restarted" for o in outcomes)
    assert sorted(world.patched()) == sorted(s.owner.ref for s in plan.steps), "every owner patched exactly once"
    assert stale_owners(settings, cluster) == []


def test_an_interrupt_while_waiting_on_a_pdb_counts_nothing_in_progress(settings: Settings) -> None:
    world = _fleet(settings, deployments=1, statefulsets=0)
    world.pdb("apps", "hold", {"app": "d00"}, allowed=0)
    world.interrupt_at = 3.0
    cluster = _cluster(world)
    with pytest.raises(RolloutInterruptedError) as stopped:
        _runner(settings, world, cluster, plan_rollout(settings, cluster)).run()
    assert stopped.value.message == "interrupted: 0 restarted, 0 in progress; run again to continue"
    assert world.patches == []


def test_rollout_status_follows_kubectl() -> None:
    base = {"metadata": {"generation": 2}, "spec": {"replicas": 3}}
    cases: list[tuple[str, Obj, tuple[str, str]]] = [
        ("Deployment", {"observedGeneration": 1}, ("waiting", "its controller has not yet seen the change")),
        ("Deployment", {"observedGeneration": 2, "updatedReplicas": 1}, ("waiting", "1 of 3 new replicas updated")),
        ("Deployment", {"observedGeneration": 2, "updatedReplicas": 3, "replicas": 4},
         ("waiting", "1 old replicas pending termination")),
        ("Deployment", {"observedGeneration": 2, "updatedReplicas": 3, "replicas": 3, "availableReplicas": 2},
         ("waiting", "2 of 3 updated replicas available")),
        ("Deployment", {"observedGeneration": 2, "updatedReplicas": 3, "replicas": 3, "availableReplicas": 3},
         ("done", "")),
        ("Deployment", {"observedGeneration": 2, "conditions": [{"type": "Progressing", "reason":
         "ProgressDeadlineExceeded", "message": "ReplicaSet x has timed out progressing."}]},
         ("failed", "exceeded its progress deadline: ReplicaSet x has timed out progressing.")),
        ("StatefulSet", {"observedGeneration": 2, "readyReplicas": 2}, ("waiting", "2 of 3 pods ready")),
        ("StatefulSet", {"observedGeneration": 2, "readyReplicas": 3, "updatedReplicas": 1, "currentRevision": "a",
                         "updateRevision": "b"}, ("waiting", "1 of 3 pods updated")),
        ("StatefulSet", {"observedGeneration": 2, "readyReplicas": 3, "currentRevision": "b", "updateRevision": "b",
                         "availableReplicas": 3}, ("done", "")),
        ("DaemonSet", {"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 2},
         ("waiting", "2 of 3 updated pods scheduled")),
        ("DaemonSet", {"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3,
                       "numberAvailable": 2}, ("waiting", "2 of 3 updated pods available")),
        ("DaemonSet", {"observedGeneration": 2, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3,
                       "numberAvailable": 3}, ("done", "")),
    ]  # fmt: skip
    for kind, status, expected in cases:
        assert rollout_status(kind, {**base, "status": status}) == expected, (kind, status)
    partitioned = {"metadata": {"generation": 1}, "spec": {"replicas": 3, "updateStrategy": {
        "rollingUpdate": {"partition": 2}}}, "status": {"observedGeneration": 1, "readyReplicas": 3,
        "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "b"}}  # fmt: skip
    assert rollout_status("StatefulSet", partitioned) == ("done", "")


def test_a_pdb_selector_is_read_as_the_api_reads_it() -> None:
    labels = {"app": "web", "tier": "front"}
    assert selects({}, labels), "an empty selector selects every pod (policy/v1)"
    assert not selects(None, labels), "a null one none"
    assert selects({"matchLabels": {"app": "web"}}, labels)
    assert not selects({"matchLabels": {"app": "api"}}, labels)
    assert selects({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]}, labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}, labels)
    assert selects({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)


# --- the role -------------------------------------------------------------------------------------------------------


def test_the_role_covers_exactly_the_requests_a_run_made(settings: Settings) -> None:
    world = World(settings)
    for namespace in ("apps", "web"):
        world.workload("Deployment", namespace, f"d-{namespace}")
        world.workload("StatefulSet", namespace, f"s-{namespace}")
        world.workload("DaemonSet", namespace, f"ds-{namespace}")
        world.pod(namespace, f"bare-{namespace}", {"app": "bare"})
        world.add("ReplicaSet", namespace, f"rs-{namespace}", spec={"replicas": 1, "template": {"metadata": {"labels": {
            "app": f"rs-{namespace}"}}}}, status={})  # fmt: skip
        world._settle("ReplicaSet", world.objects[("ReplicaSet", namespace, f"rs-{namespace}")])
        world.pod(namespace, f"rs-{namespace}-0", {"app": f"rs-{namespace}"}, ("ReplicaSet", f"rs-{namespace}"))
        world.add("ConfigMap", namespace, "proxy-config", data={})
        world.add("Job", namespace, f"job-{namespace}")  # listed, never restarted: its Jobs are read
        world.pod(namespace, f"job-{namespace}-x", {"job": namespace}, ("Job", f"job-{namespace}"))
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)
    outcomes = _runner(settings, world, cluster, plan).run()
    assert {o.status for o in outcomes} == {"restarted", "evicted"}
    assert [item.owner.ref for item in plan.listed] == ["Job apps/job-apps", "Job web/job-web"]
    granted = set(rollout_accesses(settings))
    assert cluster.accessed <= granted
    assert granted - cluster.accessed == set(), "every grant is used by some run"
    objects = rollout_rbac_objects(settings)
    wanted = {(a.namespace, a.api.group, a.api.resource, a.api.verb, a.name) for a in granted}
    assert _grants_of(objects) == wanted
    verbs = {(g[2], g[3]) for g in wanted}
    assert {v for r, v in verbs if r in ("deployments", "statefulsets", "daemonsets")} == {"list", "get", "patch"}
    assert {r for r, v in verbs if v == "patch"} == {"deployments", "statefulsets", "daemonsets"}
    assert {r for r, v in verbs if v == "create"} == {"pods/eviction"}
    assert not {v for _, v in verbs} & {"delete", "update", "deletecollection", "*"}
    assert {g[0] for g in wanted} == {"apps", "web"}, "namespaced only: no ClusterRole"
    assert ("secrets", "list") not in verbs
    assert ("configmaps", "list") not in verbs


def _grants_of(objects: list[Obj]) -> set[tuple[str | None, str, str, str, str | None]]:
    renamed = json.loads(json.dumps(objects).replace(ROLLOUT_NAME, "proxy-component-check"))
    return _grants(renamed)


def test_render_rollout_rbac_and_its_capi_role(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(yaml.safe_dump(BASE))
    assert main(["render", str(config), "--format", "rollout-rbac"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(d["kind"], d["metadata"].get("namespace")) for d in docs] == [
        ("ServiceAccount", "kube-system"), ("Role", "apps"), ("RoleBinding", "apps"), ("Role", "web"),
        ("RoleBinding", "web"),
    ]  # fmt: skip
    assert docs[0]["metadata"]["labels"]["app.kubernetes.io/component"] == "rollout"
    capi = tmp_path / "capi.yaml"
    capi.write_text(yaml.safe_dump({**BASE, "cluster": {**BASE["cluster"], "name": "prod"},
                                    "proxy": {"httpProxy": "http://proxy.corp:3128"},
                                    "capi": {"enabled": True, "namespace": "fleet"}}))  # fmt: skip
    assert main(["render", str(capi), "--format", "rollout-rbac", "--capi"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "fleet"
    assert role["rules"] == [
        {"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": ["get"], "resourceNames": ["prod"]},
        {"apiGroups": ["cluster.x-k8s.io"], "resources": ["machinedeployments"], "verbs": ["list"]},
    ]
    assert main(["render", str(config), "--format", "check-rbac"]) == 0, "check-rbac still renders"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["render", str(config), "--format", "check-rbac", "--capi"])
    assert exit_info.value.code == 2
    assert "--capi: only for --format rollout-rbac (the role of `rollout --capi`), not check-rbac" in (
        capsys.readouterr().err
    )


# --- the command ----------------------------------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


@pytest.fixture
def connected(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> World:
    """The command's cluster is a World; its sleep and clock are the World's."""
    world = _fleet(settings, deployments=3, statefulsets=0)
    monkeypatch.setattr("proxy_component.live.connect", lambda kubeconfig, context: _cluster(world))
    monkeypatch.setattr(rollout_module, "time", SimpleNamespace(sleep=world.tick, monotonic=lambda: world.now))
    return world


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-concurrent", "0"], "--max-concurrent: '0' is not a whole number from 1 to 100 (expected e.g. 5)"),
        (["--max-concurrent", "five"], "--max-concurrent: 'five' is not a whole number from 1 to 100 (expected e.g. 5)"),
        (["--max-concurrent", "101"], "--max-concurrent: '101' is not a whole number from 1 to 100 (expected e.g. 5)"),
        (["--timeout", "-1"], "--timeout: '-1' is not a whole number from 1 to 86400 (expected e.g. 600)"),
        (["--pdb-timeout", "1.5"], "--pdb-timeout: '1.5' is not a whole number from 0 to 86400 (expected e.g. 300)"),
        (["--namespace", "apps,Bad_NS"], "--namespace: 'Bad_NS' is not a namespace name (expected a DNS label, e.g. "
         "team-a; repeat the flag or separate names with commas)"),
        (["--selector", " "], "--selector: '' is empty (expected a label selector, e.g. app=web or tier in (front,back))"),
        (["--capi", "--apply"], "--capi: a plan only (it prints the clusterctl commands that roll the machines), not "
         "with --apply"),
    ],
)  # fmt: skip
def test_bad_flags_are_exit_2_naming_the_flag_and_value_before_any_request(
    argv: list[str], message: str, config: Path, connected: World, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["rollout", str(config), *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith(f"error: {message}\n"), err
    assert "Traceback" not in err
    assert connected.patches == []


def test_rollout_without_config_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["rollout"])
    assert exit_info.value.code == 2
    assert "rollout: CONFIG or --stack NAME is required" in capsys.readouterr().err


def test_the_plan_is_exit_1_when_something_is_stale_and_0_when_nothing_is(
    config: Path, connected: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rollout", str(config), "--max-concurrent", "2"]) == 1
    out, err = capsys.readouterr()
    target = connected.target
    reason = stale_owners(parse_settings(BASE), _cluster(connected))[0].pods[0].reason
    assert out == (
        "wave 1 (2 owner(s)):\n"
        f"  restart  Deployment apps/d00: 2 pods: {reason}\n"
        f"  restart  Deployment apps/d02: 2 pods: {reason}\n"
        "wave 2 (1 owner(s)):\n"
        f"  restart  Deployment web/d01: 2 pods: {reason}\n"
    )
    judged, err = err.split("\n", 1)
    assert judged.startswith("proxy-component rollout: judging the cluster at https://127.0.0.1:6443 (")
    assert err.startswith("proxy-component rollout: https://127.0.0.1:6443: 3 stale owner(s): 3 to restart in 2 "
                          "wave(s) of at most 2, 0 listed only; a plan: --apply carries it out (")  # fmt: skip
    assert connected.patches == []
    assert main(["rollout", str(config), "--json", "--namespace", "web"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [[s["name"] for s in wave] for wave in data["waves"]] == [["d01"]]
    assert data["target"] == target
    assert data["notRestarted"] == []
    assert main(["rollout", str(config), "--apply", "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert [o["status"] for o in applied["outcomes"]] == ["restarted"] * 3
    assert main(["rollout", str(config)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert "nothing is stale" in err


def test_apply_is_exit_1_when_an_owner_is_blocked(config: Path, connected: World,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    connected.pdb("apps", "hold", {"app": "d00"}, allowed=0)
    assert main(["rollout", str(config), "--apply", "--pdb-timeout", "5"]) == 1
    out, err = capsys.readouterr()
    assert (
        "blocked: Deployment apps/d00: blocked by PDB apps/hold: it allowed no disruption for 5 s (not restarted)\n"
        in out
    )
    assert "restarted: Deployment web/d01: complete and available\n" in out
    assert "; 2 done, 1 blocked or failed (" in err


def test_ctrl_c_is_exit_130_with_where_it_stopped_and_a_rerun_continues(
    config: Path, connected: World, capsys: pytest.CaptureFixture[str]
) -> None:
    connected.interrupt_at = 1.0
    assert main(["rollout", str(config), "--apply", "--max-concurrent", "2"]) == 130
    err = capsys.readouterr().err
    assert err.endswith("proxy-component rollout: interrupted: 0 restarted, 2 in progress; run again to continue\n")
    assert main(["rollout", str(config), "--apply", "--max-concurrent", "2"]) == 0
    assert sorted(connected.patched()) == ["Deployment apps/d00", "Deployment apps/d02", "Deployment web/d01"]


def test_a_403_names_the_rollout_role(config: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    class Refusing:
        def __getattr__(self, method: str) -> Any:
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise _api_error(403, 'pods is forbidden: User "bob" cannot list resource "pods"')

            return refuse

    monkeypatch.setattr("proxy_component.live.connect", lambda kubeconfig, context: Cluster(
        {n: Refusing() for n in ("core", "apps", "batch", "policy")}, server="https://api.test"))  # fmt: skip
    assert main(["rollout", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "proxy-component rollout: judging the cluster at https://api.test (context (in-cluster), from the ambient "
        "kubeconfig)\n"
        'proxy-component rollout: https://api.test: 403 Forbidden: pods is forbidden: User "bob" cannot list '
        'resource "pods": rollout needs the roles that `proxy-component render CONFIG --format rollout-rbac` writes '
        "(with --capi for rollout --capi, in the management cluster), bound to this identity\n"
    )


# --- Cluster API ----------------------------------------------------------------------------------------------------

CAPI = {**BASE, "cluster": {**BASE["cluster"], "name": "prod"}, "proxy": {"httpProxy": "http://proxy.corp:3128"},
        "capi": {"enabled": True, "namespace": "fleet"}}  # fmt: skip


class _Custom:
    """CustomObjectsApi with a Cluster, its MachineDeployments (and another cluster's), and discovery."""

    def __init__(self, served: bool = True, control_plane: Obj | None = None) -> None:
        self.served = served
        self.control_plane = control_plane if control_plane is not None else {"kind": "KubeadmControlPlane", "name": "prod-cp"}  # fmt: skip
        self.calls: list[tuple[Any, ...]] = []

    def get_api_resources(self, group: str, version: str) -> Any:
        if not self.served or version != "v1beta1":
            raise _api_error(404, "not found")
        return SimpleNamespace(resources=[SimpleNamespace(name=n) for n in ("clusters", "machinedeployments")])

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **kwargs: Any) -> Any:  # fmt: skip
        self.calls.append((group, version, namespace, plural, name))
        if (namespace, name) != ("fleet", "prod"):
            raise _api_error(404, "not found")
        return _raw({"metadata": {"name": name}, "spec": {"controlPlaneRef": self.control_plane}})

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                      **kwargs: Any) -> Any:  # fmt: skip
        self.calls.append((group, version, namespace, plural, kwargs["label_selector"]))
        mds = {"cluster.x-k8s.io/cluster-name=prod": ["prod-md-b", "prod-md-a"]}.get(kwargs["label_selector"], [])
        return _raw({"metadata": {}, "items": [{"metadata": {"name": n}} for n in mds]})


def test_capi_plan_names_each_machine_deployment_and_the_control_plane() -> None:
    custom = _Custom()
    cluster = Cluster({"discovery": custom, "custom": custom}, server="https://mgmt.test")
    plan = capi_plan(parse_settings(CAPI), cluster)
    assert plan.commands == (
        "clusterctl alpha rollout restart machinedeployment/prod-md-a -n fleet",
        "clusterctl alpha rollout restart machinedeployment/prod-md-b -n fleet",
        "clusterctl alpha rollout restart kubeadmcontrolplane/prod-cp -n fleet",
    )
    assert plan.notes[0].startswith("prod-systemd-proxy (containerdProxy, kubeletProxy) reaches a machine through its "
                                    "bootstrap data, written when the machine is created: a changed Secret does not "
                                    "reach existing machines")  # fmt: skip
    assert ("cluster.x-k8s.io", "v1beta1", "fleet", "machinedeployments", "cluster.x-k8s.io/cluster-name=prod") in custom.calls  # fmt: skip
    assert cluster.accessed <= set(rollout_accesses(parse_settings(CAPI), capi=True))


def test_capi_plan_without_the_crds_prints_placeholders_and_says_so() -> None:
    custom = _Custom(served=False)
    plan = capi_plan(parse_settings(CAPI), Cluster({"discovery": custom, "custom": custom}, server="https://x"))
    assert plan.commands == (
        "clusterctl alpha rollout restart machinedeployment/<name> -n fleet",
        "clusterctl alpha rollout restart kubeadmcontrolplane/<name> -n fleet",
    )
    assert plan.notes[1].startswith("the API server does not serve cluster.x-k8s.io (is this the management cluster?")
    assert custom.calls == []


def test_capi_plan_for_another_control_plane_kind_says_clusterctl_cannot_restart_it() -> None:
    custom = _Custom(control_plane={"kind": "TalosControlPlane", "name": "prod-cp"})
    plan = capi_plan(parse_settings(CAPI), Cluster({"discovery": custom, "custom": custom}, server="https://x"))
    assert [c.split()[-3] for c in plan.commands] == ["machinedeployment/prod-md-a", "machinedeployment/prod-md-b"]
    assert plan.notes[-1] == ("its control plane is a TalosControlPlane prod-cp, not a KubeadmControlPlane: clusterctl "
                              "does not restart it; replace its machines by its provider's means")  # fmt: skip


def test_capi_without_capi_settings_is_exit_2(config: Path, connected: World,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["rollout", str(config), "--capi"]) == 2
    assert capsys.readouterr().err.split("\n", 1)[1] == (
        "proxy-component: capi.enabled: false: rollout --capi is for the Cluster API path (expected capi.enabled: "
        "true and cluster.name)\n"
    )


def test_rollout_capi_prints_the_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    config = tmp_path / "capi.yaml"
    config.write_text(yaml.safe_dump(CAPI))
    custom = _Custom()
    monkeypatch.setattr("proxy_component.live.connect", lambda kubeconfig, context: Cluster(
        {"discovery": custom, "custom": custom}, server="https://mgmt.test"))  # fmt: skip
    assert main(["rollout", str(config), "--capi"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("# prod-systemd-proxy (containerdProxy, kubeletProxy)")
    assert lines[-1] == "clusterctl alpha rollout restart kubeadmcontrolplane/prod-cp -n fleet"
    assert "3 command(s), a plan only" in err
    assert main(["rollout", str(config), "--capi", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["commands"][0].endswith("machinedeployment/prod-md-a -n fleet")


def test_an_api_error_while_applying_is_explained_not_a_traceback(settings: Settings) -> None:
    world = _fleet(settings, deployments=1, statefulsets=0)
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _api_error(403, 'deployments.apps "d00" is forbidden: cannot patch')

    world.call = refuse  # type: ignore[method-assign]
    with pytest.raises(CheckError) as caught:
        _runner(settings, world, cluster, plan).run()
    assert "403 Forbidden" in str(caught.value)
    assert "--format rollout-rbac" in str(caught.value)


def test_an_owner_deleted_before_its_restart_is_gone_not_an_error(settings: Settings) -> None:
    world = _fleet(settings, deployments=2, statefulsets=0)
    cluster = _cluster(world)
    plan = plan_rollout(settings, cluster)
    del world.objects[("Deployment", "apps", "d00")]
    outcomes = _runner(settings, world, cluster, plan).run()
    assert [(o.ref, o.status, o.detail) for o in outcomes] == [
        ("Deployment apps/d00", "gone", "the Deployment was deleted before its restart"),
        ("Deployment web/d01", "restarted", "complete and available"),
    ]


def test_why_says_each_reason_once_with_its_count_commonest_first_and_shortened() -> None:
    from proxy_component.live.rollout import why
    from proxy_component.live.stale import StalePod

    long = "started 2026-11-26T06:00:00Z, before proxy-config changed at 2026-11-26T07:00:00Z " + "x" * 60
    pods = [StalePod("a", "values-digest 1 is not the current 2"), StalePod("b", long), StalePod("c", long)]
    assert why(pods) == f"2 pods: {long[:109]}…; 1 pod: values-digest 1 is not the current 2"


def test_a_namespace_the_settings_do_not_judge_is_refused(
    config: Path, connected: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rollout", str(config), "--namespace", "apps,kube-system", "--apply"]) == 2
    assert capsys.readouterr().err == (
        "proxy-component: --namespace: 'kube-system' is not a namespace these settings judge (expected some of: "
        "apps, web; the namespaces of `namespaces`, outside injection.excludeNamespaces)\n"
    )
    assert connected.patches == []


def test_the_plan_says_what_waits_what_a_pdb_holds_and_that_a_bare_pod_is_not_recreated(
    config: Path, connected: World, capsys: pytest.CaptureFixture[str]
) -> None:
    connected.objects[("Deployment", "web", "d01")]["spec"]["template"]["metadata"]["annotations"] = {
        RESTARTED_FOR: connected.target
    }
    connected.pdb("apps", "d00-pdb", {"app": "d00"}, 0)
    connected.pod("apps", "debug", {"app": "debug"})
    assert main(["rollout", str(config)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (  # what an earlier run restarted comes first
        "  wait     Deployment web/d01: restarted for this configuration by an earlier run; waits until it is complete"
    )
    assert lines[2].endswith(" [now blocked by PDB apps/d00-pdb: waits up to --pdb-timeout]")
    assert lines[2].startswith("  restart  Deployment apps/d00: 2 pods: ")
    assert lines[4].startswith("  evict    Pod apps/debug: 1 pod: ")
    assert lines[4].endswith(" [a bare Pod: evicting ends it, nothing recreates it]")
