"""An existing program that manages a cluster's apps through its own provider, now with proxy egress.

ClusterProxy takes the provider through `providers=[...]`, its children inherit
it; the app reads the proxy settings from the `proxy-config` ConfigMap
(`envFrom`) or from the component's `env` output.
"""

import pulumi
import pulumi_kubernetes as k8s

from proxy_component import ClusterProxy, ClusterProxyArgs

config = pulumi.Config()
# Mutable ConfigMaps and Secrets: otherwise pulumi-kubernetes replaces proxy-config (deletes, then recreates it)
# whenever a setting changes what it holds.
provider = k8s.Provider(
    "cluster",
    kubeconfig=config.require_secret("kubeconfig"),
    enable_config_map_mutable=True,
    enable_secret_mutable=True,
)
k8s_opts = pulumi.ResourceOptions(provider=provider)

apps = k8s.core.v1.Namespace("apps", metadata={"name": "apps"}, opts=k8s_opts)

proxy = ClusterProxy(
    "egress",
    ClusterProxyArgs(
        settings={
            "cluster": {
                "name": "prod-eu",
                "podCidrs": ["10.244.0.0/16"],
                "serviceCidrs": ["10.96.0.0/12"],
                "nodeCidrs": ["192.168.10.0/24"],
                "apiServerIps": ["10.96.0.1"],
            },
            "proxy": {"upstream": {"url": "http://proxy.corp.example:3128"}, "noProxy": [".corp.example"]},
            "namespaces": ["apps"],
        }
    ),
    pulumi.ResourceOptions(providers=[provider], depends_on=[apps]),
)

k8s.apps.v1.Deployment(
    "web",
    metadata={"namespace": "apps", "name": "web"},
    spec={
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {
                        "name": "web",
                        "image": "docker.io/library/nginx:1.27",
                        "envFrom": [{"configMapRef": {"name": "proxy-config"}}],
                    }
                ]
            },
        },
    },
    opts=pulumi.ResourceOptions(provider=provider, depends_on=[proxy]),
)

pulumi.export("noProxy", proxy.no_proxy)
