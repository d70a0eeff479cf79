"""The trust bundle of a TLS-inspecting upstream and the trust group every consumer gives a container."""

from __future__ import annotations

import base64
import copy
import json
import warnings
from pathlib import Path
from typing import Any

import certifi
import jmespath
import jmespath.functions
import pulumi
import pytest
import yaml
from cryptography.hazmat.primitives.serialization import NoEncryption, pkcs12

from proxy_component.explain import trust_cells
from proxy_component.render import manifests, plain_plan, plain_values
from proxy_component.render.env import pod_env
from proxy_component.render.kustomize import json_patch, strategic_merge_patch
from proxy_component.render.kyverno import cluster_policy
from proxy_component.render.trust import (
    BUNDLE_NAME,
    JAVA_TRUST_OPTIONS,
    MOUNT_PATH,
    TRUST_NAMES,
    PublicRoots,
    bundle,
    certifi_roots,
    java_truststore,
    trust_bundle_object,
    trust_env_vars,
    trust_volume,
    trust_volume_mount,
)
from proxy_component.settings import Settings, SettingsError, ca_certificates, parse_settings
from proxy_component.transform import proxy_env_transform
from tests.conftest import ROOT
from tests.pki import make_ca
from tests.unit.test_kyverno import _rule

EXAMPLE_PLAIN = ROOT / "examples/ipv6-only/proxy.yaml"
CORP, SECOND = make_ca("Corp Inspecting CA"), make_ca("Corp Second CA")


def _settings(trusted: str | list[str] | None = None, **overrides: Any) -> Settings:
    upstream: dict[str, Any] = {"url": "http://10.1.2.3:3128"}
    if trusted is not None:
        upstream["trustedCa"] = trusted
    data: dict[str, Any] = {
        "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "proxy": {"upstream": upstream},
        "namespaces": ["apps", "web"],
    }
    data.update(overrides)
    return parse_settings(data)


TRUSTED = _settings(CORP.cert_pem)


# --- the bundle ------------------------------------------------------------------------------


def test_the_configmap_holds_the_corporate_ca_the_merged_bundle_and_a_truststore_the_jvm_reads() -> None:
    obj = trust_bundle_object(TRUSTED, "apps")
    assert obj["metadata"]["name"] == BUNDLE_NAME == "proxy-trust"
    assert obj["metadata"]["namespace"] == "apps"
    data = obj["data"]
    assert data["corporate-ca.crt"] == CORP.cert_pem
    public = ca_certificates(certifi.contents())
    merged = ca_certificates(data["ca-bundle.crt"])
    assert len(merged) == len(public) + 1
    assert merged[-1] == CORP.cert_pem
    assert obj["metadata"]["annotations"]["proxy-component.io/public-roots"] == (
        f"certifi {certifi.__version__} ({len(public)} certificates)"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # certifi holds a root with a negative serial number
        store = pkcs12.load_pkcs12(base64.b64decode(obj["binaryData"]["truststore.p12"]), None)
    assert store.key is None
    subjects = [c.certificate.subject for c in store.additional_certs]
    assert CORP.cert.subject in subjects
    assert len(subjects) == len(public) + 1
    names = [c.friendly_name for c in store.additional_certs]
    assert len(set(names)) == len(names), "every JVM alias is distinct"


def _bags(store: bytes) -> int:
    return len(pkcs12.load_pkcs12(store, None).additional_certs)


def test_the_truststore_has_no_mac_and_the_same_bytes_every_time() -> None:
    """cryptography's own output carries a MAC with a random salt, so two calls differ: ours never does."""
    entries = [("corporate-a", CORP.cert), ("corporate-b", SECOND.cert)]
    once, again = java_truststore(entries), java_truststore(list(entries))
    assert once == again
    raw = [pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(c, a.encode()) for a, c in entries], NoEncryption()
    ) for _ in range(2)]  # fmt: skip
    assert raw[0] != raw[1], "cryptography's MAC salt is random: the reason the MAC is left out"
    assert len(once) < len(raw[0])
    assert _bags(once) == 2


def test_the_same_cas_in_any_order_or_form_give_byte_identical_objects() -> None:
    forms: list[str | list[str]] = [
        CORP.cert_pem + SECOND.cert_pem,
        SECOND.cert_pem + CORP.cert_pem,
        [SECOND.cert_pem, CORP.cert_pem, CORP.cert_pem],
    ]
    dumps = set()
    for form in forms:
        bundle.cache_clear()
        settings = _settings(form, injection={"kyverno": True, "trustManager": True})
        dumps.add(json.dumps(manifests(settings), sort_keys=True))
    assert len(dumps) == 1


