"""The egress proxy: tinyproxy.conf, the object that carries it, the DaemonSet and the Service.

Builders take plain settings plus leaves that may be `pulumi.Input`s (the
config text, its digest): they put a leaf where it belongs and never look
inside it, so the component and the command emit the same objects.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence
from typing import Any

from ..noproxy import Kind, parse_entry
from ..settings import OS_LABEL, STAT_HOST, NetworkValues, Settings, loopback_reserve, traffic_distribution
from .metrics import (
    GENERATION_KEY,
    LOG_DIR,
    LOG_FILE,
    LOG_VOLUME,
    firewall_counters_container,
    log_file_container,
    metrics_container,
    scrape_annotations,
)

__all__ = [
    "APP_LABEL",
    "GENERATION_ANNOTATION",
    "GENERATION_KEY",
    "RELOAD_LOG_PREFIX",
    "RESTART_ANNOTATION",
    "STATUS_PERIOD",
    "config_generation",
    "config_is_secret",
    "config_name",
    "config_object",
    "daemonset",
    "firewall_command",
    "firewall_rules",
    "image_pull_secrets",
    "ip_family_fields",
    "labels",
    "loopback_reserve",
    "node_selector",
    "probe",
    "proxy_command",
    "restart_inputs",
    "restricted_security_context",
    "service",
    "tinyproxy_conf",
    "tinyproxy_filter",
    "tolerations",
]

Obj = dict[str, Any]

APP_LABEL = "app"
# On the pod template: what a change of restarts the proxy pods (tinyproxy does not reload it), readable, never a
# credential nor derived from one.
RESTART_ANNOTATION = "proxy-component/restart-inputs"
# On the config object, and its key `generation`: the digest of what tinyproxy reloads, without the credentials.
GENERATION_ANNOTATION = "proxy-component/config-generation"
RELOAD_LOG_PREFIX = "proxy-component: "  # the lines the tinyproxy container's watcher writes (proxy_command)
STATUS_PERIOD = 600  # seconds (polls) between the watcher's lines that repeat what it runs, for `check` to read
CONFIG_KEY = "tinyproxy.conf"
FILTER_KEY = "filter"
FIREWALL_KEY = "nftables.conf"
FIREWALL_TABLE = "proxy-component"
FIREWALL_CHAIN = "tinyproxy-egress"
CLIENTS_CHAIN = "tinyproxy-clients"
LIMITS_CHAIN = "tinyproxy-client-limits"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def labels(settings: Settings) -> dict[str, str]:
    """Labels of every proxy object; `app` is what the runbook's `kubectl get pods -l app=http-proxy` selects."""
    return {
        APP_LABEL: settings.deployment.service_name,
        "app.kubernetes.io/name": "tinyproxy",
        "app.kubernetes.io/component": "egress-proxy",
        "app.kubernetes.io/part-of": "proxy-component",
    }


