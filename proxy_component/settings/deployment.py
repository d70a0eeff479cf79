"""The in-cluster tinyproxy, a DaemonSet (`DeploymentSettings`): its images, its Filter and kernel rules
(`FirewallSettings`), its metrics exporter (`MetricsSettings`), its access log (`AccessLogSettings`), how a pod
leaves its node (`DrainSettings`) and how long each phase of a connection may take (`DeadlineSettings`)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from ..dataplane.image import DEFAULT_IMAGE as OWN_IMAGE
from ..dataplane.image import USER_ID as OWN_USER_ID
from .base import _Model
from .names import PROBE_NAMESPACE, DnsLabel, DnsSubdomain, LabelKey, LabelValue, _dns_1035
from .network import Cidr, ListenPort, Port, SourceRange
from .resources import ResourceName, Resources, default_proxy_memory_limit
from .scheduling import (
    DEFAULT_PRIORITY_CLASS,
    OS_LABEL,
    Affinity,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    Toleration,
    _priority_class,
)

# The host the kubelet's HTTP probes ask for: tinyproxy answers it with its stats page (`StatHost`) and connects
# nowhere. `.invalid` never resolves (RFC 2606), so it can hide no real destination.
STAT_HOST = "proxy-component.invalid"

# The Filter, a second layer behind the firewall: hosts the proxy refuses by their spelling. It sees names,
# never the address a name resolves to, so the kernel rules (FirewallSettings) are what holds; these catch
# every literal spelling of loopback, unspecified, link-local and metadata addresses that glibc's inet_aton and
# inet_pton accept (octal, hex, short and integer IPv4 forms; any IPv6 spelling of ::, ::1, ::ffff:0:0/96,
# fe80::/10 and fd00:ec2::/32), before tinyproxy even resolves them. tinyproxy matches case-insensitively.
DEFAULT_DENY: tuple[str, ...] = (
    r"^(.+\.)?localhost\.?$",
    r"^127\.",
    r"^0\.",
    # IPv4 in fewer than four parts (127.1, 2130706433, 0x7f000001), or with an octal or hex part (0177.0.0.1).
    r"^([0-9]+|0x[0-9a-f]*)(\.([0-9]+|0x[0-9a-f]*)){0,2}\.?$",
    r"^(([0-9]+|0x[0-9a-f]*)\.){0,3}0[0-9x][0-9a-f]*(\.([0-9]+|0x[0-9a-f]*)){0,3}\.?$",
    # IPv6 ::, ::1 and ::0.0.0.1 in any spelling, and IPv4-mapped addresses (::ffff:127.0.0.1, ::ffff:7f00:1).
    r"^\[?[0:]*:[0:]*1?(%[^]]*)?\]?$",
    r"^\[?[0:]*:0\.0\.0\.[01](%[^]]*)?\]?$",
    r"^\[?[0:]*:ffff:",
    r"^169\.254\.",
    r"^\[?fe[89ab][0-9a-f]:",
    r"^\[?fd00:0*ec2:",
    r"^metadata(\.google\.internal)?\.?$",
    r"^168\.63\.129\.16\.?$",
    r"^100\.100\.100\.200\.?$",
)

# What the kernel refuses to tinyproxy's UID, besides every address of the node itself (loopback included):
# the unspecified and link-local ranges (IMDS at 169.254.169.254 among them) and the clouds' other metadata
# endpoints (AWS IPv6 IMDS, Azure's wire server, Alibaba's metadata service).
DEFAULT_FIREWALL_DENY: tuple[str, ...] = (
    "0.0.0.0/8",
    "169.254.0.0/16",
    "168.63.129.16/32",
    "100.100.100.200/32",
    "::/128",
    "fe80::/10",
    "fd00:ec2::/32",
)


# The images the DaemonSet runs by default: the project's own (proxy_component/dataplane/image.py, built by scripts/image), for
# both containers and the probe pods, tagged with its tinyproxy's Debian version. Why the digest pin is yours to
# add, as `image:tag@sha256:...`, is in docs/guides/images.md.
DEFAULT_IMAGE = OWN_IMAGE
DEFAULT_FIREWALL_IMAGE = OWN_IMAGE
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGE_EXAMPLE = (
    f"expected e.g. {DEFAULT_IMAGE}, optionally pinned as ...:{DEFAULT_IMAGE.rsplit(':', 1)[1]}@sha256:<64 hex digits>"
)


def _image_ref(value: str) -> str:
    """An image reference, `name[:tag][@sha256:<64 hex digits>]`; a digest pins it whatever the tag does."""
    name, at, digest = value.partition("@")
    if not name or any(ch.isspace() for ch in value):
        raise ValueError(f"{value!r} is not an image reference ({_IMAGE_EXAMPLE})")
    if at and not _DIGEST.match(digest):
        raise ValueError(f"{value!r} has a digest that is not sha256: and 64 lower-case hex digits ({_IMAGE_EXAMPLE})")
    return value


def image_is_mutable(image: str) -> bool:
    """True for a reference that may point at other content tomorrow: no digest, and no tag or one without a digit.

    `latest`, `stable` or no tag at all move by design; a versioned tag (`1.11.2-1`, `v1.36.3`) is conventionally
    stable but can still be pushed again, which only a digest rules out.
    """
    name, at, _ = image.partition("@")
    if at:
        return False
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    return not any(ch.isdigit() for ch in tag)


ImageRef = Annotated[str, Field(min_length=1), AfterValidator(_image_ref)]
PullPolicy = Literal["IfNotPresent", "Always", "Never"]


def _deny_pattern(pattern: str) -> str:
    """One line of tinyproxy's Filter; it must leave the probes' host alone (tinyproxy filters before StatHost)."""
    if not pattern or any(ch in pattern for ch in '"\n\r'):
        raise ValueError(f"{pattern!r} is not a one-line pattern (expected e.g. ^169\\.254\\.)")
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from None
    if compiled.search(STAT_HOST):
        raise ValueError(
            f"{pattern!r} matches {STAT_HOST!r}, the host the kubelet's probes ask tinyproxy for, so every "
            "probe would fail (expected a pattern that leaves that name alone)"
        )
    return pattern


DenyPattern = Annotated[str, AfterValidator(_deny_pattern)]


# One pod's share of the proxy (docs/guides/security.md): 16 open connections, counted by tinyproxy itself per client
# address from accept until the connection's thread ends, and 100 new ones a second (bursts of 200), counted by the
# kernel per source address. maxClients defaults to room for every pod a node can run at its share.
DEFAULT_CONNECTIONS_PER_CLIENT = 16
DEFAULT_NEW_CONNECTIONS_PER_SECOND = 100


class FirewallSettings(_Model):
    """Kernel rules that stop tinyproxy from reaching the node itself, link-local and metadata addresses.

    An init container with NET_ADMIN on the node's network loads an nftables
    table that rejects new TCP connections from tinyproxy's own UID
    (`deployment.runAsUser`) to any local address of the node and to
    `denyCidrs`. It checks the address actually connected to, so no spelling
    and no DNS name gets around it.
    """

    enabled: bool = Field(
        default=True, description="Load the rules; without them only the name Filter stands between pods and the node."
    )
    image: ImageRef = Field(
        default=DEFAULT_FIREWALL_IMAGE,
        description="An image with nft and a POSIX /bin/sh, run as root with NET_ADMIN only (the proxy's own has both).",
    )
    deny_cidrs: list[Cidr] = Field(
        default_factory=lambda: list(DEFAULT_FIREWALL_DENY),
        description="Destinations refused besides the node's own addresses.",
    )
    allow_cluster_destinations: bool = Field(
        default=False,
        description="Let tinyproxy reach the cluster's pod, service and node ranges; by default they are refused, "
        "since tinyproxy on the node's network would let a pod past its NetworkPolicy (those calls belong in NO_PROXY).",
    )
    max_connections_per_client: int = Field(
        default=DEFAULT_CONNECTIONS_PER_CLIENT,
        ge=0,
        le=65535,
        description="Open connections that one client may hold: a pod where the node reaches it by a host route "
        "through its own veth (Calico, AWS VPC CNI, kindnet/ptp, Azure transparent), else a client address (on a bridge "
        "or Cilium's cilium_host a dual-stack pod has one per family): "
        "counted by tinyproxy itself from accept until the connection ends, whatever state the client's socket is in, "
        "more refused at accept with a TCP reset (with or without the kernel rules). deployment.maxClients defaults to "
        "room for cluster.maxPodsPerNode pods at this share. 0: no limit, and one pod can take every one of "
        "maxClients. The node's own processes (loopback: the kubelet's probes) are exempt.",
    )
    new_connections_per_client_per_second: int = Field(
        default=DEFAULT_NEW_CONNECTIONS_PER_SECOND,
        ge=0,
        le=100000,
        description="New connections per second that one source address may open to the proxy's port, with bursts "
        "of twice as many; the kernel refuses more with a TCP reset. 0: no limit.",
    )

    @field_validator("deny_cidrs")
    @classmethod
    def _sorted(cls, value: list[str]) -> list[str]:
        nets = {ipaddress.ip_network(c) for c in value}
        return [str(n) for n in sorted(nets, key=lambda n: (n.version, n))]


DEFAULT_METRICS_PORT = 9888


class MetricsSettings(_Model):
    """Per-node proxy metrics: an exporter beside tinyproxy (same image, same UID, no capability) that serves
    Prometheus' text format on a port of its own, and the objects that watch it.

    The exporter reads tinyproxy's stats page over loopback and its log (a file in a volume both containers mount;
    tinyproxy never waits for the exporter), and passes on to its own stdout the log lines an operator needs: every
    one but the probes'. Nothing it serves derives from a credential.
    """

    enabled: bool = Field(
        default=False,
        description="Run the exporter beside tinyproxy; tinyproxy then logs to a file the exporter reads, and "
        "`kubectl logs -c metrics` shows its log without the probes' lines.",
    )
    port: ListenPort = Field(
        default=DEFAULT_METRICS_PORT,
        description="The exporter's port on every node (hostNetwork): /metrics. Not the proxy's port.",
    )
    run_as_user: int = Field(
        default=OWN_USER_ID + 1,
        ge=1000,
        le=2**31 - 1,
        description="The exporter's UID, not tinyproxy's (the firewall refuses that UID's connections to the node, the "
        "stats page's among them); its group is tinyproxy's, which lets it read the log.",
    )
    scrape_annotations: bool = Field(
        default=False,
        description="Annotate the proxy's pods with prometheus.io/scrape, port and path, for a Prometheus that "
        "discovers pods by those annotations.",
    )
    pod_monitor: bool = Field(
        default=False, description="Create a PodMonitor (prometheus-operator's CRD must exist in the cluster)."
    )
    prometheus_rule: bool = Field(
        default=False,
        description="Create a PrometheusRule with the proxy's alerts (prometheus-operator's CRD must exist).",
    )
    grafana_dashboard: bool = Field(
        default=False,
        description="Create a ConfigMap holding a Grafana dashboard, labelled grafana_dashboard: '1' for Grafana's "
        "dashboard sidecar.",
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="Labels added to the PodMonitor and PrometheusRule, e.g. the `release` a Prometheus selects.",
    )
    firewall_counters: bool = Field(
        default=False,
        description="Also export the kernel rules' counters (tinyproxy_firewall_refusals_total by rule: the node, "
        "denied and cluster ranges, each per-client limit, the loopback reserve). Reading them needs CAP_NET_ADMIN in "
        "the node's network: a third container, root with NET_ADMIN alone (as the firewall init container), lists the "
        "table every 15 s into the log volume. NET_ADMIN there could also rewrite the node's firewall, which is why "
        "it is off by default. Needs deployment.firewall.enabled.",
    )

    @field_validator("labels")
    @classmethod
    def _sorted_labels(cls, value: dict[str, str]) -> dict[str, str]:
        return dict(sorted(value.items()))


DEFAULT_ACCESS_LOG_LINES_PER_SECOND = 100
ACCESS_LOG_LINES_PER_SECOND = (1, 10000)  # the accepted range of accessLog.maxLinesPerSecond


class AccessLogSettings(_Model):
    """The access log: one JSON line per connection through a node's proxy, as it ends, at most maxLinesPerSecond.

    tinyproxy's `AccessLog` (patch 0025 of the project's image) says when, the client's address and port, the
    method, the destination's host and port, whether the upstream relayed it, the status the client got, the result
    (ok, refused, error) and its cause, the bytes each way and the duration; never a path, a query, a header or a
    credential (docs/guides/access-log.md). It writes at most `maxLinesPerSecond` lines a second, counts those over
    it and says how many once a second (`access-dropped`), so the lines a node writes are bounded whatever its pods
    do. A change is reloaded in place: no pod is replaced.
    """

    enabled: bool = Field(
        default=True,
        description="Write an access line for every connection through the proxy (the container's log, or the "
        "exporter's when metrics are on); false: no AccessLog line is rendered (an image without patch 0025 reads "
        "that config), and the other log lines stay.",
    )
    max_lines_per_second: int = Field(
        default=DEFAULT_ACCESS_LOG_LINES_PER_SECOND,
        ge=ACCESS_LOG_LINES_PER_SECOND[0],
        le=ACCESS_LOG_LINES_PER_SECOND[1],
        description="The most access lines one node's proxy writes a second (tinyproxy's AccessLogRate); the "
        "connections over it get no line, and one access-dropped line a second counts them. At about 300 bytes a "
        "line, 100 a second is at most about 30 kB/s of log per node.",
    )

    @field_validator("max_lines_per_second", mode="wrap")
    @classmethod
    def _rate(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> int:
        low, high = ACCESS_LOG_LINES_PER_SECOND
        try:
            if isinstance(value, bool):  # YAML's `yes` is no number of lines
                raise ValueError
            rate: int = handler(value)
        except (ValidationError, ValueError):
            raise ValueError(
                f"{value!r} is not a whole number of lines a second from {low} to {high} (expected e.g. "
                f"{DEFAULT_ACCESS_LOG_LINES_PER_SECOND}; turn the access log off with accessLog.enabled: false)"
            ) from None
        return rate


class DrainSettings(_Model):
    """How a proxy pod leaves its node (a roll, `kubectl drain`, a node's shutdown) without dropping a request.

    The API server marks a deleted pod's endpoint not ready (`terminating`) at once, and every node's kube-proxy then
    sends new connections to the ready proxies of other nodes; while the pod's own proxy is the only one serving (a
    one-node cluster), kube-proxy keeps sending to it, since it still passes its readiness probe. On SIGTERM the
    container keeps tinyproxy serving `endpointSeconds`, the time for that change to reach every node, then waits
    for the connections still open (CONNECT tunnels, kept-alive clients) to close, at most `connectionSeconds`,
    before it stops tinyproxy. The pod's grace period is their sum and 5 s more. A change of either rolls the proxy
    (it is the pod's own spec).
    """

    endpoint_seconds: int = Field(
        default=5,
        ge=0,
        le=300,
        description="Seconds tinyproxy keeps accepting after the pod is told to stop: longer than the cluster takes "
        "to take a terminating endpoint out of every node's kube-proxy rules (about a second on a quiet cluster).",
    )
    connection_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Then, at most this many seconds for the connections still open to finish (a git clone, an image "
        "pull, a websocket through the proxy); those still open after it are cut.",
    )

    @property
    def grace_seconds(self) -> int:
        """The pod's terminationGracePeriodSeconds: both waits and 5 s for tinyproxy to stop."""
        return self.endpoint_seconds + self.connection_seconds + 5


class DeadlineSettings(_Model):
    """How long each phase of a connection through the proxy may take, in seconds: a connection past one is closed
    (504 when the response's head is late, 500 when the lookup or connect fails), so no client holds a thread longer
    than its phase needs. Sized from what real clients allow: a client sends its request at once (Apache's
    RequestReadTimeout gives 20 to 40 s), a resolver answers within seconds, Go's http.Transport gives a connect
    30 s, and nginx's proxy_read_timeout waits 60 s for a response."""

    request_head_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="From accept, for the request line and headers (tinyproxy's RequestHeadTimeout); the Allow "
        "decision is made at accept, before anything is read.",
    )
    dns_seconds: int = Field(
        default=9,
        ge=3,
        le=300,
        description="For a name's lookup, every nameserver of the node's resolv.conf included: the resolver's "
        "RES_OPTIONS get timeout:dnsSeconds/3 attempts:1, and glibc asks at most 3 nameservers in turn.",
    )
    connect_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="For the TCP connects to the origin's (or the upstream's) addresses, together (ConnectTimeout).",
    )
    response_head_seconds: int = Field(
        default=120,
        ge=1,
        le=86400,
        description="From the request's end, for the origin's (or the upstream's) status line and headers "
        "(ResponseHeadTimeout); raise it for long polls that answer later.",
    )
    idle_seconds: int = Field(
        default=600,
        ge=1,
        le=86400,
        description="Then, the longest a connection or a CONNECT tunnel may pass no byte either way (tinyproxy's "
        "Timeout); an idle tunnel keeps counting against its client's share.",
    )

    @property
    def resolver_options(self) -> str:
        """RES_OPTIONS for the proxy container: at most `dns_seconds` for a lookup over up to 3 nameservers."""
        return f"timeout:{max(1, self.dns_seconds // 3)} attempts:1"


