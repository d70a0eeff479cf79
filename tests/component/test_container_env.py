"""`ClusterProxy.container_env` (`containerEnv` in other languages) under mocks: for every case it is exactly what the
stack transform gives the same bare container in a workload of that namespace with that runtimes annotation."""

from __future__ import annotations

import typing
from typing import Any

import pulumi_kubernetes as k8s
import pytest

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.transform import inject_proxy_env
from tests.conftest import Harness
from tests.pki import make_ca

CA = make_ca()
NETWORK: dict[str, Any] = {"podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"], "serviceCidrs": ["10.96.0.0/16"]}
PLAIN: dict[str, Any] = {"cluster": NETWORK, "namespaces": ["default", "apps"]}
RUNTIMES: dict[str, Any] = {**PLAIN, "runtimes": {"node": True, "namespaces": {"apps": ["java", "python"]}}}
TRUST: dict[str, Any] = {
    **PLAIN,
    "proxy": {"upstream": {"url": "http://10.1.2.3:3128", "trustedCa": CA.cert_pem}},
}
CREDENTIALS: dict[str, Any] = {
    "cluster": NETWORK,
    "proxy": {"httpProxy": "http://svc:hunter2@proxy.corp.example:3128"},
    "deployment": {"enabled": False},
    "namespaces": ["apps"],
}

CASES = [
    pytest.param(PLAIN, "default", None, id="plain"),
    pytest.param(PLAIN, "default", "java,node,python", id="every-runtime"),
    pytest.param(PLAIN, "other", "none", id="no-runtime-a-namespace-without-proxy-config"),
    pytest.param(RUNTIMES, "default", None, id="cluster-wide-node"),
    pytest.param(RUNTIMES, "apps", None, id="the-namespaces-runtimes"),
    pytest.param(RUNTIMES, "apps", "node", id="the-annotation-wins"),
    pytest.param(TRUST, "apps", "java", id="trust-and-the-truststore-in-jdk-options"),
    pytest.param(TRUST, "default", None, id="trust"),
    pytest.param(TRUST, "other", "java", id="no-proxy-trust-in-the-namespace"),
    pytest.param(CREDENTIALS, "apps", "java,node", id="credentials-as-secret-key-refs"),
]


def _transformed(mocked: Harness, proxy: ClusterProxy, namespace: str, runtimes: str | None) -> dict[str, Any]:
    """What the transform makes of one bare container in a Deployment of `namespace` annotated with `runtimes`."""
    mocked.program(lambda: inject_proxy_env(proxy))
    annotations = {"proxy-component.io/runtimes": runtimes} if runtimes is not None else {}
    spec: Any = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "web", "image": "w"}]}},
    }
    k8s.apps.v1.Deployment("web", metadata={"namespace": namespace, "name": "web"}, spec=spec)
    pod: dict[str, Any] = mocked.one("kubernetes:apps/v1:Deployment", "web").inputs["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize(("settings", "namespace", "runtimes"), CASES)
def test_container_env_is_what_the_transform_gives_the_same_container(
    mocked: Harness, settings: dict[str, Any], namespace: str, runtimes: str | None
) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    got = mocked.value(proxy.container_env(namespace, runtimes))
    pod = _transformed(mocked, proxy, namespace, runtimes)
    (container,) = pod["containers"]
    assert got["env"] == container["env"]
    assert got["volume_mounts"] == container.get("volumeMounts", [])
    assert got["volumes"] == pod.get("volumes", [])
    assert "hunter2" not in repr(got)


def test_the_cases_cover_each_part_of_the_decision(mocked: Harness) -> None:
    """The table above is not vacuous: trust, the truststore, secretKeyRefs and each runtime variable occur."""
    seen: set[str] = set()
    for case in CASES:
        settings, namespace, runtimes = typing.cast("tuple[dict[str, Any], str, str | None]", case.values)
        proxy = ClusterProxy(f"egress-{case.id}", ClusterProxyArgs(settings=settings))
        got = mocked.value(proxy.container_env(namespace, runtimes))
        text = repr(got)
        seen |= {
            word
            for word in ("secretKeyRef", "trustStore", "SSL_CERT_FILE", "NODE_USE_ENV_PROXY", "JDK_JAVA_OPTIONS")
            if word in text
        }
        if got["volumes"]:
            seen.add("volume")
    assert seen == {
        "secretKeyRef", "trustStore", "SSL_CERT_FILE", "NODE_USE_ENV_PROXY", "JDK_JAVA_OPTIONS", "volume",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "namespace", "runtimes", "message"),
    [
        (PLAIN, "Apps", None, "namespace: 'Apps' is not a DNS-1123 label (expected 1-63 of a-z, 0-9 and '-'"),
        (PLAIN, "default", "jvm", "runtimes: 'jvm' is not a list of runtimes (expected 'none' or some of java"),
        (
            CREDENTIALS,
            "web",
            None,
            "namespace: 'web' has no proxy-config Secret, which the env reads the proxy URLs (they carry "
            "credentials) from (expected one of the namespaces that have it: apps; list it in namespaces)",
        ),
    ],
)
def test_a_bad_argument_is_named_with_what_is_accepted(
    mocked: Harness, settings: dict[str, Any], namespace: str, runtimes: str | None, message: str
) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    with pytest.raises(ValueError, match=r"^(namespace|runtimes): ") as raised:
        proxy.container_env(namespace, runtimes)
    assert str(raised.value).startswith(message)
    assert "hunter2" not in str(raised.value)


