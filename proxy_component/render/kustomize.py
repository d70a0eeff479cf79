"""Kustomize patches that add the proxy env to a named workload (seed 000, method 3)."""

from __future__ import annotations

import json
from typing import Any

from ..settings import Settings
from .env import ProxyValues, pod_env, workload_kind

__all__ = ["json_patch", "kustomization", "strategic_merge_patch"]

Obj = dict[str, Any]


def json_patch(
    settings: Settings, values: ProxyValues, kind: str = "Deployment", container_index: int = 0
) -> list[Obj]:
    """RFC 6902 operations appending each variable to one container's env (which must already exist)."""
    _, pod_spec = workload_kind(kind)
    path = "/" + "/".join((*pod_spec, "containers", str(container_index), "env", "-"))
    return [{"op": "add", "path": path, "value": entry} for entry in pod_env(settings, values)]


def strategic_merge_patch(settings: Settings, values: ProxyValues, *, kind: str, name: str, container: str) -> Obj:
    """A strategic-merge patch that finds the container by name, not index, and merges env by variable name."""
    api_version, pod_spec = workload_kind(kind)
    node: Obj = {"containers": [{"name": container, "env": pod_env(settings, values)}]}
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
