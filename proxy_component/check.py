"""`proxy-component check`: what in a live cluster has drifted from what the settings compose.

It reads the cluster with the official `kubernetes` client (the `check` extra, imported on use), in a fixed
number of list calls, each paginated, never one GET per object, and reports each finding in one line that
names the object: nodes and pod ranges outside tinyproxy's Allow list or not covered by NO_PROXY, the
service range and API server endpoints not covered, the proxy DaemonSet not ready or missing from nodes, an
image of it whose tag can move, its namespace enforcing a Pod Security level stricter than it needs, a
`proxy-config` missing or edited, a workload without the proxy env or with a stale NO_PROXY.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from .noproxy import Kind, NoProxy
from .render import plain_values
from .render.env import (
    CONFIG_NAME,
    ENV_NAMES,
    RUNTIME_VARIABLES,
    ProxyValues,
    env_pairs,
    proxy_config_object,
    reads_proxy_config,
)
from .render.proxy import APP_LABEL, CONTROL_PLANE_LABEL
from .settings import RUNTIMES, Settings, image_is_mutable

__all__ = ["CheckError", "Finding", "check_cluster", "connect"]

PAGE = 500  # objects per list call; the number of calls grows only with pages, never per object
POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
# hostNetwork, hostPort and the firewall's root user with NET_ADMIN: only `privileged` admits the DaemonSet.
STRICTER_POD_SECURITY = ("baseline", "restricted")
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


class CheckError(Exception):
    """The cluster cannot be read (unreachable, unknown context, forbidden): a message a user can act on."""


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


@dataclass
class Cluster:
    """The API groups `check` lists from, and how many requests it made."""

    core: Any
    apps: Any
    batch: Any
    networking: Any
    discovery: Any
    server: str
    requests: int = 0

    def list(self, call: Callable[..., Any], **kwargs: Any) -> Iterator[Any]:
        """Every item of a list call, page by page."""
        token: str | None = None
        while True:
            self.requests += 1
            page = call(limit=PAGE, _continue=token, **kwargs) if token else call(limit=PAGE, **kwargs)
            yield from page.items
            token = page.metadata._continue
            if not token:
                return


def connect(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A client for the cluster of the kubeconfig (default: $KUBECONFIG or ~/.kube/config) and context."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise CheckError("the kubernetes client is not installed (pip install 'proxy-component[check]')") from None
    try:
        api = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise CheckError(f"kubeconfig {kubeconfig or '(default)'}: {exc}") from None
    except OSError as exc:
        raise CheckError(f"kubeconfig {kubeconfig or '(default)'}: cannot read ({exc.strerror})") from None
    return Cluster(
        core=client.CoreV1Api(api),
        apps=client.AppsV1Api(api),
        batch=client.BatchV1Api(api),
        networking=client.NetworkingV1Api(api),
        discovery=client.DiscoveryV1Api(api),
        server=str(api.configuration.host),
    )


def _networks(entries: Sequence[str]) -> list[Net]:
    return [ipaddress.ip_network(e, strict=False) for e in entries]


def _within(net: Net, nets: Sequence[Net]) -> bool:
    return any(net.version == n.version and net.subnet_of(n) for n in nets)  # type: ignore[arg-type]


def _no_proxy_networks(no_proxy: NoProxy) -> list[Net]:
    """The IPs and CIDRs of NO_PROXY: what an address must fall in to bypass the proxy."""
    return list(no_proxy.networks())


def _name_covered(no_proxy: NoProxy, host: str) -> bool:
    """A name listed itself, or under a listed suffix."""
    names = [e.value.lstrip(".") for e in no_proxy.entries if e.kind in (Kind.HOST, Kind.SUFFIX)]
    return any(host == name or host.endswith(f".{name}") for name in names)


def check_cluster(settings: Settings, cluster: Cluster) -> list[Finding]:
    """Every finding, in a stable order: network coverage, the proxy itself, namespaces, workloads."""
    try:
        nodes = list(cluster.list(cluster.core.list_node))
        return [
            *_networks_findings(settings, cluster, nodes),
            *_proxy(settings, cluster, nodes),
            *_namespaces(settings, cluster),
        ]
    except Exception as exc:
        error = _explain(exc, cluster)
        if error is None:
            raise
        raise error from None


def _explain(exc: Exception, cluster: Cluster) -> CheckError | None:
    """A CheckError for an API or connection failure; None for anything else (a bug, to surface as is)."""
    status = getattr(exc, "status", None)
    if status in (401, 403):
        reason = getattr(exc, "reason", "")
        return CheckError(
            f"{cluster.server}: {status} {reason}: the credentials may not list what check reads (nodes, "
            "namespaces, services, endpointslices, servicecidrs, configmaps, secrets, pods, daemonsets, "
            "deployments, statefulsets, jobs, cronjobs): grant list on them, e.g. a ClusterRole bound to this user"
        )
    if status is not None:
        return CheckError(f"{cluster.server}: the API server answered {status} {getattr(exc, 'reason', '')}")
    name = type(exc).__name__
    if name in ("MaxRetryError", "NewConnectionError", "ProtocolError", "ConnectionRefusedError") or isinstance(
        exc, OSError
    ):
        return CheckError(f"{cluster.server}: cannot reach the API server ({name}); check --kubeconfig and --context")
    return None


def _networks_findings(settings: Settings, cluster: Cluster, nodes: list[Any]) -> Iterator[Finding]:
    allow = _networks(settings.allowed_sources())
    no_proxy = _no_proxy_networks(settings.no_proxy())
    for node in nodes:
        name = f"Node {node.metadata.name}"
        addresses = [a.address for a in (node.status.addresses or []) if a.type in ("InternalIP", "ExternalIP")]
        for address in addresses:
            net = ipaddress.ip_network(address)
            if settings.deployment.enabled and not _within(net, allow):
                yield Finding(
                    "node-outside-allow", name, "error",
                    f"address {address} is outside tinyproxy's Allow list: its host-network pods are refused "
                    "by the proxy (add it to cluster.nodeCidrs)",
                )  # fmt: skip
            if not _within(net, no_proxy):
                yield Finding(
                    "node-not-in-no-proxy", name, "warning",
                    f"address {address} is not covered by NO_PROXY: clients send requests to it through the "
                    "proxy (add it to cluster.nodeCidrs)",
                )  # fmt: skip
        for cidr in node.spec.pod_cidrs or ([node.spec.pod_cidr] if node.spec.pod_cidr else []):
            net = ipaddress.ip_network(cidr, strict=False)
            if settings.deployment.enabled and not _within(net, allow):
                yield Finding(
                    "pods-outside-allow", name, "error",
                    f"podCIDR {cidr} is outside tinyproxy's Allow list: pods on this node are refused by the proxy "
                    "(add it to cluster.podCidrs)",
                )  # fmt: skip
            if not _within(net, no_proxy):
                yield Finding(
                    "pods-not-in-no-proxy", name, "warning",
                    f"podCIDR {cidr} is not covered by NO_PROXY: requests to these pods go through the proxy "
                    "(add it to cluster.podCidrs)",
                )  # fmt: skip
    yield from _service_range(settings, cluster, no_proxy)
    yield from _api_server(cluster, no_proxy, settings.no_proxy())


def _service_range(settings: Settings, cluster: Cluster, no_proxy: list[Net]) -> Iterator[Finding]:
    """The ServiceCIDR objects where the server has them, else the `kubernetes` Service's IP."""
    ranges: list[tuple[str, str]] = []
    try:
        for item in cluster.list(cluster.networking.list_service_cidr):
            ranges += [(f"ServiceCIDR {item.metadata.name}", c) for c in item.spec.cidrs or []]
    except Exception as exc:
        if getattr(exc, "status", None) != 404 and not isinstance(exc, AttributeError):
            raise
    if not ranges:
        for svc in cluster.list(cluster.core.list_namespaced_service, namespace="default",
                                field_selector="metadata.name=kubernetes"):  # fmt: skip
            ranges += [("Service default/kubernetes", ip) for ip in svc.spec.cluster_ips or [svc.spec.cluster_ip]]
    for name, cidr in ranges:
        if not _within(ipaddress.ip_network(cidr, strict=False), no_proxy):
            yield Finding(
                "services-not-in-no-proxy", name, "warning",
                f"service range {cidr} is not covered by NO_PROXY: requests to Service IPs go through the proxy "
                "(add it to cluster.serviceCidrs)",
            )  # fmt: skip


