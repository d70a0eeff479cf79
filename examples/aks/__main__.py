"""An AKS cluster and its egress proxy, with AKS's own httpProxyConfig from the same settings.

`pulumi up` creates a VNet, a node subnet and a small Azure CNI cluster in the
`azure-native:location`; with `clusterName` and `resourceGroup` set it reads
that existing cluster instead. ClusterProxy's network is discovered from the
cluster (pod and Service ranges, the node subnet, the API server FQDNs, the
metadata and wire server addresses).

AKS's httpProxyConfig sets the proxy for nodes and injects it into pods; nodes
cannot resolve the cluster's DNS, so it points at the corporate proxy (the
upstream tinyproxy chains to), and its noProxy is composed from the same
settings and the address ranges the cluster is created with. It cannot be read
from the cluster itself: the cluster's own outputs cannot feed its inputs.
"""

import base64

import pulumi
import pulumi_kubernetes as k8s
from pulumi_azure_native import containerservice, network, resources

from proxy_component import ClusterNetwork, ClusterProxy, ClusterProxyArgs
from proxy_component.discovery import aks as discovery

VNET_CIDR = "10.240.0.0/12"
NODE_SUBNET_CIDR = "10.240.0.0/16"
SERVICE_CIDR = "10.0.0.0/16"

config = pulumi.Config()
existing = config.get("clusterName")
settings = {
    "cluster": {"name": "prod"},
    "proxy": {"upstream": {"url": config.require("corporateProxy")}},
    "namespaces": ["default"],
}

if existing:
    group = config.get("resourceGroup")
    if not group:
        raise pulumi.RunError("resourceGroup: required with clusterName (the existing cluster's resource group)")
    proxy_network = discovery.from_existing(existing, group)
    cluster_name: pulumi.Input[str] = existing
    group_name: pulumi.Input[str] = group
else:
    rg = resources.ResourceGroup("aks")
    vnet = network.VirtualNetwork("aks", resource_group_name=rg.name, address_space={"address_prefixes": [VNET_CIDR]})
    nodes = network.Subnet(
        "nodes", resource_group_name=rg.name, virtual_network_name=vnet.name, address_prefix=NODE_SUBNET_CIDR
    )
    # What AKS's httpProxyConfig must exempt, known before the cluster exists.
    inputs = ClusterNetwork(
        pod_cidrs=[NODE_SUBNET_CIDR], node_cidrs=[NODE_SUBNET_CIDR], service_cidrs=[SERVICE_CIDR], origin="aks-inputs"
    )
    cluster = containerservice.ManagedCluster(
        "prod",
        resource_group_name=rg.name,
        dns_prefix="prod",
        identity={"type": "SystemAssigned"},
        agent_pool_profiles=[
            {
                "name": "system",
                "mode": "System",
                "count": 2,
                "vm_size": "Standard_D2ds_v5",
                "os_type": "Linux",
                "vnet_subnet_id": nodes.id,
            }
        ],
        network_profile={"network_plugin": "azure", "service_cidr": SERVICE_CIDR, "dns_service_ip": "10.0.0.10"},
        http_proxy_config=discovery.http_proxy_config(settings, inputs),
    )
    proxy_network = discovery.from_cluster(cluster)
    cluster_name, group_name = cluster.name, rg.name

credentials = containerservice.list_managed_cluster_user_credentials_output(
    resource_group_name=group_name, resource_name=cluster_name
)
kubeconfig = credentials.kubeconfigs[0].value.apply(lambda encoded: base64.b64decode(encoded).decode())
provider = k8s.Provider("aks", kubeconfig=pulumi.Output.secret(kubeconfig))
proxy = ClusterProxy(
    "egress",
    ClusterProxyArgs(settings=settings, network=proxy_network),
    pulumi.ResourceOptions(providers=[provider]),
)

pulumi.export("noProxy", proxy.no_proxy)
pulumi.export("proxyUrl", proxy.proxy_url)
