"""The proxy environment for workloads: the env list in both spellings, and per-namespace ConfigMaps or Secrets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings import Settings

__all__ = [
    "CONFIG_NAME",
    "ENV_NAMES",
    "WORKLOAD_KINDS",
    "ProxyValues",
    "env_pairs",
    "env_vars",
    "env_vars_from_secret",
    "pod_env",
    "proxy_config_object",
    "proxy_config_objects",
    "workload_kind",
]

ENV_NAMES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")

# Workload kinds that carry a pod template: apiVersion and the path from the object to its pod spec.
WORKLOAD_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Deployment": ("apps/v1", ("spec", "template", "spec")),
    "StatefulSet": ("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec")),
    "ReplicaSet": ("apps/v1", ("spec", "template", "spec")),
    "Job": ("batch/v1", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
    "Pod": ("v1", ("spec",)),
}


def workload_kind(kind: str) -> tuple[str, tuple[str, ...]]:
    """The apiVersion and pod-spec path of a workload kind, or a ValueError naming the accepted kinds."""
    try:
        return WORKLOAD_KINDS[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r} has no pod template (expected one of {', '.join(WORKLOAD_KINDS)})") from None


Obj = dict[str, Any]

CONFIG_NAME = "proxy-config"


@dataclass(frozen=True)
class ProxyValues:
    """The three values every consumer receives; each may be a string or a `pulumi.Input[str]`."""

    http_proxy: Any
    https_proxy: Any
    no_proxy: Any


def env_pairs(values: ProxyValues) -> list[tuple[str, Any]]:
    """Name/value pairs, upper case first: wget and apt read only lower case, Go prefers upper case."""
    pairs: list[tuple[str, Any]] = []
    for name, value in (
        ("HTTP_PROXY", values.http_proxy),
        ("HTTPS_PROXY", values.https_proxy),
        ("NO_PROXY", values.no_proxy),
    ):
        pairs += [(name, value), (name.lower(), value)]
    return pairs


def env_vars(values: ProxyValues) -> list[Obj]:
    """A container `env` list with both spellings of the three variables and identical values."""
    return [{"name": name, "value": value} for name, value in env_pairs(values)]


def env_vars_from_secret(secret_name: str = CONFIG_NAME) -> list[Obj]:
    """The env list read from the namespace's `proxy-config` Secret, for when the URLs carry credentials."""
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": name}}} for name in ENV_NAMES]


def pod_env(settings: Settings, values: ProxyValues) -> list[Obj]:
    """The env to put into a workload: literals, or `secretKeyRef`s when the URLs carry credentials."""
    return env_vars_from_secret() if settings.has_credentials else env_vars(values)


def proxy_config_object(settings: Settings, namespace: str, values: ProxyValues) -> Obj:
    """The `proxy-config` ConfigMap of one namespace, for `envFrom`; a Secret when the URLs carry credentials."""
    data = dict(env_pairs(values))
    metadata = {
        "name": CONFIG_NAME,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": "proxy-env"},
    }
    if settings.has_credentials:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "stringData": data}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def proxy_config_objects(settings: Settings, values: ProxyValues) -> list[Obj]:
    return [proxy_config_object(settings, ns, values) for ns in settings.proxy_config_namespaces]
