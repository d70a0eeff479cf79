"""Pure builders: settings plus values (plain strings or `pulumi.Input`s) in, Kubernetes objects as dicts out.

`manifests()` is the command's whole render for plain settings; the component
calls the same builders with Outputs.
"""

from __future__ import annotations

from typing import Any

from ..settings import NetworkValues, Settings, SettingsError
from .env import ProxyValues, env_vars, proxy_config_objects
from .proxy import config_digest, config_object, daemonset, service, tinyproxy_conf

__all__ = ["check_allow_sources", "manifests", "plain_values", "proxy_objects"]

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


def manifests(settings: Settings) -> list[Obj]:
    """Every object for plain settings, in a stable order: the proxy, then each namespace's proxy-config."""
    objects: list[Obj] = []
    if settings.deployment.enabled:
        check_allow_sources(settings)
        conf = tinyproxy_conf(settings, settings.allowed_sources())
        objects += proxy_objects(settings, conf, config_digest(settings, conf))
    objects += proxy_config_objects(settings, plain_values(settings))
    return objects


__all__ += ["ProxyValues", "env_vars"]
