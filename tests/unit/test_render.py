"""Pure builders: tinyproxy.conf, the config digest, env lists and proxy-config objects."""

from __future__ import annotations

import hashlib

import pytest

from proxy_component.dataplane.config import (
    GENERATION_ANNOTATION,
    config_generation,
    config_object,
    tinyproxy_conf,
    tinyproxy_filter,
)
from proxy_component.dataplane.firewall import firewall_command, firewall_rules
from proxy_component.dataplane.lifecycle import RESTART_ANNOTATION, restart_inputs
from proxy_component.dataplane.metrics import GENERATION_KEY
from proxy_component.dataplane.workload import daemonset
from proxy_component.render.env import ProxyValues, env_vars, proxy_config_object
from proxy_component.settings import NetworkValues, Settings, SettingsError, image_is_mutable, parse_settings

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


def test_what_restarts_the_proxy_is_readable_and_never_derived_from_a_credential() -> None:
    """The pod template names the port and a sha256 of the kernel rules: no scrypt, no credential (issue 37 item 4:
    the unkeyed scrypt of the config was a password oracle). The upstream's password changes nothing in it."""
    plain = parse_settings({"cluster": CLUSTER})
    secret = parse_settings({"cluster": CLUSTER, "proxy": {"upstream": {"url": "http://u:p1@proxy.corp:3128"}}})
    rotated = parse_settings({"cluster": CLUSTER, "proxy": {"upstream": {"url": "http://u:p2@proxy.corp:3128"}}})
    rules = hashlib.sha256(firewall_rules(plain).encode()).hexdigest()[:16]
    assert restart_inputs(plain) == f"port=8888 firewall={rules}"
    assert restart_inputs(secret) == restart_inputs(rotated) == restart_inputs(plain)
    no_firewall = parse_settings(
        {"cluster": CLUSTER, "deployment": {"firewall": {"enabled": False, "allowClusterDestinations": True}}}
    )
    assert restart_inputs(no_firewall) == "port=8888 firewall=off"
    wider = parse_settings({"cluster": {**CLUSTER, "nodeCidrs": ["192.168.0.0/23"]}})
    assert restart_inputs(wider) != restart_inputs(plain), "a kernel range is loaded at start only: it rolls"
    moved = parse_settings({"cluster": CLUSTER, "deployment": {"port": 3129}})
    assert restart_inputs(moved).startswith("port=3129 ")
    template = daemonset(secret, restart_inputs(secret))["spec"]["template"]["metadata"]
    assert template["annotations"] == {RESTART_ANNOTATION: restart_inputs(secret)}


def test_the_config_generation_leaves_the_credentials_out() -> None:
    """A sha256 of the config with `<credentials>` for the user and password: the same for every password, so it
    tells nothing about one; a change of anything tinyproxy reloads (here a noUpstream entry) changes it."""

    def settings(url: str, no_upstream: list[str] | None = None) -> Settings:
        return parse_settings(
            {"cluster": CLUSTER, "proxy": {"upstream": {"url": url, "noUpstream": no_upstream or []}}}
        )

    one, two = settings("http://u:p1@proxy.corp:3128"), settings("http://u:p2@proxy.corp:3128")
    allow = one.allowed_sources()
    assert config_generation(one, allow) == config_generation(two, allow)
    text = tinyproxy_conf(one, allow, credentials=False)
    assert "Upstream http <credentials>@proxy.corp:3128" in text.splitlines()
    assert "p1" not in text
    content = "\0".join((text, tinyproxy_filter(one))).encode()
    assert config_generation(one, allow) == hashlib.sha256(content).hexdigest()[:16]
    more = settings("http://u:p1@proxy.corp:3128", ["corp.example"])
    assert config_generation(more, allow) != config_generation(one, allow)
    assert config_generation(settings("http://proxy.corp:3128"), allow) != config_generation(one, allow)
    obj = config_object(one, tinyproxy_conf(one, allow))
    assert obj["kind"] == "Secret"
    assert obj["metadata"]["annotations"] == {GENERATION_ANNOTATION: config_generation(one, allow)}
    assert obj["stringData"][GENERATION_KEY] == config_generation(one, allow)


def test_the_filter_ships_beside_the_config_and_changes_the_digest() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    assert 'Filter "/etc/tinyproxy/filter"' in conf.splitlines()
    data = config_object(settings, conf)["data"]
    assert data["filter"].splitlines()[:2] == [r"^(.+\.)?localhost\.?$", r"^127\."]
    narrower = parse_settings({"cluster": CLUSTER, "deployment": {"denyDestinations": [r"^127\."]}})
    allow = settings.allowed_sources()
    assert config_generation(settings, allow) != config_generation(narrower, allow)
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


