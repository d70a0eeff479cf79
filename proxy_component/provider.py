"""ClusterProxy for every Pulumi language: the component provider that `provider/__main__.py` serves.

TypeScript, YAML, Go (and other) programs add it with `pulumi package add <this repository>/provider`; the
schema (`provider/schema.json`) is inferred from the annotations below and from `provider_types.py`, which
is generated from the pydantic settings model, the one validator. The component is the Python `ClusterProxy`
itself: the same plan, the same objects, the same errors. What takes arguments is a method (`METHODS`:
helmValuesFor, kustomization, containerEnv) that runs the Python one (`helm_values_for`, ...) on that component.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects, and it
# knows typing.Optional (hence UP045 off here).
# ruff: noqa: UP045
import asyncio
import functools
import json
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, TypedDict

import pulumi
from pulumi.errors import InputPropertiesError
from pulumi.provider import main as serve
from pulumi.provider.experimental.analyzer import PropertyDefinition
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.experimental.schema import ComplexType, Property, remove_none
from pulumi.provider.provider import CallResult, ConstructResult
from pulumi.provider.server import ComponentInitError
from pydantic import BaseModel
from typing_extensions import NotRequired

from . import component, provider_types
from .discovery.network import ClusterNetwork
from .render import plan_checks
from .render.helm import UnknownProfileError
from .settings import NetworkValues, Settings, SettingsError, check_network, parse_settings

__all__ = ["METHODS", "PACKAGE", "ClusterProxy", "ClusterProxyArgs", "EnvVar", "serve_provider"]

PACKAGE = "proxy-component"


class ClusterProxyArgs(TypedDict):
    """The component's inputs: the settings, and the network of a cluster this program creates."""

    settings: NotRequired[pulumi.Input[provider_types.Settings]]
    """The settings, with the keys of the YAML file and the stack config (proxy, cluster, deployment, namespaces, injection, runtimes, capi, helmValuesSecrets). They decide which objects exist, so they must be known when the component is created: plain values, or Outputs already known at preview (a StackReference's, whole or nested at any depth), never an output of a resource this program creates."""

    installation: NotRequired[pulumi.Input[provider_types.Settings]]
    """The installation layer, e.g. `stackRef.requireOutput("installation")` of the fleet's installation stack: `settings` go on top of it by the fleet's merge rules (lists joined, objects merged key by key, a value both set differently is an error naming both; the installation may not set `cluster`). Not with installationStack."""

    installation_stack: NotRequired[pulumi.Input[str]]
    """The installation stack whose `installation` output is the installation layer (`org/project/stack`, or a stack of this program's project), read when the component is created; the same merge as `installation`."""

    pod_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Pod CIDRs of the cluster, e.g. outputs of the cluster resource; added to cluster.podCidrs."""

    service_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Service CIDRs of the cluster; added to cluster.serviceCidrs."""

    node_cidrs: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """Node (VPC, subnet) CIDRs of the cluster; added to cluster.nodeCidrs."""

    api_server_hosts: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """API server host names or URLs (e.g. an EKS endpoint); added to cluster.apiServerHosts."""

    api_server_ips: NotRequired[pulumi.Input[Sequence[pulumi.Input[str]]]]
    """API server IP addresses; added to cluster.apiServerIps."""

    ip_family: NotRequired[pulumi.Input[str]]
    """The cluster's IP family (ipv4, ipv6 or dual) for the Service; cluster.ipFamily wins when set."""


class EnvVar:
    """One variable of the proxy env."""

    name: pulumi.Output[str]
    """The variable's name (HTTP_PROXY, no_proxy, ...)."""

    value: pulumi.Output[str]
    """Its value."""


# The types below that a pod spec takes as they are carry Kubernetes' own field names (configMap, mountPath, ...),
# so that the outputs drop into a container or a Pod unchanged; hence the camelCase attributes (N815 off there).


class SecretKeySelector:
    """A key of a Secret in the Pod's namespace."""

    name: pulumi.Output[str]
    """The Secret's name (proxy-config)."""

    key: pulumi.Output[str]
    """The key (HTTP_PROXY, ...)."""


class EnvVarSource:
    """Where a variable's value comes from."""

    secretKeyRef: pulumi.Output[SecretKeySelector]  # noqa: N815
    """The namespace's proxy-config Secret, for a proxy URL that carries credentials."""


