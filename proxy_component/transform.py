"""A Pulumi stack transform that injects the proxy env into every workload the program creates.

`inject_proxy_env(proxy)` registers it with `pulumi.runtime.register_resource_transform`,
so it also reaches the children of `helm.v4.Chart` and other components the
engine expands. `proxy_env_transform(...)` is the pure function behind it,
over `ResourceTransformArgs` with the engine's camelCase props, for tests.

It follows the same exclusions as the Kyverno policy: `injection.excludeNamespaces`
(kube-system by default) and the opt-out annotation set to "false" on the
workload or its pod template. What each container gets is decided in one place
(`render.env.additions`): nothing when it sets a proxy name itself, else every
variable it does not set; the runtime variables follow the workload's selection
(`runtimes.annotation` on the workload or its pod template, else its namespace's,
else the cluster-wide flags). With credentials the proxy URLs are `secretKeyRef`s
to the namespace's `proxy-config` Secret, and only namespaces that have one are touched.

With `proxy.upstream.trustedCa`, in a namespace that has `proxy-trust` (`render.trust.bundle_in`), each
container that `receives_trust` also gets the trust variables, the bundle mounted read-only and, with the
java runtime, the truststore in JDK_JAVA_OPTIONS; the Pod gets the volume once. A Pod whose own volume
`proxy-trust` is something else gets none of it (`volume_free`).

A workload that gets anything is stamped on its pod template (a Pod on itself) with `VALUES_ANNOTATION`: the values'
digest, or with `injection.transformEnv: reference` the constant `reference`, since then each variable is a
`valueFrom` of the namespace's `proxy-config` (a namespace without one gets values, and the digest). An annotation
the workload sets itself is kept, as its own variables are. `inject_proxy_env` also binds a `before_update` hook (run
at preview too) to each Deployment, StatefulSet and DaemonSet, which says when an update changes the stamp: the
workload's pods restart. A transform cannot see the engine's old state; the hook can, and runs only for resources the
engine updates, so a preview that changes nothing says nothing.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pulumi
from pulumi.runtime.rpc import UNKNOWN

from .render.env import (
    REFERENCE,
    VALUES_ANNOTATION,
    WORKLOAD_KINDS,
    ProxyValues,
    additions,
    pod_env,
    pod_env_by_reference,
)
from .render.trust import (
    BUNDLE_NAME,
    bundle_in,
    receives_trust,
    trust_env_vars,
    trust_volume,
    trust_volume_mount,
    volume_free,
)
from .settings import Settings

__all__ = ["RESTARTING_TYPES", "WORKLOAD_TYPES", "inject_proxy_env", "proxy_env_transform", "restart_notice"]

Obj = dict[str, Any]
Transform = Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]


def _type_token(kind: str, api_version: str) -> str:
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


# Pulumi type token -> path from the props to the pod spec.
WORKLOAD_TYPES: dict[str, tuple[str, ...]] = {
    _type_token(kind, api_version): path for kind, (api_version, path) in WORKLOAD_KINDS.items()
}


# The workloads whose pods a template change restarts (rolls): a ReplicaSet's and a CronJob's keep running as they are.
RESTARTING_TYPES = frozenset(_type_token(kind, "apps/v1") for kind in ("Deployment", "StatefulSet", "DaemonSet"))


class _HasProxyValues(Protocol):
    settings: Settings
    workload_values: ProxyValues

    @property
    def resources(self) -> Mapping[str, pulumi.CustomResource]: ...


def _opted_out(annotations: Any, key: str) -> bool:
    # Exactly "false", as the Kyverno policy matches it.
    return isinstance(annotations, Mapping) and annotations.get(key) == "false"


def _annotations(*metadata: Any) -> dict[str, Any]:
    """The annotations of the workload, then of its pod template (which the Pod carries, so it wins)."""
    merged: dict[str, Any] = {}
    for meta in metadata:
        found = meta.get("annotations") if isinstance(meta, Mapping) else None
        if isinstance(found, Mapping):
            merged.update(found)
    return merged


def _with_env(containers: Any, entries: list[Obj], trusted: list[Obj] | None) -> tuple[Any, bool, bool]:
    """Each container with what `additions` gives it appended, and the trust group (`trusted`: the entries with the
    truststore in JDK_JAVA_OPTIONS; None: none in this Pod) when `receives_trust`; whether any got the trust group,
    and whether any got anything. A container whose env or volumeMounts are unknown is left alone."""
    if not isinstance(containers, list):
        return containers, False, False
    out, mounted, changed = [], False, False
    for container in containers:
        existing = container.get("env") if isinstance(container, Mapping) else None
        mounts = container.get("volumeMounts") if isinstance(container, Mapping) else None
        if not isinstance(container, Mapping) or not isinstance(existing or [], list):
            out.append(container)  # an Output or other unknown: leave the container alone
            continue
        trust = trusted is not None and isinstance(mounts or [], list) and receives_trust(container)
        added = additions(container, trusted if trust and trusted is not None else entries)
        if trust:
            mounted = True
            added += trust_env_vars()
            container = {**container, "volumeMounts": [*(mounts or []), trust_volume_mount()]}
        changed = changed or bool(added)
        out.append({**container, "env": [*(existing or []), *added]} if added else container)
    return out, mounted, changed


def _with_volume(pod_spec: Obj) -> None:
    volumes = pod_spec.get("volumes") or []
    if not any(isinstance(v, Mapping) and v.get("name") == BUNDLE_NAME for v in volumes):
        pod_spec["volumes"] = [*volumes, trust_volume()]


def _stamp(meta: Any, value: Any) -> Obj:
    """Pod template metadata with the stamp, unless it has an annotation of that key already (its own: kept)."""
    out: Obj = dict(meta) if isinstance(meta, Mapping) else {}
    annotations = out.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        return out  # an Output or other unknown: leave it alone
    if VALUES_ANNOTATION not in (annotations or {}):
        out["annotations"] = {**(annotations or {}), VALUES_ANNOTATION: value}
    return out


def _stamp_of(props: Any, path: tuple[str, ...]) -> Any:
    """The stamp in a workload's props (the engine's inputs), None without one, `UNKNOWN` where a part is unknown."""
    node = props
    for key in (*path[:-1], "metadata", "annotations", VALUES_ANNOTATION):
        if node == UNKNOWN:
            return UNKNOWN
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def restart_notice(args: pulumi.ResourceHookArgs) -> str | None:
    """What an update does to a stamped workload's pods, when its stamp changes (None when it does not)."""
    path = WORKLOAD_TYPES.get(args.type)
    if path is None:
        return None
    old, new = _stamp_of(args.old_inputs, path), _stamp_of(args.new_inputs, path)
    if old == new:
        return None
    kind = args.type.rsplit(":", 1)[-1]
    meta = (args.new_inputs or {}).get("metadata") or {}
    where = f"{kind} {meta.get('namespace') or 'default'}/{meta.get('name') or args.name}"
    if not isinstance(new, str) or new == UNKNOWN:
        change = "its proxy values may change (not known until the update)"
    elif new == REFERENCE:
        change = (
            "its proxy env becomes references to proxy-config (once; later changes of the values do not restart it)"
        )
    elif old is None:
        change = f"its template gets the values digest {new} (once, e.g. on upgrading proxy-component)"
    elif old == REFERENCE:
        change = f"its proxy env becomes values (digest {new}), no longer references to proxy-config"
    else:
        change = f"the proxy values it is given by value changed (digest {old} -> {new})"
    return (
        f"{where}: this update restarts its pods: {change}. With injection.transformEnv: reference a change of the "
        "values updates proxy-config instead, and proxy-component rollout restarts the pods in waves"
    )


