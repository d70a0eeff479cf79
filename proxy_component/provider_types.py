"""The settings as TypedDicts of `pulumi.Input`, for ClusterProxy in every Pulumi language.

Generated from the pydantic model in `settings.py` by `python -m proxy_component._codegen`; do not edit.
Each key is the YAML file's camelCase key in the schema (its snake_case name here).
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
from collections.abc import Mapping, Sequence
from typing import TypedDict

import pulumi
from typing_extensions import NotRequired

__all__ = [
    "AccessLogSettings",
    "Affinity",
    "CapiSettings",
    "ClusterSettings",
    "DeadlineSettings",
    "DeploymentSettings",
    "DrainSettings",
    "FirewallSettings",
    "HelmValuesSecret",
    "InjectionSettings",
    "MetricsSettings",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PreferredSchedulingTerm",
    "ProxySettings",
    "Resources",
    "RuntimeSettings",
    "Settings",
    "Toleration",
    "UpstreamSettings",
]


class NodeSelectorRequirement(TypedDict):
    """One condition on a node's labels, as in a pod's node affinity (core/v1 NodeSelectorRequirement)."""

    key: pulumi.Input[str]

    operator: pulumi.Input[str]
    """One of: In, NotIn, Exists, DoesNotExist, Gt, Lt."""

    values: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """In, NotIn: one or more label values; Exists, DoesNotExist: none; Gt, Lt: one integer."""


class NodeSelectorTerm(TypedDict):
    """Conditions a node must all meet (core/v1 NodeSelectorTerm, by labels: matchExpressions)."""

    match_expressions: pulumi.Input[Sequence[pulumi.Input[NodeSelectorRequirement]]]
    """All must hold."""


class PreferredSchedulingTerm(TypedDict):
    """A term the scheduler prefers a node to meet, with its weight (core/v1 PreferredSchedulingTerm)."""

    weight: pulumi.Input[int]

    preference: pulumi.Input[NodeSelectorTerm]


class NodeSelector(TypedDict):
    """Node selector terms, any of which a node must meet (core/v1 NodeSelector)."""

    node_selector_terms: pulumi.Input[Sequence[pulumi.Input[NodeSelectorTerm]]]
    """Any one must hold (each term's conditions all)."""


class NodeAffinity(TypedDict):
    """Which nodes the proxy's pods may run on, by node labels (core/v1 NodeAffinity)."""

    required_during_scheduling_ignored_during_execution: NotRequired[pulumi.Input[NodeSelector]]
    """Nodes must meet one of these terms, besides the proxy's own (no control-plane unless deployment.controlPlane, no virtual-kubelet or Fargate nodes)."""

    preferred_during_scheduling_ignored_during_execution: NotRequired[
        pulumi.Input[Sequence[pulumi.Input[PreferredSchedulingTerm]]]
    ]
    """Terms the scheduler prefers."""


class Affinity(TypedDict):
    """The proxy's node affinity (core/v1 Affinity, its nodeAffinity only)."""

    node_affinity: NotRequired[pulumi.Input[NodeAffinity]]


class Toleration(TypedDict):
    """A toleration, as in a pod spec (core/v1 Toleration): the taint it tolerates on a node."""

    key: NotRequired[pulumi.Input[str]]
    """The taint's key; none (with operator Exists): every taint."""

    operator: NotRequired[pulumi.Input[str]]
    """Equal: the taint's value is `value`. One of: Exists, Equal."""

    value: NotRequired[pulumi.Input[str]]
    """With operator Equal: the taint's value."""

    effect: NotRequired[pulumi.Input[str]]
    """The taint's effect; none: every effect. One of: NoSchedule, PreferNoSchedule, NoExecute."""

    toleration_seconds: NotRequired[pulumi.Input[int]]
    """With effect NoExecute: how long the pod stays once tainted."""


class Resources(TypedDict):
    """Container requests and limits, in Kubernetes quantity syntax (numbers are accepted, as `cpu: 1`)."""

    requests: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]

    limits: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]


class DrainSettings(TypedDict):
    """How a proxy pod leaves its node (a roll, `kubectl drain`, a node's shutdown) without dropping a request."""

    endpoint_seconds: NotRequired[pulumi.Input[int]]
    """Seconds tinyproxy keeps accepting after the pod is told to stop: longer than the cluster takes to take a terminating endpoint out of every node's kube-proxy rules (about a second on a quiet cluster)."""

    connection_seconds: NotRequired[pulumi.Input[int]]
    """Then, at most this many seconds for the connections still open to finish (a git clone, an image pull, a websocket through the proxy); those still open after it are cut."""