class ContainerEnvVar:
    """One variable of a container's env: a value, or a reference to the proxy-config Secret (credentials)."""

    name: pulumi.Output[str]
    """The variable's name."""

    value: Optional[pulumi.Output[str]]
    """Its value, unless it comes from the Secret."""

    valueFrom: Optional[pulumi.Output[EnvVarSource]]  # noqa: N815
    """The Secret key holding the value (a proxy URL with credentials)."""


class ConfigMapVolumeSource:
    """A ConfigMap as a volume."""

    name: pulumi.Output[str]
    """The ConfigMap's name (proxy-trust)."""


class Volume:
    """The Pod's volume of the trust bundle: the ConfigMap proxy-trust of its namespace."""

    name: pulumi.Output[str]
    """The volume's name (proxy-trust)."""

    configMap: pulumi.Output[ConfigMapVolumeSource]  # noqa: N815
    """The ConfigMap it holds."""


class VolumeMount:
    """The container's read-only mount of the trust bundle."""

    name: pulumi.Output[str]
    """The volume's name (proxy-trust)."""

    mountPath: pulumi.Output[str]  # noqa: N815
    """Where the bundle is mounted (/etc/proxy-component/trust)."""

    readOnly: pulumi.Output[bool]  # noqa: N815
    """Always true."""


class TrustGroup:
    """What a container gets behind a TLS-inspecting proxy (proxy.upstream.trustedCa), in a namespace with proxy-trust."""

    env: pulumi.Output[list[EnvVar]]
    """SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE (the public roots and the corporate CA) and NODE_EXTRA_CA_CERTS (the corporate CA alone)."""

    volume: pulumi.Output[Volume]
    """For the Pod's volumes."""

    volume_mount: pulumi.Output[VolumeMount]
    """For the container's volumeMounts."""

    jdk_java_options: pulumi.Output[str]
    """JDK_JAVA_OPTIONS of a java container with the mount: the proxy and the truststore; empty when the JVM gets no proxy options (credentials, an https:// proxy)."""


class RuntimeEnv:
    """The env of a container per runtime, as the stack transform gives it to a workload annotated with that one runtime (outside a namespace with proxy-trust): the six variables and the runtime's own; with credentials the URLs are secretKeyRefs to the namespace's proxy-config Secret."""

    java: pulumi.Output[list[ContainerEnvVar]]
    """With JDK_JAVA_OPTIONS (when rendered)."""

    node: pulumi.Output[list[ContainerEnvVar]]
    """With NODE_USE_ENV_PROXY=1."""

    python: pulumi.Output[list[ContainerEnvVar]]
    """With the Python-safe NO_PROXY in both spellings."""


class HelmValuesForArgs(TypedDict):
    """The arguments of ClusterProxy.helmValuesFor."""

    profile: str
    """The profile (argo-cd, cert-manager, env, ...; see helmValues)."""

    runtimes: NotRequired[str]
    """The chart's runtimes, written as the annotation is ('java,node', or 'none'); default: the cluster-wide flags."""

    release: NotRequired[str]
    """The chart's Helm release name, from which the profile derives the in-cluster names its NO_PROXY adds (argo-cd); default: the name the chart's docs use."""


class HelmValuesForResult:
    """The result of ClusterProxy.helmValuesFor."""

    values: pulumi.Output[dict[str, Any]]
    """The profile's proxy values, to merge into the release's values; secret with credentials."""


class KustomizationArgs(TypedDict):
    """The arguments of ClusterProxy.kustomization."""

    kind: str
    """The workload's kind (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Pod)."""

    name: str
    """The workload's name."""

    container: NotRequired[str]
    """The container, by name (a strategic-merge patch); default: a JSON patch of the first container, whose env must exist."""

    runtimes: NotRequired[str]
    """The workload's runtimes, written as the annotation is ('java,node', or 'none'); default: the cluster-wide flags."""


class KustomizationResult:
    """The result of ClusterProxy.kustomization."""

    kustomization: pulumi.Output[dict[str, Any]]
    """A kustomization.yaml (apiVersion kustomize.config.k8s.io/v1beta1) whose patch adds the proxy env (and the trust group) to the workload."""


