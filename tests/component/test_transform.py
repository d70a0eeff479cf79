"""The stack transform: a pure function over ResourceTransformArgs, and under mocks that run registered transforms."""

from __future__ import annotations

import copy
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.render.env import ProxyValues
from proxy_component.settings import parse_settings
from proxy_component.transform import WORKLOAD_TYPES, inject_proxy_env, proxy_env_transform
from tests.conftest import Harness

SETTINGS = parse_settings(
    {"cluster": {"podCidrs": ["10.244.0.0/16"]}, "injection": {"excludeNamespaces": ["kube-system", "legacy"]}}
)
VALUES = ProxyValues(
    "http://p:8888", "http://p:8888", "localhost,.svc,fd00::/8", "localhost,.svc", "-Dhttp.proxyHost=p"
)
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
    result = proxy_env_transform(SETTINGS, VALUES)(_args("kubernetes:apps/v1:Deployment", props))
    assert result is not None
    assert props == before, "the transform must not mutate its input"
    pod = _props(result)["spec"]["template"]["spec"]
    for container in pod["containers"]:
        assert [e["name"] for e in container["env"]] == NAMES
    # The init container sets NO_PROXY itself: the six are one group, so it gets none of the others.
    assert pod["initContainers"][0]["env"] == [{"name": "NO_PROXY", "value": "mine"}]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert (env["NO_PROXY"], env["no_proxy"]) == ("localhost,.svc,fd00::/8", "localhost,.svc")


@pytest.mark.parametrize("opt_out", [{"name": "HTTP_PROXY", "value": ""}, {"name": "NO_PROXY", "value": "*"}])
def test_a_container_that_sets_one_proxy_name_gets_nothing(opt_out: dict[str, str]) -> None:
    settings = parse_settings({**SETTINGS.model_dump(by_alias=True), "runtimes": {"java": True, "node": True}})
    props = _deployment()
    props["spec"]["template"]["spec"]["containers"][0]["env"] = [opt_out]
    result = proxy_env_transform(settings, VALUES)(_args("kubernetes:apps/v1:Deployment", props))
    assert result is not None
    opted_out, other = _props(result)["spec"]["template"]["spec"]["containers"]
    assert opted_out["env"] == [opt_out]
    assert [e["name"] for e in other["env"]] == [*NAMES, "NODE_USE_ENV_PROXY", "JDK_JAVA_OPTIONS"]


def test_a_container_reading_proxy_config_gets_nothing_and_one_with_its_own_jdk_options_keeps_them() -> None:
    settings = parse_settings({**SETTINGS.model_dump(by_alias=True), "runtimes": {"java": True}})
    props = _deployment()
    containers = props["spec"]["template"]["spec"]["containers"]
    containers[0]["envFrom"] = [{"configMapRef": {"name": "proxy-config"}}]
    containers[1]["env"] = [{"name": "JDK_JAVA_OPTIONS", "value": "-Xmx1g"}]
    result = proxy_env_transform(settings, VALUES)(_args("kubernetes:apps/v1:Deployment", props))
    assert result is not None
    first, second = _props(result)["spec"]["template"]["spec"]["containers"]
    assert "env" not in first
    assert second["env"][0] == {"name": "JDK_JAVA_OPTIONS", "value": "-Xmx1g"}
    assert [e["name"] for e in second["env"]] == ["JDK_JAVA_OPTIONS", *NAMES]


