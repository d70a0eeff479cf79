"""ClusterProxy under Pulumi mocks: the resources it registers, how Outputs flow in, previews and secrets."""

from __future__ import annotations

import random
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from proxy_component import ClusterNetwork, ClusterProxy, ClusterProxyArgs, SettingsError
from proxy_component.dataplane.firewall import firewall_rules
from proxy_component.dataplane.lifecycle import RESTART_ANNOTATION, restart_inputs
from proxy_component.settings import NetworkValues, parse_settings
from tests.conftest import ROOT, Harness, holds_secret

COMPONENT = "proxy-component:index:ClusterProxy"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"
SERVICE = "kubernetes:core/v1:Service"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"

IPV6_ONLY: dict[str, Any] = {
    "cluster": {
        "name": "ipv6-only",
        "dnsDomain": "k8s.internal",
        "podCidrs": ["fd00:10:244::/56"],
        "serviceCidrs": ["fd00:10:96::/108"],
        "nodeCidrs": ["10.0.0.0/8", "fd00:10::/64"],
    },
    "proxy": {"noProxy": ["fd00::/8"]},
    "namespaces": ["default", "apps"],
}


class FakeCluster(pulumi.CustomResource):
    """Stands for an EKS/GKE/AKS cluster whose network is only known once it exists."""

    pod_cidr: pulumi.Output[str]
    service_cidr: pulumi.Output[str]
    endpoint: pulumi.Output[str]

    def __init__(self, name: str) -> None:
        super().__init__("test:index:Cluster", name, {"pod_cidr": None, "service_cidr": None, "endpoint": None})


def test_resources_types_names_namespaces_and_parents(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY))
    assert mocked.value(proxy.urn).endswith(f"::pulumi:pulumi:Stack${COMPONENT}::egress")
    registered = mocked.settle()
    table = sorted(
        (r.typ, r.name, r.inputs.get("metadata", {}).get("namespace"), r.inputs.get("metadata", {}).get("name"))
        for r in registered
    )
    assert table == [
        (DAEMON_SET, "egress-tinyproxy", "kube-system", "http-proxy"),
        (CONFIG_MAP, "egress-proxy-config-apps", "apps", "proxy-config"),
        (CONFIG_MAP, "egress-proxy-config-default", "default", "proxy-config"),
        (CONFIG_MAP, "egress-tinyproxy-config", "kube-system", "http-proxy-config"),
        (SERVICE, "egress-service", "kube-system", "http-proxy"),
        (COMPONENT, "egress", None, None),
    ]
    children = {urn for urn in mocked_urns(mocked) if "::kubernetes:" in urn or "$kubernetes:" in urn}
    assert len(children) == 5
    assert all(f"::{COMPONENT}$kubernetes:" in urn for urn in children)


def mocked_urns(mocked: Harness) -> list[str]:
    from pulumi.runtime.settings import get_monitor

    monitor: Any = get_monitor()
    return list(monitor.resources)


