"""The one object plan: which objects exist for the settings, built from values that are strings or Outputs.

`ClusterProxy` registers each planned object and `proxy-component render` dumps
them; neither keeps a list of its own, so the two cannot drift. The set of
objects depends on the static settings only; the values (NO_PROXY, the config
text) may be unknown until a cluster's Outputs resolve.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ..dataplane.config import config_object
from ..dataplane.metrics import grafana_dashboard_object, pod_monitor, prometheus_rule
from ..dataplane.workload import daemonset, service
from ..settings import Check, Settings, SettingsError
from .admission import admission_policy, admission_policy_binding
from .capi import (
    TKG_ADDONS,
    cluster_values_secret,
    cluster_values_yaml,
    systemd_dropin,
    systemd_proxy_secret,
    tkg_addon_secrets,
    tkg_addon_values,
)
from .env import ProxyValues, proxy_config_object
from .helm import (
    VALUES_SECRETS_READS,
    check_values_secrets,
    profile_values,
    values_secret,
    values_secret_name,
    values_secrets_problems,
    values_yaml,
)
from .kyverno import CLONE_CONFIG_NAME, CLONE_TRUST_NAME, cluster_policy, generating_policies, mutating_policy
from .trust import CTB_LABEL, cluster_trust_bundles, trust_bundle_object, trust_manager_bundle, trust_namespaces

__all__ = [
    "OWNER_ANNOTATION",
    "PATCH_FORCE",
    "PlanInputs",
    "Planned",
    "check_allow_sources",
    "check_unique",
    "node_values",
    "plan",
    "plan_checks",
]

Obj = dict[str, Any]
Cluster = Literal["workload", "management"]

PATCH_FORCE = "pulumi.com/patchForce"
"""pulumi-kubernetes' per-object switch to force server-side apply conflicts: the object's fields are the plan's.

Without it, once `pulumi up` has applied an object, an edit by another field manager (`kubectl patch`, `kubectl set
image`) makes the next `up` fail with a field conflict instead of putting the value back. On every planned object,
so that `render` (which `pulumi import` and `adoptExisting` take over) and the component register the same objects;
kubectl, Argo CD and Flux ignore it.
"""

OWNER_ANNOTATION = "proxy-component.io/owner"
"""The stack (`org/project/stack`) whose component made the object: a stack adopting objects that exist refuses
another stack's by this name (proxy_component/live/adopt.py). The component sets it; `render` (no stack) does not."""


@dataclass(frozen=True)
class Planned:
    """One object of the plan and how to register it.

    `key` names it in `ClusterProxy.resources`; `suffix` follows the
    component's name in the Pulumi logical name. Both are fixed per object kind
    and name, never derived from optional settings, so that turning a setting
    on never renames (and so replaces) a live object.
    """

    key: str
    suffix: str
    obj: Obj
    cluster: Cluster = "workload"
    depends_on: tuple[str, ...] = ()
    replace_on_changes: tuple[str, ...] = ()
    ignore_changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanInputs:
    """The values the builders put into objects; strings for the command, Outputs for the component.

    `text(build, values)` turns values into a text: a call for strings, an
    `apply` for Outputs. `helm_values(profile, release)` gives one Helm profile's
    values, whose NO_PROXY adds the chart's own names for that release (None: the
    name the chart's docs use); without it they are composed from
    the settings alone (the command's plan, which has no run-time network).
    `firewall` is the nftables table when a run-time network adds cluster
    ranges to it; without it the table is rendered from the settings.
    `restart` is the pod template's `restart_inputs` (what tinyproxy cannot
    reload) and `generation` the config's `config_generation` (what it
    reloads, without credentials).
    """

    values: ProxyValues
    nodes: ProxyValues
    conf: Any
    restart: Any
    text: Callable[[Callable[[ProxyValues], str], ProxyValues], Any]
    ip_fields: Obj | None = None
    helm_values: Callable[[str, str | None], ProxyValues] | None = None
    firewall: Any = None
    generation: Any = None
    owner: str | None = None


def _profile_values(settings: Settings, values: ProxyValues, profile: str, release: str | None) -> ProxyValues:
    return profile_values(settings, profile, values=values, release=release)


