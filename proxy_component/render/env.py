"""The proxy environment for workloads: which variables a container gets, and per-namespace ConfigMaps or Secrets.

One place decides what a container gets, for every consumer (the stack transform,
the Kyverno policy, Kustomize patches, Helm values, `proxy-config` and `check`):

- `env_pairs(values)`: the variables for a runtime selection (`ProxyValues.select`):
  the six proxy names, with the NO_PROXY rendering each spelling carries per
  `NO_PROXY_SPELLINGS`, then the selected runtimes' variables;
- `additions(container, entries)`: what one container gets of them. The six names
  are one group: a container that sets any of them itself (in `env`, or reads
  `proxy-config` through `envFrom`) gets nothing, runtime variables included;
  otherwise it gets every entry whose name it does not set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..noproxy import NoProxy
from ..settings import Runtime, Settings
from .runtimes import JDK_JAVA_OPTIONS, NO_PROXY_PYTHON, NODE_USE_ENV_PROXY, java_options, python_no_proxy
from .trust import JAVA_TRUST_OPTIONS

__all__ = [
    "CONFIG_NAME",
    "ENV_NAMES",
    "NO_PROXY_SPELLINGS",
    "REFERENCE_KEYS",
    "RUNTIME_VARIABLES",
    "URL_NAMES",
    "VALUES_ANNOTATION",
    "WORKLOAD_KINDS",
    "ProxyValues",
    "additions",
    "env_names",
    "env_pairs",
    "env_vars",
    "pod_env",
    "pod_env_by_reference",
    "proxy_config_object",
    "proxy_config_objects",
    "reads_proxy_config",
    "sets_proxy_names",
    "workload_kind",
    "workload_values",
]

ENV_NAMES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")

# The variable each runtime adds beside the six (python adds none: it changes which NO_PROXY they carry).
RUNTIME_VARIABLES: dict[Runtime, str] = {"node": NODE_USE_ENV_PROXY, "java": JDK_JAVA_OPTIONS}

Rendering = Literal["full", "python"]

# The NO_PROXY rendering (NO_PROXY, no_proxy) carry, for a workload without and with the python runtime: the
# composed list, or the Python-safe one (no IPv6 CIDRs or bracketed addresses, on which httpx raises at start).
# Chosen by the client model, not by hand: proxy_component/injections.py scores every candidate over the example
# clusters and every client (docs/no-proxy-injections.md), and a test holds this to the winner.
NO_PROXY_SPELLINGS: dict[bool, tuple[Rendering, Rendering]] = {False: ("full", "python"), True: ("python", "python")}

# Workload kinds that carry a pod template: apiVersion and the path from the object to its pod spec.
WORKLOAD_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Deployment": ("apps/v1", ("spec", "template", "spec")),
    "StatefulSet": ("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec")),
    "ReplicaSet": ("apps/v1", ("spec", "template", "spec")),
    "Job": ("batch/v1", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
    "Pod": ("v1", ("spec",)),
}


def workload_kind(kind: str) -> tuple[str, tuple[str, ...]]:
    """The apiVersion and pod-spec path of a workload kind, or a ValueError naming the accepted kinds."""
    try:
        return WORKLOAD_KINDS[kind]
    except KeyError:
        raise ValueError(f"kind {kind!r} has no pod template (expected one of {', '.join(WORKLOAD_KINDS)})") from None


Obj = dict[str, Any]

CONFIG_NAME = "proxy-config"
VALUES_ANNOTATION = "proxy-component.io/values-digest"
REFERENCE = "reference"  # the stamp of a template injected by reference: it follows proxy-config's changes

# What a reference names beside the keys `envFrom` reads, which hold one runtime selection's renderings: the composed
# NO_PROXY (a python namespace's NO_PROXY key holds the Python-safe one) and both JDK_JAVA_OPTIONS (a namespace
# without java has neither). Names no client reads, so that the `envFrom` readers of proxy-config get nothing new.
REFERENCE_NO_PROXY = "PROXY_COMPONENT_NO_PROXY"
REFERENCE_JAVA = "PROXY_COMPONENT_JDK_JAVA_OPTIONS"
REFERENCE_JAVA_TRUSTED = "PROXY_COMPONENT_JDK_JAVA_OPTIONS_TRUSTED"
REFERENCE_KEYS = (REFERENCE_NO_PROXY, REFERENCE_JAVA, REFERENCE_JAVA_TRUSTED)


@dataclass(frozen=True)
class ProxyValues:
    """The values consumers receive, for one runtime selection; each may be a string or a `pulumi.Input[str]`.

    `no_proxy` is the composed list; `no_proxy_python` the Python-safe one (None: the
    same list, as nodes get); `java_options` the JDK_JAVA_OPTIONS value, None when it
    is not rendered (a proxy with credentials or https://); `java_trust_options` the
    value for a container that also gets the trust group (`render.trust`): the proxy
    properties and the truststore's, None without `proxy.upstream.trustedCa`; `trust`
    whether there is a trusted CA (known from the settings alone, so plain even in the
    component): Helm profiles then give their containers the trust group too.
    `selection` is the runtimes these values are for: `select` gives the same values
    for another selection, `trusted` those of a container with the trust mount.
    `digest` is the digest of the cluster's values (`render.digest`), which whatever injects them
    stamps as `VALUES_ANNOTATION`; None: nothing is stamped. A Helm profile's values (whose NO_PROXY
    adds its chart's names) keep the cluster's digest, so that every stamp compares with one value.
    """

    http_proxy: Any
    https_proxy: Any
    no_proxy: Any
    no_proxy_python: Any = None
    java_options: Any = None
    selection: frozenset[Runtime] = frozenset()
    java_trust_options: Any = None
    trust: bool = False
    digest: Any = None

    def select(self, selection: Iterable[Runtime]) -> ProxyValues:
        return replace(self, selection=frozenset(selection))

    def trusted(self) -> ProxyValues:
        """The values for a container that gets the trust group: JDK_JAVA_OPTIONS names the truststore too."""
        if self.java_trust_options is None:
            return self
        return replace(self, java_options=self.java_trust_options)

    def rendering(self, which: Rendering) -> Any:
        if which == "python" and self.no_proxy_python is not None:
            return self.no_proxy_python
        return self.no_proxy


def workload_values(
    settings: Settings, no_proxy: NoProxy, http: Any = None, https: Any = None, selection: Iterable[Runtime] = ()
) -> ProxyValues:
    """The values for workloads from a composed NO_PROXY, for `selection` (default: no runtime).

    `http`/`https` default to the settings' URLs (the component passes them as Outputs).
    """
    java = java_options(settings.http_proxy, settings.https_proxy, no_proxy).value
    return ProxyValues(
        settings.http_proxy if http is None else http,
        settings.https_proxy if https is None else https,
        str(no_proxy),
        no_proxy_python=python_no_proxy(no_proxy),
        java_options=java,
        selection=frozenset(selection),
        java_trust_options=f"{java} {JAVA_TRUST_OPTIONS}" if java is not None and settings.trusted_ca else None,
        trust=settings.trusted_ca is not None,
    )


def env_names(values: ProxyValues) -> tuple[str, ...]:
    """The names a workload gets for these values' selection: the six, then the runtimes' variables."""
    return tuple(name for name, _ in env_pairs(values))


def env_pairs(values: ProxyValues) -> list[tuple[str, Any]]:
    """Name/value pairs, upper case first (wget and apt read only lower case, Go prefers upper case), then the
    selected runtimes' variables."""
    upper, lower = NO_PROXY_SPELLINGS["python" in values.selection]
    pairs: list[tuple[str, Any]] = [
        ("HTTP_PROXY", values.http_proxy),
        ("http_proxy", values.http_proxy),
        ("HTTPS_PROXY", values.https_proxy),
        ("https_proxy", values.https_proxy),
        ("NO_PROXY", values.rendering(upper)),
        ("no_proxy", values.rendering(lower)),
    ]
    if "node" in values.selection:
        pairs.append((NODE_USE_ENV_PROXY, "1"))
    if "java" in values.selection and values.java_options is not None:
        pairs.append((JDK_JAVA_OPTIONS, values.java_options))
    return pairs


def env_vars(values: ProxyValues) -> list[Obj]:
    """A container `env` list: both spellings of the three variables, then the selected runtimes' variables."""
    return [{"name": name, "value": value} for name, value in env_pairs(values)]


URL_NAMES = ENV_NAMES[:4]


def pod_env(settings: Settings, values: ProxyValues) -> list[Obj]:
    """The env to put into a workload: literals, except that the proxy URLs become `secretKeyRef`s to the
    namespace's `proxy-config` Secret when they carry credentials (NO_PROXY and the runtime variables are
    no secret, and stay literals, so a Secret of any namespace's selection serves every workload)."""
    secret = settings.has_credentials
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": CONFIG_NAME, "key": name}}}
        if secret and name in URL_NAMES
        else {"name": name, "value": value}
        for name, value in env_pairs(values)
    ]


