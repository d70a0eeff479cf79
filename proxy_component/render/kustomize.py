"""Kustomize patches that add the proxy env to a named workload (seed 000, method 3).

With `proxy.upstream.trustedCa` they add the trust group too (`render.trust`): the trust variables, the
`proxy-trust` volume and its read-only mount, and JDK_JAVA_OPTIONS naming the truststore. A patch cannot
look at the workload: the strategic-merge form merges env by name, volumes by name and mounts by path; the
JSON patch appends to env, volumes and volumeMounts, which must exist already (e.g. `[]`).

With the values' digest, the pod template (a Pod's own metadata) gets `VALUES_ANNOTATION`: in the strategic-merge
patch itself, and beside the JSON patch in a strategic-merge patch of its own (a JSON patch cannot add a key to
annotations that may not exist).
"""

from __future__ import annotations

import json
from typing import Any

from ..settings import Settings
from .env import VALUES_ANNOTATION, ProxyValues, pod_env, workload_kind
from .trust import trust_env_vars, trust_volume, trust_volume_mount

__all__ = ["annotation_patch", "json_patch", "kustomization", "strategic_merge_patch"]

Obj = dict[str, Any]


def _env(settings: Settings, values: ProxyValues) -> list[Obj]:
    if settings.trusted_ca is None:
        return pod_env(settings, values)
    return [*pod_env(settings, values.trusted()), *trust_env_vars()]


def json_patch(
    settings: Settings, values: ProxyValues, kind: str = "Deployment", container_index: int = 0
) -> list[Obj]:
    """RFC 6902 operations appending each variable to one container's env (which must already exist), and with a
    trusted CA the mount and the volume (whose lists must exist too)."""
    _, pod_spec = workload_kind(kind)
    container = "/" + "/".join((*pod_spec, "containers", str(container_index)))
    ops = [{"op": "add", "path": f"{container}/env/-", "value": entry} for entry in _env(settings, values)]
    if settings.trusted_ca is not None:
        ops.append({"op": "add", "path": f"{container}/volumeMounts/-", "value": trust_volume_mount()})
        ops.append({"op": "add", "path": "/" + "/".join((*pod_spec, "volumes", "-")), "value": trust_volume()})
    return ops


def _nested(path: tuple[str, ...], leaf: Obj) -> Obj:
    for key in reversed(path):
        leaf = {key: leaf}
    return leaf


def _merge(into: Obj, other: Obj) -> Obj:
    out = dict(into)
    for key, value in other.items():
        out[key] = _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def _stamp(pod_spec: tuple[str, ...], values: ProxyValues) -> Obj:
    """The pod template's (a Pod's own) metadata with the digest annotation, as a patch body; {} without a digest."""
    if values.digest is None:
        return {}
    return _nested((*pod_spec[:-1], "metadata"), {"annotations": {VALUES_ANNOTATION: values.digest}})


def strategic_merge_patch(settings: Settings, values: ProxyValues, *, kind: str, name: str, container: str) -> Obj:
    """A strategic-merge patch that finds the container by name, not index, and merges env by variable name."""
    api_version, pod_spec = workload_kind(kind)
    target: Obj = {"name": container, "env": _env(settings, values)}
    node: Obj = {"containers": [target]}
    if settings.trusted_ca is not None:
        target["volumeMounts"] = [trust_volume_mount()]
        node["volumes"] = [trust_volume()]
    body = _merge(_nested(pod_spec, node), _stamp(pod_spec, values))
    return _merge({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}, body)


def annotation_patch(values: ProxyValues, *, kind: str, name: str) -> Obj | None:
    """A strategic-merge patch that only stamps the digest on the pod template (None without a digest)."""
    api_version, pod_spec = workload_kind(kind)
    stamp = _stamp(pod_spec, values)
    if not stamp:
        return None
    return _merge({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}, stamp)


def kustomization(
    settings: Settings, values: ProxyValues, *, kind: str, name: str, container: str | None = None
) -> Obj:
    """A Kustomization with the JSON patch (container index 0) and the annotation's patch, or the strategic-merge patch
    when `container` is given."""
    target = {"kind": kind, "name": name}
    if container is None:
        patches = [{"target": target, "patch": json.dumps(json_patch(settings, values, kind), indent=2)}]
        stamp = annotation_patch(values, kind=kind, name=name)
        if stamp is not None:
            patches.append({"target": target, "patch": json.dumps(stamp, indent=2)})
    else:
        patch = json.dumps(strategic_merge_patch(settings, values, kind=kind, name=name, container=container), indent=2)
        patches = [{"target": target, "patch": patch}]
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "patches": patches}