def node_values(settings: Settings, no_proxy: Any) -> ProxyValues:
    """What node services and bootstrap add-ons use: a proxy nodes reach without cluster DNS."""
    return ProxyValues(settings.node_http_proxy, settings.node_https_proxy, no_proxy)


def check_allow_sources(settings: Settings, network_gives_sources: bool = False) -> None:
    """Refuse a deployment whose Allow list would hold only loopback: tinyproxy would refuse every pod."""
    problems = list(_allow_problems(settings, network_gives_sources))
    if problems:
        raise SettingsError(problems)


def _allow_problems(settings: Settings, network_gives_sources: bool = False) -> Iterator[str]:
    if settings.deployment.enabled and not (settings.has_static_sources() or network_gives_sources):
        yield (
            "cluster.podCidrs: [] and cluster.nodeCidrs: [] leave tinyproxy's Allow with only loopback, so it would "
            "refuse every pod (expected at least one pod or node CIDR, deployment.allowedSourceCidrs, or a "
            "discovered network)"
        )


def plan_checks(network_gives_sources: bool = False) -> tuple[Check, ...]:
    """The plan's checks across settings, for `parse_settings(data, checks=...)` to report in the settings' round."""
    allow = ("deployment.enabled", "cluster.pod_cidrs", "cluster.node_cidrs", "deployment.allowed_source_cidrs")
    return (
        Check(allow, functools.partial(_allow_problems, network_gives_sources=network_gives_sources)),
        Check(VALUES_SECRETS_READS, values_secrets_problems),
    )