class DeploymentSettings(_Model):
    """The in-cluster tinyproxy: where it runs, which image, and who may use it for what."""

    enabled: bool = True
    namespace: DnsLabel = "kube-system"
    service_name: Annotated[str, AfterValidator(_dns_1035)] = "http-proxy"
    port: ListenPort = 8888
    image: ImageRef = Field(default=DEFAULT_IMAGE, description="Any image with tinyproxy >= 1.11 on PATH.")
    image_pull_policy: PullPolicy = Field(default="IfNotPresent", description="Of both containers.")
    run_as_user: int = Field(
        default=OWN_USER_ID,
        ge=1000,
        le=2**31 - 1,
        description="tinyproxy's UID (and GID): one no other process on the node uses, since the firewall matches it.",
    )
    firewall: FirewallSettings = Field(default_factory=FirewallSettings)
    deadlines: DeadlineSettings = Field(default_factory=DeadlineSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    access_log: AccessLogSettings = Field(default_factory=AccessLogSettings)
    drain: DrainSettings = Field(default_factory=DrainSettings)
    control_plane: bool = Field(
        default=False, description="Also run on control-plane nodes (node-role.kubernetes.io/control-plane)."
    )
    resources: Resources = Field(default_factory=Resources)
    allowed_source_cidrs: list[SourceRange] = Field(default_factory=list)
    connect_ports: list[Port] = Field(default_factory=lambda: [443])
    internal_traffic_policy: Literal["Cluster", "Local"] = "Cluster"
    traffic_distribution: Literal["auto", "PreferSameNode", "PreferClose", "none"] = Field(
        default="auto",
        description="The Service's trafficDistribution. auto: PreferSameNode when cluster.kubernetesVersion is 1.35 "
        "or later (GA there: a pod's own node's proxy first, another node's only while its own is not ready, so a "
        "restart on one node costs no request), else unset (an older API server refuses the value). none: unset.",
    )
    max_clients: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="tinyproxy's MaxClients: connections served at once. 0 (the default): room for every pod a node "
        "can run at its share, cluster.maxPodsPerNode x firewall.maxConnectionsPerClient (twice on a dual-stack "
        "cluster: a pod has an address per family) and the loopback reserve, rounded up to a multiple of 256 (1792 by "
        "default); a value below that is refused. The memory limit defaults to what this many need at their worst, "
        "measured (bench/bench_proxy_memory.py), and tinyproxy keeps an eighth (at most 32) of them for the node's "
        "own processes, the kubelet's probes.",
    )
    deny_destinations: list[DenyPattern] = Field(
        default_factory=lambda: list(DEFAULT_DENY),
        description="Extended regular expressions over the request's host that tinyproxy refuses (its Filter).",
    )
    config_dir: str = Field(default="/etc/tinyproxy", description="Where the config is mounted in the container.")
    image_pull_secrets: list[DnsSubdomain] = Field(
        default_factory=list,
        description="Secrets (kubernetes.io/dockerconfigjson) in the proxy's namespace that let nodes pull the image; "
        "check --probe's pods name them too, in their own namespace.",
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="Node labels the proxy's nodes must have, besides kubernetes.io/os: linux (and the probe's pods).",
    )
    tolerate_all_taints: bool = Field(
        default=True,
        description="Tolerate every taint (the proxy is every node's egress); false: only `tolerations`, e.g. where "
        "a toleration whitelist (PodTolerationRestriction) refuses the catch-all.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        description="Tolerations after the catch-all (which already tolerates every taint: they matter with "
        "tolerateAllTaints: false); the probe's pods get them too.",
    )
    affinity: Affinity | None = Field(
        default=None, description="Node affinity terms, combined with the proxy's own (nodeAffinity only)."
    )
    priority_class_name: Annotated[str, AfterValidator(_priority_class)] = Field(
        default=DEFAULT_PRIORITY_CLASS,
        description="The proxy's PriorityClass: system-node-critical (it is every node's egress), another class, or "
        "'' for none. Outside kube-system a cluster may refuse system-* classes without a ResourceQuota (GKE).",
    )

    @property
    def limits(self) -> dict[ResourceName, str]:
        """Both containers' limits: `resources.limits`, the memory limit defaulting to what maxClients needs."""
        limits = dict(self.resources.limits)
        limits.setdefault("memory", default_proxy_memory_limit(self.max_clients))
        return dict(sorted(limits.items()))

    @property
    def required_node_terms(self) -> list[NodeSelectorTerm]:
        """The required node affinity terms of `affinity` (any one must hold), none when not given."""
        node = self.affinity.node_affinity if self.affinity else None
        required = node.required_during_scheduling_ignored_during_execution if node else None
        return list(required.node_selector_terms) if required else []

    @property
    def preferred_node_terms(self) -> list[PreferredSchedulingTerm]:
        node = self.affinity.node_affinity if self.affinity else None
        return list(node.preferred_during_scheduling_ignored_during_execution) if node else []

    @field_validator("namespace")
    @classmethod
    def _not_the_probes(cls, value: str) -> str:
        if value == PROBE_NAMESPACE:
            raise ValueError(
                f"{value!r} is the namespace of check --probe's pods, where Pod Security enforces 'restricted', "
                "which refuses the proxy's pods (expected another namespace, e.g. kube-system)"
            )
        return value

    @field_validator("image_pull_secrets")
    @classmethod
    def _unique_names(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    @field_validator("node_selector")
    @classmethod
    def _linux_only(cls, value: dict[str, str]) -> dict[str, str]:
        if value.get(OS_LABEL, "linux") != "linux":
            raise ValueError(
                f"{OS_LABEL}: {value[OS_LABEL]!r}: the proxy's image runs on Linux nodes only (expected linux, or "
                "no such key: the proxy selects linux itself)"
            )
        return dict(sorted(value.items()))

    @field_validator("tolerations")
    @classmethod
    def _canonical_tolerations(cls, value: list[Toleration]) -> list[Toleration]:
        """By key, operator, value, effect and seconds, each once: their order means nothing to Kubernetes."""
        unique = {
            (
                t.key or "",
                t.operator,
                t.value or "",
                t.effect or "",
                -1 if t.toleration_seconds is None else t.toleration_seconds,
            ): t
            for t in value
        }
        return [unique[k] for k in sorted(unique)]

    @field_validator("config_dir")
    @classmethod
    def _config_dir(cls, value: str) -> str:
        if not value.startswith("/") or any(ch.isspace() or ch == '"' for ch in value):
            raise ValueError(f"{value!r} is not an absolute path without spaces (expected e.g. /etc/tinyproxy)")
        return value.rstrip("/") or "/"

    @field_validator("connect_ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("[] would let CONNECT reach every port (expected at least one port, e.g. [443])")
        return sorted(set(value))