def test_daemonset_and_service_follow_the_runbook(mocked: Harness) -> None:
    ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY))
    ds = mocked.one(DAEMON_SET, "egress-tinyproxy").inputs["spec"]
    pod = ds["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "Default"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["priorityClassName"] == "system-node-critical"
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert ds["updateStrategy"]["type"] == "RollingUpdate"
    assert ds["template"]["metadata"]["annotations"][RESTART_ANNOTATION].startswith("port=8888 firewall=")
    svc = mocked.one(SERVICE, "egress-service").inputs["spec"]
    assert svc["ipFamilies"] == ["IPv6"]
    assert svc["ipFamilyPolicy"] == "SingleStack"
    assert svc["ports"][0]["port"] == 8888


def test_outputs(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY))
    url = "http://http-proxy.kube-system.svc.k8s.internal:8888"
    assert mocked.value(proxy.proxy_url) == url
    assert mocked.value(proxy.http_proxy) == url
    assert mocked.value(proxy.https_proxy) == url
    no_proxy = mocked.value(proxy.no_proxy)
    assert no_proxy.startswith("localhost,127.0.0.1,::1,[::1],k8s.internal,.k8s.internal,svc,.svc,")
    env = mocked.value(proxy.env)
    # Runtimes are opt-in: the cluster-wide env is the six; no_proxy carries the Python-safe list.
    assert [e["name"] for e in env] == [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
    ]
    python = mocked.value(proxy.no_proxy_python)
    assert {e["name"]: e["value"] for e in env}["no_proxy"] == python
    java = mocked.value(proxy.jdk_java_options)
    assert java.startswith("-Dhttp.proxyHost=http-proxy.kube-system.svc.k8s.internal -Dhttp.proxyPort=8888 ")
    assert "-Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]|k8s.internal|*.k8s.internal|" in java
    assert "fd00::/8" in no_proxy.split(",")
    assert "[::1]" in no_proxy.split(",")
    kept = [e for e in no_proxy.split(",") if not ("/" in e and ":" in e) and not e.startswith("[")]
    assert python == ",".join(kept)
    outputs = (proxy.http_proxy, proxy.https_proxy, proxy.no_proxy, proxy.env, proxy.no_proxy_python)
    assert not any(mocked.secret(o) for o in outputs)
    config = mocked.one(CONFIG_MAP, "egress-proxy-config-default").inputs["data"]
    assert config["NO_PROXY"] == no_proxy
    assert config["no_proxy"] == config["NO_PROXY_PYTHON"] == python
    assert "JDK_JAVA_OPTIONS" not in config
    assert "NODE_USE_ENV_PROXY" not in config
    assert "JAVA_TOOL_OPTIONS" not in config


def test_a_cidr_that_is_an_output_of_another_resource_reaches_no_proxy(mocked: Harness) -> None:
    mocked.mocks.state["test:index:Cluster"] = {
        "pod_cidr": "10.244.0.0/16",
        "service_cidr": "172.20.0.0/16",
        "endpoint": "https://ABC123.gr7.eu-west-1.eks.amazonaws.com",
    }
    cluster = FakeCluster("eks")
    network = ClusterNetwork(
        pod_cidrs=cluster.pod_cidr,
        service_cidrs=[cluster.service_cidr],
        api_server_hosts=cluster.endpoint,
        origin="eks",
    )
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings={"namespaces": ["default"]}, network=network))
    no_proxy = mocked.value(proxy.no_proxy)
    assert "172.20.0.0/16,10.244.0.0/16,abc123.gr7.eu-west-1.eks.amazonaws.com" in no_proxy
    conf = mocked.one(CONFIG_MAP, "egress-tinyproxy-config").inputs["data"]["tinyproxy.conf"]
    assert "Allow 10.244.0.0/16\n" in conf
    assert "Allow 172.20.0.0/16" not in conf
    assert mocked.one(CONFIG_MAP, "egress-proxy-config-default").inputs["data"]["NO_PROXY"] == no_proxy
    # The firewall refuses the discovered ranges to tinyproxy, and they roll the DaemonSet.
    rules = mocked.one(CONFIG_MAP, "egress-tinyproxy-config").inputs["data"]["nftables.conf"]
    assert "ip daddr { 10.244.0.0/16, 172.20.0.0/16 } counter reject with tcp reset" in rules
    digest = mocked.one(DAEMON_SET, "egress-tinyproxy").inputs["spec"]["template"]["metadata"]["annotations"]
    settings = parse_settings({"namespaces": ["default"]})
    values = NetworkValues(pod_cidrs=["10.244.0.0/16"], service_cidrs=["172.20.0.0/16"])
    assert digest[RESTART_ANNOTATION] == restart_inputs(settings, firewall_rules(settings, values))
    assert digest[RESTART_ANNOTATION] != restart_inputs(settings)