def test_the_roots_source_is_a_seam_and_recorded() -> None:
    extra = make_ca("Test Public Root")
    roots = PublicRoots(certifi.contents() + extra.cert_pem, "certifi + a test root")
    obj = trust_bundle_object(TRUSTED, "apps", roots)
    assert extra.cert_pem in obj["data"]["ca-bundle.crt"]
    assert obj["metadata"]["annotations"]["proxy-component.io/public-roots"].startswith("certifi + a test root (")
    assert certifi_roots().source == f"certifi {certifi.__version__}"


# --- the plan ------------------------------------------------------------------------------


def _keys(settings: Settings) -> dict[str, str]:
    return {p.key: p.suffix for p in plain_plan(settings)}


def test_a_bundle_per_listed_namespace_and_nothing_without_a_trusted_ca() -> None:
    plain = _keys(_settings())
    trusted = _keys(TRUSTED)
    assert {k: v for k, v in trusted.items() if k in plain} == plain, "no existing object is renamed"
    assert set(trusted) - set(plain) == {"proxy-trust/apps", "proxy-trust/web"}
    assert trusted["proxy-trust/apps"] == "-proxy-trust-apps"
    assert not any("trust" in k for k in plain)


def test_kyverno_clones_the_bundle_from_the_proxy_namespace_which_gets_one() -> None:
    settings = _settings(CORP.cert_pem, injection={"kyverno": True})
    assert "proxy-trust/kube-system" in _keys(settings)
    policy = cluster_policy(settings, plain_values(settings))
    clone = _rule(policy, "clone-proxy-trust")["generate"]
    assert clone["kind"] == "ConfigMap"
    assert clone["clone"] == {"namespace": "kube-system", "name": BUNDLE_NAME}
    excluded = _rule(policy, "clone-proxy-trust")["exclude"]["any"][0]["resources"]["names"]
    assert excluded == ["apps", "kube-system", "web"]
    assert "clone-proxy-trust" not in json.dumps(cluster_policy(_settings(), plain_values(_settings())))


def test_the_trust_manager_bundle_is_rendered_only_when_asked() -> None:
    assert "trust-manager-bundle" not in _keys(TRUSTED)
    settings = _settings(CORP.cert_pem, injection={"trustManager": True})
    (bundle_obj,) = [p.obj for p in plain_plan(settings) if p.key == "trust-manager-bundle"]
    assert bundle_obj["apiVersion"] == "trust.cert-manager.io/v1alpha1"
    assert bundle_obj["kind"] == "Bundle"
    assert bundle_obj["spec"]["sources"] == [{"useDefaultCAs": True}, {"inLine": CORP.cert_pem}]
    assert bundle_obj["spec"]["target"]["additionalFormats"] == {
        "jks": {"key": "truststore.jks"},
        "pkcs12": {"key": "truststore.p12"},
    }


def test_trust_manager_without_a_trusted_ca_names_the_fields() -> None:
    with pytest.raises(SettingsError) as raised:
        _settings(injection={"trustManager": True})
    assert str(raised.value).count("injection.trustManager: true needs proxy.upstream.trustedCa") == 1


def test_bad_input_renders_nothing() -> None:
    with pytest.raises(SettingsError, match=r"proxy\.upstream\.trustedCa"):
        _settings(CORP.key_pem)


# --- what a container gets -------------------------------------------------------------------


def _transform(settings: Settings, pod: dict[str, Any], namespace: str = "apps") -> dict[str, Any]:
    args = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:core/v1:Pod", name="p",
        props={"metadata": {"name": "p", "namespace": namespace, **pod.get("metadata", {})},
               "spec": copy.deepcopy(pod["spec"])},
        opts=pulumi.ResourceOptions(),
    )  # fmt: skip
    result = proxy_env_transform(settings, plain_values(settings))(args)
    if result is None:
        return copy.deepcopy(pod)
    assert isinstance(result.props, dict)
    return {"spec": result.props["spec"]}


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


