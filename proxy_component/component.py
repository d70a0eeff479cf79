"""ClusterProxy: the Pulumi component that turns settings (and a cluster's network Outputs) into resources.

The set of resources is decided from static settings only; values that come
from other resources (CIDRs of a cluster created in the same program) flow in
as Outputs and may be unknown at preview.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi
import pulumi_kubernetes as k8s

from .dataplane.config import config_generation, tinyproxy_conf
from .dataplane.firewall import firewall_rules
from .dataplane.lifecycle import restart_inputs
from .dataplane.metrics import grafana_dashboard, pod_monitor, prometheus_rule
from .dataplane.workload import ip_family_fields
from .discovery.network import ClusterNetwork
from .explain import preview_warnings
from .layers import CLUSTER, Layer, installation_layer, merge_layers
from .noproxy import NoProxy, NoProxyError
from .render import PlanInputs, Planned, node_values, plan, plan_checks
from .render.capi import kubeadm_config_spec
from .render.digest import values_digest
from .render.env import ProxyValues, env_vars, pod_env, workload_kind, workload_values
from .render.helm import PROFILES, UnknownProfileError, helm_values, profile_no_proxy
from .render.helm import merge_values as _merge_plain
from .render.kustomize import kustomization
from .render.runtimes import java_skip_reason
from .render.trust import bundle_in, trust_env_vars, trust_volume, trust_volume_mount, unreached
from .settings import (
    RUNTIMES,
    NetworkValues,
    Runtime,
    Settings,
    SettingsError,
    check_network,
    infer_ip_family,
    namespace_name,
    parse_runtimes,
    parse_settings,
    release_name,
)

__all__ = ["ClusterNetwork", "ClusterProxy", "ClusterProxyArgs", "merge_values"]

TYPE_TOKEN = "proxy-component:index:ClusterProxy"
T = TypeVar("T")

Obj = dict[str, Any]

_RESOURCE_CLASSES: dict[tuple[str, str], Any] = {
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
}
_ARG_NAMES = {
    "metadata": "metadata",
    "data": "data",
    "binaryData": "binary_data",
    "stringData": "string_data",
    "type": "type",
    "spec": "spec",
}


@dataclass(frozen=True, kw_only=True)
class ClusterProxyArgs:
    """The component's inputs: validated settings (or a mapping of them) and an optional run-time network."""

    settings: Settings | Mapping[str, Any]
    network: ClusterNetwork | None = None
    management_provider: pulumi.ProviderResource | None = None
    """Provider of the Cluster API management cluster, for the `capi` Secrets; default: the component's."""
    installation: Mapping[str, Any] | None = None
    """The installation layer (the fleet's shared upstream, CA, noProxy, ...) as settings, e.g. the `installation`
    output of an installation stack: `settings` go on top of it by the fleet's merge rules (docs/guides/fleet.md)."""
    installation_stack: str | None = None
    """An installation stack (`org/project/stack`, or a stack of this program's project) whose `installation`
    output is the installation layer; not with `installation`."""


def _child_opts(parent: pulumi.Resource, extra: pulumi.ResourceOptions | None = None) -> pulumi.ResourceOptions:
    """Options of every child: parented to the component (so it inherits `providers`)."""
    return pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=parent), extra)


