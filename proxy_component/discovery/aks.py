"""AKS discovery: an `azure_native.containerservice.ManagedCluster` of this program, or an existing one, as a ClusterNetwork.

From `network_profile`: the pod and Service CIDRs (`pod_cidrs`/`pod_cidr`,
`service_cidrs`/`service_cidr`), `dns_service_ip`, `ip_families`. The agent
pools' subnets (`azure_native.network.get_subnet_output`, parsed from
`vnet_subnet_id`) are the node ranges, and with Azure CNI without overlay the
pod ranges too (a pool's `pod_subnet_id` when it has one). The API server's
`fqdn` and `private_fqdn`; the instance metadata and wire server addresses.
`http_proxy_config` fills AKS's own proxy settings from the same settings.
`pulumi_azure_native` is imported only when called.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pulumi

from ..noproxy import cloud_metadata_sources
from ..settings import Settings, SettingsError, parse_settings
from . import cloud_sdk, required
from .network import ClusterNetwork

if TYPE_CHECKING:
    from pulumi_azure_native import containerservice
    from pulumi_azure_native.containerservice.outputs import (
        ContainerServiceNetworkProfileResponse,
        ManagedClusterAgentPoolProfileResponse,
    )

__all__ = ["from_cluster", "from_existing", "http_proxy_config", "parse_subnet_id"]

_EXTRA = ("azure", "pulumi_azure_native")
_SUBNET_ID = re.compile(
    r"^/subscriptions/(?P<subscription>[^/]+)/resourceGroups/(?P<resource_group>[^/]+)"
    r"/providers/Microsoft\.Network/virtualNetworks/(?P<vnet>[^/]+)/subnets/(?P<subnet>[^/]+)/?$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Aks:
    """What both entry points read from a cluster, as Outputs of the same shape."""

    origin: str
    profile: pulumi.Output[ContainerServiceNetworkProfileResponse | None]
    pools: pulumi.Output[Sequence[ManagedClusterAgentPoolProfileResponse] | None]
    fqdn: pulumi.Output[str | None]
    private_fqdn: pulumi.Output[str | None]


@dataclass(frozen=True)
class SubnetRef:
    """The parts of an Azure subnet resource id that `get_subnet_output` takes."""

    subscription: str
    resource_group: str
    vnet: str
    subnet: str


def from_cluster(
    cluster: containerservice.ManagedCluster, *, opts: pulumi.InvokeOutputOptions | None = None
) -> ClusterNetwork:
    """The network of an AKS cluster created in this program; its origin is `aks:<resource name>`.

    Subnets are read through the cluster's own provider unless `opts` says otherwise.
    """
    shape = _Aks(
        origin=f"aks:{cluster.pulumi_resource_name}",
        profile=cluster.network_profile,
        pools=cluster.agent_pool_profiles,
        fqdn=cluster.fqdn,
        private_fqdn=cluster.private_fqdn,
    )
    return _network(shape, opts or pulumi.InvokeOutputOptions(parent=cluster))


def from_existing(
    resource_name: pulumi.Input[str],
    resource_group_name: pulumi.Input[str],
    *,
    opts: pulumi.InvokeOutputOptions | None = None,
) -> ClusterNetwork:
    """The network of an existing AKS cluster (`get_managed_cluster_output`); origin `aks:<resource name>`."""
    with cloud_sdk(*_EXTRA):
        from pulumi_azure_native import containerservice

    found = containerservice.get_managed_cluster_output(
        resource_name=resource_name, resource_group_name=resource_group_name, opts=opts
    )
    shape = _Aks(
        origin=f"aks:{resource_name}" if isinstance(resource_name, str) else "aks",
        profile=found.network_profile,
        pools=found.agent_pool_profiles,
        fqdn=found.fqdn,
        private_fqdn=found.private_fqdn,
    )
    return _network(shape, opts)


def parse_subnet_id(subnet_id: str) -> SubnetRef:
    """Split `/subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<name>`."""
    match = _SUBNET_ID.match(subnet_id)
    if match is None:
        raise ValueError(
            f"{subnet_id!r} is not a subnet resource id (expected /subscriptions/<id>/resourceGroups/<group>"
            "/providers/Microsoft.Network/virtualNetworks/<vnet>/subnets/<subnet>)"
        )
    return SubnetRef(**match.groupdict())


@dataclass(frozen=True)
class _Profile:
    """The parts of `network_profile` discovery uses, as plain values (safe to pass through `Output.all`)."""

    plugin: str  # "azure-cni" (pods take subnet addresses), else e.g. "kubenet", "azure/overlay", "none"
    pods: tuple[str, ...]
    services: tuple[str, ...]
    dns_service_ip: str | None
    ip_family: str


def _profile(where: str, profile: ContainerServiceNetworkProfileResponse | None) -> _Profile:
    if profile is None:
        return required(None, f"{where}.networkProfile")
    if not profile.network_plugin:
        return required(None, f"{where}.networkProfile.networkPlugin")
    name = profile.network_plugin.lower()
    mode = (profile.network_plugin_mode or "").lower()
    plugin = "azure-cni" if name == "azure" and not mode else f"{name}/{mode}" if mode else name
    pods: tuple[str, ...] = ()
    if plugin != "azure-cni":  # Azure CNI pods take subnet addresses; the SDK fills in podCidr 10.244.0.0/16 anyway
        pods = tuple(profile.pod_cidrs or ()) or ((profile.pod_cidr,) if profile.pod_cidr else ())
        if not pods:
            return required(None, f"{where}.networkProfile.podCidr")
    services = tuple(profile.service_cidrs or ()) or ((profile.service_cidr,) if profile.service_cidr else ())
    if not services:
        return required(None, f"{where}.networkProfile.serviceCidr")
    families = {f.lower() for f in profile.ip_families or ()}
    family = "dual" if families == {"ipv4", "ipv6"} else "ipv6" if families == {"ipv6"} else "ipv4"
    return _Profile(plugin, pods, services, profile.dns_service_ip, family)


def _subnet_ids(pools: Sequence[ManagedClusterAgentPoolProfileResponse] | None) -> list[tuple[str, str]]:
    """Each pool's (node subnet, pod subnet) ids; the pod subnet is the node subnet unless the pool has its own."""
    return [(p.vnet_subnet_id, p.pod_subnet_id or p.vnet_subnet_id) for p in pools or () if p.vnet_subnet_id]