def _api_server(cluster: Cluster, no_proxy: list[Net], composed: NoProxy) -> Iterator[Finding]:
    """The API server's endpoints (EndpointSlices of `kubernetes`) and the host clients are given."""
    endpoints: list[str] = []
    for slice_ in cluster.list(cluster.discovery.list_namespaced_endpoint_slice, namespace="default",
                               label_selector="kubernetes.io/service-name=kubernetes"):  # fmt: skip
        for endpoint in slice_.endpoints or []:
            endpoints += endpoint.addresses or []
    host = urlsplit(cluster.server).hostname or ""
    for address in sorted(set(endpoints)):
        if not _within(ipaddress.ip_network(address), no_proxy):
            yield Finding(
                "api-server-not-in-no-proxy", "EndpointSlice default/kubernetes", "warning",
                f"API server endpoint {address} is not covered by NO_PROXY (add it to cluster.apiServerIps)",
            )  # fmt: skip
    try:
        covered = _within(ipaddress.ip_network(host), no_proxy)
    except ValueError:
        covered = _name_covered(composed, host)
    if host and not covered:
        yield Finding(
            "api-server-not-in-no-proxy", f"API server {host}", "warning",
            f"the API server address {host} (from the kubeconfig) is not covered by NO_PROXY "
            "(add it to cluster.apiServerIps or cluster.apiServerHosts)",
        )  # fmt: skip


