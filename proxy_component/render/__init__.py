"""Pure builders: settings plus values (plain strings or `pulumi.Input`s) in, Kubernetes objects as dicts out.

`manifests()` is the command's whole render for plain settings; the component
calls the same builders with Outputs.
"""

from __future__ import annotations

from typing import Any

from ..dataplane.config import config_generation, tinyproxy_conf
from ..dataplane.lifecycle import restart_inputs
from ..settings import NetworkValues, Settings, SettingsError
from .capi import kubeadm_config_spec, kubeadm_config_template_patch, kubeadm_control_plane_patch
from .digest import stamped
from .env import ProxyValues, env_vars, workload_values
from .plan import PlanInputs, Planned, check_allow_sources, check_unique, node_values, plan, plan_checks

__all__ = [
    "PlanInputs",
    "Planned",
    "ProxyValues",
    "capi_manifests",
    "capi_patches",
    "check_allow_sources",
    "check_capi",
    "check_unique",
    "env_vars",
    "manifests",
    "node_values",
    "plain_plan",
    "plain_values",
    "plan",
    "plan_checks",
]

Obj = dict[str, Any]


def plain_values(settings: Settings, network: NetworkValues | None = None) -> ProxyValues:
    """The values for plain settings (and a known network), with their digest."""
    return stamped(workload_values(settings, settings.no_proxy(network)), settings)


def _call(build: Any, values: ProxyValues) -> Any:
    return build(values)


def plain_plan(settings: Settings, *, checked: bool = True) -> list[Planned]:
    """The plan for plain settings (no run-time network): every value a string. `checked=False` skips the check
    that a network the stack discovers satisfies (the Allow list's sources), for what only needs the objects' names
    and fields (adoption)."""
    if settings.deployment.enabled and checked:
        check_allow_sources(settings)
    values = plain_values(settings)
    allow = settings.allowed_sources()
    inputs = PlanInputs(
        values=values,
        nodes=node_values(settings, values.no_proxy),
        conf=tinyproxy_conf(settings, allow),
        restart=restart_inputs(settings),
        text=_call,
        generation=config_generation(settings, allow),
    )
    return plan(settings, inputs)


def manifests(settings: Settings) -> list[Obj]:
    """The workload cluster's objects for plain settings, in the plan's order.

    The proxy, each namespace's proxy-config, the Kyverno policy when
    `injection.kyverno` is set, and the Helm values Secrets.
    """
    return [p.obj for p in plain_plan(settings) if p.cluster == "workload"]


def check_capi(settings: Settings) -> None:
    if not settings.capi.enabled:
        raise SettingsError(["capi.enabled: false (expected true to render the Cluster API objects)"])


def capi_manifests(settings: Settings) -> list[Obj]:
    """The management cluster's objects: the drop-in and value Secrets, ready to apply."""
    check_capi(settings)
    return [p.obj for p in plain_plan(settings) if p.cluster == "management"]


def capi_patches(settings: Settings) -> list[Obj]:
    """Merge patches for the cluster's own KubeadmControlPlane and KubeadmConfigTemplate, never objects to apply.

    They hold only `files` and `preKubeadmCommands`. Those are lists, which a
    JSON merge patch or `kubectl apply` replaces whole: merge them into the
    lists you have (e.g. Kustomize patchesJson6902 `add` at `/-`), or a
    KubeadmControlPlane rolls every control-plane node.
    """
    check_capi(settings)
    spec = kubeadm_config_spec(settings, node_values(settings, str(settings.no_proxy())))
    return [kubeadm_control_plane_patch(settings, spec), kubeadm_config_template_patch(settings, spec)]
