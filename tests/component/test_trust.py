"""ClusterProxy with a trusted CA under mocks: the bundles it registers, and the transform's trust group from
its Output values (the JVM's truststore in JDK_JAVA_OPTIONS)."""

from __future__ import annotations

from typing import Any

import pulumi_kubernetes as k8s

from proxy_component import ClusterProxy, ClusterProxyArgs
from proxy_component.render.trust import JAVA_TRUST_OPTIONS, MOUNT_PATH, trust_volume, trust_volume_mount
from proxy_component.transform import inject_proxy_env
from tests.conftest import Harness
from tests.pki import make_ca

CA = make_ca()
SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.244.0.0/16"]},
    "proxy": {"upstream": {"url": "http://10.1.2.3:3128", "trustedCa": CA.cert_pem}},
    "namespaces": ["apps", "web"],
    "injection": {"trustManager": True},
}


def test_the_component_registers_the_bundles_and_the_transform_mounts_them(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=SETTINGS))
    mocked.program(lambda: inject_proxy_env(proxy))
    spec: Any = {
        "selector": {"matchLabels": {"app": "a"}},
        "template": {
            "metadata": {"annotations": {"proxy-component.io/runtimes": "java"}},
            "spec": {"containers": [{"name": "app", "image": "a"}]},
        },
    }
    k8s.apps.v1.Deployment("app", metadata={"namespace": "apps", "name": "app"}, spec=spec)
    registered = {r.name: r for r in mocked.settle()}
    for namespace in ("apps", "web"):
        bundle = registered[f"egress-proxy-trust-{namespace}"]
        assert bundle.typ == "kubernetes:core/v1:ConfigMap"
        assert bundle.inputs["data"]["corporate-ca.crt"] == CA.cert_pem
        assert bundle.inputs["binaryData"]["truststore.p12"]
    assert registered["egress-trust-manager-bundle"].typ == "kubernetes:trust.cert-manager.io/v1alpha1:Bundle"
    pod = registered["app"].inputs["spec"]["template"]["spec"]
    assert pod["volumes"] == [trust_volume()]
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [trust_volume_mount()]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SSL_CERT_FILE"] == f"{MOUNT_PATH}/ca-bundle.crt"
    assert env["JDK_JAVA_OPTIONS"] == f"{mocked.value(proxy.jdk_java_options)} {JAVA_TRUST_OPTIONS}"
