"""The cluster's network: the CIDR, IP, host and port types and their validators, `ClusterSettings`, and the
network facts that arrive at run time (`NetworkValues`), checked by `check_network`."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field
from pydantic.alias_generators import to_camel

from ..noproxy import NoProxyError, parse_entry
from .base import _Model
from .errors import SettingsError
from .names import _DNS_NAME, DnsLabel


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not a CIDR (expected e.g. 10.0.0.0/16 or fd00:10::/56)") from None
    return str(network)


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (expected e.g. 10.96.0.1 or fd00:10:96::1)") from None


def _dns_name(value: str) -> str:
    name = value.lower().rstrip(".")
    if not _DNS_NAME.match(name):
        raise ValueError(
            f"{value!r} is not a DNS name (expected lower-case labels of a-z, 0-9 and '-', e.g. cluster.local)"
        )
    return name


def _region(value: str) -> str:
    if not re.match(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$", value):
        raise ValueError(f"{value!r} is not a cloud region (expected e.g. eu-west-1)")
    return value


def _api_host(value: str) -> str:
    """An API server host: a DNS name or an IP; a URL is reduced to its host."""
    text = value.strip()
    if "://" in text:
        host = urlsplit(text).hostname
        if not host:
            raise ValueError(f"{value!r} is not a host name or URL with a host (expected e.g. api.example.com)")
        text = host
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return _dns_name(text)


def _no_proxy_entry(value: str) -> str:
    try:
        entry = parse_entry(value)
    except NoProxyError as exc:
        raise ValueError(str(exc)) from None
    if entry.network is not None and entry.network.prefixlen == 0:
        raise ValueError(
            f"{value!r} would send no address through the proxy (expected a host, suffix, IP or a narrower CIDR)"
        )
    if entry.value == "*":
        raise ValueError(
            f"{value!r} would disable the proxy for every host, and curl and Python honour '*' only as the whole "
            "value, so it cannot be combined with the cluster's entries (expected a host, suffix, IP or CIDR)"
        )
    return value.strip()


def _source_range(value: str) -> str:
    """A range allowed to use the proxy: anything wider than /8 would make tinyproxy (nearly) an open proxy."""
    network = ipaddress.ip_network(_cidr(value))
    if network.prefixlen < 8:
        raise ValueError(
            f"{value!r} is wider than /8: tinyproxy would serve (nearly) every address as an open proxy "
            "(expected the cluster's own pod or node ranges, e.g. 10.244.0.0/16)"
        )
    return str(network)


Cidr = Annotated[str, AfterValidator(_cidr)]
SourceRange = Annotated[str, AfterValidator(_source_range)]
IP = Annotated[str, AfterValidator(_ip)]
DnsName = Annotated[str, AfterValidator(_dns_name)]


ApiHost = Annotated[str, AfterValidator(_api_host)]
NoProxyEntry = Annotated[str, AfterValidator(_no_proxy_entry)]
Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
# tinyproxy runs as its own unprivileged UID with every capability dropped, on the node's network: it cannot bind below 1024.
ListenPort = Annotated[int, Field(strict=True, ge=1024, le=65535)]


IpFamily = Literal["ipv4", "ipv6", "dual"]
Cloud = Literal["none", "aws", "gcp", "azure"]


def _kubernetes_version(value: str) -> str:
    if not re.fullmatch(r"v?1\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?", value):
        raise ValueError(f"{value!r} is not a Kubernetes version (expected e.g. '1.35' or 'v1.36.3')")
    return value


DEFAULT_MAX_PODS_PER_NODE = 110  # the kubelet's default maxPods


class ClusterSettings(_Model):
    """The cluster's networks and endpoints, everything that must bypass the proxy."""

    name: DnsLabel | None = None
    dns_domain: DnsName = "cluster.local"
    pod_cidrs: list[SourceRange] = Field(default_factory=list)
    service_cidrs: list[Cidr] = Field(default_factory=list)
    node_cidrs: list[SourceRange] = Field(
        default_factory=list,
        description="The node pools' subnets. In NO_PROXY and in tinyproxy's Allow: every host in them, not only the "
        "cluster's nodes, may use the proxy and its upstream credentials, so give the subnets, not a whole private "
        "range (`check` warns, node-range-wide).",
    )
    api_server_hosts: list[ApiHost] = Field(default_factory=list)
    api_server_ips: list[IP] = Field(default_factory=list)
    ip_family: IpFamily | None = Field(default=None, description="Inferred from the pod and service CIDRs when unset.")
    cloud: Cloud = "none"
    region: Annotated[str, AfterValidator(_region)] | None = Field(
        default=None, description="AWS region, for the .compute.internal suffix."
    )
    max_pods_per_node: int = Field(
        default=DEFAULT_MAX_PODS_PER_NODE,
        ge=1,
        le=10000,
        description="The most pods a node runs (the kubelet's maxPods: 110 by default, an EKS node's by its instance "
        "type, GKE's and AKS's by the pool's setting): deployment.maxClients makes room for all of them at their "
        "share.",
    )
    kubernetes_version: Annotated[str, AfterValidator(_kubernetes_version)] | None = Field(
        default=None,
        description="The cluster's Kubernetes version, e.g. '1.35': picks the MutatingAdmissionPolicy API "
        "(v1beta1 on 1.34 and 1.35, v1 from 1.36, the default).",
    )

    @property
    def kubernetes_minor(self) -> int | None:
        """The minor version of `kubernetes_version` (35 for '1.35' or 'v1.35.2'), None when unset."""
        return None if self.kubernetes_version is None else int(self.kubernetes_version.lstrip("v").split(".")[1])

    @property
    def effective_ip_family(self) -> IpFamily:
        if self.ip_family is not None:
            return self.ip_family
        return infer_ip_family([*self.service_cidrs, *self.pod_cidrs], self.node_cidrs)


