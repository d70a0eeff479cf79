"""The settings' own checks across fields, registered in `model.CHECKS` in the order their problems are reported,
and the Service's trafficDistribution that one of them guards (`traffic_distribution`)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

from ..noproxy import parse_entry
from .deployment import DEFAULT_METRICS_PORT
from .injection import ADMISSION_BETA_MINOR, CLUSTER_TRUST_BUNDLE_MINOR
from .model import Settings, _check
from .names import RESERVED_NAMES
from .proxy import _inet_aton, redact_url
from .resources import (
    PROXY_MEMORY_PER_CONNECTION_KIB,
    default_proxy_memory_limit,
    loopback_reserve,
    proxy_memory_needed,
    quantity_bytes,
)


@_check("proxy.upstream.url")
def _upstream_scheme(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is not None and urlsplit(upstream.url).scheme != "http":
        yield (
            f"proxy.upstream.url: {redact_url(upstream.url)!r} must use http:// (tinyproxy reaches upstreams over plain HTTP)"
        )


@_check("proxy.upstream.url")
def _upstream_host(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is None:
        return
    hostname = urlsplit(upstream.url).hostname
    if hostname and ":" in hostname:
        yield (
            f"proxy.upstream.url: {redact_url(upstream.url)!r} has an IPv6 host, which tinyproxy 1.11's Upstream cannot "
            "parse (expected a host name or an IPv4 address)"
        )
    canonical = _inet_aton(hostname or "")
    if canonical is not None and canonical != hostname:
        yield (
            f"proxy.upstream.url: {redact_url(upstream.url)!r} spells the IPv4 address {canonical} in a form only the "
            f"C resolver reads, which the firewall's exemption for the upstream cannot match (expected {canonical})"
        )


@_check("proxy.upstream.no_upstream")
def _upstream_exceptions(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    for i, raw in enumerate(upstream.no_upstream if upstream else []):
        if parse_entry(raw).port is not None:
            yield (
                f"proxy.upstream.noUpstream[{i}]: {raw!r} has a port, but tinyproxy's Upstream none matches "
                "hosts only (expected the host, suffix, IP or CIDR alone)"
            )


@_check("proxy.upstream.url", "proxy.upstream.username", "proxy.upstream.password")
def _upstream_credentials(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is None:
        return
    parts = urlsplit(upstream.url)
    if parts.username is not None and upstream.username is not None:
        yield "proxy.upstream: give the credentials either in url or in username/password, not both"
    user = upstream.username if upstream.username is not None else unquote(parts.username or "")
    password = upstream.password.get_secret_value() if upstream.password else unquote(parts.password or "")
    if upstream.password is not None and upstream.username is None:
        yield "proxy.upstream.password: a password needs proxy.upstream.username"
    if re.search(r'[:@"\s]', user):
        where = "proxy.upstream.username:" if upstream.username is not None else "proxy.upstream.url: its user name"
        yield (
            f"{where} holds ':', '@', '\"' or a space, which tinyproxy's Upstream cannot carry (value hidden: it may "
            "hold the password)"
        )
    if re.search(r'[@"\s]', password):
        yield "proxy.upstream.password: holds '@', '\"' or a space, which tinyproxy's Upstream cannot carry (value hidden)"


@_check("cluster.ip_family", "cluster.pod_cidrs", "cluster.service_cidrs")
def _ip_family(settings: Settings) -> Iterator[str]:
    cluster = settings.cluster
    if cluster.ip_family is None:
        return
    versions = {ipaddress.ip_network(c).version for c in (*cluster.pod_cidrs, *cluster.service_cidrs)}
    wanted = {"ipv4": {4}, "ipv6": {6}, "dual": {4, 6}}[cluster.ip_family]
    extra = versions - wanted
    if extra:
        yield (
            f"cluster.ipFamily: {cluster.ip_family!r} contradicts the IPv{extra.pop()} pod/service CIDRs "
            "(expected ipv4, ipv6 or dual to match cluster.podCidrs and cluster.serviceCidrs)"
        )


@_check(
    "deployment.max_clients",
    "deployment.firewall.max_connections_per_client",
    "cluster.max_pods_per_node",
    "cluster.ip_family",
    "cluster.pod_cidrs",
    "cluster.service_cidrs",
    "cluster.node_cidrs",
)
def _client_pool(settings: Settings) -> Iterator[str]:
    d, cluster = settings.deployment, settings.cluster
    share = d.firewall.max_connections_per_client
    if not share:
        return
    pods = cluster.max_pods_per_node * settings.client_families * share
    room = d.max_clients - loopback_reserve(d.max_clients)
    if room < pods:
        families = " x 2 address families (dual-stack)" if settings.client_families == 2 else ""
        least = settings.derived_max_clients
        yield (
            f"deployment.maxClients: {d.max_clients} leaves {room} connections to pods after the loopback reserve, but "
            f"cluster.maxPodsPerNode ({cluster.max_pods_per_node}) x deployment.firewall.maxConnectionsPerClient "
            f"({share}){families} is {pods}: the pods of one node could exhaust it (expected at least {least}, or 0 "
            "to derive it, or a lower share or maxPodsPerNode)"
        )


@_check("deployment.max_clients", "deployment.resources")
def _proxy_memory(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    memory = d.resources.limits.get("memory")
    if memory is None:
        return
    needed = proxy_memory_needed(d.max_clients)
    if quantity_bytes(memory) < needed:
        yield (
            f"deployment.resources.limits.memory: {memory!r} is below the {needed / 2**20:.0f} MiB that "
            f"deployment.maxClients ({d.max_clients}) connections need at their worst "
            f"({PROXY_MEMORY_PER_CONNECTION_KIB} KiB each, measured by bench/bench_proxy_memory.py): a mix of clients "
            f"within maxClients could get the proxy OOM-killed (expected at least "
            f"{default_proxy_memory_limit(d.max_clients)}, or no memory limit to derive it, or a lower maxClients)"
        )


@_check("deployment.firewall.enabled", "deployment.firewall.allow_cluster_destinations")
def _firewall(settings: Settings) -> Iterator[str]:
    firewall = settings.deployment.firewall
    if not firewall.enabled and not firewall.allow_cluster_destinations:
        yield (
            "deployment.firewall.allowClusterDestinations: false needs deployment.firewall.enabled: true, since only "
            "the kernel rules refuse the cluster's pod, service and node ranges (the Filter sees names, not where "
            "they lead) (expected enabled: true, or allowClusterDestinations: true to let tinyproxy reach them)"
        )


# What the URLs of node services (Settings.node_http_proxy, node_https_proxy) are made of.
_NODE_URLS = (
    "proxy.node_http_proxy",
    "proxy.node_https_proxy",
    "proxy.http_proxy",
    "proxy.upstream.url",
    "proxy.upstream.username",
    "proxy.upstream.password",
)


@_check("capi.enabled", "cluster.name")
def _capi_cluster_name(settings: Settings) -> Iterator[str]:
    if settings.capi.enabled and settings.cluster.name is None:
        yield "cluster.name: required when capi.enabled is true (expected the Cluster API cluster's name)"


@_check("capi.enabled", "cluster.dns_domain", *_NODE_URLS)
def _capi_node_urls(settings: Settings) -> Iterator[str]:
    if not settings.capi.enabled:
        return
    p = settings.proxy
    if settings.node_http_proxy is None:
        yield (
            "proxy.nodeHttpProxy: required when capi.enabled is true and neither proxy.httpProxy nor "
            "proxy.upstream.url is set: nodes cannot resolve the in-cluster Service name "
            "(expected a proxy URL that nodes reach, e.g. http://proxy.corp:3128)"
        )
    field = "proxy.nodeHttpProxy" if p.node_http_proxy else "proxy.httpProxy" if p.http_proxy else "proxy.upstream.url"
    urls = [(field, settings.node_http_proxy)]
    if p.node_https_proxy is not None:  # else it is the same URL
        urls.append(("proxy.nodeHttpsProxy", p.node_https_proxy))
    for name, url in urls:
        host = (urlsplit(url).hostname or "") if url else ""
        domain = settings.cluster.dns_domain
        if host.endswith((".svc", f".{domain}")) or ".svc." in host:
            yield (
                f"{name}: {redact_url(str(url))!r} is a cluster DNS name, which nodes (containerd, kubelet) cannot "
                "resolve (expected a proxy nodes reach directly: set proxy.nodeHttpProxy)"
            )


@_check("capi.enabled", "capi.export_to_kubeadm", *_NODE_URLS)
def _capi_kubeadm_credentials(settings: Settings) -> Iterator[str]:
    if settings.capi.enabled and settings.capi.export_to_kubeadm and settings.nodes_have_credentials:
        yield (
            "capi.exportToKubeadm: the node proxy URL carries credentials, which kubeadm would copy into the "
            "static pod manifests and which would stand in KubeadmControlPlane, not in a Secret "
            "(expected exportToKubeadm: false, or a node proxy without credentials)"
        )


@_check("runtimes.annotation", "injection.opt_out_annotation")
def _runtimes_annotation(settings: Settings) -> Iterator[str]:
    if settings.runtimes.annotation == settings.injection.opt_out_annotation:
        yield (
            f"runtimes.annotation: {settings.runtimes.annotation!r} is injection.optOutAnnotation too, whose 'false' "
            "is no list of runtimes (expected another key, e.g. proxy-component.io/runtimes)"
        )


@_check("proxy.upstream.url", "deployment.enabled", "deployment.firewall.enabled")
def _upstream_on_the_node(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is not None and settings.deployment.enabled and settings.deployment.firewall.enabled:
        host = upstream.endpoint[0].lower().rstrip(".")
        if host == "localhost" or host.endswith(".localhost"):
            yield (
                f"proxy.upstream.url: {redact_url(upstream.url)!r} names the node itself, which the firewall "
                "refuses to tinyproxy unless the upstream is given by its address (expected e.g. "
                f"http://127.0.0.1:{upstream.endpoint[1]}: the firewall then lets tinyproxy reach that address and "
                "port, and nothing else on the node)"
            )


@_check("injection.admission", "cluster.kubernetes_version")
def _admission_version(settings: Settings) -> Iterator[str]:
    minor = settings.cluster.kubernetes_minor
    if settings.injection.admission and minor is not None and minor < ADMISSION_BETA_MINOR:
        yield (
            f"injection.admission: cluster.kubernetesVersion {settings.cluster.kubernetes_version!r} has no "
            "MutatingAdmissionPolicy (expected Kubernetes 1.34 or later: v1beta1 on 1.34 and 1.35 with the "
            "MutatingAdmissionPolicy feature gate and runtime-config, v1 from 1.36; or injection.kyverno instead)"
        )


@_check("injection.cluster_trust_bundle", "cluster.kubernetes_version", "proxy.upstream.trusted_ca")
def _cluster_trust_bundle(settings: Settings) -> Iterator[str]:
    if not settings.injection.cluster_trust_bundle:
        return
    if settings.trusted_ca is None:
        yield (
            "injection.clusterTrustBundle: true needs proxy.upstream.trustedCa, the CA the ClusterTrustBundle would "
            "publish (set it, or set injection.clusterTrustBundle: false)"
        )
    minor = settings.cluster.kubernetes_minor
    if minor is not None and minor < CLUSTER_TRUST_BUNDLE_MINOR:
        yield (
            f"injection.clusterTrustBundle: cluster.kubernetesVersion {settings.cluster.kubernetes_version!r} has no "
            "ClusterTrustBundle projection on by default (expected Kubernetes 1.37 or later, where "
            "certificates.k8s.io/v1 ClusterTrustBundle is GA; on older clusters the proxy-trust ConfigMaps alone "
            "carry the CA: set injection.clusterTrustBundle: false)"
        )


TRAFFIC_DISTRIBUTION_MINOR = {"PreferClose": 31, "PreferSameNode": 34}
"""The first minor version whose API server takes each trafficDistribution by default (PreferSameNode: beta, on by
default, in 1.34 and GA in 1.35; PreferClose: beta in 1.31)."""
PREFER_SAME_NODE_GA_MINOR = 35


def traffic_distribution(settings: Settings) -> str | None:
    """The Service's trafficDistribution, or None to leave it unset (`deployment.trafficDistribution`)."""
    chosen = settings.deployment.traffic_distribution
    if chosen == "none":
        return None
    if chosen == "auto":
        minor = settings.cluster.kubernetes_minor
        return "PreferSameNode" if minor is not None and minor >= PREFER_SAME_NODE_GA_MINOR else None
    return chosen


