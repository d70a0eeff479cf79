"""What the stack program reads of the cluster before it plans, so that every mistake a preview can see fails the
preview, all at once, each naming its field, its value and what to do (issue 44):

- `context_problems`: `proxy-component:context` names a context the kubeconfig holds;
- `cluster_problems`: the namespaces the settings write to exist (`namespaces`, `helmValuesSecrets`, and
  `deployment.namespace`); the API server serves every kind the settings chose (prometheus-operator's PodMonitor and
  PrometheusRule, Kyverno's policies, the MutatingAdmissionPolicy API); `cluster.dnsDomain` is the domain the
  cluster's CoreDNS serves; a legacy `ClusterPolicy` chosen where the cluster's Kyverno no longer runs one (1.20);
- `live_kubernetes_version`: the API server's version, for `cluster.kubernetesVersion` when the settings leave it unset.

Only a definite answer counts: what cannot be read now (forbidden, unreachable, a cluster without CoreDNS) is left to
the engine, which reports it on the objects. Pure reads with the official client; no `pulumi` here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ..render import plain_plan
from ..settings import Settings
from .kyverno import kyverno_version, legacy_ended, legacy_policy_message

__all__ = ["API_SETTINGS", "cluster_problems", "context_problems", "corefile_zones", "live_kubernetes_version"]

# Which setting chose an object of each kind that the API server may not serve (a CRD, or an API of a newer release).
API_SETTINGS = {
    "PodMonitor": "deployment.metrics.podMonitor (prometheus-operator's CRDs)",
    "PrometheusRule": "deployment.metrics.prometheusRule (prometheus-operator's CRDs)",
    "ClusterPolicy": "injection.kyverno with injection.kyvernoPolicy ClusterPolicy (Kyverno's CRDs)",
    "MutatingPolicy": "injection.kyverno (Kyverno 1.15 or later's CRDs)",
    "GeneratingPolicy": "injection.kyverno (Kyverno 1.15 or later's CRDs)",
    "MutatingAdmissionPolicy": "injection.admission (Kubernetes 1.34 or later, with the API enabled)",
    "MutatingAdmissionPolicyBinding": "injection.admission (Kubernetes 1.34 or later, with the API enabled)",
}
COREDNS = ("kube-system", "coredns", "Corefile")
_TIMEOUT = 10


def context_problems(contexts: Iterable[str], context: str | None, where: str) -> list[str]:
    """`proxy-component:context` is one of the kubeconfig's `contexts` (`where` names the kubeconfig)."""
    names = sorted(contexts)
    if context is None or context in names:
        return []
    return [
        f"proxy-component:context: {context!r} is not a context of {where} (expected one of: "
        f"{', '.join(names) or 'none, it has no contexts'})"
    ]


def cluster_problems(settings: Settings, api: Any) -> list[str]:
    """Every problem the cluster shows with these settings, in the settings' order."""
    return [
        *_namespace_problems(settings, api),
        *_api_problems(settings, api),
        *_domain_problems(settings, api),
        *_kyverno_problems(settings, api),
    ]


def _kyverno_problems(settings: Settings, api: Any) -> list[str]:
    """`injection.kyvernoPolicy: ClusterPolicy` on a cluster whose Kyverno no longer runs legacy policies (1.20)."""
    injection = settings.injection
    if not (injection.kyverno and injection.kyverno_policy == "ClusterPolicy"):
        return []
    found = kyverno_version(api)
    if found is None or not legacy_ended(found):
        return []
    return [f"injection.kyvernoPolicy: 'ClusterPolicy' is Kyverno's legacy policy, and {legacy_policy_message(*found)}"]


