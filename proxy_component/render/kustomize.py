"""Kustomize patches that add the proxy env to a named workload (seed 000, method 3).

With `proxy.upstream.trustedCa` they add the trust group too (`render.trust`): the trust variables, the
`proxy-trust` volume and its read-only mount, and JDK_JAVA_OPTIONS naming the truststore. A patch cannot
look at the workload: the strategic-merge form merges env by name, volumes by name and mounts by path; the
JSON patch appends to env, volumes and volumeMounts, which must exist already (e.g. `[]`).
"""

from __future__ import annotations

import json
from typing import Any

from ..settings import Settings
from .env import ProxyValues, pod_env, workload_kind
from .trust import trust_env_vars, trust_volume, trust_volume_mount

__all__ = ["json_patch", "kustomization", "strategic_merge_patch"]

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


def strategic_merge_patch(settings: Settings, values: ProxyValues, *, kind: str, name: str, container: str) -> Obj:
    """A strategic-merge patch that finds the container by name, not index, and merges env by variable name."""
    api_version, pod_spec = workload_kind(kind)
    target: Obj = {"name": container, "env": _env(settings, values)}
    node: Obj = {"containers": [target]}
    if settings.trusted_ca is not None:
        target["volumeMounts"] = [trust_volume_mount()]
        node["volumes"] = [trust_volume()]
    for key in reversed(pod_spec):
        node = {key: node}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **node}


def kustomization(
    settings: Settings, values: ProxyValues, *, kind: str, name: str, container: str | None = None
) -> Obj:
    """A Kustomization with the JSON patch (container index 0), or the strategic-merge patch when `container` is given."""
    if container is None:
        patch = json.dumps(json_patch(settings, values, kind), indent=2)
    else:
        patch = json.dumps(strategic_merge_patch(settings, values, kind=kind, name=name, container=container), indent=2)
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "patches": [{"target": {"kind": kind, "name": name}, "patch": patch}],
    }
