"""Stale pods on the test cluster (pytest -m "engine or cluster"): real kube-apiserver, controller-manager and
scheduler, kwok running the pods (scripts/cluster), the program under the real engine.

1. 50 Deployments and 10 StatefulSets in three namespaces, half with `envFrom: proxy-config` written by their
   authors, half given the env by the stack transform; a NO_PROXY entry added with `pulumi up`: the transform's
   workloads roll (their templates changed), the envFrom ones keep their pods, and `check` names exactly those.
2. A CA rotation: the JVM and Node workloads that read the CA at start are reported, the one that reads the
   mounted file is not, though the files of all three changed.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.live.check import check_cluster
from proxy_component.live.cluster import connect
from proxy_component.live.stale import stale_owners
from proxy_component.render import manifests
from proxy_component.render.trust import BUNDLE_NAME, JAVA_TRUST_OPTIONS, MOUNT_PATH
from proxy_component.settings import parse_settings
from tests.kwok_cluster import kwok_cluster
from tests.pki import make_ca

from .conftest import Project

pytestmark = [pytest.mark.engine, pytest.mark.cluster]
NAMESPACES = ("apps", "web", "data")
DEPLOYMENTS, STATEFULSETS, PDBS = 50, 10, 5
SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.0.0.0/24"], "nodeCidrs": ["192.0.2.0/24"]},
    "proxy": {"httpProxy": "http://proxy.corp.example:3128"},
    "deployment": {"enabled": False},
    "namespaces": list(NAMESPACES),
}


class Cluster:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with kwok_cluster(tmp_path_factory.mktemp("cluster"), "pc-stale", 3) as kubeconfig:
        live = Cluster(kubeconfig)
        for _ in range(60):
            if len(live.get("nodes")["items"]) == 3:
                break
            time.sleep(1)
        yield live


def _names(kind: str, count: int, env_from: bool) -> set[str]:
    """The program's workloads of one kind and one way of getting the env (tests/fixtures/programs/staleness)."""
    return {
        f"{kind} {NAMESPACES[i % 3]}/{kind[:3].lower()}-{i:02d}-{'envfrom' if i % 2 == 0 else 'transform'}"
        for i in range(count)
        if (i % 2 == 0) == env_from
    }


def _settled(cluster: Cluster) -> None:
    """Every pod of the old ReplicaSets and revisions gone (kwok deletes them at once; the controllers take turns)."""
    for _ in range(120):
        pods = [p for ns in NAMESPACES for p in cluster.get("pods", "-n", ns)["items"]]
        if all(not p["metadata"].get("deletionTimestamp") for p in pods) and len(pods) == 2 * (
            DEPLOYMENTS + STATEFULSETS
        ):
            return
        time.sleep(1)
    pytest.fail(f"the pods did not settle: {len(pods)} listed")


def test_check_names_exactly_the_owners_whose_pods_kept_old_values(project_factory: Any, cluster: Cluster) -> None:
    project: Project = project_factory("tests/fixtures/programs/staleness", "dev", "stale")
    project.init()
    project.config("staleness:kubeconfig", str(cluster.kubeconfig))
    project.config("staleness:settings", SETTINGS)
    for key, value in (("deployments", DEPLOYMENTS), ("statefulsets", STATEFULSETS), ("pdbs", PDBS)):
        project.config(f"staleness:{key}", value)
    project.up()
    _settled(cluster)
    settings = parse_settings(SETTINGS)
    live = connect(str(cluster.kubeconfig))
    assert stale_owners(settings, live) == [], "every pod started with the current values"

    time.sleep(2)  # a change in a later second than every pod's start (both are known to the second)
    changed = {**SETTINGS, "proxy": {**SETTINGS["proxy"], "noProxy": ["internal.example"]}}
    project.config("staleness:settings", changed)
    project.up()
    _settled(cluster)
    settings = parse_settings(changed)
    owners = stale_owners(settings, connect(str(cluster.kubeconfig)))
    expected = _names("Deployment", DEPLOYMENTS, True) | _names("StatefulSet", STATEFULSETS, True)
    assert {o.ref for o in owners} == expected, "the envFrom workloads kept their pods; the transform's rolled"
    assert all(len(o.pods) == 2 and o.restartable for o in owners)
    findings = [f for f in check_cluster(settings, connect(str(cluster.kubeconfig))) if f.kind == "pods-stale"]
    assert {f.object for f in findings} == expected
    assert all("before proxy-config changed at" in f.message for f in findings)


def _trust_workloads(namespace: str) -> list[dict[str, Any]]:
    """Three Deployments mounting proxy-trust, as the transform gives them: a JVM given the truststore in
    JDK_JAVA_OPTIONS, a Node app given NODE_EXTRA_CA_CERTS (both also read proxy-config by envFrom), and a curl-like
    app given SSL_CERT_FILE (it reads the file per connection)."""
    out = []
    for name, env in (
        ("jvm", [{"name": "JDK_JAVA_OPTIONS", "value": JAVA_TRUST_OPTIONS}]),
        ("node", [{"name": "NODE_EXTRA_CA_CERTS", "value": f"{MOUNT_PATH}/corporate-ca.crt"}]),
        ("curl", [{"name": "SSL_CERT_FILE", "value": f"{MOUNT_PATH}/ca-bundle.crt"}]),
    ):
        container: dict[str, Any] = {"name": "app", "image": "registry.example/app:1.0", "env": env,
                                     "volumeMounts": [{"name": BUNDLE_NAME, "mountPath": MOUNT_PATH}]}  # fmt: skip
        if name != "curl":
            container["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
        out.append({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [container],
                         "volumes": [{"name": BUNDLE_NAME, "configMap": {"name": BUNDLE_NAME}}]}}},
        })  # fmt: skip
    return out


def test_a_ca_rotation_is_reported_for_the_jvm_and_node_workloads_only(cluster: Cluster) -> None:
    namespace = "trust"
    cluster.kubectl("create", "namespace", namespace)

    def settings_with(ca: str) -> dict[str, Any]:
        return {
            **SETTINGS,
            "deployment": {"enabled": True},
            "proxy": {"upstream": {"url": "http://192.0.2.10:3128", "trustedCa": ca}},
            "namespaces": [namespace],
        }

    first = settings_with(make_ca("Corp CA 2026").cert_pem)
    objects = [o for o in manifests(parse_settings(first)) if o["metadata"].get("namespace") == namespace]
    assert {o["metadata"]["name"] for o in objects} >= {"proxy-config", BUNDLE_NAME}
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(_trust_workloads(namespace)))
    cluster.kubectl("rollout", "status", "-n", namespace, "deployment/jvm", "deployment/node", "deployment/curl",
                    "--timeout=120s")  # fmt: skip
    settings = parse_settings(first)
    assert stale_owners(settings, connect(str(cluster.kubeconfig)), namespaces=[namespace]) == []

    time.sleep(2)
    second = settings_with(make_ca("Corp CA 2027").cert_pem)
    rotated = [o for o in manifests(parse_settings(second)) if o["metadata"].get("namespace") == namespace]
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(rotated))
    settings = parse_settings(second)
    owners = stale_owners(settings, connect(str(cluster.kubeconfig)), namespaces=[namespace])
    assert [o.ref for o in owners] == [f"Deployment {namespace}/jvm", f"Deployment {namespace}/node"]
    assert "(JVM) started" in owners[0].pods[0].reason
    assert "(Node) started" in owners[1].pods[0].reason
    assert all(f"before {BUNDLE_NAME} changed at" in o.pods[0].reason for o in owners)