def config_name(settings: Settings) -> str:
    return f"{settings.deployment.service_name}-config"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def tinyproxy_conf(settings: Settings, allow: Sequence[str], credentials: bool = True) -> str:
    """tinyproxy.conf: never an open proxy (Allow lists only `allow`), CONNECT restricted, optional Upstream.

    `allow` is `Settings.allowed_sources(...)`: loopback, the pod and node
    ranges and the extra allowed sources. `credentials=False` writes
    `<credentials>` for the upstream's user and password: the text that
    `config_generation` digests.
    """
    d = settings.deployment
    deadlines = d.deadlines
    lines = [
        "# Rendered by proxy-component. Do not edit: change the settings instead.",
        f"Port {d.port}",
        f"MaxClients {d.max_clients}",
        "LogLevel Notice",
        "DisableViaHeader Yes",
        "",
        "# Counted by tinyproxy from accept until each connection ends, refused at accept beyond them: each client's",
        "# share (a pod on its own veth, else an address: ClientKey route), and the connections only loopback (the",
        "# kubelet's probes) may use.",
        f"MaxConnectionsPerClient {d.firewall.max_connections_per_client}",
        f"LoopbackReserve {loopback_reserve(d.max_clients)}",
        "",
        "# Deadlines (seconds): the request's head from accept, the connect, the response's head; then idle.",
        f"RequestHeadTimeout {deadlines.request_head_seconds}",
        f"ConnectTimeout {deadlines.connect_seconds}",
        f"ResponseHeadTimeout {deadlines.response_head_seconds}",
        f"Timeout {deadlines.idle_seconds}",
        "",
        "# Who may use the proxy: loopback and the cluster's pod and node ranges.",
        *(f"Allow {source}" for source in allow),
        "",
        "# CONNECT (HTTPS tunnels) only to these ports.",
        *(f"ConnectPort {port}" for port in d.connect_ports),
        "",
        "# The kubelet's probes ask for this host: tinyproxy answers with its stats page and connects nowhere.",
        f"StatHost {_quote(STAT_HOST)}",
    ]
    if d.metrics.enabled:
        lines += [
            "",
            "# The exporter (the metrics container) reads this file and passes it on without the probes' lines.",
            f"LogFile {_quote(LOG_FILE)}",
        ]
    if d.deny_destinations:
        lines += [
            "",
            "# A second layer behind the kernel rules (nftables.conf): refuse the node itself and the metadata",
            "# endpoints by every spelling of their addresses, by CONNECT or plain HTTP.",
            f"Filter {_quote(f'{d.config_dir}/{FILTER_KEY}')}",
            "FilterType ere",
            "FilterURLs Off",
            "FilterCaseSensitive Off",
            "FilterDefaultDeny No",
        ]
    upstream = settings.proxy.upstream
    if upstream is not None:
        host, port = upstream.endpoint
        creds = upstream.credentials
        userinfo = ("<credentials>@" if not credentials else f"{creds[0]}:{creds[1]}@") if creds else ""
        lines += ["", "# Chain to the corporate proxy, except for these destinations."]
        lines += [f"Upstream none {_quote(spec)}" for spec in _no_upstream_specs(upstream.no_upstream)]
        lines.append(f"Upstream http {userinfo}{host}:{port}")
    return "\n".join(lines) + "\n"


def _no_upstream_specs(entries: Sequence[str]) -> list[str]:
    """tinyproxy `Upstream none` site specs for the noUpstream entries, in their canonical form.

    tinyproxy 1.11 matches a spec against the request's host only: a name exactly,
    `.example.com` only below the domain (not example.com itself), an IP or CIDR
    numerically (IPv6 unbracketed). It drops a spec with a port or brackets with a
    warning. So a suffix becomes both the domain and `.domain`, brackets and a
    trailing dot go; the settings refuse a port.
    """
    specs: set[str] = set()
    for raw in entries:
        entry = parse_entry(raw)
        name = entry.value.rstrip(".")
        specs.add(name)
        if entry.kind is Kind.SUFFIX:
            specs.add(f".{name}")
    return sorted(specs)


def tinyproxy_filter(settings: Settings) -> str:
    """The Filter file: one extended regular expression per line over the request's host, each refused."""
    return "".join(f"{pattern}\n" for pattern in settings.deployment.deny_destinations)


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


GENERATION_LENGTH = 16  # hex digits: 64 bits, enough to tell one configuration from the next


def config_generation(settings: Settings, allow: Sequence[str]) -> str:
    """What tinyproxy reloads (tinyproxy.conf and the Filter), with the upstream's credentials left out: a sha256
    of text that holds no secret, so it is no oracle. Each node's proxy logs the generation it loaded, and `check`
    compares it with the config object's; a change of the credentials alone keeps it, and is told by time."""
    content = "\0".join((tinyproxy_conf(settings, allow, credentials=False), tinyproxy_filter(settings)))
    return hashlib.sha256(content.encode()).hexdigest()[:GENERATION_LENGTH]


def restart_inputs(settings: Settings, firewall: str | None = None) -> str:
    """The pod template's annotation: what tinyproxy cannot reload, so that a change of it rolls the DaemonSet.

    `Port` (tinyproxy keeps the sockets it opened) and the kernel rules (`nftables.conf`, loaded by the init
    container when the pod starts: the firewall ranges, the client limits, the upstream's address) as a sha256 of
    their text, which holds no credential. Readable, so that a preview's diff names the part that changed.
    Everything else tinyproxy reloads in place (`proxy_command`). `firewall` is the nftables text when a run-time
    network adds ranges to it; by default it is rendered from the settings.
    """
    text = _firewall_text(settings, firewall)
    rules = hashlib.sha256(text.encode()).hexdigest()[:GENERATION_LENGTH] if text else "off"
    return f"port={settings.deployment.port} firewall={rules}"


