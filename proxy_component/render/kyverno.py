"""Kyverno policies that inject the proxy env into every Pod's containers: by default Kyverno's CEL policies
(`policies.kyverno.io/v1`, Kyverno >= 1.17), with `injection.kyvernoPolicy: ClusterPolicy` the legacy
ClusterPolicy (`kyverno.io/v1`) for Kyverno < 1.17, which Kyverno 1.17 deprecated.

The MutatingPolicy carries the same CEL as the MutatingAdmissionPolicy (`render.admission.pod_mutation`), the
`pods/ephemeralcontainers` subresource (`kubectl debug`) included: the values are literals (Kyverno has no
`paramKind`), and with credentials or a trusted CA every namespace is injected, since a GeneratingPolicy clones `proxy-config` and `proxy-trust` from the proxy's namespace into each of them
(`synchronize` and `generateExisting` on). Autogen is off: Pods only, so workload specs in Git stay as written.
`failurePolicy: Ignore`: Kyverno is a webhook, and a Pod created without the env while it is down beats every Pod
creation in the cluster failing.

The legacy ClusterPolicy:

It carries out the decision of `render.env.additions` in Kyverno's terms, per
container: the six proxy names are one group, so a container that sets any of
them (or reads `proxy-config` through `envFrom`) gets nothing; otherwise it gets
the six, and each runtime variable that its selection asks for and that it does
not set itself. A Pod's selection is its `runtimes.annotation` when present,
else its namespace's entry in `runtimes.namespaces`, else the cluster-wide flags;
the NO_PROXY each spelling carries follows the python runtime. The runtime
variables come first, then the six in one patch, so every precondition sees the
container as the Pod asked for it. Namespaces in `injection.excludeNamespaces`
(kube-system by default) and Pods annotated `<optOutAnnotation>: "false"` are
skipped. Rules match Pods only (autogen is off), so workload specs in Git stay as
written. With credentials the proxy URLs are `secretKeyRef`s, and a generate rule
clones `proxy-config` from the proxy's namespace into every namespace. Ephemeral
containers arrive through the `pods/ephemeralcontainers` subresource, which a Pod
CREATE rule never sees; a rule on that subresource covers them.

With `proxy.upstream.trustedCa`, a generate rule clones `proxy-trust` from the proxy's
namespace into every namespace, and a last foreach gives each container that
`render.trust.receives_trust` the trust variables and the read-only mount, and the Pod
the volume (an ephemeral container only when its Pod has the volume already);
JDK_JAVA_OPTIONS then names the truststore too.
"""

from __future__ import annotations

import json
from typing import Any

from ..settings import RUNTIMES, Runtime, Settings
from .admission import POD_CREATE, POD_EPHEMERAL, Text, cel_literal, excluded_namespaces, plain_text, pod_mutation
from .env import CONFIG_NAME, ENV_NAMES, RUNTIME_VARIABLES, VALUES_ANNOTATION, ProxyValues, pod_env
from .trust import BUNDLE_NAME, MOUNT_PATH, TRUST_NAMES, trust_env_vars, trust_volume, trust_volume_mount

__all__ = [
    "CLONE_CONFIG_NAME",
    "CLONE_TRUST_NAME",
    "POLICY_NAME",
    "cluster_policy",
    "generating_policies",
    "kyverno_objects",
    "mutating_policy",
    "selected_expression",
]

Obj = dict[str, Any]

POLICY_NAME = "proxy-component-inject-env"
CLONE_CONFIG_NAME = "proxy-component-clone-proxy-config"
CLONE_TRUST_NAME = "proxy-component-clone-proxy-trust"
POLICIES_API = "policies.kyverno.io/v1"


def _metadata(name: str, title: str, description: str) -> Obj:
    return {
        "name": name,
        "annotations": {"policies.kyverno.io/title": title, "policies.kyverno.io/description": description},
        "labels": {"app.kubernetes.io/part-of": "proxy-component"},
    }


