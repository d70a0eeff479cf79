"""The stamp and injection by reference in the component: the transform registered by `inject_proxy_env` under
mocks, with the component's Output values."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.render.digest import REFERENCE, VALUES_ANNOTATION, settings_digest
from proxy_component.settings import parse_settings
from proxy_component.transform import HOOK_NAME, inject_proxy_env, proxy_env_transform
from tests.conftest import Harness

RAW: dict[str, Any] = {"cluster": {"podCidrs": ["10.244.0.0/16"]}, "namespaces": ["apps"]}


def _spec(app: str) -> Any:
    return {
        "selector": {"matchLabels": {"app": app}},
        "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": app, "image": app}]}},
    }


def _deployments() -> None:
    k8s.apps.v1.Deployment("web", metadata={"namespace": "apps", "name": "web"}, spec=_spec("web"))
    k8s.apps.v1.Deployment("away", metadata={"namespace": "away", "name": "away"}, spec=_spec("away"))


def test_by_value_the_component_stamps_the_digest_the_command_computes(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=RAW))
    mocked.program(lambda: inject_proxy_env(proxy))
    _deployments()
    digest = settings_digest(parse_settings(RAW))
    assert mocked.value(proxy.workload_values.digest) == digest
    assert mocked.known(proxy.workload_values.digest)
    for name in ("web", "away"):
        template = mocked.one("kubernetes:apps/v1:Deployment", name).inputs["spec"]["template"]
        assert template["metadata"]["annotations"] == {VALUES_ANNOTATION: digest}
    config = mocked.one("kubernetes:core/v1:ConfigMap", "egress-proxy-config-apps").inputs
    assert config["metadata"]["annotations"][VALUES_ANNOTATION] == digest.partition("-")[0], "its env part"


def test_by_reference_the_component_injects_references_and_depends_on_proxy_config(mocked: Harness) -> None:
    raw = {**RAW, "injection": {"transformEnv": "reference"}}
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=raw))
    mocked.program(lambda: inject_proxy_env(proxy))
    _deployments()
    web = mocked.one("kubernetes:apps/v1:Deployment", "web").inputs["spec"]["template"]
    assert web["metadata"]["annotations"] == {VALUES_ANNOTATION: REFERENCE}
    env = web["spec"]["containers"][0]["env"]
    assert env[4] == {
        "name": "NO_PROXY",
        "valueFrom": {"configMapKeyRef": {"name": "proxy-config", "key": "PROXY_COMPONENT_NO_PROXY"}},
    }
    config = mocked.one("kubernetes:core/v1:ConfigMap", "egress-proxy-config-apps").inputs
    assert config["data"]["PROXY_COMPONENT_NO_PROXY"] == mocked.value(proxy.no_proxy)
    # A namespace without proxy-config: values, and the digest.
    away = mocked.one("kubernetes:apps/v1:Deployment", "away").inputs["spec"]["template"]
    assert away["metadata"]["annotations"] == {VALUES_ANNOTATION: settings_digest(parse_settings(raw))}
    assert all("value" in e for e in away["spec"]["containers"][0]["env"])


def test_the_transform_binds_the_hook_to_rolling_workloads_and_orders_references_after_proxy_config(
    mocked: Harness,
) -> None:
    raw = {**RAW, "injection": {"transformEnv": "reference"}}
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=raw))
    hook = mocked.program(lambda: pulumi.ResourceHook(HOOK_NAME, lambda args: None))
    config = proxy.resources["proxy-config/apps"]
    transform = proxy_env_transform(proxy.settings, proxy.workload_values, hook, {"apps": config})

    def result(type_: str, namespace: str) -> pulumi.ResourceTransformResult:
        props: dict[str, Any] = {"metadata": {"namespace": namespace, "name": "w"}, "spec": _spec("w")}
        if type_.endswith("CronJob"):
            props["spec"] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": _spec("w")["template"]}}}
        args = pulumi.ResourceTransformArgs(
            custom=True, type_=type_, name="w", props=props, opts=pulumi.ResourceOptions()
        )
        out = transform(args)
        assert out is not None
        assert out.opts is not None
        return out

    deployment = result("kubernetes:apps/v1:Deployment", "apps").opts
    assert deployment is not None
    assert deployment.hooks is not None
    assert deployment.hooks.before_update == [hook]
    assert deployment.depends_on == [config]
    cron = result("kubernetes:batch/v1:CronJob", "apps").opts
    assert cron is not None
    assert not (cron.hooks and cron.hooks.before_update), "a CronJob's pods do not restart"
    away = result("kubernetes:apps/v1:Deployment", "away").opts
    assert away is not None
    assert not away.depends_on, "by value: no proxy-config to wait for"


def test_with_credentials_the_digest_is_no_secret_and_no_password(mocked: Harness) -> None:
    password = "C0mp-st4mp-pw"
    raw = {
        **RAW,
        "proxy": {"httpProxy": f"http://svc:{password}@proxy.corp.example:3128"},
        "deployment": {"enabled": False},
    }
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=raw))
    mocked.program(lambda: inject_proxy_env(proxy))
    _deployments()
    digest = proxy.workload_values.digest
    assert not mocked.secret(digest), "scrypt: the annotation is plain text, and must not make the workload secret"
    assert mocked.value(digest) == settings_digest(parse_settings(raw))
    web = mocked.one("kubernetes:apps/v1:Deployment", "web").inputs
    assert web["spec"]["template"]["metadata"]["annotations"] == {VALUES_ANNOTATION: mocked.value(digest)}
    assert password not in repr(web)
