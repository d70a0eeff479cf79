"""The proxy environment for workloads: the env list in both spellings, and per-namespace ConfigMaps or Secrets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..noproxy import NoProxy
from ..settings import Settings
from .runtimes import JAVA_TOOL_OPTIONS, NO_PROXY_PYTHON, NODE_USE_ENV_PROXY, java_tool_options, python_no_proxy

__all__ = [
    "CONFIG_NAME",
    "ENV_NAMES",
    "WORKLOAD_KINDS",
    "ProxyValues",
    "env_names",
    "env_pairs",
    "env_vars",
    "env_vars_from_secret",
    "pod_env",
    "proxy_config_object",
    "proxy_config_objects",
    "workload_kind",
    "workload_values",
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
    """The values consumers receive; each may be a string or a `pulumi.Input[str]`.

    `extra` holds the runtime variables workloads get beside the six
    (NODE_USE_ENV_PROXY, JAVA_TOOL_OPTIONS); `no_proxy_python` is the NO_PROXY
    for Python workloads, a `proxy-config` key. Node services (containerd,
    kubelet) get neither: they are Go.
    """

    http_proxy: Any
    https_proxy: Any
    no_proxy: Any
    no_proxy_python: Any = None
    extra: tuple[tuple[str, Any], ...] = ()


def workload_values(settings: Settings, no_proxy: NoProxy, http: Any = None, https: Any = None) -> ProxyValues:
    """The values for workloads from a composed NO_PROXY: the six variables plus the runtimes' renderings.

    `http`/`https` default to the settings' URLs (the component passes them as Outputs).
    """
    extra: list[tuple[str, Any]] = []
    if settings.runtimes.node:
        extra.append((NODE_USE_ENV_PROXY, "1"))
    if settings.runtimes.java:
        extra.append((JAVA_TOOL_OPTIONS, java_tool_options(settings.http_proxy, settings.https_proxy, no_proxy).value))
    return ProxyValues(
        settings.http_proxy if http is None else http,
        settings.https_proxy if https is None else https,
        str(no_proxy),
        no_proxy_python=python_no_proxy(no_proxy),
        extra=tuple(extra),
    )


def env_names(settings: Settings) -> tuple[str, ...]:
    """The names workloads get for these settings: the six, then the runtimes' variables."""
    names = list(ENV_NAMES)
    if settings.runtimes.node:
        names.append(NODE_USE_ENV_PROXY)
    if settings.runtimes.java:
        names.append(JAVA_TOOL_OPTIONS)
    return tuple(names)


def env_pairs(values: ProxyValues) -> list[tuple[str, Any]]:
    """Name/value pairs, upper case first (wget and apt read only lower case, Go prefers upper case), then `extra`."""
    pairs: list[tuple[str, Any]] = []
    for name, value in (
        ("HTTP_PROXY", values.http_proxy),
        ("HTTPS_PROXY", values.https_proxy),
        ("NO_PROXY", values.no_proxy),
    ):
        pairs += [(name, value), (name.lower(), value)]
    return pairs + list(values.extra)


def env_vars(values: ProxyValues) -> list[Obj]:
    """A container `env` list with both spellings of the three variables and identical values."""
    return [{"name": name, "value": value} for name, value in env_pairs(values)]


def env_vars_from_secret(secret_name: str = CONFIG_NAME, names: tuple[str, ...] = ENV_NAMES) -> list[Obj]:
    """The env list read from the namespace's `proxy-config` Secret, for when the URLs carry credentials."""
    return [{"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": name}}} for name in names]


def pod_env(settings: Settings, values: ProxyValues) -> list[Obj]:
    """The env to put into a workload: literals, or `secretKeyRef`s when the URLs carry credentials."""
    if settings.has_credentials:
        return env_vars_from_secret(names=tuple(name for name, _ in env_pairs(values)))
    return env_vars(values)


def proxy_config_object(settings: Settings, namespace: str, values: ProxyValues) -> Obj:
    """The `proxy-config` ConfigMap of one namespace, for `envFrom`; a Secret when the URLs carry credentials."""
    data = dict(env_pairs(values))
    if values.no_proxy_python is not None:
        data[NO_PROXY_PYTHON] = values.no_proxy_python
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
