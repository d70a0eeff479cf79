"""Seed 000: an IPv6-only cluster whose pods reach IPv4-only GitHub, Docker Hub and npm through tinyproxy.

The same proxy.yaml drives `proxy-component render proxy.yaml` (no engine) and this program (`pulumi up`).
"""

from pathlib import Path

import pulumi

from proxy_component import ClusterProxy, ClusterProxyArgs, load_settings

settings = load_settings(str(Path(__file__).with_name("proxy.yaml")))
proxy = ClusterProxy("ipv6-only", ClusterProxyArgs(settings=settings))

pulumi.export("proxyUrl", proxy.proxy_url)  # http://http-proxy.kube-system.svc.k8s.internal:8888
pulumi.export("noProxy", proxy.no_proxy)
