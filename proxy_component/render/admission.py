"""Injection by the API server itself: a MutatingAdmissionPolicy, its binding and its parameter ConfigMap.

The policy carries out, in CEL at Pod CREATE, what the stack transform does to a pod spec (`render.env.additions`
and `render.trust`): each container and initContainer that sets none of the six proxy names (in `env`, or by reading
`proxy-config` through `envFrom`) gets each entry of its Pod's selection it does not set, after its own; one that
`receives_trust` gets the trust variables and the read-only mount, and the Pod the `proxy-trust` volume once. The
selection is the Pod's `runtimes.annotation` (runtimes separated by commas, or `none`), else its namespace's entry in
`runtimes.namespaces`, else the cluster-wide flags; python picks the NO_PROXY each spelling carries.

What is compiled into the CEL and what is read at admission: the values that follow the network (the proxy URLs,
both NO_PROXY renderings, JDK_JAVA_OPTIONS, which carries the NO_PROXY as nonProxyHosts) are read from the
parameter ConfigMap (`paramKind`), so a NO_PROXY change (a discovered range, an added entry) updates one ConfigMap
and leaves the policy, whose CEL the API server compiles and type-checks once, as it is. What the settings decide
(names, annotation keys, the runtimes of each namespace, the namespaces with `proxy-trust`, which variables exist)
shapes the expressions and is compiled in: a change of those is a change of behaviour, reviewed in the policy's diff.
With credentials the URLs are `secretKeyRef`s to each namespace's `proxy-config` Secret, so the ConfigMap holds no
URL at all, and only namespaces with that Secret are injected.

The binding leaves out `injection.excludeNamespaces` and the proxy's own namespace (whose Pods the DaemonSet
controller creates, never the stack transform); a Pod annotated `<optOutAnnotation>: "false"` is left out by a match
condition. `failurePolicy: Fail` and `parameterNotFoundAction: Deny`: the API server runs the policy in process, so
there is no webhook whose outage it would have to ride out; a failure is a Pod that would start without the proxy,
and is refused with the CEL error instead. Ephemeral containers (added through `pods/ephemeralcontainers`, never at
CREATE) are not matched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..settings import ADMISSION_GA_MINOR, Settings
from .env import CONFIG_NAME, ENV_NAMES, NO_PROXY_SPELLINGS, URL_NAMES, ProxyValues, env_pairs
from .runtimes import JDK_JAVA_OPTIONS, NO_PROXY_PYTHON, NODE_USE_ENV_PROXY
from .trust import (
    BUNDLE_NAME,
    MOUNT_PATH,
    TRUST_NAMES,
    trust_env_vars,
    trust_namespaces,
    trust_volume,
    trust_volume_mount,
)

__all__ = [
    "PARAMS_NAME",
    "POLICY_NAME",
    "admission_api_version",
    "admission_objects",
    "admission_params",
    "admission_policy",
    "admission_policy_binding",
    "cel_literal",
    "excluded_namespaces",
    "pod_mutation",
    "values_data",
]

Obj = dict[str, Any]

POLICY_NAME = "proxy-component-inject-env"
PARAMS_NAME = "proxy-component-admission"
JAVA_TRUSTED = "JDK_JAVA_OPTIONS_TRUSTED"  # the params key of JDK_JAVA_OPTIONS for a container with the trust group
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
FIELDS = ("containers", "initContainers")
POD_CREATE: Obj = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}


def admission_api_version(settings: Settings) -> str:
    """admissionregistration.k8s.io/v1, or v1beta1 when cluster.kubernetesVersion names 1.34 or 1.35."""
    minor = settings.cluster.kubernetes_minor
    beta = minor is not None and minor < ADMISSION_GA_MINOR
    return f"admissionregistration.k8s.io/{'v1beta1' if beta else 'v1'}"


def excluded_namespaces(settings: Settings) -> list[str]:
    """`injection.excludeNamespaces` and, with the in-cluster proxy, its own namespace."""
    own = {settings.deployment.namespace} if settings.deployment.enabled else set()
    return sorted({*settings.injection.exclude_namespaces, *own})


def _cel_map(items: dict[str, str]) -> str:
    """A CEL map of CEL expressions, each value `dyn`: the API server's CEL wants the values of one map literal to
    have one type, and an env entry mixes strings and maps."""
    return "{" + ", ".join(f"{cel_literal(k)}: dyn({v})" for k, v in items.items()) + "}"


def cel_literal(value: Any) -> str:
    """A CEL literal of a string, a bool, or a list or map of them, strings in single quotes."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(cel_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return _cel_map({k: cel_literal(v) for k, v in value.items()})
    raise TypeError(f"no CEL literal for {value!r}")


