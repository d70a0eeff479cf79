"""Pure builders: tinyproxy.conf, the config digest, env lists and proxy-config objects."""

from __future__ import annotations

import hashlib

from proxy_component.render.env import ProxyValues, env_vars, proxy_config_object
from proxy_component.render.proxy import (
    config_digest,
    config_object,
    daemonset,
    firewall_rules,
    tinyproxy_conf,
    tinyproxy_filter,
)
from proxy_component.settings import parse_settings

CLUSTER = {"podCidrs": ["10.244.0.0/16", "fd00:10:244::/56"], "nodeCidrs": ["192.168.0.0/24", "10.244.8.0/24"]}


def test_allow_lists_only_loopback_and_the_cluster_ranges() -> None:
    settings = parse_settings({"cluster": CLUSTER, "deployment": {"allowedSourceCidrs": ["172.31.0.0/16"]}})
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    allow = [line.split()[1] for line in conf.splitlines() if line.startswith("Allow ")]
    assert allow == ["10.244.0.0/16", "127.0.0.1", "172.31.0.0/16", "192.168.0.0/24", "::1", "fd00:10:244::/56"]
    assert [line for line in conf.splitlines() if line.startswith("ConnectPort")] == ["ConnectPort 443"]
    assert "Upstream" not in conf
    assert "0.0.0.0/0" not in conf


def test_upstream_with_exceptions_and_credentials() -> None:
    settings = parse_settings(
        {
            "cluster": CLUSTER,
            "proxy": {
                "upstream": {
                    "url": "http://proxy.corp:3128",
                    "username": "svc",
                    "password": "pw",
                    "noUpstream": ["*.corp.example", "10.10.0.0/16", "[fd00::5]"],
                }
            },
        }
    )
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    upstream = [line for line in conf.splitlines() if line.startswith("Upstream")]
    assert upstream == [
        'Upstream none ".corp.example"',
        'Upstream none "10.10.0.0/16"',
        'Upstream none "corp.example"',
        'Upstream none "fd00::5"',
        "Upstream http svc:pw@proxy.corp:3128",
    ]
    assert config_object(settings, conf)["kind"] == "Secret"


def test_digest_is_scrypt_only_when_the_config_holds_credentials() -> None:
    plain = parse_settings({"cluster": CLUSTER})
    secret = parse_settings({"cluster": CLUSTER, "proxy": {"upstream": {"url": "http://u:p@proxy.corp:3128"}}})
    conf = "Port 8888\n"
    content = "\0".join((conf, tinyproxy_filter(plain), firewall_rules(plain))).encode()
    assert config_digest(plain, conf) == hashlib.sha256(content).hexdigest()
    no_firewall = parse_settings(
        {"cluster": CLUSTER, "deployment": {"firewall": {"enabled": False, "allowClusterDestinations": True}}}
    )
    assert config_digest(no_firewall, conf) != config_digest(plain, conf)
    scrypt = hashlib.scrypt(content, salt=b"proxy-component/tinyproxy.conf", n=2**14, r=8, p=1, dklen=32)
    assert config_digest(secret, conf) == scrypt.hex()


def test_the_filter_ships_beside_the_config_and_changes_the_digest() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    assert 'Filter "/etc/tinyproxy/filter"' in conf.splitlines()
    data = config_object(settings, conf)["data"]
    assert data["filter"].splitlines()[:2] == [r"^(.+\.)?localhost\.?$", r"^127\."]
    narrower = parse_settings({"cluster": CLUSTER, "deployment": {"denyDestinations": [r"^127\."]}})
    assert config_digest(settings, conf) != config_digest(narrower, conf)
    none = parse_settings({"cluster": CLUSTER, "deployment": {"denyDestinations": []}})
    assert "Filter" not in tinyproxy_conf(none, none.allowed_sources())
    assert "filter" not in config_object(none, conf)["data"]


def test_env_has_both_spellings_with_identical_values() -> None:
    env = env_vars(ProxyValues("http://p:8888", "http://p:8443", "localhost"))
    assert env == [
        {"name": "HTTP_PROXY", "value": "http://p:8888"},
        {"name": "http_proxy", "value": "http://p:8888"},
        {"name": "HTTPS_PROXY", "value": "http://p:8443"},
        {"name": "https_proxy", "value": "http://p:8443"},
        {"name": "NO_PROXY", "value": "localhost"},
        {"name": "no_proxy", "value": "localhost"},
    ]


def test_proxy_config_is_a_secret_when_the_urls_carry_credentials() -> None:
    values = ProxyValues("http://u:pw@proxy.corp:3128", "http://u:pw@proxy.corp:3128", "localhost")
    with_creds = parse_settings({"proxy": {"httpProxy": "http://u:pw@proxy.corp:3128"}, "cluster": CLUSTER})
    without = parse_settings({"cluster": CLUSTER})
    secret = proxy_config_object(with_creds, "apps", values)
    assert (secret["kind"], secret["type"], secret["stringData"]["no_proxy"]) == ("Secret", "Opaque", "localhost")
    config_map = proxy_config_object(without, "apps", ProxyValues("a", "b", "c"))
    assert (config_map["kind"], config_map["metadata"]["name"], config_map["data"]["HTTPS_PROXY"]) == (
        "ConfigMap",
        "proxy-config",
        "b",
    )


def test_the_proxy_runs_on_linux_workers_unless_asked_for_control_planes() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    pod = daemonset(settings, "digest")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}]}
    everywhere = parse_settings({"cluster": CLUSTER, "deployment": {"controlPlane": True}})
    assert "affinity" not in daemonset(everywhere, "digest")["spec"]["template"]["spec"]


def test_the_firewall_init_container_is_root_with_net_admin_only() -> None:
    settings = parse_settings({"cluster": CLUSTER, "deployment": {"runAsUser": 50000}})
    pod = daemonset(settings, "digest")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][:2] == ["/bin/sh", "-c"]
    assert 'include "/etc/tinyproxy/nftables.conf"' in init["command"][2]
    assert init["command"][2].endswith("} | nft -f -")
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsUser"] == 50000
    assert "meta skuid 50000 " in firewall_rules(settings)
    off = parse_settings(
        {"cluster": CLUSTER, "deployment": {"firewall": {"enabled": False, "allowClusterDestinations": True}}}
    )
    assert "initContainers" not in daemonset(off, "digest")["spec"]["template"]["spec"]
    assert "nftables.conf" not in config_object(off, "conf")["data"]


def test_firewall_deny_cidrs_are_normalised_and_ordered() -> None:
    settings = parse_settings(
        {"deployment": {"firewall": {"denyCidrs": ["fe80::1/10", "169.254.1.1/16", "10.1.2.3/32"]}}}
    )
    assert settings.deployment.firewall.deny_cidrs == ["10.1.2.3/32", "169.254.0.0/16", "fe80::/10"]


def test_numbers_are_quantities_as_kubernetes_reads_them() -> None:
    settings = parse_settings(
        {"deployment": {"resources": {"limits": {"cpu": 1, "memory": "128Mi"}, "requests": {"cpu": 0.5}}}}
    )
    assert settings.deployment.resources.limits == {"cpu": "1", "memory": "128Mi"}
    assert settings.deployment.resources.requests == {"cpu": "0.5"}