def mutating_policy(settings: Settings, values: ProxyValues, text: Text = plain_text) -> Obj:
    """The MutatingPolicy; `text` turns the values into their variables' literals (an `apply` for Outputs)."""
    conditions, variables, patches = pod_mutation(settings, values, text, cloned=True)
    excluded = excluded_namespaces(settings)
    if excluded:  # a condition, not a namespaceSelector: Kyverno's own CLI and controllers read it the same way
        conditions = [
            {"name": "not-excluded", "expression": f"!(request.namespace in {cel_literal(excluded)})"},
            *conditions,
        ]
    return {
        "apiVersion": POLICIES_API,
        "kind": "MutatingPolicy",
        "metadata": _metadata(
            POLICY_NAME,
            "Inject HTTP proxy environment",
            "Adds HTTP_PROXY, HTTPS_PROXY and NO_PROXY (both spellings) to every container that sets none of them, "
            "and the runtime variables its Pod selects, outside the excluded namespaces and unless the Pod opts out.",
        ),
        "spec": {
            "matchConstraints": {"resourceRules": [POD_CREATE, POD_EPHEMERAL]},
            "matchConditions": conditions,
            "variables": variables,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patches}}],
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "autogen": {"podControllers": {"controllers": []}},
            "evaluation": {"admission": {"enabled": True}, "mutateExisting": {"enabled": False}},
        },
    }


def _generating_policy(settings: Settings, name: str, kind: str, source: str) -> Obj:
    resource = {"ConfigMap": "configmaps", "Secret": "secrets"}[kind]
    get = f"resource.Get('v1', {cel_literal(resource)}, {cel_literal(settings.deployment.namespace)}, {cel_literal(source)})"
    return {
        "apiVersion": POLICIES_API,
        "kind": "GeneratingPolicy",
        "metadata": _metadata(
            name,
            f"Clone {source} into every namespace",
            f"Keeps a copy of the {kind} {settings.deployment.namespace}/{source} in every namespace, for the Pods "
            f"the {POLICY_NAME} policy gives the proxy env.",
        ),
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["namespaces"],
                    }
                ]
            },
            # Not the source's namespace, nor those where this component already manages the object.
            "matchConditions": [
                {
                    "name": "not-managed-here",
                    "expression": f"!(object.metadata.name in {cel_literal(_clone_exclusions(settings))})",
                }
            ],
            "variables": [
                {"name": "namespace", "expression": "object.metadata.name"},
                {"name": "source", "expression": get},
            ],
            "generate": [{"expression": "generator.Apply(variables.namespace, [variables.source])"}],
            "evaluation": {"synchronize": {"enabled": True}, "generateExisting": {"enabled": True}},
        },
    }


def generating_policies(settings: Settings) -> list[Obj]:
    """GeneratingPolicies that clone `proxy-config` (with credentials: the URLs are `secretKeyRef`s to it) and
    `proxy-trust` (with a trusted CA) from the proxy's namespace into every namespace."""
    out = []
    if settings.has_credentials:
        out.append(_generating_policy(settings, CLONE_CONFIG_NAME, "Secret", CONFIG_NAME))
    if settings.trusted_ca is not None:
        out.append(_generating_policy(settings, CLONE_TRUST_NAME, "ConfigMap", BUNDLE_NAME))
    return out


def kyverno_objects(settings: Settings, values: ProxyValues, text: Text = plain_text) -> list[Obj]:
    """The Kyverno policies `injection.kyvernoPolicy` chooses: GeneratingPolicies then the MutatingPolicy, or the
    legacy ClusterPolicy."""
    if settings.injection.kyverno_policy == "ClusterPolicy":
        return [cluster_policy(settings, values)]
    return [*generating_policies(settings), mutating_policy(settings, values, text)]


_LISTS = (
    ("containers", "Pod", True),
    ("initContainers", "Pod", False),
    ("ephemeralContainers", "Pod/ephemeralcontainers", False),
)


def _literal(value: Any) -> str:
    """A JMESPath literal (backticks around JSON)."""
    return f"`{json.dumps(value, separators=(',', ':'))}`"


def selected_expression(settings: Settings, runtime: Runtime) -> str:
    """A JMESPath expression, true when the Pod's selection holds `runtime`: its annotation lists it, or it has
    no annotation and its namespace (else the cluster) selects it."""
    r = settings.runtimes
    chosen = f"(request.object.metadata.annotations.\"{r.annotation}\" || join('', ['@', request.namespace]))"
    listed = f"contains(split({chosen}, ','), '{runtime}')"
    if runtime in r.cluster_wide:
        off = sorted(f"@{ns}" for ns, runtimes in r.namespaces.items() if runtime not in runtimes)
        unset = f"starts_with({chosen}, '@')"
        return f"{listed} || ({unset} && !contains({_literal(off)}, {chosen}))" if off else f"{listed} || {unset}"
    on = sorted(f"@{ns}" for ns, runtimes in r.namespaces.items() if runtime in runtimes)
    return f"{listed} || contains({_literal(on)}, {chosen})" if on else listed


