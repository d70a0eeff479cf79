"""GKE discovery under Pulumi mocks: VPC-native, dual-stack, private and existing clusters, NO_PROXY and Allow in full."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi.runtime import rpc
from pulumi_gcp import container

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.discovery import gke
from tests.component.test_discovery_support import (
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

CLUSTER = "gcp:container/cluster:Cluster"
GET_CLUSTER = "gcp:container/getCluster:getCluster"
GET_SUBNETWORK = "gcp:compute/getSubnetwork:getSubnetwork"
PROJECT = "acme-prod"
REGION = "europe-west1"
SUBNET_PATH = f"projects/{PROJECT}/regions/{REGION}/subnetworks/gke-nodes"
PODS_RANGE = "gke-prod-pods-1a2b3c4d"

HEAD = "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
HEAD_V6 = HEAD.replace("::1,", "::1,[::1],", 1)  # an IPv6 CIDR in the list: IPv6 addresses bracketed too
METADATA = "metadata,metadata.google.internal,169.254.169.254"


def cluster_state(
    *,
    pods: str = "10.8.0.0/14",
    services: str = "34.118.224.0/20",
    stack_type: str = "IPV4",
    endpoint: str = "34.140.21.87",
    private: dict[str, Any] | None = None,
    subnetwork: str = SUBNET_PATH,
    location: str = REGION,
    services_range: str = "",
) -> dict[str, Any]:
    """What the GCP provider returns for a VPC-native GKE cluster (camelCase, as the engine sees it)."""
    return {
        "name": "prod-5e6f7a8",
        "location": location,
        "project": PROJECT,
        "endpoint": endpoint,
        "masterVersion": "1.31.5-gke.1023000",
        "clusterIpv4Cidr": pods,
        "servicesIpv4Cidr": services,
        "ipAllocationPolicy": {
            "clusterIpv4CidrBlock": pods,
            "clusterSecondaryRangeName": PODS_RANGE,
            "servicesIpv4CidrBlock": services,
            "servicesSecondaryRangeName": services_range,
            "stackType": stack_type,
            "podCidrOverprovisionConfig": {"disabled": False},
        },
        "privateClusterConfig": private
        or {
            "enablePrivateEndpoint": False,
            "enablePrivateNodes": False,
            "privateEndpoint": "",
            "publicEndpoint": endpoint,
            "masterGlobalAccessConfig": {"enabled": False},
        },
        "network": f"projects/{PROJECT}/global/networks/prod",
        "subnetwork": subnetwork,
        "selfLink": f"https://container.googleapis.com/v1/projects/{PROJECT}/locations/{location}/clusters/prod-5e6f7a8",
        "masterAuth": {
            "clusterCaCertificate": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUVMVENDQXBXZ0F3SUJBZ0lSQU5hCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K",
            "clientCertificateConfig": {"issueClientCertificate": False},
        },
    }


def subnetwork(
    *, primary: str = "10.132.0.0/20", secondary: dict[str, str] | None = None, ipv6: str = ""
) -> dict[str, Any]:
    """What `gcp.compute.get_subnetwork` returns; GCP writes IPv6 prefixes with every zero group spelled out."""
    ranges = secondary if secondary is not None else {PODS_RANGE: "10.8.0.0/14"}
    return {
        "id": SUBNET_PATH,
        "name": "gke-nodes",
        "project": PROJECT,
        "region": REGION,
        "network": f"https://www.googleapis.com/compute/v1/projects/{PROJECT}/global/networks/prod",
        "selfLink": f"https://www.googleapis.com/compute/v1/{SUBNET_PATH}",
        "ipCidrRange": primary,
        "gatewayAddress": primary.replace("0/20", "1").replace("0/24", "1"),
        "secondaryIpRanges": [{"rangeName": name, "ipCidrRange": cidr} for name, cidr in ranges.items()],
        "stackType": "IPV4_IPV6" if ipv6 else "IPV4_ONLY",
        "ipv6AccessType": "INTERNAL" if ipv6 else "",
        "internalIpv6Prefix": ipv6,
        "externalIpv6Prefix": "",
        "privateIpGoogleAccess": True,
        "description": "GKE nodes",
        "subnetworkId": 4817346629371023456,
    }


def new_cluster() -> container.Cluster:
    return container.Cluster(
        "prod", location=REGION, initial_node_count=1, ip_allocation_policy={}, deletion_protection=False
    )


def proxy(network: Any, settings: dict[str, Any] | None = None) -> ClusterProxy:
    return ClusterProxy("egress", ClusterProxyArgs(settings=settings or {}, network=network))


def test_vpc_native_ipv4_cluster(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state()
    answering(mocked, {GET_SUBNETWORK: subnetwork()})
    egress = proxy(gke.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == (f"{HEAD}34.118.224.0/20,10.8.0.0/14,10.132.0.0/20,34.140.21.87,{METADATA}")
    assert allow(mocked) == ["10.8.0.0/14", "10.132.0.0/20", "127.0.0.1", "::1"]
    assert service_families(mocked) == ("SingleStack", ["IPv4"])
    assert mocked.mocks.invoked == [
        (GET_SUBNETWORK, {"name": "gke-nodes", "project": PROJECT, "region": REGION}),
    ]


def test_dual_stack_cluster_takes_the_subnets_ipv6_range_for_nodes_and_pods(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state(stack_type="IPV4_IPV6")
    answering(mocked, {GET_SUBNETWORK: subnetwork(ipv6="fd20:6a3:ab42:0:0:0:0:0/64")})
    network = gke.from_cluster(new_cluster())
    egress = proxy(network)
    assert mocked.value(egress.no_proxy) == (
        f"{HEAD_V6}34.118.224.0/20,10.8.0.0/14,fd20:6a3:ab42::/64,10.132.0.0/20,34.140.21.87,{METADATA}"
    )
    assert allow(mocked) == ["10.8.0.0/14", "10.132.0.0/20", "127.0.0.1", "::1", "fd20:6a3:ab42::/64"]
    assert service_families(mocked) == ("PreferDualStack", None)
    found = origins(mocked, network)
    assert found["fd20:6a3:ab42::/64"] == ("gke:prod.nodeCidrs[2]", "gke:prod.podCidrs[1]")


def test_private_cluster_in_a_zone_with_its_own_service_range(mocked: Harness) -> None:
    private = {
        "enablePrivateEndpoint": True,
        "enablePrivateNodes": True,
        "masterIpv4CidrBlock": "172.16.0.32/28",
        "privateEndpoint": "172.16.0.34",
        "publicEndpoint": "35.195.10.20",
        "peeringName": "gke-n1a2b3c4d5e6f7a8b9c0-1d2e-3f4a-peer",
        "masterGlobalAccessConfig": {"enabled": False},
    }
    mocked.mocks.state[CLUSTER] = cluster_state(
        pods="10.16.0.0/14",
        services="10.20.0.0/20",
        services_range="gke-prod-services",
        endpoint="172.16.0.34",
        private=private,
        subnetwork="gke-nodes",
        location="europe-west1-b",
    )
    secondary = {PODS_RANGE: "10.16.0.0/14", "gke-prod-services": "10.20.0.0/20", "batch-vms": "10.30.0.0/24"}
    answering(mocked, {GET_SUBNETWORK: subnetwork(primary="10.10.0.0/24", secondary=secondary)})
    egress = proxy(gke.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == (
        f"{HEAD}10.20.0.0/20,10.16.0.0/14,10.10.0.0/24,10.30.0.0/24,172.16.0.34,172.16.0.32/28,{METADATA}"
    )
    assert allow(mocked) == ["10.10.0.0/24", "10.16.0.0/14", "10.30.0.0/24", "127.0.0.1", "::1"]
    assert mocked.mocks.invoked == [
        (GET_SUBNETWORK, {"name": "gke-nodes", "project": PROJECT, "region": REGION}),
    ]


def get_cluster(**kwargs: Any) -> dict[str, Any]:
    """What `gcp.container.get_cluster` returns: the same cluster, with its blocks as lists."""
    state = cluster_state(**kwargs)
    return {
        **state,
        "name": "prod",
        "id": f"projects/{PROJECT}/locations/{REGION}/clusters/prod",
        "ipAllocationPolicies": [state.pop("ipAllocationPolicy")],
        "privateClusterConfigs": [state.pop("privateClusterConfig")],
        "masterAuths": [state.pop("masterAuth")],
    }


def test_existing_cluster_by_name_and_location(mocked: Harness) -> None:
    answering(mocked, {GET_CLUSTER: get_cluster(), GET_SUBNETWORK: subnetwork()})
    network = gke.from_existing("prod", REGION, PROJECT)
    assert network.origin == "gke:prod"
    egress = proxy(network)
    assert mocked.value(egress.no_proxy) == (f"{HEAD}34.118.224.0/20,10.8.0.0/14,10.132.0.0/20,34.140.21.87,{METADATA}")
    assert allow(mocked) == ["10.8.0.0/14", "10.132.0.0/20", "127.0.0.1", "::1"]
    assert mocked.mocks.invoked == [
        (GET_CLUSTER, {"name": "prod", "location": REGION, "project": PROJECT}),
        (GET_SUBNETWORK, {"name": "gke-nodes", "project": PROJECT, "region": REGION}),
    ]


def test_region_of_a_location() -> None:
    assert gke.region_of("europe-west1-b") == "europe-west1"
    assert gke.region_of("northamerica-northeast1-a") == "northamerica-northeast1"
    assert gke.region_of("us-central1") == "us-central1"


def test_seed_003_gke_example_is_covered() -> None:
    with program(preview=False) as up:
        up.mocks.state[CLUSTER] = cluster_state(pods="10.0.0.0/14", services="10.4.0.0/19", services_range="svc")
        secondary = {PODS_RANGE: "10.0.0.0/14", "svc": "10.4.0.0/19"}
        answering(up, {GET_SUBNETWORK: subnetwork(primary="10.128.0.0/20", secondary=secondary)})
        no_proxy = up.value(proxy(gke.from_cluster(new_cluster())).no_proxy)
    assert no_proxy == f"{HEAD}10.4.0.0/19,10.0.0.0/14,10.128.0.0/20,34.140.21.87,{METADATA}"
    assert uncovered(no_proxy, seed_no_proxy()["gcp"]) == []


@pytest.mark.parametrize("echo_inputs", [False, True])
def test_preview_of_a_cluster_that_does_not_exist_yet_registers_the_same_resources(echo_inputs: bool) -> None:
    with program(preview=False) as up:
        up.mocks.state[CLUSTER] = cluster_state()
        answering(up, {GET_SUBNETWORK: subnetwork()})
        proxy(gke.from_cluster(new_cluster()), {"namespaces": ["default"]})
        expected = registered_set(up)
    with program(preview=True) as preview:
        if not echo_inputs:  # else the mock gives back only the inputs, as some providers' previews do
            preview.mocks.state[CLUSTER] = {
                "endpoint": rpc.UNKNOWN,
                "clusterIpv4Cidr": rpc.UNKNOWN,
                "servicesIpv4Cidr": rpc.UNKNOWN,
                "ipAllocationPolicy": rpc.UNKNOWN,
                "subnetwork": rpc.UNKNOWN,
                "project": rpc.UNKNOWN,
            }
        answering(preview, {})
        egress = proxy(gke.from_cluster(new_cluster()), {"namespaces": ["default"]})
        assert not preview.known(egress.no_proxy)
        assert registered_set(preview) == expected
        assert preview.mocks.invoked == []
    assert len(expected) == 6
