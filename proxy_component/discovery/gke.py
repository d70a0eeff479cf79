"""GKE discovery: a `gcp.container.Cluster` of this program, or an existing cluster by name, as a ClusterNetwork.

Pods: `cluster_ipv4_cidr` (or the `ip_allocation_policy` block). Services:
`services_ipv4_cidr`. Nodes: the node subnetwork's primary, secondary (but the
cluster's Service range) and IPv6 ranges (`gcp.compute.get_subnetwork_output`);
on a dual-stack cluster (`stack_type: IPV4_IPV6`) the IPv6 range is the pods'
too. The API server endpoint and, for private clusters, the private endpoint
and the control-plane range. The metadata server. `pulumi_gcp` is imported
only when called.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pulumi

from ..noproxy import cloud_metadata_sources
from . import cloud_sdk, required
from .network import ClusterNetwork

if TYPE_CHECKING:
    from pulumi_gcp import compute, container

__all__ = ["from_cluster", "from_existing", "region_of"]

T = TypeVar("T")

_EXTRA = ("gcp", "pulumi_gcp")
_SUBNETWORK_PATH = re.compile(
    r"(?:^|/)projects/(?P<project>[^/]+)/regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)$"
)
_ZONE = re.compile(r"^(?P<region>[a-z]+(?:-[a-z]+)*\d+)-[a-z]$")


class _IpAllocationPolicy(Protocol):
    """The `ip_allocation_policy` block, as both the resource and `get_cluster` give it."""

    @property
    def cluster_ipv4_cidr_block(self) -> str | None: ...
    @property
    def services_ipv4_cidr_block(self) -> str | None: ...
    @property
    def services_secondary_range_name(self) -> str | None: ...
    @property
    def stack_type(self) -> str | None: ...


class _PrivateClusterConfig(Protocol):
    """The `private_cluster_config` block, as both the resource and `get_cluster` give it."""

    @property
    def master_ipv4_cidr_block(self) -> str | None: ...
    @property
    def private_endpoint(self) -> str | None: ...


@dataclass(frozen=True)
class _Gke:
    """What both entry points read from a cluster, as Outputs of the same shape."""

    origin: str
    cluster_ipv4_cidr: pulumi.Output[str | None]
    services_ipv4_cidr: pulumi.Output[str | None]
    policy: pulumi.Output[_IpAllocationPolicy | None]
    private: pulumi.Output[_PrivateClusterConfig | None]
    endpoint: pulumi.Output[str | None]
    subnetwork: pulumi.Output[str | None]
    location: pulumi.Output[str | None]
    project: pulumi.Output[str | None]


def from_cluster(cluster: container.Cluster, *, opts: pulumi.InvokeOutputOptions | None = None) -> ClusterNetwork:
    """The network of a GKE cluster created in this program; its origin is `gke:<resource name>`.

    The subnetwork is read through the cluster's own provider unless `opts` says otherwise.
    """
    shape = _Gke(
        origin=f"gke:{cluster.pulumi_resource_name}",
        cluster_ipv4_cidr=cluster.cluster_ipv4_cidr,
        services_ipv4_cidr=cluster.services_ipv4_cidr,
        policy=cluster.ip_allocation_policy,
        private=cluster.private_cluster_config,
        endpoint=cluster.endpoint,
        subnetwork=cluster.subnetwork,
        location=cluster.location,
        project=cluster.project,
    )
    return _network(shape, opts or pulumi.InvokeOutputOptions(parent=cluster))


def from_existing(
    name: pulumi.Input[str],
    location: pulumi.Input[str],
    project: pulumi.Input[str] | None = None,
    *,
    opts: pulumi.InvokeOutputOptions | None = None,
) -> ClusterNetwork:
    """The network of an existing GKE cluster (`gcp.container.get_cluster_output`); origin `gke:<name>`.

    `location` is the cluster's region or zone; `project` defaults to the provider's.
    """
    with cloud_sdk(*_EXTRA):
        from pulumi_gcp import container

    found = container.get_cluster_output(name=name, location=location, project=project, opts=opts)
    shape = _Gke(
        origin=f"gke:{name}" if isinstance(name, str) else "gke",
        cluster_ipv4_cidr=found.cluster_ipv4_cidr,
        services_ipv4_cidr=found.services_ipv4_cidr,
        policy=found.ip_allocation_policies.apply(_first),
        private=found.private_cluster_configs.apply(_first),
        endpoint=found.endpoint,
        subnetwork=found.subnetwork,
        location=pulumi.Output.all(found.location, location).apply(lambda a: a[0] or a[1]),
        project=pulumi.Output.all(found.project, project).apply(lambda a: a[0] or a[1]),
    )
    return _network(shape, opts)


def region_of(location: str) -> str:
    """The region of a GKE location: `europe-west1-b` is in `europe-west1`, a region is its own."""
    zone = _ZONE.match(location)
    return zone.group("region") if zone else location


def _first(blocks: Sequence[T] | None) -> T | None:
    return blocks[0] if blocks else None


@dataclass(frozen=True)
class _Policy:
    """The parts of `ip_allocation_policy` discovery uses, as plain values (safe to pass through `Output.all`)."""

    pods: str | None = None
    services: str | None = None
    services_range: str | None = None
    dual_stack: bool = False

    @classmethod
    def of(cls, block: _IpAllocationPolicy | None) -> _Policy:
        if block is None:
            return cls()
        return cls(
            pods=block.cluster_ipv4_cidr_block,
            services=block.services_ipv4_cidr_block,
            services_range=block.services_secondary_range_name,
            dual_stack=(block.stack_type or "").upper() == "IPV4_IPV6",
        )


@dataclass(frozen=True)
class _Subnet:
    """A subnetwork's ranges as plain values: primary, secondary by name, IPv6."""

    primary: str
    secondary: tuple[tuple[str, str], ...]
    ipv6: tuple[str, ...]

    @classmethod
    def of(cls, subnet: compute.GetSubnetworkResult) -> _Subnet:
        secondary = tuple((r.range_name, r.ip_cidr_range) for r in subnet.secondary_ip_ranges or ())
        ipv6 = tuple(p for p in (subnet.internal_ipv6_prefix, subnet.external_ipv6_prefix) if p)
        return cls(subnet.ip_cidr_range, secondary, ipv6)

    def node_ranges(self, service_cidr: str, policy: _Policy) -> list[str]:
        """Primary, secondary but the cluster's Service range (not a source of traffic), then IPv6."""
        secondary = [c for name, c in self.secondary if name != policy.services_range and c != service_cidr]
        return [c for c in (self.primary, *secondary, *self.ipv6) if c]


