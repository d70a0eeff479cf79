"""What each live command may ask of the API server, and the least role that grants exactly that.

`accesses(settings)` lists every request `check` makes for these settings (with `probe`, also `check --probe`'s):
lists of nodes and ServiceCIDRs, and per namespace a `get` by name or a list, so that `rbac_objects` can render the
least role it runs under (RBAC `resourceNames` limit every `get`: it never lists Secrets).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..dataplane.common import config_name
from ..dataplane.config import config_is_secret
from ..render.env import (
    CONFIG_NAME,
)
from ..render.kyverno import POLICY_NAME
from ..render.trust import BUNDLE_NAME, cluster_trust_bundle_names, trust_namespaces
from ..settings import PROBE_NAMESPACE, Settings
from .cluster import (
    ALL_PODS,
    CAPI_CLUSTERS,
    CAPI_MACHINE_DEPLOYMENTS,
    CLUSTER_TRUST_BUNDLES,
    CONFIG_MAPS,
    DAEMON_SET,
    EVICTIONS,
    JOBS,
    KYVERNO_DEPLOYMENT,
    LEGACY_POLICY,
    NAMESPACES,
    NODES,
    PDBS,
    POD_LOGS,
    PODS,
    PROBE_CREATE,
    PROBE_DELETE,
    READ_OWNER,
    REPLICA_SET_OWNERS,
    REPLICA_SETS,
    RESTARTED,
    SECRETS,
    SERVICE_CIDRS,
    SERVICES,
    WORKLOADS,
    Access,
    Api,
    Obj,
)
from .kyverno import KYVERNO_DEPLOYMENT as KYVERNO_DEPLOYMENT_NAME

CHECK_NAME = "proxy-component-check"  # the ServiceAccount, roles and bindings of `render --format check-rbac`
ROLLOUT_NAME = "proxy-component-rollout"  # those of `render --format rollout-rbac`
EGRESS_NAME = "proxy-component-egress"  # those of `render --format egress-rbac`
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
    or a 403). With the proxy deployed, its config object by name and its pods' logs (which config each node's proxy
    runs). With `probe`, also what `--probe` needs: create, list, delete pods and get their logs in the probe's own
    namespace."""
    d = settings.deployment
    out = [Access(NODES), Access(SERVICE_CIDRS), Access(SERVICES, *KUBERNETES_SERVICE)]
    if d.enabled:
        out += [
            Access(NAMESPACES, None, d.namespace),
            Access(DAEMON_SET, d.namespace, d.service_name),
            Access(PODS, d.namespace),
            # Which config each node's proxy runs: the config object by name, and its pods' logs.
            Access(SECRETS if config_is_secret(settings) else CONFIG_MAPS, d.namespace, config_name(settings)),
            Access(POD_LOGS, d.namespace),
        ]
    out += [Access(config_api(settings), ns, CONFIG_NAME) for ns in settings.proxy_config_namespaces]
    out += [Access(CONFIG_MAPS, ns, BUNDLE_NAME) for ns in trust_namespaces(settings)]
    if settings.injection.cluster_trust_bundle and settings.trusted_ca is not None:
        out += [Access(CLUSTER_TRUST_BUNDLES, None, name) for name in cluster_trust_bundle_names()]
    out += [Access(api, ns) for ns in workload_namespaces(settings) for _, api in workload_apis(settings)]
    out += stale_accesses(settings)
    if settings.injection.kyverno:
        # By name, cluster-wide (a ClusterRole): Kyverno's namespace need not exist when the role is applied.
        out += [Access(KYVERNO_DEPLOYMENT, None, KYVERNO_DEPLOYMENT_NAME), Access(LEGACY_POLICY, None, POLICY_NAME)]
    if probe and d.enabled:
        out += [Access(api, PROBE_NAMESPACE) for api in (PROBE_CREATE, PODS, POD_LOGS)]
        out += [Access(POD_LOGS, d.namespace), Access(PROBE_DELETE, PROBE_NAMESPACE)]
    return list(dict.fromkeys(out))


