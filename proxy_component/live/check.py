"""`proxy-component check`: what in a live cluster has drifted from what the settings compose.

It reports each finding in one line that names the object: node addresses and pod ranges outside tinyproxy's
Allow list or not covered by NO_PROXY, the service range not covered, the proxy DaemonSet missing, not ready or
absent from nodes that run DaemonSets, an image of it whose tag can move, its namespace enforcing a Pod Security
level stricter than it needs, a `proxy-config` missing or edited, a workload (with admission or Kyverno injection,
a Pod) without the proxy env or with a stale NO_PROXY, and an injection API the settings chose that the API
server does not serve (discovery: the MutatingAdmissionPolicy of `injection.admission`, the Kyverno kinds of
`injection.kyvernoPolicy`). The reads are `cluster.Cluster`'s; the requests are those of `access.accesses`.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from ..dataplane.common import APP_LABEL, config_name
from ..dataplane.config import GENERATION_ANNOTATION, config_is_secret
from ..dataplane.lifecycle import RELOAD_LOG_PREFIX, STATUS_PERIOD
from ..dataplane.metrics import METRICS_CONTAINER
from ..dataplane.workload import CONTROL_PLANE_LABEL, NO_DAEMONSET_LABELS
from ..noproxy import NoProxy
from ..render import plain_values
from ..render.admission import admission_api_version
from ..render.env import (
    CONFIG_NAME,
    ENV_NAMES,
    RUNTIME_VARIABLES,
    env_pairs,
    proxy_config_object,
    reads_proxy_config,
)
from ..render.kyverno import POLICY_NAME
from ..render.runtimes import python_no_proxy
from ..render.trust import BUNDLE_NAME, cluster_trust_bundles, trust_bundle_object, trust_namespaces
from ..settings import (
    DEFAULT_CONNECTIONS_PER_CLIENT,
    RUNTIMES,
    NodeSelectorRequirement,
    Runtime,
    Settings,
    image_is_mutable,
)
from .access import KUBERNETES_SERVICE, workload_apis, workload_namespaces
from .cluster import (
    CLUSTER_TRUST_BUNDLES,
    CONFIG_MAPS,
    DAEMON_SET,
    KYVERNO_DEPLOYMENT,
    LEGACY_POLICY,
    NAMESPACES,
    NODES,
    POD_LOGS,
    PODS,
    SECRETS,
    SERVICE_CIDRS,
    SERVICES,
    Access,
    Cluster,
    Obj,
    explain,
)
from .kyverno import KYVERNO_DEPLOYMENT as KYVERNO_DEPLOYMENT_NAME
from .kyverno import KYVERNO_NAMESPACE, legacy_ended, legacy_policy_message, version_of
from .stale import JudgedPods, content_time, judge_pods

POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
# hostNetwork, hostPort and the firewall's root user with NET_ADMIN: only `privileged` admits the DaemonSet.
STRICTER_POD_SECURITY = ("baseline", "restricted")
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Finding:
    """One thing that drifted: what kind of problem, which object, how bad, and what it means."""

    kind: str
    object: str
    severity: str  # "error": traffic fails or the proxy is missing; "warning": traffic takes a wrong path
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.severity}: {self.object}: {self.message}"


class InjectionApi(NamedTuple):
    """An API the settings' injection needs the API server to serve: the setting, group/version and resource."""

    setting: str
    group_version: str
    resource: str
    needs: str


def injection_apis(settings: Settings) -> list[InjectionApi]:
    """The APIs of the injection the settings chose (none for the stack transform alone)."""
    injection = settings.injection
    out: list[InjectionApi] = []
    if injection.admission:
        version = admission_api_version(settings)
        needs = (
            f"Kubernetes 1.34 or 1.35 with the MutatingAdmissionPolicy feature gate and --runtime-config={version}=true"
            if version.endswith("v1beta1")
            else "Kubernetes 1.36 or later, or cluster.kubernetesVersion naming an older cluster's version"
        )
        for resource in ("mutatingadmissionpolicies", "mutatingadmissionpolicybindings"):
            out.append(InjectionApi("injection.admission", version, resource, needs))
    if injection.kyverno:
        if injection.kyverno_policy == "ClusterPolicy":
            out.append(InjectionApi("injection.kyvernoPolicy", "kyverno.io/v1", "clusterpolicies", "Kyverno installed"))
        else:
            for resource in ("mutatingpolicies", "generatingpolicies"):
                out.append(
                    InjectionApi(
                        "injection.kyvernoPolicy",
                        "policies.kyverno.io/v1",
                        resource,
                        "Kyverno 1.17 or later, or injection.kyvernoPolicy: ClusterPolicy for an older Kyverno",
                    )
                )
    return out


@functools.lru_cache(maxsize=1 << 16)  # a node's addresses are parsed by two checks
def _network(value: str) -> Net | None:
    try:
        return ipaddress.ip_network(value, strict=False)
    except ValueError:
        return None


Span = tuple[int, int, int]  # a network as (version, first address, last address)
Spans = tuple[Span, ...]


def _spans(nets: Sequence[Net]) -> Spans:
    return tuple((n.version, int(n.network_address), int(n.broadcast_address)) for n in nets)


@functools.lru_cache(maxsize=1 << 16)  # a node's addresses are judged by two checks
def _span(value: str) -> Span | None:
    """An address or network as integers, None when it is neither."""
    net = _network(value)
    return None if net is None else (net.version, int(net.network_address), int(net.broadcast_address))