def _is(settings: Settings, runtime: Runtime, wanted: bool) -> Obj:
    return {"key": f"{{{{ {selected_expression(settings, runtime)} }}}}", "operator": "Equals", "value": wanted}


def _count(expression: str) -> Obj:
    return {"key": f"{{{{ {expression} || `[]` | length(@) }}}}", "operator": "Equals", "value": 0}


def _no_proxy_names() -> list[Obj]:
    """The container sets none of the six in `env` and reads no `proxy-config` through `envFrom`."""
    return [
        _count(f"element.env[?contains({_literal(list(ENV_NAMES))}, name)]"),
        _count(f"element.envFrom[?configMapRef.name=='{CONFIG_NAME}' || secretRef.name=='{CONFIG_NAME}']"),
    ]


def _some(expression: str) -> Obj:
    return {"key": f"{{{{ {expression} || `[]` | length(@) }}}}", "operator": "GreaterThanOrEquals", "value": 1}


def _foreach(
    field: str,
    conditions: list[Obj],
    env: list[Obj],
    any_of: list[Obj] | None = None,
    trust: bool = False,
    stamp: Any = None,
) -> Obj:
    container: Obj = {"(name)": "{{ element.name }}", "env": env}
    spec: Obj = {field: [container]}
    if trust:
        container["volumeMounts"] = [trust_volume_mount()]
        if field != "ephemeralContainers":  # a running Pod's volumes cannot change: it must have the volume already
            spec = {"volumes": [trust_volume()], **spec}
    preconditions: Obj = {"all": conditions}
    if any_of:
        preconditions["any"] = any_of
    patch: Obj = {"spec": spec}
    if stamp is not None and field != "ephemeralContainers":  # an ephemeral container changes no stamp
        # The add anchor: the Pod's own annotation of that key is kept, as the MutatingPolicy keeps it.
        patch = {"metadata": {"annotations": {f"+({VALUES_ANNOTATION})": stamp}}, **patch}
    return {
        "list": f"request.object.spec.{field}",
        "preconditions": preconditions,
        "patchStrategicMerge": patch,
    }


# The trust group's tests (`render.trust.receives_trust` and `volume_free`), as (expression, wanted) pairs: the
# container sets no trust variable and mounts nothing at the path or of the name; the Pod has no other volume of the
# name (and, for an ephemeral container, which cannot add one, it has the bundle's).
def _trust_tests(field: str) -> list[tuple[str, bool]]:
    paths = _literal([MOUNT_PATH, f"{MOUNT_PATH}/"])
    tests = [
        (f"element.env[?contains({_literal(list(TRUST_NAMES))}, name)]", False),
        (f"element.volumeMounts[?name=='{BUNDLE_NAME}' || contains({paths}, mountPath)]", False),
        (f"request.object.spec.volumes[?name=='{BUNDLE_NAME}' && configMap.name!='{BUNDLE_NAME}']", False),
    ]
    if field == "ephemeralContainers":
        tests.append((f"request.object.spec.volumes[?name=='{BUNDLE_NAME}' && configMap.name=='{BUNDLE_NAME}']", True))
    return tests


def _receives_trust(field: str) -> list[Obj]:
    return [_some(e) if wanted else _count(e) for e, wanted in _trust_tests(field)]


def _lacks_trust(field: str) -> list[Obj]:
    """Any one of these holds when the container does not get the trust group."""
    return [_count(e) if wanted else _some(e) for e, wanted in _trust_tests(field)]


def _foreaches(settings: Settings, values: ProxyValues, field: str) -> list[Obj]:
    """The runtime variables first (each when selected and not set; JDK_JAVA_OPTIONS with the truststore when the
    container gets the trust group), then the six (NO_PROXY per python), then the trust group."""
    out = []
    everything = {entry["name"]: entry for entry in pod_env(settings, values.select(RUNTIMES))}
    trusted = {entry["name"]: entry for entry in pod_env(settings, values.select(RUNTIMES).trusted())}
    trust = settings.trusted_ca is not None
    for runtime, name in RUNTIME_VARIABLES.items():
        if name in everything:
            conditions = [*_no_proxy_names(), _count(f"element.env[?name=='{name}']"), _is(settings, runtime, True)]
            if trust and trusted[name] != everything[name]:
                out.append(_foreach(field, [*conditions, *_receives_trust(field)], [trusted[name]]))
                out.append(_foreach(field, conditions, [everything[name]], any_of=_lacks_trust(field)))
            else:
                out.append(_foreach(field, conditions, [everything[name]]))
    for python in (False, True):
        six = [e for e in pod_env(settings, values.select(["python"] if python else [])) if e["name"] in ENV_NAMES]
        conditions = [*_no_proxy_names(), _is(settings, "python", python)]
        out.append(_foreach(field, conditions, six, stamp=values.digest))
    if trust:
        out.append(_foreach(field, _receives_trust(field), trust_env_vars(), trust=True, stamp=values.digest))
    return out


