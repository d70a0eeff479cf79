"""Pure builders: settings plus values (plain strings or `pulumi.Input`s) in, Kubernetes objects as dicts out.

`manifests()` is the command's whole render for plain settings; the component
calls the same builders with Outputs.
"""

from __future__ import annotations

from typing import Any

from ..settings import NetworkValues, Settings, SettingsError
from .capi import (
    TKG_ADDONS,
    cluster_values_secret,
    cluster_values_yaml,
    kubeadm_config_spec,
    kubeadm_config_template_patch,
    kubeadm_control_plane_patch,
    systemd_dropin,
    systemd_proxy_secret,
    tkg_addon_secrets,
    tkg_addon_values,
)
from .env import ProxyValues, env_vars, proxy_config_objects
from .helm import check_values_secrets, values_secret, values_yaml
from .kyverno import cluster_policy
from .proxy import config_digest, config_object, daemonset, service, tinyproxy_conf

__all__ = [
    "capi_manifests",
    "check_allow_sources",
    "check_capi",
    "check_unique",
    "manifests",
    "node_values",
    "plain_values",
    "proxy_objects",
]

Obj = dict[str, Any]


def check_allow_sources(settings: Settings, network_gives_sources: bool = False) -> None:
    """Refuse a deployment whose Allow list would hold only loopback: tinyproxy would refuse every pod."""
    if settings.deployment.enabled and not (settings.has_static_sources() or network_gives_sources):
        raise SettingsError(
            [
                "cluster.podCidrs: [] and cluster.nodeCidrs: [] leave tinyproxy's Allow with only loopback, so it would "
                "refuse every pod (expected at least one pod or node CIDR, deployment.allowedSourceCidrs, or a "
                "discovered network)"
            ]
        )


def proxy_objects(settings: Settings, conf: Any, digest: Any, ip_fields: Obj | None = None) -> list[Obj]:
    """The tinyproxy config object, the DaemonSet and the Service; empty when the deployment is disabled."""
    if not settings.deployment.enabled:
        return []
    return [config_object(settings, conf), daemonset(settings, digest), service(settings, ip_fields)]


def plain_values(settings: Settings, network: NetworkValues | None = None) -> ProxyValues:
    return ProxyValues(settings.http_proxy, settings.https_proxy, str(settings.no_proxy(network)))


def node_values(settings: Settings, no_proxy: Any) -> ProxyValues:
    """What node services and bootstrap add-ons use: a proxy nodes reach without cluster DNS."""
    return ProxyValues(settings.node_http_proxy, settings.node_https_proxy, no_proxy)


def manifests(settings: Settings) -> list[Obj]:
    """The workload cluster's objects for plain settings, in a stable order.

    The proxy, each namespace's proxy-config, the Kyverno policy when
    `injection.kyverno` is set, and the Helm values Secrets.
    """
    check_values_secrets(settings)
    objects: list[Obj] = []
    if settings.deployment.enabled:
        check_allow_sources(settings)
        conf = tinyproxy_conf(settings, settings.allowed_sources())
        objects += proxy_objects(settings, conf, config_digest(settings, conf))
    values = plain_values(settings)
    objects += proxy_config_objects(settings, values)
    if settings.injection.kyverno:
        objects.append(cluster_policy(settings, values))
    objects += [values_secret(spec, values_yaml(spec.profile, values)) for spec in settings.helm_values_secrets]
    check_unique(objects)
    return objects


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


def check_capi(settings: Settings) -> None:
    if not settings.capi.enabled:
        raise SettingsError(["capi.enabled: false (expected true to render the Cluster API objects)"])


def capi_manifests(settings: Settings) -> list[Obj]:
    """The management cluster's objects: the drop-in and value Secrets, and the kubeadm fragments."""
    check_capi(settings)
    values = node_values(settings, str(settings.no_proxy()))
    spec = kubeadm_config_spec(settings, values)
    objects = [
        systemd_proxy_secret(settings, systemd_dropin(values)),
        cluster_values_secret(settings, cluster_values_yaml(values)),
    ]
    if settings.capi.tkg_addons:
        objects += tkg_addon_secrets(settings, {addon: tkg_addon_values(addon, values) for addon in TKG_ADDONS})
    objects += [kubeadm_control_plane_patch(settings, spec), kubeadm_config_template_patch(settings, spec)]
    check_unique(objects)
    return objects


__all__ += ["ProxyValues", "env_vars"]
