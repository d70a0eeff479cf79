"""The kernel's rules for tinyproxy: the nftables table the init container loads into the node's network namespace
(what tinyproxy's UID may never connect to, and each client's rate of new connections), and that container."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from ..settings import NetworkValues, Settings

__all__ = [
    "CLIENTS_CHAIN",
    "FIREWALL_CHAIN",
    "FIREWALL_KEY",
    "FIREWALL_RULES",
    "FIREWALL_TABLE",
    "LIMITS_CHAIN",
    "firewall_command",
    "firewall_container",
    "firewall_rules",
    "firewall_text",
]

Obj = dict[str, Any]

FIREWALL_KEY = "nftables.conf"
FIREWALL_TABLE = "proxy-component"
FIREWALL_CHAIN = "tinyproxy-egress"
CLIENTS_CHAIN = "tinyproxy-clients"
LIMITS_CHAIN = "tinyproxy-client-limits"


def firewall_rules(settings: Settings, network: NetworkValues | None = None) -> str:
    """The nftables table that the init container loads into the node's network namespace.

    It rejects every new TCP connection that tinyproxy's UID opens to an
    address of the node itself (`fib daddr type local`: loopback, every
    interface address, and the unspecified address, which the kernel sends to
    loopback), to `firewall.denyCidrs` and, unless
    `firewall.allowClusterDestinations`, to the cluster's pod, service and node
    ranges (with `network`'s). The kernel judges the address actually
    connected to, so neither a spelling nor a DNS name gets around it. Before
    those it accepts exactly two things: TCP port 53 of the resolvers in the
    pod's resolv.conf (rules the init container inserts, see `firewall_command`),
    so answers too large for UDP still arrive, and the upstream proxy's address
    and port when the URL gives an address. Other processes on the node are
    untouched. Loading the file replaces the table whole, so a restart or a new
    setting never stacks rules. A second chain (`_client_limits`) gives each
    source address a fair share of tinyproxy's port.
    """
    d = settings.deployment
    uid = f"meta skuid {d.run_as_user}"
    match = f"{uid} tcp flags syn / syn,ack"
    keywords = {4: "ip", 6: "ip6"}
    lines = [
        "# Rendered by proxy-component. What tinyproxy (its own UID) may never connect to, whatever name or",
        "# spelling led there: the node's own addresses, the link-local and metadata ranges and the cluster's own.",
        f"table inet {FIREWALL_TABLE}",
        f"delete table inet {FIREWALL_TABLE}",
        f"table inet {FIREWALL_TABLE} {{",
        f"  chain {FIREWALL_CHAIN} {{",
        "    type filter hook output priority filter; policy accept;",
        "    # DNS over TCP to the nameservers of the pod's resolv.conf (the ones tinyproxy asks), for answers too",
        "    # large for UDP: one rule each, inserted first when the table is loaded (no named set: an nft older than",
        "    # the one that made it, e.g. kube-proxy's, crashes listing a ruleset that holds one).",
    ]
    upstream = settings.proxy.upstream
    address = upstream.address if upstream is not None else None
    if upstream is not None and address is not None:
        lines += [
            "    # The upstream proxy, at this address and port only.",
            f"    {uid} ip daddr {address} tcp dport {upstream.endpoint[1]} counter accept",
        ]
    lines.append(f"    {match} fib daddr type local {_reject('node')}")

    def refuse(comment: str, rule: str, cidrs: Sequence[str]) -> None:
        rules = []
        for version in (4, 6):
            nets = [c for c in cidrs if ipaddress.ip_network(c).version == version]
            if nets:
                rules.append(f"    {match} {keywords[version]} daddr {{ {', '.join(nets)} }} {_reject(rule)}")
        if rules:
            lines.extend([f"    # {comment}", *rules])

    refuse("Link-local and the clouds' metadata endpoints (firewall.denyCidrs).", "deny-ranges", d.firewall.deny_cidrs)
    refuse(
        "The cluster's pod, service and node ranges: pods call those directly.",
        "cluster-ranges",
        settings.cluster_destinations(network),
    )
    lines += ["  }", *_client_limits(settings, network), "}"]
    return "\n".join(lines) + "\n"


FIREWALL_RULES = ("node", "deny-ranges", "cluster-ranges", "per-client-rate")
"""The refusing rules' comments: the `rule` label of tinyproxy_firewall_refusals_total (`metrics.firewallCounters`)."""


def _reject(rule: str) -> str:
    """A refusing rule's end: counted, a TCP reset, and its name as the rule's comment (what the counters read)."""
    assert rule in FIREWALL_RULES, rule
    return f'counter reject with tcp reset comment "{rule}"'


def _client_limits(settings: Settings, network: NetworkValues | None) -> list[str]:
    """Each source address's rate of new connections to tinyproxy's port, judged by the kernel before tinyproxy
    accepts, answered with a TCP reset (never a hung connection). The kernel counts no open connections: tinyproxy
    does (MaxConnectionsPerClient, LoopbackReserve), from accept until each connection's thread ends, since conntrack
    forgets a connection its client reset while tinyproxy still serves it, and counts spoofed half-open ones that
    tinyproxy never sees. The meter forgets a source idle for a minute, so spoofed sources cannot fill it for good.

    The `tinyproxy-clients` chain sees a connection in prerouting, before kube-proxy's DNAT (priority -150, after
    conntrack): to the node's own addresses, or to the service ranges (the `http-proxy` Service's ClusterIP) on the
    proxy's port. After the DNAT a reset would come from the node's address, which a pod that dialled the ClusterIP
    ignores, and its connect would hang until it gave up. Other Services on the same port in the service ranges
    share the count. The limits themselves are a chain of their own that both rules `goto` (never `jump`: with a
    jump and a second rule after it, a connection was counted twice, so a client held half its share; measured in a
    network namespace with the kernel here, and tested by the image lane's connection flood). Meters, not declared
    sets: nft 1.0.6 (a node's kube-proxy may run it) crashes listing a declared set that a newer nft made, and lists
    a meter's fine."""
    d = settings.deployment
    port = f"tcp dport {d.port}"
    new = "ct state new"
    rate = d.firewall.new_connections_per_client_per_second
    keywords = {4: "ip", 6: "ip6"}
    services = settings.service_ranges(network)
    lines = [
        f"  chain {CLIENTS_CHAIN} {{",
        "    type filter hook prerouting priority -150; policy accept;",
        "    # The node's own processes, the kubelet's probes among them, are never limited.",
        f'    {port} iif "lo" accept',
        "    # Connections to tinyproxy: to the node's addresses, or to its Service before kube-proxy's DNAT.",
        f"    {port} fib daddr type local goto {LIMITS_CHAIN}",
    ]
    for version in (4, 6):
        nets = [c for c in services if ipaddress.ip_network(c).version == version]
        if nets:
            lines.append(f"    {port} {keywords[version]} daddr {{ {', '.join(nets)} }} goto {LIMITS_CHAIN}")
    lines += ["  }", f"  chain {LIMITS_CHAIN} {{"]
    if rate:
        lines.append(
            f"    # At most {rate} new connections a second per source address, bursts of {2 * rate} "
            "(firewall.newConnectionsPerClientPerSecond); a source idle for a minute leaves the meter."
        )
        lines += [
            f"    {new} meter rate{v} size 65535 {{ {kw} saddr timeout 60s limit rate over {rate}/second burst "
            f"{2 * rate} packets }} {_reject('per-client-rate')}"
            for v, kw in keywords.items()
        ]
    return [*lines, "  }"]


def firewall_command(settings: Settings) -> list[str]:
    """What the init container runs: load the rendered table and the pod's nameservers in one `nft -f` (atomic).

    With `dnsPolicy: Default` the pod's /etc/resolv.conf is the node's, the
    file tinyproxy reads: each `nameserver` (an IPv4 or IPv6 address, any zone
    dropped) gets its rule, inserted first. Shell built-ins only, so an image
    with nft and a POSIX /bin/sh is enough.
    """
    path = f"{settings.deployment.config_dir}/{FIREWALL_KEY}"
    insert = f"insert rule inet {FIREWALL_TABLE} {FIREWALL_CHAIN} meta skuid {settings.deployment.run_as_user}"
    script = "\n".join(
        [
            "set -eu",
            "{",
            f"  echo 'include \"{path}\"'",
            "  while read -r key value rest; do",
            '    [ "$key" = nameserver ] || continue',
            '    value="${value%%%*}"',
            '    case "$value" in',
            '      ""|*[!0-9A-Fa-f:.]*) ;;',
            f'      *:*) echo "{insert} ip6 daddr $value tcp dport 53 counter accept" ;;',
            f'      *) echo "{insert} ip daddr $value tcp dport 53 counter accept" ;;',
            "    esac",
            "  done < /etc/resolv.conf",
            "} | nft -f -",
        ]
    )
    return ["/bin/sh", "-c", script]


def firewall_text(settings: Settings, firewall: str | None) -> str:
    if not settings.deployment.firewall.enabled:
        return ""
    return firewall if firewall is not None else firewall_rules(settings)


def firewall_container(settings: Settings) -> Obj:
    """Root with NET_ADMIN alone, on the node's network: loads the nftables table, then exits."""
    d = settings.deployment
    return {
        "name": "firewall",
        "image": d.firewall.image,
        "imagePullPolicy": d.image_pull_policy,
        "command": firewall_command(settings),
        "resources": {"requests": dict(d.resources.requests), "limits": d.limits},
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "privileged": False,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        },
        "volumeMounts": [{"name": "config", "mountPath": d.config_dir, "readOnly": True}],
    }
