"""tinyproxy's configuration: tinyproxy.conf, its Filter, the generation that names them, and the object carrying
them (a ConfigMap, or a Secret when the upstream has credentials).

Builders take plain settings plus leaves that may be `pulumi.Input`s (the config text, its digest): they put a leaf
where it belongs and never look inside it, so the component and the command emit the same objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..noproxy import Kind, parse_entry
from ..settings import STAT_HOST, Settings, loopback_reserve
from .common import config_name, labels
from .firewall import FIREWALL_KEY, firewall_rules
from .metrics import GENERATION_KEY, LOG_FILE

__all__ = [
    "CONFIG_KEY",
    "FILTER_KEY",
    "GENERATION_ANNOTATION",
    "GENERATION_KEY",
    "GENERATION_LENGTH",
    "config_generation",
    "config_is_secret",
    "config_object",
    "tinyproxy_conf",
    "tinyproxy_filter",
]

Obj = dict[str, Any]

# On the config object, and its key `generation`: the digest of what tinyproxy reloads, without the credentials.
GENERATION_ANNOTATION = "proxy-component/config-generation"
CONFIG_KEY = "tinyproxy.conf"
FILTER_KEY = "filter"


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
    if d.access_log.enabled:  # off: no line, so an image without patch 0025 (tinyproxy's default: Off) reads it too
        lines += [
            "",
            "# A JSON line per connection as it ends (no path, query, header or credential), at most AccessLogRate a",
            "# second; those over it are counted in one access-dropped line a second.",
            "AccessLog On",
            f"AccessLogRate {d.access_log.max_lines_per_second}",
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


GENERATION_LENGTH = 16  # hex digits: 64 bits, enough to tell one configuration from the next


def config_generation(settings: Settings, allow: Sequence[str]) -> str:
    """What tinyproxy reloads (tinyproxy.conf and the Filter), with the upstream's credentials left out: a sha256
    of text that holds no secret, so it is no oracle. Each node's proxy logs the generation it loaded, and `check`
    compares it with the config object's; a change of the credentials alone keeps it, and is told by time."""
    content = "\0".join((tinyproxy_conf(settings, allow, credentials=False), tinyproxy_filter(settings)))
    return hashlib.sha256(content.encode()).hexdigest()[:GENERATION_LENGTH]


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


def config_is_secret(settings: Settings) -> bool:
    """The proxy's config object is a Secret (the upstream has credentials), else a ConfigMap."""
    return _upstream_has_credentials(settings)


def _upstream_has_credentials(settings: Settings) -> bool:
    upstream = settings.proxy.upstream
    return upstream is not None and upstream.credentials is not None
