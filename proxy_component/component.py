"""ClusterProxy: the Pulumi component that turns settings (and a cluster's network Outputs) into resources.

The set of resources is decided from static settings only; values that come
from other resources (CIDRs of a cluster created in the same program) flow in
as Outputs and may be unknown at preview.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi
import pulumi_kubernetes as k8s

from .clients import compat_notes
from .discovery.network import ClusterNetwork
from .noproxy import NoProxy
from .render import check_allow_sources, check_unique, node_values, proxy_objects
from .render.capi import (
    TKG_ADDONS,
    cluster_values_secret,
    cluster_values_yaml,
    kubeadm_config_spec,
    systemd_dropin,
    systemd_proxy_secret,
    tkg_addon_secrets,
    tkg_addon_values,
)
from .render.env import ProxyValues, env_vars, proxy_config_object
from .render.helm import PROFILES, check_values_secrets, helm_values, values_secret, values_secret_name, values_yaml
from .render.kustomize import kustomization
from .render.kyverno import cluster_policy
from .render.proxy import config_digest, ip_family_fields, tinyproxy_conf
from .settings import Settings, SettingsError, infer_ip_family, parse_settings

__all__ = ["ClusterNetwork", "ClusterProxy", "ClusterProxyArgs"]

TYPE_TOKEN = "proxy-component:index:ClusterProxy"
T = TypeVar("T")

Obj = dict[str, Any]

_RESOURCE_CLASSES: dict[tuple[str, str], Any] = {
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apps/v1", "DaemonSet"): k8s.apps.v1.DaemonSet,
}
_ARG_NAMES = {"metadata": "metadata", "data": "data", "stringData": "string_data", "type": "type", "spec": "spec"}


@dataclass(frozen=True, kw_only=True)
class ClusterProxyArgs:
    """The component's inputs: validated settings (or a mapping of them) and an optional run-time network."""

    settings: Settings | Mapping[str, Any]
    network: ClusterNetwork | None = None
    management_provider: pulumi.ProviderResource | None = None
    """Provider of the Cluster API management cluster, for the `capi` Secrets; default: the component's."""


def _child_opts(parent: pulumi.Resource, extra: pulumi.ResourceOptions | None = None) -> pulumi.ResourceOptions:
    """Options of every child: parented to the component (so it inherits `providers`)."""
    return pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=parent), extra)