def test_the_proxy_runs_on_linux_workers_unless_asked_for_control_planes_never_on_virtual_kubelets_or_fargate() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    pod = daemonset(settings, "digest")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    never = [
        {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["fargate"]},
        {"key": "type", "operator": "NotIn", "values": ["virtual-kubelet"]},
    ]
    control_plane = {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}
    assert term == {"matchExpressions": [control_plane, *never]}
    everywhere = parse_settings({"cluster": CLUSTER, "deployment": {"controlPlane": True}})
    pod = daemonset(everywhere, "digest")["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": never}, "virtual kubelets and Fargate never run it, control plane or not"


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
        {"deployment": {"resources": {"limits": {"cpu": 1, "memory": "1Gi"}, "requests": {"cpu": 0.5}}}}
    )
    assert settings.deployment.resources.limits == {"cpu": "1", "memory": "1Gi"}
    assert settings.deployment.resources.requests == {"cpu": "0.5"}


def _rules(settings: Settings, network: NetworkValues | None = None) -> list[str]:
    """The egress chain's lines (the client limits' chain follows it: `_client_rules`)."""
    lines = [line.strip() for line in firewall_rules(settings, network).splitlines()]
    return [*lines[: lines.index("chain tinyproxy-clients {")], "}"]


def _client_rules(settings: Settings, network: NetworkValues | None = None) -> list[str]:
    """Both client chains' lines, comments and blank lines left out."""
    lines = [line.strip() for line in firewall_rules(settings, network).splitlines()]
    chain = lines[lines.index("chain tinyproxy-clients {") : -1]
    return [line for line in chain if line and not line.startswith("#")]


def test_the_kernel_limits_each_clients_rate_and_tinyproxy_counts_its_share() -> None:
    """Per source address, 100 new connections a second (bursts of 200), judged by the kernel in prerouting, before
    kube-proxy's DNAT, for the node's addresses and the service ranges (a reset after the DNAT would come from an
    address the pod never dialled); each meter forgets a source idle for 60 s, so spoofed sources cannot fill it for
    good. The kernel counts no open connection (conntrack forgets a connection its client reset, and counts spoofed
    half-open ones): tinyproxy does, MaxConnectionsPerClient and LoopbackReserve in its config."""

    def reject(rule: str) -> str:
        return f'counter reject with tcp reset comment "{rule}"'

    cluster = {**CLUSTER, "serviceCidrs": ["10.96.0.0/12", "fd00:10:96::/108"]}
    settings = parse_settings({"cluster": cluster})
    assert _client_rules(settings) == [
        "chain tinyproxy-clients {",
        "type filter hook prerouting priority -150; policy accept;",
        'tcp dport 8888 iif "lo" accept',
        "tcp dport 8888 fib daddr type local goto tinyproxy-client-limits",
        "tcp dport 8888 ip daddr { 10.96.0.0/12 } goto tinyproxy-client-limits",
        "tcp dport 8888 ip6 daddr { fd00:10:96::/108 } goto tinyproxy-client-limits",
        "}",
        "chain tinyproxy-client-limits {",
        "ct state new meter rate4 size 65535 { ip saddr timeout 60s limit rate over 100/second burst 200 packets } "
        + reject("per-client-rate"),
        "ct state new meter rate6 size 65535 { ip6 saddr timeout 60s limit rate over 100/second burst 200 packets } "
        + reject("per-client-rate"),
        "}",
    ]
    assert "ct count" not in firewall_rules(settings)
    lines = tinyproxy_conf(settings, settings.allowed_sources()).splitlines()
    limits = [
        line for line in lines if line.split(" ")[0] in ("MaxClients", "MaxConnectionsPerClient", "LoopbackReserve")
    ]
    assert limits == ["MaxClients 3584", "MaxConnectionsPerClient 16", "LoopbackReserve 32"]
    changed = parse_settings(
        {
            "cluster": {**CLUSTER, "maxPodsPerNode": 8},
            "deployment": {
                "port": 3129,
                "maxClients": 200,
                "firewall": {"maxConnectionsPerClient": 10, "newConnectionsPerClientPerSecond": 0},
            },
        }
    )
    network = NetworkValues(origin="eks:prod", service_cidrs=["172.20.0.0/16"])
    assert _client_rules(changed, network)[2:] == [
        'tcp dport 3129 iif "lo" accept',
        "tcp dport 3129 fib daddr type local goto tinyproxy-client-limits",
        "tcp dport 3129 ip daddr { 172.20.0.0/16 } goto tinyproxy-client-limits",
        "}",
        "chain tinyproxy-client-limits {",
        "}",
    ]
    conf = tinyproxy_conf(changed, changed.allowed_sources())
    assert "MaxClients 200\n" in conf
    assert "MaxConnectionsPerClient 10\n" in conf
    assert "LoopbackReserve 25\n" in conf
    assert not [line for line in firewall_rules(changed).splitlines() if line.strip().startswith("set ")]


