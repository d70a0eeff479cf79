"""The proxy's workload: the DaemonSet on every node's network, its probes and placement, and the Service."""

from __future__ import annotations

from typing import Any

from ..settings import OS_LABEL, STAT_HOST, Settings, traffic_distribution
from .common import APP_LABEL, config_name, labels, restricted_security_context
from .config import config_is_secret
from .firewall import firewall_container
from .lifecycle import RESTART_ANNOTATION, proxy_command
from .metrics import (
    LOG_DIR,
    LOG_VOLUME,
    firewall_counters_container,
    log_file_container,
    metrics_container,
    scrape_annotations,
)

__all__ = [
    "CONTROL_PLANE_LABEL",
    "NO_DAEMONSET_LABELS",
    "daemonset",
    "image_pull_secrets",
    "ip_family_fields",
    "node_selector",
    "probe",
    "readiness_probe",
    "service",
    "tolerations",
]

Obj = dict[str, Any]

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


def daemonset(settings: Settings, restart: Any) -> Obj:
    """tinyproxy on every node's network (hostNetwork, node resolver), hardened; its config is reloaded in place
    (`proxy_command`), and `restart` (`restart_inputs`: what tinyproxy cannot reload) rolls it."""
    d = settings.deployment
    selector = {APP_LABEL: d.service_name}
    volume_source: Obj
    if config_is_secret(settings):
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
    init = [firewall_container(settings)] if d.firewall.enabled else []
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