def _network(c: _Aks, opts: pulumi.InvokeOutputOptions | None) -> ClusterNetwork:
    """The one path both entry points take: raw values as Outputs, composed later by the settings."""
    with cloud_sdk(*_EXTRA):
        from pulumi_azure_native import network

    where = c.origin
    profile = c.profile.apply(lambda p: _profile(where, p))
    subnets = c.pools.apply(_subnet_ids)

    read: dict[str, pulumi.Output[list[str]]] = {}

    def subnet_prefixes(subnet_id: str) -> pulumi.Output[list[str]]:
        """A subnet's address prefixes, read once however many pools (for nodes or pods) use it."""
        if subnet_id not in read:
            ref = parse_subnet_id(subnet_id)
            subnet = network.get_subnet_output(
                resource_group_name=ref.resource_group, virtual_network_name=ref.vnet, subnet_name=ref.subnet, opts=opts
            )
            read[subnet_id] = subnet.apply(lambda s: [p for p in (*(s.address_prefixes or ()), s.address_prefix) if p])
        return read[subnet_id]

    def prefixes(ids: Sequence[str]) -> pulumi.Output[list[str]] | list[str]:
        found = [subnet_prefixes(subnet_id) for subnet_id in sorted(set(ids))]
        if not found:
            return []
        return pulumi.Output.all(*found).apply(lambda lists: list(dict.fromkeys(p for ps in lists for p in ps)))

    def pod_subnets(args: list[Any]) -> pulumi.Output[list[str]] | list[str]:
        p, ids = args
        return prefixes([pod for _, pod in ids]) if p.plugin == "azure-cni" else []

    pod_prefixes = pulumi.Output.all(profile, subnets).apply(pod_subnets)

    def api_server(args: list[str | None]) -> list[str]:
        hosts = [h for h in args if h]
        return hosts or [required(None, f"{where}.fqdn")]

    return ClusterNetwork(
        pod_cidrs=pulumi.Output.all(profile, pod_prefixes).apply(lambda a: [*a[0].pods, *a[1]]),
        service_cidrs=profile.apply(lambda p: [*p.services, *([p.dns_service_ip] if p.dns_service_ip else [])]),
        node_cidrs=subnets.apply(lambda ids: prefixes([node for node, _ in ids])),
        api_server_hosts=pulumi.Output.all(c.fqdn, c.private_fqdn).apply(api_server),
        cloud_entries=[s.value for s in cloud_metadata_sources("azure")],
        ip_family=profile.apply(lambda p: p.ip_family),
        origin=where,
    )


# --- AKS's own HTTP proxy configuration --------------------------------------------------------