class ClusterProxy(pulumi.ComponentResource):
    """The egress proxy (tinyproxy DaemonSet + Service) and the proxy settings for every consumer."""

    # The attributes are declared where __init__ sets them, not here: `provider.ClusterProxy` (for other
    # languages) subclasses this class, and the schema analyzer reads every class-level annotation as an output.

    def __init__(self, name: str, args: ClusterProxyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        if not isinstance(args.settings, Settings):
            _refuse_outputs(args.settings)
        if args.installation is not None:
            _refuse_outputs(args.installation, "installation")
        network = args.network
        given = layered_settings(args.settings, args.installation, args.installation_stack)
        settings = parse_settings(given, plan_checks(network is not None and network.gives_allow_sources))
        for line in settings.warnings:
            pulumi.log.warn(line, resource=self)
        self.settings: Settings = settings
        self.resources: dict[str, pulumi.CustomResource] = {}

        network_values = self._network_values(network)
        composed = self._compose(settings, network_values)
        no_proxy = composed.apply(lambda c: self._report(settings, c[0]))
        secret = settings.has_credentials
        self.http_proxy: pulumi.Output[str] = _maybe_secret(settings.http_proxy, secret)
        self.https_proxy: pulumi.Output[str] = _maybe_secret(settings.https_proxy, secret)
        self.no_proxy: pulumi.Output[str] = no_proxy
        self.proxy_url: pulumi.Output[str] = (
            pulumi.Output.from_input(settings.in_cluster_url) if settings.deployment.enabled else self.http_proxy
        )
        values = self._values(settings, composed.apply(lambda c: c[0]), no_proxy)
        values = dataclasses.replace(values, digest=self._digest(settings, values))
        self.no_proxy_python: pulumi.Output[str] = pulumi.Output.from_input(values.no_proxy_python)
        self.jdk_java_options: pulumi.Output[str] = pulumi.Output.from_input(values.java_options or "")
        self.workload_values: ProxyValues = values
        env: pulumi.Output[Any] = pulumi.Output.from_input(env_vars(values))
        self.env: pulumi.Output[list[dict[str, str]]] = pulumi.Output.secret(env) if secret else env
        # As the transform gives it: with credentials the URLs are secretKeyRefs to proxy-config, so the env can go
        # into a Deployment (in a namespace with that Secret) without putting the credentials in its spec.
        self.runtime_env: pulumi.Output[dict[str, list[dict[str, Any]]]] = pulumi.Output.from_input(
            {runtime: pod_env(settings, values.select({runtime})) for runtime in RUNTIMES}
        )
        self.trust: pulumi.Output[dict[str, Any]] | None = self._trust(settings, values)

        conf: pulumi.Output[str] = composed.apply(lambda c: tinyproxy_conf(settings, c[1]))
        if settings.proxy.upstream is not None and settings.proxy.upstream.credentials is not None:
            conf = pulumi.Output.secret(conf)
        firewall = composed.apply(lambda c: c[2])
        # Neither is derived from a credential: what cannot be reloaded (the port, the kernel rules), and the
        # digest of the config with the credentials left out.
        restart = firewall.apply(lambda text: restart_inputs(settings, text))
        generation = composed.apply(lambda c: config_generation(settings, c[1]))

        def profile_values(profile: str, release: str | None = None) -> ProxyValues:
            """One Helm profile's values: the cluster's NO_PROXY plus the chart's own names for the release (None:
            the chart docs' name), composed once known."""
            if not PROFILES[profile].names(release, settings.cluster.dns_domain):
                return values  # the same NO_PROXY, composed (and reported) once
            if network_values is None:
                own = workload_values(
                    settings,
                    profile_no_proxy(settings, profile, release=release),
                    self.http_proxy,
                    self.https_proxy,
                    settings.runtimes.cluster_wide,
                )
            else:
                composed_profile = network_values.apply(lambda v: profile_no_proxy(settings, profile, v, release))
                own = self._values(settings, composed_profile, composed_profile.apply(str))
            return dataclasses.replace(own, digest=values.digest)  # the cluster's digest: one value to compare with

        inputs = PlanInputs(
            values=values,
            nodes=node_values(settings, no_proxy),
            conf=conf,
            restart=restart,
            text=lambda build, v: _plain(v).apply(build),
            ip_fields=self._ip_fields(settings, network, network_values) if settings.deployment.enabled else None,
            helm_values=profile_values,
            firewall=firewall,
            generation=generation,
            owner=stack_identity(),
        )
        for planned in plan(settings, inputs):
            self.resources[planned.key] = self._register(name, planned, args.management_provider)

        self.helm_values: dict[str, pulumi.Output[dict[str, Any]]] = {
            profile: _maybe_secret(helm_values(profile, profile_values(profile)), secret) for profile in PROFILES
        }
        self._profile_values = profile_values
        self.kubeadm_config_spec: pulumi.Output[dict[str, Any]] | None = self._capi(settings, no_proxy)
        self.metrics: pulumi.Output[dict[str, Any]] | None = self._metrics(settings)
        self.register_outputs(
            {
                "no_proxy": self.no_proxy,
                "http_proxy": self.http_proxy,
                "https_proxy": self.https_proxy,
                "proxy_url": self.proxy_url,
                "env": self.env,
                "no_proxy_python": self.no_proxy_python,
                "jdk_java_options": self.jdk_java_options,
                "runtime_env": self.runtime_env,
                "trust": self.trust,
                "helm_values": self.helm_values,
                "kubeadm_config_spec": self.kubeadm_config_spec,
                "metrics": self.metrics,
            }
        )

    @staticmethod
    def _metrics(settings: Settings) -> pulumi.Output[dict[str, Any]] | None:
        """With deployment.metrics.enabled: the exporter's port and path, and the PodMonitor, the PrometheusRule and
        the Grafana dashboard (its JSON), for a cluster whose monitoring is managed elsewhere; as
        `render --format metrics` prints them. Nothing in them derives from a credential."""
        m = settings.deployment.metrics
        if not (settings.deployment.enabled and m.enabled):
            return None
        return pulumi.Output.from_input(
            {
                "port": m.port,
                "path": "/metrics",
                "pod_monitor": pod_monitor(settings),
                "prometheus_rule": prometheus_rule(settings),
                "grafana_dashboard": grafana_dashboard(settings),
            }
        )

    def _values(
        self, settings: Settings, composed: pulumi.Output[NoProxy], no_proxy: pulumi.Output[str]
    ) -> ProxyValues:
        """The workload values from a composed NO_PROXY Output, for the cluster-wide runtime selection.

        Whether JDK_JAVA_OPTIONS is rendered depends on the settings alone, so it is known before the network.
        """
        plain = composed.apply(lambda c: workload_values(settings, c))
        java = None if java_skip_reason(settings.http_proxy, settings.https_proxy) else plain.apply(_java_options)
        trusted = None if java is None or settings.trusted_ca is None else plain.apply(_java_trust_options)
        return ProxyValues(
            self.http_proxy,
            self.https_proxy,
            no_proxy,
            no_proxy_python=plain.apply(lambda v: v.no_proxy_python),
            java_options=java,
            selection=settings.runtimes.cluster_wide,
            java_trust_options=trusted,
            trust=settings.trusted_ca is not None,
        )

    @staticmethod
    def _digest(settings: Settings, values: ProxyValues) -> pulumi.Output[str]:
        """The values' digest once they are known (at preview too, when the settings alone make them); never secret:
        the credentials are left out of what it digests."""
        digest = _plain(values).apply(lambda v: values_digest(v, settings.trusted_ca))
        return pulumi.Output.unsecret(digest)

    def helm_values_for(
        self, profile: str, runtimes: str | None = None, release: str | None = None
    ) -> pulumi.Output[dict[str, Any]]:
        """One profile's values for a runtime selection written as the annotation is (``java,node``, ``none``;
        default: the cluster-wide flags) and a Helm release name (default: the one the chart's docs use), from
        which the profile derives the chart's in-cluster names (argo-cd)."""
        if profile not in PROFILES:
            raise UnknownProfileError(profile)
        selection = self.settings.runtimes.cluster_wide if runtimes is None else parse_runtimes(runtimes, "runtimes")
        if release is not None:
            try:
                release_name(release)
            except ValueError as exc:
                raise ValueError(f"release: {exc}") from None
        values = helm_values(profile, self._profile_values(profile, release).select(selection))
        return _maybe_secret(values, self.settings.has_credentials)

    def kustomization(
        self, *, kind: str, name: str, container: str | None = None, runtimes: str | None = None
    ) -> pulumi.Output[dict[str, Any]]:
        """A Kustomization that adds the proxy env to one workload (JSON patch, or by container name), for GitOps repos.

        `runtimes` is the workload's selection, as the annotation writes it; default: the cluster-wide flags.
        """
        workload_kind(kind)  # a bad kind fails here, naming the accepted ones, not later inside an Output
        selection = self.settings.runtimes.cluster_wide if runtimes is None else parse_runtimes(runtimes, "runtimes")
        values = self.workload_values.select(selection)
        patch = _plain(values).apply(
            lambda v: kustomization(self.settings, v, kind=kind, name=name, container=container)
        )
        return patch  # with credentials the env reads secretKeyRefs: the patch itself holds none

    def container_env(self, namespace: str = "default", runtimes: str | None = None) -> pulumi.Output[dict[str, Any]]:
        """What the stack transform gives one container that sets none of the names, in a workload of `namespace`
        whose runtimes are `runtimes` (written as the annotation is; default: the namespace's): ``env``, and with
        `proxy-trust` in the namespace ``volume_mounts`` for the container and ``volumes`` for its Pod (else empty).

        For a pod spec written by hand, e.g. in a program that cannot run the transform. Asking is opting in:
        `injection.excludeNamespaces` and the opt-out annotation, which keep the transform away, do not apply. With
        credentials the URLs are `secretKeyRef`s to the namespace's `proxy-config` Secret, so the namespace must be
        one that has it.
        """
        settings = self.settings
        try:
            namespace_name(namespace)
        except ValueError as exc:
            raise ValueError(f"namespace: {exc}") from None
        if settings.has_credentials and namespace not in settings.proxy_config_namespaces:
            listed = ", ".join(settings.proxy_config_namespaces) or "none"
            raise ValueError(
                f"namespace: {namespace!r} has no proxy-config Secret, which the env reads the proxy URLs (they "
                f"carry credentials) from (expected one of the namespaces that have it: {listed}; list it in "
                "namespaces)"
            )
        selection = (
            settings.runtimes.for_namespace(namespace) if runtimes is None else parse_runtimes(runtimes, "runtimes")
        )
        trust = bundle_in(settings, namespace)
        values = self.workload_values.select(selection)
        values = values.trusted() if trust else values
        if settings.has_credentials:  # the URLs become secretKeyRefs: the result holds no credential, and is no secret
            values = dataclasses.replace(values, http_proxy="", https_proxy="")

        def build(v: ProxyValues) -> dict[str, Any]:
            return {
                "env": [*pod_env(settings, v), *(trust_env_vars() if trust else [])],
                "volume_mounts": [trust_volume_mount()] if trust else [],
                "volumes": [trust_volume(settings)] if trust else [],
            }

        return _plain(values).apply(build)

    @staticmethod
    def _trust(settings: Settings, values: ProxyValues) -> pulumi.Output[dict[str, Any]] | None:
        """The trust group of a container, ready for a pod spec (with a trusted CA): the variables, the mount, the
        Pod's volume, and JDK_JAVA_OPTIONS with the truststore ("" when the JVM gets no proxy options)."""
        if settings.trusted_ca is None:
            return None
        return pulumi.Output.from_input(
            {
                "env": trust_env_vars(),
                "volume": trust_volume(settings),
                "volume_mount": trust_volume_mount(),
                "jdk_java_options": values.java_trust_options or "",
            }
        )

    @staticmethod
    def _capi(settings: Settings, no_proxy: pulumi.Output[str]) -> pulumi.Output[dict[str, Any]] | None:
        """The kubeadm fragment for the cluster's KubeadmControlPlane/KubeadmConfigTemplate, as an output."""
        if not settings.capi.enabled:
            return None
        # Never holds credentials: the settings refuse exportToKubeadm with a credentialed node proxy.
        return _plain(node_values(settings, no_proxy)).apply(lambda v: kubeadm_config_spec(settings, v))

    @staticmethod
    def _ip_fields(
        settings: Settings, network: ClusterNetwork | None, network_values: pulumi.Output[NetworkValues] | None
    ) -> dict[str, Any] | None:
        """The Service's IP families from the discovered network, unless `cluster.ipFamily` is set explicitly.

        The network's own `ip_family` wins; otherwise the family of its service
        and pod ranges (with the settings' own), else of its node ranges.
        """
        if settings.cluster.ip_family is not None or network is None or network_values is None:
            return None
        where = f"{network.origins.get('ip_family', network.origin)}.ipFamily"
        c = settings.cluster

        def fields(resolved: list[Any]) -> dict[str, Any]:
            discovered, values = resolved
            if discovered is None:
                ranges = [*c.service_cidrs, *c.pod_cidrs, *values.service_cidrs, *values.pod_cidrs]
                discovered = infer_ip_family(ranges, [*c.node_cidrs, *values.node_cidrs])
            try:
                return ip_family_fields(discovered)
            except ValueError as exc:
                raise SettingsError([f"{where}: {exc}"]) from None

        family = pulumi.Output.all(network.ip_family, network_values).apply(fields)
        return {
            "ipFamilyPolicy": family.apply(lambda f: f["ipFamilyPolicy"]),
            "ipFamilies": family.apply(lambda f: f.get("ipFamilies")),
        }

    def _report(self, settings: Settings, composed: NoProxy) -> str:
        """Say in the preview which client fails which destination class, and what to do; return the value."""
        for warning in preview_warnings(settings, composed):
            pulumi.log.warn(f"NO_PROXY: {warning}", resource=self)
        skipped = java_skip_reason(settings.http_proxy, settings.https_proxy)
        if skipped:
            pulumi.log.warn(f"JDK_JAVA_OPTIONS: not rendered, so JVMs get no proxy: {skipped}", resource=self)
        lost = unreached(settings)
        if lost:
            pulumi.log.warn(lost, resource=self)
        return str(composed)

    def _network_values(self, network: ClusterNetwork | None) -> pulumi.Output[NetworkValues] | None:
        """The network's values once known, checked as the settings are: the one Output every use reads.

        A bad network value (a CIDR computed from config or another resource) is known only then: it fails the
        program with the same field-naming lines as a literal one, with no trace.
        """
        if network is None:
            return None

        def checked(values: NetworkValues) -> NetworkValues:
            try:
                check_network(values)
                settings = self.settings
                settings.no_proxy(values)
                settings.allowed_sources(values)
                settings.cluster_destinations(values)
            except (SettingsError, NoProxyError) as exc:
                # Not a ValueError: the SDK would wrap that in "While processing input ..." with the Output's repr.
                raise pulumi.RunError(str(exc)) from None
            return values

        return network.values().apply(checked)

    @staticmethod
    def _compose(
        settings: Settings, network_values: pulumi.Output[NetworkValues] | None
    ) -> pulumi.Output[tuple[NoProxy, list[str], str]]:
        """NO_PROXY, tinyproxy's Allow list and its firewall, from the settings plus the network's values once known."""

        def compose(values: NetworkValues | None) -> tuple[NoProxy, list[str], str]:
            return (settings.no_proxy(values), settings.allowed_sources(values), firewall_rules(settings, values))

        if network_values is None:
            return pulumi.Output.from_input(compose(None))
        return network_values.apply(compose)

    def _register(
        self, name: str, planned: Planned, management: pulumi.ProviderResource | None
    ) -> pulumi.CustomResource:
        """Register one planned object: a typed resource for core kinds, a CustomResource (e.g. Kyverno's) otherwise."""
        obj = planned.obj
        extra = pulumi.ResourceOptions(
            depends_on=[self.resources[key] for key in planned.depends_on] or None,
            replace_on_changes=list(planned.replace_on_changes) or None,
            ignore_changes=list(planned.ignore_changes) or None,
            delete_before_replace=True if planned.replace_on_changes else None,
            provider=management if planned.cluster == "management" and management is not None else None,
        )
        logical_name = f"{name}{planned.suffix}"
        resource: pulumi.CustomResource
        cls = _RESOURCE_CLASSES.get((obj["apiVersion"], obj["kind"]))
        if cls is None:
            rest = {key: value for key, value in obj.items() if key not in ("apiVersion", "kind", "metadata")}
            resource = k8s.apiextensions.CustomResource(
                logical_name,
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                metadata=obj["metadata"],
                opts=_child_opts(self, extra),
                **rest,
            )
            return resource
        kwargs = {_ARG_NAMES[key]: value for key, value in obj.items() if key not in ("apiVersion", "kind")}
        resource = cls(logical_name, opts=_child_opts(self, extra), **kwargs)
        return resource


def merge_values(user: pulumi.Input[Mapping[str, Any]], proxy: pulumi.Input[Mapping[str, Any]]) -> pulumi.Output[Any]:
    """Your Helm values with the proxy's merged in (`proxy.helm_values[profile]` is an Output); never clobbers yours.

    An Output, secret when either side is: pass it to `helm.v3.Release(values=...)` or `helm.v4.Chart(values=...)`.
    """
    return pulumi.Output.all(user, proxy).apply(lambda both: _merge_plain(both[0], both[1]))


CLUSTER_SOURCE = "ClusterProxy settings"
"""The cluster layer's source in ClusterProxy's merge errors (`set by the installation (stack fleet) and by this
cluster (ClusterProxy settings)`)."""


def layered_settings(
    settings: Settings | Mapping[str, Any], installation: Any = None, installation_stack: str | None = None
) -> Settings | Mapping[str, Any]:
    """`settings` on top of the installation layer that `installation` or `installation_stack` gives, by the rules
    of `layers` (the stack program's, and ClusterProxy's from every language); `settings` alone without either."""
    layer = installation_layer(installation, installation_stack or None, read_stack_outputs, namespace=None)
    if layer is None:
        return settings
    if isinstance(settings, Settings):
        raise SettingsError(
            [
                "settings: a Settings object cannot be merged with the installation layer (pass the settings as a "
                "mapping, with the YAML file's keys)"
            ]
        )
    return merge_layers(layer, Layer(CLUSTER, CLUSTER_SOURCE, settings)).data


def stack_identity(name: str | None = None) -> str:
    """`org/project/stack` of this program's stack (or of `name`, a stack of this project, or already qualified):
    the objects' owner annotation, and what a stack reference reads."""
    name = pulumi.get_stack() if name is None else name
    if "/" in name:
        return name
    organization = pulumi.get_organization() or "organization"  # what a self-managed backend calls it
    return f"{organization}/{pulumi.get_project()}/{name}"


def read_stack_outputs(name: str) -> Any:
    """Another stack's outputs, secrets decrypted, through the engine's own stack-reference read (the invoke that
    StackReference.get_output_details makes): known now, so that they can decide which objects exist, and not
    recorded in this stack's state. A bare stack name is one of this program's project."""
    qualified = stack_identity(name)
    result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": qualified})
    if result.value is None:
        return None
    return result.value.get("outputs")


def _refuse_outputs(data: Any, path: str = "") -> None:
    """Settings decide which resources exist, so they must be known now: name any Output with what to do instead."""
    problems: list[str] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, pulumi.Output):
            hint = (
                "read the secret as a string, e.g. pulumi.Config().require('proxyPassword') instead of "
                "require_secret: the component keeps credentials in Secrets and makes every output that carries "
                "them secret"
                if "password" in where.lower() or "upstream" in where.lower()
                else "pass the plain value you gave the resource (e.g. the Namespace's metadata.name string) and "
                "order with depends_on; the set of objects cannot wait for an Output"
            )
            problems.append(f"{where or 'settings'}: is a pulumi.Output, which settings cannot take ({hint})")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{where}.{key}" if where else str(key))
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")

    walk(data, path)
    if problems:
        raise SettingsError(problems)


def _java_options(values: ProxyValues) -> Any:
    return values.java_options


def _java_trust_options(values: ProxyValues) -> Any:
    return values.java_trust_options


def _plain(values: ProxyValues) -> pulumi.Output[ProxyValues]:
    """The values resolved together, for builders that write them into text."""
    selection: frozenset[Runtime] = values.selection

    def build(v: list[Any]) -> ProxyValues:
        return ProxyValues(
            v[0], v[1], v[2], no_proxy_python=v[3], java_options=v[4], selection=selection, java_trust_options=v[5],
            trust=values.trust, digest=v[6],
        )  # fmt: skip

    return pulumi.Output.all(
        values.http_proxy,
        values.https_proxy,
        values.no_proxy,
        values.no_proxy_python,
        values.java_options,
        values.java_trust_options,
        values.digest,
    ).apply(build)


def _maybe_secret(value: T, secret: bool) -> pulumi.Output[T]:
    """The value as an Output, secret when it carries credentials."""
    output: pulumi.Output[T] = pulumi.Output.from_input(value)
    return pulumi.Output.secret(output) if secret else output
