"""The five example clusters the client model and the injection candidates are judged on, and extra URLs.

Two YAML examples (IPv6-only, corporate proxy) and the clusters the stack-per-cluster
examples discover (EKS, GKE, AKS), with what discovery gives for them.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from proxy_component.injections import Cluster
from proxy_component.settings import NetworkValues, Settings, load_settings, parse_settings

ROOT = Path(__file__).resolve().parents[1]

# What discovery gives for the examples' clusters (the shapes the discovery tests assert), with their settings.
CLOUD_EXAMPLES: dict[str, tuple[dict[str, object], NetworkValues]] = {
    "eks-prod": (
        {
            "cluster": {"cloud": "aws", "region": "eu-west-1"},
            "proxy": {"upstream": {"url": "http://proxy.corp.example:3128"}, "noProxy": [".corp.example"]},
            "namespaces": ["default", "apps"],
        },
        NetworkValues(
            origin="eks:prod",
            service_cidrs=["172.20.0.0/16"],
            pod_cidrs=["10.0.0.0/16"],
            node_cidrs=["10.0.0.0/16"],
            api_server_hosts=["https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com"],
        ),
    ),
    "gke-prod": (
        {"cluster": {"cloud": "gcp"}, "namespaces": ["default"]},
        NetworkValues(
            origin="gke:prod",
            service_cidrs=["34.118.224.0/20"],
            pod_cidrs=["10.4.0.0/14"],
            node_cidrs=["10.132.0.0/20"],
            api_server_ips=["10.132.0.2"],
        ),
    ),
    "aks-prod": (
        {"cluster": {"cloud": "azure", "nodeCidrs": ["10.224.0.0/16"]}, "namespaces": ["default"]},
        NetworkValues(
            origin="aks:prod-aks",
            service_cidrs=["10.0.0.0/16"],
            pod_cidrs=["10.244.0.0/16"],
            api_server_hosts=["prod-aks-dns-1a2b3c.hcp.westeurope.azmk8s.io"],
        ),
    ),
}
EXAMPLES = ("ipv6-only", "corporate-proxy", *CLOUD_EXAMPLES)

# Beyond the representative destinations: subdomains, look-alikes, ports, https, upper-case hosts.
EXTRA_URLS = (
    "http://api.example.com/",
    "http://notexample.com/",
    "http://example.com:8080/",
    "https://github.com/",
    "http://registry.npmjs.org:80/",
    "http://my-svc.default.svc:8080/",
    "http://a.b.corp.example/",
    "http://10.96.0.1:6443/",
    "http://[fd00:10:96::1]:443/",
    "http://169.254.169.254/latest/meta-data/",
)


@cache
def example(name: str) -> tuple[Settings, NetworkValues | None]:
    if name in CLOUD_EXAMPLES:
        data, network = CLOUD_EXAMPLES[name]
        return parse_settings(data), network
    return load_settings(str(ROOT / "examples" / name / "proxy.yaml")), None


def clusters() -> list[Cluster]:
    """The examples as `injections.Cluster`s, with the extra URLs."""
    return [Cluster(name, *example(name), urls=EXTRA_URLS) for name in EXAMPLES]