def _reference_keys(values: ProxyValues) -> ProxyValues:
    """`values` with each value replaced by the key of proxy-config that holds it (`proxy_config_object` with
    `injection.transformEnv: reference`): env_pairs of these are (name, key) pairs."""
    trust = values.java_trust_options
    # `trusted()` values carry the trust variant as java_options (the same object, or an equal string).
    trusted = trust is not None and (values.java_options is trust or values.java_options == trust)
    return replace(
        values,
        http_proxy="HTTP_PROXY",
        https_proxy="HTTPS_PROXY",
        no_proxy=REFERENCE_NO_PROXY,
        no_proxy_python=None if values.no_proxy_python is None else NO_PROXY_PYTHON,
        java_options=None if values.java_options is None else REFERENCE_JAVA_TRUSTED if trusted else REFERENCE_JAVA,
        java_trust_options=None if trust is None else REFERENCE_JAVA_TRUSTED,
        digest=None,
    )


def pod_env_by_reference(settings: Settings, values: ProxyValues) -> list[Obj]:
    """The env `pod_env` gives for `values`' selection, each value read from the namespace's proxy-config
    (`configMapKeyRef`, or `secretKeyRef` with credentials), so that a change of the values changes proxy-config and
    no template. NODE_USE_ENV_PROXY is the constant "1" and stays a literal. The namespace must have proxy-config
    rendered with `injection.transformEnv: reference` (which holds every key named here, whatever the selection)."""
    ref = "secretKeyRef" if settings.has_credentials else "configMapKeyRef"
    keyed = _reference_keys(values)
    return [
        {"name": name, "value": key}
        if name == NODE_USE_ENV_PROXY
        else {"name": name, "valueFrom": {ref: {"name": CONFIG_NAME, "key": key}}}
        for name, key in env_pairs(keyed)
    ]