def _java_rendered(values: ProxyValues) -> bool:
    return values.java_options is not None


def admission_params(settings: Settings, values: ProxyValues) -> Obj:
    """The parameter ConfigMap: the values that follow the network, read by the policy at admission (no credential:
    with credentials the URLs are `secretKeyRef`s, and the ConfigMap holds none)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": PARAMS_NAME,
            "namespace": settings.deployment.namespace,
            "labels": {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": "admission"},
        },
        "data": values_data(settings, values),
    }


def values_data(settings: Settings, values: ProxyValues) -> Obj:
    """The parameters by key: the proxy URLs (none with credentials), both NO_PROXY renderings, JDK_JAVA_OPTIONS."""
    data: Obj = {}
    if not settings.has_credentials:
        data["HTTP_PROXY"] = values.http_proxy
        data["HTTPS_PROXY"] = values.https_proxy
    data["NO_PROXY"] = values.rendering("full")
    data[NO_PROXY_PYTHON] = values.rendering("python")
    if _java_rendered(values):
        data[JDK_JAVA_OPTIONS] = values.java_options
        if values.java_trust_options is not None:
            data[JAVA_TRUSTED] = values.java_trust_options
    return data


def _has(path: str) -> str:
    """`has()` for each step of a dotted path (an unset field of a typed object is an error to read)."""
    parts = path.split(".")
    return " && ".join(f"has({'.'.join(parts[: i + 1])})" for i in range(1, len(parts)))


def _selection(settings: Settings) -> str:
    r = settings.runtimes
    annotations = "object.metadata.annotations"
    key = cel_literal(r.annotation)
    per_namespace = {ns: list(runtimes) for ns, runtimes in r.namespaces.items()}
    default = cel_literal(sorted(r.cluster_wide))
    fallback = f"request.namespace in {cel_literal(per_namespace)} ? {cel_literal(per_namespace)}[request.namespace] : {default}"
    if not per_namespace:
        fallback = default
    return (
        f"has({annotations}) && {key} in {annotations} ? "
        f"({annotations}[{key}] == 'none' ? [] : {annotations}[{key}].split(',')) : ({fallback})"
    )


Value = Callable[[str], str]  # a key of the parameters -> the CEL that gives its value


def _params(key: str) -> str:
    return f"params.data[{cel_literal(key)}]"


def _entries(settings: Settings, values: ProxyValues, java_key: str, value: Value) -> str:
    """The env a container gets for its Pod's selection (`variables.selected`), as `env_pairs` orders it; `value`
    spells a parameter's value (read from `params`, or a literal)."""
    spelled = dict(zip(ENV_NAMES[4:], zip(*(NO_PROXY_SPELLINGS[p] for p in (False, True)), strict=True), strict=True))
    keys = {"full": "NO_PROXY", "python": NO_PROXY_PYTHON}
    items = []
    for name, _ in env_pairs(values.select(())):
        if name in URL_NAMES:
            upper = name.upper()
            if settings.has_credentials:
                ref = {"secretKeyRef": {"name": CONFIG_NAME, "key": name}}
                items.append(_cel_map({"name": cel_literal(name), "valueFrom": cel_literal(ref)}))
            else:
                items.append(_cel_map({"name": cel_literal(name), "value": value(upper)}))
        else:
            without, with_python = (keys[r] for r in spelled[name])
            spelled_value = (
                value(without)
                if without == with_python
                else f"(variables.python ? {value(with_python)} : {value(without)})"
            )
            items.append(_cel_map({"name": cel_literal(name), "value": spelled_value}))
    out = f"[{', '.join(items)}]"
    node = _cel_map({"name": cel_literal(NODE_USE_ENV_PROXY), "value": "'1'"})
    out += f" + ('node' in variables.selected ? [{node}] : [])"
    if _java_rendered(values):
        java = f"[{_cel_map({'name': cel_literal(JDK_JAVA_OPTIONS), 'value': value(java_key)})}]"
        out += f" + ('java' in variables.selected ? {java} : [])"
    return out


