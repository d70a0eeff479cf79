"""`proxy-component egress` against a live cluster: each proxy pod's log (its access lines), every pod and node of
the cluster (to join client addresses), through `cluster.Cluster` with the requests of `egress_accesses`.

Least privilege: `render --format egress-rbac` gives exactly these (a ClusterRole to list pods and nodes; a Role in
the proxy's namespace to list its pods and read their logs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..dataplane.common import APP_LABEL
from ..dataplane.metrics import METRICS_CONTAINER
from ..egress import Event, PodIndex, events
from ..settings import Settings
from .access import egress_accesses
from .cluster import ALL_PODS, NODES, POD_LOGS, PODS, Access, Cluster

__all__ = ["egress_accesses", "read_egress"]


def log_container(settings: Settings) -> str:
    """The container whose stdout holds tinyproxy's lines: the metrics container's (it passes on tinyproxy's log
    file) when metrics are on, else tinyproxy's own."""
    return METRICS_CONTAINER if settings.deployment.metrics.enabled else "tinyproxy"


def read_egress(
    settings: Settings, cluster: Cluster, since_seconds: int | None
) -> tuple[Iterator[Event], PodIndex, list[str]]:
    """The proxy pods, every pod and node (the index that joins client addresses), then each proxy pod's log (of
    the last `since_seconds`, all it has when None) as a stream of events: read as the report consumes it, so a
    fleet's day of access lines is never held in memory. The third item names the nodes whose proxy's log could
    not be read (403, 404) or was cut short (the connection lost: the lines before are counted); it is complete
    once the events are."""
    d = settings.deployment
    container = log_container(settings)
    proxies = list(cluster.list_json(Access(PODS, d.namespace), label_selector=f"{APP_LABEL}={d.service_name}"))
    pods = list(cluster.list_json(Access(ALL_PODS)))
    index = PodIndex(pods, list(cluster.list_json(Access(NODES))))
    unread: list[str] = []

    def stream() -> Iterator[Event]:
        for pod in proxies:
            name = pod["metadata"]["name"]
            node = (pod.get("spec") or {}).get("nodeName") or name
            kwargs: dict[str, Any] = {"container": container, "timestamps": True}
            if since_seconds is not None:
                kwargs["since_seconds"] = since_seconds
            read = 0
            try:
                for event in events(
                    cluster.log_lines(Access(POD_LOGS, d.namespace), name, d.namespace, **kwargs), node
                ):
                    read += 1
                    yield event
            except Exception as exc:
                status = getattr(exc, "status", None)
                if status is not None:
                    unread.append(f"{node} ({name}: {status})")
                elif _cut_short(exc):
                    unread.append(f"{node} ({name}: the read was cut short after {read} events)")
                else:
                    raise

    return stream(), index, unread


def _cut_short(exc: BaseException) -> bool:
    """A log's read ended by the connection (reset, closed early, a read timeout), not by this code."""
    import urllib3

    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError))
