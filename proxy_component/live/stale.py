"""Which running pods hold old proxy values, by owner: what `check` reports and `rollout` restarts.

The API does not show the env a running process holds, so each pod is judged by what it was given and when:

- **Stamped** (the stack transform by value, the API server's policy, Kyverno, Helm values, the Kustomize patch): the
  pod carries `proxy-component.io/values-digest`, `<env>-<trust>` of what it was given (render/digest.py). An env
  part other than the current one is stale. A trust part other than the current one (the CA rotated) is stale only
  for a container that reads the CA at start: a JVM (JDK_JAVA_OPTIONS, whose truststore it loads once) or Node
  (NODE_EXTRA_CA_CERTS); other clients read the mounted bundle, which the kubelet updates in place.
- **By reference** (`envFrom` or `valueFrom` on `proxy-config`, or the transform's `reference` stamp): the kubelet
  resolves a container's env when the container starts, so a container that started before `proxy-config`'s
  content last changed holds the old values; likewise a JVM or Node container that started before `proxy-trust`
  changed holds the old CA.

When content last changed is read from the object's `managedFields`: the latest `time` of an entry that owns
`data` (the API server sets it when a manager changes a field it owns), else its creation. What this cannot know:
a manager that changed a label and the data in separate writes moves the time with the label too (pods then show
stale that are not: rollout restarts them once more, never less); the kubelet's clock (a container's `startedAt`)
against the API server's (`managedFields`) is trusted, both to the second: a start in the same second as the change
counts as current (so a pod created with its `proxy-config` is not reported), and the kubelet may still have served
the old value from its cache then; a process that re-reads its env or the CA file itself is not known to; a pod's init
containers are not judged (they ran before the pod started).

Owners: a pod's controller (its `ownerReferences` entry with `controller: true`), a ReplicaSet's Deployment and a
Job's CronJob; a pod with none is its own owner. Jobs and CronJobs (and kinds this does not know) are listed, never
restarted: a Job's pods finish with the values they started with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..render.digest import REFERENCE, VALUES_ANNOTATION, settings_digest, split_digest
from ..render.env import CONFIG_NAME
from ..render.trust import BUNDLE_NAME, trust_namespaces
from ..settings import Settings
from .access import config_api, workload_namespaces
from .cluster import CONFIG_MAPS, JOBS, PODS, REPLICA_SET_OWNERS, Access, Api, Cluster, Obj

__all__ = [
    "REFERENCE",
    "RESTARTABLE",
    "JudgedPods",
    "Owner",
    "StalePod",
    "current_target",
    "judge_pods",
    "stale_owners",
]

RESTARTABLE = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod")
# What a container that reads the CA once at start has in its env: the JVM's truststore option, Node's extra CAs.
START_READERS = {"JDK_JAVA_OPTIONS": "JVM", "NODE_EXTRA_CA_CERTS": "Node"}


@dataclass(frozen=True)
class StalePod:
    """A running pod that holds old values, and why that is known."""

    name: str
    reason: str


@dataclass(frozen=True)
class Owner:
    """What restarts a set of stale pods: a Deployment, StatefulSet, DaemonSet, ReplicaSet, the pod itself; or a Job,
    CronJob or another kind, listed and never restarted."""

    kind: str
    namespace: str
    name: str
    pods: tuple[StalePod, ...]
    restartable: bool

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def current_target(settings: Settings) -> str:
    """The digest the pods should hold, and that rollout restarts owners for."""
    return settings_digest(settings)


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def content_time(obj: Obj | None) -> datetime | None:
    """When the object's data last changed: the latest managedFields entry owning `data`/`binaryData`, else its
    creation; None for a missing object."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    times = [
        t
        for entry in meta.get("managedFields") or []
        if any(key in (entry.get("fieldsV1") or {}) for key in ("f:data", "f:binaryData", "f:stringData"))
        for t in [_time(entry.get("time"))]
        if t is not None
    ]
    return max(times) if times else _time(meta.get("creationTimestamp"))


def _refs_config(container: Mapping[str, Any]) -> bool:
    """The container takes proxy values from `proxy-config` by reference: envFrom, or a valueFrom key ref."""
    for source in container.get("envFrom") or []:
        for ref in ("configMapRef", "secretRef"):
            if (source.get(ref) or {}).get("name") == CONFIG_NAME:
                return True
    for var in container.get("env") or []:
        value_from = var.get("valueFrom") or {}
        for ref in ("configMapKeyRef", "secretKeyRef"):
            if (value_from.get(ref) or {}).get("name") == CONFIG_NAME:
                return True
    return False