def _network(c: _Gke, opts: pulumi.InvokeOutputOptions | None) -> ClusterNetwork:
    """The one path both entry points take: raw values as Outputs, composed later by the settings."""
    with cloud_sdk(*_EXTRA):
        from pulumi_gcp import compute

    where = c.origin
    policy = c.policy.apply(_Policy.of)
    family = policy.apply(lambda p: "dual" if p.dual_stack else "ipv4")
    private = c.private.apply(
        lambda p: [ip for ip in (p.private_endpoint, p.master_ipv4_cidr_block) if ip] if p is not None else []
    )

    def pods(args: list[Any]) -> str:
        top: str | None = args[0]
        block: _Policy = args[1]
        return required(top or block.pods, f"{where}.clusterIpv4Cidr")

    def services(args: list[Any]) -> str:
        top: str | None = args[0]
        block: _Policy = args[1]
        return required(top or block.services, f"{where}.servicesIpv4Cidr")

    pod_v4 = pulumi.Output.all(c.cluster_ipv4_cidr, policy).apply(pods)
    service_v4 = pulumi.Output.all(c.services_ipv4_cidr, policy).apply(services)

    def reference(args: list[str | None]) -> dict[str, str]:
        subnetwork, location, project = args
        if not subnetwork:
            return required(None, f"{where}.subnetwork")
        path = _SUBNETWORK_PATH.search(subnetwork)
        if path is not None:
            return path.groupdict()
        if not location or not project:
            return required(None, f"{where}.{'project' if location else 'location'}")
        return {"name": subnetwork, "region": region_of(location), "project": project}

    ref = pulumi.Output.all(c.subnetwork, c.location, c.project).apply(reference)
    subnet = compute.get_subnetwork_output(
        name=ref["name"], region=ref["region"], project=ref["project"], opts=opts
    ).apply(_Subnet.of)

    def pod_cidrs(args: list[Any]) -> list[str]:
        v4, sub, p = args
        return [v4, *(sub.ipv6 if p.dual_stack else ())]

    return ClusterNetwork(
        pod_cidrs=pulumi.Output.all(pod_v4, subnet, policy).apply(pod_cidrs),
        service_cidrs=service_v4.apply(lambda s: [s]),
        node_cidrs=pulumi.Output.all(subnet, service_v4, policy).apply(lambda a: a[0].node_ranges(a[1], a[2])),
        api_server_ips=pulumi.Output.all(c.endpoint, private).apply(
            lambda a: [required(a[0], f"{where}.endpoint"), *a[1]]
        ),
        cloud_entries=[s.value for s in cloud_metadata_sources("gcp")],
        ip_family=family,
        origin=where,
    )