def _within(net: Span, spans: Spans) -> bool:
    """Whether `net` lies in one of the networks, as `subnet_of` says, compared as integers (at 5,000 nodes
    `subnet_of` itself took a second of check's time)."""
    version, low, high = net
    return any(v == version and lo <= low and high <= hi for v, lo, hi in spans)


def check_cluster(settings: Settings, cluster: Cluster) -> list[Finding]:
    """Every finding, in a stable order: network coverage, the proxy itself, `proxy-config`, workloads."""
    try:
        with cluster.remembering():
            return _findings(settings, cluster)
    except Exception as exc:
        error = explain(exc, cluster)
        if error is None:
            raise
        raise error from None


def _findings(settings: Settings, cluster: Cluster) -> list[Finding]:
    """Every finding, in a stable order, from one snapshot (each object read once)."""
    # Every list it will need, read in the background (2 at a time) in the order they are judged, while earlier
    # ones are (the proxy's pods even where its DaemonSet turns out to be missing and they are not judged).
    cluster.ahead(Access(NODES))
    d = settings.deployment
    if d.enabled:
        cluster.ahead(Access(PODS, d.namespace), label_selector=f"{APP_LABEL}={d.service_name}")
    # Each namespace's pods before its workloads: the stale pods' ReplicaSets are then read while the workloads
    # are judged.
    for ns in workload_namespaces(settings):
        cluster.ahead(Access(PODS, ns))
        for _, api in workload_apis(settings):
            cluster.ahead(Access(api, ns))
    nodes = list(cluster.list_json(Access(NODES)))
    no_proxy = list(settings.no_proxy().networks())
    first = [
        *_nodes(settings, nodes, no_proxy),
        *_node_ranges(settings, nodes),
        *proxy_limits(settings),
        *_service_range(cluster, no_proxy),
        *_proxy(settings, cluster, nodes),
        *_proxy_configs(settings, cluster),
        *_trust_bundles(settings, cluster),
        *_cluster_trust_bundles(settings, cluster),
        *_injection_apis(settings, cluster),
        *_kyverno_legacy(settings, cluster),
    ]
    pods = judge_pods(settings, cluster)  # judged now, reported last
    return [*first, *_workloads(settings, cluster), *_stale(pods)]