def _notify(args: pulumi.ResourceHookArgs) -> None:
    notice = restart_notice(args)
    if notice is not None:
        pulumi.log.info(notice)


def proxy_env_transform(
    settings: Settings,
    values: ProxyValues,
    hook: pulumi.ResourceHook | None = None,
    config: Mapping[str, pulumi.Resource] | None = None,
) -> Transform:
    """The transform: for a workload type outside the exclusions, add the env of its selection to each container.

    `values` are the component's `workload_values` (Outputs) or plain strings; with
    credentials in the settings the URLs become `secretKeyRef`s to `proxy-config`, and with
    `injection.transformEnv: reference` every value does (`pod_env_by_reference`) where the namespace has it.
    `hook` is bound `before_update` to each stamped workload whose pods a template change restarts; `config` (the
    component's proxy-config resources by namespace) is what a workload injected by reference depends on.
    A runtimes annotation that is no list of runtimes stops the program with an error naming the workload.
    """
    injection = settings.injection
    excluded = set(injection.exclude_namespaces)
    secret_namespaces = set(settings.proxy_config_namespaces) if settings.has_credentials else None
    by_reference = set(settings.proxy_config_namespaces) if injection.transform_env == REFERENCE else set()
    config = config or {}

    @functools.cache
    def env_for(selection: frozenset[Any], trusted: bool, reference: bool) -> list[Obj]:
        selected = values.select(selection)
        selected = selected.trusted() if trusted else selected
        return pod_env_by_reference(settings, selected) if reference else pod_env(settings, selected)

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        path = WORKLOAD_TYPES.get(args.type_)
        if path is None:
            return None
        props: Obj = dict(args.props)
        metadata = props.get("metadata") or {}
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        namespace = namespace if isinstance(namespace, str) else "default"
        if namespace in excluded or (secret_namespaces is not None and namespace not in secret_namespaces):
            return None
        if isinstance(metadata, Mapping) and _opted_out(metadata.get("annotations"), injection.opt_out_annotation):
            return None
        props = copy.copy(props)
        parent: Any = props
        for key in path[:-1]:
            child = parent.get(key) if isinstance(parent, Mapping) else None
            if not isinstance(child, Mapping):
                return None
            parent[key] = child = dict(child)
            parent = child
        template_meta = parent.get("metadata") if path[-1] == "spec" and len(path) > 1 else None
        if isinstance(template_meta, Mapping) and _opted_out(
            template_meta.get("annotations"), injection.opt_out_annotation
        ):
            return None
        pod_spec = parent.get(path[-1])
        if not isinstance(pod_spec, Mapping):
            return None
        kind = args.type_.rsplit(":", 1)[-1]
        where = (
            f"{kind} {namespace}/{metadata.get('name', args.name) if isinstance(metadata, Mapping) else args.name}: "
        )
        selection = settings.runtimes.select(namespace, _annotations(metadata, template_meta), where)
        reference = namespace in by_reference
        entries = env_for(selection, False, reference)
        volumes = pod_spec.get("volumes")
        trust = bundle_in(settings, namespace) and isinstance(volumes or [], list) and volume_free(pod_spec)
        trusted = env_for(selection, True, reference) if trust else None
        pod_spec = dict(pod_spec)
        mounted = changed = False
        for field in ("containers", "initContainers", "ephemeralContainers"):
            if field in pod_spec:
                pod_spec[field], got, added = _with_env(pod_spec[field], entries, trusted)
                mounted, changed = mounted or got, changed or added
        if mounted:
            _with_volume(pod_spec)
        parent[path[-1]] = pod_spec
        opts = args.opts
        stamp = REFERENCE if reference else values.digest
        if changed and stamp is not None:
            if len(path) == 1:  # a Pod: its own metadata
                props["metadata"] = _stamp(metadata, stamp)
            else:
                parent["metadata"] = _stamp(template_meta, stamp)
            extra = pulumi.ResourceOptions(
                hooks=pulumi.ResourceHookBinding(before_update=[hook])
                if hook is not None and args.type_ in RESTARTING_TYPES
                else None,
                depends_on=[config[namespace]] if reference and namespace in config else None,
            )
            opts = pulumi.ResourceOptions.merge(opts, extra)
        return pulumi.ResourceTransformResult(props=props, opts=opts)

    return transform


HOOK_NAME = "proxy-component-restart-notice"


def inject_proxy_env(proxy: _HasProxyValues) -> Transform:
    """Register the transform for every later resource of this stack; returns it (e.g. for tests)."""
    hook = pulumi.ResourceHook(HOOK_NAME, _notify, pulumi.ResourceHookOptions(on_dry_run=True, ignore_errors=True))
    config = {
        namespace: proxy.resources[f"proxy-config/{namespace}"]
        for namespace in proxy.settings.proxy_config_namespaces
        if f"proxy-config/{namespace}" in proxy.resources
    }
    transform = proxy_env_transform(proxy.settings, proxy.workload_values, hook, config)
    pulumi.runtime.register_resource_transform(transform)
    return transform
