"""`proxy-component rollout`: restart, in paced waves, the owners of the running pods that hold old proxy values.

`plan_rollout` decides (from `stale.stale_owners`, the owners' own objects and the PodDisruptionBudgets) which
owners restart, in which waves of at most `max_concurrent`, and which are only listed (Jobs, CronJobs, kinds it
does not know, an `OnDelete` update strategy, a template that would bring the old values back). `apply_rollout`
carries a plan out: a Deployment, StatefulSet or DaemonSet restarts as `kubectl rollout restart` does (its pod
template's `kubectl.kubernetes.io/restartedAt`), stamped `proxy-component.io/restarted-for: <target>` so that a
rerun waits for it rather than restarting it again; a bare pod, or the pods of a ReplicaSet without a Deployment,
go through the Eviction API one at a time, never a delete. Each wave waits until each of its owners is complete
and available (the conditions of `kubectl rollout status`), within bounded timeouts reported as failures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..render.digest import REFERENCE, VALUES_ANNOTATION
from ..settings import Settings
from .cluster import (
    CAPI_CLUSTERS,
    CAPI_MACHINE_DEPLOYMENTS,
    EVICTIONS,
    PAGE,
    PDBS,
    READ_OWNER,
    REPLICA_SETS,
    RESTARTED,
    WORKLOADS,
    Access,
    CheckError,
    Cluster,
    Obj,
    explain,
)
from .stale import Owner, StalePod, current_target, judged_namespaces, stale_owners

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"  # what `kubectl rollout restart` sets
RESTARTED_FOR = "proxy-component.io/restarted-for"  # the target an owner was restarted for: a rerun only waits
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
FIELD_MANAGER = "proxy-component-rollout"
ROLLOUT_ROLE = (
    "rollout needs the roles that `proxy-component render CONFIG --format rollout-rbac` writes (with --capi for "
    "rollout --capi, in the management cluster), bound to this identity"
)
MAX_CONCURRENT = (1, 100)  # the accepted range of --max-concurrent
POLL = 1.0  # seconds between two looks at what is rolling
REASON_WIDTH = 110  # a pod's reason is shortened to this many characters in the plan


@dataclass(frozen=True)
class Step:
    """One owner of a wave: `restart` (patch its template), `wait` (an earlier run restarted it for this target:
    only wait until it is complete) or `evict` (its pods through the Eviction API, one at a time)."""

    owner: Owner
    action: str
    labels: tuple[tuple[str, str], ...] = ()  # its pod template's labels: which PodDisruptionBudgets select it
    pdbs: tuple[str, ...] = ()  # the PDBs that select it and allowed no disruption when the plan was made
    note: str = ""  # why, for an owner without a stale pod (one an earlier run restarted, still rolling)

    @property
    def why(self) -> str:
        return why(self.owner.pods) or self.note

    def as_dict(self) -> dict[str, Any]:
        return {**_owner_dict(self.owner), "action": self.action, "why": self.why, "blockingPdbs": list(self.pdbs)}


@dataclass(frozen=True)
class Listed:
    """A stale owner that rollout never restarts, and why."""

    owner: Owner
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {**_owner_dict(self.owner), "reason": self.reason, "why": why(self.owner.pods)}


@dataclass(frozen=True)
class Plan:
    """What rollout would do: the target digest, the waves in order, and the owners it only lists."""

    target: str
    max_concurrent: int
    waves: tuple[tuple[Step, ...], ...]
    listed: tuple[Listed, ...]

    @property
    def steps(self) -> list[Step]:
        return [step for wave in self.waves for step in wave]

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "maxConcurrent": self.max_concurrent,
            "waves": [[step.as_dict() for step in wave] for wave in self.waves],
            "notRestarted": [item.as_dict() for item in self.listed],
        }


@dataclass(frozen=True)
class Outcome:
    """What became of one owner: restarted, evicted, blocked (a PDB, a refused eviction), failed (not complete in
    time) or gone (deleted meanwhile)."""

    ref: str
    status: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.status in ("restarted", "evicted", "gone")

    def as_dict(self) -> dict[str, str]:
        return {"owner": self.ref, "status": self.status, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.status}: {self.ref}" + (f": {self.detail}" if self.detail else "")


class RolloutInterruptedError(Exception):
    """Ctrl-C (or SIGTERM) during `apply_rollout`: what had finished, and what was started and not yet complete."""

    def __init__(self, outcomes: list[Outcome], in_progress: list[str]) -> None:
        super().__init__("interrupted")
        self.outcomes = outcomes
        self.in_progress = in_progress

    @property
    def message(self) -> str:
        done = sum(1 for o in self.outcomes if o.ok)
        return f"interrupted: {done} restarted, {len(self.in_progress)} in progress; run again to continue"


def _owner_dict(owner: Owner) -> dict[str, Any]:
    return {
        "kind": owner.kind,
        "namespace": owner.namespace,
        "name": owner.name,
        "pods": [{"name": p.name, "reason": p.reason} for p in owner.pods],
    }


def _short(text: str, width: int = REASON_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def why(pods: Sequence[StalePod]) -> str:
    """The pods' reasons, shortened: each distinct reason once with how many pods give it, the commonest first."""
    counts: dict[str, int] = {}
    for pod in pods:
        counts[pod.reason] = counts.get(pod.reason, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "; ".join(f"{n} pod{'s' if n > 1 else ''}: {_short(reason)}" for reason, n in ordered)


# --- the plan ---------------------------------------------------------------------------------------------------


def _template(obj: Obj) -> Obj:
    return dict((obj.get("spec") or {}).get("template") or {})


def _template_annotations(obj: Obj) -> dict[str, str]:
    return dict((_template(obj).get("metadata") or {}).get("annotations") or {})


def _not_restartable(owner: Owner, obj: Obj | None, target: str) -> str:
    """Why a restart of this owner would not bring its pods the current values, or '' when it would."""
    if not owner.restartable:
        if owner.kind == "Job":
            return "a Job's pods run to completion and are never restarted: run it again to give it the new values"
        if owner.kind == "CronJob":
            return "a CronJob's Jobs are never restarted: its next Job gets the new values"
        return f"rollout does not restart a {owner.kind}: restart its pods by its own means"
    if owner.kind == "Pod":
        return ""
    if obj is None:
        return f"the {owner.kind} was not found (deleted since its pods were read)"
    digest = _template_annotations(obj).get(VALUES_ANNOTATION)
    if digest is not None and digest not in (target, REFERENCE):  # by reference: a restart reads the current values
        return (
            f"its pod template holds values-digest {digest}, not the current {target}: a restart would bring the old "
            "values back (apply the stack, chart or patch that injects them first)"
        )
    spec = obj.get("spec") or {}
    if owner.kind in ("StatefulSet", "DaemonSet") and (spec.get("updateStrategy") or {}).get("type") == "OnDelete":
        return (
            "its updateStrategy is OnDelete: a template change restarts no pod (delete its pods one at a time, or "
            "switch it to RollingUpdate)"
        )
    if owner.kind == "Deployment" and spec.get("paused"):
        return "it is paused: a restart waits until `kubectl rollout resume`"
    return ""


def plan_rollout(
    settings: Settings,
    cluster: Cluster,
    namespaces: Sequence[str] | None = None,
    selector: str | None = None,
    max_concurrent: int = 5,
) -> Plan:
    """The stale owners, in waves of at most `max_concurrent`, and those only listed (see the module's docstring)."""
    try:
        with cluster.remembering():  # one snapshot: stale's ReplicaSets are the plan's too
            return _plan(settings, cluster, namespaces, selector, max_concurrent)
    except Exception as exc:
        error = explain(exc, cluster, ROLLOUT_ROLE)
        if error is None:
            raise
        raise error from None


def _plan(
    settings: Settings, cluster: Cluster, namespaces: Sequence[str] | None, selector: str | None, max_concurrent: int
) -> Plan:
    # The restarted kinds' lists of every judged namespace, read ahead while the pods are judged: the plan reads them
    # next, for the stale owners and for those still rolling without a stale pod left.
    owners = stale_owners(settings, cluster, namespaces, selector, [WORKLOADS[k] for k in RESTARTED])
    target = current_target(settings)
    objects: dict[tuple[str, str, str], Obj] = {}
    for ns in judged_namespaces(settings, namespaces):
        for kind in RESTARTED:
            for item in cluster.list_json(Access(WORKLOADS[kind], ns)):
                objects[(ns, kind, item["metadata"]["name"])] = item
    for ns in sorted({o.namespace for o in owners if o.restartable and o.kind == "ReplicaSet"}):
        for item in cluster.list_json(Access(REPLICA_SETS, ns)):
            objects[(ns, "ReplicaSet", item["metadata"]["name"])] = item
    waits: list[Step] = []
    steps: list[Step] = []
    listed: list[Listed] = []
    budgets: dict[str, list[Obj]] = {}

    def step(owner: Owner, obj: Obj, action: str, note: str = "") -> Step:
        labels = tuple(sorted(((_template(obj).get("metadata") or {}).get("labels") or {}).items()))
        if owner.namespace not in budgets:
            budgets[owner.namespace] = list(cluster.list_json(Access(PDBS, owner.namespace)))
        blocking = tuple(_ref(p) for p in _blocking(budgets[owner.namespace], dict(labels)))
        return Step(owner, action, labels, blocking, note)

    for owner in owners:
        obj = objects.get((owner.namespace, owner.kind, owner.name))
        reason = _not_restartable(owner, obj, target)
        if reason:
            listed.append(Listed(owner, reason))
        elif owner.kind == "Pod":
            steps.append(Step(owner, "evict"))
        elif obj is not None and owner.kind == "ReplicaSet":
            steps.append(step(owner, obj, "evict"))
        elif obj is not None and _template_annotations(obj).get(RESTARTED_FOR) == target:
            waits.append(step(owner, obj, "wait"))
        elif obj is not None:
            steps.append(step(owner, obj, "restart"))
    # An owner an earlier (interrupted) run restarted for this target may have no stale pod left and still roll: its
    # last old pod gone, its new ones not yet available. It counts against max_concurrent all the same.
    stale = {(o.namespace, o.kind, o.name) for o in owners}
    for key, obj in sorted(objects.items()):
        ns, kind, name = key
        if kind == "ReplicaSet" or key in stale or _template_annotations(obj).get(RESTARTED_FOR) != target:
            continue
        state, message = rollout_status(kind, obj)
        owner = Owner(kind, ns, name, (), True)
        if state != "done" and not _not_restartable(owner, obj, target):
            waits.append(step(owner, obj, "wait", f"no old pod left, not yet complete: {message}"))
    # What an earlier run started is waited on first: a wave never adds restarts to owners still rolling.
    ordered = sorted(waits, key=lambda s: (s.owner.namespace, s.owner.kind, s.owner.name)) + steps
    size = max_concurrent
    waves = tuple(tuple(ordered[i : i + size]) for i in range(0, len(ordered), size))
    return Plan(target, max_concurrent, waves, tuple(listed))


# --- PodDisruptionBudgets ---------------------------------------------------------------------------------------


def selects(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions) against labels; in policy/v1 an empty selector selects
    every pod of the namespace, a null one none."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, op, values = expression["key"], expression["operator"], expression.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _blocking(budgets: Iterable[Obj], labels: dict[str, str]) -> list[Obj]:
    """The budgets that select pods with these labels and allow no disruption now."""
    return [
        pdb
        for pdb in budgets
        if selects((pdb.get("spec") or {}).get("selector"), labels)
        and int((pdb.get("status") or {}).get("disruptionsAllowed") or 0) < 1
    ]


def _ref(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


# --- completion: the conditions of `kubectl rollout status` ------------------------------------------------------


def rollout_status(kind: str, obj: Obj) -> tuple[str, str]:
    """("done" | "waiting" | "failed", what it waits for) of a Deployment, StatefulSet, DaemonSet or ReplicaSet."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    if int(meta.get("generation") or 0) > int(status.get("observedGeneration") or 0):
        return "waiting", "its controller has not yet seen the change"
    replicas = int(spec.get("replicas", 1))
    if kind == "Deployment":
        for condition in status.get("conditions") or []:
            if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
                return "failed", f"exceeded its progress deadline: {condition.get('message', '')}"
        updated, total = int(status.get("updatedReplicas") or 0), int(status.get("replicas") or 0)
        available = int(status.get("availableReplicas") or 0)
        if updated < replicas:
            return "waiting", f"{updated} of {replicas} new replicas updated"
        if total > updated:
            return "waiting", f"{total - updated} old replicas pending termination"
        if available < updated:
            return "waiting", f"{available} of {updated} updated replicas available"
        return "done", ""
    if kind == "StatefulSet":
        ready, updated = int(status.get("readyReplicas") or 0), int(status.get("updatedReplicas") or 0)
        if ready < replicas:
            return "waiting", f"{ready} of {replicas} pods ready"
        partition = ((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition")
        if partition:
            if updated < replicas - int(partition):
                return "waiting", f"{updated} of {replicas - int(partition)} pods updated (partition {partition})"
            return "done", ""
        if status.get("updateRevision") != status.get("currentRevision"):
            return "waiting", f"{updated} of {replicas} pods updated"
        counted = status.get("availableReplicas")
        if counted is not None and int(counted) < replicas:
            return "waiting", f"{counted} of {replicas} pods available"
        return "done", ""
    if kind == "DaemonSet":
        desired = int(status.get("desiredNumberScheduled") or 0)
        updated = int(status.get("updatedNumberScheduled") or 0)
        available = int(status.get("numberAvailable") or 0)
        if updated < desired:
            return "waiting", f"{updated} of {desired} updated pods scheduled"
        if available < desired:
            return "waiting", f"{available} of {desired} updated pods available"
        return "done", ""
    ready, available = int(status.get("readyReplicas") or 0), int(status.get("availableReplicas") or 0)
    if min(ready, available) < replicas:  # a ReplicaSet after an eviction: its replacement pod available
        return "waiting", f"{min(ready, available)} of {replicas} pods available"
    return "done", ""


# --- carrying a plan out ----------------------------------------------------------------------------------------


@dataclass
class _Running:
    """One step of the wave in progress."""

    step: Step
    phase: str  # "pdb" (waiting for a budget), "rolling", "evict", or "finished"
    since: float  # when its current wait (a budget, a refused eviction) began
    deadline: float = 0.0  # when rolling or a pod's eviction times out
    pods: list[str] = field(default_factory=list)  # evict: the pods still to evict, in order
    evicted: tuple[str, str] | None = None  # evict: the pod evicted last (name, uid), until it is gone
    said: str = ""  # the last wait reported, so that progress is told once

    @property
    def started(self) -> bool:
        """Restarted (or restarted by an earlier run) and not yet complete, or some of its pods evicted."""
        if self.phase == "rolling":
            return True
        return self.phase == "evict" and (self.evicted is not None or len(self.pods) < len(self.step.owner.pods))


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Runner:
    """Carries a plan out against a cluster; `sleep`, `clock` and `now` are the tests' to replace."""

    settings: Settings
    cluster: Cluster
    plan: Plan
    timeout: float = 600.0
    pdb_timeout: float = 300.0
    progress: Callable[[str], None] = lambda line: None
    sleep: Callable[[float], None] | None = None  # default: time.sleep, looked up when called
    clock: Callable[[], float] | None = None  # default: time.monotonic
    now: Callable[[], str] = _utc_now
    poll: float = POLL
    outcomes: list[Outcome] = field(default_factory=list)

    def _clock(self) -> float:
        return (self.clock or time.monotonic)()

    def run(self) -> list[Outcome]:
        """Every step's outcome, wave by wave; raises RolloutInterruptedError on Ctrl-C, CheckError on an API failure."""
        running: list[_Running] = []
        try:
            for number, wave in enumerate(self.plan.waves, 1):
                refs = ", ".join(step.owner.ref for step in wave)
                self.progress(f"wave {number} of {len(self.plan.waves)}: {refs}")
                running = [self._start(step) for step in wave]
                while True:
                    budgets: dict[str, list[Obj]] = {}
                    for item in running:
                        if item.phase != "finished":
                            self._advance(item, budgets)
                    if all(item.phase == "finished" for item in running):
                        break
                    (self.sleep or time.sleep)(self.poll)
                running = []
        except KeyboardInterrupt:
            in_progress = [item.step.owner.ref for item in running if item.phase != "finished" and item.started]
            raise RolloutInterruptedError(self.outcomes, in_progress) from None
        except Exception as exc:
            error = explain(exc, self.cluster, ROLLOUT_ROLE)
            if error is None:
                raise
            raise error from None
        return self.outcomes

    def _start(self, step: Step) -> _Running:
        if step.action == "wait":
            self.progress(f"{step.owner.ref}: restarted for this configuration by an earlier run: waiting for it")
            return _Running(step, "rolling", self._clock(), self._clock() + self.timeout)
        if step.action == "evict":
            return _Running(
                step, "evict", self._clock(), self._clock() + self.timeout, [p.name for p in step.owner.pods]
            )
        return _Running(step, "pdb", self._clock())

    def _finish(self, item: _Running, status: str, detail: str = "") -> None:
        item.phase = "finished"
        outcome = Outcome(item.step.owner.ref, status, detail)
        self.outcomes.append(outcome)
        self.progress(str(outcome))

    def _advance(self, item: _Running, budgets: dict[str, list[Obj]]) -> None:
        if item.phase == "pdb":
            self._before_restart(item, budgets)
        elif item.phase == "rolling":
            self._rolling(item)
        elif item.phase == "evict":
            self._evicting(item)

    def _before_restart(self, item: _Running, budgets: dict[str, list[Obj]]) -> None:
        """Restart the owner once no PodDisruptionBudget that selects its pods forbids a disruption; report it
        blocked when one still does after `pdb_timeout`."""
        owner = item.step.owner
        if owner.namespace not in budgets:
            budgets[owner.namespace] = list(self.cluster.list_json(Access(PDBS, owner.namespace)))
        blocking = _blocking(budgets[owner.namespace], dict(item.step.labels))
        if blocking:
            names = ", ".join(f"PDB {_ref(p)}" for p in blocking)
            if self._clock() - item.since >= self.pdb_timeout:
                self._finish(item, "blocked", f"blocked by {names}: it allowed no disruption for "
                                              f"{self.pdb_timeout:g} s (not restarted)")  # fmt: skip
            elif item.said != names:
                item.said = names
                self.progress(f"{owner.ref}: waiting: {names} allows no disruption now")
            return
        # The plan read the owner from the API server's watch cache, which may lag a restart an interrupted run
        # made moments ago (another API server's cache more than this one's): read it again, consistently, so that
        # a rerun never restarts an owner twice for the same configuration.
        current = self._read(owner.kind, owner.namespace, owner.name)
        if current is None:
            self._finish(item, "gone", f"the {owner.kind} was deleted before its restart")
            return
        if _template_annotations(current).get(RESTARTED_FOR) == self.plan.target:
            self.progress(f"{owner.ref}: restarted for this configuration by an earlier run: waiting for it")
            item.phase, item.deadline, item.said = "rolling", self._clock() + self.timeout, ""
            return
        body = {"spec": {"template": {"metadata": {"annotations": {
            RESTARTED_AT: self.now(), RESTARTED_FOR: self.plan.target}}}}}  # fmt: skip
        try:
            self.cluster.request(
                Access(RESTARTED[owner.kind], owner.namespace), owner.name, owner.namespace, body,
                field_manager=FIELD_MANAGER, _content_type=STRATEGIC_MERGE, _preload_content=False,
            )  # fmt: skip
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
            self._finish(item, "gone", f"the {owner.kind} was deleted before its restart")
            return
        self.progress(f"{owner.ref}: restarting")
        item.phase, item.deadline, item.said = "rolling", self._clock() + self.timeout, ""

    def _read(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            response = self.cluster.request(
                Access(READ_OWNER[kind], namespace), name, namespace, _preload_content=False
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        return dict(json.loads(response.data))

    def _rolling(self, item: _Running) -> None:
        owner = item.step.owner
        obj = self._read(owner.kind, owner.namespace, owner.name)
        if obj is None:
            self._finish(item, "gone", f"the {owner.kind} was deleted while it rolled")
            return
        state, message = rollout_status(owner.kind, obj)
        if state == "done":
            self._finish(item, "restarted", "complete and available")
        elif state == "failed":
            self._finish(item, "failed", message)
        elif self._clock() >= item.deadline:
            self._finish(item, "failed", f"not complete after {self.timeout:g} s (--timeout): {message}")

    def _evicting(self, item: _Running) -> None:
        """One pod at a time: evict it, wait until it is gone (and a ReplicaSet's replacement is available), then
        the next. A refused eviction (429: a PodDisruptionBudget) is tried again until `pdb_timeout`."""
        owner = item.step.owner
        if item.evicted is not None:
            name, uid = item.evicted
            pod = self._read("Pod", owner.namespace, name)
            if pod is not None and pod["metadata"].get("uid") == uid:
                if self._clock() >= item.deadline:
                    self._finish(item, "failed", f"pod {name} still there {self.timeout:g} s after its eviction")
                return
            item.evicted, item.since, item.deadline = None, self._clock(), self._clock() + self.timeout
        if owner.kind == "ReplicaSet":
            replica_set = self._read("ReplicaSet", owner.namespace, owner.name)
            if replica_set is None:
                self._finish(item, "gone", "the ReplicaSet was deleted while its pods were evicted")
                return
            state, message = rollout_status("ReplicaSet", replica_set)
            if state != "done":
                if self._clock() >= item.deadline:
                    self._finish(item, "failed", f"not available after {self.timeout:g} s (--timeout): {message}")
                return
        if not item.pods:
            self._finish(item, "evicted", f"{len(owner.pods)} pod(s) evicted")
            return
        name = item.pods[0]
        pod = self._read("Pod", owner.namespace, name)
        if pod is None:
            item.pods.pop(0)
            return
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": owner.namespace}}
        try:
            self.cluster.request(Access(EVICTIONS, owner.namespace), name, owner.namespace, body,
                                 _preload_content=False)  # fmt: skip
        except Exception as exc:
            status = getattr(exc, "status", None)
            if status == 404:
                item.pods.pop(0)
                return
            if status != 429:
                raise
            reason = _refusal(exc)
            if self._clock() - item.since >= self.pdb_timeout:
                self._finish(item, "blocked", f"eviction of pod {name} refused for {self.pdb_timeout:g} s: {reason} "
                                              "(not evicted, never deleted)")  # fmt: skip
            elif item.said != reason:
                item.said = reason
                self.progress(f"{owner.ref}: eviction of pod {name} refused, trying again: {reason}")
            return
        self.progress(f"{owner.ref}: evicted pod {name}")
        item.pods.pop(0)
        item.evicted, item.deadline, item.said = (
            (name, str(pod["metadata"].get("uid"))),
            self._clock() + self.timeout,
            "",
        )


def _refusal(exc: Exception) -> str:
    """A refused eviction's reason: the API server's message and its causes (they name the budget)."""
    try:
        body = json.loads(getattr(exc, "body", None) or "{}")
    except ValueError:
        body = {}
    causes = [str(c.get("message")) for c in (body.get("details") or {}).get("causes") or [] if c.get("message")]
    message = str(body.get("message") or getattr(exc, "reason", "") or "Too Many Requests")
    return "; ".join([message, *causes])


def apply_rollout(settings: Settings, cluster: Cluster, plan: Plan, **options: Any) -> list[Outcome]:
    """Carry the plan out (see `Runner`)."""
    return Runner(settings, cluster, plan, **options).run()


# --- Cluster API machines ---------------------------------------------------------------------------------------

CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSIONS = ("v1beta2", "v1beta1")
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"


@dataclass(frozen=True)
class MachinePlan:
    """`rollout --capi`: what a changed `<cluster>-systemd-proxy` does to existing machines, and the commands
    that replace them (found in the management cluster, or with placeholders where they cannot be)."""

    secret: str
    namespace: str
    commands: tuple[str, ...]
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"secret": self.secret, "namespace": self.namespace, "commands": list(self.commands),
                "notes": list(self.notes)}  # fmt: skip


def machine_effect(secret: str) -> str:
    return (
        f"{secret} (containerdProxy, kubeletProxy) reaches a machine through its bootstrap data, written when the "
        "machine is created: a changed Secret does not reach existing machines, and Cluster API does not replace them "
        "for it (the KubeadmControlPlane and KubeadmConfigTemplates still name the same Secret). Until replaced, each "
        "existing machine's containerd and kubelet keep the old proxy and NO_PROXY, while new ones (a scale-up, a "
        "remediation) get the new: the commands below replace every machine, as each object's rollout strategy allows"
    )


def capi_plan(settings: Settings, cluster: Cluster) -> MachinePlan:
    """The MachineDeployments of the cluster (label cluster.x-k8s.io/cluster-name) and its control plane (the
    Cluster's controlPlaneRef), read through the CustomObjects API; placeholders when the API is not served."""
    if not settings.capi.enabled or settings.cluster.name is None:
        raise ValueError(
            f"capi.enabled: {str(settings.capi.enabled).lower()}: rollout --capi is for the Cluster API path "
            "(expected capi.enabled: true and cluster.name)"
        )
    name, namespace = settings.cluster.name, settings.capi.namespace
    secret = f"{name}-systemd-proxy"
    notes = [machine_effect(secret)]
    placeholder = (
        f"clusterctl alpha rollout restart machinedeployment/<name> -n {namespace}",
        f"clusterctl alpha rollout restart kubeadmcontrolplane/<name> -n {namespace}",
    )
    try:
        version = _capi_version(cluster)
        if version is None:
            notes.append(
                f"the API server does not serve {CAPI_GROUP} (is this the management cluster? --kubeconfig and "
                "--context name it): the commands hold placeholders; list the objects with kubectl get "
                f"machinedeployments,kubeadmcontrolplanes -n {namespace} -l {CLUSTER_NAME_LABEL}={name}"
            )
            return MachinePlan(secret, namespace, placeholder, tuple(notes))
        try:
            response = cluster.request(Access(CAPI_CLUSTERS, namespace, name), CAPI_GROUP, version, namespace,
                                       "clusters", name, _preload_content=False)  # fmt: skip
            found: Obj | None = dict(json.loads(response.data))
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
            found = None
        if found is None:
            notes.append(f"no Cluster {namespace}/{name} in this cluster: the commands hold placeholders")
            return MachinePlan(secret, namespace, placeholder, tuple(notes))
        commands = [
            f"clusterctl alpha rollout restart machinedeployment/{md} -n {namespace}"
            for md in _machine_deployments(cluster, version, namespace, name)
        ]
        if not commands:
            notes.append(f"the cluster has no MachineDeployment (label {CLUSTER_NAME_LABEL}={name})")
        ref = (found.get("spec") or {}).get("controlPlaneRef") or {}
        if ref.get("kind") == "KubeadmControlPlane":
            commands.append(f"clusterctl alpha rollout restart kubeadmcontrolplane/{ref['name']} -n {namespace}")
        elif ref:
            notes.append(
                f"its control plane is a {ref.get('kind')} {ref.get('name')}, not a KubeadmControlPlane: "
                "clusterctl does not restart it; replace its machines by its provider's means"
            )
        else:
            notes.append(f"Cluster {namespace}/{name} names no control plane (spec.controlPlaneRef)")
        return MachinePlan(secret, namespace, tuple(commands), tuple(notes))
    except Exception as exc:
        error = explain(exc, cluster, ROLLOUT_ROLE)
        if error is None:
            raise
        raise error from None


def _capi_version(cluster: Cluster) -> str | None:
    """The served version of cluster.x-k8s.io with Clusters; the first known one without discovery (a fake)."""
    for version in CAPI_VERSIONS:
        served = cluster.served(f"{CAPI_GROUP}/{version}")
        if served is None:
            return CAPI_VERSIONS[-1]
        if "clusters" in served and "machinedeployments" in served:
            return version
    return None


def _machine_deployments(cluster: Cluster, version: str, namespace: str, name: str) -> list[str]:
    names: list[str] = []
    token: str | None = None
    while True:
        response = cluster.request(
            Access(CAPI_MACHINE_DEPLOYMENTS, namespace), CAPI_GROUP, version, namespace, "machinedeployments",
            label_selector=f"{CLUSTER_NAME_LABEL}={name}", limit=PAGE, _preload_content=False,
            **({"_continue": token} if token else {}),
        )  # fmt: skip
        page = json.loads(response.data)
        names += [str(item["metadata"]["name"]) for item in page.get("items") or []]
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return sorted(names)


__all__ = [
    "MAX_CONCURRENT",
    "RESTARTED_AT",
    "RESTARTED_FOR",
    "CheckError",
    "Listed",
    "MachinePlan",
    "Outcome",
    "Plan",
    "RolloutInterruptedError",
    "Runner",
    "Step",
    "apply_rollout",
    "capi_plan",
    "plan_rollout",
    "rollout_status",
    "selects",
    "why",
]