def _injection_apis(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """An injection API the settings chose that the API server does not serve: no Pod gets the env from it."""
    served: dict[str, set[str] | None] = {}
    for api in injection_apis(settings):
        if api.group_version not in served:
            served[api.group_version] = cluster.served(api.group_version)
        resources = served[api.group_version]
        if resources is not None and api.resource not in resources:
            yield Finding(
                "injection-api-missing", f"API {api.group_version}/{api.resource}", "error",
                f"{api.setting}: the API server does not serve {api.group_version} {api.resource}, so no Pod gets "
                f"the proxy env from it (expected {api.needs})",
            )  # fmt: skip


def _kyverno_legacy(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """The legacy ClusterPolicy this project rendered (`injection.kyvernoPolicy: ClusterPolicy`, now or earlier) on a
    cluster whose Kyverno no longer runs it (1.20): it injects nothing. Nothing is said when Kyverno's version cannot
    be read (another namespace, a forbidden read, an untagged image)."""
    if not settings.injection.kyverno:
        return
    try:
        response = cluster.request(
            Access(KYVERNO_DEPLOYMENT, None, KYVERNO_DEPLOYMENT_NAME), KYVERNO_DEPLOYMENT_NAME, KYVERNO_NAMESPACE,
            _preload_content=False,
        )  # fmt: skip
        found = version_of(json.loads(response.data))
    except Exception as exc:
        if getattr(exc, "status", None) in (403, 404):  # Kyverno elsewhere, or not readable: nothing is said
            return
        raise
    if found is None or not legacy_ended(found):
        return
    try:
        response = cluster.request(
            Access(LEGACY_POLICY, None, POLICY_NAME), "kyverno.io", "v1", "clusterpolicies", POLICY_NAME,
            _preload_content=False,
        )  # fmt: skip
    except Exception as exc:
        if getattr(exc, "status", None) in (403, 404):  # none, or the legacy CRD is gone (1.21)
            return
        raise
    if response is None:
        return
    yield Finding(
        "kyverno-legacy-policy", f"ClusterPolicy {POLICY_NAME}", "error",
        f"made by an earlier injection.kyvernoPolicy: ClusterPolicy; {legacy_policy_message(*found)}",
    )  # fmt: skip


def _internal_ips(node: Obj) -> list[str]:
    """A node's InternalIPs: where its host-network pods' connections come from, and what pods reach it by.

    ExternalIPs are not judged: a cloud's public or NAT address is neither, and adding it to `Allow` would open
    the proxy to it.
    """
    addresses = (node.get("status") or {}).get("addresses") or []
    return [a["address"] for a in addresses if a.get("type") == "InternalIP"]


def _nodes(settings: Settings, nodes: list[Obj], no_proxy: list[Net]) -> Iterator[Finding]:
    allow = _spans([n for n in map(_network, settings.allowed_sources()) if n is not None])
    covered = _spans(no_proxy)
    checks_allow = settings.deployment.enabled
    for node in nodes:
        name = f"Node {node['metadata']['name']}"
        for address in _internal_ips(node):
            net = _span(address)
            if net is None:
                continue
            if checks_allow and not _within(net, allow):
                yield Finding(
                    "node-outside-allow", name, "error",
                    f"address {address} is outside tinyproxy's Allow list: its host-network pods are refused "
                    "by the proxy (add its range to cluster.nodeCidrs)",
                )  # fmt: skip
            if not _within(net, covered):
                yield Finding(
                    "node-not-in-no-proxy", name, "warning",
                    f"address {address} is not covered by NO_PROXY: clients send requests to it through the "
                    "proxy (add its range to cluster.nodeCidrs)",
                )  # fmt: skip
        spec = node.get("spec") or {}
        for cidr in spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []):
            net = _span(cidr)
            if net is None:
                continue
            if checks_allow and not _within(net, allow):
                yield Finding(
                    "pods-outside-allow", name, "error",
                    f"podCIDR {cidr} is outside tinyproxy's Allow list: pods on this node are refused by the proxy "
                    "(add it to cluster.podCidrs)",
                )  # fmt: skip
            if not _within(net, covered):
                yield Finding(
                    "pods-not-in-no-proxy", name, "warning",
                    f"podCIDR {cidr} is not covered by NO_PROXY: requests to these pods go through the proxy "
                    "(add it to cluster.podCidrs)",
                )  # fmt: skip


# A node range wider than the nodes need: more than 2**WIDE_BITS times the addresses of the smallest range that
# holds its nodes' InternalIPs, that range taken as at least a node subnet (a /24, an IPv6 /64).
WIDE_BITS = 8
NODE_SUBNET = {4: 24, 6: 64}


def wide_node_range(cidr: str, addresses: Sequence[str]) -> tuple[Net, int] | None:
    """Where `cidr` (a node range in tinyproxy's Allow) is wider than its nodes need by more than WIDE_BITS bits:
    the range they need and how many of the `addresses` it holds. None where it is not, or where it holds none of
    the addresses (nothing to compare with)."""
    net = _network(cidr)
    if net is None:
        return None
    low, high = int(net.network_address), int(net.broadcast_address)
    inside = sorted(a for v, a, _ in filter(None, map(_span, addresses)) if v == net.version and low <= a <= high)
    if not inside:
        return None
    span = net.max_prefixlen - (inside[0] ^ inside[-1]).bit_length()
    first = type(net.network_address)(inside[0])
    needed = ipaddress.ip_network(f"{first}/{min(span, NODE_SUBNET[net.version])}", strict=False)
    return (needed, len(inside)) if net.prefixlen < needed.prefixlen - WIDE_BITS else None


def proxy_limits(settings: Settings) -> Iterator[Finding]:
    """What lets one pod take its node's proxy: its share turned off (docs/guides/security.md). The settings refuse
    the rest themselves: a maxClients below every pod of a node at its share, a memory limit below what maxClients
    connections need at their worst."""
    d = settings.deployment
    if not d.enabled or d.firewall.max_connections_per_client:
        return
    yield Finding(
        "proxy-client-limits-off", f"DaemonSet {d.namespace}/{d.service_name}", "warning",
        f"deployment.firewall.maxConnectionsPerClient: 0: one pod can hold every one of the proxy's {d.max_clients} "
        "connections, and the node's other pods get none (the kubelet's probes keep the loopback reserve) (set it: "
        f"default {DEFAULT_CONNECTIONS_PER_CLIENT})",
    )  # fmt: skip


def _node_ranges(settings: Settings, nodes: list[Any]) -> Iterator[Finding]:
    """A node range in tinyproxy's Allow far wider than the cluster's nodes: every host in it may use the proxy
    (and its upstream credentials), not only the nodes."""
    if not settings.deployment.enabled:
        return
    addresses = [a for node in nodes for a in _internal_ips(node) if _span(a) is not None]
    for i, cidr in enumerate(settings.cluster.node_cidrs):
        wide = wide_node_range(cidr, addresses)
        if wide is None:
            continue
        needed, count = wide
        size = ipaddress.ip_network(cidr).num_addresses
        yield Finding(
            "node-range-wide", f"cluster.nodeCidrs[{i}] {cidr}", "warning",
            f"tinyproxy's Allow holds all {size:,} addresses of {cidr}, but the cluster's {count} node address(es) "
            f"in it lie in {needed}: any host in {cidr}, not only the nodes, may use the proxy and its upstream "
            f"credentials (narrow cluster.nodeCidrs to the subnets the node pools use, e.g. {needed})",
        )  # fmt: skip


def _service_range(cluster: Cluster, no_proxy: list[Net]) -> Iterator[Finding]:
    """The ServiceCIDR objects, else the `kubernetes` Service's IPs (where pods reach the API server).

    The API server's endpoints and the kubeconfig's server are not judged: pods reach the API server at its
    Service (`kubernetes.default.svc`, KUBERNETES_SERVICE_HOST), never at those.
    """
    ranges: list[tuple[str, str]] = []
    try:
        if cluster.supports(SERVICE_CIDRS):  # a kubernetes client older than ServiceCIDRs' v1 does not
            for item in cluster.list_json(Access(SERVICE_CIDRS)):
                ranges += [(f"ServiceCIDR {item['metadata']['name']}", c) for c in item["spec"].get("cidrs") or []]
    except Exception as exc:
        if getattr(exc, "status", None) not in (403, 404):
            raise  # 404: a server before Kubernetes 1.33; 403: an identity that may not list them
    if not ranges:
        service = cluster.get_json(Access(SERVICES, *KUBERNETES_SERVICE))
        if service is not None:
            ips = service["spec"].get("clusterIPs") or [service["spec"].get("clusterIP")]
            ranges += [("Service default/kubernetes", ip) for ip in ips if ip and ip != "None"]
    for name, cidr in ranges:
        net = _span(cidr)
        if net is not None and not _within(net, _spans(no_proxy)):
            yield Finding(
                "services-not-in-no-proxy", name, "warning",
                f"service range {cidr} is not covered by NO_PROXY: requests to Service IPs (the API server's "
                "among them) go through the proxy (add it to cluster.serviceCidrs)",
            )  # fmt: skip


# Nodes where DaemonSet pods never run: the labels the DaemonSet's node affinity excludes (dataplane.workload), and
# virtual-kubelet's taint.
NO_DAEMONSET_TAINT = "virtual-kubelet.io/provider"


def runs_daemonsets(node: Obj) -> bool:
    """False for a node that never runs DaemonSet pods (virtual-kubelet, EKS Fargate): the proxy cannot be there."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) == value for key, value in NO_DAEMONSET_LABELS.items()):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    return not any(t.get("key") == NO_DAEMONSET_TAINT for t in taints)


def _eligible(settings: Settings, node: Obj) -> bool:
    """A node the proxy should run on: Linux, running DaemonSets, not control-plane unless asked, and selected by
    the settings' nodeSelector, required node affinity and tolerations (as the DaemonSet controller decides)."""
    labels = node["metadata"].get("labels") or {}
    if labels.get("kubernetes.io/os", "linux") != "linux" or not runs_daemonsets(node):
        return False
    if not settings.deployment.control_plane and CONTROL_PLANE_LABEL in labels:
        return False
    d = settings.deployment
    if any(labels.get(key) != value for key, value in d.node_selector.items()):
        return False
    terms = d.required_node_terms
    if terms and not any(all(_matches(r, labels) for r in term.match_expressions) for term in terms):
        return False
    taints = (node.get("spec") or {}).get("taints") or []
    return d.tolerate_all_taints or all(_tolerated(settings, t) for t in taints)


def _matches(requirement: NodeSelectorRequirement, labels: dict[str, str]) -> bool:
    """A node selector requirement against a node's labels, as the scheduler reads it."""
    value = labels.get(requirement.key)
    op = requirement.operator
    if op in ("Exists", "DoesNotExist"):
        return (value is not None) is (op == "Exists")
    if op == "In":
        return value in requirement.values
    if op == "NotIn":
        return value not in requirement.values
    if value is None or not re.fullmatch(r"-?[0-9]+", value):
        return False
    return int(value) > int(requirement.values[0]) if op == "Gt" else int(value) < int(requirement.values[0])


# The taints the DaemonSet controller makes every DaemonSet pod tolerate (Exists), whatever its template says.
DAEMONSET_TOLERATED = {
    "node.kubernetes.io/not-ready": "NoExecute",
    "node.kubernetes.io/unreachable": "NoExecute",
    "node.kubernetes.io/disk-pressure": "NoSchedule",
    "node.kubernetes.io/memory-pressure": "NoSchedule",
    "node.kubernetes.io/pid-pressure": "NoSchedule",
    "node.kubernetes.io/unschedulable": "NoSchedule",
    "node.kubernetes.io/network-unavailable": "NoSchedule",  # for pods on the host's network, as the proxy's
}


def _tolerated(settings: Settings, taint: Obj) -> bool:
    """Whether the proxy's pods may run on a node with this taint: PreferNoSchedule never keeps them off."""
    key, value, effect = taint["key"], taint.get("value"), taint.get("effect")
    if effect == "PreferNoSchedule" or DAEMONSET_TOLERATED.get(key) == effect:
        return True
    for t in settings.deployment.tolerations:
        if t.effect is not None and t.effect != effect:
            continue
        if t.key is None or (t.key == key and (t.operator == "Exists" or (t.value or "") == (value or ""))):
            return True
    return False


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _shown(names: Sequence[str], limit: int = 10) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _proxy(settings: Settings, cluster: Cluster, all_nodes: list[Obj]) -> Iterator[Finding]:
    """The DaemonSet, and a ready proxy pod on every eligible node (judged from the pods: nodes that run no
    DaemonSets still count in the DaemonSet's own status when it tolerates them)."""
    d = settings.deployment
    if not d.enabled:
        return
    name = f"DaemonSet {d.namespace}/{d.service_name}"
    yield from _pod_security(settings, cluster)
    daemonset = cluster.get_json(Access(DAEMON_SET, d.namespace, d.service_name))
    if daemonset is None:
        yield Finding("proxy-missing", name, "error", "the proxy DaemonSet does not exist: pods have no proxy")
        return
    template = daemonset["spec"]["template"]["spec"]
    for container in [*(template.get("initContainers") or []), *(template.get("containers") or [])]:
        if image_is_mutable(container.get("image")):
            yield Finding(
                "image-mutable-tag", name, "warning",
                f"container {container['name']}: image {container.get('image')!r} has no digest and no versioned tag, so "
                "nodes may run different builds of it (set a versioned tag and pin its digest, "
                "e.g. name:1.2.3@sha256:...)",
            )  # fmt: skip
    placed: set[str] = set()
    ready: set[str] = set()
    running: dict[str, str] = {}  # node: its ready proxy pod's name
    for pod in cluster.list_json(Access(PODS, d.namespace), label_selector=f"{APP_LABEL}={d.service_name}"):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            placed.add(node)
            if _ready(pod):
                ready.add(node)
                running[node] = pod["metadata"]["name"]
    nodes = sorted(n["metadata"]["name"] for n in all_nodes if _eligible(settings, n))
    not_ready = [n for n in nodes if n in placed and n not in ready]
    missing = [n for n in nodes if n not in placed]
    if not_ready:
        yield Finding(
            "proxy-not-ready", name, "error",
            f"{len(nodes) - len(not_ready) - len(missing)} of {len(nodes)} eligible nodes have a ready proxy pod; "
            f"not ready on {len(not_ready)} node(s): {_shown(not_ready)}",
        )  # fmt: skip
    if missing:
        yield Finding(
            "proxy-missing-on-nodes", name, "error",
            f"no proxy pod on {len(missing)} node(s): {_shown(missing)} (a taint, a full node or a nodeSelector "
            "keeps it off; with internalTrafficPolicy Local their pods have no proxy)",
        )  # fmt: skip
    logs = _proxy_logs(settings, cluster, {n: running[n] for n in nodes if n in running})
    yield from _loaded_configs(settings, cluster, {node: tinyproxy for node, (tinyproxy, _) in logs.items()})
    yield from _upstream_failing(settings, {node: upstream for node, (_, upstream) in logs.items()})


# What the tinyproxy container's watcher says it runs (dataplane.lifecycle.proxy_command): the config generation and the
# kubelet's directory of its files, `..YYYY_MM_DD_hh_mm_ss.N`, named by when the kubelet wrote them (UTC).
_LOADED = re.compile(r"config generation (\S+) \(files (\S+)\)")
_KUBELET_DIR = re.compile(r"^\.\.(\d{4})_(\d\d)_(\d\d)_(\d\d)_(\d\d)_(\d\d)\.")


@dataclass(frozen=True)
class Loaded:
    """What one node's proxy runs, from its log: the generation, when the kubelet wrote its files, and the
    generation of newer files it refused since (None when it refused none)."""

    generation: str
    files: str
    refused: str | None = None

    @property
    def written(self) -> datetime | None:
        match = _KUBELET_DIR.match(self.files)
        if match is None:
            return None
        year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
        try:
            return datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc)
        except ValueError:  # a directory name that is no date (not the kubelet's): no time
            return None