def _sets_proxy_names(c: str) -> str:
    config = " || ".join(
        f"({_has(f's.{ref}.name')} && s.{ref}.name == {cel_literal(CONFIG_NAME)})"
        for ref in ("configMapRef", "secretRef")
    )
    return (
        f"(({_has(f'{c}.env')} && {c}.env.exists(e, e.name in {cel_literal(list(ENV_NAMES))})) || "
        f"({_has(f'{c}.envFrom')} && {c}.envFrom.exists(s, {config})))"
    )


def _receives_trust(c: str) -> str:
    mount = f"^{MOUNT_PATH}/*$"
    return (
        f"(variables.trust && !({_has(f'{c}.env')} && {c}.env.exists(e, e.name in {cel_literal(list(TRUST_NAMES))})) && "
        f"!({_has(f'{c}.volumeMounts')} && {c}.volumeMounts.exists(m, m.name == {cel_literal(BUNDLE_NAME)} || "
        f"m.mountPath.matches({cel_literal(mount)}))))"
    )


def _added(c: str, trust: bool) -> str:
    """The env entries container `c` gets after its own: `additions`, then the trust variables."""
    entries = f"({_receives_trust(c)} ? variables.trustedEntries : variables.entries)" if trust else "variables.entries"
    unset = f"{entries}.filter(x, !({_has(f'{c}.env')} && {c}.env.exists(e, e.name == x.name)))"
    added = f"({_sets_proxy_names(c)} ? [] : {unset})"
    return f"{added} + ({_receives_trust(c)} ? {cel_literal(trust_env_vars())} : [])" if trust else added


def _patches(field: str, trust: bool) -> str:
    """JSON patches for one container list: each container's whole `env` (its own entries, then the added ones),
    and the trust mount after its own mounts."""
    c = "c"
    index = f"string(object.spec.{field}.map(x, x.name).indexOf({c}.name))"
    path = f"'/spec/{field}/' + {index}"
    patches = (
        f"object.spec.{field}.filter({c}, size({_added(c, trust)}) > 0).map({c}, JSONPatch{{op: 'add', "
        f"path: {path} + '/env', value: dyn({_has(f'{c}.env')} ? {c}.env : []) + {_added(c, trust)}}})"
    )
    if trust:
        mount = cel_literal(trust_volume_mount())
        patches += (
            f" + object.spec.{field}.filter({c}, {_receives_trust(c)}).map({c}, {_has(f'{c}.volumeMounts')} ? "
            f"JSONPatch{{op: 'add', path: {path} + '/volumeMounts/-', value: {mount}}} : "
            f"JSONPatch{{op: 'add', path: {path} + '/volumeMounts', value: [{mount}]}})"
        )
    return f"(has(object.spec.{field}) ? {patches} : [])"