@pytest.mark.parametrize(
    ("runtimes", "namespace", "workload", "template", "expected"),
    [
        ({}, "apps", None, None, []),
        ({"java": True, "node": True}, "apps", None, None, ["NODE_USE_ENV_PROXY", "JDK_JAVA_OPTIONS"]),
        ({"java": True, "namespaces": {"apps": ["node"]}}, "apps", None, None, ["NODE_USE_ENV_PROXY"]),
        ({"java": True, "namespaces": {"apps": ["node"]}}, "web", None, None, ["JDK_JAVA_OPTIONS"]),
        ({"namespaces": {"apps": ["node"]}}, "apps", "java", None, ["JDK_JAVA_OPTIONS"]),
        ({"java": True}, "apps", "none", None, []),
        ({}, "apps", "java", "node", ["NODE_USE_ENV_PROXY"]),  # the pod template's wins: the Pod carries it
    ],
)
def test_runtime_variables_follow_the_annotation_then_the_namespace_then_the_cluster(
    runtimes: dict[str, Any], namespace: str, workload: str | None, template: str | None, expected: list[str]
) -> None:
    settings = parse_settings({"cluster": {"podCidrs": ["10.244.0.0/16"]}, "runtimes": runtimes})
    key = settings.runtimes.annotation
    props = _deployment(namespace, {key: workload} if workload else None)
    if template:
        props["spec"]["template"]["metadata"] = {"annotations": {key: template}}
    result = proxy_env_transform(settings, VALUES)(_args("kubernetes:apps/v1:Deployment", props))
    assert result is not None
    env = _props(result)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == [*NAMES, *expected]


def test_a_python_workload_gets_the_python_safe_list_in_both_spellings() -> None:
    props = _deployment(annotations={"proxy-component.io/runtimes": "python"})
    result = proxy_env_transform(SETTINGS, VALUES)(_args("kubernetes:apps/v1:Deployment", props))
    assert result is not None
    env = {e["name"]: e["value"] for e in _props(result)["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,.svc"


def test_a_runtimes_annotation_that_is_no_list_stops_the_program_naming_the_workload() -> None:
    props = _deployment(annotations={"proxy-component.io/runtimes": "java, node"})
    with pytest.raises(ValueError) as caught:  # noqa: PT011 (the whole text is asserted below)
        proxy_env_transform(SETTINGS, VALUES)(_args("kubernetes:apps/v1:Deployment", props))
    assert str(caught.value) == (
        "Deployment apps/web: proxy-component.io/runtimes: 'java, node' is not a list of runtimes (expected 'none' "
        "or some of java, node, python separated by commas without spaces, e.g. 'java,node')"
    )


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
    result = proxy_env_transform(SETTINGS, VALUES)(_args(type_, props))
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
    assert proxy_env_transform(SETTINGS, VALUES)(_args(type_, props)) is None


def test_an_opt_out_on_the_pod_template_is_honoured() -> None:
    props = _deployment()
    props["spec"]["template"]["metadata"] = {"annotations": {"proxy-component.io/inject": "false"}}
    assert proxy_env_transform(SETTINGS, VALUES)(_args("kubernetes:apps/v1:Deployment", props)) is None
    # Only "false", exactly as the Kyverno policy matches it.
    props["spec"]["template"]["metadata"] = {"annotations": {"proxy-component.io/inject": "False"}}
    assert proxy_env_transform(SETTINGS, VALUES)(_args("kubernetes:apps/v1:Deployment", props)) is not None


def test_a_namespace_defaults_to_default() -> None:
    excluding_default = parse_settings({"injection": {"excludeNamespaces": ["default"]}})
    assert (
        proxy_env_transform(excluding_default, VALUES)(_args("kubernetes:apps/v1:Deployment", _deployment(None)))
        is None
    )
    assert proxy_env_transform(SETTINGS, VALUES)(_args("kubernetes:apps/v1:Deployment", _deployment(None))) is not None


def test_with_credentials_env_comes_from_the_namespace_secret_and_only_where_it_exists() -> None:
    settings = parse_settings({"proxy": {"httpProxy": "http://u:hunter2@proxy.corp:3128"}, "namespaces": ["apps"]})
    transform = proxy_env_transform(settings, VALUES)
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
    controller = {"name": "controller", "image": "ingress:1", "env": [{"name": "OTHER", "value": "keep"}]}
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
    assert injected["env"][0] == {"name": "OTHER", "value": "keep"}
    assert {e["name"]: e["value"] for e in injected["env"][1:]} == {
        "HTTP_PROXY": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "http_proxy": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "HTTPS_PROXY": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "https_proxy": "http://http-proxy.kube-system.svc.cluster.local:8888",
        "NO_PROXY": no_proxy,
        "no_proxy": mocked.value(proxy.no_proxy_python),
    }
    dns = registered["dns"].inputs["spec"]["template"]["spec"]["containers"][0]
    assert "env" not in dns
