"""The values digest stamped wherever the env is injected, and the stack transform by reference.

The stamp (`VALUES_ANNOTATION`) tells `check` and `rollout` which values a pod was given; by reference, each variable
is a `valueFrom` of the namespace's `proxy-config`, and the stamp is the constant `reference`. What the policies do
with the stamp in a real API server and in Kyverno is held by the shared injection table (tests/engine/
test_admission_live.py, tests/kyverno/); these hold the rendering.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pulumi
import pytest
import yaml

from proxy_component.render import manifests, plain_values
from proxy_component.render.digest import REFERENCE, VALUES_ANNOTATION, settings_digest, without_credentials
from proxy_component.render.env import (
    CONFIG_NAME,
    REFERENCE_KEYS,
    ProxyValues,
    pod_env,
    pod_env_by_reference,
    proxy_config_object,
)
from proxy_component.render.helm import PROFILES, helm_values, profile_values
from proxy_component.render.kustomize import kustomization
from proxy_component.render.kyverno import cluster_policy
from proxy_component.render.trust import trust_env_vars
from proxy_component.settings import RUNTIMES, Settings, parse_settings
from proxy_component.transform import RESTARTING_TYPES, WORKLOAD_TYPES, proxy_env_transform, restart_notice
from tests.pki import make_ca

Obj = dict[str, Any]
CLUSTER = {"podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"], "serviceCidrs": ["10.96.0.0/12"]}
PASSWORD = "St4mp-pw-0417"


def _settings(**extra: Any) -> Settings:
    return parse_settings({"cluster": CLUSTER, "namespaces": ["apps", "team-java", "team-py"], **extra})


def _args(type_: str, props: Obj) -> pulumi.ResourceTransformArgs:
    return pulumi.ResourceTransformArgs(
        custom=True, type_=type_, name="x", props=copy.deepcopy(props), opts=pulumi.ResourceOptions()
    )


def _workload(kind: str, namespace: str = "apps", containers: list[Obj] | None = None, **template_meta: Any) -> Obj:
    api = {"Deployment": "apps/v1", "CronJob": "batch/v1", "Pod": "v1"}[kind]
    pod_spec: Obj = {"containers": containers or [{"name": "app", "image": "app"}]}
    meta: Obj = {"name": "web", "namespace": namespace}
    if kind == "Pod":
        return {"apiVersion": api, "kind": kind, "metadata": {**meta, **template_meta}, "spec": pod_spec}
    template = {"metadata": dict(template_meta), "spec": pod_spec}
    spec: Obj = {"selector": {"matchLabels": {"app": "web"}}, "template": template}
    if kind == "CronJob":
        spec = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": spec}


def _template_meta(kind: str, props: Obj) -> Obj:
    if kind == "Pod":
        return dict(props["metadata"])
    if kind == "CronJob":
        return dict(props["spec"]["jobTemplate"]["spec"]["template"]["metadata"])
    return dict(props["spec"]["template"]["metadata"])


def _transform(settings: Settings, kind: str, props: Obj) -> Obj | None:
    token = next(t for t in WORKLOAD_TYPES if t.endswith(f":{kind}"))
    result = proxy_env_transform(settings, plain_values(settings))(_args(token, props))
    return None if result is None else dict(result.props)


# --- the transform by value -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["Deployment", "CronJob", "Pod"])
def test_the_transform_stamps_the_pod_template_with_the_current_digest(kind: str) -> None:
    settings = _settings()
    props = _transform(settings, kind, _workload(kind))
    assert props is not None
    assert _template_meta(kind, props)["annotations"] == {VALUES_ANNOTATION: settings_digest(settings)}
    if kind != "Pod":
        assert "annotations" not in props["metadata"], "the workload's own metadata is not the pod's"


def test_a_workload_that_gets_nothing_is_not_stamped_and_its_own_stamp_is_kept() -> None:
    settings = _settings()
    reads = [{"name": "app", "image": "app", "envFrom": [{"configMapRef": {"name": CONFIG_NAME}}]}]
    props = _transform(settings, "Deployment", _workload("Deployment", containers=reads))
    assert props is not None
    assert "annotations" not in _template_meta("Deployment", props), "envFrom readers follow proxy-config's time"
    own = {VALUES_ANNOTATION: "mine", "other": "x"}
    props = _transform(settings, "Deployment", _workload("Deployment", annotations=own))
    assert props is not None
    assert _template_meta("Deployment", props)["annotations"] == {VALUES_ANNOTATION: "mine", "other": "x"}


def test_other_annotations_stay_and_the_stamp_comes_after_them() -> None:
    settings = _settings()
    props = _transform(settings, "Deployment", _workload("Deployment", annotations={"a": "1"}))
    assert props is not None
    assert list(_template_meta("Deployment", props)["annotations"].items()) == [
        ("a", "1"),
        (VALUES_ANNOTATION, settings_digest(settings)),
    ]


def test_values_without_a_digest_stamp_nothing() -> None:
    settings = _settings()
    values = ProxyValues("http://p:1", "http://p:1", "localhost")
    result = proxy_env_transform(settings, values)(_args(next(iter(RESTARTING_TYPES)), _workload("Deployment")))
    assert result is not None
    props: Any = result.props
    assert "annotations" not in props["spec"]["template"]["metadata"]


# --- the transform by reference -------------------------------------------------------------------------------

REFERENCE_PROFILES: dict[str, dict[str, Any]] = {
    "plain": {"runtimes": {"java": True, "namespaces": {"team-py": ["python"], "team-java": ["java", "node"]}}},
    "python-wide": {"runtimes": {"python": True, "namespaces": {"team-java": ["java"]}}},
    "credentials": {
        "proxy": {"httpProxy": f"http://svc:{PASSWORD}@proxy.corp.example:3128"},
        "deployment": {"enabled": False},
        "runtimes": {"namespaces": {"team-py": ["python"], "team-java": ["node"]}},
    },
    "trust": {
        "proxy": {"upstream": {"url": "http://127.0.0.1:3128", "trustedCa": "GENERATED"}},
        "runtimes": {"node": True, "namespaces": {"team-java": ["java"], "team-py": ["python"]}},
    },
}


def _reference_settings(name: str, mode: str = "reference") -> Settings:
    raw = copy.deepcopy(REFERENCE_PROFILES[name])
    upstream = raw.get("proxy", {}).get("upstream", {})
    if upstream.get("trustedCa") == "GENERATED":
        upstream["trustedCa"] = make_ca("Stamp CA").cert_pem
    return _settings(injection={"transformEnv": mode}, **raw)


def _resolve(entry: Obj, config: Obj) -> Any:
    """An env entry's value, a reference read from the namespace's proxy-config (as the kubelet does: a missing key
    is CreateContainerConfigError)."""
    if "value" in entry:
        return entry["value"]
    (ref,) = entry["valueFrom"].values()
    kind = "Secret" if "secretKeyRef" in entry["valueFrom"] else "ConfigMap"
    assert config["kind"] == kind, (entry, config["kind"])
    assert ref["name"] == config["metadata"]["name"] == CONFIG_NAME
    data = config.get("data") or config.get("stringData") or {}
    assert ref["key"] in data, f"{ref['key']} is not in {config['metadata']['namespace']}'s proxy-config"
    return data[ref["key"]]


SELECTIONS = [frozenset(c) for n in range(len(RUNTIMES) + 1) for c in itertools.combinations(RUNTIMES, n)]


@pytest.mark.parametrize("profile", list(REFERENCE_PROFILES))
def test_every_reference_names_a_key_of_the_namespaces_proxy_config_holding_the_value_by_value(profile: str) -> None:
    """For each namespace with proxy-config, each runtime selection a workload may pick (annotation or not), with
    and without the trust group: the env by reference, read from that namespace's proxy-config, is the env by value,
    entry for entry."""
    settings = _reference_settings(profile)
    values = plain_values(settings)
    checked = 0
    for namespace in settings.proxy_config_namespaces:
        config = proxy_config_object(settings, namespace, values)
        for selection, trusted in itertools.product(SELECTIONS, (False, True)):
            selected = values.select(selection)
            selected = selected.trusted() if trusted else selected
            by_value = pod_env(settings, selected)
            by_reference = pod_env_by_reference(settings, selected)
            assert [e["name"] for e in by_reference] == [e["name"] for e in by_value]
            for ref, literal in zip(by_reference, by_value, strict=True):
                want = _resolve(literal, config) if "valueFrom" in literal else literal["value"]
                assert _resolve(ref, config) == want, (namespace, selection, trusted, ref["name"])
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("profile", list(REFERENCE_PROFILES))
def test_by_reference_the_template_holds_no_value_and_is_stamped_reference(profile: str) -> None:
    settings = _reference_settings(profile)
    values = plain_values(settings)
    for namespace, runtimes in (("apps", "java,node,python"), ("team-py", None), ("team-java", "none")):
        annotations = {settings.runtimes.annotation: runtimes} if runtimes else {}
        props = _transform(settings, "Deployment", _workload("Deployment", namespace, annotations=annotations))
        assert props is not None
        assert _template_meta("Deployment", props)["annotations"][VALUES_ANNOTATION] == REFERENCE
        pod = props["spec"]["template"]["spec"]
        config = proxy_config_object(settings, namespace, values)
        env = pod["containers"][0]["env"]
        trust = {e["name"] for e in trust_env_vars()}
        literals = [e for e in env if "value" in e and e["name"] not in trust]
        assert [e["name"] for e in literals] in ([], ["NODE_USE_ENV_PROXY"]), literals
        for entry in env:
            _resolve(entry, config)
        text = json.dumps(props)
        for value in (values.no_proxy, values.no_proxy_python, values.java_options, settings.http_proxy):
            assert value is None or value not in text, value


def test_a_change_of_the_values_changes_proxy_config_and_no_template_by_reference_and_every_template_by_value() -> None:
    def render(mode: str, no_proxy: list[str]) -> tuple[Obj, Obj]:
        settings = _settings(injection={"transformEnv": mode}, proxy={"noProxy": no_proxy})
        props = _transform(settings, "Deployment", _workload("Deployment"))
        assert props is not None
        return props, proxy_config_object(settings, "apps", plain_values(settings))

    (before, config), (after, changed) = render("reference", []), render("reference", [".corp.example"])
    assert before == after
    assert config != changed
    assert changed["metadata"]["annotations"][VALUES_ANNOTATION] != config["metadata"]["annotations"][VALUES_ANNOTATION]
    (before, _), (after, _) = render("value", []), render("value", [".corp.example"])
    assert before["spec"]["template"] != after["spec"]["template"]


def test_a_namespace_without_proxy_config_gets_values_and_the_digest() -> None:
    settings = _reference_settings("plain")
    props = _transform(settings, "Deployment", _workload("Deployment", "elsewhere"))
    assert props is not None
    assert _template_meta("Deployment", props)["annotations"] == {VALUES_ANNOTATION: settings_digest(settings)}
    assert all("value" in e for e in props["spec"]["template"]["spec"]["containers"][0]["env"])


def test_the_workloads_own_variables_are_never_overwritten_by_reference() -> None:
    settings = _reference_settings("plain")
    own = [{"name": "app", "image": "app", "env": [{"name": "JDK_JAVA_OPTIONS", "value": "-Xmx1g"}]}]
    props = _transform(
        settings,
        "Deployment",
        _workload("Deployment", containers=own, annotations={"proxy-component.io/runtimes": "java"}),
    )
    assert props is not None
    env = props["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "JDK_JAVA_OPTIONS", "value": "-Xmx1g"}
    assert [e["name"] for e in env].count("JDK_JAVA_OPTIONS") == 1


def test_proxy_config_holds_the_reference_keys_only_by_reference() -> None:
    values = plain_values(_reference_settings("trust", "value"))
    by_value = proxy_config_object(_reference_settings("trust", "value"), "apps", values)
    assert not set(REFERENCE_KEYS) & set(by_value["data"])
    settings = _reference_settings("trust")
    by_reference = proxy_config_object(settings, "apps", plain_values(settings))
    assert set(by_reference["data"]) - set(by_value["data"]) == set(REFERENCE_KEYS)


# --- the other consumers --------------------------------------------------------------------------------------


def test_each_proxy_config_says_which_configuration_it_holds() -> None:
    """Its env part only: a CA rotation (the trust part) must not write proxy-config, whose last data write tells
    which pods read it before (live/stale.py)."""
    settings = _settings()
    configs = [o for o in manifests(settings) if o["metadata"]["name"] == CONFIG_NAME]
    assert configs
    for obj in configs:
        assert obj["metadata"]["annotations"][VALUES_ANNOTATION] == settings_digest(settings).partition("-")[0]
    from tests.pki import make_ca

    def trusted(name: str) -> list[dict[str, Any]]:
        upstream = {"url": "http://192.0.2.10:3128", "trustedCa": make_ca(name).cert_pem}
        return [o for o in manifests(_settings(proxy={"upstream": upstream})) if o["metadata"]["name"] == CONFIG_NAME]

    assert trusted("CA one") == trusted("CA two"), "a CA rotation leaves every proxy-config as it is"


def test_the_kustomize_patches_stamp_the_pod_template() -> None:
    settings = _settings()
    values = plain_values(settings)
    json_form = kustomization(settings, values, kind="CronJob", name="c")
    assert len(json_form["patches"]) == 2
    stamp = json.loads(json_form["patches"][1]["patch"])
    assert stamp["spec"]["jobTemplate"]["spec"]["template"]["metadata"] == {
        "annotations": {VALUES_ANNOTATION: settings_digest(settings)}
    }
    by_name = json.loads(
        kustomization(settings, values, kind="Deployment", name="d", container="app")["patches"][0]["patch"]
    )
    assert by_name["spec"]["template"]["metadata"]["annotations"] == {VALUES_ANNOTATION: settings_digest(settings)}
    assert by_name["spec"]["template"]["spec"]["containers"][0]["name"] == "app"
    pod = json.loads(kustomization(settings, values, kind="Pod", name="p", container="app")["patches"][0]["patch"])
    assert pod["metadata"] == {"name": "p", "annotations": {VALUES_ANNOTATION: settings_digest(settings)}}


# Profiles whose chart takes no pod annotations for the pods the env reaches, and why they carry no stamp.
UNSTAMPED = {
    "giantswarm-cluster-values": "merged into every app of the cluster: a top-level podAnnotations would stamp pods "
    "of apps that take no proxy env",
    "proxy": "generic: where the chart's own proxy keys land is unknown",
    "tkg-kapp-controller": "TKG addon data values (ytt): no pod annotations key",
    "tkg-vsphere-cpi": "TKG addon data values (ytt): no pod annotations key",
    "tkg-vsphere-csi": "TKG addon data values (ytt): no pod annotations key",
}


@pytest.mark.parametrize("name", list(PROFILES))
def test_each_helm_profile_stamps_the_pods_its_env_reaches(name: str) -> None:
    settings = _settings()
    profile = PROFILES[name]
    out = helm_values(name, profile_values(settings, name))
    assert bool(profile.annotation_keys) is (name not in UNSTAMPED)
    for path in profile.annotation_keys:
        node: Any = out
        for part in path.split("."):
            node = node[part]
        assert node == {VALUES_ANNOTATION: settings_digest(settings)}, path
    if not profile.annotation_keys:
        assert VALUES_ANNOTATION not in json.dumps(out)
    # The chart's own NO_PROXY names do not make a digest of their own: every stamp compares with the cluster's.
    assert profile_values(settings, name).digest == settings_digest(settings)


def test_the_legacy_cluster_policy_adds_the_stamp_unless_the_pod_has_one() -> None:
    settings = _settings(injection={"kyverno": True, "kyvernoPolicy": "ClusterPolicy"})
    policy = cluster_policy(settings, plain_values(settings))
    rules = {r["name"]: r for r in policy["spec"]["rules"]}
    stamped = [
        f["patchStrategicMerge"]["metadata"]
        for f in rules["inject-containers"]["mutate"]["foreach"]
        if "metadata" in f["patchStrategicMerge"]
    ]
    assert stamped == [{"annotations": {f"+({VALUES_ANNOTATION})": settings_digest(settings)}}] * 2
    ephemeral = rules["inject-ephemeralcontainers"]["mutate"]["foreach"]
    assert not any("metadata" in f["patchStrategicMerge"] for f in ephemeral)


def test_a_password_is_in_no_rendered_object_but_secrets_and_not_cheap_to_find_from_the_stamp() -> None:
    import hashlib

    settings = _settings(
        proxy={"httpProxy": f"http://svc:{PASSWORD}@proxy.corp.example:3128"},
        deployment={"enabled": False},
        injection={"admission": True, "kyverno": True},
        helmValuesSecrets=[{"profile": "argo-cd", "namespace": "apps"}],
    )
    values = plain_values(settings)
    rendered: list[Obj] = [o for o in manifests(settings) if o["kind"] != "Secret"]
    rendered.append(kustomization(settings, values, kind="Deployment", name="d"))
    for mode in ("value", "reference"):
        moded = _settings(
            **{**settings.model_dump(by_alias=True, exclude_none=True), "injection": {"transformEnv": mode}}
        )
        props = _transform(moded, "Deployment", _workload("Deployment"))
        assert props is not None
        rendered.append(props)
    text = yaml.safe_dump_all(rendered)
    assert PASSWORD not in text
    digest = settings_digest(settings)
    assert digest in text
    content = "\0".join(
        "" if v is None else str(v)
        for v in (values.http_proxy, values.https_proxy, values.no_proxy, values.no_proxy_python,
                  values.java_options, values.java_trust_options)
    ).encode()  # fmt: skip
    without = "\0".join(
        "" if v is None else without_credentials(str(v)) if i < 2 else str(v)
        for i, v in enumerate((values.http_proxy, values.https_proxy, values.no_proxy, values.no_proxy_python,
                               values.java_options, values.java_trust_options))
    ).encode()  # fmt: skip
    env = hashlib.sha256(without).hexdigest()[:16]
    assert digest == f"{env}-none", "with credentials the stamp is a sha256 of the values without them"
    assert hashlib.sha256(content).hexdigest()[:16] not in text


# --- what the preview says --------------------------------------------------------------------------------------


def _hook_args(old: Any, new: Any, type_: str = "kubernetes:apps/v1:Deployment") -> pulumi.ResourceHookArgs:
    def props(stamp: Any) -> Obj | None:
        if stamp == "absent":
            return None
        annotations = {} if stamp is None else {VALUES_ANNOTATION: stamp}
        return {
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"template": {"metadata": {"annotations": annotations}, "spec": {}}},
        }

    return pulumi.ResourceHookArgs(
        urn="urn:x", id="apps/web", name="web", type=type_, old_inputs=props(old), new_inputs=props(new)
    )


def test_the_restart_notice_names_the_workload_only_when_its_stamp_changes() -> None:
    assert restart_notice(_hook_args("aaaa", "aaaa")) is None
    assert restart_notice(_hook_args(REFERENCE, REFERENCE)) is None
    notice = restart_notice(_hook_args("aaaa", "bbbb"))
    assert notice is not None
    assert notice.startswith("Deployment apps/web: this update restarts its pods: ")
    assert "(digest aaaa -> bbbb)" in notice
    assert "becomes references" in str(restart_notice(_hook_args("aaaa", REFERENCE)))
    assert "no longer references" in str(restart_notice(_hook_args(REFERENCE, "bbbb")))
    assert "gets the values digest bbbb (once" in str(restart_notice(_hook_args(None, "bbbb")))
    from pulumi.runtime.rpc import UNKNOWN

    assert "may change" in str(restart_notice(_hook_args("aaaa", UNKNOWN)))
    assert restart_notice(_hook_args("aaaa", "bbbb", "kubernetes:core/v1:ConfigMap")) is None


def test_the_helm_docs_list_each_profiles_annotation_keys() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "helm-profiles.md").read_text()
    section = doc.split("\n## The values digest on the chart's pods", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in section.splitlines() if "| `" in line}
    assert rows == {
        f"`{name}`": "<br>".join(f"`{key}`" for key in p.annotation_keys)
        for name, p in PROFILES.items()
        if p.annotation_keys
    }
    assert set(PROFILES) - {name.strip("`") for name in rows} == set(UNSTAMPED)
