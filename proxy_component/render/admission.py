"""Injection by the API server itself: a MutatingAdmissionPolicy and its binding.

The policy carries out, in CEL at Pod CREATE, what the stack transform does to a pod spec (`render.env.additions`
and `render.trust`): each container and initContainer that sets none of the six proxy names (in `env`, or by reading
`proxy-config` through `envFrom`) gets each entry of its Pod's selection it does not set, after its own; one that
`receives_trust` gets the trust variables and the read-only mount, and the Pod the `proxy-trust` volume once. The
selection is the Pod's `runtimes.annotation` (runtimes separated by commas, or `none`), else its namespace's entry in
`runtimes.namespaces`, else the cluster-wide flags; python picks the NO_PROXY each spelling carries.

Why the values are compiled into the policy and not read from a parameter object (`paramKind`): kube-apiserver
1.36 stops the informer of a built-in `paramKind` (a ConfigMap) for good, until it restarts, as soon as no binding
names that kind for one refresh tick: deleting and re-creating the binding (a `pulumi destroy` and `up`, a rename, a
replace), or any other policy's last binding of a ConfigMap parameter going away, leaves the API server without the
parameter, and with `parameterNotFoundAction: Deny` every Pod creation outside the excluded namespaces is refused,
or with the stale parameter it injects values that no longer exist (kubernetes/kubernetes#130887, #133827; the fix,
#141015, is open). `tests/engine/test_admission_live.py` reproduces it on the test cluster's kube-apiserver 1.36.3.
So each value that follows the network (the proxy URLs, both NO_PROXY renderings, JDK_JAVA_OPTIONS) is one CEL
variable of its own, a string literal (`variables.noProxy`, ...), and the expressions that place it never change
with it: a NO_PROXY change updates one object, the policy, in one variable, which is what `pulumi preview --diff`
shows; the API server recompiles the policy within a second. With credentials the URLs are `secretKeyRef`s to each
namespace's `proxy-config` Secret, so the policy holds no URL at all, and only namespaces with that Secret are
injected.

The binding leaves out `injection.excludeNamespaces` and the proxy's own namespace (whose Pods the DaemonSet
controller creates, never the stack transform); a Pod annotated `<optOutAnnotation>: "false"` is left out by a match
condition. `failurePolicy: Fail`: the API server runs the policy in process, so there is no webhook whose outage it
would have to ride out; a failure is a Pod that would start without the proxy, and is refused with the CEL error
instead.

Ephemeral containers (`kubectl debug`) are added to a running Pod by an UPDATE of `pods/ephemeralcontainers`, never
at CREATE: the policy matches that subresource too and gives each container the request adds what a container of
that Pod gets, with the trust group only when the Pod has this `proxy-trust` volume already (a running Pod's volumes
cannot change). The Pod's other ephemeral containers, which the API server keeps immutable, are left alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..settings import ADMISSION_GA_MINOR, Settings
from .env import CONFIG_NAME, ENV_NAMES, NO_PROXY_SPELLINGS, URL_NAMES, VALUES_ANNOTATION, ProxyValues, env_pairs
from .runtimes import JDK_JAVA_OPTIONS, NO_PROXY_PYTHON, NODE_USE_ENV_PROXY
from .trust import (
    BUNDLE_NAME,
    CTB_SIGNER,
    MOUNT_PATH,
    TRUST_NAMES,
    trust_env_vars,
    trust_namespaces,
    trust_volume,
    trust_volume_mount,
)

__all__ = [
    "POLICY_NAME",
    "VALUE_VARIABLES",
    "Text",
    "admission_api_version",
    "admission_objects",
    "admission_policy",
    "admission_policy_binding",
    "cel_literal",
    "excluded_namespaces",
    "plain_text",
    "pod_mutation",
    "values_data",
]

Obj = dict[str, Any]
# Turns the values into a string with `build` (an `apply` where they are Outputs).
Text = Callable[[Callable[[ProxyValues], str], ProxyValues], Any]

POLICY_NAME = "proxy-component-inject-env"
JAVA_TRUSTED = "JDK_JAVA_OPTIONS_TRUSTED"  # the key of JDK_JAVA_OPTIONS for a container with the trust group
# Each value that follows the network, by key of `values_data`, and the CEL variable that holds it as a literal.
VALUE_VARIABLES = {
    "HTTP_PROXY": "httpProxy",
    "HTTPS_PROXY": "httpsProxy",
    "NO_PROXY": "noProxy",
    NO_PROXY_PYTHON: "noProxyPython",
    JDK_JAVA_OPTIONS: "jdkJavaOptions",
    JAVA_TRUSTED: "jdkJavaOptionsTrusted",
    VALUES_ANNOTATION: "valuesDigest",
}
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
FIELDS = ("containers", "initContainers")
EPHEMERAL = "ephemeralContainers"
POD_CREATE: Obj = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
# `kubectl debug` adds an ephemeral container to a running Pod by an UPDATE of this subresource, never at CREATE.
POD_EPHEMERAL: Obj = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["UPDATE"],
    "resources": ["pods/ephemeralcontainers"],
}
TRUST = "variables.trust"
EPHEMERAL_TRUST = "variables.ephemeralTrust"


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


def plain_text(build: Callable[[ProxyValues], str], values: ProxyValues) -> str:
    """The `Text` of plain values: `build` called on them."""
    return build(values)


def values_data(settings: Settings, values: ProxyValues) -> Obj:
    """The values by key: the proxy URLs (none with credentials), both NO_PROXY renderings, JDK_JAVA_OPTIONS, and
    the values' digest (when they have one), which the Pod is stamped with."""
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
    if values.digest is not None:
        data[VALUES_ANNOTATION] = values.digest
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