def check_unique(objects: list[Obj]) -> None:
    """Refuse two objects with one kind, namespace and name: the later would silently replace the earlier."""
    seen: set[tuple[str, str, str]] = set()
    for obj in objects:
        meta = obj["metadata"]
        key = (str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"]))
        if key in seen:
            raise SettingsError(
                [
                    f"{key[0]} {key[1]}/{key[2]}: two objects would have this name (expected distinct names, "
                    "e.g. another helmValuesSecrets[].name)"
                ]
            )
        seen.add(key)


def _unmanaged_service_fields(obj: Obj) -> tuple[str, ...]:
    """The Service fields the API server fills in and the plan never sets: changes to them are not the plan's.

    A Service taken over with `pulumi import` has them among its inputs (its cluster IPs, the families of a
    dual-stack cluster), and pulumi-kubernetes would replace the Service to drop them.
    """
    allocated = ("spec.clusterIP", "spec.clusterIPs")
    return allocated if "ipFamilies" in obj["spec"] else (*allocated, "spec.ipFamilies")


def plan(settings: Settings, inputs: PlanInputs) -> list[Planned]:
    """Every object for these settings, workload cluster first, then the management cluster's, in a stable order."""
    check_values_secrets(settings)
    planned: list[Planned] = []
    if settings.deployment.enabled:
        service_obj = service(settings, inputs.ip_fields)
        planned += [
            Planned(
                "config",
                "-tinyproxy-config",
                config_object(settings, inputs.conf, inputs.firewall, inputs.generation),
            ),
            Planned("daemonset", "-tinyproxy", daemonset(settings, inputs.restart), depends_on=("config",)),
            # The primary IP family of a Service cannot change in place: the API server refuses the update.
            Planned(
                "service",
                "-service",
                service_obj,
                replace_on_changes=("spec.ipFamilies",),
                ignore_changes=_unmanaged_service_fields(service_obj),
            ),
        ]
        m = settings.deployment.metrics
        if m.enabled and m.pod_monitor:
            planned.append(Planned("pod-monitor", "-pod-monitor", pod_monitor(settings)))
        if m.enabled and m.prometheus_rule:
            planned.append(Planned("prometheus-rule", "-prometheus-rule", prometheus_rule(settings)))
        if m.enabled and m.grafana_dashboard:
            planned.append(Planned("grafana-dashboard", "-grafana-dashboard", grafana_dashboard_object(settings)))
    for namespace in settings.proxy_config_namespaces:
        obj = proxy_config_object(settings, namespace, inputs.values)
        planned.append(Planned(f"proxy-config/{namespace}", f"-proxy-config-{namespace}", obj))
    for namespace in trust_namespaces(settings):
        obj = trust_bundle_object(settings, namespace)
        planned.append(Planned(f"proxy-trust/{namespace}", f"-proxy-trust-{namespace}", obj))
    bundles: tuple[str, ...] = ()
    if settings.injection.cluster_trust_bundle and settings.trusted_ca is not None:
        for obj in cluster_trust_bundles(settings):
            kind = obj["metadata"]["labels"][CTB_LABEL]
            planned.append(Planned(f"cluster-trust-bundle/{kind}", f"-cluster-trust-bundle-{kind}", obj))
            bundles += (f"cluster-trust-bundle/{kind}",)
    if settings.injection.kyverno and settings.injection.kyverno_policy == "ClusterPolicy":
        planned.append(Planned("kyverno-policy", "-kyverno-policy", cluster_policy(settings, inputs.values)))
    elif settings.injection.kyverno:
        keys = {CLONE_CONFIG_NAME: "kyverno-clone-proxy-config", CLONE_TRUST_NAME: "kyverno-clone-proxy-trust"}
        for obj in generating_policies(settings):
            key = keys[obj["metadata"]["name"]]
            planned.append(Planned(key, f"-{key}", obj))
        mutating = mutating_policy(settings, inputs.values, inputs.text)
        planned.append(Planned("kyverno-mutating-policy", "-kyverno-mutating-policy", mutating, depends_on=bundles))
    if settings.injection.admission:
        planned += [
            Planned(
                "admission-policy",
                "-admission-policy",
                admission_policy(settings, inputs.values, inputs.text),
                depends_on=bundles,
            ),
            Planned(
                "admission-binding",
                "-admission-binding",
                admission_policy_binding(settings),
                depends_on=("admission-policy",),
            ),
        ]
    if settings.injection.trust_manager:
        planned.append(Planned("trust-manager-bundle", "-trust-manager-bundle", trust_manager_bundle(settings)))
    for spec in settings.helm_values_secrets:
        name = values_secret_name(spec)
        helm = inputs.helm_values or functools.partial(_profile_values, settings, inputs.values)
        selected = helm(spec.profile, spec.release).select(
            settings.runtimes.cluster_wide if spec.runtimes is None else spec.runtimes
        )
        text = inputs.text(functools.partial(values_yaml, spec.profile), selected)
        planned.append(
            Planned(
                f"helm-values/{spec.namespace}/{name}",
                f"-helm-values-{spec.namespace}-{name}",
                values_secret(spec, text),
            )
        )
    if settings.capi.enabled:
        nodes = inputs.nodes
        planned += [
            Planned(
                "capi/systemd-proxy",
                "-systemd-proxy",
                systemd_proxy_secret(settings, inputs.text(systemd_dropin, nodes)),
                cluster="management",
            ),
            Planned(
                "capi/cluster-values",
                "-cluster-values",
                cluster_values_secret(settings, inputs.text(cluster_values_yaml, nodes)),
                cluster="management",
            ),
        ]
        if settings.capi.tkg_addons:
            texts = {addon: inputs.text(functools.partial(tkg_addon_values, addon), nodes) for addon in TKG_ADDONS}
            for obj in tkg_addon_secrets(settings, texts):
                name = obj["metadata"]["name"]
                planned.append(Planned(f"capi/{name}", f"-{name}", obj, cluster="management"))
    check_unique([p.obj for p in planned if p.cluster == "workload"])
    check_unique([p.obj for p in planned if p.cluster == "management"])
    return [dataclasses.replace(p, obj=owned(p.obj, inputs.owner)) for p in planned]


def owned(obj: Obj, owner: str | None = None) -> Obj:
    """The object with the annotation that makes `pulumi up` take back any of its fields another manager edited,
    and with its owner's (`OWNER_ANNOTATION`) when a stack registers it."""
    meta = obj["metadata"]
    annotations = {**meta.get("annotations", {}), PATCH_FORCE: "true"}
    if owner is not None:
        annotations[OWNER_ANNOTATION] = owner
    return {**obj, "metadata": {**meta, "annotations": annotations}}