class AccessLogSettings(TypedDict):
    """The access log: one JSON line per connection through a node's proxy, as it ends, at most maxLinesPerSecond."""

    enabled: NotRequired[pulumi.Input[bool]]
    """Write an access line for every connection through the proxy (the container's log, or the exporter's when metrics are on); false: no AccessLog line is rendered (an image without patch 0025 reads that config), and the other log lines stay."""

    max_lines_per_second: NotRequired[pulumi.Input[int]]
    """The most access lines one node's proxy writes a second (tinyproxy's AccessLogRate); the connections over it get no line, and one access-dropped line a second counts them. At about 300 bytes a line, 100 a second is at most about 30 kB/s of log per node."""


class MetricsSettings(TypedDict):
    """Per-node proxy metrics: an exporter beside tinyproxy (same image, same UID, no capability) that serves"""

    enabled: NotRequired[pulumi.Input[bool]]
    """Run the exporter beside tinyproxy; tinyproxy then logs to a file the exporter reads, and `kubectl logs -c metrics` shows its log without the probes' lines."""

    port: NotRequired[pulumi.Input[int]]
    """The exporter's port on every node (hostNetwork): /metrics. Not the proxy's port."""

    run_as_user: NotRequired[pulumi.Input[int]]
    """The exporter's UID, not tinyproxy's (the firewall refuses that UID's connections to the node, the stats page's among them); its group is tinyproxy's, which lets it read the log."""

    scrape_annotations: NotRequired[pulumi.Input[bool]]
    """Annotate the proxy's pods with prometheus.io/scrape, port and path, for a Prometheus that discovers pods by those annotations."""

    pod_monitor: NotRequired[pulumi.Input[bool]]
    """Create a PodMonitor (prometheus-operator's CRD must exist in the cluster)."""

    prometheus_rule: NotRequired[pulumi.Input[bool]]
    """Create a PrometheusRule with the proxy's alerts (prometheus-operator's CRD must exist)."""

    grafana_dashboard: NotRequired[pulumi.Input[bool]]
    """Create a ConfigMap holding a Grafana dashboard, labelled grafana_dashboard: '1' for Grafana's dashboard sidecar."""

    labels: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]
    """Labels added to the PodMonitor and PrometheusRule, e.g. the `release` a Prometheus selects."""

    firewall_counters: NotRequired[pulumi.Input[bool]]
    """Also export the kernel rules' counters (tinyproxy_firewall_refusals_total by rule: the node, denied and cluster ranges, each per-client limit, the loopback reserve). Reading them needs CAP_NET_ADMIN in the node's network: a third container, root with NET_ADMIN alone (as the firewall init container), lists the table every 15 s into the log volume. NET_ADMIN there could also rewrite the node's firewall, which is why it is off by default. Needs deployment.firewall.enabled."""


class DeadlineSettings(TypedDict):
    """How long each phase of a connection through the proxy may take, in seconds: a connection past one is closed"""

    request_head_seconds: NotRequired[pulumi.Input[int]]
    """From accept, for the request line and headers (tinyproxy's RequestHeadTimeout); the Allow decision is made at accept, before anything is read."""

    dns_seconds: NotRequired[pulumi.Input[int]]
    """For a name's lookup, every nameserver of the node's resolv.conf included: the resolver's RES_OPTIONS get timeout:dnsSeconds/3 attempts:1, and glibc asks at most 3 nameservers in turn."""

    connect_seconds: NotRequired[pulumi.Input[int]]
    """For the TCP connects to the origin's (or the upstream's) addresses, together (ConnectTimeout)."""

    response_head_seconds: NotRequired[pulumi.Input[int]]
    """From the request's end, for the origin's (or the upstream's) status line and headers (ResponseHeadTimeout); raise it for long polls that answer later."""

    idle_seconds: NotRequired[pulumi.Input[int]]
    """Then, the longest a connection or a CONNECT tunnel may pass no byte either way (tinyproxy's Timeout); an idle tunnel keeps counting against its client's share."""