def _value(key: str) -> str:
    return f"variables.{VALUE_VARIABLES[key]}"


def _literal(settings: Settings, key: str, values: ProxyValues) -> str:
    return cel_literal(values_data(settings, values)[key])


def _entries(settings: Settings, values: ProxyValues, java_key: str) -> str:
    """The env a container gets for its Pod's selection (`variables.selected`), as `env_pairs` orders it, each value
    read from its variable."""
    value = _value
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


def _receives_trust(c: str, trust: str = TRUST) -> str:
    mount = f"^{MOUNT_PATH}/*$"
    return (
        f"({trust} && !({_has(f'{c}.env')} && {c}.env.exists(e, e.name in {cel_literal(list(TRUST_NAMES))})) && "
        f"!({_has(f'{c}.volumeMounts')} && {c}.volumeMounts.exists(m, m.name == {cel_literal(BUNDLE_NAME)} || "
        f"m.mountPath.matches({cel_literal(mount)}))))"
    )


def _added(c: str, trust: bool, var: str = TRUST) -> str:
    """The env entries container `c` gets after its own: `additions`, then the trust variables."""
    receives = _receives_trust(c, var)
    entries = f"({receives} ? variables.trustedEntries : variables.entries)" if trust else "variables.entries"
    unset = f"{entries}.filter(x, !({_has(f'{c}.env')} && {c}.env.exists(e, e.name == x.name)))"
    added = f"({_sets_proxy_names(c)} ? [] : {unset})"
    return f"{added} + ({receives} ? {cel_literal(trust_env_vars())} : [])" if trust else added


def _patches(field: str, trust: bool) -> str:
    """JSON patches for one container list: each added env entry appended after the container's own (`/env/-`; the
    container's own entries are never copied into a patch: kube-apiserver 1.37 cannot marshal its typed `EnvVar`s into
    a patch value), or the whole list where it has none, and the trust mount after its own mounts. Ephemeral containers: only those the request adds (the Pod's others
    are immutable), and the trust group only where the Pod has this `proxy-trust` volume already (a running Pod's
    volumes cannot change)."""
    c = "c"
    var = EPHEMERAL_TRUST if field == EPHEMERAL else TRUST
    index = f"string(object.spec.{field}.map(x, x.name).indexOf({c}.name))"
    path = f"'/spec/{field}/' + {index}"
    new = ""
    if field == EPHEMERAL:
        old = f"oldObject.spec.{field}"
        new = f"!(has({old}) && {old}.exists(o, o.name == {c}.name)) && "
    added = _added(c, trust, var)
    patches = (
        f"object.spec.{field}.filter({c}, {new}size({added}) > 0).map({c}, {_has(f'{c}.env')} ? "
        f"({added}).map(e, JSONPatch{{op: 'add', path: {path} + '/env/-', value: e}}) : "
        f"[JSONPatch{{op: 'add', path: {path} + '/env', value: {added}}}]).flatten()"
    )
    if trust:
        mount = cel_literal(trust_volume_mount())
        patches += (
            f" + object.spec.{field}.filter({c}, {new}{_receives_trust(c, var)}).map({c}, {_has(f'{c}.volumeMounts')} ? "
            f"JSONPatch{{op: 'add', path: {path} + '/volumeMounts/-', value: {mount}}} : "
            f"JSONPatch{{op: 'add', path: {path} + '/volumeMounts', value: [{mount}]}})"
        )
    return f"(has(object.spec.{field}) ? {patches} : [])"


def _ours(v: str) -> str:
    """Volume `v` (named `proxy-trust`) is the trust bundle's: the ConfigMap, or a projection of the project's
    ClusterTrustBundles (injection.clusterTrustBundle)."""
    ctb = (
        f"{_has(f'{v}.projected.sources')} && {v}.projected.sources.exists(s, {_has('s.clusterTrustBundle.signerName')}"
        f" && s.clusterTrustBundle.signerName == {cel_literal(CTB_SIGNER)})"
    )
    return f"(({_has(f'{v}.configMap.name')} && {v}.configMap.name == {cel_literal(BUNDLE_NAME)}) || ({ctb}))"