def test_max_clients_holds_every_pod_of_a_node_at_its_share() -> None:
    """Derived: maxPodsPerNode x share (x 2 on a dual-stack cluster: a pod has an address per family) and the
    loopback reserve, rounded up to 256; a value below that is refused, naming both fields and the least that holds."""
    assert parse_settings({"cluster": CLUSTER}).deployment.max_clients == 3584  # CLUSTER is dual-stack
    v4 = {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}
    assert parse_settings({"cluster": v4}).deployment.max_clients == 1792  # 110 x 16 + 32
    assert parse_settings({"cluster": {**v4, "maxPodsPerNode": 30}}).deployment.max_clients == 512  # 512 >= 480 + 32
    deployment = {"firewall": {"maxConnectionsPerClient": 64}}
    assert parse_settings({"cluster": v4, "deployment": deployment}).deployment.max_clients == 7168  # 7040 + 32
    with pytest.raises(SettingsError) as caught:
        parse_settings({"cluster": v4, "deployment": {"maxClients": 1024}})
    assert caught.value.problems == [
        "deployment.maxClients: 1024 leaves 992 connections to pods after the loopback reserve, but "
        "cluster.maxPodsPerNode (110) x deployment.firewall.maxConnectionsPerClient (16) is 1760: the pods of one "
        "node could exhaust it (expected at least 1792, or 0 to derive it, or a lower share or maxPodsPerNode)"
    ]
    with pytest.raises(SettingsError) as caught:
        parse_settings({"cluster": CLUSTER, "deployment": {"maxClients": 1792}})
    assert "x 2 address families (dual-stack) is 3520" in caught.value.problems[0]
    assert parse_settings({"cluster": v4, "deployment": {"maxClients": 1792}}).deployment.max_clients == 1792
    # No share, no promise: maxClients is the user's (the default still derives from the default share).
    off = {"firewall": {"maxConnectionsPerClient": 0}, "maxClients": 100}
    assert parse_settings({"cluster": v4, "deployment": off}).deployment.max_clients == 100


def test_each_phase_has_a_deadline() -> None:
    """The request's head from accept, the connect and the response's head in tinyproxy.conf, the idle Timeout after
    them, and DNS through the resolver's own options in the container's environment."""
    settings = parse_settings({"cluster": CLUSTER})
    conf = tinyproxy_conf(settings, settings.allowed_sources()).splitlines()
    timeouts = [line for line in conf if line.split(" ")[0].endswith("Timeout")]
    assert timeouts == ["RequestHeadTimeout 30", "ConnectTimeout 30", "ResponseHeadTimeout 120", "Timeout 600"]
    container = daemonset(settings, "d")["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "RES_OPTIONS", "value": "timeout:3 attempts:1"}]
    deadlines = {"requestHeadSeconds": 5, "dnsSeconds": 4, "connectSeconds": 7, "responseHeadSeconds": 900,
                 "idleSeconds": 3600}  # fmt: skip
    changed = parse_settings({"cluster": CLUSTER, "deployment": {"deadlines": deadlines}})
    conf = tinyproxy_conf(changed, changed.allowed_sources()).splitlines()
    timeouts = [line for line in conf if line.split(" ")[0].endswith("Timeout")]
    assert timeouts == ["RequestHeadTimeout 5", "ConnectTimeout 7", "ResponseHeadTimeout 900", "Timeout 3600"]
    container = daemonset(changed, "d")["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "RES_OPTIONS", "value": "timeout:1 attempts:1"}]
    with pytest.raises(SettingsError) as caught:
        parse_settings({"deployment": {"deadlines": {"dnsSeconds": 2, "requestHeadSeconds": 0}}})
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "deployment.deadlines.requestHeadSeconds",
        "deployment.deadlines.dnsSeconds",
    ]


def test_the_memory_limit_follows_max_clients_unless_set() -> None:
    """160 KiB a connection at worst (bench/bench_proxy_memory.py), 4 MiB besides, a quarter more, in 32 MiB steps;
    a memory limit below what maxClients needs is refused."""
    v4 = {"podCidrs": ["10.244.0.0/16"]}
    assert parse_settings({"cluster": v4}).deployment.limits == {"cpu": "500m", "memory": "384Mi"}  # 1792
    assert parse_settings({"cluster": CLUSTER}).deployment.limits["memory"] == "736Mi"  # dual-stack: 3584
    small = {"cluster": {**v4, "maxPodsPerNode": 10}, "deployment": {"maxClients": 256}}
    assert parse_settings(small).deployment.limits["memory"] == "64Mi"
    assert parse_settings({"cluster": v4, "deployment": {"maxClients": 4096}}).deployment.limits["memory"] == "832Mi"
    own = parse_settings({"cluster": v4, "deployment": {"resources": {"limits": {"memory": "1Gi"}}}})
    assert own.deployment.limits == {"memory": "1Gi"}
    container = daemonset(parse_settings({"cluster": v4}), "d")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "384Mi"}
    with pytest.raises(SettingsError) as caught:
        parse_settings({"cluster": v4, "deployment": {"resources": {"limits": {"memory": "256Mi"}}}})
    assert caught.value.problems == [
        "deployment.resources.limits.memory: '256Mi' is below the 284 MiB that deployment.maxClients (1792) "
        "connections need at their worst (160 KiB each, measured by bench/bench_proxy_memory.py): a mix of clients "
        "within maxClients could get the proxy OOM-killed (expected at least 384Mi, or no memory limit to derive it, "
        "or a lower maxClients)"
    ]


