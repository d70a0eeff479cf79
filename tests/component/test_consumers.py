"""ClusterProxy's consumers under mocks: Helm values outputs and Secrets, Cluster API Secrets, the Kyverno policy."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from proxy_component import ClusterNetwork, ClusterProxy, ClusterProxyArgs, SettingsError
from proxy_component.render.digest import VALUES_ANNOTATION, settings_digest
from proxy_component.render.helm import PROFILES
from proxy_component.settings import parse_settings
from tests.conftest import Harness, holds_secret

SECRET = "kubernetes:core/v1:Secret"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
POLICY = "kubernetes:kyverno.io/v1:ClusterPolicy"
PASSWORD = "mySuperSecretPassword"

GIANT_SWARM: dict[str, Any] = {
    "cluster": {"name": "mycluster", "podCidrs": ["100.64.0.0/13"], "serviceCidrs": ["100.96.0.0/11"]},
    "proxy": {
        "httpProxy": f"http://myProxyUser:{PASSWORD}@192.168.52.220:3128",
        "noProxy": ["172.16.0.0/16", "internal.corpdomain.net", "example.com"],
    },
    "capi": {"enabled": True, "namespace": "org-giantswarm", "tkgAddons": True},
    "injection": {"kyverno": True, "kyvernoPolicy": "ClusterPolicy"},
    "helmValuesSecrets": [{"profile": "cert-manager", "namespace": "flux-system"}],
    "namespaces": ["apps"],
}
PLAIN: dict[str, Any] = {
    "cluster": {"name": "lab", "podCidrs": ["10.244.0.0/16"]},
    "proxy": {"upstream": {"url": "http://proxy.corp:3128"}},
    "capi": {"enabled": True},
    "injection": {"kyverno": True},
    "namespaces": ["apps"],
}


def test_helm_values_are_outputs_for_every_profile(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=PLAIN))
    assert sorted(proxy.helm_values) == sorted(PROFILES)
    no_proxy = mocked.value(proxy.no_proxy)
    url = "http://http-proxy.kube-system.svc.cluster.local:8888"
    # The controller's pods carry the values digest, the same the command's render computes.
    assert mocked.value(proxy.helm_values["cert-manager"]) == {
        "http_proxy": url,
        "https_proxy": url,
        "no_proxy": no_proxy,
        "podAnnotations": {VALUES_ANNOTATION: settings_digest(parse_settings(PLAIN))},
    }
    assert not mocked.secret(proxy.helm_values["cert-manager"])


ARGO_CD_HOSTS = "argocd-commit-server,argocd-dex-server,argocd-redis,argocd-redis-ha-haproxy,argocd-repo-server"


def test_argo_cd_helm_values_add_the_charts_service_names_to_their_own_no_proxy(mocked: Harness) -> None:
    settings = {**PLAIN, "helmValuesSecrets": [{"profile": "argo-cd", "namespace": "argocd"}]}
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    cluster = mocked.value(proxy.no_proxy)
    assert "argocd" not in cluster
    assert "10.244.0.0/16" in cluster.split(",")
    argo = mocked.value(proxy.helm_values["argo-cd"])
    for component, key in (("repoServer", "env"), ("server", "env"), ("applicationSet", "extraEnv")):
        env = {e["name"]: e["value"] for e in argo[component][key]}
        assert env["NO_PROXY"] == env["no_proxy"] == f"{cluster},{ARGO_CD_HOSTS}", component
    assert not mocked.secret(proxy.helm_values["argo-cd"])
    for name in PROFILES:
        if name != "argo-cd":
            assert "argocd-repo-server" not in repr(mocked.value(proxy.helm_values[name])), name
    registered = {r.name: r for r in mocked.settle()}
    text = registered["egress-helm-values-argocd-argo-cd-proxy-values"].inputs["stringData"]["values.yaml"]
    env = {e["name"]: e["value"] for e in yaml.safe_load(text)["controller"]["env"]}
    assert env["NO_PROXY"] == f"{cluster},{ARGO_CD_HOSTS}"
    assert registered["egress-proxy-config-apps"].inputs["data"]["NO_PROXY"] == cluster


def test_argo_cd_helm_values_compose_the_network_with_the_charts_names(mocked: Harness) -> None:
    network = ClusterNetwork(
        pod_cidrs=pulumi.Output.from_input(["10.1.0.0/16"]), service_cidrs=["172.20.0.0/16"], origin="eks"
    )
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings={"namespaces": ["default"]}, network=network))
    cluster = mocked.value(proxy.no_proxy)
    assert {"172.20.0.0/16", "10.1.0.0/16"} <= set(cluster.split(","))
    env = {e["name"]: e["value"] for e in mocked.value(proxy.helm_values["argo-cd"])["dex"]["env"]}
    assert env["NO_PROXY"] == f"{cluster},{ARGO_CD_HOSTS}"
    assert mocked.value(proxy.helm_values["kyverno"])["reportsController"]["extraEnvVars"][4] == {
        "name": "NO_PROXY",
        "value": cluster,
    }


def test_management_objects_go_through_the_management_provider(mocked: Harness) -> None:
    workload = k8s.Provider("workload", kubeconfig="w")
    management = k8s.Provider("management", kubeconfig="m")
    proxy = ClusterProxy(
        "egress",
        ClusterProxyArgs(settings=GIANT_SWARM, management_provider=management),
        pulumi.ResourceOptions(providers=[workload]),
    )
    assert proxy.kubeadm_config_spec is not None
    spec = mocked.value(proxy.kubeadm_config_spec)
    assert spec["files"][0]["contentFrom"] == {"secret": {"name": "mycluster-systemd-proxy", "key": "containerdProxy"}}
    registered = mocked.settle()
    by_name = {r.name: r for r in registered}
    capi = [
        "egress-systemd-proxy",
        "egress-cluster-values",
        "egress-mycluster-vsphere-cpi-addon",
        "egress-mycluster-vsphere-csi-addon",
        "egress-mycluster-kapp-controller-addon",
    ]
    for name in capi:
        assert by_name[name].typ == SECRET
        assert by_name[name].provider is not None
        assert "::management::" in str(by_name[name].provider)
    for r in registered:
        if r.typ.startswith("kubernetes:") and r.name not in capi and r.typ != "pulumi:providers:kubernetes":
            assert "::workload::" in str(r.provider), r.name
    values = yaml.safe_load(by_name["egress-cluster-values"].inputs["stringData"]["values"])
    assert values["cluster"]["proxy"]["http"] == f"http://myProxyUser:{PASSWORD}@192.168.52.220:3128"
    env = {e["name"]: e["value"] for e in values["env"]}
    assert env["NO_PROXY"] == values["cluster"]["proxy"]["noProxy"] == mocked.value(proxy.no_proxy)
    assert "no_proxy" not in values  # read by no Giant Swarm chart, and refused by the upstream cert-manager chart


def test_with_credentials_every_carrier_is_a_secret(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=GIANT_SWARM))
    registered = mocked.settle()
    for r in registered:
        if r.typ != SECRET:
            assert PASSWORD not in repr(r.inputs), f"{r.typ} {r.name} carries the password"
    # Only tinyproxy's own config stays a ConfigMap: pods use the credentialed URL directly, tinyproxy has no upstream.
    assert [r.name for r in registered if r.typ == CONFIG_MAP] == ["egress-tinyproxy-config"]
    for r in registered:
        if r.typ == SECRET:
            assert holds_secret(r.raw_inputs["stringData"]), r.name
    assert mocked.secret(proxy.helm_values["giantswarm-cluster-values"])
    policy = next(r for r in registered if r.typ == POLICY)
    rules = policy.inputs["spec"]["rules"]
    assert rules[0]["generate"]["clone"] == {"namespace": "kube-system", "name": "proxy-config"}
    foreach = rules[1]["mutate"]["foreach"]
    env = next(
        e
        for f in foreach
        for e in f["patchStrategicMerge"]["spec"]["containers"][0]["env"]
        if e["name"] == "HTTP_PROXY"
    )
    assert env == {"name": "HTTP_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy-config", "key": "HTTP_PROXY"}}}
    # The clone source exists: proxy-config is also a Secret in the proxy's namespace.
    assert {r.inputs["metadata"]["namespace"] for r in registered if r.name.startswith("egress-proxy-config-")} == {
        "apps",
        "kube-system",
    }
    values_secret = next(r for r in registered if r.name.startswith("egress-helm-values-"))
    assert values_secret.inputs["metadata"] == {
        "name": "cert-manager-proxy-values",
        "namespace": "flux-system",
        "labels": {"app.kubernetes.io/part-of": "proxy-component", "proxy-component.io/helm-profile": "cert-manager"},
        # The stack whose component made it: a second stack adopting objects refuses it by this name.
        "annotations": {
            "pulumi.com/patchForce": "true",
            "proxy-component.io/owner": "organization/proxy-component/test",
        },
    }
    assert yaml.safe_load(values_secret.inputs["stringData"]["values.yaml"])["http_proxy"].endswith(
        "@192.168.52.220:3128"
    )


def test_capi_uses_the_upstream_for_nodes_and_the_service_for_pods(mocked: Harness) -> None:
    ClusterProxy("egress", ClusterProxyArgs(settings=PLAIN))
    registered = {r.name: r for r in mocked.settle()}
    dropin = registered["egress-systemd-proxy"].inputs["stringData"]["containerdProxy"]
    assert 'Environment="HTTP_PROXY=http://proxy.corp:3128"' in dropin
    config = registered["egress-proxy-config-apps"].inputs["data"]
    assert config["HTTP_PROXY"] == "http://http-proxy.kube-system.svc.cluster.local:8888"
    policy = registered["egress-kyverno-mutating-policy"]
    assert policy.typ == "kubernetes:policies.kyverno.io/v1:MutatingPolicy"
    variables = {v["name"]: v["expression"] for v in policy.inputs["spec"]["variables"]}
    assert list(variables) == [
        "httpProxy", "httpsProxy", "noProxy", "noProxyPython", "jdkJavaOptions", "valuesDigest", "selected", "python",
        "entries", "injected",
    ]  # fmt: skip
    # The values are literals of their own variables (an Output resolved by the mocks), which the entries read.
    assert variables["httpProxy"] == "'http://http-proxy.kube-system.svc.cluster.local:8888'"
    assert variables["valuesDigest"] == f"'{settings_digest(parse_settings(PLAIN))}'"
    assert "'value': dyn(variables.httpProxy)" in variables["entries"]
    assert not any(name.startswith("egress-kyverno-clone") for name in registered), "no credentials, no trusted CA"


def test_with_credentials_the_mutating_policy_reads_the_cloned_secret_and_carries_no_password(
    mocked: Harness,
) -> None:
    ClusterProxy("egress", ClusterProxyArgs(settings={**GIANT_SWARM, "injection": {"kyverno": True}}))
    registered = {r.name: r for r in mocked.settle()}
    clone = registered["egress-kyverno-clone-proxy-config"]
    assert clone.typ == "kubernetes:policies.kyverno.io/v1:GeneratingPolicy"
    assert clone.inputs["spec"]["variables"][1]["expression"] == (
        "resource.Get('v1', 'secrets', 'kube-system', 'proxy-config')"
    )
    policy = registered["egress-kyverno-mutating-policy"]
    assert PASSWORD not in repr(policy.inputs)
    entries = next(v["expression"] for v in policy.inputs["spec"]["variables"] if v["name"] == "entries")
    assert "'valueFrom': dyn({'secretKeyRef': dyn({'name': dyn('proxy-config'), 'key': dyn('HTTP_PROXY')})})" in entries


def test_an_unknown_helm_profile_is_refused_before_anything_is_created(mocked: Harness) -> None:
    settings = {**PLAIN, "helmValuesSecrets": [{"profile": "nginx", "namespace": "apps"}]}
    with pytest.raises(
        SettingsError,
        match=r"helmValuesSecrets \(profile nginx, namespace apps\)\.profile: 'nginx' is not a known Helm values profile",
    ):
        ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    assert [r.name for r in mocked.settle() if r.typ != "proxy-component:index:ClusterProxy"] == []


def test_a_kustomization_is_an_output_of_the_component(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=PLAIN))
    kz = mocked.value(proxy.kustomization(kind="StatefulSet", name="db", container="postgres"))
    assert kz["patches"][0]["target"] == {"kind": "StatefulSet", "name": "db"}
    patch = yaml.safe_load(kz["patches"][0]["patch"])
    env = patch["spec"]["template"]["spec"]["containers"][0]["env"]
    assert patch["apiVersion"] == "apps/v1"
    assert {e["name"]: e["value"] for e in env}["NO_PROXY"] == mocked.value(proxy.no_proxy)


def test_with_credentials_the_kustomization_holds_only_secret_refs(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=GIANT_SWARM))
    kz = mocked.value(proxy.kustomization(kind="Deployment", name="web"))
    assert PASSWORD not in kz["patches"][0]["patch"]
    assert "secretKeyRef" in kz["patches"][0]["patch"]


def test_metrics_output_and_objects_match_the_render_and_hold_no_credential(mocked: Harness) -> None:
    from proxy_component.dataplane.metrics import grafana_dashboard, prometheus_rule
    from proxy_component.render import manifests

    metrics = {"enabled": True, "podMonitor": True, "prometheusRule": True, "grafanaDashboard": True}
    settings = {**PLAIN, "proxy": {"upstream": {"url": "http://proxy.corp:3128", "username": "svc",
                                               "password": PASSWORD}}, "deployment": {"metrics": metrics}}  # fmt: skip
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    assert proxy.metrics is not None
    output = mocked.value(proxy.metrics)
    parsed = parse_settings(settings)
    assert output["port"] == 9888
    assert output["path"] == "/metrics"
    assert output["prometheus_rule"] == prometheus_rule(parsed)
    assert output["grafana_dashboard"] == grafana_dashboard(parsed)
    assert PASSWORD not in str(output)
    registered = {r.typ: r for r in mocked.settle()}
    assert "kubernetes:monitoring.coreos.com/v1:PodMonitor" in registered
    rule = registered["kubernetes:monitoring.coreos.com/v1:PrometheusRule"].inputs
    rendered = next(o for o in manifests(parsed) if o["kind"] == "PrometheusRule")
    assert rule["spec"] == rendered["spec"]
    # The generation in the config Secret comes from the config as an Output; the same as the render's.
    config = next(r for r in mocked.settle() if r.typ == SECRET and r.name == "egress-tinyproxy-config").inputs
    rendered_config = next(o for o in manifests(parsed) if o["metadata"]["name"] == "http-proxy-config")
    assert config["stringData"]["generation"] == rendered_config["stringData"]["generation"]


def test_no_metrics_output_without_metrics(mocked: Harness) -> None:
    assert ClusterProxy("egress", ClusterProxyArgs(settings=PLAIN)).metrics is None
