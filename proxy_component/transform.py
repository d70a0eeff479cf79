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
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pulumi

from .render.env import WORKLOAD_KINDS, ProxyValues, additions, pod_env
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

__all__ = ["WORKLOAD_TYPES", "inject_proxy_env", "proxy_env_transform"]

Obj = dict[str, Any]
Transform = Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]


def _type_token(kind: str, api_version: str) -> str:
    group_version = api_version if "/" in api_version else f"core/{api_version}"
    return f"kubernetes:{group_version}:{kind}"


# Pulumi type token -> path from the props to the pod spec.
WORKLOAD_TYPES: dict[str, tuple[str, ...]] = {
    _type_token(kind, api_version): path for kind, (api_version, path) in WORKLOAD_KINDS.items()
}


class _HasProxyValues(Protocol):
    settings: Settings
    workload_values: ProxyValues


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


def _with_env(containers: Any, entries: list[Obj], trusted: list[Obj] | None) -> tuple[Any, bool]:
    """Each container with what `additions` gives it appended, and the trust group (`trusted`: the entries with the
    truststore in JDK_JAVA_OPTIONS; None: none in this Pod) when `receives_trust`; whether any got the trust group.
    A container whose env or volumeMounts are unknown is left alone."""
    if not isinstance(containers, list):
        return containers, False
    out, mounted = [], False
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
        out.append({**container, "env": [*(existing or []), *added]} if added else container)
    return out, mounted


def _with_volume(pod_spec: Obj) -> None:
    volumes = pod_spec.get("volumes") or []
    if not any(isinstance(v, Mapping) and v.get("name") == BUNDLE_NAME for v in volumes):
        pod_spec["volumes"] = [*volumes, trust_volume()]


def proxy_env_transform(settings: Settings, values: ProxyValues) -> Transform:
    """The transform: for a workload type outside the exclusions, add the env of its selection to each container.

    `values` are the component's `workload_values` (Outputs) or plain strings; with
    credentials in the settings the URLs become `secretKeyRef`s to `proxy-config`.
    A runtimes annotation that is no list of runtimes stops the program with an error naming the workload.
    """
    injection = settings.injection
    excluded = set(injection.exclude_namespaces)
    secret_namespaces = set(settings.proxy_config_namespaces) if settings.has_credentials else None
    env_for = functools.cache(lambda selection: pod_env(settings, values.select(selection)))
    trusted_for = functools.cache(lambda selection: pod_env(settings, values.select(selection).trusted()))

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
        entries = env_for(selection)
        volumes = pod_spec.get("volumes")
        trust = bundle_in(settings, namespace) and isinstance(volumes or [], list) and volume_free(pod_spec)
        trusted = trusted_for(selection) if trust else None
        pod_spec = dict(pod_spec)
        mounted = False
        for field in ("containers", "initContainers", "ephemeralContainers"):
            if field in pod_spec:
                pod_spec[field], got = _with_env(pod_spec[field], entries, trusted)
                mounted = mounted or got
        if mounted:
            _with_volume(pod_spec)
        parent[path[-1]] = pod_spec
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


def inject_proxy_env(proxy: _HasProxyValues) -> Transform:
    """Register the transform for every later resource of this stack; returns it (e.g. for tests)."""
    transform = proxy_env_transform(proxy.settings, proxy.workload_values)
    pulumi.runtime.register_resource_transform(transform)
    return transform