def _start_reader(container: Mapping[str, Any], pod_spec: Mapping[str, Any], config: Mapping[str, str]) -> str:
    """'JVM', 'Node' or 'JVM, Node' when the container reads the pod's `proxy-trust` bundle once at start (its env
    has the variable, itself or from proxy-config through envFrom); '' otherwise."""
    if not any(v.get("configMap", {}).get("name") == BUNDLE_NAME for v in pod_spec.get("volumes") or []):
        return ""
    names = {str(var.get("name")) for var in container.get("env") or []}
    for source in container.get("envFrom") or []:
        for ref in ("configMapRef", "secretRef"):
            if (source.get(ref) or {}).get("name") == CONFIG_NAME:
                names |= {(source.get("prefix") or "") + key for key in config}
    return ", ".join(runtime for name, runtime in START_READERS.items() if name in names)


def _started(pod: Obj) -> dict[str, datetime]:
    """Each running container's start (the kubelet resolved its env then)."""
    out: dict[str, datetime] = {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        started = _time(((status.get("state") or {}).get("running") or {}).get("startedAt"))
        if started is not None:
            out[str(status.get("name"))] = started
    return out


def _stamp(when: datetime | None) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else "?"


@dataclass(frozen=True)
class _Namespace:
    """What the pods of one namespace are judged against."""

    target: str
    config_time: datetime | None
    config_keys: Mapping[str, str]
    trust_time: datetime | None


def pod_staleness(pod: Obj, current: _Namespace) -> str:
    """Why this running pod holds old values, or '' when it holds the current ones (or none of ours)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    stamp = (meta.get("annotations") or {}).get(VALUES_ANNOTATION)
    containers = spec.get("containers") or []
    started = _started(pod)
    if stamp is not None and stamp != REFERENCE:
        env, trust = split_digest(str(stamp))
        want_env, want_trust = split_digest(current.target)
        if env != want_env:
            return f"{VALUES_ANNOTATION} {stamp} is not the current {current.target}"
        if trust != want_trust:
            for container in containers:
                runtime = _start_reader(container, spec, current.config_keys)
                if runtime:
                    return (
                        f"the trusted CA changed ({VALUES_ANNOTATION} trust part {trust}, now {want_trust}) and "
                        f"container {container.get('name')} ({runtime}) read it at start"
                    )
    for container in containers:
        name = str(container.get("name"))
        start = started.get(name)
        if start is None:
            continue  # not running: it resolves its env when it starts
        if current.config_time is not None and _refs_config(container) and start < current.config_time:
            return (
                f"container {name} started {_stamp(start)}, before {CONFIG_NAME} changed at "
                f"{_stamp(current.config_time)}: it holds the values it read then"
            )
        runtime = _start_reader(container, spec, current.config_keys)
        if runtime and current.trust_time is not None and start < current.trust_time:
            return (
                f"container {name} ({runtime}) started {_stamp(start)}, before {BUNDLE_NAME} changed at "
                f"{_stamp(current.trust_time)}: it read the CA at start"
            )
    return ""


def _controller(obj: Obj) -> tuple[str, str] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def _running(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return not (pod["metadata"].get("deletionTimestamp") or phase in ("Succeeded", "Failed"))


def _owners_of(cluster: Cluster, namespace: str, stale: list[tuple[Obj, str]]) -> list[Owner]:
    """Group stale pods by what restarts them, reading ReplicaSets and Jobs only when a pod has one."""
    parents: dict[tuple[str, str], tuple[str, str] | None] = {}
    kinds = {kind for pod, _ in stale for kind, _ in [_controller(pod) or ("Pod", "")]}
    for kind, api in (("ReplicaSet", REPLICA_SET_OWNERS), ("Job", JOBS)):
        if kind in kinds:
            for obj in cluster.list_json(Access(api, namespace)):
                parents[kind, obj["metadata"]["name"]] = _controller(obj)
    grouped: dict[tuple[str, str], list[StalePod]] = {}
    for pod, reason in stale:
        owner = _controller(pod) or ("Pod", pod["metadata"]["name"])
        parent = parents.get(owner)
        if owner[0] in ("ReplicaSet", "Job") and parent is not None and parent[0] in ("Deployment", "CronJob"):
            owner = parent
        grouped.setdefault(owner, []).append(StalePod(pod["metadata"]["name"], reason))
    return [
        Owner(kind, namespace, name, tuple(sorted(pods, key=lambda p: p.name)), kind in RESTARTABLE)
        for (kind, name), pods in grouped.items()
    ]


def judged_namespaces(settings: Settings, namespaces: Sequence[str] | None = None) -> list[str]:
    """The namespaces whose pods are judged: those of `check`, narrowed to `namespaces` when given."""
    judged = workload_namespaces(settings)
    if namespaces is None:
        return judged
    wanted = set(namespaces)
    return [ns for ns in judged if ns in wanted]


def stale_owners(
    settings: Settings,
    cluster: Cluster,
    namespaces: Sequence[str] | None = None,
    selector: str | None = None,
    ahead: Sequence[Api] = (),
) -> list[Owner]:
    """The owners with stale pods in the judged namespaces (those of `check`, narrowed to `namespaces` when given),
    pods filtered by a label `selector`; sorted by namespace, kind, name. `judge_pods`, then its `owners()`."""
    return judge_pods(settings, cluster, namespaces, selector, ahead).owners()


@dataclass(frozen=True)
class JudgedPods:
    """The stale pods of each judged namespace, their owners not yet named: the ReplicaSets and Jobs that name
    them are being read in the background meanwhile (`judge_pods`), so a caller may judge other things first."""

    cluster: Cluster
    stale: tuple[tuple[str, tuple[tuple[Obj, str], ...]], ...]  # (namespace, its stale pods and their reasons)

    def owners(self) -> list[Owner]:
        """The owners of the stale pods, sorted by namespace, kind, name."""
        out = [owner for ns, stale in self.stale for owner in _owners_of(self.cluster, ns, list(stale))]
        return sorted(out, key=lambda o: (o.namespace, o.kind, o.name))


def judge_pods(
    settings: Settings,
    cluster: Cluster,
    namespaces: Sequence[str] | None = None,
    selector: str | None = None,
    ahead: Sequence[Api] = (),
) -> JudgedPods:
    """The stale running pods of the judged namespaces (those of `check`, narrowed to `namespaces` when given),
    pods filtered by a label `selector`.

    Reads per namespace: `proxy-config` and (with a trusted CA) `proxy-trust` by name, its pods (a paged list), and
    its ReplicaSets (their metadata) or Jobs only when a stale pod has one: named ahead (`Cluster.ahead`) at the
    first such pod, read when `owners()` wants them. `ahead`: lists the caller reads next in every judged
    namespace, read ahead once the namespace's pods are.
    """
    target = current_target(settings)
    trusted = set(trust_namespaces(settings))
    judged = judged_namespaces(settings, namespaces)
    labelled = {"label_selector": selector} if selector else {}
    out: list[tuple[str, tuple[tuple[Obj, str], ...]]] = []
    for i, ns in enumerate(judged):
        if i + 1 < len(judged):
            cluster.ahead(Access(PODS, judged[i + 1]), **labelled)
        config = cluster.get_json(Access(config_api(settings), ns, CONFIG_NAME))
        trust = cluster.get_json(Access(CONFIG_MAPS, ns, BUNDLE_NAME)) if ns in trusted else None
        keys = (config or {}).get("data") or {}
        current = _Namespace(target, content_time(config), keys, content_time(trust))
        stale: list[tuple[Obj, str]] = []
        kinds: set[str] = set()
        for pod in cluster.list_json(Access(PODS, ns), **labelled):
            reason = pod_staleness(pod, current) if _running(pod) else ""
            if not reason:
                continue
            stale.append((pod, reason))
            kind = (_controller(pod) or ("Pod", ""))[0]
            if kind not in kinds:  # the first stale pod of its kind: what it takes to know its owner
                kinds.add(kind)
                for api in _PARENT_LISTS.get(kind, ()):
                    cluster.ahead(Access(api, ns))
        for api in ahead:  # after the lists this namespace's owners need
            cluster.ahead(Access(api, ns))
        if stale:
            out.append((ns, tuple(stale)))
    return JudgedPods(cluster, tuple(out))


_PARENT_LISTS = {"ReplicaSet": (REPLICA_SET_OWNERS,), "Job": (JOBS,)}  # what _owners_of lists to find a pod's owner


def summary(owners: Iterable[Owner]) -> Iterator[str]:
    """One line per owner: its reference, how many pods, the first reason."""
    for owner in owners:
        first = owner.pods[0].reason if owner.pods else ""
        yield f"{owner.ref}: {len(owner.pods)} pod(s) hold old proxy values ({first})"