def proxy_command(settings: Settings) -> list[str]:
    """What the tinyproxy container runs: tinyproxy, in the foreground as the shell's child, and a watcher that
    reloads it when the kubelet updates the mounted config.

    The kubelet writes a ConfigMap or Secret volume as a directory whose `..data` symlink it swaps atomically to a
    new timestamped directory. Once a second the shell reads where `..data` points (`cd -P`, a built-in). When it
    moved, it checks the new files with tinyproxy itself, which parses the config and compiles the Filter exactly
    as a reload would, then fails to listen on the port the running proxy holds (exit 71, EX_OSERR): only that
    exit sends SIGUSR1. tinyproxy keeps its old config when a reloaded config does not parse, but exits when a
    reloaded Filter does not compile (src/filter.c), so a bad file must never reach it. A new `Port` is never
    reloaded (tinyproxy keeps its sockets): the pod template changes with it and the pod is replaced.

    No capability, no shared process namespace: the shell and tinyproxy run as one user in one container, and the
    shell signals its own child. When tinyproxy exits, the shell exits with its status (the kubelet restarts the
    container). SIGTERM drains (`deployment.drain`): tinyproxy keeps serving `endpointSeconds` while the pod's
    endpoint leaves every node's rules, then the shell counts the established connections to the proxy's port (the
    node's /proc/net/tcp and tcp6, world-readable) once a second until none is left or `connectionSeconds` have
    passed, and only then passes SIGTERM on; SIGINT is passed on at once. Shell built-ins, `sleep` and `timeout`:
    the image's busybox has them.
    Every line it writes starts with `RELOAD_LOG_PREFIX` and names the config generation (`GENERATION_KEY`, never
    a credential) it started with or loaded, and the kubelet's directory of those files (`..2026_11_27_03_00_00.N`:
    when the kubelet wrote them, to the second); it repeats that every `STATUS_PERIOD` seconds, so that `check`
    finds it in the last minutes of the log, and judges a change of the credentials alone (same generation) by
    that time against the config object's.
    """
    d = settings.deployment
    script = "\n".join(
        [
            "set -u",
            f"dir={_shell_quote(d.config_dir)}",
            f'conf="$dir/{CONFIG_KEY}"',
            f'say() {{ echo "{RELOAD_LOG_PREFIX}$*"; }}',
            "# Where the kubelet's ..data points now: a new directory for every update of the config object.",
            'snapshot() { (cd -P "$dir/..data" 2>/dev/null && pwd -P) || echo none; }',
            f'generation() {{ g=unknown; read -r g 2>/dev/null < "$1/{GENERATION_KEY}"; echo "$g"; }}',
            'port() { while read -r k v rest; do [ "$k" = Port ] && { echo "$v"; return; }; done < "$1"; echo; }',
            "# The established connections to the proxy's port, on the node's network (hostNetwork).",
            "open_connections() {",
            "  n=0",
            "  for f in /proc/net/tcp /proc/net/tcp6; do",
            '    [ -r "$f" ] || continue',
            '    while read -r _ local _ st _; do [ "$st" = 01 ] && [ "${local##*:}" = '
            f'{d.port:04X} ] && n=$((n + 1)); done < "$f"',
            "  done",
            '  echo "$n"',
            "}",
            "drain() {",
            f'  say "stopping: serving new connections {d.drain.endpoint_seconds}s more (while this pod leaves every '
            f"node's rules), then open connections up to {d.drain.connection_seconds}s\"",
            f"  sleep {d.drain.endpoint_seconds}",
            "  t=0; n=$(open_connections)",
            f'  say "waiting for $n open connection(s) to close, at most {d.drain.connection_seconds}s"',
            f'  while [ "$n" -gt 0 ] && [ "$t" -lt {d.drain.connection_seconds} ]; do sleep 1; t=$((t + 1)); '
            "n=$(open_connections); done",
            '  say "stopping tinyproxy after ${t}s of draining: $n connection(s) still open"',
            "  kill -TERM $pid 2>/dev/null",
            "}",
            'tinyproxy -d -c "$conf" &',
            "pid=$!",
            "trap drain TERM",
            "trap 'kill -TERM $pid 2>/dev/null' INT",
            'loaded=$(snapshot); running=$(port "$conf"); current=$(generation "$dir"); files=${loaded##*/}; i=0',
            'say "started tinyproxy (pid $pid) with config generation $current (files $files)"',
            'while kill -0 "$pid" 2>/dev/null; do',
            "  sleep 1 & wait $!",
            "  i=$((i + 1))",
            f'  [ $((i % {STATUS_PERIOD})) -eq 0 ] && say "running config generation $current (files $files)"',
            "  now=$(snapshot)",
            '  [ "$now" = "$loaded" ] && continue',
            '  [ "$now" = none ] && { loaded=$now; continue; }',
            '  new=$(generation "$now")',
            '  if [ "$(port "$now/tinyproxy.conf")" != "$running" ]; then',
            '    say "config generation $new (files ${now##*/}) changes Port: not reloaded (the pod is replaced for it)"',
            "    loaded=$now; continue",
            "  fi",
            '  out=$(timeout 5 tinyproxy -d -c "$now/tinyproxy.conf" 2>&1 </dev/null); rc=$?',
            '  if [ "$rc" -ne 71 ]; then',
            '    printf "%s\\n" "$out" | while read -r line; do',
            '      case "$line" in *"Syntax error"*|*"Bad regex"*|*"Could not open"*|*"filter file"*|*"MUST"*|*"Bad port"*)',
            '        say "  $line";; esac',
            "    done",
            '    say "config generation $new (files ${now##*/}) refused (tinyproxy exits $rc on it): not reloaded, the running config stays"',
            "    loaded=$now; continue",
            "  fi",
            '  [ "$(snapshot)" = "$now" ] || continue',
            '  kill -USR1 "$pid" && say "reloaded tinyproxy with config generation $new (files ${now##*/})"',
            "  loaded=$now; current=$new; files=${now##*/}",
            "done",
            'wait "$pid"; rc=$?',
            'say "tinyproxy exited ($rc)"',
            'exit "$rc"',
        ]
    )
    return ["/bin/sh", "-c", script]


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def config_object(settings: Settings, conf: Any, firewall: Any = None, generation: Any = None) -> Obj:
    """The ConfigMap holding tinyproxy.conf, or a Secret when the config carries upstream credentials.

    `firewall` (text or an Output) is the nftables table; by default it is rendered from the settings.
    `generation` (text or an Output) is `config_generation`, by default for the settings' own Allow list; it is
    both an annotation (for `check`) and the key `generation` (for the container's watcher to log).
    """
    d = settings.deployment
    if generation is None:
        generation = config_generation(settings, settings.allowed_sources())
    metadata = {
        "name": config_name(settings),
        "namespace": d.namespace,
        "labels": labels(settings),
        "annotations": {GENERATION_ANNOTATION: generation},
    }
    if _upstream_has_credentials(settings):
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "Opaque",
            "stringData": _config_data(settings, conf, firewall, generation),
        }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": _config_data(settings, conf, firewall, generation),
    }


