"""Which running pods hold old proxy values (live/stale.py), against a fake API serving the API server's JSON.

Each case builds the pods and owners the way the API server and the kubelet leave them (ownerReferences,
managedFields times, containers' startedAt) and asserts the owners reported, by name, and why.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.live.check import check_cluster
from proxy_component.live.cluster import Cluster
from proxy_component.live.stale import Owner, content_time, current_target, stale_owners
from proxy_component.render import manifests
from proxy_component.render.digest import VALUES_ANNOTATION, split_digest
from proxy_component.render.trust import BUNDLE_NAME
from proxy_component.settings import Settings, parse_settings
from tests.pki import make_ca
from tests.unit.test_check_proxy import SETTINGS, FakeApi

NS = "apps"
BASE = {**SETTINGS, "namespaces": [NS, "web"]}
CHANGED = "2026-11-20T10:00:00Z"  # when proxy-config's data last changed
BEFORE, SAME, AFTER = "2026-11-20T09:59:59Z", CHANGED, "2026-11-20T10:00:01Z"
TRUST = make_ca().cert_pem


def _config(namespace: str = NS, changed: str = CHANGED, name: str = "proxy-config") -> dict[str, Any]:
    """proxy-config as the API server returns it: pulumi's apply owns its data (at `changed`); a later label-only
    write by another manager must not count as a data change."""
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-11-01T00:00:00Z",
                     "managedFields": [
                         {"manager": "pulumi-kubernetes", "operation": "Apply", "time": changed,
                          "fieldsV1": {"f:data": {"f:HTTP_PROXY": {}}, "f:metadata": {}}},
                         {"manager": "kubectl-label", "operation": "Update", "time": "2026-11-25T00:00:00Z",
                          "fieldsV1": {"f:metadata": {"f:labels": {}}}},
                     ]},
        "data": {"HTTP_PROXY": "http://x:8888", "JDK_JAVA_OPTIONS": "-D", "NODE_EXTRA_CA_CERTS": "/x"},
    }  # fmt: skip


def _pod(
    name: str,
    *,
    owner: tuple[str, str] | None = None,
    stamp: str | None = None,
    started: str | None = AFTER,
    env_from: bool = False,
    env: dict[str, str] | None = None,
    trust_volume: bool = False,
    phase: str = "Running",
    namespace: str = NS,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "app:1"}
    if env_from:
        container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if stamp:
        meta["annotations"] = {VALUES_ANNOTATION: stamp}
    spec: dict[str, Any] = {"containers": [container]}
    if trust_volume:
        spec["volumes"] = [{"name": BUNDLE_NAME, "configMap": {"name": BUNDLE_NAME}}]
    state = {"running": {"startedAt": started}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {"metadata": meta, "spec": spec,
            "status": {"phase": phase, "containerStatuses": [{"name": "app", "state": state}]}}  # fmt: skip


def _owned(kind: str, name: str, parent: tuple[str, str] | None, namespace: str = NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if parent:
        meta["ownerReferences"] = [{"kind": parent[0], "name": parent[1], "controller": True}]
    return {"metadata": meta}


def _cluster(objects: dict[str, list[dict[str, Any]]]) -> Cluster:
    api = FakeApi(objects)
    return Cluster(clients={"core": api, "apps": api, "batch": api, "networking": api}, server="https://127.0.0.1:1")


def _refs(owners: list[Owner]) -> list[tuple[str, bool, tuple[str, ...]]]:
    return [(o.ref, o.restartable, tuple(p.name for p in o.pods)) for o in owners]


def test_a_digest_other_than_the_current_is_stale_and_owners_are_named_through_replicasets_and_jobs() -> None:
    settings = parse_settings(BASE)
    current = current_target(settings)
    old = "0123456789abcdef-none"
    pods = [
        _pod("web-1-a", owner=("ReplicaSet", "web-1"), stamp=old),
        _pod("web-1-b", owner=("ReplicaSet", "web-1"), stamp=old),
        _pod("web-2-a", owner=("ReplicaSet", "web-2"), stamp=current),  # the new ReplicaSet: current
        _pod("db-0", owner=("StatefulSet", "db"), stamp=old),
        _pod("agent-x", owner=("DaemonSet", "agent"), stamp=current),
        _pod("nightly-1-q", owner=("Job", "nightly-1"), stamp=old),
        _pod("once-z", owner=("Job", "once"), stamp=old),
        _pod("loose", stamp=old),
        _pod("orphan-rs-a", owner=("ReplicaSet", "orphan-rs"), stamp=old),
        _pod("done", owner=("Job", "once"), stamp=old, phase="Succeeded"),  # runs nothing any more
        _pod("mine", stamp=old, namespace="web"),
    ]
    objects = {
        "namespaced_config_map": [_config(), _config("web")],
        "namespaced_pod": pods,
        "namespaced_replica_set": [
            _owned("ReplicaSet", "web-1", ("Deployment", "web")),
            _owned("ReplicaSet", "web-2", ("Deployment", "web")),
            _owned("ReplicaSet", "orphan-rs", None),
        ],
        "namespaced_job": [_owned("Job", "nightly-1", ("CronJob", "nightly")), _owned("Job", "once", None)],
    }
    owners = stale_owners(settings, _cluster(objects))
    assert _refs(owners) == [
        ("CronJob apps/nightly", False, ("nightly-1-q",)),
        ("Deployment apps/web", True, ("web-1-a", "web-1-b")),
        ("Job apps/once", False, ("once-z",)),
        ("Pod apps/loose", True, ("loose",)),
        ("ReplicaSet apps/orphan-rs", True, ("orphan-rs-a",)),
        ("StatefulSet apps/db", True, ("db-0",)),
        ("Pod web/mine", True, ("mine",)),
    ]
    assert owners[1].pods[0].reason == f"{VALUES_ANNOTATION} {old} is not the current {current}"
    only = stale_owners(settings, _cluster(objects), namespaces=["web"])
    assert _refs(only) == [("Pod web/mine", True, ("mine",))]


@pytest.mark.parametrize(
    ("started", "stale"),
    [(BEFORE, True), (SAME, False), (AFTER, False), (None, False)],
    ids=["before", "same-second", "after", "not-running"],
)
def test_a_container_reading_proxy_config_is_stale_when_it_started_before_its_data_changed(
    started: str | None, stale: bool
) -> None:
    settings = parse_settings(BASE)
    pods = [
        _pod("env-from", owner=("StatefulSet", "s"), env_from=True, started=started),
        _pod("by-reference", owner=("DaemonSet", "d"), stamp="reference", started=started, env={"HTTP_PROXY": "x"}),
    ]
    # The transform by reference: valueFrom on proxy-config's keys.
    pods[1]["spec"]["containers"][0]["env"] = [
        {"name": "HTTP_PROXY", "valueFrom": {"configMapKeyRef": {"name": "proxy-config", "key": "HTTP_PROXY"}}}
    ]
    owners = stale_owners(settings, _cluster({"namespaced_config_map": [_config()], "namespaced_pod": pods}))
    assert [o.ref for o in owners] == (["DaemonSet apps/d", "StatefulSet apps/s"] if stale else [])
    if stale:
        assert owners[1].pods[0].reason == (
            "container app started 2026-11-20T09:59:59Z, before proxy-config changed at 2026-11-20T10:00:00Z: it "
            "holds the values it read then"
        )


def test_a_pod_with_none_of_ours_is_not_judged() -> None:
    settings = parse_settings(BASE)
    pods = [_pod("plain", owner=("StatefulSet", "s"), started=BEFORE, env={"HTTP_PROXY": "http://own:3128"})]
    assert stale_owners(settings, _cluster({"namespaced_config_map": [_config()], "namespaced_pod": pods})) == []


def test_content_time_is_the_last_write_of_the_data_else_the_creation() -> None:
    assert content_time(_config()) is not None
    assert str(content_time(_config())) == "2026-11-20 10:00:00+00:00", "the label-only write is not a data change"
    bare = {"metadata": {"name": "x", "creationTimestamp": "2026-01-02T03:04:05Z"}}
    assert str(content_time(bare)) == "2026-01-02 03:04:05+00:00"
    assert content_time(None) is None


def _trusted() -> Settings:
    return parse_settings({**BASE, "proxy": {"upstream": {"url": "http://192.0.2.10:3128", "trustedCa": TRUST}}})


def test_a_ca_rotation_makes_only_the_jvm_and_node_pods_stale() -> None:
    """The env part is current, the trust part is the old CA's: the JVM (truststore loaded at start) and Node
    (NODE_EXTRA_CA_CERTS read at start) need a restart; curl and Python read the updated file."""
    settings = _trusted()
    env, trust = split_digest(current_target(settings))
    assert trust != "none"
    rotated = f"{env}-00000000deadbeef"
    pods = [
        _pod("jvm", owner=("StatefulSet", "jvm"), stamp=rotated, trust_volume=True,
             env={"JDK_JAVA_OPTIONS": "-Djavax.net.ssl.trustStore=/etc/proxy-component/trust/truststore.p12"}),
        _pod("node", owner=("StatefulSet", "node"), stamp=rotated, trust_volume=True,
             env={"NODE_EXTRA_CA_CERTS": "/etc/proxy-component/trust/corporate-ca.crt"}),
        _pod("curl", owner=("StatefulSet", "curl"), stamp=rotated, trust_volume=True,
             env={"SSL_CERT_FILE": "/etc/proxy-component/trust/ca-bundle.crt"}),
        _pod("jvm-no-mount", owner=("StatefulSet", "plain-jvm"), stamp=rotated, env={"JDK_JAVA_OPTIONS": "-Dx"}),
    ]  # fmt: skip
    objects = {"namespaced_config_map": [_config(), _config(name=BUNDLE_NAME)], "namespaced_pod": pods}
    owners = stale_owners(settings, _cluster(objects))
    assert [o.ref for o in owners] == ["StatefulSet apps/jvm", "StatefulSet apps/node"]
    assert "container app (JVM) read it at start" in owners[0].pods[0].reason
    assert "container app (Node) read it at start" in owners[1].pods[0].reason


def test_by_reference_a_node_container_started_before_proxy_trust_changed_is_stale() -> None:
    settings = _trusted()
    pods = [
        _pod("node", owner=("StatefulSet", "node"), env_from=True, trust_volume=True, started=BEFORE),
        _pod("curl", owner=("StatefulSet", "curl"), trust_volume=True, started=BEFORE,
             env={"SSL_CERT_FILE": "/etc/proxy-component/trust/ca-bundle.crt"}),
    ]  # fmt: skip
    # proxy-config's data changed long before both started; proxy-trust's after (a CA rotation).
    objects = {
        "namespaced_config_map": [_config(changed="2026-11-01T00:00:00Z"), _config(name=BUNDLE_NAME)],
        "namespaced_pod": pods,
    }
    owners = stale_owners(settings, _cluster(objects))
    assert [o.ref for o in owners] == ["StatefulSet apps/node"], "envFrom gave it NODE_EXTRA_CA_CERTS"
    assert "(JVM, Node) started 2026-11-20T09:59:59Z, before proxy-trust changed" in owners[0].pods[0].reason


def test_replicasets_and_jobs_are_read_only_where_a_pod_is_stale() -> None:
    settings = parse_settings(BASE)
    current = current_target(settings)
    objects = {
        "namespaced_config_map": [_config(), _config("web")],
        "namespaced_pod": [_pod("a", owner=("ReplicaSet", "r"), stamp=current)],
    }
    cluster = _cluster(objects)
    assert stale_owners(settings, cluster) == []
    assert {a.api.resource for a in cluster.accessed} == {"configmaps", "pods"}


def test_check_reports_each_stale_owner_once_with_what_to_do() -> None:
    settings = parse_settings(BASE)
    rendered = manifests(settings)
    configs = [o for o in rendered if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "proxy-config"]
    for config in configs:
        config["metadata"]["managedFields"] = _config()["metadata"]["managedFields"]
    pods = [
        _pod("web-1-a", owner=("ReplicaSet", "web-1"), env_from=True, started=BEFORE),
        _pod("web-1-b", owner=("ReplicaSet", "web-1"), env_from=True, started=BEFORE),
        _pod("nightly-1-q", owner=("Job", "nightly-1"), env_from=True, started=BEFORE),
    ]
    objects: dict[str, list[dict[str, Any]]] = {
        "node": [], "namespace": [], "service_cidr": [], "namespaced_config_map": configs, "namespaced_pod": pods,
        "namespaced_replica_set": [_owned("ReplicaSet", "web-1", ("Deployment", "web"))],
        "namespaced_job": [_owned("Job", "nightly-1", ("CronJob", "nightly"))],
    }  # fmt: skip
    findings = [f for f in check_cluster(settings, _cluster(objects)) if f.kind == "pods-stale"]
    assert [(f.object, f.severity) for f in findings] == [
        ("CronJob apps/nightly", "warning"),
        ("Deployment apps/web", "warning"),
    ]
    assert findings[0].message.endswith(
        "a CronJob is not restarted by rollout: its pods finish with the values they started with"
    )
    assert findings[1].message.startswith("2 running pods hold old proxy values (the first: container app started")
    assert findings[1].message.endswith("restart it: proxy-component rollout, or kubectl rollout restart")