def _volume_patch(settings: Settings) -> str:
    receives = " || ".join(
        f"(has(object.spec.{f}) && object.spec.{f}.exists(c, {_receives_trust('c')}))" for f in FIELDS
    )
    volume = cel_literal(trust_volume(settings))
    present = f"has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == {cel_literal(BUNDLE_NAME)})"
    return (
        f"(({receives}) && !({present}) ? [has(object.spec.volumes) ? "
        f"JSONPatch{{op: 'add', path: '/spec/volumes/-', value: {volume}}} : "
        f"JSONPatch{{op: 'add', path: '/spec/volumes', value: [{volume}]}}] : [])"
    )


def _injected(trust: bool) -> str:
    """Some container or initContainer gets something: the Pod holds values of this policy."""
    return " || ".join(
        f"(has(object.spec.{f}) && object.spec.{f}.exists(c, size({_added('c', trust)}) > 0))" for f in FIELDS
    )


def _stamp_patch() -> str:
    """The digest on the Pod, when it got something and has no annotation of that key (its own is kept)."""
    key = cel_literal(VALUES_ANNOTATION)
    pointer = cel_literal("/metadata/annotations/" + VALUES_ANNOTATION.replace("~", "~0").replace("/", "~1"))
    annotations = "object.metadata.annotations"
    value = _value(VALUES_ANNOTATION)
    return (
        f"(variables.injected && !(has({annotations}) && {key} in {annotations}) ? [has({annotations}) ? "
        f"JSONPatch{{op: 'add', path: {pointer}, value: {value}}} : "
        f"JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{{key}: {value}}}}}] : [])"
    )


def _trust(settings: Settings, cloned: bool) -> str:
    other = (
        f"has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == {cel_literal(BUNDLE_NAME)} && "
        f"!{_ours('v')})"
    )
    if cloned:
        return f"!({other})"
    return f"request.namespace in {cel_literal(trust_namespaces(settings))} && !({other})"


def pod_mutation(
    settings: Settings, values: ProxyValues, text: Text = plain_text, cloned: bool = False
) -> tuple[list[Obj], list[Obj], str]:
    """The match conditions, variables and JSON-patch expression of the Pod mutation, shared by the
    MutatingAdmissionPolicy and Kyverno's MutatingPolicy: the values first, one literal variable each (`text` makes
    each, an `apply` where the values are Outputs), then the expressions that place them. `cloned`: Kyverno's
    GeneratingPolicy clones `proxy-config` and `proxy-trust` into every namespace, so every namespace has them.

    With the values' digest, a Pod that gets anything at CREATE is stamped with it (`VALUES_ANNOTATION`), unless it
    has that annotation already: a Pod whose template was stamped (by the stack transform, Helm values, Kustomize)
    keeps what its template says. An ephemeral container (an UPDATE) changes no stamp."""
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
        {"name": VALUE_VARIABLES[key], "expression": text(functools.partial(_literal, settings, key), values)}
        for key in values_data(settings, values)
    ]
    variables += [
        {"name": "selected", "expression": _selection(settings)},
        {"name": "python", "expression": "'python' in variables.selected"},
        {"name": "entries", "expression": _entries(settings, values, JDK_JAVA_OPTIONS)},
    ]
    trust = settings.trusted_ca is not None
    if trust:
        java = JAVA_TRUSTED if values.java_trust_options is not None else JDK_JAVA_OPTIONS
        own = (
            f"has(object.spec.volumes) && object.spec.volumes.exists(v, v.name == {cel_literal(BUNDLE_NAME)} && "
            f"{_ours('v')})"
        )
        variables += [
            {"name": "trustedEntries", "expression": _entries(settings, values, java)},
            {"name": "trust", "expression": _trust(settings, cloned)},
            {"name": "ephemeralTrust", "expression": f"{TRUST} && {own}"},
        ]
    stamp = values.digest is not None
    if stamp:
        variables.append({"name": "injected", "expression": _injected(trust)})
    create = "\n+ ".join(
        [
            *(_patches(f, trust) for f in FIELDS),
            *([_volume_patch(settings)] if trust else []),
            *([_stamp_patch()] if stamp else []),
        ]
    )
    patches = f"has(request.subResource) && request.subResource == 'ephemeralcontainers'\n? {_patches(EPHEMERAL, trust)}\n: {create}"
    return conditions, variables, patches


def admission_policy(settings: Settings, values: ProxyValues, text: Text = plain_text) -> Obj:
    """The MutatingAdmissionPolicy; `text` makes each value's literal (an `apply` where the values are Outputs)."""
    conditions, variables, patches = pod_mutation(settings, values, text)
    return {
        "apiVersion": admission_api_version(settings),
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": {"app.kubernetes.io/part-of": "proxy-component"}},
        "spec": {
            "matchConstraints": {"resourceRules": [POD_CREATE, POD_EPHEMERAL]},
            "matchConditions": conditions,
            "variables": variables,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patches}}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
        },
    }


def admission_policy_binding(settings: Settings) -> Obj:
    """The binding: the policy for every namespace outside `excluded_namespaces`."""
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
            "matchResources": match,
        },
    }


def admission_objects(settings: Settings, values: ProxyValues, text: Text = plain_text) -> list[Obj]:
    """The policy and its binding, in the order to apply them."""
    return [admission_policy(settings, values, text), admission_policy_binding(settings)]
