"""ClusterProxy for every Pulumi language: the component provider that `provider/__main__.py` serves.

TypeScript, YAML, Go (and other) programs add it with `pulumi package add <this repository>/provider`; the
schema (`provider/schema.json`) is inferred from the annotations below and from `provider_types.py`, which
is generated from the pydantic settings model, the one validator. The component is the Python `ClusterProxy`
itself: the same plan, the same objects, the same errors.
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects, and it
# knows typing.Optional (hence UP045 off here).
# ruff: noqa: UP045
import asyncio
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypedDict

import pulumi
from pulumi.errors import InputPropertiesError
from pulumi.provider import main as serve
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.provider.provider import ConstructResult
from pulumi.provider.server import ComponentInitError
from pydantic import BaseModel
from typing_extensions import NotRequired

from . import component, provider_types
from .discovery.network import ClusterNetwork
from .settings import NetworkValues, Settings, SettingsError, check_network, parse_settings

__all__ = ["PACKAGE", "ClusterProxy", "ClusterProxyArgs", "EnvVar", "serve_provider"]

PACKAGE = "proxy-component"


class ClusterProxyArgs(TypedDict):
    """The component's inputs: the settings, and the network of a cluster this program creates."""

    settings: NotRequired[pulumi.Input[provider_types.Settings]]
    """The settings, with the keys of the YAML file and the stack config (proxy, cluster, deployment, namespaces, injection, runtimes, capi, helmValuesSecrets). They decide which objects exist, so they must be known when the component is created."""

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

    def __init__(self, name: str, args: ClusterProxyArgs, opts: Optional[pulumi.ResourceOptions] = None) -> None:
        settings = settings_from_inputs(args.get("settings") or {})
        super().__init__(name, component.ClusterProxyArgs(settings=settings, network=network_from_inputs(args)), opts)
        # The Python component's per-profile dict and optional spec, as the Outputs the schema declares.
        state = vars(self)
        self.helm_values = pulumi.Output.all(**state["helm_values"])
        spec = state["kubeadm_config_spec"]
        self.kubeadm_config_spec = spec if spec is not None else pulumi.Output.from_input(None)


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


def settings_from_inputs(value: Any) -> dict[str, Any]:
    """The settings input as the YAML file spells it: values known now, keys in camelCase.

    The provider hands nested inputs over with snake_case names; a value another resource has not yet
    produced (e.g. in a preview) cannot decide which objects exist, and is named in the error.
    """
    known = _known(value, "settings")
    if not isinstance(known, Mapping):
        raise SettingsError([f"settings: {known!r} is not an object (expected e.g. {{namespaces: [default]}})"])
    return _camel(known, Settings)


def _known(value: Any, path: str) -> Any:
    if isinstance(value, pulumi.Output):
        # Construct deserializes each value another program sent into an Output whose one future (`_data`, the
        # value, whether it is known and secret: pulumi >= 3.230) is already resolved: read it now.
        data = typing.cast("asyncio.Future[Any]", value._data)
        if not (data.done() and data.result().is_known):
            raise SettingsError(
                [
                    f"{path}: is not known when the component is created (the settings decide which objects "
                    "exist: pass plain values or stack config, not another resource's outputs)"
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


class _Provider(ComponentProvider):
    """The component provider, reporting invalid settings as input errors: the message alone, no stack trace."""

    def construct(
        self,
        name: str,
        resource_type: str,
        inputs: pulumi.Inputs,
        options: Optional[pulumi.ResourceOptions] = None,
    ) -> ConstructResult:
        try:
            # The SDK maps the inputs by the schema and drops keys it does not know: a typo from an untyped program
            # (JavaScript, a cast in TypeScript) would vanish. Validate the settings as sent, first.
            parse_settings(settings_from_inputs(inputs.get("settings") or {}))
            check_network(network_from_known_inputs(inputs))
            return super().construct(name, resource_type, inputs, options)
        except SettingsError as exc:
            raise _input_error(exc) from None
        except ComponentInitError as exc:
            if isinstance(exc.inner, SettingsError):
                raise _input_error(exc.inner) from None
            raise


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