def _config_data(settings: Settings, conf: Any, firewall: Any, generation: Any) -> Obj:
    data: Obj = {CONFIG_KEY: conf, GENERATION_KEY: generation}
    if settings.deployment.deny_destinations:
        data[FILTER_KEY] = tinyproxy_filter(settings)
    if settings.deployment.firewall.enabled:
        data[FIREWALL_KEY] = firewall if firewall is not None else firewall_rules(settings)
    return data


def _firewall_text(settings: Settings, firewall: str | None) -> str:
    if not settings.deployment.firewall.enabled:
        return ""
    return firewall if firewall is not None else firewall_rules(settings)


def config_is_secret(settings: Settings) -> bool:
    """The proxy's config object is a Secret (the upstream has credentials), else a ConfigMap."""
    return _upstream_has_credentials(settings)


def _upstream_has_credentials(settings: Settings) -> bool:
    upstream = settings.proxy.upstream
    return upstream is not None and upstream.credentials is not None


def daemonset(settings: Settings, restart: Any) -> Obj:
    """tinyproxy on every node's network (hostNetwork, node resolver), hardened; its config is reloaded in place
    (`proxy_command`), and `restart` (`restart_inputs`: what tinyproxy cannot reload) rolls it."""
    d = settings.deployment
    selector = {APP_LABEL: d.service_name}
    volume_source: Obj
    if _upstream_has_credentials(settings):
        volume_source = {"secret": {"secretName": config_name(settings), "defaultMode": 0o440}}
    else:
        volume_source = {"configMap": {"name": config_name(settings), "defaultMode": 0o444}}
    uid = d.run_as_user
    priority = {"priorityClassName": d.priority_class_name} if d.priority_class_name else {}
    tolerated = tolerations(settings)
    pod_spec: Obj = {
        "hostNetwork": True,
        "dnsPolicy": "Default",
        **priority,
        "nodeSelector": node_selector(settings),
        **_placement(settings),
        **({"tolerations": tolerated} if tolerated else {}),
        **image_pull_secrets(settings),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": d.drain.grace_seconds,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "fsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    init = [_firewall_container(settings)] if d.firewall.enabled else []
    tinyproxy_mounts: list[Obj] = [{"name": "config", "mountPath": d.config_dir, "readOnly": True}]
    sidecars: list[Obj] = []
    volumes: list[Obj] = [{"name": "config", **volume_source}]
    if d.metrics.enabled:
        init.append(log_file_container(settings))
        tinyproxy_mounts.append({"name": LOG_VOLUME, "mountPath": LOG_DIR})
        sidecars.append(metrics_container(settings))
        if d.metrics.firewall_counters:  # the settings refuse it without the firewall
            sidecars.append(firewall_counters_container(settings))
        volumes.append({"name": LOG_VOLUME, "emptyDir": {}})
    if init:
        pod_spec["initContainers"] = init
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": d.service_name, "namespace": d.namespace, "labels": labels(settings)},
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {
                    "labels": labels(settings),
                    "annotations": {RESTART_ANNOTATION: restart, **scrape_annotations(settings)},
                },
                "spec": {
                    **pod_spec,
                    "containers": [
                        {
                            "name": "tinyproxy",
                            "image": d.image,
                            "imagePullPolicy": d.image_pull_policy,
                            "command": proxy_command(settings),
                            # deadlines.dnsSeconds: glibc's resolver reads its options here (resolv.conf is the
                            # node's), so a lookup gives up within it whatever the node's own options are.
                            "env": [{"name": "RES_OPTIONS", "value": d.deadlines.resolver_options}],
                            "ports": [
                                {"name": "http-proxy", "containerPort": d.port, "hostPort": d.port, "protocol": "TCP"}
                            ],
                            "readinessProbe": readiness_probe(settings),
                            "livenessProbe": {**probe(settings), "initialDelaySeconds": 10},
                            "resources": {
                                "requests": dict(d.resources.requests),
                                "limits": d.limits,
                            },
                            "securityContext": restricted_security_context(),
                            "volumeMounts": tinyproxy_mounts,
                        },
                        *sidecars,
                    ],
                    "volumes": volumes,
                },
            },
        },
    }


