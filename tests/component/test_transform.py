"""The stack transform: a pure function over ResourceTransformArgs, and under mocks that run registered transforms."""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.render.env import ProxyValues, env_vars
from proxy_component.settings import parse_settings
from proxy_component.transform import WORKLOAD_TYPES, inject_proxy_env, proxy_env_transform
from tests.conftest import Harness

SETTINGS = parse_settings(
    {"cluster": {"podCidrs": ["10.244.0.0/16"]}, "injection": {"excludeNamespaces": ["kube-system", "legacy"]}}
)
ENV = env_vars(ProxyValues("http://p:8888", "http://p:8888", "localhost,.svc"))
NAMES = ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"]


def _pod_spec(containers: int = 1) -> dict[str, Any]:
    return {
        "containers": [{"name": f"c{i}", "image": "nginx"} for i in range(containers)],
        "initContainers": [{"name": "init", "image": "busybox", "env": [{"name": "NO_PROXY", "value": "mine"}]}],
    }


def _props(result: pulumi.ResourceTransformResult) -> dict[str, Any]:
    assert isinstance(result.props, dict)
    return result.props


def _args(type_: str, props: dict[str, Any]) -> pulumi.ResourceTransformArgs:
    return pulumi.ResourceTransformArgs(custom=True, type_=type_, name="x", props=props, opts=pulumi.ResourceOptions())


def _deployment(namespace: str | None = "apps", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web"}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {}, "spec": _pod_spec(2)}},
    }


def test_every_workload_type_is_covered() -> None:
    assert sorted(WORKLOAD_TYPES) == [
        "kubernetes:apps/v1:DaemonSet",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:apps/v1:ReplicaSet",
        "kubernetes:apps/v1:StatefulSet",
        "kubernetes:batch/v1:CronJob",
        "kubernetes:batch/v1:Job",
        "kubernetes:core/v1:Pod",
    ]


def test_injects_into_containers_and_init_containers_without_overwriting() -> None:
    props = _deployment()
    before = copy.deepcopy(props)
    result = proxy_env_transform(SETTINGS, ENV)(_args("kubernetes:apps/v1:Deployment", props))
    assert result is not None
    assert props == before, "the transform must not mutate its input"
    pod = _props(result)["spec"]["template"]["spec"]
    for container in pod["containers"]:
        assert [e["name"] for e in container["env"]] == NAMES
    init_env = pod["initContainers"][0]["env"]
    assert init_env[0] == {"name": "NO_PROXY", "value": "mine"}
    assert [e["name"] for e in init_env] == [
        "NO_PROXY",
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "no_proxy",
    ]


