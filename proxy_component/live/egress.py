"""`proxy-component egress` against a live cluster: each proxy pod's log (its access lines), every pod and node of
the cluster (to join client addresses), through `cluster.Cluster` with the requests of `egress_accesses`.

Least privilege: `render --format egress-rbac` gives exactly these (a ClusterRole to list pods and nodes; a Role in
the proxy's namespace to list its pods and read their logs)."""

from __future__ import annotations

from typing import Any

from ..dataplane.common import APP_LABEL
from ..dataplane.metrics import METRICS_CONTAINER
from ..egress import Log, PodIndex, parse_log
from ..settings import Settings
from .access import egress_accesses
from .cluster import ALL_PODS, NODES, POD_LOGS, PODS, Access, Cluster

__all__ = ["egress_accesses", "read_egress"]


def log_container(settings: Settings) -> str:
    """The container whose stdout holds tinyproxy's lines: the metrics container's (it passes on tinyproxy's log
    file) when metrics are on, else tinyproxy's own."""
    return METRICS_CONTAINER if settings.deployment.metrics.enabled else "tinyproxy"


def read_egress(settings: Settings, cluster: Cluster, since_seconds: int | None) -> tuple[Log, PodIndex, list[str]]:
    """Each proxy pod's log (of the last `since_seconds`, all it has when None), joined: the log, the index of
    every pod and node, and the nodes whose proxy's log could not be read (403, 404: named, not fatal)."""
    d = settings.deployment
    container = log_container(settings)
    log = Log()
    unread: list[str] = []
    for pod in cluster.list_json(Access(PODS, d.namespace), label_selector=f"{APP_LABEL}={d.service_name}"):
        name = pod["metadata"]["name"]
        node = (pod.get("spec") or {}).get("nodeName") or name
        kwargs: dict[str, Any] = {"container": container, "timestamps": True}
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        try:
            text = str(cluster.request(Access(POD_LOGS, d.namespace), name, d.namespace, **kwargs))
        except Exception as exc:
            if getattr(exc, "status", None) is None:
                raise
            unread.append(f"{node} ({name}: {getattr(exc, 'status', '?')})")
            continue
        log.extend(parse_log(text, node))
    pods = list(cluster.list_json(Access(ALL_PODS)))
    nodes = list(cluster.list_json(Access(NODES)))
    return log, PodIndex(pods, nodes), unread