def test_the_firewall_refuses_the_cluster_ranges_unless_allowed() -> None:
    cluster = {**CLUSTER, "serviceCidrs": ["10.96.0.0/12", "fd00:10:96::/108"]}
    settings = parse_settings({"cluster": cluster})
    refuse = "meta skuid 61888 tcp flags syn / syn,ack"
    reject = 'counter reject with tcp reset comment "cluster-ranges"'
    rules = _rules(settings)
    # Collapsed per family (10.244.8.0/24 lies in the pod range), after the node-local and metadata rules.
    assert rules[-4:-2] == [
        f"{refuse} ip daddr {{ 10.96.0.0/12, 10.244.0.0/16, 192.168.0.0/24 }} {reject}",
        f"{refuse} ip6 daddr {{ fd00:10:96::/108, fd00:10:244::/56 }} {reject}",
    ]
    assert rules.index(f'{refuse} fib daddr type local counter reject with tcp reset comment "node"') < len(rules) - 4
    allowed = parse_settings({"cluster": cluster, "deployment": {"firewall": {"allowClusterDestinations": True}}})
    assert not any("10.96.0.0/12" in line for line in _rules(allowed))
    # Ranges a cluster resource gives at run time join the settings' own, named by their origin when wrong.
    network = NetworkValues(origin="eks:prod", service_cidrs=["172.20.0.0/16"], node_cidrs=["fd00:20::/64"])
    assert f"{refuse} ip daddr {{ 10.96.0.0/12, 10.244.0.0/16, 172.20.0.0/16, 192.168.0.0/24 }} {reject}" in _rules(
        settings, network
    )
    with pytest.raises(SettingsError, match=r"eks:prod\.podCidrs\[0\]: 'x' is not a CIDR"):
        firewall_rules(settings, NetworkValues(origin="eks:prod", pod_cidrs=["x"]))


def test_the_firewall_accepts_dns_over_tcp_to_the_resolvers_and_the_upstream_by_address_only() -> None:
    uid = "meta skuid 61888"
    plain = _rules(parse_settings({"cluster": CLUSTER}))
    assert not [line for line in plain if line.startswith("set ") or "@" in line], "no named set (see below)"
    accepts = [line for line in plain if line.endswith("accept")]
    assert accepts == []  # the resolvers' rules are inserted at load (test_the_init_script_...)
    by_address = parse_settings({"cluster": CLUSTER, "proxy": {"upstream": {"url": "http://u:p@127.0.0.1:3128"}}})
    assert f"{uid} ip daddr 127.0.0.1 tcp dport 3128 counter accept" in _rules(by_address)
    by_name = parse_settings({"cluster": CLUSTER, "proxy": {"upstream": {"url": "http://proxy.corp:3128"}}})
    assert [line for line in _rules(by_name) if line.endswith("accept")] == accepts
    # Every accept comes before the first reject.
    rules = _rules(by_address)
    assert max(i for i, line in enumerate(rules) if line.endswith("accept")) < min(
        i for i, line in enumerate(rules) if "reject" in line
    )


