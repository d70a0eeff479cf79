"""The egress proxy: tinyproxy.conf, the object that carries it, the DaemonSet and the Service.

Builders take plain settings plus leaves that may be `pulumi.Input`s (the
config text, its digest): they put a leaf where it belongs and never look
inside it, so the component and the command emit the same objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..noproxy import Kind, parse_entry
from ..settings import Settings

__all__ = [
    "APP_LABEL",
    "CONFIG_HASH_ANNOTATION",
    "config_digest",
    "config_name",
    "config_object",
    "daemonset",
    "ip_family_fields",
    "labels",
    "service",
    "tinyproxy_conf",
    "tinyproxy_filter",
]

Obj = dict[str, Any]

APP_LABEL = "app"
CONFIG_HASH_ANNOTATION = "proxy-component/config-digest"
CONFIG_KEY = "tinyproxy.conf"
FILTER_KEY = "filter"


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


def tinyproxy_conf(settings: Settings, allow: Sequence[str]) -> str:
    """tinyproxy.conf: never an open proxy (Allow lists only `allow`), CONNECT restricted, optional Upstream.

    `allow` is `Settings.allowed_sources(...)`: loopback, the pod and node
    ranges and the extra allowed sources.
    """
    d = settings.deployment
    lines = [
        "# Rendered by proxy-component. Do not edit: change the settings instead.",
        f"Port {d.port}",
        "Timeout 600",
        f"MaxClients {d.max_clients}",
        "LogLevel Notice",
        "DisableViaHeader Yes",
        "",
        "# Who may use the proxy: loopback and the cluster's pod and node ranges.",
        *(f"Allow {source}" for source in allow),
        "",
        "# CONNECT (HTTPS tunnels) only to these ports.",
        *(f"ConnectPort {port}" for port in d.connect_ports),
    ]
    if d.deny_destinations:
        lines += [
            "",
            "# Never the node itself or the cloud's metadata endpoints, by CONNECT or plain HTTP.",
            f"Filter {_quote(f'{d.config_dir}/{FILTER_KEY}')}",
            "FilterType ere",
            "FilterURLs Off",
            "FilterDefaultDeny No",
        ]
    upstream = settings.proxy.upstream
    if upstream is not None:
        host, port = upstream.endpoint
        creds = upstream.credentials
        userinfo = f"{creds[0]}:{creds[1]}@" if creds else ""
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


def config_digest(settings: Settings, conf: str) -> str:
    """The pod-template annotation that rolls the DaemonSet when the config changes.

    With upstream credentials the config is secret but the annotation is plain,
    so the digest is scrypt (about 40 ms, 16 MiB): guessing a password from it
    must be costly. Without credentials a sha256 is enough.
    """
    content = (conf + "\0" + tinyproxy_filter(settings)).encode()
    if _upstream_has_credentials(settings):
        digest = hashlib.scrypt(content, salt=b"proxy-component/tinyproxy.conf", n=2**14, r=8, p=1, dklen=32)
        return digest.hex()
    return hashlib.sha256(content).hexdigest()


def config_object(settings: Settings, conf: Any) -> Obj:
    """The ConfigMap holding tinyproxy.conf, or a Secret when the config carries upstream credentials."""
    d = settings.deployment
    metadata = {"name": config_name(settings), "namespace": d.namespace, "labels": labels(settings)}
    if _upstream_has_credentials(settings):
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": "Opaque",
            "stringData": _config_data(settings, conf),
        }
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": _config_data(settings, conf)}


def _config_data(settings: Settings, conf: Any) -> Obj:
    data: Obj = {CONFIG_KEY: conf}
    if settings.deployment.deny_destinations:
        data[FILTER_KEY] = tinyproxy_filter(settings)
    return data


def _upstream_has_credentials(settings: Settings) -> bool:
    upstream = settings.proxy.upstream
    return upstream is not None and upstream.credentials is not None


def daemonset(settings: Settings, digest: Any) -> Obj:
    """tinyproxy on every node's network (hostNetwork, node resolver), hardened and rolled by the config digest."""
    d = settings.deployment
    selector = {APP_LABEL: d.service_name}
    probe = {"tcpSocket": {"port": d.port}, "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}
    volume_source: Obj
    if _upstream_has_credentials(settings):
        volume_source = {"secret": {"secretName": config_name(settings), "defaultMode": 0o440}}
    else:
        volume_source = {"configMap": {"name": config_name(settings), "defaultMode": 0o444}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": d.service_name, "namespace": d.namespace, "labels": labels(settings)},
        "spec": {
            "selector": {"matchLabels": selector},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": labels(settings), "annotations": {CONFIG_HASH_ANNOTATION: digest}},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "Default",
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 65534,
                        "runAsGroup": 65534,
                        "fsGroup": 65534,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "tinyproxy",
                            "image": d.image,
                            "command": ["tinyproxy", "-d", "-c", f"{d.config_dir}/{CONFIG_KEY}"],
                            "ports": [
                                {"name": "http-proxy", "containerPort": d.port, "hostPort": d.port, "protocol": "TCP"}
                            ],
                            "readinessProbe": {**probe, "initialDelaySeconds": 2},
                            "livenessProbe": {**probe, "initialDelaySeconds": 10},
                            "resources": {
                                "requests": dict(d.resources.requests),
                                "limits": dict(d.resources.limits),
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "privileged": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "config", "mountPath": d.config_dir, "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "config", **volume_source}],
                },
            },
        },
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
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": d.service_name, "namespace": d.namespace, "labels": labels(settings)},
        "spec": {
            "type": "ClusterIP",
            "selector": {APP_LABEL: d.service_name},
            **ip,
            "internalTrafficPolicy": d.internal_traffic_policy,
            "ports": [{"name": "http-proxy", "port": d.port, "targetPort": d.port, "protocol": "TCP"}],
        },
    }