class FirewallSettings(TypedDict):
    """Kernel rules that stop tinyproxy from reaching the node itself, link-local and metadata addresses."""

    enabled: NotRequired[pulumi.Input[bool]]
    """Load the rules; without them only the name Filter stands between pods and the node."""

    image: NotRequired[pulumi.Input[str]]
    """An image with nft and a POSIX /bin/sh, run as root with NET_ADMIN only (the proxy's own has both)."""

    deny_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Destinations refused besides the node's own addresses."""

    allow_cluster_destinations: NotRequired[pulumi.Input[bool]]
    """Let tinyproxy reach the cluster's pod, service and node ranges; by default they are refused, since tinyproxy on the node's network would let a pod past its NetworkPolicy (those calls belong in NO_PROXY)."""

    max_connections_per_client: NotRequired[pulumi.Input[int]]
    """Open connections that one client may hold: a pod where the node reaches it by a host route through its own veth (Calico, AWS VPC CNI, kindnet/ptp, Azure transparent), else a client address (on a bridge or Cilium's cilium_host a dual-stack pod has one per family): counted by tinyproxy itself from accept until the connection ends, whatever state the client's socket is in, more refused at accept with a TCP reset (with or without the kernel rules). deployment.maxClients defaults to room for cluster.maxPodsPerNode pods at this share. 0: no limit, and one pod can take every one of maxClients. The node's own processes (loopback: the kubelet's probes) are exempt."""

    new_connections_per_client_per_second: NotRequired[pulumi.Input[int]]
    """New connections per second that one source address may open to the proxy's port, with bursts of twice as many; the kernel refuses more with a TCP reset. 0: no limit."""


class UpstreamSettings(TypedDict):
    """A corporate proxy that tinyproxy chains to; its credentials stay in a Secret."""

    url: pulumi.Input[str]

    username: NotRequired[pulumi.Input[str]]

    password: NotRequired[pulumi.Input[str]]
    """Kept in Secrets only."""

    no_upstream: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Destinations tinyproxy reaches directly, not through the upstream."""

    trusted_ca: NotRequired[pulumi.Input[str]]
    """PEM CA certificates of a TLS-inspecting upstream (one text, or a list): public, not a secret."""


class HelmValuesSecret(TypedDict):
    """A Secret with key `values.yaml` holding one profile's values, for Flux `valuesFrom` or app platforms."""

    profile: pulumi.Input[str]

    namespace: pulumi.Input[str]

    name: NotRequired[pulumi.Input[str]]
    """Default: <profile>-proxy-values."""

    release: NotRequired[pulumi.Input[str]]
    """The chart's Helm release name, from which the profile derives the in-cluster names its NO_PROXY adds (argo-cd); default: the name the chart's docs use."""

    runtimes: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """The chart's runtimes (java, node, python); default: the cluster-wide flags. One of: java, node, python."""


class CapiSettings(TypedDict):
    """Cluster API: the Secrets a management cluster needs so machines boot with the proxy."""

    enabled: NotRequired[pulumi.Input[bool]]

    namespace: NotRequired[pulumi.Input[str]]
    """Namespace of the Cluster object in the management cluster."""

    export_to_kubeadm: NotRequired[pulumi.Input[bool]]
    """Also export the proxy variables before kubeadm runs, so static pods get them (with the full NO_PROXY)."""

    tkg_addons: NotRequired[pulumi.Input[bool]]
    """TKG-style addon value Secrets for vSphere CPI, CSI and kapp-controller."""


class RuntimeSettings(TypedDict):
    """Which runtimes' renderings workloads get beside the six variables: opt-in, per cluster, namespace, workload."""

    java: NotRequired[pulumi.Input[bool]]
    """JDK_JAVA_OPTIONS for every workload that gets the env."""

    node: NotRequired[pulumi.Input[bool]]
    """NODE_USE_ENV_PROXY=1 for every workload that gets the env."""

    python: NotRequired[pulumi.Input[bool]]
    """The Python-safe NO_PROXY in both spellings, cluster-wide."""

    namespaces: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[Sequence[pulumi.Input[str]]]]]]
    """A namespace's runtimes, replacing the cluster-wide flags there. One of: java, node, python."""

    annotation: NotRequired[pulumi.Input[str]]
    """On a workload or its pod template: its runtimes ('java,node', or 'none'), replacing the rest."""