def _namespace_problems(settings: Settings, api: Any) -> list[str]:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    fields: dict[str, str] = {}
    if settings.deployment.enabled:
        fields.setdefault(settings.deployment.namespace, "deployment.namespace")
    for name in settings.namespaces:
        fields.setdefault(name, "namespaces")
    for h in settings.helm_values_secrets:
        fields.setdefault(h.namespace, "helmValuesSecrets")
    core = client.CoreV1Api(api)
    problems = []
    for name, field in fields.items():
        try:
            core.read_namespace(name, _request_timeout=_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                return []  # forbidden or failing: the engine reports on the objects
            problems.append(
                f"{field}: {name!r} does not exist in the cluster ({_host(api)}): create it before `pulumi up`, "
                f"or correct {field}"
            )
        except Exception:  # unreachable: the engine reports it
            return []
    return problems


def _api_problems(settings: Settings, api: Any) -> list[str]:
    """Each kind the settings chose that the API server does not serve (discovery, which any user may read)."""
    from kubernetes.client.exceptions import ApiException

    try:
        planned = plain_plan(settings)
    except Exception:  # settings whose plan needs a discovered network: their kinds are checked by the engine
        return []
    wanted: dict[str, set[str]] = {}
    for p in planned:
        if p.cluster == "workload" and p.obj.get("kind") in API_SETTINGS:
            wanted.setdefault(str(p.obj["apiVersion"]), set()).add(str(p.obj["kind"]))
    problems = []
    for version, kinds in sorted(wanted.items()):
        try:
            served = _served_kinds(api, version)
        except ApiException as exc:
            if exc.status != 404:
                continue
            served = set()
        except Exception:
            continue
        for kind in sorted(kinds - served):
            problems.append(
                f"{API_SETTINGS[kind].split(' (')[0]}: the cluster ({_host(api)}) does not serve {kind} "
                f"({version}), so `pulumi up` would fail on it: install what provides it "
                f"({API_SETTINGS[kind].split(' (', 1)[1]}, or turn the setting off"
            )
    return problems


def _served_kinds(api: Any, version: str) -> set[str]:
    """The kinds the API server serves at `group/version` (its discovery document; a 404 when it serves none)."""
    from kubernetes import client

    group, _, ver = version.rpartition("/")
    listing = client.CustomObjectsApi(api).get_api_resources(group, ver, _request_timeout=_TIMEOUT)
    return {str(r.kind) for r in (listing.resources or []) if "/" not in str(r.name)}


def corefile_zones(corefile: str) -> list[str]:
    """The zones CoreDNS's `kubernetes` plugin serves in a Corefile (`kubernetes cluster.local in-addr.arpa ...`)."""
    zones: list[str] = []
    for line in corefile.splitlines():
        match = re.match(r"\s*kubernetes(\s+[^{#]*)?(\{|$|#)", line)
        if match and match.group(1):
            zones += [z.rstrip(".").lower() for z in match.group(1).split()]
    return zones


def _domain_problems(settings: Settings, api: Any) -> list[str]:
    """`cluster.dnsDomain` against the zones the cluster's CoreDNS serves; nothing when there is no CoreDNS
    ConfigMap to read (GKE's kube-dns, a cluster without CoreDNS) or it names no `kubernetes` zone."""
    from kubernetes import client

    namespace, name, key = COREDNS
    try:
        config_map = client.CoreV1Api(api).read_namespaced_config_map(name, namespace, _request_timeout=_TIMEOUT)
    except Exception:
        return []
    zones = [z for z in corefile_zones((config_map.data or {}).get(key, "")) if not z.endswith(".arpa")]
    domain = settings.cluster.dns_domain.rstrip(".").lower()
    if not zones or domain in zones:
        return []
    return [
        f"cluster.dnsDomain: {settings.cluster.dns_domain!r} is not the cluster's domain: its CoreDNS "
        f"({namespace}/{name}) serves {', '.join(repr(z) for z in zones)}, so the proxy's in-cluster URL "
        f"({settings.in_cluster_url}) and the cluster's names in NO_PROXY would not match (expected {zones[0]!r})"
    ]


def live_kubernetes_version(api: Any) -> str | None:
    """The API server's `major.minor` (`1.35`; EKS's `35+` read as 35), None when it cannot be read."""
    from kubernetes import client

    try:
        response: Any = client.VersionApi(api).get_code(_request_timeout=_TIMEOUT, _preload_content=False)
        info = json.loads(response.data)
        major, minor = int(str(info["major"]).rstrip("+")), int(str(info["minor"]).rstrip("+"))
    except Exception:  # unreadable, or not numbers: the settings' own (unset) stays
        return None
    return f"{major}.{minor}"


def _host(api: Any) -> str:
    from ..settings import redact_url

    return redact_url(str(api.configuration.host))