def test_the_trust_and_runtime_outputs_are_the_pieces_container_env_puts_together(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=TRUST))
    trust = mocked.value(proxy.trust)  # type: ignore[arg-type]
    java = mocked.value(proxy.container_env("apps", "java"))
    assert java["env"][-4:] == trust["env"]
    assert java["volume_mounts"] == [trust["volume_mount"]]
    assert java["volumes"] == [trust["volume"]]
    assert {e["name"]: e["value"] for e in java["env"]}["JDK_JAVA_OPTIONS"] == trust["jdk_java_options"]
    assert trust["jdk_java_options"].startswith(mocked.value(proxy.jdk_java_options) + " -Djavax.net.ssl.trustStore=")
    runtime_env = mocked.value(proxy.runtime_env)
    assert runtime_env["java"] == mocked.value(proxy.container_env("other", "java"))["env"]
    assert runtime_env["node"][-1] == {"name": "NODE_USE_ENV_PROXY", "value": "1"}
    python = {e["name"]: e["value"] for e in runtime_env["python"]}
    assert python["NO_PROXY"] == python["no_proxy"] == mocked.value(proxy.no_proxy_python)
    assert "fd00:10:244::/56" in mocked.value(proxy.no_proxy)
    assert "fd00:10:244::/56" not in python["NO_PROXY"]
    assert ClusterProxy("plain", ClusterProxyArgs(settings=PLAIN)).trust is None


def test_with_credentials_the_runtime_env_reads_the_secret_and_nothing_is_secret(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=CREDENTIALS))
    runtime_env = mocked.value(proxy.runtime_env)
    assert not mocked.secret(proxy.runtime_env)
    assert "hunter2" not in repr(runtime_env)
    assert runtime_env["node"] == mocked.value(proxy.container_env("apps", "node"))["env"]
    assert runtime_env["node"][0] == {
        "name": "HTTP_PROXY",
        "valueFrom": {"secretKeyRef": {"name": "proxy-config", "key": "HTTP_PROXY"}},
    }
    corporate = {**TRUST, "proxy": {**TRUST["proxy"], "httpProxy": "http://svc:hunter2@10.1.2.3:3128"}}
    with_ca = ClusterProxy("with-ca", ClusterProxyArgs(settings={**corporate, "deployment": {"enabled": False}}))
    assert with_ca.trust is not None
    assert not mocked.secret(with_ca.trust)
    assert mocked.value(with_ca.trust)["jdk_java_options"] == ""  # the JVM gets no proxy with credentials


def test_asking_opts_in_where_the_transform_stays_away(mocked: Harness) -> None:
    """kube-system is excluded from injection; container_env for it still gives the env, as docs/guides/other-languages.md says."""
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=PLAIN))
    got = mocked.value(proxy.container_env("kube-system"))
    assert [e["name"] for e in got["env"]] == ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY",
                                               "no_proxy"]  # fmt: skip
    pod = _transformed(mocked, proxy, "kube-system", None)
    assert "env" not in pod["containers"][0]