def test_preview_with_unknown_cidrs_registers_the_same_resources(mocked_preview: Harness) -> None:
    cluster = FakeCluster("eks")  # no state in preview: its outputs are unknown
    network = ClusterNetwork(pod_cidrs=cluster.pod_cidr, service_cidrs=cluster.service_cidr, origin="eks")
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings={"namespaces": ["default"]}, network=network))
    assert not mocked_preview.known(proxy.no_proxy)
    assert not mocked_preview.known(proxy.env)
    assert mocked_preview.known(proxy.proxy_url)
    names = sorted(r.name for r in mocked_preview.settle())
    assert names == [
        "egress",
        "egress-proxy-config-default",
        "egress-service",
        "egress-tinyproxy",
        "egress-tinyproxy-config",
        "eks",
    ]


def test_credentials_make_outputs_secret_and_no_configmap_carries_them(mocked: Harness) -> None:
    settings = {
        **IPV6_ONLY,
        "proxy": {
            "httpProxy": "http://user:hunter2@proxy.corp:3128",
            "upstream": {"url": "http://proxy.corp:3128", "username": "svc", "password": "upstream-s3cret"},
        },
    }
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    assert mocked.secret(proxy.http_proxy)
    assert mocked.secret(proxy.https_proxy)
    assert mocked.secret(proxy.env)
    assert not mocked.secret(proxy.no_proxy)
    assert not mocked.secret(proxy.proxy_url)
    registered = mocked.settle()
    for r in registered:
        if r.typ != SECRET:
            flat = repr(r.inputs)
            assert "hunter2" not in flat, f"{r.typ} {r.name} leaks the proxy password"
            assert "upstream-s3cret" not in flat, f"{r.typ} {r.name} leaks the upstream password"
    assert [r.name for r in registered if r.typ == CONFIG_MAP] == []
    secrets = {r.name: r for r in registered if r.typ == SECRET}
    assert sorted(secrets) == ["egress-proxy-config-apps", "egress-proxy-config-default", "egress-tinyproxy-config"]
    for secret in secrets.values():
        assert holds_secret(secret.raw_inputs["stringData"])
    assert (
        secrets["egress-proxy-config-apps"].inputs["stringData"]["HTTPS_PROXY"] == "http://user:hunter2@proxy.corp:3128"
    )
    assert (
        "Upstream http svc:upstream-s3cret@proxy.corp:3128"
        in secrets["egress-tinyproxy-config"].inputs["stringData"]["tinyproxy.conf"]
    )
    ds = next(r for r in registered if r.typ == DAEMON_SET)
    assert not holds_secret(ds.raw_inputs["spec"]), "the DaemonSet spec must stay reviewable in previews"
    assert ds.inputs["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "http-proxy-config"


def test_children_inherit_the_components_provider(mocked: Harness) -> None:
    provider = k8s.Provider("cluster", kubeconfig="apiVersion: v1\nkind: Config\n")
    ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY), pulumi.ResourceOptions(providers=[provider]))
    children = [
        r for r in mocked.settle() if r.typ.startswith("kubernetes:") and r.typ != "pulumi:providers:kubernetes"
    ]
    assert len(children) == 5
    assert all(r.provider is not None and "::cluster::" in r.provider for r in children)


