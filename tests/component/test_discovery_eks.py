"""EKS discovery under Pulumi mocks: a cluster of the program or an existing one, its VPC, NO_PROXY and Allow in full."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from pulumi.runtime import rpc
from pulumi_aws import eks as aws_eks
from pulumi_aws.provider import Provider as AwsProvider

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.discovery import eks
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

CLUSTER = "aws:eks/cluster:Cluster"
GET_CLUSTER = "aws:eks/getCluster:getCluster"
GET_VPC = "aws:ec2/getVpc:getVpc"
ACCOUNT = "123456789012"
VPC_ID = "vpc-0a1b2c3d4e5f67890"
CA_DATA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMvakNDQWVhZ0F3SUJBZ0lCQURBTkJna3Foa2lHOXcwQkFRc0ZBREFWTVJNd0VRWURWUVFERXdwcmRXSmwKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="


def cluster_state(
    region: str, *, family: str = "ipv4", service_v4: str = "172.20.0.0/16", service_v6: str | None = None
) -> dict[str, Any]:
    """What the AWS provider returns for an EKS cluster (camelCase, as the engine sees it)."""
    network: dict[str, Any] = {"ipFamily": family, "elasticLoadBalancing": {"enabled": False}}
    if family == "ipv6":
        network["serviceIpv6Cidr"] = service_v6
    else:
        network["serviceIpv4Cidr"] = service_v4
    return {
        "arn": f"arn:aws:eks:{region}:{ACCOUNT}:cluster/prod-3f2a1b7",
        "name": "prod-3f2a1b7",
        "endpoint": f"https://0A1B2C3D4E5F60718293A4B5C6D7E8F9.gr7.{region}.eks.amazonaws.com",
        "platformVersion": "eks.12",
        "version": "1.31",
        "status": "ACTIVE",
        "region": region,
        "certificateAuthority": {"data": CA_DATA},
        "kubernetesNetworkConfig": network,
        "vpcConfig": {
            "vpcId": VPC_ID,
            "subnetIds": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
            "clusterSecurityGroupId": "sg-0c1d2e3f4a5b6c7d8",
            "endpointPrivateAccess": True,
            "endpointPublicAccess": True,
            "publicAccessCidrs": ["0.0.0.0/0"],
        },
    }


def vpc(region: str, cidrs: list[str], ipv6: list[str] | None = None) -> dict[str, Any]:
    """What `aws.ec2.get_vpc` returns: the primary block, every association, and the IPv6 associations."""
    return {
        "id": VPC_ID,
        "arn": f"arn:aws:ec2:{region}:{ACCOUNT}:vpc/{VPC_ID}",
        "region": region,
        "cidrBlock": cidrs[0],
        "cidrBlockAssociations": [
            {"associationId": f"vpc-cidr-assoc-0{i}a2b3c4d5e6f7a8b", "cidrBlock": cidr, "state": "associated"}
            for i, cidr in enumerate(cidrs)
        ]
        + [
            {"associationId": "vpc-cidr-assoc-09f8e7d6c5b4a3b2c", "cidrBlock": "10.99.0.0/16", "state": "disassociated"}
        ],
        "ipv6CidrBlockAssociations": [
            {
                "associationId": "vpc-cidr-assoc-0ab12cd34ef56ab78",
                "ipv6CidrBlock": block,
                "ipSource": "amazon",
                "ipv6AddressAttribute": "public",
            }
            for block in ipv6 or []
        ],
        "ipv6CidrBlock": (ipv6 or [""])[0],
        "ipv6AssociationId": "vpc-cidr-assoc-0ab12cd34ef56ab78" if ipv6 else "",
        "default": False,
        "state": "available",
        "instanceTenancy": "default",
        "ownerId": ACCOUNT,
        "tags": {"Name": "prod"},
    }


def get_cluster(region: str, **kwargs: Any) -> dict[str, Any]:
    """What `aws.eks.get_cluster` returns: the same cluster, with its blocks as lists."""
    state = cluster_state(region, **kwargs)
    network = dict(state.pop("kubernetesNetworkConfig"))
    network["elasticLoadBalancings"] = [network.pop("elasticLoadBalancing")]
    network.setdefault("serviceIpv4Cidr", "")
    network.setdefault("serviceIpv6Cidr", "")
    authority = state.pop("certificateAuthority")
    return {
        **state,
        "id": "prod",
        "name": "prod",
        "kubernetesNetworkConfigs": [network],
        "certificateAuthorities": [authority],
    }


def new_cluster() -> aws_eks.Cluster:
    return aws_eks.Cluster(
        "prod",
        role_arn=f"arn:aws:iam::{ACCOUNT}:role/eks-cluster",
        vpc_config={"subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]},
    )


def proxy(network: Any, settings: dict[str, Any] | None = None) -> ClusterProxy:
    return ClusterProxy("egress", ClusterProxyArgs(settings=settings or {}, network=network))


def test_ipv4_cluster_with_a_secondary_vpc_cidr(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state("eu-west-1")
    answering(mocked, {GET_VPC: vpc("eu-west-1", ["10.0.0.0/16", "100.64.0.0/16"])})
    egress = proxy(eks.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "172.20.0.0/16,10.0.0.0/16,100.64.0.0/16,"
        "0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.eu-west-1.eks.amazonaws.com,"
        "eu-west-1.compute.internal,.eu-west-1.compute.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254"
    )
    assert allow(mocked) == ["10.0.0.0/16", "100.64.0.0/16", "127.0.0.1", "::1"]
    assert service_families(mocked) == ("SingleStack", ["IPv4"])
    assert mocked.mocks.invoked == [(GET_VPC, {"id": VPC_ID, "region": "eu-west-1"})]


def test_ipv6_cluster(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state("us-east-1", family="ipv6", service_v6="fd2c:8b1e:5a3f::/108")
    answering(mocked, {GET_VPC: vpc("us-east-1", ["10.0.0.0/16"], ["2600:1f18:2a4c:9e00::/56"])})
    egress = proxy(eks.from_cluster(new_cluster()))
    assert mocked.value(egress.no_proxy) == (
        "localhost,127.0.0.1,::1,[::1],cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "fd2c:8b1e:5a3f::/108,10.0.0.0/16,2600:1f18:2a4c:9e00::/56,"
        "0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.us-east-1.eks.amazonaws.com,"
        "ec2.internal,.ec2.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,[fd00:ec2::23],fd00:ec2::254,[fd00:ec2::254]"
    )
    assert allow(mocked) == ["10.0.0.0/16", "127.0.0.1", "::1", "2600:1f18:2a4c:9e00::/56"]
    assert service_families(mocked) == ("SingleStack", ["IPv6"])


def test_existing_cluster_by_name_reads_it_and_its_vpc_in_the_given_region(mocked: Harness) -> None:
    answering(
        mocked,
        {GET_CLUSTER: get_cluster("eu-central-1"), GET_VPC: vpc("eu-central-1", ["10.20.0.0/16", "10.21.0.0/16"])},
    )
    egress = proxy(eks.from_existing("prod", region="eu-central-1"), {"cluster": {"dnsDomain": "prod.internal"}})
    assert mocked.value(egress.no_proxy) == (
        "localhost,127.0.0.1,::1,prod.internal,.prod.internal,svc,.svc,kubernetes,kubernetes.default,"
        "172.20.0.0/16,10.20.0.0/16,10.21.0.0/16,"
        "0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.eu-central-1.eks.amazonaws.com,"
        "eu-central-1.compute.internal,.eu-central-1.compute.internal,"
        "169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254"
    )
    assert allow(mocked) == ["10.20.0.0/15", "127.0.0.1", "::1"]
    assert mocked.mocks.invoked == [
        (GET_CLUSTER, {"name": "prod", "region": "eu-central-1"}),
        (GET_VPC, {"id": VPC_ID, "region": "eu-central-1"}),
    ]


def test_without_the_vpc_cni_the_vpc_is_the_nodes_only(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state("eu-west-1")
    answering(mocked, {GET_VPC: vpc("eu-west-1", ["10.0.0.0/16"])})
    network = eks.from_cluster(new_cluster(), vpc_cni=False)
    assert network.pod_cidrs is None
    explicit = {"cluster": {"podCidrs": ["192.168.0.0/16"]}}
    egress = proxy(network, explicit)
    assert mocked.value(egress.no_proxy) == (
        "localhost,127.0.0.1,::1,cluster.local,.cluster.local,svc,.svc,kubernetes,kubernetes.default,"
        "172.20.0.0/16,192.168.0.0/16,10.0.0.0/16,"
        "0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.eu-west-1.eks.amazonaws.com,"
        "eu-west-1.compute.internal,.eu-west-1.compute.internal,169.254.169.254,169.254.170.23,fd00:ec2::23,fd00:ec2::254"
    )
    assert allow(mocked) == ["10.0.0.0/16", "127.0.0.1", "192.168.0.0/16", "::1"]


def test_explicit_values_override_discovered_ones_and_provenance_says_which(mocked: Harness) -> None:
    answering(mocked, {GET_CLUSTER: get_cluster("eu-west-1"), GET_VPC: vpc("eu-west-1", ["10.0.0.0/16"])})
    network = eks.from_existing("prod").override(service_cidrs=["10.100.0.0/16"], origin="explicit")
    assert network.origin == "eks:prod"
    found = origins(mocked, network)
    assert found["10.100.0.0/16"] == ("explicit.serviceCidrs[0]",)
    assert "172.20.0.0/16" not in found
    assert found["10.0.0.0/16"] == ("eks:prod.nodeCidrs[0]", "eks:prod.podCidrs[0]")
    assert found["0a1b2c3d4e5f60718293a4b5c6d7e8f9.gr7.eu-west-1.eks.amazonaws.com"] == ("eks:prod.apiServerHosts[0]",)
    assert found["eu-west-1.compute.internal"] == ("eks:prod.cloudEntries[4]",)
    assert mocked.mocks.invoked[0] == (GET_CLUSTER, {"name": "prod"})


def test_a_cluster_without_a_vpc_id_is_an_error_naming_the_field(mocked: Harness) -> None:
    state = cluster_state("eu-west-1")
    del state["vpcConfig"]["vpcId"]
    mocked.mocks.state[CLUSTER] = state
    network = eks.from_cluster(new_cluster())
    with pytest.raises(
        ValueError, match=r"eks:prod\.vpcConfig\.vpcId: not set on the cluster, so discovery cannot read it"
    ):
        mocked.value(pulumi.Output.from_input(network.node_cidrs))


def test_the_vpc_is_read_through_the_clusters_own_provider(mocked: Harness) -> None:
    mocked.mocks.state[CLUSTER] = cluster_state("eu-west-1")
    providers = answering(mocked, {GET_VPC: vpc("eu-west-1", ["10.0.0.0/16"])})
    account = AwsProvider("prod-account", region="eu-west-1")
    cluster = aws_eks.Cluster(
        "prod",
        role_arn=f"arn:aws:iam::{ACCOUNT}:role/eks-cluster",
        vpc_config={"subnet_ids": ["subnet-0123456789abcdef0"]},
        opts=pulumi.ResourceOptions(provider=account),
    )
    mocked.value(pulumi.Output.from_input(eks.from_cluster(cluster).node_cidrs))
    assert len(providers) == 1
    assert providers[0].endswith("$pulumi:providers:aws::prod-account::prod-account-id")


def test_region_from_arn() -> None:
    assert eks.region_from_arn("arn:aws-cn:eks:cn-north-1:123456789012:cluster/prod") == "cn-north-1"
    with pytest.raises(ValueError, match=r"^'prod' is not a regional ARN \(expected e\.g\. arn:aws:eks:"):
        eks.region_from_arn("prod")


def test_seed_003_eks_example_is_covered() -> None:
    with program(preview=False) as up:
        up.mocks.state[CLUSTER] = cluster_state("us-west-2")
        answering(up, {GET_VPC: vpc("us-west-2", ["10.0.0.0/8"])})
        no_proxy = up.value(proxy(eks.from_cluster(new_cluster())).no_proxy)
    assert "172.20.0.0/16" in no_proxy.split(",")
    assert uncovered(no_proxy, seed_no_proxy()["aws"]) == []


def test_preview_of_a_cluster_that_does_not_exist_yet_registers_the_same_resources() -> None:
    with program(preview=False) as up:
        up.mocks.state[CLUSTER] = cluster_state("eu-west-1")
        answering(up, {GET_VPC: vpc("eu-west-1", ["10.0.0.0/16"])})
        proxy(eks.from_cluster(new_cluster()), {"namespaces": ["default"]})
        expected = registered_set(up)
    with program(preview=True) as preview:
        # A cluster being created: the provider knows its inputs, not what AWS computes.
        preview.mocks.state[CLUSTER] = {
            "arn": rpc.UNKNOWN,
            "endpoint": rpc.UNKNOWN,
            "kubernetesNetworkConfig": rpc.UNKNOWN,
            "vpcConfig": {"subnetIds": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"], "vpcId": rpc.UNKNOWN},
        }
        answering(preview, {})
        egress = proxy(eks.from_cluster(new_cluster()), {"namespaces": ["default"]})
        assert not preview.known(egress.no_proxy)
        assert registered_set(preview) == expected
        assert preview.mocks.invoked == []
    assert len(expected) == 6


def test_preview_of_a_cluster_whose_vpc_id_is_not_known_yet_does_not_look_up_a_vpc() -> None:
    with program(preview=True) as preview:
        state = cluster_state("eu-west-1")
        del state["vpcConfig"]["vpcId"]  # as a provider may show a computed nested value during a preview
        preview.mocks.state[CLUSTER] = state
        answering(preview, {})
        network = eks.from_cluster(new_cluster())
        egress = proxy(network)
        assert preview.value(pulumi.Output.from_input(network.service_cidrs)) == ["172.20.0.0/16"]
        assert not preview.known(pulumi.Output.from_input(network.node_cidrs))
        assert not preview.known(egress.no_proxy)
        assert preview.mocks.invoked == []


def test_preview_where_the_mock_echoes_inputs_leaves_values_unknown_rather_than_empty() -> None:
    with program(preview=True) as preview:
        answering(preview, {})
        egress = proxy(eks.from_cluster(new_cluster()))
        assert not preview.known(egress.no_proxy)
        assert preview.mocks.invoked == []
