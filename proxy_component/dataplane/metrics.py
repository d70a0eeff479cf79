"""The proxy's metrics: the exporter container beside tinyproxy, and what watches it (PodMonitor, alerts, dashboard).

The exporter (`images/proxy/exporter`, in the proxy's image) reads tinyproxy's stats page over loopback and its log
file, serves Prometheus' text format on `deployment.metrics.port`, and passes the log to its own stdout without the
probes' lines. Every builder here is pure and its output deterministic; nothing here reads a credential.
"""

from __future__ import annotations

import json
from typing import Any

from ..settings import STAT_HOST, Settings
from .common import labels, restricted_security_context
from .firewall import FIREWALL_TABLE

__all__ = [
    "ALERTS",
    "COUNTERS_CONTAINER",
    "COUNTERS_FILE",
    "DASHBOARD_KEY",
    "GENERATION_KEY",
    "LOG_DIR",
    "LOG_FILE",
    "LOG_VOLUME",
    "METRICS_CONTAINER",
    "firewall_counters_container",
    "grafana_dashboard",
    "grafana_dashboard_object",
    "log_file_container",
    "metrics_container",
    "metrics_objects",
    "pod_monitor",
    "prometheus_rule",
    "scrape_annotations",
]

Obj = dict[str, Any]

METRICS_CONTAINER = "metrics"
LOG_VOLUME = "log"
LOG_DIR = "/var/log/tinyproxy"
LOG_FILE = f"{LOG_DIR}/tinyproxy.log"
GENERATION_KEY = "generation"
"""The config object's key holding its generation (`proxy.config_generation`: no credential in what is hashed), which
the tinyproxy container's watcher logs and the exporter reads."""
DASHBOARD_KEY = "proxy-component.json"
EXPORTER = "proxy-exporter"
COUNTERS_CONTAINER = "firewall-counters"
COUNTERS_FILE = f"{LOG_DIR}/firewall.json"
COUNTERS_PERIOD = 15  # seconds between two listings of the kernel rules' counters


def scrape_annotations(settings: Settings) -> dict[str, str]:
    """The pod annotations a Prometheus that discovers pods by `prometheus.io/*` reads; none unless asked for."""
    m = settings.deployment.metrics
    if not (m.enabled and m.scrape_annotations):
        return {}
    return {"prometheus.io/path": "/metrics", "prometheus.io/port": str(m.port), "prometheus.io/scrape": "true"}


def log_file_container(settings: Settings) -> Obj:
    """An init container, as tinyproxy's UID, that makes the log file readable by tinyproxy's group (the exporter's):
    tinyproxy makes a new log file 0600, and keeps an existing file's mode."""
    d = settings.deployment
    return {
        "name": "log-file",
        "image": d.image,
        "imagePullPolicy": d.image_pull_policy,
        "command": ["/bin/sh", "-c", f"umask 007 && : >> {LOG_FILE}"],
        "resources": {"requests": {"cpu": "1m", "memory": "4Mi"}, "limits": {"memory": "16Mi"}},
        "securityContext": restricted_security_context(),
        "volumeMounts": [{"name": LOG_VOLUME, "mountPath": LOG_DIR}],
    }


def metrics_container(settings: Settings) -> Obj:
    """The exporter: its own UID (the firewall refuses tinyproxy's connections to the node, the stats page's among
    them), tinyproxy's group (the log), no capability, no readiness probe (an exporter that is not ready must never
    take the node's proxy out of its Service)."""
    d = settings.deployment
    m = d.metrics
    return {
        "name": METRICS_CONTAINER,
        "image": d.image,
        "imagePullPolicy": d.image_pull_policy,
        "command": [
            EXPORTER,
            "--listen",
            f":{m.port}",
            "--stats",
            f"127.0.0.1:{d.port}",
            "--stat-host",
            STAT_HOST,
            "--log",
            LOG_FILE,
            "--generation-file",
            f"{d.config_dir}/{GENERATION_KEY}",
            "--max-clients",
            str(d.max_clients),
            *(["--firewall-counters", COUNTERS_FILE] if m.firewall_counters else []),
        ],
        "ports": [{"name": "metrics", "containerPort": m.port, "hostPort": m.port, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {"host": "127.0.0.1", "port": m.port, "path": "/healthz"},
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        },
        "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        "securityContext": {**restricted_security_context(), "runAsUser": m.run_as_user, "runAsGroup": d.run_as_user},
        "volumeMounts": [
            {"name": "config", "mountPath": d.config_dir, "readOnly": True},
            {"name": LOG_VOLUME, "mountPath": LOG_DIR},
        ],
    }


def firewall_counters_container(settings: Settings) -> Obj:
    """`metrics.firewallCounters`: root with NET_ADMIN alone (as the firewall init container), on the node's network,
    listing the proxy's nftables table as JSON every `COUNTERS_PERIOD` seconds into the log volume, where the
    exporter reads the refusing rules' counters by their comments (`firewall.FIREWALL_RULES`). It reads the table and
    writes one file, readable by the pod's group (the exporter's); it has no listener and reads nothing a client
    sends. The image's busybox has no `mv`: the file is rewritten in place, and the exporter keeps the last
    listing that parsed."""
    d = settings.deployment
    script = "; ".join(
        [
            "trap 'exit 0' TERM INT",
            "umask 027",
            f"while :; do nft -j list table inet {FIREWALL_TABLE} > {COUNTERS_FILE}",
            f"sleep {COUNTERS_PERIOD} & wait $!",
            "done",
        ]
    )
    return {
        "name": COUNTERS_CONTAINER,
        "image": d.firewall.image,
        "imagePullPolicy": d.image_pull_policy,
        "command": ["/bin/sh", "-c", script],
        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}},
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": d.run_as_user,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "privileged": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        },
        "volumeMounts": [{"name": LOG_VOLUME, "mountPath": LOG_DIR}],
    }