def test_same_inputs_in_any_order_give_identical_resource_inputs(mocked: Harness) -> None:
    rng = random.Random(3)

    def shuffled(values: list[str]) -> list[str]:
        copy = values[:]
        rng.shuffle(copy)
        return copy

    base: dict[str, Any] = {
        "cluster": {
            "podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
            "serviceCidrs": ["10.96.0.0/12", "fd00:10:96::/108"],
            "nodeCidrs": ["192.168.0.0/24", "192.168.1.0/24"],
            "apiServerHosts": ["api.example.com", "api-internal.example.com"],
        },
        "proxy": {"noProxy": ["registry.corp", ".corp.example", "172.16.0.0/12"]},
        "deployment": {"connectPorts": [443, 8443, 6443]},
        "namespaces": ["a", "b", "c", "d"],
    }
    for i in range(3):
        settings = {
            "cluster": {k: shuffled(v) for k, v in base["cluster"].items()},
            "proxy": {"noProxy": shuffled(base["proxy"]["noProxy"])},
            "deployment": {
                "connectPorts": [int(p) for p in shuffled([str(p) for p in base["deployment"]["connectPorts"]])]
            },
            "namespaces": shuffled(base["namespaces"]),
        }
        ClusterProxy(f"run{i}", ClusterProxyArgs(settings=settings))
    by_run: dict[str, list[tuple[str, str, Any]]] = {}
    for r in mocked.settle():
        run, _, rest = r.name.partition("-")
        by_run.setdefault(run, []).append((r.typ, rest, r.inputs))
    first, *others = (sorted(v, key=lambda t: (t[0], t[1])) for v in by_run.values())
    assert len(first) == 8
    for other in others:
        assert repr(other) == repr(first)


def test_without_any_source_range_tinyproxy_would_refuse_everyone(mocked: Harness) -> None:
    with pytest.raises(SettingsError, match=r"cluster\.podCidrs: \[\] and cluster\.nodeCidrs: \[\]"):
        ClusterProxy("egress", ClusterProxyArgs(settings={"namespaces": ["default"]}))


def test_disabled_deployment_registers_only_the_consumers(mocked: Harness) -> None:
    settings = {
        "deployment": {"enabled": False},
        "proxy": {"httpProxy": "http://proxy.corp:3128"},
        "namespaces": ["default"],
    }
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    assert mocked.value(proxy.proxy_url) == "http://proxy.corp:3128"
    assert sorted(r.name for r in mocked.settle()) == ["egress", "egress-proxy-config-default"]


def test_only_what_tinyproxy_cannot_reload_rolls_the_daemonset(mocked: Harness) -> None:
    """Issue 35 item 1: connect ports, the upstream, its password and its noUpstream list, the Filter (and issue 46's
    access log) change the config object only (tinyproxy reloads them in place); the port and the kernel ranges change
    the pod template."""
    upstream = {"url": "http://svc:first@proxy.corp.example:3128"}
    ClusterProxy("a", ClusterProxyArgs(settings={**IPV6_ONLY, "proxy": {"upstream": upstream}}))
    ClusterProxy(
        "b", ClusterProxyArgs(settings={**IPV6_ONLY, "namespaces": ["other"], "proxy": {"upstream": upstream}})
    )
    changed: dict[str, dict[str, Any]] = {
        "c": {"deployment": {"connectPorts": [443, 8443]}},
        "d": {"proxy": {"upstream": {**upstream, "noUpstream": ["corp.example"]}}},
        "e": {"proxy": {"upstream": {"url": "http://svc:second@proxy.corp.example:3128"}}},
        "f": {"deployment": {"denyDestinations": [r"^127\."]}},
        "g": {"deployment": {"accessLog": {"enabled": False}}},
        "h": {"deployment": {"accessLog": {"maxLinesPerSecond": 5}}},
    }
    for name, extra in changed.items():
        ClusterProxy(name, ClusterProxyArgs(settings={**IPV6_ONLY, "proxy": {"upstream": upstream}, **extra}))
    ClusterProxy("port", ClusterProxyArgs(settings={**IPV6_ONLY, "deployment": {"port": 3129}}))
    wider = {**IPV6_ONLY["cluster"], "podCidrs": [*IPV6_ONLY["cluster"]["podCidrs"], "fd00:10:245::/56"]}
    ClusterProxy("ranges", ClusterProxyArgs(settings={**IPV6_ONLY, "cluster": wider}))
    resources = mocked.settle()
    templates = {r.name: r.inputs["spec"]["template"] for r in resources if r.typ == DAEMON_SET}
    configs = {r.name: r.inputs for r in resources if r.name.endswith("-tinyproxy-config")}
    for name in ("b", *changed):
        assert templates[f"{name}-tinyproxy"] == templates["a-tinyproxy"], name
    for name in changed:
        assert configs[f"{name}-tinyproxy-config"] != configs["a-tinyproxy-config"], name
    # The same resources, by kind and name, for every change that reloads in place: none renamed or replaced.
    kinds: dict[str, set[tuple[str, str]]] = {}
    for r in resources:
        owner, _, rest = r.name.partition("-")
        kinds.setdefault(owner, set()).add((r.typ, rest))
    assert (DAEMON_SET, "tinyproxy") in kinds["a"]
    for name in changed:
        assert kinds[name] == kinds["a"], (name, kinds[name] ^ kinds["a"])
    restart = {name: t["metadata"]["annotations"][RESTART_ANNOTATION] for name, t in templates.items()}
    assert restart["port-tinyproxy"].startswith("port=3129 ")
    assert restart["ranges-tinyproxy"] != restart["a-tinyproxy"]