@_check("deployment.traffic_distribution", "cluster.kubernetes_version")
def _traffic_distribution_version(settings: Settings) -> Iterator[str]:
    chosen = settings.deployment.traffic_distribution
    minor = settings.cluster.kubernetes_minor
    first = TRAFFIC_DISTRIBUTION_MINOR.get(chosen)
    if first is not None and minor is not None and minor < first:
        yield (
            f"deployment.trafficDistribution: {chosen!r} is refused by the API server of cluster.kubernetesVersion "
            f"{settings.cluster.kubernetes_version!r} (expected Kubernetes 1.{first} or later for {chosen}; auto or "
            "none leave it unset on older clusters)"
        )


@_check("deployment.service_name", "deployment.namespace")
def _reserved_name(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    whose = RESERVED_NAMES.get((d.namespace, d.service_name))
    if d.enabled and whose is not None:
        yield (
            f"deployment.serviceName: {d.service_name!r} in namespace {d.namespace!r} is {whose} name: the proxy's "
            "DaemonSet, Service and ConfigMap would take that object over, and `destroy` would delete it (expected "
            "another name, e.g. http-proxy)"
        )


@_check("deployment.metrics", "deployment.firewall")
def _firewall_counters(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    if d.metrics.enabled and d.metrics.firewall_counters and not d.firewall.enabled:
        yield (
            "deployment.metrics.firewallCounters: true reads the counters of the kernel rules that "
            "deployment.firewall.enabled: false leaves out (expected firewallCounters: false, or the firewall on)"
        )


@_check("deployment.metrics", "deployment.port")
def _metrics_port(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    if d.metrics.enabled and d.metrics.port == d.port:
        other = DEFAULT_METRICS_PORT if d.port != DEFAULT_METRICS_PORT else DEFAULT_METRICS_PORT + 1
        yield (
            f"deployment.metrics.port: {d.metrics.port} is the proxy's own port (deployment.port); the exporter needs "
            f"a port of its own (expected another, e.g. {other})"
        )


@_check("deployment.metrics", "deployment.run_as_user")
def _metrics_user(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    if d.metrics.enabled and d.metrics.run_as_user == d.run_as_user:
        yield (
            f"deployment.metrics.runAsUser: {d.metrics.run_as_user} is tinyproxy's own UID (deployment.runAsUser), "
            "whose connections to the node's addresses the firewall refuses, the stats page's on loopback among them "
            f"(expected another UID, e.g. {d.run_as_user + 1})"
        )


@_check("injection.trust_manager", "proxy.upstream.trusted_ca")
def _trust_manager_ca(settings: Settings) -> Iterator[str]:
    if settings.injection.trust_manager and settings.trusted_ca is None:
        yield (
            "injection.trustManager: true needs proxy.upstream.trustedCa, the CA the Bundle would distribute "
            "(expected trustManager: false, or the PEM CA of a TLS-inspecting upstream)"
        )


@_check("deployment.enabled", "proxy.http_proxy")
def _proxy_without_deployment(settings: Settings) -> Iterator[str]:
    if not settings.deployment.enabled and settings.proxy.http_proxy is None:
        yield (
            "proxy.httpProxy: required when deployment.enabled is false (expected the URL of the proxy pods should use)"
        )