OWN_MOUNT = {"name": "certs", "mountPath": MOUNT_PATH}
CONTAINERS: list[dict[str, Any]] = [
    {"name": "plain", "image": "i"},
    {"name": "own-ssl", "image": "i", "env": [{"name": "SSL_CERT_FILE", "value": "/mine.pem"}]},
    {"name": "own-node-empty", "image": "i", "env": [{"name": "NODE_EXTRA_CA_CERTS", "value": ""}]},
    {"name": "own-mount-path", "image": "i", "volumeMounts": [OWN_MOUNT]},
    {"name": "own-mount-path-slash", "image": "i", "volumeMounts": [{"name": "x", "mountPath": f"{MOUNT_PATH}/"}]},
    {"name": "own-mount-name", "image": "i", "volumeMounts": [{"name": BUNDLE_NAME, "mountPath": "/other"}]},
    {"name": "proxy-opted-out", "image": "i", "env": [{"name": "HTTP_PROXY", "value": ""}]},
    {"name": "own-java", "image": "i", "env": [{"name": "JDK_JAVA_OPTIONS", "value": "-Xmx1g"}]},
]
RECEIVES = {"plain", "proxy-opted-out", "own-java"}
VOLUMES: list[list[dict[str, Any]] | None] = [
    None,
    [{"name": "data", "emptyDir": {}}],
    [{"name": BUNDLE_NAME, "emptyDir": {}}],  # the Pod's own volume of that name: nothing of the group
    [{"name": BUNDLE_NAME, "configMap": {"name": BUNDLE_NAME}}],  # already the bundle: reused, not added twice
]