def test_a_namespace_that_selects_runtimes_gets_their_variables_in_its_proxy_config(mocked: Harness) -> None:
    settings = {**IPV6_ONLY, "namespaces": ["apps", "web"], "runtimes": {"namespaces": {"apps": ["java", "node"]}}}
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    apps = mocked.one(CONFIG_MAP, "egress-proxy-config-apps").inputs["data"]
    web = mocked.one(CONFIG_MAP, "egress-proxy-config-web").inputs["data"]
    assert apps["JDK_JAVA_OPTIONS"] == mocked.value(proxy.jdk_java_options)
    assert apps["NODE_USE_ENV_PROXY"] == "1"
    assert sorted(set(apps) - set(web)) == ["JDK_JAVA_OPTIONS", "NODE_USE_ENV_PROXY"]
    assert [e["name"] for e in mocked.value(proxy.env)][-1] == "no_proxy"


def test_the_preview_says_which_clients_break_on_the_list(mocked: Harness, caplog: pytest.LogCaptureFixture) -> None:
    from proxy_component.explain import preview_warnings as model_warnings
    from proxy_component.settings import parse_settings

    caplog.set_level("INFO")
    settings = {**IPV6_ONLY, "proxy": {"noProxy": ["fd00::/8"], "httpProxy": "http://user:hunter2@proxy.corp:3128"}}
    ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    logs = mocked.logs(caplog)
    warnings = [m for level, m in logs if level == "WARNING"]
    parsed = parse_settings(settings)
    expected = model_warnings(parsed, parsed.no_proxy())
    assert warnings[:-1] == [f"NO_PROXY: {line}" for line in expected]
    assert warnings[-1].startswith("JDK_JAVA_OPTIONS: not rendered, so JVMs get no proxy: the proxy needs credentials")
    assert not any("InvalidURL" in w for w in warnings), "no_proxy carries the Python-safe list"
    assert not any("hunter2" in m for _, m in logs)


