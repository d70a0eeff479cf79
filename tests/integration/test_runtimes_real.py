"""Issue 17 with the real tools: what every consumer injects, handed to a real JDK 17, httpx, Node 24, kubectl.

- No client may crash on the injected value: real httpx, with the env each consumer gives a workload by
  default, in the IPv6-only example and a dual-stack cluster (IPv6 CIDRs and bracketed addresses in NO_PROXY).
- Runtimes are opt-in: by default a real JVM and Node 24's http and fetch send short in-cluster names
  (http://my-svc:8080) directly, never to the proxy.
- A workload's own JAVA_TOOL_OPTIONS (heap flags, an agent's -D) survives every consumer, and the real JVM
  honours both it and the injected JDK_JAVA_OPTIONS.
No traffic leaves loopback: decision functions, or the harness's network namespace.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from proxy_component.explain import workload_env
from proxy_component.render import plain_values
from proxy_component.render.env import additions, pod_env, proxy_config_object
from proxy_component.render.helm import helm_values, merge_values, profile_values
from proxy_component.render.kustomize import kustomization
from proxy_component.settings import Settings, parse_settings
from proxy_component.transform import proxy_env_transform
from tests.examples import example
from tests.integration.real_clients import decide_many
from tests.integration.real_clients.harness import HERE

DUAL_STACK = parse_settings(
    {
        "cluster": {
            "podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
            "serviceCidrs": ["10.96.0.0/12", "fd00:10:96::/108"],
            "apiServerIps": ["10.96.0.1", "fd00:10:96::1"],
        },
        "namespaces": ["default"],
        "injection": {"kyverno": True},
    }
)
URLS = ["http://my-svc:8080/", "http://my-svc.default/", "https://github.com/", "http://[fd00:10:96::1]/"]
OWN = "-Xmx96m -Dworkload.marker=apm-agent-on"  # a workload's own JAVA_TOOL_OPTIONS: a heap flag, an agent's -D
CONTAINER = {"name": "app", "image": "i", "env": [{"name": "JAVA_TOOL_OPTIONS", "value": OWN}]}


def _kubelet_env(container: dict[str, Any], config: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment the kubelet gives a container: `envFrom` sources first, then `env`, a later name winning."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if config is not None and (source.get("configMapRef") or {}).get("name") == config["metadata"]["name"]:
            env.update(config.get("data") or config["stringData"])
    for entry in container.get("env", []):
        env[entry["name"]] = entry.get("value", "(from a Secret)")
    return env


def _transform(settings: Settings, container: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    props = {
        "metadata": {"name": "app", "namespace": "default", "annotations": annotations},
        "spec": {"selector": {}, "template": {"metadata": {}, "spec": {"containers": [copy.deepcopy(container)]}}},
    }
    args = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:apps/v1:Deployment", name="app", props=props, opts=pulumi.ResourceOptions()
    )
    result = proxy_env_transform(settings, plain_values(settings))(args)
    assert result is not None
    assert isinstance(result.props, dict)
    out: dict[str, Any] = result.props["spec"]["template"]["spec"]["containers"][0]
    return out


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "(from a Secret)") for e in container.get("env", [])}


def _consumer_envs(settings: Settings, annotations: dict[str, str]) -> dict[str, dict[str, str]]:
    """What a workload that selects by `annotations` ends up with, consumer by consumer (no kubectl here)."""
    selection = settings.runtimes.select("default", annotations)
    values = plain_values(settings).select(selection)
    bare = {"name": "app", "image": "i"}
    helm = merge_values({"env": []}, helm_values("env", profile_values(settings, "env", selection=selection)))
    return {
        "transform": _env(_transform(settings, bare, annotations)),
        "helm": _env(helm),
        "inline": _env({"env": additions(bare, pod_env(settings, values))}),
        "envFrom proxy-config": _kubelet_env(
            {"envFrom": [{"configMapRef": {"name": "proxy-config"}}]},
            proxy_config_object(settings, "default", plain_values(settings)),
        ),
    }


@pytest.mark.parametrize("name", ["ipv6-only", "dual-stack"])
def test_real_httpx_starts_with_what_every_consumer_injects_by_default(name: str) -> None:
    """Before: NO_PROXY held IPv6 CIDRs and bracketed addresses in both spellings, and httpx.Client() raised
    InvalidURL. Now no_proxy, which every Python client reads first, carries the Python-safe list."""
    settings = DUAL_STACK if name == "dual-stack" else example("ipv6-only")[0]
    no_proxy = str(settings.no_proxy())
    assert "/" in no_proxy, "the cluster must have what httpx refuses in NO_PROXY: an IPv6 CIDR"
    assert "[" in no_proxy, "and a bracketed address"
    envs = _consumer_envs(settings, {})
    shown = {json.dumps({k: v for k, v in e.items() if k != "NO_PROXY_PYTHON"}, sort_keys=True) for e in envs.values()}
    assert len(shown) == 1, envs  # proxy-config holds NO_PROXY_PYTHON besides
    env = envs["transform"]
    real = decide_many(env, URLS, ["python-httpx", "python-urllib", "python-requests", "python-aiohttp", "go"])
    assert not [(c, u) for c, row in real.items() for u, d in row.items() if d == "error"], real
    assert real["go"]["http://[fd00:10:96::1]/"] == "bypass", "Go still reads the IPv6 entries in NO_PROXY"
    assert real["python-httpx"]["https://github.com/"] == "proxy"


def test_real_httpx_starts_for_a_workload_that_selects_python() -> None:
    settings = DUAL_STACK
    for consumer, env in _consumer_envs(settings, {"proxy-component.io/runtimes": "python"}).items():
        if consumer == "envFrom proxy-config":
            continue  # the namespace's selection, which is none here
        assert env["NO_PROXY"] == env["no_proxy"], consumer
        real = decide_many(env, URLS, ["python-httpx"])["python-httpx"]
        assert "error" not in real.values(), (consumer, real)


def test_by_default_a_real_jvm_and_node_send_short_names_directly() -> None:
    """Before: JAVA_TOOL_OPTIONS and NODE_USE_ENV_PROXY=1 went to every workload, so after an upgrade JVMs and
    Node >= 24 sent http://my-svc:8080 to tinyproxy, which cannot resolve it. Now they are opt-in."""
    settings = example("corporate-proxy")[0]
    envs = _consumer_envs(settings, {})
    for consumer, env in envs.items():
        assert "NODE_USE_ENV_PROXY" not in env, consumer
        assert "JDK_JAVA_OPTIONS" not in env, consumer
        assert "JAVA_TOOL_OPTIONS" not in env, consumer
    short = ["http://my-svc:8080/", "http://my-svc.default:8080/"]
    real = decide_many(envs["transform"], short, ["java", "node-http", "node-fetch"])
    assert real == {c: dict.fromkeys(short, "bypass") for c in ("java", "node-http", "node-fetch")}
    # Opted in by the annotation, the same clients use the proxy, as the model says (short names included).
    opted = _consumer_envs(settings, {"proxy-component.io/runtimes": "java,node"})["transform"]
    real = decide_many(opted, ["https://github.com/"], ["java", "node-http", "node-fetch"])
    assert {c: row["https://github.com/"] for c, row in real.items()} == dict.fromkeys(real, "proxy")