def _labels(settings: Settings) -> dict[str, str]:
    return {**labels(settings), **settings.deployment.metrics.labels}


def _pod_selector(settings: Settings) -> str:
    """The proxy's pods in PromQL: its namespace, and a DaemonSet pod's name (the DaemonSet's and 5 characters)."""
    d = settings.deployment
    return f'namespace="{d.namespace}", pod=~"{d.service_name}-[a-z0-9]{{5}}"'


def pod_monitor(settings: Settings) -> Obj:
    """prometheus-operator's PodMonitor for the exporter's port; each series gets the node's name as `node`."""
    d = settings.deployment
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": d.service_name, "namespace": d.namespace, "labels": _labels(settings)},
        "spec": {
            "selector": {"matchLabels": {"app": d.service_name}},
            "namespaceSelector": {"matchNames": [d.namespace]},
            "podMetricsEndpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": "15s",
                    "relabelings": [
                        {
                            "sourceLabels": ["__meta_kubernetes_pod_node_name"],
                            "targetLabel": "node",
                            "action": "replace",
                        }
                    ],
                }
            ],
        },
    }


def _doc(anchor: str) -> str:
    return f"https://github.com/proxy-component/proxy-component/blob/main/docs/guides/operating.md#{anchor}"


def _alerts(settings: Settings) -> list[Obj]:
    pods = _pod_selector(settings)
    d = settings.deployment
    return [
        {
            "alert": "ProxyDown",
            "expr": f"tinyproxy_up{{{pods}}} == 0 or up{{{pods}}} == 0",
            "for": "2m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "The node proxy {{ $labels.pod }} (node {{ $labels.node }}) does not answer.",
                "runbook": "The node's pods have no egress. kubectl -n "
                f"{d.namespace} describe pod {{{{ $labels.pod }}}}; kubectl -n {d.namespace} logs "
                "{{ $labels.pod }} -c metrics; delete the pod to restart it.",
                "runbook_url": _doc("one-nodes-proxy-down"),
            },
        },
        {
            "alert": "ProxyAtCapacity",
            "expr": f"tinyproxy_connections_open{{{pods}}} >= 0.9 * tinyproxy_max_clients{{{pods}}}"
            f" or increase(tinyproxy_capacity_reached_total{{{pods}}}[10m]) > 0",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The node proxy {{ $labels.pod }} holds 90% of maxClients or refused connections as full.",
                "runbook": "Find who holds connections (kubectl logs -c metrics: refusals at accept name the last "
                "address); more clients than cluster.maxPodsPerNode, or another node's pods while their proxy is away: "
                "set cluster.maxPodsPerNode to the nodes' real limit, or raise deployment.maxClients.",
                "runbook_url": _doc("at-capacity"),
            },
        },
        {
            "alert": "ProxyRefusalsJumping",
            "expr": f"sum by (namespace, pod) (rate(tinyproxy_denied_connections_total{{{pods}}}[5m])) > 0.2"
            f" and sum by (namespace, pod) (rate(tinyproxy_denied_connections_total{{{pods}}}[5m]))"
            f" > 3 * sum by (namespace, pod) (rate(tinyproxy_denied_connections_total{{{pods}}}[1h] offset 5m))",
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The node proxy {{ $labels.pod }} refuses three times as many requests as the hour before.",
                "runbook": "kubectl logs -c metrics names each refusal's cause and client: a pod outside Allow (a new "
                "pod CIDR), a filtered destination, a CONNECT port not allowed.",
                "runbook_url": _doc("refusals-jumping"),
            },
        },
        {
            "alert": "ProxyUpstreamFailing",
            "expr": f"sum by (namespace, pod) (increase(tinyproxy_upstream_failures_total{{{pods}}}[5m])) > 0",
            "for": "5m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "The corporate proxy does not serve the node proxy {{ $labels.pod }}.",
                "runbook": "tinyproxy_upstream_failures_total by cause: unreachable on every node, the corporate proxy "
                "is down, call its owners; on one node, that node's route or firewall; auth (it answers 407), the "
                "credentials in proxy.upstream were rotated or locked there. Confirm with proxy-component check.",
                "runbook_url": _doc("the-corporate-proxy-down"),
            },
        },
        {
            "alert": "ProxyConfigNotReloaded",
            "expr": f'increase(tinyproxy_config_reloads_total{{{pods}, result="failure"}}[1h]) > 0'
            f" or count by (namespace) (count by (namespace, generation) (tinyproxy_config_info{{{pods}}})) > 1",
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "The node proxies of {{ $labels.namespace }} run different configs, or a reload failed.",
                "runbook": "kubectl logs -c metrics shows the failed reload; proxy-component rollout shows the pods "
                "on an old config; delete those pods to load the current one.",
                "runbook_url": _doc("config-not-reloaded"),
            },
        },
    ]