def test_each_examples_preview_warnings_are_the_models(mocked: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Every cell of `explain` that misses its intent at a destination these settings make has its line in the
    preview, once, for each YAML example; those at destinations every cluster has (a Service's short name, ::1,
    an external host for Node and JVMs) have none: they are `explain`'s."""
    from proxy_component.explain import GENERIC_LABELS, destinations, evaluate
    from proxy_component.settings import load_settings

    caplog.set_level("WARNING")
    for example in ("ipv6-only", "corporate-proxy"):
        caplog.clear()
        settings = load_settings(str(ROOT / "examples" / example / "proxy.yaml"))
        ClusterProxy(example, ClusterProxyArgs(settings=settings))
        mocked.settle()
        shown = [m for level, m in mocked.logs(caplog) if level == "WARNING" and m.startswith("NO_PROXY: ")]
        labels = {d.url: d.label for d in destinations(settings, settings.no_proxy())}
        failing = [c for c in evaluate(settings, settings.no_proxy()) if c.decision != c.intended]
        specific = [c for c in failing if labels[c.url] not in GENERIC_LABELS]
        assert specific, example
        assert len(specific) < len(failing), example
        for cell in specific:
            lines = [m for m in shown if m.startswith(f"NO_PROXY: {cell.warning} [") and cell.client in m]
            assert len(lines) == 1, (example, cell)
            assert cell.url in lines[0] or "every destination" in lines[0]
        for cell in failing:
            if labels[cell.url] in GENERIC_LABELS and cell.warning not in {c.warning for c in specific}:
                assert not any(cell.warning in m for m in shown), (example, cell)
        assert len(shown) == len(set(shown)), shown
    # The corporate example: one line (IPv4 CIDRs), where four generic ones came before.
    assert len(shown) == 1, shown
    assert shown[0].startswith("NO_PROXY: these clients read no IPv4 CIDRs in NO_PROXY")


def test_overridden_network_fields_say_so_in_provenance(mocked: Harness) -> None:
    from proxy_component.settings import NetworkValues, parse_settings

    discovered = ClusterNetwork(pod_cidrs=["10.244.0.0/16"], service_cidrs=["172.20.0.0/16"], origin="eks:prod")
    network = discovered.override(service_cidrs=["10.100.0.0/16"], origin="explicit")
    assert network.origins == {"service_cidrs": "explicit"}
    values = NetworkValues(
        origin=network.origin, origins=network.origins, pod_cidrs=["10.244.0.0/16"], service_cidrs=["10.100.0.0/16"]
    )
    origins = {e.value: e.origins for e in parse_settings({}).no_proxy(values).entries}
    assert origins["10.100.0.0/16"] == ("explicit.serviceCidrs[0]",)
    assert origins["10.244.0.0/16"] == ("eks:prod.podCidrs[0]",)
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings={}, network=network))
    no_proxy = mocked.value(proxy.no_proxy)
    assert "10.100.0.0/16" in no_proxy
    assert "172.20.0.0/16" not in no_proxy
    with pytest.raises(TypeError, match=r"unknown fields \['pod_cidr'\]"):
        discovered.override(pod_cidr=["x"])


def test_a_discovered_ip_family_and_cloud_entries_reach_the_service_and_no_proxy(mocked: Harness) -> None:
    network = ClusterNetwork(
        pod_cidrs=pulumi.Output.from_input(["2600:1f14::/56"]),
        cloud_entries=["169.254.169.254", "fd00:ec2::254"],
        ip_family=pulumi.Output.from_input("ipv6"),
        origin="eks",
    )
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings={}, network=network))
    assert mocked.value(proxy.no_proxy).endswith("2600:1f14::/56,169.254.169.254,fd00:ec2::254,[fd00:ec2::254]")
    spec = mocked.one(SERVICE, "egress-service").inputs["spec"]
    assert (spec["ipFamilyPolicy"], spec["ipFamilies"]) == ("SingleStack", ["IPv6"])


def test_an_explicit_ip_family_wins_over_the_discovered_one(mocked: Harness) -> None:
    network = ClusterNetwork(pod_cidrs=["10.244.0.0/16"], ip_family="ipv6")
    ClusterProxy("egress", ClusterProxyArgs(settings={"cluster": {"ipFamily": "dual"}}, network=network))
    spec = mocked.one(SERVICE, "egress-service").inputs["spec"]
    assert spec["ipFamilyPolicy"] == "PreferDualStack"
    assert "ipFamilies" not in spec