def reads_proxy_config(container: Mapping[str, Any]) -> bool:
    """The container's `envFrom` names `proxy-config` (a ConfigMap or a Secret): it has the six already."""
    sources = container.get("envFrom") or []
    if not isinstance(sources, list):
        return False
    for source in sources:
        if not isinstance(source, Mapping):
            continue
        for ref in ("configMapRef", "secretRef"):
            target = source.get(ref)
            if isinstance(target, Mapping) and target.get("name") == CONFIG_NAME:
                return True
    return False


def _env_names(container: Mapping[str, Any]) -> set[Any]:
    env = container.get("env") or []
    return {e.get("name") for e in env if isinstance(e, Mapping)} if isinstance(env, list) else set()


def sets_proxy_names(container: Mapping[str, Any]) -> bool:
    """The container sets one of the six itself (in `env`, even empty, e.g. to opt out) or reads `proxy-config`."""
    return bool(_env_names(container) & set(ENV_NAMES)) or reads_proxy_config(container)


def additions(container: Mapping[str, Any], entries: Sequence[Obj]) -> list[Obj]:
    """The entries of `entries` one container gets: none when it sets a proxy name itself (the six are one group),
    else each entry whose name it does not set, so nothing the container set is ever replaced."""
    if sets_proxy_names(container):
        return []
    names = _env_names(container)
    return [entry for entry in entries if entry["name"] not in names]


def _env_part(digest: Any) -> Any:
    """The env part of a values digest (`<env>-<trust>`), a string or an Output: what `proxy-config` holds. Not the
    trust part: a CA rotation must not write `proxy-config`, whose last data write tells which pods read it before
    (live/stale.py)."""
    if isinstance(digest, str):
        return digest.partition("-")[0]
    return digest.apply(lambda d: str(d).partition("-")[0])


def proxy_config_object(settings: Settings, namespace: str, values: ProxyValues) -> Obj:
    """The `proxy-config` of one namespace, for `envFrom`; a Secret when the URLs carry credentials.

    It holds the env of the namespace's runtime selection (`runtimes.namespaces`, else the
    cluster-wide flags) and `NO_PROXY_PYTHON`, whatever `values.selection` is; with
    `injection.transformEnv: reference` also `REFERENCE_KEYS`, what `pod_env_by_reference` reads for any
    selection. With `values.digest`, the annotation says which configuration it holds (its env part).
    """
    selected = values.select(settings.runtimes.for_namespace(namespace))
    data = dict(env_pairs(selected))
    if values.no_proxy_python is not None:
        data[NO_PROXY_PYTHON] = values.no_proxy_python
    if settings.injection.transform_env == REFERENCE:
        data[REFERENCE_NO_PROXY] = values.no_proxy
        if values.java_options is not None:
            data[REFERENCE_JAVA] = values.java_options
        if values.java_trust_options is not None:
            data[REFERENCE_JAVA_TRUSTED] = values.java_trust_options
    metadata: Obj = {
        "name": CONFIG_NAME,
        "namespace": namespace,
        "labels": {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": "proxy-env"},
    }
    if values.digest is not None:
        metadata["annotations"] = {VALUES_ANNOTATION: _env_part(values.digest)}
    if settings.has_credentials:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "stringData": data}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def proxy_config_objects(settings: Settings, values: ProxyValues) -> list[Obj]:
    return [proxy_config_object(settings, ns, values) for ns in settings.proxy_config_namespaces]
