"""Which running pods hold old proxy values, grouped by the owner a restart goes through.

STAND-IN written on the `rollout` branch against the interface the lead is landing on main (same names, same
shapes); main's version replaces this file whole when it lands. A pod is stale when its values-digest annotation
is not the current one, or when it reads `proxy-config` (envFrom, or an env `valueFrom` on it) and started before
that object last changed (its newest managedFields time, else its creation).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..render.digest import VALUES_ANNOTATION, settings_digest
from ..render.env import CONFIG_NAME, reads_proxy_config
from ..render.trust import BUNDLE_NAME, trust_namespaces
from ..settings import Settings
from .access import workload_namespaces
from .cluster import CONFIG_MAPS, PODS, REPLICA_SETS, SECRETS, WORKLOADS, Access, Cluster, Obj

RESTARTABLE = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod")


@dataclass(frozen=True)
class StalePod:
    """A running pod that holds old values, and why that is known."""

    name: str
    reason: str


@dataclass(frozen=True)
class Owner:
    """What restarts a stale pod: its Deployment, StatefulSet, DaemonSet, ReplicaSet, or the Pod itself."""

    kind: str
    namespace: str
    name: str
    pods: tuple[StalePod, ...]
    restartable: bool

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def current_target(settings: Settings) -> str:
    """The digest rollout restarts owners for."""
    return settings_digest(settings)


def stale_owners(
    settings: Settings, cluster: Cluster, namespaces: Sequence[str] | None = None, selector: str | None = None
) -> list[Owner]:
    """The owners with stale pods in the judged namespaces (or those given), sorted by namespace, kind, name."""
    target = current_target(settings)
    api = SECRETS if settings.has_credentials else CONFIG_MAPS
    trusted = set(trust_namespaces(settings))
    owners: list[Owner] = []
    for ns in sorted(namespaces if namespaces is not None else workload_namespaces(settings)):
        config = cluster.get_json(Access(api, ns, CONFIG_NAME))
        changed = _changed_at(config) if config is not None else None
        bundle = cluster.get_json(Access(CONFIG_MAPS, ns, BUNDLE_NAME)) if ns in trusted else None
        trust_changed = _changed_at(bundle) if bundle is not None else None
        replica_sets = {o["metadata"]["name"]: o for o in cluster.list_json(Access(REPLICA_SETS, ns))}
        jobs = {o["metadata"]["name"]: o for o in cluster.list_json(Access(WORKLOADS["Job"], ns))}
        grouped: dict[tuple[str, str], list[StalePod]] = {}
        pods = cluster.list_json(Access(PODS, ns), **({"label_selector": selector} if selector else {}))
        for pod in pods:
            reason = _stale(pod, target, changed) or _stale_trust(pod, trust_changed)
            if reason:
                grouped.setdefault(_owner(pod, replica_sets, jobs), []).append(
                    StalePod(pod["metadata"]["name"], reason)
                )
        for (kind, name), stale in grouped.items():
            owners.append(Owner(kind, ns, name, tuple(sorted(stale, key=lambda p: p.name)), kind in RESTARTABLE))
    return sorted(owners, key=lambda o: (o.namespace, o.kind, o.name))


def _changed_at(obj: Obj) -> str:
    meta = obj["metadata"]
    times = [str(f["time"]) for f in meta.get("managedFields") or [] if f.get("time")]
    return max([str(meta.get("creationTimestamp") or ""), *times])


def _reads_config(container: Obj) -> bool:
    if reads_proxy_config(container):
        return True
    for env in container.get("env") or []:
        source = env.get("valueFrom") or {}
        ref = source.get("configMapKeyRef") or source.get("secretKeyRef") or {}
        if ref.get("name") == CONFIG_NAME:
            return True
    return False


def _stale(pod: Obj, target: str, changed: str | None) -> str:
    meta, status = pod["metadata"], pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return ""
    digest = (meta.get("annotations") or {}).get(VALUES_ANNOTATION)
    if digest is not None and digest != target:
        return f"values-digest {digest} is not the current {target}"
    started = str(status.get("startTime") or meta.get("creationTimestamp") or "")
    containers: Iterator[Any] = iter([*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]])
    if changed and started < changed and any(_reads_config(c) for c in containers):
        return f"started {started}, before {CONFIG_NAME} changed at {changed}"
    return ""


def _stale_trust(pod: Obj, changed: str | None) -> str:
    """A pod that mounts `proxy-trust` and started before it changed: its runtime may have read the old CA."""
    volumes = pod["spec"].get("volumes") or []
    if not changed or not any((v.get("configMap") or {}).get("name") == BUNDLE_NAME for v in volumes):
        return ""
    started = str((pod.get("status") or {}).get("startTime") or pod["metadata"].get("creationTimestamp") or "")
    return f"started {started}, before {BUNDLE_NAME} changed at {changed}" if started < changed else ""


def _owner(pod: Obj, replica_sets: dict[str, Obj], jobs: dict[str, Obj]) -> tuple[str, str]:
    refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
    if not refs:
        return ("Pod", pod["metadata"]["name"])
    kind, name = refs[0]["kind"], refs[0]["name"]
    parents = {"ReplicaSet": replica_sets, "Job": jobs}.get(kind, {})
    if name in parents:
        up = [r for r in parents[name]["metadata"].get("ownerReferences") or [] if r.get("controller")]
        if up:
            return (up[0]["kind"], up[0]["name"])
    return (kind, name)