@pytest.mark.parametrize(
    ("network", "policy", "families"),
    [
        ({"pod_cidrs": ["fd00:10:244::/56"], "service_cidrs": ["fd00:10:96::/108"]}, "SingleStack", ["IPv6"]),
        ({"node_cidrs": ["fd00:10::/64"]}, "SingleStack", ["IPv6"]),
        ({"pod_cidrs": ["10.244.0.0/16", "fd00:10:244::/56"]}, "PreferDualStack", None),
        ({"pod_cidrs": ["10.244.0.0/16"]}, "SingleStack", ["IPv4"]),
    ],
)
def test_without_a_family_the_service_follows_the_discovered_ranges(
    mocked: Harness, network: dict[str, Any], policy: str, families: list[str] | None
) -> None:
    ClusterProxy("egress", ClusterProxyArgs(settings={}, network=ClusterNetwork(**network)))
    spec = mocked.one(SERVICE, "egress-service").inputs["spec"]
    assert spec["ipFamilyPolicy"] == policy
    assert spec.get("ipFamilies") == families


def test_helm_values_for_a_release_carry_that_releases_names(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY))
    cluster = mocked.value(proxy.no_proxy).split(",")

    def no_proxy(values: Any) -> list[str]:
        return str({e["name"]: e["value"] for e in mocked.value(values)["server"]["env"]}["NO_PROXY"]).split(",")

    assert no_proxy(proxy.helm_values["argo-cd"]) == [
        *cluster, "argocd-commit-server", "argocd-dex-server", "argocd-redis", "argocd-redis-ha-haproxy",
        "argocd-repo-server",
    ]  # fmt: skip
    assert no_proxy(proxy.helm_values_for("argo-cd", release="my-release")) == [
        *cluster, "my-release-argocd-commit-server", "my-release-argocd-dex-server", "my-release-argocd-redis",
        "my-release-argocd-repo-server", "my-release-redis-ha-haproxy",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="'My' is not a DNS-1123 label"):
        proxy.helm_values_for("argo-cd", release="My")


def test_helm_values_for_and_kustomization_name_a_bad_argument_when_called(mocked: Harness) -> None:
    """An unknown profile was a bare KeyError('bogus'), a bad kind an error inside an Output; each now names the
    argument and what is accepted, at the call."""
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY))
    with pytest.raises(KeyError) as raised:
        proxy.helm_values_for("bogus")
    assert str(raised.value).startswith("profile: 'bogus' is not a known Helm values profile (expected one of: ")
    with pytest.raises(ValueError, match=r"^release: 'My' is not a DNS-1123 label"):
        proxy.helm_values_for("argo-cd", release="My")
    with pytest.raises(ValueError, match=r"^kind 'Service' has no pod template \(expected one of Deployment, "):
        proxy.kustomization(kind="Service", name="web")


def test_helm_values_and_kustomization_for_a_runtime_selection(mocked: Harness) -> None:
    proxy = ClusterProxy("egress", ClusterProxyArgs(settings=IPV6_ONLY))
    default = [e["name"] for e in mocked.value(proxy.helm_values["env"])["env"]]
    java = {e["name"]: e["value"] for e in mocked.value(proxy.helm_values_for("env", "java,python"))["env"]}
    assert "JDK_JAVA_OPTIONS" not in default
    assert java["JDK_JAVA_OPTIONS"] == mocked.value(proxy.jdk_java_options)
    assert java["NO_PROXY"] == java["no_proxy"] == mocked.value(proxy.no_proxy_python)
    patch = mocked.value(proxy.kustomization(kind="Deployment", name="web", runtimes="node"))
    assert '"NODE_USE_ENV_PROXY"' in patch["patches"][0]["patch"]
    with pytest.raises(ValueError, match="runtimes: 'jvm' is not a list of runtimes"):
        proxy.kustomization(kind="Deployment", name="web", runtimes="jvm")


