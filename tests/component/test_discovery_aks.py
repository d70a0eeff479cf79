"""AKS discovery under Pulumi mocks: kubenet, Azure CNI, overlay, dual-stack, existing clusters, AKS's own proxy config."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc
from pulumi_azure_native import containerservice

from proxy_component import ClusterNetwork, ClusterProxy, ClusterProxyArgs, SettingsError
from proxy_component.discovery import aks
from tests.component.test_discovery_support import (
    CONFIG_MAP,
    allow,
    answering,
    origins,
    program,
    registered_set,
    seed_no_proxy,
    service_families,
    uncovered,
)
from tests.conftest import Harness

CLUSTER = "azure-native:containerservice:ManagedCluster"
GET_CLUSTER = "azure-native:containerservice:getManagedCluster"
GET_SUBNET = "azure-native:network:getSubnet"
SUBSCRIPTION = "0b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"
GROUP = "rg-prod-network"
VNET = "vnet-prod-weu"
FQDN = "prod-aks-dns-4f2b9c1d.hcp.westeurope.azmk8s.io"
PRIVATE_FQDN = "prod-aks-dns-4f2b9c1d.privatelink.westeurope.azmk8s.io"
SUBNETS = {
    "snet-aks-nodes": ["10.240.0.0/16"],
    "snet-aks-pods": ["10.241.0.0/16"],
    "snet-aks-dual": ["10.242.0.0/16", "fd5c:24e1:9a7b:1::/64"],
}

HEAD = "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
HEAD_V6 = HEAD.replace("::1,", "::1,[::1],", 1)  # an IPv6 CIDR in the list: IPv6 addresses bracketed too
METADATA = "168.63.129.16,169.254.169.254"


def subnet_id(name: str) -> str:
    return (
        f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Network"
        f"/virtualNetworks/{VNET}/subnets/{name}"
    )


def pool(name: str, subnet: str | None = None, pod_subnet: str | None = None) -> dict[str, Any]:
    profile: dict[str, Any] = {
        "name": name,
        "mode": "System" if name == "system" else "User",
        "count": 3,
        "vmSize": "Standard_D4ds_v5",
        "osType": "Linux",
        "osSKU": "AzureLinux",
        "type": "VirtualMachineScaleSets",
        "orchestratorVersion": "1.31.2",
        "provisioningState": "Succeeded",
    }
    if subnet:
        profile["vnetSubnetID"] = subnet_id(subnet)
    if pod_subnet:
        profile["podSubnetID"] = subnet_id(pod_subnet)
    return profile


def cluster_state(
    plugin: str,
    *,
    mode: str | None = None,
    pods: list[str] | None = None,
    services: list[str] | None = None,
    families: list[str] | None = None,
    pools: list[dict[str, Any]] | None = None,
    private: bool = False,
) -> dict[str, Any]:
    """What azure-native returns for a managed cluster (camelCase, as the engine sees it)."""
    services = services or ["10.0.0.0/16"]
    network: dict[str, Any] = {
        "networkPlugin": plugin,
        "serviceCidr": services[0],
        "serviceCidrs": services,
        "dnsServiceIP": "10.0.0.10",
        "ipFamilies": families or ["IPv4"],
        "loadBalancerSku": "standard",
        "outboundType": "loadBalancer",
    }
    if mode:
        network["networkPluginMode"] = mode
    if pods:
        network["podCidr"] = pods[0]
        network["podCidrs"] = pods
    state: dict[str, Any] = {
        "name": "prod-aks",
        "location": "westeurope",
        "kubernetesVersion": "1.31.2",
        "provisioningState": "Succeeded",
        "nodeResourceGroup": "MC_rg-prod_prod-aks_westeurope",
        "fqdn": FQDN,
        "azurePortalFQDN": "prod-aks-dns-4f2b9c1d.portal.hcp.westeurope.azmk8s.io",
        "networkProfile": network,
        "agentPoolProfiles": pools or [pool("system")],
        "identity": {"type": "SystemAssigned", "principalId": "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d"},
    }
    if private:
        state["privateFQDN"] = PRIVATE_FQDN
    return state


def get_subnet(args: dict[str, Any]) -> dict[str, Any]:
    """What `azure_native.network.get_subnet` returns for the subnet the invoke names."""
    name = args["subnetName"]
    prefixes = SUBNETS[name]
    result: dict[str, Any] = {
        "id": subnet_id(name),
        "name": name,
        "etag": 'W/"3f2a1b7c-0d4e-4f5a-8b6c-7d8e9f0a1b2c"',
        "provisioningState": "Succeeded",
        "privateEndpointNetworkPolicies": "Disabled",
        "type": "Microsoft.Network/virtualNetworks/subnets",
    }
    if len(prefixes) == 1:
        result["addressPrefix"] = prefixes[0]
    else:
        result["addressPrefixes"] = prefixes
    return result


def subnet_args(name: str) -> dict[str, Any]:
    return {"resourceGroupName": GROUP, "virtualNetworkName": VNET, "subnetName": name}


def new_cluster() -> containerservice.ManagedCluster:
    return containerservice.ManagedCluster(
        "prod",
        resource_group_name="rg-prod",
        dns_prefix="prod-aks",
        identity=containerservice.ManagedClusterIdentityArgs(
            type=containerservice.ResourceIdentityType.SYSTEM_ASSIGNED
        ),
        agent_pool_profiles=[
            containerservice.ManagedClusterAgentPoolProfileArgs(
                name="system", mode="System", count=3, vm_size="Standard_D4ds_v5"
            )
        ],
        network_profile=containerservice.ContainerServiceNetworkProfileArgs(network_plugin="kubenet"),
    )


def proxy(network: Any, settings: dict[str, Any] | None = None) -> ClusterProxy:
    return ClusterProxy("egress", ClusterProxyArgs(settings=settings or {}, network=network))


def test_kubenet_cluster_in_a_managed_vnet(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state("kubenet", pods=["10.244.0.0/16"])
    answering(mocked, {})
    egress = proxy(aks.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == f"{HEAD}10.0.0.10,10.0.0.0/16,10.244.0.0/16,{FQDN},{METADATA}"
    assert allow(mocked) == ["10.244.0.0/16", "127.0.0.1", "::1"]
    assert service_families(mocked) == ("SingleStack", ["IPv4"])
    assert mocked.mocks.invoked == []


def test_azure_cni_takes_pods_and_nodes_from_the_pools_subnets(mocked: Harness) -> None:
    pools = [pool("system", "snet-aks-nodes"), pool("apps", "snet-aks-nodes", "snet-aks-pods")]
    mocked.mocks.state[CLUSTER] = cluster_state("azure", pools=pools, private=True)
    answering(mocked, {GET_SUBNET: get_subnet})
    network = aks.from_cluster(new_cluster())
    egress = proxy(network)
    assert mocked.value(egress.no_proxy) == (
        f"{HEAD}10.0.0.10,10.0.0.0/16,10.240.0.0/16,10.241.0.0/16,{FQDN},{PRIVATE_FQDN},{METADATA}"
    )
    assert allow(mocked) == ["10.240.0.0/15", "127.0.0.1", "::1"]
    assert sorted(mocked.mocks.invoked, key=repr) == [
        (GET_SUBNET, subnet_args("snet-aks-nodes")),
        (GET_SUBNET, subnet_args("snet-aks-pods")),
    ]
    found = origins(mocked, network)
    assert found["10.240.0.0/16"] == ("aks:prod.nodeCidrs[0]", "aks:prod.podCidrs[0]")
    assert found["10.241.0.0/16"] == ("aks:prod.podCidrs[1]",)
    assert found[PRIVATE_FQDN] == ("aks:prod.apiServerHosts[1]",)


def test_azure_cni_overlay_takes_pods_from_the_profile_and_nodes_from_the_subnet(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state(
        "azure", mode="overlay", pods=["10.244.0.0/16"], pools=[pool("system", "snet-aks-nodes")]
    )
    answering(mocked, {GET_SUBNET: get_subnet})
    egress = proxy(aks.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == (
        f"{HEAD}10.0.0.10,10.0.0.0/16,10.244.0.0/16,10.240.0.0/16,{FQDN},{METADATA}"
    )
    assert allow(mocked) == ["10.240.0.0/16", "10.244.0.0/16", "127.0.0.1", "::1"]
    assert mocked.mocks.invoked == [(GET_SUBNET, subnet_args("snet-aks-nodes"))]


def test_dual_stack_overlay_cluster(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state(
        "azure",
        mode="overlay",
        pods=["10.244.0.0/16", "fd12:3456:789a::/64"],
        services=["10.0.0.0/16", "fd12:3456:789a:1::/108"],
        families=["IPv4", "IPv6"],
        pools=[pool("system", "snet-aks-dual")],
    )
    answering(mocked, {GET_SUBNET: get_subnet})
    egress = proxy(aks.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == (
        f"{HEAD_V6}10.0.0.10,10.0.0.0/16,fd12:3456:789a:1::/108,10.244.0.0/16,fd12:3456:789a::/64,"
        f"10.242.0.0/16,fd5c:24e1:9a7b:1::/64,{FQDN},{METADATA}"
    )
    assert allow(mocked) == [
        "10.242.0.0/16",
        "10.244.0.0/16",
        "127.0.0.1",
        "::1",
        "fd12:3456:789a::/64",
        "fd5c:24e1:9a7b:1::/64",
    ]
    assert service_families(mocked) == ("PreferDualStack", None)


def test_existing_cluster_by_name_and_resource_group(mocked: Harness) -> None:
    found = cluster_state("azure", pools=[pool("system", "snet-aks-nodes")])
    answering(
        mocked, {GET_CLUSTER: {**found, "id": "/subscriptions/x/resourceGroups/rg-prod/..."}, GET_SUBNET: get_subnet}
    )
    network = aks.from_existing("prod-aks", "rg-prod")
    assert network.origin == "aks:prod-aks"
    egress = proxy(network)
    assert mocked.value(egress.no_proxy) == f"{HEAD}10.0.0.10,10.0.0.0/16,10.240.0.0/16,{FQDN},{METADATA}"
    assert allow(mocked) == ["10.240.0.0/16", "127.0.0.1", "::1"]
    assert mocked.mocks.invoked[0] == (GET_CLUSTER, {"resourceGroupName": "rg-prod", "resourceName": "prod-aks"})


def test_a_subnet_id_that_is_not_one_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"^'/subscriptions/x/subnets/y' is not a subnet resource id \(expected "):
        aks.parse_subnet_id("/subscriptions/x/subnets/y")
    ref = aks.parse_subnet_id(subnet_id("snet-aks-nodes").replace("resourceGroups", "resourcegroups"))
    assert (ref.subscription, ref.resource_group, ref.vnet, ref.subnet) == (SUBSCRIPTION, GROUP, VNET, "snet-aks-nodes")


def test_seed_003_aks_example_is_covered() -> None:
    with program(preview=False) as up:
        up.mocks.state[CLUSTER] = cluster_state("kubenet", pods=["10.244.0.0/16"])
        answering(up, {})
        no_proxy = up.value(proxy(aks.from_cluster(new_cluster())).no_proxy)
    assert uncovered(no_proxy, seed_no_proxy()["azure"]) == []


@pytest.mark.parametrize("echo_inputs", [False, True])
def test_preview_of_a_cluster_that_does_not_exist_yet_registers_the_same_resources(echo_inputs: bool) -> None:
    with program(preview=False) as up:
        up.mocks.state[CLUSTER] = cluster_state("kubenet", pods=["10.244.0.0/16"])
        answering(up, {})
        proxy(aks.from_cluster(new_cluster()), {"namespaces": ["default"]})
        expected = registered_set(up)
    with program(preview=True) as preview:
        if not echo_inputs:  # else the mock gives back the inputs, where kubenet's pod CIDR is not set
            preview.mocks.state[CLUSTER] = {
                "fqdn": rpc.UNKNOWN,
                "networkProfile": rpc.UNKNOWN,
                "agentPoolProfiles": rpc.UNKNOWN,
            }
        answering(preview, {})
        egress = proxy(aks.from_cluster(new_cluster()), {"namespaces": ["default"]})
        assert not preview.known(egress.no_proxy)
        assert registered_set(preview) == expected
    assert len(expected) == 6


# --- AKS's own httpProxyConfig -----------------------------------------------------------------

SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.0.0.0/16"], "cloud": "azure"},
    "proxy": {"upstream": {"url": "http://proxy.corp.example:3128"}, "noProxy": [".corp.example"]},
}


def test_http_proxy_config_takes_the_upstream_url_nodes_can_reach_and_the_same_no_proxy(mocked: Harness) -> None:
    network = ClusterNetwork(
        node_cidrs=pulumi.Output.from_input(["10.240.0.0/16"]), api_server_hosts=FQDN, origin="aks"
    )
    config = aks.http_proxy_config(SETTINGS, network, trusted_ca="LS0tLS1CRUdJTi0tLS0t")
    cluster = containerservice.ManagedCluster(
        "prod",
        resource_group_name="rg-prod",
        dns_prefix="prod-aks",
        network_profile={"network_plugin": "kubenet", "pod_cidr": "10.244.0.0/16", "service_cidr": "10.0.0.0/16"},
        http_proxy_config=config,
    )
    egress = ClusterProxy("egress", ClusterProxyArgs(settings={**SETTINGS, "namespaces": ["apps"]}, network=network))
    mocked.value(cluster.urn)
    registered = mocked.one(CLUSTER, "prod").inputs["httpProxyConfig"]
    assert registered == {
        "httpProxy": "http://proxy.corp.example:3128",
        "httpsProxy": "http://proxy.corp.example:3128",
        "noProxy": [
            "localhost",
            "127.0.0.1",
            "::1",
            "cluster.local",
            ".cluster.local",
            "svc",
            ".svc",
            "kubernetes",
            "kubernetes.default",
            "10.0.0.0/16",
            "10.244.0.0/16",
            "10.240.0.0/16",
            FQDN,
            "168.63.129.16",
            "169.254.169.254",
            "corp.example",
            ".corp.example",
        ],
        "trustedCa": "LS0tLS1CRUdJTi0tLS0t",
    }
    pods = mocked.one(CONFIG_MAP, "egress-proxy-config-apps").inputs["data"]["NO_PROXY"]
    assert pods == ",".join(registered["noProxy"]) == mocked.value(egress.no_proxy)


def test_http_proxy_config_prefers_an_explicit_url_then_proxy_http_proxy() -> None:
    explicit = aks.http_proxy_config(
        SETTINGS, http_proxy="http://10.240.0.4:3128", https_proxy="https://proxy.corp:443"
    )
    assert (explicit.http_proxy, explicit.https_proxy) == ("http://10.240.0.4:3128", "https://proxy.corp:443")
    settings = {**SETTINGS, "proxy": {"httpProxy": "http://egress.corp.example:8080"}}
    configured = aks.http_proxy_config(settings)
    assert (configured.http_proxy, configured.https_proxy) == (
        "http://egress.corp.example:8080",
        "http://egress.corp.example:8080",
    )
    assert configured.no_proxy == [
        "localhost",
        "127.0.0.1",
        "::1",
        "cluster.local",
        ".cluster.local",
        "svc",
        ".svc",
        "kubernetes",
        "kubernetes.default",
        "10.0.0.0/16",
        "10.244.0.0/16",
        "168.63.129.16",
        "169.254.169.254",
    ]


@pytest.mark.parametrize(
    ("settings", "http_proxy", "message"),
    [
        (
            {"cluster": {"podCidrs": ["10.244.0.0/16"]}},
            None,
            "aks.http_proxy_config: no URL a node can reach (nodes cannot resolve the in-cluster proxy's name; "
            "expected http_proxy=..., proxy.httpProxy or proxy.upstream.url)",
        ),
        (
            {"proxy": {"httpProxy": "http://http-proxy.kube-system.svc.cluster.local:8888"}},
            None,
            "aks.http_proxy_config: proxy.httpProxy: 'http://http-proxy.kube-system.svc.cluster.local:8888' is a "
            "cluster-DNS name, which nodes cannot resolve (expected a URL a node reaches, e.g. the corporate proxy's)",
        ),
        (
            {"proxy": {"upstream": {"url": "http://svc:s3cret@proxy.corp:3128"}}},
            None,
            "aks.http_proxy_config: proxy.upstream carries credentials, which AKS's httpProxyConfig does not support "
            "(expected the upstream proxy's URL without them)",
        ),
        (
            {},
            "https://proxy.corp:3128",
            "aks.http_proxy_config: http_proxy: 'https://proxy.corp:3128' is not a http://host:port URL (AKS requires it)",
        ),
        (
            {},
            "http://svc:s3cret@proxy.corp:3128",
            "aks.http_proxy_config: http_proxy carries credentials, which AKS's httpProxyConfig does not support "
            "(expected a URL without user:password@)",
        ),
    ],
)
def test_http_proxy_config_refuses_what_nodes_cannot_use(
    settings: dict[str, Any], http_proxy: str | None, message: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        aks.http_proxy_config(settings, http_proxy=http_proxy)
    assert raised.value.problems == [message]
    assert "s3cret" not in str(raised.value)


def test_http_proxy_config_passes_the_upstreams_trusted_ca_base64_encoded(mocked: Harness) -> None:
    """AKS's trustedCa is the PEM, base64-encoded; it defaults to proxy.upstream.trustedCa, an explicit one wins."""
    import base64

    from tests.pki import make_ca

    first, second = make_ca("Corp Inspecting CA"), make_ca("Corp Second CA")
    upstream = {**SETTINGS["proxy"]["upstream"], "trustedCa": [first.cert_pem, second.cert_pem]}
    settings = {**SETTINGS, "proxy": {**SETTINGS["proxy"], "upstream": upstream}}
    config = aks.http_proxy_config(settings)
    containerservice.ManagedCluster(
        "prod",
        resource_group_name="rg-prod",
        dns_prefix="prod-aks",
        network_profile={"network_plugin": "kubenet", "pod_cidr": "10.244.0.0/16", "service_cidr": "10.0.0.0/16"},
        http_proxy_config=config,
    )
    registered = mocked.one(CLUSTER, "prod").inputs["httpProxyConfig"]
    decoded = base64.b64decode(registered["trustedCa"], validate=True).decode("ascii")
    assert first.cert_pem in decoded
    assert second.cert_pem in decoded
    assert decoded.count("-----BEGIN CERTIFICATE-----") == 2
    assert aks.http_proxy_config(settings, trusted_ca="LS0tLS1CRUdJTi0tLS0t").trusted_ca == "LS0tLS1CRUdJTi0tLS0t"
    assert aks.http_proxy_config(SETTINGS).trusted_ca is None
