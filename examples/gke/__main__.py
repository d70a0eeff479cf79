"""A GKE cluster and its egress proxy: NO_PROXY and tinyproxy's Allow come from the cluster, never typed twice.

`pulumi up` creates a small VPC-native zonal cluster in the `gcp:project`; with
`clusterName` set it reads that existing cluster instead. Discovery reads the
pod and Service ranges, the node subnetwork's ranges, the API server (and, for
a private cluster, its private endpoint and control-plane range) and the
metadata server.
"""

import json

import pulumi
import pulumi_kubernetes as k8s
from pulumi_gcp import container

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.discovery import gke as discovery

config = pulumi.Config()
location = config.get("location") or "europe-west1-b"
existing = config.get("clusterName")

if existing:
    found = container.get_cluster_output(name=existing, location=location)
    network = discovery.from_existing(existing, location)
    endpoint, ca_data = found.endpoint, found.master_auths[0].cluster_ca_certificate
else:
    cluster = container.Cluster(
        "prod",
        location=location,
        initial_node_count=2,
        node_config={
            "machine_type": "e2-standard-2",
            "oauth_scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        },
        ip_allocation_policy={"stack_type": "IPV4"},
        release_channel={"channel": "REGULAR"},
        deletion_protection=False,
    )
    network = discovery.from_cluster(cluster)
    endpoint, ca_data = cluster.endpoint, cluster.master_auth.cluster_ca_certificate


def kubeconfig(args: list[str]) -> str:
    server, ca = args
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gke", "cluster": {"server": f"https://{server}", "certificate-authority-data": ca}}],
            "contexts": [{"name": "gke", "context": {"cluster": "gke", "user": "gke"}}],
            "current-context": "gke",
            "users": [
                {
                    "name": "gke",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "gke-gcloud-auth-plugin",
                            "provideClusterInfo": True,
                        }
                    },
                }
            ],
        }
    )


provider = k8s.Provider("gke", kubeconfig=pulumi.Output.all(endpoint, ca_data).apply(kubeconfig))
proxy = ClusterProxy(
    "egress",
    ClusterProxyArgs(settings={"cluster": {"name": "prod"}, "namespaces": ["default"]}, network=network),
    pulumi.ResourceOptions(providers=[provider]),
)

pulumi.export("noProxy", proxy.no_proxy)
pulumi.export("proxyUrl", proxy.proxy_url)