class InjectionSettings(TypedDict):
    """Which workloads get the proxy env from the admission policy, the Kyverno policies and the stack transform."""

    exclude_namespaces: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]

    opt_out_annotation: NotRequired[pulumi.Input[str]]
    """A workload or pod with this annotation set to "false" is skipped."""

    kyverno: NotRequired[pulumi.Input[bool]]
    """Create the Kyverno policies that inject the env into pods."""

    kyverno_policy: NotRequired[pulumi.Input[str]]
    """MutatingPolicy and GeneratingPolicy (policies.kyverno.io/v1, Kyverno >= 1.17), or the legacy ClusterPolicy (kyverno.io/v1) for Kyverno < 1.17. One of: MutatingPolicy, ClusterPolicy."""

    admission: NotRequired[pulumi.Input[bool]]
    """Create a MutatingAdmissionPolicy and its binding: the API server injects the env into pods itself (Kubernetes >= 1.34; see cluster.kubernetesVersion)."""

    trust_manager: NotRequired[pulumi.Input[bool]]
    """Create a trust-manager Bundle of its default CAs and proxy.upstream.trustedCa (needs trust-manager)."""

    cluster_trust_bundle: NotRequired[pulumi.Input[bool]]
    """Also publish proxy.upstream.trustedCa as ClusterTrustBundles (certificates.k8s.io/v1, Kubernetes >= 1.37; signer proxy-component.io/trust), and mount the proxy-trust volume's PEM files from them: the CA is rotated in every pod from one cluster-scoped object. The per-namespace proxy-trust ConfigMaps stay (Java's trust store is in them)."""

    transform_env: NotRequired[pulumi.Input[str]]
    """How the stack transform writes each variable: value (literals; a change of the proxy values rewrites, and so restarts, every injected workload at the next update) or reference (valueFrom the namespace's proxy-config; a change updates proxy-config alone, and running pods keep their values until proxy-component rollout or their next restart). A namespace without proxy-config gets values. One of: value, reference."""