class ClusterProxy(pulumi.ComponentResource):
    """The egress proxy (tinyproxy DaemonSet + Service) and the proxy settings for every consumer."""

    no_proxy: pulumi.Output[str]
    http_proxy: pulumi.Output[str]
    https_proxy: pulumi.Output[str]
    proxy_url: pulumi.Output[str]
    env: pulumi.Output[list[dict[str, str]]]
    helm_values: dict[str, pulumi.Output[dict[str, Any]]]
    kubeadm_config_spec: pulumi.Output[dict[str, Any]] | None
    settings: Settings
    resources: dict[str, pulumi.CustomResource]

    def __init__(self, name: str, args: ClusterProxyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        settings = parse_settings(args.settings)
        network = args.network
        check_allow_sources(settings, network is not None and network.gives_allow_sources)
        check_values_secrets(settings)
        self.settings = settings
        self.resources = {}
        self._objects: list[Obj] = []

        composed = self._compose(settings, network)
        no_proxy = composed.apply(lambda c: self._report(c[0]))
        secret = settings.has_credentials
        self.http_proxy = _maybe_secret(settings.http_proxy, secret)
        self.https_proxy = _maybe_secret(settings.https_proxy, secret)
        self.no_proxy = no_proxy
        self.proxy_url = (
            pulumi.Output.from_input(settings.in_cluster_url) if settings.deployment.enabled else self.http_proxy
        )
        values = ProxyValues(self.http_proxy, self.https_proxy, no_proxy)
        env: pulumi.Output[Any] = pulumi.Output.from_input(env_vars(values))
        self.env = pulumi.Output.secret(env) if secret else env

        if settings.deployment.enabled:
            conf = composed.apply(lambda c: tinyproxy_conf(settings, c[1]))
            if settings.proxy.upstream is not None and settings.proxy.upstream.credentials is not None:
                conf = pulumi.Output.secret(conf)
            digest = pulumi.Output.unsecret(conf.apply(lambda text: config_digest(settings, text)))
            config, daemonset, service = proxy_objects(settings, conf, digest, self._ip_fields(settings, network))
            self.resources["config"] = self._create(f"{name}-tinyproxy-config", config)
            depends = pulumi.ResourceOptions(depends_on=[self.resources["config"]])
            self.resources["daemonset"] = self._create(f"{name}-tinyproxy", daemonset, depends)
            self.resources["service"] = self._create(f"{name}-service", service)
        for namespace in settings.proxy_config_namespaces:
            obj = proxy_config_object(settings, namespace, values)
            self.resources[f"proxy-config/{namespace}"] = self._create(f"{name}-proxy-config-{namespace}", obj)
        if settings.injection.kyverno:
            self.resources["kyverno-policy"] = self._create(f"{name}-kyverno-policy", cluster_policy(settings, values))

        self.helm_values = {profile: _maybe_secret(helm_values(profile, values), secret) for profile in PROFILES}
        resolved = _plain(values)
        for spec in settings.helm_values_secrets:
            text = resolved.apply(functools.partial(values_yaml, spec.profile))
            obj = values_secret(spec, text)
            key = f"helm-values/{spec.namespace}/{values_secret_name(spec)}"
            self.resources[key] = self._create(f"{name}-helm-values-{spec.namespace}-{values_secret_name(spec)}", obj)

        self.kubeadm_config_spec = self._capi(name, settings, no_proxy, args.management_provider)
        self.register_outputs(
            {
                "no_proxy": self.no_proxy,
                "http_proxy": self.http_proxy,
                "https_proxy": self.https_proxy,
                "proxy_url": self.proxy_url,
                "env": self.env,
                "helm_values": self.helm_values,
                "kubeadm_config_spec": self.kubeadm_config_spec,
            }
        )

    def kustomization(self, *, kind: str, name: str, container: str | None = None) -> pulumi.Output[dict[str, Any]]:
        """A Kustomization that adds the proxy env to one workload (JSON patch, or by container name), for GitOps repos."""
        values = ProxyValues(self.http_proxy, self.https_proxy, self.no_proxy)
        patch = _plain(values).apply(
            lambda v: kustomization(self.settings, v, kind=kind, name=name, container=container)
        )
        return patch  # with credentials the env reads secretKeyRefs: the patch itself holds none

    def _capi(
        self,
        name: str,
        settings: Settings,
        no_proxy: pulumi.Output[str],
        provider: pulumi.ProviderResource | None,
    ) -> pulumi.Output[dict[str, Any]] | None:
        """The Cluster API Secrets in the management cluster, and the kubeadm fragment as an output."""
        if not settings.capi.enabled:
            return None
        nodes = node_values(settings, no_proxy)
        plain = _plain(nodes)
        opts = pulumi.ResourceOptions(provider=provider) if provider is not None else None
        dropin = plain.apply(systemd_dropin)
        self.resources["capi/systemd-proxy"] = self._create(
            f"{name}-systemd-proxy", systemd_proxy_secret(settings, dropin), opts
        )
        self.resources["capi/cluster-values"] = self._create(
            f"{name}-cluster-values", cluster_values_secret(settings, plain.apply(cluster_values_yaml)), opts
        )
        if settings.capi.tkg_addons:
            texts = {addon: plain.apply(functools.partial(tkg_addon_values, addon)) for addon in TKG_ADDONS}
            for obj in tkg_addon_secrets(settings, texts):
                self.resources[f"capi/{obj['metadata']['name']}"] = self._create(
                    f"{name}-{obj['metadata']['name']}", obj, opts
                )
        # Never holds credentials: the settings refuse exportToKubeadm with a credentialed node proxy.
        return plain.apply(lambda v: kubeadm_config_spec(settings, v))

    @staticmethod
    def _ip_fields(settings: Settings, network: ClusterNetwork | None) -> dict[str, Any] | None:
        """The Service's IP families from the discovered network, unless `cluster.ipFamily` is set explicitly.

        The network's own `ip_family` wins; otherwise the family of its service
        and pod ranges (with the settings' own), else of its node ranges.
        """
        if settings.cluster.ip_family is not None or network is None:
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

        family = pulumi.Output.all(network.ip_family, network.values()).apply(fields)
        return {
            "ipFamilyPolicy": family.apply(lambda f: f["ipFamilyPolicy"]),
            "ipFamilies": family.apply(lambda f: f.get("ipFamilies")),
        }

    def _report(self, composed: NoProxy) -> str:
        """Say in the preview which clients break on, or ignore, parts of the list; return its value."""
        for note in compat_notes(composed):
            log = pulumi.log.warn if note.severity == "warning" else pulumi.log.info
            log(f"NO_PROXY: {note.text}", resource=self)
        return str(composed)

    @staticmethod
    def _compose(settings: Settings, network: ClusterNetwork | None) -> pulumi.Output[tuple[NoProxy, list[str]]]:
        """NO_PROXY and tinyproxy's Allow list, from the settings plus the network's Outputs once known."""
        if network is None:
            return pulumi.Output.from_input((settings.no_proxy(), settings.allowed_sources()))
        return network.values().apply(lambda values: (settings.no_proxy(values), settings.allowed_sources(values)))

    def _create(
        self, logical_name: str, obj: Obj, extra: pulumi.ResourceOptions | None = None
    ) -> pulumi.CustomResource:
        """A typed resource for core kinds, a CustomResource (e.g. Kyverno's ClusterPolicy) otherwise."""
        self._objects.append(obj)
        check_unique(self._objects)
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


def _plain(values: ProxyValues) -> pulumi.Output[ProxyValues]:
    """The three values resolved together, for builders that write them into text."""
    return pulumi.Output.all(values.http_proxy, values.https_proxy, values.no_proxy).apply(lambda v: ProxyValues(*v))


def _maybe_secret(value: T, secret: bool) -> pulumi.Output[T]:
    """The value as an Output, secret when it carries credentials."""
    output: pulumi.Output[T] = pulumi.Output.from_input(value)
    return pulumi.Output.secret(output) if secret else output