@pytest.mark.parametrize(
    ("type_", "props", "path"),
    [
        ("kubernetes:core/v1:Pod", {"metadata": {"namespace": "apps"}, "spec": _pod_spec()}, ("spec",)),
        (
            "kubernetes:batch/v1:CronJob",
            {"metadata": {"namespace": "apps"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": _pod_spec()}}}}},
            ("spec", "jobTemplate", "spec", "template", "spec"),
        ),
        (
            "kubernetes:batch/v1:Job",
            {"metadata": {}, "spec": {"template": {"spec": _pod_spec()}}},
            ("spec", "template", "spec"),
        ),
    ],
)
def test_pod_spec_is_found_for_each_kind(type_: str, props: dict[str, Any], path: tuple[str, ...]) -> None:
    result = proxy_env_transform(SETTINGS, ENV)(_args(type_, props))
    assert result is not None
    node: Any = _props(result)
    for key in path:
        node = node[key]
    assert [e["name"] for e in node["containers"][0]["env"]] == NAMES


@pytest.mark.parametrize(
    ("type_", "props"),
    [
        ("kubernetes:apps/v1:Deployment", _deployment(namespace="kube-system")),
        ("kubernetes:apps/v1:Deployment", _deployment(namespace="legacy")),
        ("kubernetes:apps/v1:Deployment", _deployment(annotations={"proxy-component.io/inject": "false"})),
        ("kubernetes:core/v1:ConfigMap", {"metadata": {"namespace": "apps"}, "data": {}}),
    ],
)
def test_excluded_namespaces_opted_out_workloads_and_other_types_are_untouched(
    type_: str, props: dict[str, Any]
) -> None:
    assert proxy_env_transform(SETTINGS, ENV)(_args(type_, props)) is None


def test_an_opt_out_on_the_pod_template_is_honoured() -> None:
    props = _deployment()
    props["spec"]["template"]["metadata"] = {"annotations": {"proxy-component.io/inject": "false"}}
    assert proxy_env_transform(SETTINGS, ENV)(_args("kubernetes:apps/v1:Deployment", props)) is None
    # Only "false", exactly as the Kyverno policy matches it.
    props["spec"]["template"]["metadata"] = {"annotations": {"proxy-component.io/inject": "False"}}
    assert proxy_env_transform(SETTINGS, ENV)(_args("kubernetes:apps/v1:Deployment", props)) is not None


def test_a_namespace_defaults_to_default() -> None:
    excluding_default = parse_settings({"injection": {"excludeNamespaces": ["default"]}})
    assert (
        proxy_env_transform(excluding_default, ENV)(_args("kubernetes:apps/v1:Deployment", _deployment(None))) is None
    )
    assert proxy_env_transform(SETTINGS, ENV)(_args("kubernetes:apps/v1:Deployment", _deployment(None))) is not None


def test_with_credentials_env_comes_from_the_namespace_secret_and_only_where_it_exists() -> None:
    settings = parse_settings({"proxy": {"httpProxy": "http://u:hunter2@proxy.corp:3128"}, "namespaces": ["apps"]})
    transform = proxy_env_transform(settings, ENV)
    result = transform(_args("kubernetes:apps/v1:Deployment", _deployment("apps")))
    assert result is not None
    env = _props(result)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {
        "name": "HTTP_PROXY",
        "valueFrom": {"secretKeyRef": {"name": "proxy-config", "key": "HTTP_PROXY"}},
    }
    assert "hunter2" not in repr(result.props)
    assert transform(_args("kubernetes:apps/v1:Deployment", _deployment("other"))) is None


def test_registered_transform_reaches_workloads_and_a_helm_v4_charts_children(mocked: Harness) -> None:
    proxy = ClusterProxy(
        "egress", ClusterProxyArgs(settings={"cluster": {"podCidrs": ["10.244.0.0/16"]}, "namespaces": ["apps"]})
    )
    mocked.program(lambda: inject_proxy_env(proxy))
    chart = k8s.helm.v4.Chart("ingress", chart="oci://registry.example/charts/ingress", namespace="apps")
    # The provider expands a v4 Chart into children; under mocks the program registers one as the engine would.
    controller = {"name": "controller", "image": "ingress:1", "env": [{"name": "no_proxy", "value": "keep"}]}
    controller_spec: Any = {
        "selector": {"matchLabels": {"app": "ingress"}},
        "template": {"metadata": {"labels": {"app": "ingress"}}, "spec": {"containers": [controller]}},
    }
    k8s.apps.v1.Deployment(
        "ingress-controller",
        metadata={"namespace": "apps", "name": "ingress-controller"},
        spec=controller_spec,
        opts=pulumi.ResourceOptions(parent=chart),
    )
    dns_spec: Any = {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {"spec": {"containers": [{"name": "d", "image": "d"}]}},
    }
    k8s.apps.v1.Deployment("dns", metadata={"namespace": "kube-system", "name": "dns"}, spec=dns_spec)
    no_proxy = mocked.value(proxy.no_proxy)
    registered = {r.name: r for r in mocked.settle()}
    injected = registered["ingress-controller"].inputs["spec"]["template"]["spec"]["containers"][0]
    assert injected["env"][0] == {"name": "no_proxy", "value": "keep"}
    assert {e["name"]: e["value"] for e in injected["env"][1:]} == {
        "HTTP_PROXY": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "http_proxy": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "HTTPS_PROXY": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "https_proxy": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "NO_PROXY": no_proxy,
        "NODE_USE_ENV_PROXY": "1",
        "JAVA_TOOL_OPTIONS": mocked.value(proxy.java_tool_options),
    }
    dns = registered["dns"].inputs["spec"]["template"]["spec"]["containers"][0]
    assert "env" not in dns
