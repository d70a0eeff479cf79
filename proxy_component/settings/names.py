"""Kubernetes names, validated as the API server validates them: DNS-1123 labels and subdomains, Service names,
Helm release names, label and annotation keys and label values; and the names that are taken (the probes' namespace,
the Services and add-ons a cluster has of its own)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")


def _dns_1035(value: str) -> str:
    if not re.match(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", value):
        raise ValueError(f"{value!r} is not a Service name (expected 1-63 of a-z, 0-9 and '-', starting with a letter)")
    return value


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a DNS-1123 label (expected 1-63 of a-z, 0-9 and '-', e.g. kube-system)")
    return value


def namespace_name(value: str) -> str:
    """A namespace name: a DNS-1123 label, or ValueError saying what is accepted."""
    return _dns_label(value)


def release_name(value: str) -> str:
    """A Helm release name: a DNS-1123 label of at most 53 characters (Helm's own limit), or ValueError saying so."""
    _dns_label(value)
    if len(value) > 53:
        raise ValueError(
            f"{value!r} has {len(value)} characters, and Helm refuses release names longer than 53 "
            "(expected a DNS-1123 label of at most 53 characters, e.g. argocd)"
        )
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
ReleaseName = Annotated[str, AfterValidator(release_name)]


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_KEY_ACCEPTED = (
    "expected an optional DNS subdomain and '/', then 1-63 of a-z, A-Z, 0-9, '-', '_' and '.', starting and ending "
    "with a letter or digit, e.g. node.kubernetes.io/pool"
)


def _label_key(value: str) -> str:
    """A label key (a node label, a taint's key): `[prefix/]name`, as Kubernetes accepts them."""
    prefix, slash, name = value.rpartition("/")
    if (slash and not _DNS_NAME.match(prefix)) or not _LABEL_NAME.match(name):
        raise ValueError(f"{value!r} is not a label key ({_LABEL_KEY_ACCEPTED})")
    return value


def _label_value(value: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise ValueError(
            f"{value!r} is not a label value (expected at most 63 of a-z, A-Z, 0-9, '-', '_' and '.', starting and "
            "ending with a letter or digit, or empty, e.g. egress)"
        )
    return value


def _dns_subdomain(value: str) -> str:
    if not _DNS_NAME.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 subdomain (expected at most 253 of a-z, 0-9, '-' and '.', each label "
            "starting and ending with a letter or digit, e.g. registry-credentials)"
        )
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]


_ANNOTATION_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _annotation_key(value: str) -> str:
    if not _ANNOTATION_KEY.match(value):
        raise ValueError(f"{value!r} is not an annotation key (expected e.g. proxy-component.io/inject)")
    return value


# Where `check --probe` runs its pods: a namespace of their own, where Pod Security enforces `restricted` (probe.py).
PROBE_NAMESPACE = "proxy-component-probe"


RESERVED_NAMES = {
    ("default", "kubernetes"): "the API server's own Service",
    **{
        ("kube-system", name): "a cluster add-on's (DNS, kube-proxy, the CNI, metrics-server)"
        for name in ("kube-dns", "coredns", "kube-proxy", "metrics-server", "aws-node", "calico-node", "cilium",
                     "cilium-operator", "konnectivity-agent", "kube-flannel-ds", "kindnet")
    },
}  # fmt: skip
"""Names the proxy's DaemonSet, Service and ConfigMap may never take: with `adoptExisting` they would take the object
over, and `destroy` would delete it (issue 44)."""