class ContainerEnvArgs(TypedDict):
    """The arguments of ClusterProxy.containerEnv."""

    namespace: NotRequired[str]
    """The workload's namespace; default: default."""

    runtimes: NotRequired[str]
    """The workload's runtimes, written as the annotation is ('java,node', or 'none'); default: the namespace's (runtimes.namespaces, else the cluster-wide flags)."""


class ContainerEnvResult:
    """The result of ClusterProxy.containerEnv: what the Python stack transform gives such a container."""

    env: pulumi.Output[list[ContainerEnvVar]]
    """The container's env: the six proxy variables, the runtimes' and, with proxy-trust in the namespace, the trust group's; with credentials the URLs are secretKeyRefs to the namespace's proxy-config Secret."""

    volume_mounts: pulumi.Output[list[VolumeMount]]
    """The container's volumeMounts: the trust bundle's, with proxy-trust in the namespace (else none)."""

    volumes: pulumi.Output[list[Volume]]
    """The Pod's volumes: the trust bundle, with proxy-trust in the namespace (else none)."""


class Metrics:
    """The node proxies' metrics (deployment.metrics.enabled): where each node serves them, and what watches them."""

    port: pulumi.Output[int]
    """The exporter's port on every node (deployment.metrics.port)."""

    path: pulumi.Output[str]
    """The path of the metrics (/metrics)."""

    pod_monitor: pulumi.Output[dict[str, Any]]
    """prometheus-operator's PodMonitor for the exporters."""

    prometheus_rule: pulumi.Output[dict[str, Any]]
    """prometheus-operator's PrometheusRule: the alerts, each with a runbook line."""

    grafana_dashboard: pulumi.Output[str]
    """The Grafana dashboard's JSON."""