def test_the_init_script_inserts_one_rule_per_resolver_of_resolv_conf() -> None:
    """No named set: Debian 12's nft 1.0.6 (kube-proxy's, a node's) segfaults listing a ruleset with a named set
    that nft 1.1.3 (the image's) made; a rule per resolver, inserted before the rejects, keeps every nft working."""
    script = firewall_command(parse_settings({"cluster": CLUSTER}))[2]
    assert "done < /etc/resolv.conf" in script
    insert = "insert rule inet proxy-component tinyproxy-egress meta skuid 61888"
    assert f'echo "{insert} ip daddr $value tcp dport 53 counter accept"' in script
    assert f'echo "{insert} ip6 daddr $value tcp dport 53 counter accept"' in script


def test_the_firewall_text_is_the_same_for_the_same_ranges_in_any_order() -> None:
    a = parse_settings({"cluster": {"podCidrs": ["10.244.0.0/16", "fd00::/56"], "nodeCidrs": ["10.0.0.0/16"]}})
    b = parse_settings({"cluster": {"nodeCidrs": ["10.0.0.0/16"], "podCidrs": ["fd00::/56", "10.244.0.0/16"]}})
    assert firewall_rules(a) == firewall_rules(b)


def test_the_probes_ask_tinyproxys_stat_host_on_loopback() -> None:
    settings = parse_settings({"cluster": CLUSTER, "deployment": {"port": 3129}})
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    assert 'StatHost "proxy-component.invalid"' in conf.splitlines()
    container = daemonset(settings, "digest")["spec"]["template"]["spec"]["containers"][0]
    for kind in ("readinessProbe", "livenessProbe"):
        assert container[kind]["httpGet"] == {
            "host": "127.0.0.1",
            "port": 3129,
            "path": "/",
            "httpHeaders": [{"name": "Host", "value": "proxy-component.invalid"}],
        }
    # Readiness every second from the start (a roll's outage on a node is the time until the new pod is seen ready:
    # measured in the real-node lane); liveness every 10 s after 10 s, three failures before a restart.
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert (ready["periodSeconds"], ready["timeoutSeconds"], ready.get("initialDelaySeconds", 0)) == (1, 1, 0)
    assert (live["periodSeconds"], live["initialDelaySeconds"], live["failureThreshold"]) == (10, 10, 3)


def test_images_are_versioned_and_pulled_if_not_present_by_default() -> None:
    settings = parse_settings({"cluster": CLUSTER})
    pod = daemonset(settings, "digest")["spec"]["template"]["spec"]
    containers = [*pod["initContainers"], *pod["containers"]]
    # One image, the project's own (scripts/image), for the firewall init container and tinyproxy.
    assert [c["image"] for c in containers] == [
        "ghcr.io/proxy-component/proxy:1.11.3-git-364cdb6-pc7",
        "ghcr.io/proxy-component/proxy:1.11.3-git-364cdb6-pc7",
    ]
    assert {c["imagePullPolicy"] for c in containers} == {"IfNotPresent"}
    assert not any(image_is_mutable(c["image"]) for c in containers)
    pinned = "ghcr.io/proxy-component/proxy:1.11.2-1@sha256:" + "ab" * 32
    always = parse_settings({"cluster": CLUSTER, "deployment": {"image": pinned, "imagePullPolicy": "Always"}})
    container = daemonset(always, "digest")["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["imagePullPolicy"]) == (pinned, "Always")


@pytest.mark.parametrize(
    ("image", "mutable"),
    [
        ("docker.io/vimagick/tinyproxy", True),
        ("docker.io/vimagick/tinyproxy:latest", True),
        ("registry.local:5000/tinyproxy", True),
        ("registry.local:5000/tinyproxy:stable", True),
        ("ghcr.io/sergelogvinov/tinyproxy:1.11.1", False),
        ("ghcr.io/proxy-component/proxy:1.11.2-1", False),
        ("registry.corp.example:5000/mirror/proxy:1.11.3-1_b1", False),
        ("registry.corp.example:5000/mirror/proxy:1.0-rc1-1", False),
        ("registry.k8s.io/kube-proxy:v1.36.3", False),
        ("docker.io/vimagick/tinyproxy:latest@sha256:" + "0" * 64, False),
    ],
)
def test_which_image_references_are_mutable(image: str, mutable: bool) -> None:
    assert image_is_mutable(image) is mutable
