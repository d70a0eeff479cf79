"""What each live command may ask of the API server, and the least role that grants exactly that.

`accesses(settings)` lists every request `check` makes for these settings (with `probe`, also `check --probe`'s):
lists of nodes and ServiceCIDRs, and per namespace a `get` by name or a list, so that `rbac_objects` can render the
least role it runs under (RBAC `resourceNames` limit every `get`: it never lists Secrets).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..render.env import (
    CONFIG_NAME,
)
from ..render.trust import BUNDLE_NAME, trust_namespaces
from ..settings import PROBE_NAMESPACE, Settings
from .cluster import (
    CONFIG_MAPS,
    DAEMON_SET,
    JOBS,
    NAMESPACES,
    NODES,
    POD_LOGS,
    PODS,
    PROBE_CREATE,
    PROBE_DELETE,
    REPLICA_SETS,
    SECRETS,
    SERVICE_CIDRS,
    SERVICES,
    WORKLOADS,
    Access,
    Api,
    Obj,
)

CHECK_NAME = "proxy-component-check"  # the ServiceAccount, roles and bindings of `render --format check-rbac`
KUBERNETES_SERVICE = ("default", "kubernetes")  # the API server's Service: how pods reach it


def workload_namespaces(settings: Settings) -> list[str]:
    """The namespaces whose workloads check judges: those with a `proxy-config`, outside the injection's exclusions."""
    excluded = set(settings.injection.exclude_namespaces)
    return [ns for ns in settings.proxy_config_namespaces if ns not in excluded]


def workload_apis(settings: Settings) -> list[tuple[str, Api]]:
    """Admission (the API server's policy, or Kyverno) mutates Pods, never their workloads; the stack transform
    writes the workloads' templates."""
    injection = settings.injection
    return [("Pod", PODS)] if injection.kyverno or injection.admission else list(WORKLOADS.items())


def config_api(settings: Settings) -> Api:
    return SECRETS if settings.has_credentials else CONFIG_MAPS


def accesses(settings: Settings, probe: bool = False) -> list[Access]:
    """Every request check may make for these settings, in the order it makes them; `rbac_objects` grants exactly
    these. The `kubernetes` Service is read only where ServiceCIDRs cannot be listed (a 404 before Kubernetes 1.33,
    or a 403). With `probe`, also what `--probe` needs: create, list, delete pods and get their logs in the probe's
    own namespace, and get the proxy pods' logs."""
    d = settings.deployment
    out = [Access(NODES), Access(SERVICE_CIDRS), Access(SERVICES, *KUBERNETES_SERVICE)]
    if d.enabled:
        out += [
            Access(NAMESPACES, None, d.namespace),
            Access(DAEMON_SET, d.namespace, d.service_name),
            Access(PODS, d.namespace),
        ]
    out += [Access(config_api(settings), ns, CONFIG_NAME) for ns in settings.proxy_config_namespaces]
    out += [Access(CONFIG_MAPS, ns, BUNDLE_NAME) for ns in trust_namespaces(settings)]
    out += [Access(api, ns) for ns in workload_namespaces(settings) for _, api in workload_apis(settings)]
    out += stale_accesses(settings)
    if probe and d.enabled:
        out += [Access(api, PROBE_NAMESPACE) for api in (PROBE_CREATE, PODS, POD_LOGS)]
        out += [Access(POD_LOGS, d.namespace), Access(PROBE_DELETE, PROBE_NAMESPACE)]
    return list(dict.fromkeys(out))


def stale_accesses(settings: Settings) -> list[Access]:
    """What judging running pods reads (`stale.stale_owners`), per judged namespace: `proxy-config` and, with a
    trusted CA, `proxy-trust` by name; its pods, ReplicaSets (a pod's Deployment) and Jobs (a pod's CronJob)."""
    trusted = set(trust_namespaces(settings))
    out: list[Access] = []
    for ns in workload_namespaces(settings):
        out.append(Access(config_api(settings), ns, CONFIG_NAME))
        if ns in trusted:
            out.append(Access(CONFIG_MAPS, ns, BUNDLE_NAME))
        out += [Access(PODS, ns), Access(REPLICA_SETS, ns), Access(JOBS, ns)]
    return out


def _rules(granted: Iterable[Access]) -> list[Obj]:
    """RBAC rules for some accesses: one per API group, verb and name, naming its resources."""
    grouped: dict[tuple[str, str, str | None], list[str]] = {}
    for access in granted:
        resources = grouped.setdefault((access.api.group, access.api.verb, access.name), [])
        if access.api.resource not in resources:
            resources.append(access.api.resource)
    rules = []
    for (group, verb, name), resources in grouped.items():
        rule: Obj = {"apiGroups": [group], "resources": resources, "verbs": [verb]}
        if name is not None:
            rule["resourceNames"] = [name]
        rules.append(rule)
    return rules


def rbac_objects(settings: Settings, probe: bool = False) -> list[Obj]:
    """A ServiceAccount `proxy-component-check` (in the proxy's namespace) and the least roles check needs for these
    settings, bound to it: a ClusterRole to list nodes and ServiceCIDRs, and a Role per namespace it reads in.
    With `probe`, also the probe's namespace, where Pod Security enforces `restricted`, and a Role there to create,
    list and delete pods and read their logs (probe.py says why there); the proxy namespace's Role reads pod logs."""
    by_namespace: dict[str | None, list[Access]] = {}
    for access in accesses(settings, probe):
        by_namespace.setdefault(access.namespace, []).append(access)
    home = settings.deployment.namespace
    labels = {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": "check"}
    subjects = [{"kind": "ServiceAccount", "name": CHECK_NAME, "namespace": home}]
    rbac = "rbac.authorization.k8s.io/v1"

    def meta(namespace: str | None) -> Obj:
        return {"name": CHECK_NAME, **({"namespace": namespace} if namespace else {}), "labels": dict(labels)}

    def role(kind: str, namespace: str | None, rules: list[Obj]) -> list[Obj]:
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": CHECK_NAME}
        return [
            {"apiVersion": rbac, "kind": kind, "metadata": meta(namespace), "rules": rules},
            {"apiVersion": rbac, "kind": f"{kind}Binding", "metadata": meta(namespace), "roleRef": ref,
             "subjects": [dict(s) for s in subjects]},
        ]  # fmt: skip

    objects: list[Obj] = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(home)}]
    if PROBE_NAMESPACE in by_namespace:
        pod_security = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
        pod_security["pod-security.kubernetes.io/enforce-version"] = "latest"
        namespace_labels = {
            **labels,
            "app.kubernetes.io/component": "check-probe",
            **dict(sorted(pod_security.items())),
        }
        objects.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NAMESPACE, "labels": namespace_labels}}
        )
    objects += role("ClusterRole", None, _rules(by_namespace.pop(None, [])))
    for namespace in sorted(n for n in by_namespace if n is not None):
        objects += role("Role", namespace, _rules(by_namespace[namespace]))
    return objects
