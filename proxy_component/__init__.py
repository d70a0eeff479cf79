"""proxy-component: HTTP-proxy egress for a whole Kubernetes cluster, as a Pulumi component.

The pure layers (settings, NO_PROXY, renderers) import eagerly and fast; the
Pulumi-facing names (`ClusterProxy`, ...) load `pulumi` on first use, so
`import proxy_component` stays cheap for the command and never imports a cloud SDK.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .noproxy import Category, Entry, Kind, NoProxy, NoProxyError, compose, parse_entry
from .settings import Settings, SettingsError, load_settings, parse_settings

if TYPE_CHECKING:
    from .component import ClusterNetwork, ClusterProxy, ClusterProxyArgs, merge_values

__all__ = [
    "Category",
    "ClusterNetwork",
    "ClusterProxy",
    "ClusterProxyArgs",
    "Entry",
    "Kind",
    "NoProxy",
    "NoProxyError",
    "Settings",
    "SettingsError",
    "compose",
    "load_settings",
    "merge_values",
    "parse_entry",
    "parse_settings",
]

_LAZY = {
    "ClusterProxy": "component",
    "ClusterProxyArgs": "component",
    "ClusterNetwork": "discovery.network",
    "merge_values": "component",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'proxy_component' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