def http_proxy_config(
    settings: Settings | Mapping[str, Any],
    network: ClusterNetwork | None = None,
    *,
    http_proxy: str | None = None,
    https_proxy: str | None = None,
    trusted_ca: pulumi.Input[str] | None = None,
) -> containerservice.ManagedClusterHTTPProxyConfigArgs:
    """AKS's `http_proxy_config` (node and pod injection) from the same settings, so both agree on NO_PROXY.

    Nodes cannot resolve the cluster's DNS, so the URL must be one a node
    reaches: `http_proxy` if given, else `proxy.httpProxy` if set (and not a
    cluster-DNS name), else `proxy.upstream.url` (the corporate proxy). AKS
    takes neither credentials nor an https:// httpProxy. `no_proxy` is the
    composed list (settings plus `network`). `network` must not come from the
    same cluster's outputs (a cycle): build it from the values the cluster is
    created with, or the subnet and VNet resources it uses. `trusted_ca`
    (AKS wants the PEM base64-encoded) defaults to `proxy.upstream.trustedCa`,
    encoded: AKS installs it on the nodes.
    """
    with cloud_sdk(*_EXTRA):
        from pulumi_azure_native import containerservice

    parsed = parse_settings(settings)
    # AKS nodes are Azure VMs: their metadata and wire server addresses belong in the list whatever cluster.cloud says.
    parsed = parsed.model_copy(update={"cluster": parsed.cluster.model_copy(update={"cloud": "azure"})})
    upstream = parsed.proxy.upstream
    if http_proxy is not None:
        url, field = http_proxy, "http_proxy"
    elif parsed.proxy.http_proxy is not None:
        url, field = parsed.proxy.http_proxy, "proxy.httpProxy"
    elif upstream is not None:
        if upstream.credentials is not None:
            raise SettingsError([_credentials_refused("proxy.upstream", "the upstream proxy's URL without them")])
        url, field = upstream.url, "proxy.upstream.url"
    else:
        raise SettingsError(
            [
                "aks.http_proxy_config: no URL a node can reach (nodes cannot resolve the in-cluster proxy's name; "
                "expected http_proxy=..., proxy.httpProxy or proxy.upstream.url)"
            ]
        )
    http = _node_url(url, field, parsed, http_only=True)
    if https_proxy is not None:
        https = _node_url(https_proxy, "https_proxy", parsed, http_only=False)
    elif http_proxy is None and parsed.proxy.https_proxy is not None:
        https = _node_url(parsed.proxy.https_proxy, "proxy.httpsProxy", parsed, http_only=False)
    else:
        https = http
    no_proxy: pulumi.Input[Sequence[pulumi.Input[str]]]
    if network is None:
        no_proxy = list(parsed.no_proxy().tokens())
    else:
        no_proxy = network.values().apply(lambda values: list(parsed.no_proxy(values).tokens()))
    if trusted_ca is None and parsed.trusted_ca is not None:
        trusted_ca = base64.b64encode(parsed.trusted_ca.encode("ascii")).decode("ascii")
    return containerservice.ManagedClusterHTTPProxyConfigArgs(
        http_proxy=http, https_proxy=https, no_proxy=no_proxy, trusted_ca=trusted_ca
    )


def _credentials_refused(field: str, accepted: str) -> str:
    return f"aks.http_proxy_config: {field} carries credentials, which AKS's httpProxyConfig does not support (expected {accepted})"


def _node_url(url: str, field: str, settings: Settings, *, http_only: bool) -> str:
    """A proxy URL for AKS nodes: http (or https for httpsProxy), no credentials, not a cluster-DNS name."""
    if "@" in url.partition("://")[2]:
        raise SettingsError([_credentials_refused(field, "a URL without user:password@")])
    parts = urlsplit(url)
    host = parts.hostname or ""
    schemes = ("http",) if http_only else ("http", "https")
    if parts.scheme not in schemes or not host:
        raise SettingsError(
            [
                f"aks.http_proxy_config: {field}: {url!r} is not a {' or '.join(schemes)}://host:port URL (AKS requires it)"
            ]
        )
    domain = settings.cluster.dns_domain
    if host == "svc" or host.endswith((".svc", f".svc.{domain}", f".{domain}")) or host == domain:
        raise SettingsError(
            [
                f"aks.http_proxy_config: {field}: {url!r} is a cluster-DNS name, which nodes cannot resolve "
                "(expected a URL a node reaches, e.g. the corporate proxy's)"
            ]
        )
    return url