def loaded_config(log: str) -> Loaded | None:
    """The last config the watcher says it started with or loaded, from a tinyproxy container's log; None when it
    says nothing (an older layout, or a log cut short)."""
    found: Loaded | None = None
    for line in log.splitlines():
        if not line.startswith(RELOAD_LOG_PREFIX):
            continue
        match = _LOADED.search(line)
        if match is None:
            continue
        generation, files = match.groups()
        if "refused" in line:
            if found is not None:
                found = Loaded(found.generation, found.files, generation)
        elif "changes Port" not in line:
            found = Loaded(generation, files, found.refused if found is not None and "running" in line else None)
    return found


# What tinyproxy logs when the upstream proxy cannot be reached, or answers 407 (the image's patch 0005), or none
# is defined for a request: the lines the exporter counts as tinyproxy_upstream_failures_total, by cause.
_UPSTREAM_FAILED = re.compile(
    r"^[A-Z]+ +[A-Z][a-z]{2} +\d+ (\d\d:\d\d:\d\d)\.\d{3} \[\d+\]: "
    r"(Could not connect to upstream proxy\.|No upstream proxy defined for |Upstream proxy \S+ refused the request: 407)"
)
LOG_WINDOW = STATUS_PERIOD + 60
"""Seconds of each proxy pod's log that `check` reads: the watcher repeats what it runs every STATUS_PERIOD."""