ALERTS = ("ProxyDown", "ProxyAtCapacity", "ProxyRefusalsJumping", "ProxyUpstreamFailing", "ProxyConfigNotReloaded")


def prometheus_rule(settings: Settings) -> Obj:
    """prometheus-operator's PrometheusRule: the proxy's alerts, each with a runbook line and a runbook URL, and a
    recording rule for the clients' requests (tinyproxy's connections less its stats page's)."""
    d = settings.deployment
    pods = _pod_selector(settings)
    records = [
        {
            "record": "proxy_component:client_requests:rate5m",
            "expr": f"rate(tinyproxy_connections_total{{{pods}}}[5m])"
            f" - ignoring() rate(tinyproxy_stathost_requests_total{{{pods}}}[5m])",
        }
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": d.service_name, "namespace": d.namespace, "labels": _labels(settings)},
        "spec": {
            "groups": [
                {"name": "proxy-component.alerts", "rules": _alerts(settings)},
                {"name": "proxy-component.records", "rules": records},
            ]
        },
    }


def _panel(pid: int, title: str, exprs: list[tuple[str, str]], x: int, y: int, unit: str = "short") -> Obj:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend} for i, (expr, legend) in enumerate(exprs)
        ],
    }


def grafana_dashboard(settings: Settings) -> str:
    """The dashboard's JSON, keys sorted: per node, the clients' requests, connections open against maxClients,
    refusals by cause, upstream failures, reloads and whether tinyproxy answers."""
    pods = _pod_selector(settings)
    panels = [
        _panel(
            1,
            "Client requests per second, by node",
            [
                (
                    f"rate(tinyproxy_connections_total{{{pods}}}[5m])"
                    f" - ignoring() rate(tinyproxy_stathost_requests_total{{{pods}}}[5m])",
                    "{{node}}",
                )
            ],
            0,
            0,
            "reqps",
        ),
        _panel(
            2,
            "Connections open, and maxClients",
            [
                (f"tinyproxy_connections_open{{{pods}}}", "{{node}}"),
                (f"max(tinyproxy_max_clients{{{pods}}})", "maxClients"),
            ],
            12,
            0,
        ),
        _panel(
            3,
            "Refusals per second, by cause",
            [
                (f"sum by (cause) (rate(tinyproxy_refusals_total{{{pods}}}[5m]))", "{{cause}}"),
                (f"sum(rate(tinyproxy_bad_connections_total{{{pods}}}[5m]))", "bad (malformed, CONNECT port)"),
                (f"sum(increase(tinyproxy_capacity_reached_total{{{pods}}}[5m]))", "capacity reached"),
            ],
            0,
            8,
        ),
        _panel(
            4,
            "Upstream failures per second, by node and cause",
            [(f"sum by (node, cause) (rate(tinyproxy_upstream_failures_total{{{pods}}}[5m]))", "{{node}} {{cause}}")],
            12,
            8,
        ),
        _panel(
            5,
            "Config reloads and generation",
            [
                (f"sum by (result) (increase(tinyproxy_config_reloads_total{{{pods}}}[1h]))", "reloads {{result}}"),
                (f"count by (generation) (tinyproxy_config_info{{{pods}}})", "nodes on {{generation}}"),
            ],
            0,
            16,
        ),
        _panel(6, "tinyproxy answering, by node", [(f"tinyproxy_up{{{pods}}}", "{{node}}")], 12, 16),
    ]
    dashboard = {
        "title": "proxy-component: node proxies",
        "uid": "proxy-component-node-proxies",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "tags": ["proxy-component", "tinyproxy"],
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
        },
        "panels": panels,
    }
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def grafana_dashboard_object(settings: Settings) -> Obj:
    """A ConfigMap with the dashboard, labelled for Grafana's dashboard sidecar (`grafana_dashboard: "1"`)."""
    d = settings.deployment
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{d.service_name}-dashboard",
            "namespace": d.namespace,
            "labels": {**_labels(settings), "grafana_dashboard": "1"},
        },
        "data": {DASHBOARD_KEY: grafana_dashboard(settings)},
    }


def metrics_objects(settings: Settings) -> list[Obj]:
    """The PodMonitor, the PrometheusRule and the dashboard's ConfigMap, whatever the settings ask to create:
    `render --format metrics` prints them for a cluster that applies them itself."""
    return [pod_monitor(settings), prometheus_rule(settings), grafana_dashboard_object(settings)]
