"""The per-cluster stack program: settings from stack config, one ClusterProxy, its values exported.

The root `Pulumi.yaml` runs this; each cluster is a stack (`Pulumi.<cluster>.yaml`)
whose `proxy-component:` keys hold the same settings as the command's YAML file.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime.config import CONFIG, get_config_env

from .component import ClusterProxy, ClusterProxyArgs
from .settings import Settings, SettingsError, parse_settings

__all__ = ["CONFIG_NAMESPACE", "main", "settings_from_config"]

CONFIG_NAMESPACE = "proxy-component"
SETTINGS_KEYS = ("proxy", "cluster", "deployment", "namespaces")
PROVIDER_KEYS = ("renderYamlToDirectory", "kubeconfig", "context")


def settings_from_config(config: pulumi.Config | None = None) -> Settings:
    """Read `proxy-component:{proxy,cluster,deployment,namespaces}`; any other key in the namespace is an error."""
    config = config or pulumi.Config(CONFIG_NAMESPACE)
    known = {f"{CONFIG_NAMESPACE}:{k}" for k in (*SETTINGS_KEYS, *PROVIDER_KEYS)}
    present = {*get_config_env(), *CONFIG.get()}
    unknown = sorted(k for k in present if k.startswith(f"{CONFIG_NAMESPACE}:") and k not in known)
    if unknown:
        accepted = ", ".join(sorted(known))
        raise SettingsError([f"{key}: unknown stack config key (accepted: {accepted})" for key in unknown])
    data: dict[str, Any] = {}
    for key in SETTINGS_KEYS:
        value = config.get_object(key)
        if value is not None:
            data[key] = value
    return parse_settings(data)


def _provider(config: pulumi.Config) -> k8s.Provider | None:
    """An explicit provider when the stack renders to a directory or names a kubeconfig/context."""
    render_dir = config.get("renderYamlToDirectory")
    kubeconfig = config.get_secret("kubeconfig")
    context = config.get("context")
    if render_dir is None and kubeconfig is None and context is None:
        return None
    return k8s.Provider(
        "cluster",
        render_yaml_to_directory=render_dir,
        kubeconfig=kubeconfig,
        context=context,
    )


def main() -> ClusterProxy:
    config = pulumi.Config(CONFIG_NAMESPACE)
    settings = settings_from_config(config)
    provider = _provider(config)
    opts = pulumi.ResourceOptions(providers=[provider]) if provider is not None else None
    proxy = ClusterProxy(settings.cluster.name or pulumi.get_stack(), ClusterProxyArgs(settings=settings), opts)
    pulumi.export("noProxy", proxy.no_proxy)
    pulumi.export("httpProxy", proxy.http_proxy)
    pulumi.export("httpsProxy", proxy.https_proxy)
    pulumi.export("proxyUrl", proxy.proxy_url)
    pulumi.export("env", proxy.env)
    return proxy