def rollout_accesses(settings: Settings, namespaces: Iterable[str] | None = None, capi: bool = False) -> list[Access]:
    """Every request `rollout` may make in the judged namespaces (or those given), in the order it makes them:
    `stale_accesses`, lists of the kinds it restarts, of ReplicaSets (one without a Deployment is an owner) and of
    PodDisruptionBudgets, a get of any of them (or a pod)
    by name while it waits, a patch of the kinds it restarts (the pod template's annotations, as `kubectl rollout
    restart`) and the eviction of pods (bare ones and those of a ReplicaSet without a Deployment). With `capi`,
    instead, what `rollout --capi` reads in the management cluster: the Cluster by name and its MachineDeployments."""
    if capi:
        namespace = settings.capi.namespace
        return [Access(CAPI_CLUSTERS, namespace, settings.cluster.name), Access(CAPI_MACHINE_DEPLOYMENTS, namespace)]
    judged = list(workload_namespaces(settings) if namespaces is None else namespaces)
    out = stale_accesses(settings, judged)
    for ns in judged:
        out += [Access(WORKLOADS[kind], ns) for kind in RESTARTED] + [Access(REPLICA_SETS, ns), Access(PDBS, ns)]
        out += [Access(api, ns) for api in READ_OWNER.values()]
        out += [Access(api, ns) for api in RESTARTED.values()] + [Access(EVICTIONS, ns)]
    return list(dict.fromkeys(out))


def stale_accesses(settings: Settings, namespaces: Iterable[str] | None = None) -> list[Access]:
    """What judging running pods reads (`stale.stale_owners`), per judged namespace (or those given):
    `proxy-config` and, with a trusted CA, `proxy-trust` by name; its pods, ReplicaSets' metadata (a pod's Deployment) and
    Jobs (a pod's CronJob)."""
    trusted = set(trust_namespaces(settings))
    out: list[Access] = []
    for ns in workload_namespaces(settings) if namespaces is None else namespaces:
        out.append(Access(config_api(settings), ns, CONFIG_NAME))
        if ns in trusted:
            out.append(Access(CONFIG_MAPS, ns, BUNDLE_NAME))
        out += [Access(PODS, ns), Access(REPLICA_SET_OWNERS, ns), Access(JOBS, ns)]
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
    return _role_objects(settings, CHECK_NAME, "check", accesses(settings, probe))


def rollout_rbac_objects(settings: Settings, capi: bool = False) -> list[Obj]:
    """A ServiceAccount `proxy-component-rollout` and a Role per judged namespace granting exactly
    `rollout_accesses`: patch only on the kinds it restarts, create only on pods/eviction, never delete. With
    `capi`, the management cluster's: a Role in capi.namespace to get the Cluster and list its MachineDeployments
    (`rollout --capi` only prints the commands that roll the machines)."""
    return _role_objects(settings, ROLLOUT_NAME, "rollout", rollout_accesses(settings, capi=capi))


def egress_accesses(settings: Settings) -> list[Access]:
    """Every request `egress` makes, in order: the proxy's pods and their logs, then every pod and node (to join
    client addresses to pods and nodes)."""
    d = settings.deployment
    return [Access(PODS, d.namespace), Access(POD_LOGS, d.namespace), Access(ALL_PODS), Access(NODES)]


def egress_rbac_objects(settings: Settings) -> list[Obj]:
    """A ServiceAccount `proxy-component-egress` and exactly `egress_accesses`: a ClusterRole to list pods and nodes,
    a Role in the proxy's namespace to list its pods and read their logs."""
    return _role_objects(settings, EGRESS_NAME, "egress", egress_accesses(settings))


def _role_objects(settings: Settings, name: str, component: str, granted: Iterable[Access]) -> list[Obj]:
    by_namespace: dict[str | None, list[Access]] = {}
    for access in granted:
        by_namespace.setdefault(access.namespace, []).append(access)
    home = settings.deployment.namespace
    labels = {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": component}
    subjects = [{"kind": "ServiceAccount", "name": name, "namespace": home}]
    rbac = "rbac.authorization.k8s.io/v1"

    def meta(namespace: str | None) -> Obj:
        return {"name": name, **({"namespace": namespace} if namespace else {}), "labels": dict(labels)}

    def role(kind: str, namespace: str | None, rules: list[Obj]) -> list[Obj]:
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
        return [
            {"apiVersion": rbac, "kind": kind, "metadata": meta(namespace), "rules": rules},
            {"apiVersion": rbac, "kind": f"{kind}Binding", "metadata": meta(namespace), "roleRef": ref,
             "subjects": [dict(s) for s in subjects]},
        ]  # fmt: skip

    objects: list[Obj] = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(home)}]
    if component == "check" and PROBE_NAMESPACE in by_namespace:
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
    cluster_wide = by_namespace.pop(None, [])
    if cluster_wide:
        objects += role("ClusterRole", None, _rules(cluster_wide))
    for namespace in sorted(n for n in by_namespace if n is not None):
        objects += role("Role", namespace, _rules(by_namespace[namespace]))
    return objects