def _eligible(settings: Settings, node: Any) -> bool:
    labels = node.metadata.labels or {}
    if labels.get("kubernetes.io/os", "linux") != "linux":
        return False
    return settings.deployment.control_plane or CONTROL_PLANE_LABEL not in labels


def _proxy(settings: Settings, cluster: Cluster, all_nodes: list[Any]) -> Iterator[Finding]:
    d = settings.deployment
    if not d.enabled:
        return
    name = f"DaemonSet {d.namespace}/{d.service_name}"
    yield from _pod_security(settings, cluster)
    found = list(cluster.list(cluster.apps.list_namespaced_daemon_set, namespace=d.namespace,
                              field_selector=f"metadata.name={d.service_name}"))  # fmt: skip
    if not found:
        yield Finding("proxy-missing", name, "error", "the proxy DaemonSet does not exist: pods have no proxy")
        return
    template = found[0].spec.template.spec
    for container in [*(template.init_containers or []), *(template.containers or [])]:
        if image_is_mutable(container.image):
            yield Finding(
                "image-mutable-tag", name, "warning",
                f"container {container.name}: image {container.image!r} has no digest and no versioned tag, so "
                "nodes may run different builds of it (set a versioned tag and pin its digest, "
                "e.g. name:1.2.3@sha256:...)",
            )  # fmt: skip
    status = found[0].status
    ready, desired = status.number_ready or 0, status.desired_number_scheduled or 0
    if ready < desired:
        yield Finding("proxy-not-ready", name, "error", f"{ready} of {desired} proxy pods are ready")
    pods = cluster.list(cluster.core.list_namespaced_pod, namespace=d.namespace,
                        label_selector=f"{APP_LABEL}={d.service_name}")  # fmt: skip
    with_pod = {p.spec.node_name for p in pods if p.spec.node_name}
    nodes = [n for n in all_nodes if _eligible(settings, n)]
    missing = sorted(n.metadata.name for n in nodes if n.metadata.name not in with_pod)
    if missing:
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        yield Finding(
            "proxy-missing-on-nodes", name, "error",
            f"no proxy pod on {len(missing)} node(s): {shown} (a taint, a full node or a nodeSelector keeps it "
            "off; with internalTrafficPolicy Local their pods have no proxy)",
        )  # fmt: skip


