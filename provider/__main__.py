"""The proxy-component plugin: serves ClusterProxy (type token proxy-component:index:ClusterProxy) to the engine."""

from importlib.metadata import version

from proxy_component.provider import serve_provider

serve_provider(version("proxy-component"))
