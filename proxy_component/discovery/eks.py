"""EKS discovery: an `aws.eks.Cluster` of this program, or an existing cluster by name, as a ClusterNetwork.

Services: `kubernetes_network_config.service_ipv4_cidr` (`service_ipv6_cidr`
on an IPv6 cluster). Nodes, and pods with the VPC CNI: every CIDR block of the
cluster's VPC, IPv6 included (`aws.ec2.get_vpc_output`). The API server
endpoint's host; the instance metadata and Pod Identity agent addresses; the
region's internal DNS suffix. `pulumi_aws` is imported only when called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from ..noproxy import cloud_metadata_sources
from . import cloud_sdk, required
from .network import ClusterNetwork

if TYPE_CHECKING:
    from pulumi_aws import ec2, eks

__all__ = ["from_cluster", "from_existing", "region_from_arn"]

_EXTRA = ("aws", "pulumi_aws")


@dataclass(frozen=True)
class _Eks:
    """What both entry points read from a cluster, as Outputs of the same shape."""

    origin: str
    arn: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    ip_family: pulumi.Output[str | None]
    service_ipv4_cidr: pulumi.Output[str | None]
    service_ipv6_cidr: pulumi.Output[str | None]
    vpc_id: pulumi.Output[str | None]


def from_cluster(
    cluster: eks.Cluster,
    *,
    region: pulumi.Input[str] | None = None,
    vpc_cni: bool = True,
    opts: pulumi.InvokeOutputOptions | None = None,
) -> ClusterNetwork:
    """The network of an EKS cluster created in this program; its origin is `eks:<resource name>`.

    `region` defaults to the one in the cluster's ARN. `vpc_cni=False` (Calico,
    Cilium overlay, ...) leaves the pod ranges to the settings. The VPC is read
    through the cluster's own provider unless `opts` says otherwise.
    """
    config = cluster.kubernetes_network_config
    vpc = cluster.vpc_config
    shape = _Eks(
        origin=f"eks:{cluster.pulumi_resource_name}",
        arn=cluster.arn,
        endpoint=cluster.endpoint,
        ip_family=config.apply(lambda c: c.ip_family if c else None),
        service_ipv4_cidr=config.apply(lambda c: c.service_ipv4_cidr if c else None),
        service_ipv6_cidr=config.apply(lambda c: c.service_ipv6_cidr if c else None),
        vpc_id=vpc.apply(lambda v: v.vpc_id if v else None),
    )
    return _network(shape, region, vpc_cni, opts or pulumi.InvokeOutputOptions(parent=cluster))


def from_existing(
    name: pulumi.Input[str],
    *,
    region: pulumi.Input[str] | None = None,
    vpc_cni: bool = True,
    opts: pulumi.InvokeOutputOptions | None = None,
) -> ClusterNetwork:
    """The network of an existing EKS cluster, read by name (`aws.eks.get_cluster_output`); origin `eks:<name>`."""
    with cloud_sdk(*_EXTRA):
        from pulumi_aws import eks

    found = eks.get_cluster_output(name=name, region=region, opts=opts)

    def config(result: eks.GetClusterResult) -> eks.outputs.GetClusterKubernetesNetworkConfigResult | None:
        return result.kubernetes_network_configs[0] if result.kubernetes_network_configs else None

    configs = found.apply(config)
    shape = _Eks(
        origin=f"eks:{name}" if isinstance(name, str) else "eks",
        arn=found.arn,
        endpoint=found.endpoint,
        ip_family=configs.apply(lambda c: c.ip_family if c else None),
        service_ipv4_cidr=configs.apply(lambda c: c.service_ipv4_cidr if c else None),
        service_ipv6_cidr=configs.apply(lambda c: c.service_ipv6_cidr if c else None),
        vpc_id=found.vpc_config.apply(lambda v: v.vpc_id if v else None),
    )
    return _network(shape, region, vpc_cni, opts)


def region_from_arn(arn: str) -> str:
    """The region of an ARN such as `arn:aws:eks:eu-west-1:123456789012:cluster/prod`."""
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn" or not parts[3]:
        raise ValueError(
            f"{arn!r} is not a regional ARN (expected e.g. arn:aws:eks:eu-west-1:123456789012:cluster/prod)"
        )
    return parts[3]


def _network(
    c: _Eks, region: pulumi.Input[str] | None, vpc_cni: bool, opts: pulumi.InvokeOutputOptions | None
) -> ClusterNetwork:
    """The one path both entry points take: raw values as Outputs, composed later by the settings."""
    with cloud_sdk(*_EXTRA):
        from pulumi_aws import ec2

    where = c.origin
    regions: pulumi.Output[str] = (
        pulumi.Output.from_input(region)
        if region is not None
        else c.arn.apply(lambda arn: region_from_arn(arn) if arn else required(None, f"{where}.arn"))
    )
    family = c.ip_family.apply(lambda f: (f or "ipv4").lower())

    def service(args: list[str | None]) -> list[str]:
        fam, v4, v6 = args
        if fam == "ipv6":
            return [required(v6, f"{where}.kubernetesNetworkConfig.serviceIpv6Cidr")]
        return [required(v4, f"{where}.kubernetesNetworkConfig.serviceIpv4Cidr")]

    vpc_id = c.vpc_id.apply(lambda v: required(v, f"{where}.vpcConfig.vpcId"))
    vpc = ec2.get_vpc_output(id=vpc_id, region=regions, opts=opts).apply(_vpc_cidrs)
    return ClusterNetwork(
        service_cidrs=pulumi.Output.all(family, c.service_ipv4_cidr, c.service_ipv6_cidr).apply(service),
        pod_cidrs=vpc if vpc_cni else None,
        node_cidrs=vpc,
        api_server_hosts=c.endpoint.apply(lambda e: [required(e, f"{where}.endpoint")]),
        cloud_entries=regions.apply(lambda r: [s.value for s in cloud_metadata_sources("aws", r)]),
        ip_family=family,
        origin=where,
    )


def _vpc_cidrs(vpc: ec2.GetVpcResult) -> list[str]:
    """Every CIDR block associated with the VPC (the primary one included), then its IPv6 blocks."""
    v4 = [vpc.cidr_block]
    v4 += [a.cidr_block for a in vpc.cidr_block_associations or () if a.state in (None, "", "associated")]
    v6 = [a.ipv6_cidr_block for a in vpc.ipv6_cidr_block_associations or ()]
    return list(dict.fromkeys(cidr for cidr in (*v4, *v6) if cidr))