def _pod_security(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    """The proxy's namespace enforcing a Pod Security level that refuses its pods (the label only, not the
    cluster-wide default of the admission configuration, which the API does not show)."""
    namespace = settings.deployment.namespace
    for ns in cluster.list(cluster.core.list_namespace, field_selector=f"metadata.name={namespace}"):
        level = (ns.metadata.labels or {}).get(POD_SECURITY_ENFORCE, "")
        if level in STRICTER_POD_SECURITY:
            yield Finding(
                "pod-security-too-strict", f"Namespace {namespace}", "warning",
                f"enforces Pod Security level {level!r}, which refuses the proxy's pods: they need 'privileged' "
                "(hostNetwork, hostPort, and the firewall init container's root user with NET_ADMIN) "
                f"(label it {POD_SECURITY_ENFORCE}=privileged, or set deployment.namespace to one that is)",
            )  # fmt: skip


def _data(obj: Any) -> dict[str, str]:
    if obj.kind == "Secret" or getattr(obj, "type", None):
        return {k: base64.b64decode(v).decode() for k, v in (obj.data or {}).items()}
    return dict(obj.data or {})


def _namespaces(settings: Settings, cluster: Cluster) -> Iterator[Finding]:
    values = plain_values(settings)
    listed = set(settings.proxy_config_namespaces)
    wanted = {ns: proxy_config_object(settings, ns, values) for ns in sorted(listed)}
    secret = settings.has_credentials
    call = cluster.core.list_secret_for_all_namespaces if secret else cluster.core.list_config_map_for_all_namespaces
    live: dict[str, dict[str, str]] = {}
    for obj in cluster.list(call, field_selector=f"metadata.name={CONFIG_NAME}"):
        obj.kind = "Secret" if secret else "ConfigMap"
        live[obj.metadata.namespace] = _data(obj)
    kind = "Secret" if secret else "ConfigMap"
    for ns, obj in wanted.items():
        expected = obj.get("stringData") or obj.get("data") or {}
        name = f"{kind} {ns}/{CONFIG_NAME}"
        if ns not in live:
            yield Finding("proxy-config-missing", name, "error", "missing: workloads that read it get no proxy env")
            continue
        differing = sorted(k for k in set(expected) | set(live[ns]) if expected.get(k) != live[ns].get(k))
        if differing:
            yield Finding(
                "proxy-config-differs", name, "warning",
                f"differs from the settings in {', '.join(differing)}: edited by hand, or the stack is not applied",
            )  # fmt: skip
    yield from _workloads(settings, cluster, listed, values)


_KINDS = (
    ("Deployment", "apps", "list_deployment_for_all_namespaces"),
    ("StatefulSet", "apps", "list_stateful_set_for_all_namespaces"),
    ("DaemonSet", "apps", "list_daemon_set_for_all_namespaces"),
    ("Job", "batch", "list_job_for_all_namespaces"),
    ("CronJob", "batch", "list_cron_job_for_all_namespaces"),
)


def _pod_template(kind: str, obj: Any) -> Any:
    if kind == "CronJob":
        return obj.spec.job_template.spec.template
    return obj.spec.template


def _workloads(settings: Settings, cluster: Cluster, namespaces: set[str], values: ProxyValues) -> Iterator[Finding]:
    opt_out = settings.injection.opt_out_annotation
    for kind, group, method in _KINDS:
        for obj in cluster.list(getattr(getattr(cluster, group), method)):
            ns = obj.metadata.namespace
            if ns not in namespaces or ns in settings.injection.exclude_namespaces:
                continue
            template = _pod_template(kind, obj)
            annotations = {**(obj.metadata.annotations or {}), **(template.metadata.annotations or {})}
            if annotations.get(opt_out) == "false":
                continue
            if obj.metadata.owner_references and kind == "Job":
                continue  # a CronJob's Job: the CronJob is reported
            name = f"{kind} {ns}/{obj.metadata.name}"
            try:
                selection = settings.runtimes.select(ns, annotations)
            except ValueError as exc:
                yield Finding("workload-runtimes", name, "warning", f"{exc}: treated as no runtime")
                selection = frozenset()
            expected = dict(env_pairs(values.select(selection)))
            ours = dict(env_pairs(values.select(RUNTIMES)))
            spec = template.spec
            for container in [*(spec.init_containers or []), *(spec.containers or [])]:
                problem = _container_problem(_as_dict(container), expected, ours)
                if problem:
                    yield Finding("workload-env", name, "warning", f"container {container.name}: {problem}")


def _as_dict(container: Any) -> dict[str, Any]:
    """The parts of a client-library container that the injection decision reads, as the API writes them."""
    env_from = []
    for source in container.env_from or []:
        entry: dict[str, Any] = {}
        if source.config_map_ref is not None:
            entry["configMapRef"] = {"name": source.config_map_ref.name}
        if source.secret_ref is not None:
            entry["secretRef"] = {"name": source.secret_ref.name}
        env_from.append(entry)
    env = [{"name": e.name, "value": e.value, "literal": e.value_from is None} for e in container.env or []]
    return {"env": env, "envFrom": env_from}


def _container_problem(container: dict[str, Any], expected: dict[str, Any], ours: dict[str, Any]) -> str:
    """What differs from what `render.env.additions` gives this container for its selection."""
    if reads_proxy_config(container):
        return ""  # the namespace's proxy-config, checked on its own
    env = {e["name"]: e for e in container["env"]}
    missing = [name for name in ENV_NAMES if name not in env]
    if missing:
        return f"lacks the proxy env ({', '.join(missing)}; expected envFrom {CONFIG_NAME} or the variables)"
    for name in ("NO_PROXY", "no_proxy"):
        var = env[name]
        if var["literal"] and var["value"] != expected[name]:
            return f"{name} is stale (differs from the composed NO_PROXY for its runtimes)"
    for runtime, variable in RUNTIME_VARIABLES.items():
        if variable in expected and variable not in env:
            return f"its runtimes select {runtime} but it lacks {variable} (recreate its pods, or it set a proxy name)"
        if variable not in expected and variable in env and env[variable]["value"] == ours.get(variable):
            return (
                f"has proxy-component's {variable} but its runtimes do not select {runtime}: injected before "
                "runtimes were opt-in (recreate its pods, or select the runtime)"
            )
    return ""