def _jvm(env: dict[str, str]) -> dict[str, Any]:
    """Run the real JVM (Decide.java) with exactly `env`: its max heap, the marker property, its proxy decisions."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java (a JDK 17) is needed: bash scripts/clients")
    with tempfile.TemporaryDirectory(prefix="pcx-home-") as home:
        result = subprocess.run(
            [java, "-Xshare:auto", "-XX:+UseSerialGC", str(HERE / "Decide.java"), "https://github.com/",
             "http://my-svc.default.svc/"],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, **env},
            capture_output=True, text=True, timeout=120, check=False, cwd=home,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def _kustomized(tmp_path: Path, settings: Settings, container: str | None) -> dict[str, str]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl (for its built-in kustomize) is needed: apt-get install kubectl")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app"},
        "spec": {
            "selector": {"matchLabels": {"app": "app"}},
            "template": {"metadata": {"labels": {"app": "app"}}, "spec": {"containers": [CONTAINER]}},
        },
    }
    (tmp_path / "deploy.yaml").write_text(yaml.safe_dump(deployment))
    values = plain_values(settings).select({"java"})
    kz = kustomization(settings, values, kind="Deployment", name="app", container=container)
    kz["resources"] = ["deploy.yaml"]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kz))
    out = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    built = yaml.safe_load(out.stdout)
    names = [e["name"] for e in built["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert len(names) == len(set(names)), f"a name twice: the later would win ({names})"
    return _env(built["spec"]["template"]["spec"]["containers"][0])


# The Kyverno policies give what the transform gives: the Kyverno lane (tests/kyverno) holds them to it under the real
# Kyverno CLI, so the transform stands for them here.
@pytest.mark.parametrize("consumer", ["kustomize json patch", "kustomize strategic merge", "transform",
                                      "helm", "envFrom proxy-config"])  # fmt: skip
def test_a_workloads_own_java_tool_options_survive_and_the_real_jvm_honours_both(tmp_path: Path, consumer: str) -> None:
    """Before: JAVA_TOOL_OPTIONS was injected, replacing the workload's through envFrom (env wins), the Kustomize
    JSON patch (a second entry wins) and strategic merge (replaced): -Xmx and the agent's -D vanished. Now the
    proxy goes into JDK_JAVA_OPTIONS, which the java launcher reads beside it."""
    settings = parse_settings(
        {"cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}, "namespaces": ["default"],
         "runtimes": {"namespaces": {"default": ["java"]}}}
    )  # fmt: skip
    java = {"proxy-component.io/runtimes": "java"}
    if consumer.startswith("kustomize"):
        env = _kustomized(tmp_path, settings, "app" if "strategic" in consumer else None)
    elif consumer == "transform":
        env = _env(_transform(settings, CONTAINER, java))
    elif consumer == "helm":
        mine = {"env": [{"name": "JAVA_TOOL_OPTIONS", "value": OWN}]}
        merged = merge_values(mine, helm_values("env", profile_values(settings, "env", selection={"java"})))
        env = {e["name"]: e["value"] for e in merged["env"]}
    else:
        container = {**CONTAINER, "envFrom": [{"configMapRef": {"name": "proxy-config"}}]}
        env = _kubelet_env(container, proxy_config_object(settings, "default", plain_values(settings)))
    assert env["JAVA_TOOL_OPTIONS"] == OWN
    assert env["JDK_JAVA_OPTIONS"].startswith("-Dhttp.proxyHost=http-proxy.kube-system.svc.cluster.local ")
    jvm = _jvm(env)
    assert jvm["marker"] == "apm-agent-on"
    assert jvm["maxHeap"] <= 96 * 1024 * 1024
    assert jvm["decisions"]["https://github.com/"]["decision"] == "proxy"
    assert jvm["decisions"]["http://my-svc.default.svc/"]["decision"] == "bypass"


def test_the_jvm_gets_no_options_it_cannot_use() -> None:
    """A proxy with credentials (407, Basic disabled for tunnels) or an https:// proxy: no JDK_JAVA_OPTIONS."""
    for proxy in ({"httpProxy": "http://u:hunter2@proxy.corp:3128"}, {"httpsProxy": "https://proxy.corp:3129"}):
        settings = parse_settings(
            {"proxy": proxy, "cluster": {"podCidrs": ["10.244.0.0/16"]}, "runtimes": {"java": True},
             "namespaces": ["default"]}
        )  # fmt: skip
        for consumer, env in _consumer_envs(settings, {}).items():
            assert "JDK_JAVA_OPTIONS" not in env, (proxy, consumer)
        assert workload_env(settings, settings.no_proxy(), {"java"}).get("JDK_JAVA_OPTIONS") is None