def test_a_trusted_ca_that_reaches_no_pod_is_said_in_the_preview(
    mocked: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.pki import make_ca

    caplog.set_level("WARNING")
    upstream = {"url": "http://proxy.corp:3128", "trustedCa": make_ca().cert_pem}
    ClusterProxy("lost", ClusterProxyArgs(settings={**IPV6_ONLY, "namespaces": [], "proxy": {"upstream": upstream}}))
    mocked.settle()
    lost = [m for level, m in mocked.logs(caplog) if level == "WARNING" and "trustedCa" in m]
    assert lost == [
        "proxy.upstream.trustedCa: no namespace gets proxy-trust (namespaces is empty and injection.kyverno is off), "
        "so no Pod gets the CA (list the workloads' namespaces in namespaces, or turn on injection.kyverno)"
    ]
    caplog.clear()
    ClusterProxy("reached", ClusterProxyArgs(settings={**IPV6_ONLY, "proxy": {"upstream": upstream}}))
    mocked.settle()
    assert IPV6_ONLY["namespaces"], "the example lists namespaces"
    assert not [m for level, m in mocked.logs(caplog) if "trustedCa" in m]


def test_a_bad_cidr_that_arrives_as_an_output_fails_with_the_literals_message(mocked: Harness) -> None:
    """A pod CIDR computed from config or another resource is checked when known, as a literal one is: the same
    field-naming line (no NO_PROXY host-name advice), and no "While processing input" with the Output's repr."""
    mocked.mocks.state["test:index:Cluster"] = {"pod_cidr": "10.0.0.1/33", "service_cidr": "x", "endpoint": "e"}
    cluster = FakeCluster("eks")
    network = ClusterNetwork(pod_cidrs=[cluster.pod_cidr], service_cidrs=["172.20.0.0/16"], origin="eks")
    ClusterProxy("egress", ClusterProxyArgs(settings={"namespaces": ["default"]}, network=network))
    with pytest.raises(pulumi.RunError) as caught:
        mocked.settle()
    literal = "eks.podCidrs[0]: '10.0.0.1/33' is not a CIDR (expected e.g. 10.0.0.0/16 or fd00:10::/56)"
    assert str(caught.value) == f"invalid settings:\n  {literal}"
    assert "While processing input" not in str(caught.value)
    with pytest.raises(SettingsError) as plain:
        parse_settings({"cluster": {"podCidrs": ["10.0.0.1/33"]}})
    assert plain.value.problems == [literal.replace("eks.", "cluster.")]


@pytest.mark.parametrize("kyverno_policy", ["MutatingPolicy", "ClusterPolicy"])
def test_every_object_the_component_registers_takes_back_its_fields(mocked: Harness, kyverno_policy: str) -> None:
    """pulumi.com/patchForce on every child the plan makes (each kind, both clusters): an edit by another field
    manager is put back by the next `up` instead of failing it with a conflict (tests/engine/test_repair.py)."""
    from proxy_component.render import plain_plan
    from proxy_component.render.plan import PATCH_FORCE
    from tests.unit.test_ownership import every_kind

    raw = every_kind(kyverno_policy)
    ClusterProxy("egress", ClusterProxyArgs(settings=raw))
    children = [r for r in mocked.settle() if r.typ.startswith("kubernetes:")]
    assert len(children) == len(plain_plan(parse_settings(raw)))
    assert {r.typ.rsplit(":", 1)[1] for r in children} >= {"DaemonSet", "Service", "ConfigMap", "Secret", "Bundle"}
    for r in children:
        assert r.inputs["metadata"]["annotations"][PATCH_FORCE] == "true", r.name


def test_a_field_error_and_the_allow_list_are_reported_together(mocked: Harness) -> None:
    with pytest.raises(SettingsError) as caught:
        ClusterProxy("egress", ClusterProxyArgs(settings={"deployment": {"port": 80}, "namespaces": ["default"]}))
    assert [p.split(":")[0] for p in caught.value.problems] == ["deployment.port", "cluster.podCidrs"]
