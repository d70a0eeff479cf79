"""ClusterProxy's methods and new outputs for other languages, through the provider under mocks: `call` runs the
Python method on the component the provider constructed and maps its result to the schema's names; a bad argument is
an input error naming it, with no trace; credentials keep the results secret."""

from __future__ import annotations

from typing import Any

import pytest
from pulumi.errors import InputPropertiesError

from proxy_component import provider
from proxy_component.component import TYPE_TOKEN
from proxy_component.render.trust import JAVA_TRUST_OPTIONS
from tests.conftest import Harness
from tests.pki import make_ca

CA = make_ca()
SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"], "serviceCidrs": ["10.96.0.0/16"]},
    "proxy": {"upstream": {"url": "http://10.1.2.3:3128", "trustedCa": CA.cert_pem}},
    "namespaces": ["default", "apps"],
}
CREDENTIALS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.244.0.0/16"]},
    "proxy": {"httpProxy": "http://svc:hunter2@proxy.corp.example:3128"},
    "deployment": {"enabled": False},
    "namespaces": ["apps"],
}


@pytest.fixture(scope="module")
def served() -> provider._Provider:
    return provider._Provider([provider.ClusterProxy], provider.PACKAGE, version="0.0.0")


def _proxy(name: str, settings: dict[str, Any]) -> provider.ClusterProxy:
    """The component as the provider constructs it, from the settings another language sends."""
    args: Any = {"settings": settings}
    return provider.ClusterProxy(name, args)


def _outputs(served: provider._Provider, proxy: provider.ClusterProxy, method: str, urn: str, **args: Any) -> Any:
    return served.call(f"{TYPE_TOKEN}/{method}", {"__self__": urn, **args}).outputs


def _call(mocked: Harness, served: provider._Provider, proxy: Any, method: str, **args: Any) -> dict[str, Any]:
    outputs = _outputs(served, proxy, method, mocked.value(proxy.urn), **args)
    return {key: mocked.value(value) for key, value in outputs.items()}


def test_helm_values_for_is_the_python_methods_result(mocked: Harness, served: provider._Provider) -> None:
    proxy = _proxy("egress", SETTINGS)
    got = _call(mocked, served, proxy, "helmValuesFor", profile="argo-cd", runtimes="java", release="my-release")
    assert got == {"values": mocked.value(proxy.helm_values_for("argo-cd", "java", "my-release"))}
    env = {e["name"]: e.get("value") for e in got["values"]["server"]["env"]}
    assert "my-release-argocd-repo-server" in env["NO_PROXY"]
    assert "-Djavax.net.ssl.trustStore=" in env["JDK_JAVA_OPTIONS"]


def test_kustomization_is_the_python_methods_result(mocked: Harness, served: provider._Provider) -> None:
    proxy = _proxy("egress", SETTINGS)
    got = _call(mocked, served, proxy, "kustomization", kind="StatefulSet", name="db", container="pg", runtimes="node")
    expected = mocked.value(proxy.kustomization(kind="StatefulSet", name="db", container="pg", runtimes="node"))
    assert got == {"kustomization": expected}
    assert '"NODE_USE_ENV_PROXY"' in expected["patches"][0]["patch"]


def test_container_env_is_mapped_to_the_schemas_names(mocked: Harness, served: provider._Provider) -> None:
    proxy = _proxy("egress", SETTINGS)
    got = _call(mocked, served, proxy, "containerEnv", namespace="apps", runtimes="java")
    python = mocked.value(proxy.container_env("apps", "java"))
    assert got == {"env": python["env"], "volumeMounts": python["volume_mounts"], "volumes": python["volumes"]}
    assert got["volumes"] == [{"name": "proxy-trust", "configMap": {"name": "proxy-trust"}}]
    default = _call(mocked, served, proxy, "containerEnv")
    assert default["env"] == mocked.value(proxy.container_env())["env"]


def test_the_construct_state_carries_the_runtime_and_trust_outputs(mocked: Harness, served: provider._Provider) -> None:
    proxy = _proxy("egress", SETTINGS)
    definition = served._component_defs["ClusterProxy"]
    raw = served.get_state(proxy, definition)
    state = {key: mocked.value(raw[key]) for key in ("noProxyPython", "jdkJavaOptions", "runtimeEnv", "trust")}
    assert state["noProxyPython"] == mocked.value(proxy.no_proxy_python)
    assert "fd00:10:244::/56" not in state["noProxyPython"]
    assert state["jdkJavaOptions"].startswith("-Dhttp.proxyHost=http-proxy.kube-system.svc.cluster.local ")
    assert set(state["runtimeEnv"]) == {"java", "node", "python"}
    assert state["runtimeEnv"]["node"][-1] == {"name": "NODE_USE_ENV_PROXY", "value": "1"}
    trust = state["trust"]
    assert trust["volume"] == {"name": "proxy-trust", "configMap": {"name": "proxy-trust"}}
    assert trust["volumeMount"] == {"name": "proxy-trust", "mountPath": "/etc/proxy-component/trust", "readOnly": True}
    assert [e["name"] for e in trust["env"]] == ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                                                 "NODE_EXTRA_CA_CERTS"]  # fmt: skip
    assert trust["jdkJavaOptions"] == f"{state['jdkJavaOptions']} {JAVA_TRUST_OPTIONS}"
    plain = _proxy("plain", {"cluster": {"podCidrs": ["10.244.0.0/16"]}})
    assert "trust" not in served.get_state(plain, definition)