def _volume_patch() -> str:
    receives = " || ".join(
        f"(has(object.spec.{f}) && object.spec.{f}.exists(c, {_receives_trust('c')}))" for f in FIELDS
    )
    volume = cel_literal(trust_volume())
    present = f"has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == {cel_literal(BUNDLE_NAME)})"
    return (
        f"(({receives}) && !({present}) ? [has(object.spec.volumes) ? "
        f"JSONPatch{{op: 'add', path: '/spec/volumes/-', value: {volume}}} : "
        f"JSONPatch{{op: 'add', path: '/spec/volumes', value: [{volume}]}}] : [])"
    )


def _trust(settings: Settings, cloned: bool) -> str:
    other = (
        f"has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == {cel_literal(BUNDLE_NAME)} && "
        f"!({_has('v.configMap.name')} && v.configMap.name == {cel_literal(BUNDLE_NAME)}))"
    )
    if cloned:
        return f"!({other})"
    return f"request.namespace in {cel_literal(trust_namespaces(settings))} && !({other})"


def pod_mutation(
    settings: Settings, values: ProxyValues, value: Value = _params, cloned: bool = False
) -> tuple[list[Obj], list[Obj], str]:
    """The match conditions, variables and JSON-patch expression of the Pod mutation, shared by the
    MutatingAdmissionPolicy (`value` reads `params`) and Kyverno's MutatingPolicy (literals). `cloned`: Kyverno's
    GeneratingPolicy clones `proxy-config` and `proxy-trust` into every namespace, so every namespace has them."""
    injection = settings.injection
    key = cel_literal(injection.opt_out_annotation)
    conditions = [
        {
            "name": "not-opted-out",
            "expression": f"!(has(object.metadata.annotations) && {key} in object.metadata.annotations && "
            f"object.metadata.annotations[{key}] == 'false')",
        }
    ]
    if settings.has_credentials and not cloned:
        conditions.append(
            {
                "name": "has-proxy-config-secret",
                "expression": f"request.namespace in {cel_literal(settings.proxy_config_namespaces)}",
            }
        )
    variables = [
        {"name": "selected", "expression": _selection(settings)},
        {"name": "python", "expression": "'python' in variables.selected"},
        {"name": "entries", "expression": _entries(settings, values, JDK_JAVA_OPTIONS, value)},
    ]
    trust = settings.trusted_ca is not None
    if trust:
        java = JAVA_TRUSTED if values.java_trust_options is not None else JDK_JAVA_OPTIONS
        variables += [
            {"name": "trustedEntries", "expression": _entries(settings, values, java, value)},
            {"name": "trust", "expression": _trust(settings, cloned)},
        ]
    patches = "\n+ ".join([*(_patches(f, trust) for f in FIELDS), *([_volume_patch()] if trust else [])])
    return conditions, variables, patches


def admission_policy(settings: Settings, values: ProxyValues) -> Obj:
    """The MutatingAdmissionPolicy; `values` decide only which variables exist (their values are the params')."""
    conditions, variables, patches = pod_mutation(settings, values)
    return {
        "apiVersion": admission_api_version(settings),
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/part-of": "proxy-component"}},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [POD_CREATE]},
            "matchConditions": conditions,
            "variables": variables,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patches}}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
        },
    }


def admission_policy_binding(settings: Settings) -> Obj:
    """The binding: the policy with its parameter ConfigMap, for every namespace outside `excluded_namespaces`."""
    match: Obj = {}
    excluded = excluded_namespaces(settings)
    if excluded:
        match["namespaceSelector"] = {
            "matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "NotIn", "values": excluded}]
        }
    return {
        "apiVersion": admission_api_version(settings),
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/part-of": "proxy-component"}},
        "spec": {
            "policyName": POLICY_NAME,
            "paramRef": {
                "name": PARAMS_NAME,
                "namespace": settings.deployment.namespace,
                "parameterNotFoundAction": "Deny",
            },
            "matchResources": match,
        },
    }


def admission_objects(settings: Settings, values: ProxyValues) -> list[Obj]:
    """The parameter ConfigMap, the policy and its binding, in the order to apply them."""
    return [admission_params(settings, values), admission_policy(settings, values), admission_policy_binding(settings)]
