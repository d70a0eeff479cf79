"""`egress` reading a cluster (live/egress.py) through the real `kubernetes` client, against a loopback server that
plays the API server: the proxy's pods by their label, each one's log from the container that holds tinyproxy's
lines (with timestamps), every pod and node; a log it may not read is named, not fatal; exactly the requests of
`egress_accesses`, which `render --format egress-rbac` grants."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from proxy_component.live.access import egress_accesses, egress_rbac_objects
from proxy_component.live.cluster import Cluster
from proxy_component.live.egress import read_egress
from proxy_component.settings import parse_settings
from tests import fake_api
from tests.unit.test_egress import PODS, access

SETTINGS = parse_settings(
    {"cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}, "namespaces": ["shop"]}
)
PROXIES = {
    "items": [
        {"metadata": {"name": "http-proxy-a", "namespace": "kube-system"}, "spec": {"nodeName": "node-a"}},
        {"metadata": {"name": "http-proxy-b", "namespace": "kube-system"}, "spec": {"nodeName": "node-b"}},
    ],
    "metadata": {},
}
NODES = {
    "items": [
        {"metadata": {"name": "node-b"}, "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.11"}]}}
    ],
    "metadata": {},
}


def test_each_proxy_pods_log_joined_to_every_pod_and_node() -> None:
    seen: list[str] = []

    def answer(path: str) -> tuple[Any, ...]:
        seen.append(path)
        routes: dict[str, tuple[int, Any]] = {
            "/api/v1/namespaces/kube-system/pods": (200, PROXIES),
            "/api/v1/pods": (200, {"items": PODS, "metadata": {}}),
            "/api/v1/nodes": (200, NODES),
        }
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-a/log":
            return 200, ("2026-11-28T10:00:00.5Z " + access("10.244.1.5", "github.com") + "\n").encode(), "text/plain"
        if path == "/api/v1/namespaces/kube-system/pods/http-proxy-b/log":
            return 403, json.dumps({"kind": "Status", "code": 403, "message": "forbidden"}).encode()
        status, body = routes.get(path, (404, {"kind": "Status", "code": 404}))
        return status, json.dumps(body).encode()

    with fake_api.api_server(answer) as api:
        cluster = Cluster({"core": client.CoreV1Api(api)}, server="https://api.test")
        log, index, unread = read_egress(SETTINGS, cluster, since_seconds=3600)
    (line,) = log.lines
    assert (line.node, line.host) == ("node-a", "github.com")
    assert index.client(line.client, line.time).key == ("shop", "Deployment/web")
    assert index.client("192.0.2.11", line.time).key == ("", "Node/node-b")
    assert unread == ["node-b (http-proxy-b: 403)"]
    assert seen == [
        "/api/v1/namespaces/kube-system/pods",
        "/api/v1/namespaces/kube-system/pods/http-proxy-a/log",
        "/api/v1/namespaces/kube-system/pods/http-proxy-b/log",
        "/api/v1/pods",
        "/api/v1/nodes",
    ]


def test_the_role_grants_exactly_the_requests() -> None:
    accesses = egress_accesses(SETTINGS)
    rules = {
        (o["kind"], o["metadata"].get("namespace")): o["rules"]
        for o in egress_rbac_objects(SETTINGS)
        if o["kind"] in ("Role", "ClusterRole")
    }
    assert rules == {
        ("ClusterRole", None): [{"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list"]}],
        ("Role", "kube-system"): [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
    }
    assert len(accesses) == 4
