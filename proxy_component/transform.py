"""A Pulumi stack transform that injects the proxy env into every workload the program creates.

`inject_proxy_env(proxy)` registers it with `pulumi.runtime.register_resource_transform`,
so it also reaches the children of `helm.v4.Chart` and other components the
engine expands. `proxy_env_transform(...)` is the pure function behind it,
over `ResourceTransformArgs` with the engine's camelCase props, for tests.

It follows the same exclusions as the Kyverno policy: `injection.excludeNamespaces`
(kube-system by default) and the opt-out annotation set to "false" on the
workload or its pod template. It never replaces an env name a container
already sets. With credentials it writes `secretKeyRef`s to the namespace's
`proxy-config` Secret, and only in the namespaces that have one.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pulumi

from .render.env import WORKLOAD_KINDS, env_names, env_vars_from_secret
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


class _HasProxyEnv(Protocol):
    settings: Settings
    env: pulumi.Output[list[dict[str, str]]]


def _opted_out(annotations: Any, key: str) -> bool:
    # Exactly "false", as the Kyverno policy matches it.
    return isinstance(annotations, Mapping) and annotations.get(key) == "false"


def _with_env(containers: Any, env: Sequence[Obj] | pulumi.Output[Any]) -> Any:
    """Each container with the proxy entries appended whose names it does not set already."""
    if not isinstance(containers, list):
        return containers
    out = []
    for container in containers:
        if not isinstance(container, Mapping):
            out.append(container)
            continue
        existing = container.get("env") or []
        if not isinstance(existing, list):  # an Output or other unknown: leave the container alone
            out.append(container)
            continue
        names = {e.get("name") for e in existing if isinstance(e, Mapping)}
        merged: Any
        if isinstance(env, pulumi.Output):
            merged = env.apply(functools.partial(_append_missing, list(existing), names))
        else:
            merged = _append_missing(list(existing), names, env)
        out.append({**container, "env": merged})
    return out


def _append_missing(existing: list[Any], names: set[Any], entries: Sequence[Obj]) -> list[Any]:
    return [*existing, *(e for e in entries if e["name"] not in names)]


def proxy_env_transform(settings: Settings, env: Sequence[Obj] | pulumi.Output[Any]) -> Transform:
    """The transform: for a workload type outside the exclusions, add `env` to every container that lacks it.

    `env` is the component's `env` output (or a plain list); with credentials
    in the settings it is replaced by `secretKeyRef`s to `proxy-config`.
    """
    injection = settings.injection
    excluded = set(injection.exclude_namespaces)
    secret_namespaces = set(settings.proxy_config_namespaces) if settings.has_credentials else None
    entries: Sequence[Obj] | pulumi.Output[Any] = (
        env_vars_from_secret(names=env_names(settings)) if settings.has_credentials else env
    )

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
        pod_spec = dict(pod_spec)
        for field in ("containers", "initContainers", "ephemeralContainers"):
            if field in pod_spec:
                pod_spec[field] = _with_env(pod_spec[field], entries)
        parent[path[-1]] = pod_spec
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


def inject_proxy_env(proxy: _HasProxyEnv) -> Transform:
    """Register the transform for every later resource of this stack; returns it (e.g. for tests)."""
    transform = proxy_env_transform(proxy.settings, proxy.env)
    pulumi.runtime.register_resource_transform(transform)
    return transform