class DeploymentSettings(TypedDict):
    """The in-cluster tinyproxy: where it runs, which image, and who may use it for what."""

    enabled: NotRequired[pulumi.Input[bool]]

    namespace: NotRequired[pulumi.Input[str]]

    service_name: NotRequired[pulumi.Input[str]]

    port: NotRequired[pulumi.Input[int]]

    image: NotRequired[pulumi.Input[str]]
    """Any image with tinyproxy >= 1.11 on PATH."""

    image_pull_policy: NotRequired[pulumi.Input[str]]
    """Of both containers. One of: IfNotPresent, Always, Never."""

    run_as_user: NotRequired[pulumi.Input[int]]
    """tinyproxy's UID (and GID): one no other process on the node uses, since the firewall matches it."""

    firewall: NotRequired[pulumi.Input[FirewallSettings]]

    deadlines: NotRequired[pulumi.Input[DeadlineSettings]]

    metrics: NotRequired[pulumi.Input[MetricsSettings]]

    access_log: NotRequired[pulumi.Input[AccessLogSettings]]

    drain: NotRequired[pulumi.Input[DrainSettings]]

    control_plane: NotRequired[pulumi.Input[bool]]
    """Also run on control-plane nodes (node-role.kubernetes.io/control-plane)."""

    resources: NotRequired[pulumi.Input[Resources]]

    allowed_source_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]

    connect_ports: NotRequired[pulumi.Input[Sequence[pulumi.Input[int]]]]

    internal_traffic_policy: NotRequired[pulumi.Input[str]]
    """One of: Cluster, Local."""

    traffic_distribution: NotRequired[pulumi.Input[str]]
    """The Service's trafficDistribution. auto: PreferSameNode when cluster.kubernetesVersion is 1.35 or later (GA there: a pod's own node's proxy first, another node's only while its own is not ready, so a restart on one node costs no request), else unset (an older API server refuses the value). none: unset. One of: auto, PreferSameNode, PreferClose, none."""

    max_clients: NotRequired[pulumi.Input[int]]
    """tinyproxy's MaxClients: connections served at once. 0 (the default): room for every pod a node can run at its share, cluster.maxPodsPerNode x firewall.maxConnectionsPerClient (twice on a dual-stack cluster: a pod has an address per family) and the loopback reserve, rounded up to a multiple of 256 (1792 by default); a value below that is refused. The memory limit defaults to what this many need at their worst, measured (bench/bench_proxy_memory.py), and tinyproxy keeps an eighth (at most 32) of them for the node's own processes, the kubelet's probes."""

    deny_destinations: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Extended regular expressions over the request's host that tinyproxy refuses (its Filter)."""

    config_dir: NotRequired[pulumi.Input[str]]
    """Where the config is mounted in the container."""

    image_pull_secrets: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Secrets (kubernetes.io/dockerconfigjson) in the proxy's namespace that let nodes pull the image; check --probe's pods name them too, in their own namespace."""

    node_selector: NotRequired[pulumi.Input[Mapping[str, pulumi.Input[str]]]]
    """Node labels the proxy's nodes must have, besides kubernetes.io/os: linux (and the probe's pods)."""

    tolerate_all_taints: NotRequired[pulumi.Input[bool]]
    """Tolerate every taint (the proxy is every node's egress); false: only `tolerations`, e.g. where a toleration whitelist (PodTolerationRestriction) refuses the catch-all."""

    tolerations: NotRequired[pulumi.Input[Sequence[pulumi.Input[Toleration]]]]
    """Tolerations after the catch-all (which already tolerates every taint: they matter with tolerateAllTaints: false); the probe's pods get them too."""

    affinity: NotRequired[pulumi.Input[Affinity]]
    """Node affinity terms, combined with the proxy's own (nodeAffinity only)."""

    priority_class_name: NotRequired[pulumi.Input[str]]
    """The proxy's PriorityClass: system-node-critical (it is every node's egress), another class, or '' for none. Outside kube-system a cluster may refuse system-* classes without a ResourceQuota (GKE)."""


class ClusterSettings(TypedDict):
    """The cluster's networks and endpoints, everything that must bypass the proxy."""

    name: NotRequired[pulumi.Input[str]]

    dns_domain: NotRequired[pulumi.Input[str]]

    pod_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]

    service_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]

    node_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """The node pools' subnets. In NO_PROXY and in tinyproxy's Allow: every host in them, not only the cluster's nodes, may use the proxy and its upstream credentials, so give the subnets, not a whole private range (`check` warns, node-range-wide)."""

    api_server_hosts: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]

    api_server_ips: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]

    ip_family: NotRequired[pulumi.Input[str]]
    """Inferred from the pod and service CIDRs when unset. One of: ipv4, ipv6, dual."""

    cloud: NotRequired[pulumi.Input[str]]
    """One of: none, aws, gcp, azure."""

    region: NotRequired[pulumi.Input[str]]
    """AWS region, for the .compute.internal suffix."""

    max_pods_per_node: NotRequired[pulumi.Input[int]]
    """The most pods a node runs (the kubelet's maxPods: 110 by default, an EKS node's by its instance type, GKE's and AKS's by the pool's setting): deployment.maxClients makes room for all of them at their share."""

    kubernetes_version: NotRequired[pulumi.Input[str]]
    """The cluster's Kubernetes version, e.g. '1.35': picks the MutatingAdmissionPolicy API (v1beta1 on 1.34 and 1.35, v1 from 1.36, the default)."""


class ProxySettings(TypedDict):
    """What pods and nodes use: the proxy URLs and extra NO_PROXY entries."""

    http_proxy: NotRequired[pulumi.Input[str]]
    """Defaults to the in-cluster proxy's URL."""

    https_proxy: NotRequired[pulumi.Input[str]]
    """Defaults to httpProxy."""

    no_proxy: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Entries added after the cluster's own."""

    upstream: NotRequired[pulumi.Input[UpstreamSettings]]

    node_http_proxy: NotRequired[pulumi.Input[str]]
    """What node services (containerd, kubelet) use; default: httpProxy, else the upstream."""

    node_https_proxy: NotRequired[pulumi.Input[str]]
    """Default: nodeHttpProxy."""


class Settings(TypedDict):
    """Everything proxy-component needs to know; see the README's settings reference."""

    proxy: NotRequired[pulumi.Input[ProxySettings]]

    cluster: NotRequired[pulumi.Input[ClusterSettings]]

    deployment: NotRequired[pulumi.Input[DeploymentSettings]]

    namespaces: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Namespaces that get a proxy-config ConfigMap."""

    injection: NotRequired[pulumi.Input[InjectionSettings]]

    runtimes: NotRequired[pulumi.Input[RuntimeSettings]]

    capi: NotRequired[pulumi.Input[CapiSettings]]

    helm_values_secrets: NotRequired[pulumi.Input[Sequence[pulumi.Input[HelmValuesSecret]]]]