def _exclusions(settings: Settings, kind: str) -> Obj:
    injection = settings.injection
    # An empty `namespaces: []` clause would count as a match and exclude every Pod: leave it out instead.
    namespaces = (
        [{"resources": {"namespaces": list(injection.exclude_namespaces)}}] if injection.exclude_namespaces else []
    )
    return {
        "any": [*namespaces, {"resources": {"kinds": [kind], "annotations": {injection.opt_out_annotation: "false"}}}]
    }


def _inject_rule(settings: Settings, values: ProxyValues, field: str, kind: str, always_present: bool) -> Obj:
    rule: Obj = {
        "name": f"inject-{field.lower()}",
        "match": {"any": [{"resources": {"kinds": [kind]}}]},
        "exclude": _exclusions(settings, kind),
    }
    if not always_present:
        # foreach over an absent list has failed in some Kyverno releases (kyverno#2552): guard the rule.
        rule["preconditions"] = {
            "all": [
                {
                    "key": f"{{{{ request.object.spec.{field}[] || `[]` | length(@) }}}}",
                    "operator": "GreaterThanOrEquals",
                    "value": 1,
                }
            ]
        }
    rule["mutate"] = {"foreach": _foreaches(settings, values, field)}
    return rule


def _clone_exclusions(settings: Settings) -> list[str]:
    return sorted({*settings.injection.exclude_namespaces, settings.deployment.namespace, *settings.namespaces})


def _clone_rule(settings: Settings) -> Obj:
    return {
        "name": "clone-proxy-config",
        "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
        # Not the source's namespace, nor those where this component already manages proxy-config.
        "exclude": {"any": [{"resources": {"names": _clone_exclusions(settings)}}]},
        "generate": {
            "generateExisting": True,
            "apiVersion": "v1",
            "kind": "Secret",
            "name": CONFIG_NAME,
            "namespace": "{{ request.object.metadata.name }}",
            "synchronize": True,
            "clone": {"namespace": settings.deployment.namespace, "name": CONFIG_NAME},
        },
    }


def _clone_trust_rule(settings: Settings) -> Obj:
    """`proxy-trust` cloned into every namespace, so that every Pod the policy gives the trust group can mount it."""
    rule = _clone_rule(settings)
    rule["name"] = "clone-proxy-trust"
    rule["generate"] = {
        **rule["generate"],
        "kind": "ConfigMap",
        "name": BUNDLE_NAME,
        "clone": {"namespace": settings.deployment.namespace, "name": BUNDLE_NAME},
    }
    return rule


def cluster_policy(settings: Settings, values: ProxyValues) -> Obj:
    """The ClusterPolicy; `values` are used as literals except for credentialed URLs (whatever their selection)."""
    rules = [_clone_rule(settings)] if settings.has_credentials else []
    if settings.trusted_ca is not None:
        rules.append(_clone_trust_rule(settings))
    rules += [_inject_rule(settings, values, field, kind, present) for field, kind, present in _LISTS]
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": POLICY_NAME,
            "annotations": {
                "policies.kyverno.io/title": "Inject HTTP proxy environment",
                "policies.kyverno.io/description": (
                    "Adds HTTP_PROXY, HTTPS_PROXY and NO_PROXY (both spellings) to every container that sets none "
                    "of them, and the runtime variables its Pod selects, outside the excluded namespaces and "
                    "unless the Pod opts out."
                ),
                "pod-policies.kyverno.io/autogen-controllers": "none",
            },
            "labels": {"app.kubernetes.io/part-of": "proxy-component"},
        },
        # Injection only adds env: when Kyverno is down, a Pod created without it beats every Pod creation
        # in the cluster failing (Kyverno's default, Fail); such a Pod lacks the env until it is recreated.
        "spec": {"background": False, "failurePolicy": "Ignore", "rules": rules},
    }