def _pod(volumes: list[dict[str, Any]] | None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": copy.deepcopy(CONTAINERS)}
    if volumes is not None:
        spec["volumes"] = copy.deepcopy(volumes)
    return {"metadata": {"annotations": annotations or {}}, "spec": spec}


@pytest.mark.parametrize("java", [False, True])
def test_the_transform_gives_the_trust_group_to_containers_that_set_none_of_it(java: bool) -> None:
    settings = _settings(CORP.cert_pem, runtimes={"java": java})
    out = _transform(settings, _pod([{"name": "data", "emptyDir": {}}]))
    assert out["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}, trust_volume()]
    for before, after in zip(CONTAINERS, out["spec"]["containers"], strict=True):
        env = _env(after)
        receives = before["name"] in RECEIVES
        own = {e["name"] for e in before.get("env", [])}
        assert {n for n in TRUST_NAMES if n in env} == (set(TRUST_NAMES) if receives else own & set(TRUST_NAMES))
        mounts = after.get("volumeMounts", [])
        assert (trust_volume_mount() in mounts) is receives, before["name"]
        assert mounts[: len(before.get("volumeMounts", []))] == before.get("volumeMounts", []), "own mounts kept"
        for e in before.get("env", []):
            assert env[e["name"]] == e["value"], "nothing a container set is replaced"
        jdk = env.get("JDK_JAVA_OPTIONS", "")
        if before["name"] == "own-java":
            assert jdk == "-Xmx1g"
        elif java and before["name"] != "proxy-opted-out":
            assert (JAVA_TRUST_OPTIONS in jdk) is receives, before["name"]
            assert "-Dhttps.proxyHost=" in jdk
    assert env_values() == {
        "SSL_CERT_FILE": f"{MOUNT_PATH}/ca-bundle.crt",
        "REQUESTS_CA_BUNDLE": f"{MOUNT_PATH}/ca-bundle.crt",
        "CURL_CA_BUNDLE": f"{MOUNT_PATH}/ca-bundle.crt",
        "NODE_EXTRA_CA_CERTS": f"{MOUNT_PATH}/corporate-ca.crt",
    }


def env_values() -> dict[str, str]:
    return {e["name"]: e["value"] for e in trust_env_vars()}


def test_a_pod_with_its_own_volume_of_the_name_gets_none_of_the_group() -> None:
    out = _transform(TRUSTED, _pod([{"name": BUNDLE_NAME, "emptyDir": {}}]))
    assert out["spec"]["volumes"] == [{"name": BUNDLE_NAME, "emptyDir": {}}]
    for before, after in zip(CONTAINERS, out["spec"]["containers"], strict=True):
        own = {e["name"] for e in before.get("env", [])}
        assert set(_env(after)) & set(TRUST_NAMES) == own & set(TRUST_NAMES), before["name"]
        assert after.get("volumeMounts", []) == before.get("volumeMounts", []), before["name"]
        assert JAVA_TRUST_OPTIONS not in json.dumps(after)


def test_opted_out_excluded_and_bundle_less_namespaces_stay_clean() -> None:
    pod = _pod(None)
    opted = _pod(None, {"proxy-component.io/inject": "false"})
    assert _transform(TRUSTED, opted) == opted
    assert _transform(TRUSTED, pod, namespace="kube-system") == pod
    elsewhere = _transform(TRUSTED, pod, namespace="other")  # proxy env, but no proxy-trust there without Kyverno
    assert "volumes" not in elsewhere["spec"]
    assert "HTTPS_PROXY" in _env(elsewhere["spec"]["containers"][0])
    assert "SSL_CERT_FILE" not in _env(elsewhere["spec"]["containers"][0])
    with_kyverno = _settings(CORP.cert_pem, injection={"kyverno": True})
    assert _transform(with_kyverno, pod, namespace="other")["spec"]["volumes"] == [trust_volume()]
    untrusted = _transform(_settings(), pod)
    assert "volumes" not in untrusted["spec"]
    assert not set(_env(untrusted["spec"]["containers"][0])) & set(TRUST_NAMES)


# --- the Kyverno policy, evaluated as Kyverno runs it ------------------------------------------


def _merge(items: list[dict[str, Any]], patch: list[dict[str, Any]], key: str) -> None:
    for entry in patch:
        existing = [e for e in items if e.get(key) == entry[key]]
        if existing:
            existing[0].update(entry)
        else:
            items.append(copy.deepcopy(entry))


# The one case the real Kyverno runs (tests/kyverno) do not reach: the legacy ClusterPolicy's rule for ephemeral
# containers, which come through the `pods/ephemeralcontainers` subresource, never in the Pods of the shared table.
# Its preconditions are evaluated here by a JMESPath engine with Kyverno's `split`; every other rule of every Kyverno
# policy is judged by Kyverno itself.
class _KyvernoFunctions(jmespath.functions.Functions):
    """Kyverno's JMESPath extension the policy uses: split(string, separator) (Go's strings.Split)."""

    @jmespath.functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_split(self, text: str, sep: str) -> list[str]:
        return text.split(sep)


_OPTIONS = jmespath.Options(custom_functions=_KyvernoFunctions())


def _holds(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    key = condition["key"]
    assert key.startswith("{{ "), key
    assert key.endswith(" }}"), key
    value = jmespath.search(key[3:-3], context, options=_OPTIONS)
    assert condition["operator"] in ("Equals", "GreaterThanOrEquals")
    if condition["operator"] == "GreaterThanOrEquals":
        return bool(value >= condition["value"])
    return bool(value == condition["value"])


def _admit(policy: dict[str, Any], pod: dict[str, Any], namespace: str, refresh: bool, field: str) -> dict[str, Any]:
    """One inject rule over `field`: every foreach, its all/any preconditions per element, its strategic merge of
    env (by name), volumeMounts (by mountPath) and the Pod's volumes (by name)."""
    name = {"containers": "inject-containers", "ephemeralContainers": "inject-ephemeralcontainers"}[field]
    rule = _rule(policy, name)
    original, current = copy.deepcopy(pod), copy.deepcopy(pod)
    for foreach in rule["mutate"]["foreach"]:
        seen = current if refresh else original
        for index, element in enumerate(seen["spec"].get(field, [])):
            context = {"request": {"object": seen, "namespace": namespace}, "element": element}
            pre = foreach["preconditions"]
            if not all(_holds(c, context) for c in pre["all"]):
                continue
            if "any" in pre and not any(_holds(c, context) for c in pre["any"]):
                continue
            patch = foreach["patchStrategicMerge"]["spec"]
            target = current["spec"][field][index]
            (container,) = patch[field]
            _merge(target.setdefault("env", []), container["env"], "name")
            if "volumeMounts" in container:
                _merge(target.setdefault("volumeMounts", []), container["volumeMounts"], "mountPath")
            if "volumes" in patch:
                _merge(current["spec"].setdefault("volumes", []), patch["volumes"], "name")
    return current


def test_an_ephemeral_container_gets_the_group_only_in_a_pod_with_the_bundle() -> None:
    settings = _settings(CORP.cert_pem, injection={"kyverno": True})
    policy = cluster_policy(settings, plain_values(settings))
    debug = {"name": "debug", "image": "busybox"}
    for volumes, expected in (
        (None, False),
        ([trust_volume()], True),
        ([{"name": BUNDLE_NAME, "emptyDir": {}}], False),
    ):
        pod: dict[str, Any] = {"metadata": {}, "spec": {"containers": [], "ephemeralContainers": [dict(debug)]}}
        if volumes is not None:
            pod["spec"]["volumes"] = volumes
        admitted = _admit(policy, pod, "apps", True, "ephemeralContainers")
        (container,) = admitted["spec"]["ephemeralContainers"]
        assert ("SSL_CERT_FILE" in _env(container)) is expected, volumes
        assert (trust_volume_mount() in container.get("volumeMounts", [])) is expected
        assert admitted["spec"].get("volumes") == volumes, "a running Pod's volumes never change"


# --- Kustomize, Helm builders, explain -----------------------------------------------------


def test_kustomize_patches_carry_the_group() -> None:
    values = plain_values(TRUSTED).select({"java"})
    ops = json_patch(TRUSTED, values)
    paths = [op["path"] for op in ops]
    assert paths.count("/spec/template/spec/containers/0/env/-") == len(pod_env(TRUSTED, values)) + 4
    assert {"op": "add", "path": "/spec/template/spec/volumes/-", "value": trust_volume()} in ops
    assert {
        "op": "add",
        "path": "/spec/template/spec/containers/0/volumeMounts/-",
        "value": trust_volume_mount(),
    } in ops
    jdk = next(op["value"]["value"] for op in ops if op["value"].get("name") == "JDK_JAVA_OPTIONS")
    assert jdk.endswith(JAVA_TRUST_OPTIONS)
    smp = strategic_merge_patch(TRUSTED, values, kind="CronJob", name="c", container="app")
    spec = smp["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert spec["volumes"] == [trust_volume()]
    assert spec["containers"][0]["volumeMounts"] == [trust_volume_mount()]
    assert "volumes" not in json.dumps(json_patch(_settings(), values))


def test_the_helm_builders_are_plain_data() -> None:
    assert trust_volume() == {"name": "proxy-trust", "configMap": {"name": "proxy-trust"}}
    assert trust_volume_mount() == {"name": "proxy-trust", "mountPath": MOUNT_PATH, "readOnly": True}
    assert [e["name"] for e in trust_env_vars()] == list(TRUST_NAMES)


def test_explain_says_where_each_client_takes_the_ca_from() -> None:
    assert trust_cells(_settings(), _settings().no_proxy()) == []
    cells = {c.client: c for c in trust_cells(TRUSTED, TRUSTED.no_proxy())}
    assert cells["curl"].source == "CURL_CA_BUNDLE (merged bundle)"
    assert cells["python-requests"].source == "REQUESTS_CA_BUNDLE (merged bundle)"
    assert cells["go"].source == "SSL_CERT_FILE (merged bundle)"
    assert cells["node-fetch"].source == "NODE_EXTRA_CA_CERTS (added)"
    assert cells["wget"].source == ""
    assert "GnuTLS" in cells["wget"].warning
    assert cells["java"].source == ""
    assert "java runtime" in cells["java"].warning
    java = {c.client: c for c in trust_cells(TRUSTED, TRUSTED.no_proxy(), {"java"})}["java"]
    assert java.source == "JDK_JAVA_OPTIONS (javax.net.ssl.trustStore)"
    assert java.warning == ""


def test_the_command_explains_tls_trust_per_client(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from proxy_component.cli import main

    config = tmp_path / "proxy.yaml"
    data = {
        "cluster": {"podCidrs": ["10.244.0.0/16"]},
        "proxy": {"upstream": {"url": "http://10.1.2.3:3128", "trustedCa": CORP.cert_pem}},
        "namespaces": ["apps"],
    }
    config.write_text(yaml.safe_dump(data))
    assert main(["explain", str(config), "--runtimes", "java,node"]) == 0
    out = capsys.readouterr().out
    assert "TLS trust" in out
    assert "TLS trust from SSL_CERT_FILE (merged bundle): python-urllib, python-httpx, python-aiohttp, go, ruby" in out
    assert "TLS trust from JDK_JAVA_OPTIONS (javax.net.ssl.trustStore): java" in out
    notes = [line for line in out.splitlines() if line.endswith("; TLS trust]")]
    assert [n.rsplit("[", 1)[1] for n in notes] == ["git; TLS trust]", "wget; TLS trust]", "apt; TLS trust]"]
    assert main(["explain", str(EXAMPLE_PLAIN)]) == 0
    assert "TLS trust" not in capsys.readouterr().out