def test_with_credentials_a_result_that_holds_a_url_is_secret(mocked: Harness, served: provider._Provider) -> None:
    """Helm values carry the URLs (secret); containerEnv reads them from the Secret (no secret: it holds none)."""
    proxy = _proxy("egress", CREDENTIALS)
    urn = mocked.value(proxy.urn)
    values = _outputs(served, proxy, "helmValuesFor", urn, profile="env")["values"]
    assert mocked.secret(values)
    assert "hunter2" in repr(mocked.value(values))
    outputs = _outputs(served, proxy, "containerEnv", urn, namespace="apps")
    assert not any(mocked.secret(value) for value in outputs.values())
    env = mocked.value(outputs["env"])
    assert env[0] == {
        "name": "HTTP_PROXY",
        "valueFrom": {"secretKeyRef": {"name": "proxy-config", "key": "HTTP_PROXY"}},
    }
    assert "hunter2" not in repr(env)


@pytest.mark.parametrize(
    ("method", "args", "message"),
    [
        ("helmValuesFor", {"profile": "bogus"}, "ClusterProxy.helmValuesFor: profile: 'bogus' is not a known Helm "
         "values profile (expected one of: argo-cd, cert-manager, "),
        ("helmValuesFor", {"profile": "argo-cd", "release": "My"}, "ClusterProxy.helmValuesFor: release: 'My' is not "
         "a DNS-1123 label (expected 1-63 of a-z, 0-9 and '-', e.g. kube-system)"),
        ("helmValuesFor", {"profile": "env", "runtimes": "jvm"}, "ClusterProxy.helmValuesFor: runtimes: 'jvm' is not "
         "a list of runtimes (expected 'none' or some of java, node, python separated by commas without spaces"),
        ("kustomization", {"kind": "Service", "name": "web"}, "ClusterProxy.kustomization: kind 'Service' has no pod "
         "template (expected one of Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod)"),
        ("containerEnv", {"namespace": "web"}, "ClusterProxy.containerEnv: namespace: 'web' has no proxy-config "
         "Secret"),
    ],
)  # fmt: skip
def test_a_bad_argument_is_an_input_error_naming_it(
    mocked: Harness, served: provider._Provider, method: str, args: dict[str, Any], message: str
) -> None:
    proxy = _proxy("egress", CREDENTIALS)
    with pytest.raises(InputPropertiesError) as raised:
        served.call(f"{TYPE_TOKEN}/{method}", {"__self__": mocked.value(proxy.urn), **args})
    assert raised.value.message.startswith(message), raised.value.message
    assert raised.value.errors == []
    assert "hunter2" not in raised.value.message


def test_a_method_of_a_component_this_provider_did_not_construct_is_refused(
    mocked: Harness, served: provider._Provider
) -> None:
    urn = "urn:pulumi:test::proxy-component::proxy-component:index:ClusterProxy::elsewhere"
    with pytest.raises(InputPropertiesError) as raised:
        served.call(f"{TYPE_TOKEN}/containerEnv", {"__self__": urn})
    assert raised.value.message == (
        f"ClusterProxy.containerEnv: __self__: {urn!r} is no ClusterProxy this provider constructed in this deployment"
    )


def test_construct_reports_every_settings_and_network_problem_at_once(served: provider._Provider) -> None:
    """A field error, a check across sections, the plan's Allow-list check and a bad network input: one error."""
    inputs: Any = {
        "settings": {"deployment": {"port": "eighty"}, "runtimes": {"annotation": "proxy-component.io/inject"}},
        "serviceCidrs": ["services"],
    }
    with pytest.raises(InputPropertiesError) as raised:
        served.construct("egress", TYPE_TOKEN, inputs)
    assert raised.value.message.splitlines() == [
        "invalid settings:",
        "  deployment.port: 'eighty': Input should be a valid integer",
        "  runtimes.annotation: 'proxy-component.io/inject' is injection.optOutAnnotation too, whose 'false' is no "
        "list of runtimes (expected another key, e.g. proxy-component.io/runtimes)",
        "  cluster.podCidrs: [] and cluster.nodeCidrs: [] leave tinyproxy's Allow with only loopback, so it would "
        "refuse every pod (expected at least one pod or node CIDR, deployment.allowedSourceCidrs, or a discovered "
        "network)",
        "  network inputs.serviceCidrs[0]: 'services' is not a CIDR (expected e.g. 10.0.0.0/16 or fd00:10::/56)",
    ]
    assert raised.value.errors == []