def _judged(line: str) -> bool:
    """A line `check` judges: the watcher's (what the proxy runs) or tinyproxy's upstream failures. The others (the
    access log's, at up to `maxLinesPerSecond` a second) are read past, never kept."""
    return line.startswith(RELOAD_LOG_PREFIX) or "pstream proxy" in line


def _proxy_logs(settings: Settings, cluster: Cluster, pods: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Each ready proxy pod's log of the last `LOG_WINDOW` seconds, by node: the tinyproxy container's (the
    watcher's lines) and the one holding tinyproxy's own lines (the same, or the metrics container's when tinyproxy
    logs to the file the exporter reads). Each is streamed and only the lines `check` judges are kept: with the
    access log at its rate bound, a node's window is tens of thousands of lines. A pod whose log cannot be read
    (403, 404) is left out: not judged."""
    d = settings.deployment
    logs: dict[str, tuple[str, str]] = {}
    for node, pod in sorted(pods.items()):
        read: dict[str, str] = {}
        for container in ("tinyproxy", METRICS_CONTAINER) if d.metrics.enabled else ("tinyproxy",):
            lines = cluster.log_lines(
                Access(POD_LOGS, d.namespace), pod, d.namespace, container=container, since_seconds=LOG_WINDOW
            )
            try:
                read[container] = "\n".join(line for line in lines if _judged(line))
            except Exception as exc:
                if getattr(exc, "status", None) is None:
                    raise
        if "tinyproxy" in read:
            logs[node] = (read["tinyproxy"], read.get(METRICS_CONTAINER, read["tinyproxy"]))
    return logs


def upstream_failures(log: str) -> tuple[int, int, str | None]:
    """How many times a proxy's log says the upstream could not serve a request, how many of them were a 407 (its
    credentials refused), and the time of day of the last."""
    found = [m for line in log.splitlines() for m in [_UPSTREAM_FAILED.match(line)] if m]
    refused = sum(1 for m in found if m.group(2).startswith("Upstream proxy "))
    return len(found), refused, (found[-1].group(1) if found else None)


def _upstream_failing(settings: Settings, logs: dict[str, str]) -> Iterator[Finding]:
    """A node whose proxy could not reach the upstream proxy in the log's window: what ProxyUpstreamFailing alerts
    on, from the same lines, for a cluster that runs no Prometheus (or before one is set up)."""
    upstream = settings.proxy.upstream
    if upstream is None:
        return
    d = settings.deployment
    host, port = upstream.endpoint  # never the URL: its user info is a credential
    failing = []
    for node, log in sorted(logs.items()):
        count, refused, last = upstream_failures(log)
        if count:
            auth = f", {refused} of them 407: its credentials refused" if refused else ""
            failing.append(f"{node} ({count} times{auth}, last at {last})")
    if failing:
        yield Finding(
            "proxy-upstream-failing", f"DaemonSet {d.namespace}/{d.service_name}", "error",
            f"the proxy on {len(failing)} node(s) was not served by the upstream proxy {host}:{port} in the "
            f"last {LOG_WINDOW // 60} minutes: {_shown(failing)}. Requests that go through the upstream fail there "
            "(tinyproxy answers 500); see the runbook, docs/guides/operating.md#the-corporate-proxy-down",
        )  # fmt: skip


def _loaded_configs(settings: Settings, cluster: Cluster, logs: dict[str, str]) -> Iterator[Finding]:
    """A node whose proxy runs an older config than the cluster's config object: another generation (what
    tinyproxy reloads, without credentials), or files the kubelet wrote before the object last changed (a change
    of the credentials alone keeps the generation: it is told by time, never by a digest of them), from each ready
    proxy pod's log of the last `LOG_WINDOW` seconds (the watcher repeats what it runs)."""
    d = settings.deployment
    api = SECRETS if config_is_secret(settings) else CONFIG_MAPS
    config = cluster.get_json(Access(api, d.namespace, config_name(settings)))
    if config is None or not logs:
        return
    want = ((config.get("metadata") or {}).get("annotations") or {}).get(GENERATION_ANNOTATION)
    changed = content_time(config)
    where = f"{config['kind']} {d.namespace}/{config_name(settings)}"
    old: list[str] = []
    refused: list[str] = []
    for node, log in sorted(logs.items()):
        loaded = loaded_config(log)
        if loaded is None or want is None:
            continue
        written = loaded.written
        stale = loaded.generation != want or (
            changed is not None and written is not None and written + timedelta(seconds=1) < changed
        )
        if not stale:
            continue
        what = f"{node} (generation {loaded.generation}, files {loaded.files})"
        (refused if loaded.refused == want else old).append(what)
    since = f", changed {changed.strftime('%Y-%m-%dT%H:%M:%SZ')}" if changed is not None else ""
    if old:
        yield Finding(
            "proxy-config-not-loaded", where, "warning",
            f"the proxy on {len(old)} node(s) runs an older config than this object's (generation {want}{since}): "
            f"{_shown(old)}. The kubelet updates the mounted files within about a minute of a change, and the "
            "proxy reloads them within a second after that; if this persists, read the pod's log (lines starting "
            f"{RELOAD_LOG_PREFIX.strip()!r})",
        )  # fmt: skip
    if refused:
        yield Finding(
            "proxy-config-refused", where, "error",
            f"the proxy on {len(refused)} node(s) refused this object's config (generation {want}) and runs its "
            f"previous one: {_shown(refused)}. Its log names the line tinyproxy refused (lines starting "
            f"{RELOAD_LOG_PREFIX.strip()!r})",
        )  # fmt: skip