def restricted_security_context() -> Obj:
    """A container's securityContext for Pod Security `restricted`: non-root, read-only, no capability at all."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }


def probe(settings: Settings) -> Obj:
    """An HTTP probe through tinyproxy's own request handling: its stats page, which reaches no upstream.

    The kubelet dials 127.0.0.1 (the pod shares the node's network, and
    loopback is always in `Allow`) and asks for `STAT_HOST`. A TCP probe would
    skip the request path and make tinyproxy log an ERROR line per probe.
    """
    http = {
        "host": "127.0.0.1",
        "port": settings.deployment.port,
        "path": "/",
        "httpHeaders": [{"name": "Host", "value": STAT_HOST}],
    }
    return {"httpGet": http, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}


def readiness_probe(settings: Settings) -> Obj:
    """The probe every second from the container's start: on a node, the pod that replaces the proxy can only start
    once the old one has gone (both hold the node's port), and the Service sends the node's clients nowhere until
    the kubelet sees the new one ready. Measured on a real node: 10-13 s without egress per roll with the 10 s
    period, about 1 s with this one. Its cost, one NOTICE line a second in tinyproxy's log (`Request for the
    stathost.`); LogLevel stays Notice so that refused requests are logged."""
    return {**probe(settings), "periodSeconds": 1, "timeoutSeconds": 1}


# Nodes that never run DaemonSet pods, by label: virtual-kubelet's (AKS virtual nodes, ACI, Alibaba ECI, ...) and EKS
# Fargate's. The proxy tolerates every taint, so without these terms its pods would be bound there and stay Pending.
NO_DAEMONSET_LABELS = {"eks.amazonaws.com/compute-type": "fargate", "type": "virtual-kubelet"}


def _placement(settings: Settings) -> Obj:
    """Off nodes that cannot run it (virtual kubelets, Fargate); off control-plane nodes unless
    `deployment.controlPlane` asks for them; and on the nodes `deployment.affinity` selects.

    Terms are ORed and a term's expressions ANDed, so the proxy's own expressions lead each of the user's terms:
    a node must meet them and one of the user's terms.
    """
    expressions: list[Obj] = [
        {"key": key, "operator": "NotIn", "values": [value]} for key, value in sorted(NO_DAEMONSET_LABELS.items())
    ]
    if not settings.deployment.control_plane:
        expressions.insert(0, {"key": CONTROL_PLANE_LABEL, "operator": "DoesNotExist"})
    d = settings.deployment
    terms = [{"matchExpressions": [*expressions, *t.spec()]} for t in d.required_node_terms]
    affinity: Obj = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms or [{"matchExpressions": expressions}]
        }
    }
    if d.preferred_node_terms:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": t.weight, "preference": {"matchExpressions": t.preference.spec()}}
            for t in d.preferred_node_terms
        ]
    return {"affinity": {"nodeAffinity": affinity}}


def node_selector(settings: Settings) -> dict[str, str]:
    """The proxy's nodeSelector (and the probe pods'): Linux, and `deployment.nodeSelector`, sorted by key."""
    return dict(sorted({OS_LABEL: "linux", **settings.deployment.node_selector}.items()))


def tolerations(settings: Settings) -> list[Obj]:
    """Every taint (the proxy is every node's egress) unless `deployment.tolerateAllTaints` is false, then the
    settings' own tolerations; the probe pods take the same, so that they land where the proxy runs."""
    d = settings.deployment
    catch_all: list[Obj] = [{"operator": "Exists"}] if d.tolerate_all_taints else []
    return [*catch_all, *(t.spec() for t in d.tolerations)]


def image_pull_secrets(settings: Settings) -> Obj:
    """`imagePullSecrets` naming `deployment.imagePullSecrets`, for a pod spec; nothing when there are none."""
    names = settings.deployment.image_pull_secrets
    return {"imagePullSecrets": [{"name": name} for name in names]} if names else {}


def _firewall_container(settings: Settings) -> Obj:
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


def ip_family_fields(family: str) -> Obj:
    """The Service's `ipFamilyPolicy`/`ipFamilies` for a cluster family (`ipv4`, `ipv6` or `dual`).

    Dual-stack leaves `ipFamilies` unset, so the cluster's own primary family
    comes first whatever order the CIDRs were given in.
    """
    if family == "dual":
        return {"ipFamilyPolicy": "PreferDualStack"}
    if family in ("ipv4", "ipv6"):
        return {"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6" if family == "ipv6" else "IPv4"]}
    raise ValueError(f"ip family {family!r} is not one of ipv4, ipv6, dual")


def service(settings: Settings, ip_fields: Obj | None = None) -> Obj:
    """The `http-proxy` Service; its IP families follow the cluster's (IPv6 single-stack on an IPv6-only cluster).

    `ip_fields` replaces the families derived from the settings, e.g. with
    Outputs of a discovered cluster.
    """
    d = settings.deployment
    ip = ip_fields if ip_fields is not None else ip_family_fields(settings.cluster.effective_ip_family)
    distribution = traffic_distribution(settings)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": d.service_name, "namespace": d.namespace, "labels": labels(settings)},
        "spec": {
            "type": "ClusterIP",
            "selector": {APP_LABEL: d.service_name},
            **ip,
            "internalTrafficPolicy": d.internal_traffic_policy,
            **({"trafficDistribution": distribution} if distribution is not None else {}),
            "ports": [{"name": "http-proxy", "port": d.port, "targetPort": d.port, "protocol": "TCP"}],
        },
    }