class ClusterProxy(component.ClusterProxy):
    """The egress proxy (a tinyproxy DaemonSet and the Service http-proxy) and the proxy settings for every consumer."""

    no_proxy: pulumi.Output[str]
    """NO_PROXY as composed for the cluster (loopback, cluster domain, Service, pod and node ranges, API server, metadata, your entries)."""

    http_proxy: pulumi.Output[str]
    """The HTTP_PROXY pods use; secret when it carries credentials."""

    https_proxy: pulumi.Output[str]
    """The HTTPS_PROXY pods use; secret when it carries credentials."""

    proxy_url: pulumi.Output[str]
    """The in-cluster proxy's URL (http://http-proxy.kube-system.svc.<domain>:8888); secret with credentials."""

    env: pulumi.Output[list[EnvVar]]  # type: ignore[assignment]
    """The env for a container: the proxy variables in both spellings; secret with credentials."""

    helm_values: pulumi.Output[dict[str, Any]]  # type: ignore[assignment]
    """The proxy values of each Helm chart profile (argo-cd, cert-manager, ...), to merge into a release's values."""

    kubeadm_config_spec: pulumi.Output[Optional[dict[str, Any]]]  # type: ignore[assignment]
    """The kubeadm fragment for KubeadmControlPlane/KubeadmConfigTemplate, when capi.enabled."""

    no_proxy_python: pulumi.Output[str]
    """NO_PROXY without IPv6 CIDRs, on which Python clients (httpx) fail: what a python runtime's NO_PROXY and no_proxy carry."""

    jdk_java_options: pulumi.Output[str]
    """JDK_JAVA_OPTIONS for a JVM (the proxy and http.nonProxyHosts); empty when not rendered (a proxy with credentials or an https:// proxy)."""

    runtime_env: pulumi.Output[RuntimeEnv]  # type: ignore[assignment]
    """The env of a container per runtime (java, node, python), as the stack transform gives it; with credentials the URLs are secretKeyRefs to proxy-config."""

    trust: pulumi.Output[Optional[TrustGroup]]  # type: ignore[assignment]
    """With proxy.upstream.trustedCa: the trust group's variables, volume and mount, ready for a pod spec."""

    metrics: pulumi.Output[Optional[Metrics]]  # type: ignore[assignment]
    """With deployment.metrics.enabled: the exporter's port and path, the PodMonitor, the PrometheusRule (the alerts) and the Grafana dashboard, as render --format metrics prints them."""

    def __init__(self, name: str, args: ClusterProxyArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        # `construct` has merged the installation layer into `settings` already (`resolved_settings`).
        settings = settings_from_inputs(args.get("settings") or {})
        super().__init__(name, component.ClusterProxyArgs(settings=settings, network=network_from_inputs(args)), opts)
        # The Python component's per-profile dict and optional spec, as the Outputs the schema declares.
        state = vars(self)
        self.helm_values = pulumi.Output.all(**state["helm_values"])
        spec = state["kubeadm_config_spec"]
        self.kubeadm_config_spec = spec if spec is not None else pulumi.Output.from_input(None)
        _CONSTRUCTED.append(self)


# The components this provider process constructed, for their methods: the engine sends a method's Call to the
# provider that constructed the component, in the same deployment and after the Construct, so the method runs on
# the Python component itself (its settings, network Outputs and values), as `proxy.helm_values_for(...)` does.
_CONSTRUCTED: list[ClusterProxy] = []


@dataclass(frozen=True)
class _Method:
    """A method of ClusterProxy for other languages: its schema name, argument and result types, and what it runs."""

    name: str
    description: str
    args: type
    result: type
    run: Callable[..., pulumi.Output[dict[str, Any]]]

    @property
    def token(self) -> str:
        return f"{component.TYPE_TOKEN}/{self.name}"


METHODS = (
    _Method(
        "helmValuesFor",
        "One Helm profile's proxy values for a runtime selection and a release name (helm_values_for in Python).",
        HelmValuesForArgs,
        HelmValuesForResult,
        lambda proxy, **kw: proxy.helm_values_for(**kw).apply(lambda values: {"values": values}),
    ),
    _Method(
        "kustomization",
        "A Kustomization that adds the proxy env to one workload, for GitOps repositories (kustomization in Python).",
        KustomizationArgs,
        KustomizationResult,
        lambda proxy, **kw: proxy.kustomization(**kw).apply(lambda patch: {"kustomization": patch}),
    ),
    _Method(
        "containerEnv",
        "What the stack transform gives one container that sets none of the proxy or trust names, for a pod spec "
        "written by hand (container_env in Python).",
        ContainerEnvArgs,
        ContainerEnvResult,
        lambda proxy, **kw: proxy.container_env(**kw),
    ),
)


def network_from_inputs(args: ClusterProxyArgs) -> Optional[ClusterNetwork]:
    """The network Inputs as a ClusterNetwork, or None when the program passed none."""
    fields = ("pod_cidrs", "service_cidrs", "node_cidrs", "api_server_hosts", "api_server_ips", "ip_family")
    given: dict[str, Any] = {key: args[key] for key in fields if args.get(key) is not None}  # type: ignore[literal-required]
    if not given:
        return None
    return ClusterNetwork(**given, origin="network inputs")


_NETWORK_INPUTS = {
    "podCidrs": "pod_cidrs",
    "serviceCidrs": "service_cidrs",
    "nodeCidrs": "node_cidrs",
    "apiServerHosts": "api_server_hosts",
    "apiServerIps": "api_server_ips",
}


def network_from_known_inputs(inputs: Mapping[str, Any]) -> NetworkValues:
    """The network inputs already known (all of them in an update), to check before any object is registered.

    A value still unknown (another resource's output in a preview) is left out: the component checks it once known.
    """
    values: dict[str, list[Any]] = {}
    for key, name in _NETWORK_INPUTS.items():
        if inputs.get(key) is None:
            continue
        try:
            known = _known(inputs[key], key)
        except SettingsError:
            continue
        values[name] = [known] if isinstance(known, str) else list(known)
    return NetworkValues(
        origin="network inputs",
        pod_cidrs=values.get("pod_cidrs", []),
        service_cidrs=values.get("service_cidrs", []),
        node_cidrs=values.get("node_cidrs", []),
        api_server_hosts=values.get("api_server_hosts", []),
        api_server_ips=values.get("api_server_ips", []),
    )


def settings_from_inputs(value: Any, path: str = "settings") -> dict[str, Any]:
    """The settings input as the YAML file spells it: values known now, keys in camelCase.

    An Output (the whole value, or one at any depth) whose value is known is read as that value; the provider
    hands nested inputs over with snake_case names; a value another resource has not yet produced (e.g. in a
    preview) cannot decide which objects exist, and is named in the error.
    """
    known = _known(value, path)
    if not isinstance(known, Mapping):
        raise SettingsError(
            [
                f"{path}: a {type(known).__name__} is not an object (value hidden; expected e.g. {{namespaces: [default]}})"
            ]
        )
    return _camel(known, Settings)


_LAYER_INPUTS = ("settings", "installation", "installationStack")


def resolved_settings(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the component is made from: `settings` on top of the installation layer that `installation` or
    `installationStack` gives (the stack program's merge, `component.layered_settings`), every value known now."""
    settings = settings_from_inputs(inputs.get("settings") or {})
    installation = inputs.get("installation")
    inline = settings_from_inputs(installation, "installation") if installation is not None else None
    stack = inputs.get("installationStack")
    stack_name = _known(stack, "installationStack") if stack is not None else None
    return dict(component.layered_settings(settings, inline, stack_name or None))


def _known(value: Any, path: str) -> Any:
    if isinstance(value, pulumi.Output):
        # Construct deserializes each value another program sent into an Output whose one future (`_data`, the
        # value, whether it is known and secret: pulumi >= 3.230) is already resolved: read it now.
        data = typing.cast("asyncio.Future[Any]", value._data)
        if not (data.done() and data.result().is_known):
            raise SettingsError(
                [
                    f"{path}: is not known when the component is created (the settings decide which objects "
                    "exist, so a preview cannot wait for them): pass plain values, stack config or a "
                    "StackReference's output, which are known at preview, not an output of a resource this program "
                    "creates"
                ]
            )
        return _known(data.result().value, path)
    if isinstance(value, Mapping):
        return {key: _known(item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_known(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # every number arrives as a float: 30, not 30.0, is what an integer setting takes
    return value


def _camel(data: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """Rename a model's snake_case keys to their aliases; keys of free-form maps and unknown keys stay as given."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None:
            out[key] = value
            continue
        nested = _model_of(field.annotation)
        if nested is not None and isinstance(value, Mapping):
            value = _camel(value, nested)
        elif nested is not None and isinstance(value, list):
            value = [_camel(v, nested) if isinstance(v, Mapping) else v for v in value]
        out[field.alias or key] = value
    return out


def _model_of(annotation: Any) -> Optional[type[BaseModel]]:
    """The settings model a field holds (directly, optionally or as list items), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def check_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (merged with the installation layer) and the known network inputs as the component checks them,
    every problem in one SettingsError; the merged settings, as the YAML file spells them."""
    problems: list[str] = []
    gives_sources = any(inputs.get(key) is not None for key in ("podCidrs", "nodeCidrs"))
    settings: dict[str, Any] = {}
    try:
        settings = resolved_settings(inputs)
        parse_settings(settings, plan_checks(gives_sources))
    except SettingsError as exc:
        problems += exc.problems
    try:
        check_network(network_from_known_inputs(inputs))
    except SettingsError as exc:
        problems += exc.problems
    if problems:
        raise SettingsError(problems)
    return settings


class _Provider(ComponentProvider):
    """The component provider, reporting invalid settings as input errors: the message alone, no stack trace.

    The schema the SDK infers from the annotations has no methods: `__init__` adds ClusterProxy's (`METHODS`), their
    argument and result types analyzed as the component's are, and `call` runs them.
    """

    def __init__(self, components: list[type[pulumi.ComponentResource]], name: str, version: str) -> None:
        super().__init__(components, name, version=version)
        schema = json.loads(self.schema or "{}")
        self._methods: dict[str, tuple[_Method, dict[str, str], dict[str, PropertyDefinition], dict[str, str]]] = {}
        functions: dict[str, Any] = {}
        for method in METHODS:
            args, args_mapping = self.analyzer.analyze_type(method.args, is_component_output=False)
            result, result_mapping = self.analyzer.analyze_type(method.result, is_component_output=True)
            self._methods[method.token] = (method, args_mapping, result, result_mapping)
            functions[method.token] = {
                "description": method.description,
                "inputs": {
                    "properties": {"__self__": {"$ref": f"#/resources/{component.TYPE_TOKEN}"}, **_properties(args)},
                    "required": ["__self__", *_required(args)],
                },
                "outputs": {"properties": _properties(result), "required": _required(result)},
            }
        schema["resources"][component.TYPE_TOKEN]["methods"] = {m.name: m.token for m in METHODS}
        schema["functions"] = functions
        for type_name, type_def in self._type_defs.items():  # with the types only the methods use
            schema["types"][f"{name}:index:{type_name}"] = remove_none(ComplexType.from_definition(type_def).to_json())
        for language in ("nodejs", "python", "go", "csharp"):  # helmValuesFor returns the values, not {values: ...}
            schema["language"][language]["liftSingleValueMethodReturns"] = True
        self.schema = json.dumps(schema)

    def call(self, token: str, args: pulumi.Inputs) -> CallResult:
        found = self._methods.get(token)
        if found is None:
            raise Exception(f"unknown method {token}")  # the base class's words
        method, args_mapping, result, result_mapping = found
        try:
            proxy = _constructed(args.get("__self__"))
            given = {
                args_mapping[key]: _known(value, key)
                for key, value in args.items()
                if key in args_mapping and value is not None
            }
            values = method.run(proxy, **given)
        except SettingsError as exc:
            lines = (f"ClusterProxy.{method.name}: {problem}" for problem in exc.problems)
            raise InputPropertiesError("\n".join(lines), []) from None
        except (UnknownProfileError, ValueError) as exc:  # the Python method's own message, naming the argument
            raise InputPropertiesError(f"ClusterProxy.{method.name}: {exc}", []) from None
        outputs: dict[str, Any] = {}
        for key, prop in result.items():
            item = values.apply(functools.partial(_item, result_mapping[key]))
            type_def = self.get_type_definition(prop) if prop.ref else None
            outputs[key] = self.map_complex_output(item, type_def) if type_def is not None else item
        return CallResult(outputs)

    def construct(
        self,
        name: str,
        resource_type: str,
        inputs: pulumi.Inputs,
        options: Optional[pulumi.ResourceOptions] = None,
    ) -> ConstructResult:
        try:
            # The SDK maps the inputs by the schema and drops keys it does not know: a typo from an untyped program
            # (JavaScript, a cast in TypeScript) would vanish. Validate the settings as sent, first. It also maps an
            # object that arrives as an Output (a StackReference's output, whole or nested) to {}: hand it the
            # settings as the plain values they are known to be, merged with the installation layer.
            settings = check_inputs(inputs)
            mapped = {key: value for key, value in inputs.items() if key not in _LAYER_INPUTS}
            return super().construct(name, resource_type, {**mapped, "settings": settings}, options)
        except SettingsError as exc:
            raise _input_error(exc) from None
        except ComponentInitError as exc:
            if isinstance(exc.inner, SettingsError):
                raise _input_error(exc.inner) from None
            raise


def _properties(props: dict[str, PropertyDefinition]) -> dict[str, Any]:
    return {key: remove_none(Property.from_definition(prop).to_json()) for key, prop in props.items()}


def _required(props: dict[str, PropertyDefinition]) -> list[str]:
    return sorted(key for key, prop in props.items() if not prop.optional)


def _item(key: str, values: Mapping[str, Any]) -> Any:
    return values[key]


def _constructed(ref: Any) -> ClusterProxy:
    """The component a method's `__self__` names (its URN): one this process constructed in this deployment."""
    urn = _known(ref, "__self__")
    for proxy in reversed(_CONSTRUCTED):  # the latest (one deployment has each URN once; a test process has more)
        data = typing.cast("asyncio.Future[Any]", proxy.urn._data)
        if data.done() and data.result().value == urn:
            return proxy
    raise SettingsError([f"__self__: {urn!r} is no ClusterProxy this provider constructed in this deployment"])


def _input_error(exc: SettingsError) -> InputPropertiesError:
    """Invalid settings as the engine reports input errors: each problem's line, no stack trace.

    The message alone, with no per-property details: for each detail whose path names an input, the engine
    prints that input's value beside the reason (`property settings with value '{map[...]}' has a problem`),
    secrets in clear, the upstream password included. Each problem line already names its field.
    """
    return InputPropertiesError(str(exc), [])  # [], not None: the SDK builds the gRPC status only for a list


def plugin_version(version: str) -> str:
    """The package's PEP 440 version as the semver a Pulumi plugin and schema carry: 0.2.0.dev0 -> 0.2.0-dev.0."""
    return re.sub(r"\.?(dev|a|b|rc)(\d+)$", r"-\1.\2", version)


def serve_provider(version: str) -> None:
    """Serve ClusterProxy to the engine (what `provider/__main__.py` runs)."""
    serve(_Provider([ClusterProxy], PACKAGE, version=plugin_version(version)), sys.argv[1:])