def _pod_security(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """The proxy's namespace enforcing a Pod Security level that refuses its pods (the label only, not the
    cluster-wide default of the admission configuration, which the API does not show)."""
    namespace = settings.deployment.namespace
    ns = cluster.get_json(Access(NAMESPACES, None, namespace))
    level = ((ns["metadata"].get("labels") if ns is not None else None) or {}).get(POD_SECURITY_ENFORCE, "")
    if level in STRICTER_POD_SECURITY:
        yield Finding(
            "pod-security-too-strict", f"Namespace {namespace}", "warning",
            f"enforces Pod Security level {level!r}, which refuses the proxy's pods: they need 'privileged' "
            "(hostNetwork, hostPort, and the firewall init container's root user with NET_ADMIN) "
            f"(label it {POD_SECURITY_ENFORCE}=privileged, or set deployment.namespace to one that is)",
        )  # fmt: skip


def _data(obj: Obj, secret: bool) -> dict[str, str]:
    if secret:
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    return dict(obj.get("data") or {})


def _proxy_configs(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """Each namespace's `proxy-config`, read by name; a Secret's values are compared, never shown."""
    values = plain_values(settings)
    secret = settings.has_credentials
    api, kind = (SECRETS, "Secret") if secret else (CONFIG_MAPS, "ConfigMap")
    for ns in settings.proxy_config_namespaces:
        wanted = proxy_config_object(settings, ns, values)
        expected = wanted.get("stringData") or wanted.get("data") or {}
        name = f"{kind} {ns}/{CONFIG_NAME}"
        live = cluster.get_json(Access(api, ns, CONFIG_NAME))
        if live is None:
            yield Finding("proxy-config-missing", name, "error", "missing: workloads that read it get no proxy env")
            continue
        data = _data(live, secret)
        differing = sorted(k for k in set(expected) | set(data) if expected.get(k) != data.get(k))
        if differing:
            yield Finding(
                "proxy-config-differs", name, "warning",
                f"differs from the settings in {', '.join(differing)}: edited by hand, or the stack is not applied",
            )  # fmt: skip


def _trust_bundles(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """Each namespace's `proxy-trust` (proxy.upstream.trustedCa), read by name: the Pods given the trust group
    mount it, and a Pod whose ConfigMap volume is missing does not start."""
    for ns in trust_namespaces(settings):
        wanted = trust_bundle_object(settings, ns)
        name = f"ConfigMap {ns}/{BUNDLE_NAME}"
        live = cluster.get_json(Access(CONFIG_MAPS, ns, BUNDLE_NAME))
        if live is None:
            yield Finding(
                "proxy-trust-missing", name, "error",
                "missing: Pods given the trust group mount it and do not start without it",
            )  # fmt: skip
            continue
        data = {**(live.get("data") or {}), **(live.get("binaryData") or {})}
        expected = {**wanted.get("data", {}), **wanted.get("binaryData", {})}
        differing = sorted(k for k in set(expected) | set(data) if expected.get(k) != data.get(k))
        if differing:
            yield Finding(
                "proxy-trust-differs", name, "warning",
                f"differs from the settings in {', '.join(differing)}: the CA changed and the stack is not applied, "
                "or it was edited by hand (or certifi's roots differ from the version that rendered it)",
            )  # fmt: skip


def _cluster_trust_bundles(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """injection.clusterTrustBundle: the project's ClusterTrustBundles, read by name. A Pod given the projected
    volume does not start while a bundle it selects is missing; one that differs is a CA not rotated yet."""
    if not settings.injection.cluster_trust_bundle or settings.trusted_ca is None:
        return
    for wanted in cluster_trust_bundles(settings):
        name = f"ClusterTrustBundle {wanted['metadata']['name']}"
        live = cluster.get_json(Access(CLUSTER_TRUST_BUNDLES, None, wanted["metadata"]["name"]))
        if live is None:
            yield Finding(
                "cluster-trust-bundle-missing", name, "error",
                "missing: Pods given the projected proxy-trust volume do not start without it (the stack is not "
                "applied, or the cluster does not serve certificates.k8s.io/v1 ClusterTrustBundle: Kubernetes 1.37)",
            )  # fmt: skip
        elif (live.get("spec") or {}).get("trustBundle") != wanted["spec"]["trustBundle"]:
            yield Finding(
                "cluster-trust-bundle-differs", name, "warning",
                "its trustBundle differs from the settings: the CA changed and the stack is not applied, or it was "
                "edited by hand (or certifi's roots differ from the version that rendered it)",
            )  # fmt: skip


@dataclass(frozen=True)
class NoProxyTokens:
    """What a live NO_PROXY is judged against: the tokens every rendering of the composed list holds (the
    Python-safe list's), and those the Python-safe list leaves out (IPv6 CIDRs, bracketed addresses)."""

    required: tuple[str, ...]
    python_unsafe: frozenset[str]

    @classmethod
    def of(cls, no_proxy: NoProxy) -> NoProxyTokens:
        python = tuple(t for t in python_no_proxy(no_proxy).split(",") if t)
        return cls(python, frozenset(no_proxy.tokens()) - set(python))


def _pod_template(kind: str, obj: Obj) -> Obj:
    if kind == "Pod":
        return obj
    if kind == "CronJob":
        return dict(obj["spec"]["jobTemplate"]["spec"]["template"])
    return dict(obj["spec"]["template"])


def _workloads(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """Each workload (with Kyverno injection: each running Pod) of the judged namespaces, container by container."""
    values = plain_values(settings)
    tokens = NoProxyTokens.of(settings.no_proxy())
    ours = dict(env_pairs(values.select(RUNTIMES)))
    opt_out = settings.injection.opt_out_annotation
    expected_by: dict[frozenset[Runtime], dict[str, Any]] = {}
    for ns in workload_namespaces(settings):
        for kind, api in workload_apis(settings):
            for obj in cluster.list_json(Access(api, ns)):
                meta = obj["metadata"]
                if kind == "Job" and meta.get("ownerReferences"):
                    continue  # a CronJob's Job: the CronJob is reported
                phase = (obj.get("status") or {}).get("phase") if kind == "Pod" else None
                if kind == "Pod" and (meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed")):
                    continue  # it runs nothing any more
                template = _pod_template(kind, obj)
                template_annotations = (template.get("metadata") or {}).get("annotations")
                annotations = {**(meta.get("annotations") or {}), **(template_annotations or {})}
                if annotations.get(opt_out) == "false":
                    continue
                name = f"{kind} {ns}/{meta['name']}"
                try:
                    selection = settings.runtimes.select(ns, annotations)
                except ValueError as exc:
                    yield Finding("workload-runtimes", name, "warning", f"{exc}: treated as no runtime")
                    selection = frozenset()
                if selection not in expected_by:  # a few selections among many workloads: rendered once each
                    expected_by[selection] = dict(env_pairs(values.select(selection)))
                expected = expected_by[selection]
                spec = template["spec"]
                containers = [
                    *(spec.get("initContainers") or []),
                    *(spec.get("containers") or []),
                    *(spec.get("ephemeralContainers") or []),
                ]
                for container in containers:
                    problem = _container_problem(_as_dict(container), expected, ours, tokens)
                    if problem:
                        yield Finding("workload-env", name, "warning", f"container {container['name']}: {problem}")


def _stale(pods: JudgedPods) -> Iterator[Finding]:
    """Each owner whose running pods hold old proxy values (stale.py says how that is decided and what it cannot
    know): `proxy-component rollout` restarts them; Jobs and CronJobs finish with what they have."""
    for owner in pods.owners():
        first = owner.pods[0]
        many = len(owner.pods) > 1
        what = f"{len(owner.pods)} running pods hold" if many else f"pod {first.name} holds"
        what += f" old proxy values ({'the first: ' if many else ''}{first.reason})"
        if owner.restartable:
            advice = "restart it: proxy-component rollout, or kubectl rollout restart"
            if owner.kind == "Pod":
                advice = "recreate it (proxy-component rollout evicts it; a bare pod is not recreated by anything)"
        else:
            advice = f"a {owner.kind} is not restarted by rollout: its pods finish with the values they started with"
        yield Finding("pods-stale", owner.ref, "warning", f"{what}: {advice}")


def _as_dict(container: Obj) -> dict[str, Any]:
    """The parts of a live container that the injection decision reads: its envFrom as the API writes it, and
    each env variable's value and whether it is a literal (no valueFrom)."""
    env = [
        {"name": e["name"], "value": e.get("value"), "literal": e.get("valueFrom") is None}
        for e in container.get("env") or []
    ]
    return {"env": env, "envFrom": container.get("envFrom") or []}


def _container_problem(
    container: dict[str, Any], expected: dict[str, Any], ours: dict[str, Any], tokens: NoProxyTokens
) -> str:
    """What differs from what `render.env.additions` gives this container for its selection.

    A literal NO_PROXY or no_proxy is stale when it lacks a token every rendering of the composed list holds:
    the composed list, the Python-safe one (which a chart's values or a patch rendered for python carry) and a
    list with more entries (a chart's own hosts) all pass. `no_proxy`, which every Python client reads first,
    must not hold what the Python-safe list leaves out: httpx raises on it.
    """
    if reads_proxy_config(container):
        return ""  # the namespace's proxy-config, checked on its own
    env = {e["name"]: e for e in container["env"]}
    missing = [name for name in ENV_NAMES if name not in env]
    if missing:
        return f"lacks the proxy env ({', '.join(missing)}; expected envFrom {CONFIG_NAME} or the variables)"
    for name in ("NO_PROXY", "no_proxy"):
        var = env[name]
        if not var["literal"]:
            continue
        held = {t.strip().lower() for t in str(var["value"] or "").split(",")}
        lacking = [t for t in tokens.required if t not in held]
        if lacking:
            return (
                f"{name} is stale: it lacks {_shown(lacking, 5)}, which the composed NO_PROXY holds (re-apply its env "
                "and recreate its pods)"
            )
        unsafe = sorted(held & tokens.python_unsafe)
        if name == "no_proxy" and unsafe:
            return (
                f"no_proxy holds {_shown(unsafe, 5)}, on which httpx raises InvalidURL when a client is created "
                "(proxy-component gives no_proxy the Python-safe list: re-apply its env and recreate its pods)"
            )
    for runtime, variable in RUNTIME_VARIABLES.items():
        if variable in expected and variable not in env:
            return f"its runtimes select {runtime} but it lacks {variable} (recreate its pods, or it set a proxy name)"
        if variable not in expected and variable in env and env[variable]["value"] == ours.get(variable):
            return (
                f"has proxy-component's {variable} but its runtimes do not select {runtime}: injected before "
                "runtimes were opt-in (recreate its pods, or select the runtime)"
            )
    return _own_variables(env)


_NPM_PROXY_VARIABLES = ("npm_config_http_proxy", "npm_config_https_proxy", "npm_config_proxy", "npm_config_no_proxy")


def _own_variables(env: dict[str, Any]) -> str:
    """Variables a container sets itself that change what some clients do with the proxy env (the client suites of
    tests/fixtures/client_suites): npm's for proxy-from-env 1, REQUEST_METHOD for Go, Python and Ruby."""
    npm = [name for name in env if name.lower() in _NPM_PROXY_VARIABLES]
    causes = []
    if npm:
        causes.append(
            f"sets {', '.join(npm)}, which proxy-from-env 1 reads ahead of the proxy env "
            "(npm_config_no_proxy ahead of NO_PROXY)"
        )
    if "REQUEST_METHOD" in env:
        causes.append(
            "sets REQUEST_METHOD, which marks a CGI process: Go then refuses HTTP_PROXY, Python's clients drop it and "
            "Ruby reads CGI_HTTP_PROXY instead"
        )
    if not causes:
        return ""
    return "; ".join(causes) + " (proxy-component explain --env NAME=VALUE shows what each client then does)"