def infer_ip_family(cluster_ranges: Sequence[str], node_ranges: Sequence[str] = ()) -> IpFamily:
    """The family of the service and pod ranges; of the node ranges when those are unknown; ipv4 when nothing is."""
    for ranges in (cluster_ranges, node_ranges):
        versions = {ipaddress.ip_network(c, strict=False).version for c in ranges}
        if versions:
            return {frozenset({4}): "ipv4", frozenset({6}): "ipv6"}.get(frozenset(versions), "dual")  # type: ignore[return-value]
    return "ipv4"


NETWORK_FIELDS = ("service_cidrs", "pod_cidrs", "node_cidrs", "api_server_hosts", "api_server_ips", "cloud_entries")


@dataclass(frozen=True)
class NetworkValues:
    """Network facts that arrive at run time (resolved Outputs of a cluster resource), with their origin.

    `origin` names where they came from (e.g. `eks:prod`); `origins` overrides it
    per field, so that explicitly overridden parts say so in provenance.
    `cloud_entries` are the cloud's metadata endpoints and internal DNS suffixes.
    """

    origin: str = "network"
    pod_cidrs: Sequence[str] = ()
    service_cidrs: Sequence[str] = ()
    node_cidrs: Sequence[str] = ()
    api_server_hosts: Sequence[str] = ()
    api_server_ips: Sequence[str] = ()
    cloud_entries: Sequence[str] = ()
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin_of(self, name: str) -> str:
        return f"{self.origins.get(name, self.origin)}.{to_camel(name)}"


def _ip_or_cidr(value: str) -> str:
    """An API server address as discovery gives it: one IP, or the range it lives in (a GKE master range)."""
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError(
            f"{value!r} is not an IP address or CIDR (expected e.g. 10.96.0.1 or 172.16.0.32/28)"
        ) from None


_NETWORK_CHECKS: dict[str, Callable[[str], str]] = {
    "pod_cidrs": _source_range,
    "service_cidrs": _cidr,
    "node_cidrs": _source_range,
    "api_server_hosts": _api_host,
    "api_server_ips": _ip_or_cidr,
}


def check_network(network: NetworkValues) -> None:
    """Check a run-time network's values as the settings check theirs: every bad one named by its origin and index.

    A value computed from another resource or from config arrives here, after the settings were checked; without
    this its first use would fail it with a NO_PROXY entry's error, or inside the engine with none of ours.
    """
    problems: list[str] = []
    for name, check in _NETWORK_CHECKS.items():
        for i, value in enumerate(getattr(network, name)):
            try:
                if not isinstance(value, str):
                    raise ValueError(f"{value!r} is a {type(value).__name__}, not a string")
                check(value)
            except ValueError as exc:
                problems.append(f"{network.origin_of(name)}[{i}]: {exc}")
    if problems:
        raise SettingsError(problems)


def _network_ranges(network: NetworkValues | None, names: Sequence[str], check: Callable[[str], str]) -> list[str]:
    """The run-time network's ranges of these fields, each checked; an error names its origin and index."""
    if network is None:
        return []
    ranges: list[str] = []
    for name in names:
        for i, value in enumerate(getattr(network, name)):
            try:
                ranges.append(check(value))
            except ValueError as exc:
                raise SettingsError([f"{network.origin_of(name)}[{i}]: {exc}"]) from None
    return ranges


def _collapsed(ranges: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The ranges merged where they touch or nest, IPv4 first, each family in address order."""
    nets = [ipaddress.ip_network(r) for r in ranges]
    v4 = ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv6Network))
    return [*v4, *v6]
