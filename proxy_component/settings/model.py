"""The top-level model, `Settings`: the parts, maxClients derived from them, the values derived for consumers
(the proxy URLs, NO_PROXY, tinyproxy's Allow list), and the registry of checks across fields (`Check`, `CHECKS`),
which `checks` fills (the package imports it) and the model runs when it is made."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..noproxy import (
    Category,
    NoProxy,
    Source,
    cloud_metadata_sources,
    cluster_domain_sources,
    compose,
    loopback_sources,
)
from .base import _Model
from .deployment import DEFAULT_CONNECTIONS_PER_CLIENT, DeploymentSettings
from .injection import CapiSettings, HelmValuesSecret, InjectionSettings, RuntimeSettings
from .names import DnsLabel
from .network import (
    DEFAULT_MAX_PODS_PER_NODE,
    ClusterSettings,
    NetworkValues,
    _api_host,
    _cidr,
    _collapsed,
    _network_ranges,
    _source_range,
)
from .proxy import ProxySettings, _url_warnings
from .resources import LOOPBACK_RESERVE, MAX_CLIENTS_STEP
from .trust import certifi_changed


class Settings(_Model):
    """Everything proxy-component needs to know; see the README's settings reference."""

    proxy: ProxySettings = Field(default_factory=ProxySettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    deployment: DeploymentSettings = Field(default_factory=DeploymentSettings)
    namespaces: list[DnsLabel] = Field(
        default_factory=list, description="Namespaces that get a proxy-config ConfigMap."
    )
    injection: InjectionSettings = Field(default_factory=InjectionSettings)
    runtimes: RuntimeSettings = Field(default_factory=RuntimeSettings)
    capi: CapiSettings = Field(default_factory=CapiSettings)
    helm_values_secrets: list[HelmValuesSecret] = Field(default_factory=list)

    @field_validator("namespaces")
    @classmethod
    def _sorted_unique(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    @field_validator("helm_values_secrets")
    @classmethod
    def _sorted_secrets(cls, value: list[HelmValuesSecret]) -> list[HelmValuesSecret]:
        return sorted(value, key=lambda s: (s.namespace, s.name or "", s.profile))

    @model_validator(mode="after")
    def _derive_max_clients(self) -> Settings:
        """deployment.maxClients 0 becomes room for every pod of a node at its share (`needed_max_clients`), rounded
        up to a multiple of 256; a copy of the deployment, never a change of an instance the caller passed in."""
        if self.deployment.max_clients == 0:
            update = {"max_clients": self.derived_max_clients}
            object.__setattr__(self, "deployment", self.deployment.model_copy(update=update))
        return self

    @property
    def derived_max_clients(self) -> int:
        """What maxClients 0 becomes: `needed_max_clients` rounded up to a multiple of 256 (the default share's, when
        the share is off)."""
        needed = self.needed_max_clients or DEFAULT_MAX_PODS_PER_NODE * DEFAULT_CONNECTIONS_PER_CLIENT
        return -(-needed // MAX_CLIENTS_STEP) * MAX_CLIENTS_STEP

    @property
    def client_families(self) -> int:
        """How many addresses a pod reaches the proxy from: one per IP family of the cluster."""
        return 2 if self.cluster.effective_ip_family == "dual" else 1

    @property
    def needed_max_clients(self) -> int:
        """The connections every pod a node can run may hold at its share, and the loopback reserve: what maxClients
        must hold so that no set of pods on a node exhausts it (0 when the share is off: nothing can be promised)."""
        share = self.deployment.firewall.max_connections_per_client
        if not share:
            return 0
        pods = self.cluster.max_pods_per_node * self.client_families * share
        return pods + LOOPBACK_RESERVE

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Settings:
        """Every check across fields, all at once; `parse_settings` defers them, to run them beside the field errors."""
        if info.context and info.context.get(_DEFERRED):
            return self
        problems = [problem for check in CHECKS for problem in check.problems(self)]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def warnings(self) -> list[str]:
        """Valid settings that are likely a typo, one line each naming the field, never its value: shown by every
        command and in Pulumi previews (pulumi.log.warn)."""
        p = self.proxy
        lines = []
        for name, url in (
            ("proxy.httpProxy", p.http_proxy),
            ("proxy.httpsProxy", p.https_proxy),
            ("proxy.nodeHttpProxy", p.node_http_proxy),
            ("proxy.nodeHttpsProxy", p.node_https_proxy),
        ):
            if url is not None:
                lines += _url_warnings(name, url)
        if p.upstream is not None:
            lines += p.upstream.warnings
        if self.trusted_ca is not None and (changed := certifi_changed()) is not None:
            lines.append(
                f"proxy.upstream.trustedCa: the merged proxy-trust bundle starts from certifi's roots, and {changed} "
                "is not the file certifi installed (its sha256 is not the one certifi's RECORD holds): something on "
                "this machine changed it, and every pod would trust what it added. Reinstall certifi (pip install "
                "--force-reinstall --no-deps certifi==<its version>) and render again"
            )
        return lines

    # --- derived values ---------------------------------------------------------------------

    @property
    def in_cluster_url(self) -> str:
        """The tinyproxy Service's URL, e.g. http://http-proxy.kube-system.svc.k8s.internal:8888."""
        d = self.deployment
        return f"http://{d.service_name}.{d.namespace}.svc.{self.cluster.dns_domain}:{d.port}"

    @property
    def http_proxy(self) -> str:
        return self.proxy.http_proxy or self.in_cluster_url

    @property
    def https_proxy(self) -> str:
        return self.proxy.https_proxy or self.http_proxy

    @property
    def proxy_config_namespaces(self) -> list[str]:
        """Namespaces with a `proxy-config`: the listed ones, plus the Kyverno clone source when it needs one."""
        extra = {self.deployment.namespace} if self.injection.kyverno and self.has_credentials else set()
        return sorted(set(self.namespaces) | extra)

    @property
    def trusted_ca(self) -> str | None:
        """The corporate CA bundle (canonical PEM) of a TLS-inspecting upstream, or None."""
        return self.proxy.upstream.trusted_ca if self.proxy.upstream else None

    @property
    def node_http_proxy(self) -> str | None:
        """The proxy node services use: nodeHttpProxy, else an explicit httpProxy, else the upstream (never the Service)."""
        p = self.proxy
        return p.node_http_proxy or p.http_proxy or (p.upstream.url_with_credentials if p.upstream else None)

    @property
    def node_https_proxy(self) -> str | None:
        return self.proxy.node_https_proxy or self.node_http_proxy

    @property
    def nodes_have_credentials(self) -> bool:
        return any(
            u is not None and urlsplit(u).username is not None for u in (self.node_http_proxy, self.node_https_proxy)
        )

    @property
    def has_credentials(self) -> bool:
        """True when a URL pods receive carries userinfo: every carrier must then be a Secret."""
        return any(urlsplit(u).username is not None for u in (self.http_proxy, self.https_proxy))

    def no_proxy_sources(
        self, network: NetworkValues | None = None, extra: Sequence[tuple[str, str]] = ()
    ) -> list[Source]:
        """Every raw NO_PROXY value, with its category and origin, in the categories' order.

        `extra` holds (value, origin) pairs that one consumer adds for itself, e.g. the
        host names a Helm chart's components call each other by; they come last, as `CHART`.
        """
        c = self.cluster
        sources = [*loopback_sources(), *cluster_domain_sources(c.dns_domain)]

        def add(category: Category, key: str, values: Sequence[str], origin: str = "cluster") -> None:
            sources.extend(Source(v, category, f"{origin}.{key}[{i}]") for i, v in enumerate(values))

        add(Category.SERVICE_NETWORK, "serviceCidrs", c.service_cidrs)
        add(Category.POD_NETWORK, "podCidrs", c.pod_cidrs)
        add(Category.NODE_NETWORK, "nodeCidrs", c.node_cidrs)
        add(Category.API_SERVER, "apiServerHosts", c.api_server_hosts)
        add(Category.API_SERVER, "apiServerIps", c.api_server_ips)
        if network is not None:
            categories = {
                "service_cidrs": Category.SERVICE_NETWORK,
                "pod_cidrs": Category.POD_NETWORK,
                "node_cidrs": Category.NODE_NETWORK,
                "api_server_hosts": Category.API_SERVER,
                "api_server_ips": Category.API_SERVER,
                "cloud_entries": Category.CLOUD_METADATA,
            }
            for name, category in categories.items():
                values: Sequence[str] = getattr(network, name)
                if name == "api_server_hosts":
                    values = [_api_host(h) for h in values]
                where = network.origin_of(name)
                sources.extend(Source(v, category, f"{where}[{i}]") for i, v in enumerate(values))
        sources.extend(cloud_metadata_sources(c.cloud, c.region))
        add(Category.USER, "noProxy", self.proxy.no_proxy, "proxy")
        sources.extend(Source(value, Category.CHART, origin) for value, origin in extra)
        return sources

    def no_proxy(self, network: NetworkValues | None = None, extra: Sequence[tuple[str, str]] = ()) -> NoProxy:
        """The composed NO_PROXY list for these settings plus any run-time network facts and `extra` entries."""
        return compose(self.no_proxy_sources(network, extra))

    def allowed_sources(self, network: NetworkValues | None = None) -> list[str]:
        """tinyproxy's Allow list: loopback, pod and node ranges, extra sources; collapsed and ordered."""
        raw = ["127.0.0.1/32", "::1/128", *self.cluster.pod_cidrs, *self.cluster.node_cidrs]
        raw += self.deployment.allowed_source_cidrs
        raw += _network_ranges(network, ("pod_cidrs", "node_cidrs"), _source_range)
        return [str(n.network_address) if n.prefixlen == n.max_prefixlen else str(n) for n in _collapsed(raw)]

    def cluster_destinations(self, network: NetworkValues | None = None) -> list[str]:
        """The pod, service and node ranges, the firewall's to refuse to tinyproxy; collapsed, IPv4 first.

        Empty when `deployment.firewall.allowClusterDestinations` lets tinyproxy reach them.
        """
        if self.deployment.firewall.allow_cluster_destinations:
            return []
        c = self.cluster
        raw = [*c.pod_cidrs, *c.service_cidrs, *c.node_cidrs]
        raw += _network_ranges(network, ("pod_cidrs", "service_cidrs", "node_cidrs"), _cidr)
        return [str(n) for n in _collapsed(raw)]

    def service_ranges(self, network: NetworkValues | None = None) -> list[str]:
        """The service ranges, the settings' and `network`'s, collapsed, IPv4 first."""
        raw = [*self.cluster.service_cidrs, *_network_ranges(network, ("service_cidrs",), _cidr)]
        return [str(n) for n in _collapsed(raw)]

    def has_static_sources(self) -> bool:
        c, d = self.cluster, self.deployment
        return bool(c.pod_cidrs or c.node_cidrs or d.allowed_source_cidrs)


@dataclass(frozen=True)
class Check:
    """A check across fields: the fields it reads and every problem it finds, each a line that names its field.

    `reads` are snake_case paths from the settings' root (`cluster.pod_cidrs`, `proxy.upstream.url`): `parse_settings`
    runs a check in the same round as the field errors, on the settings without the invalid fields, unless one of
    the fields it reads (or a part or parent of one) is invalid, so that no check reports a consequence of a field
    error as a problem of its own.
    """

    reads: tuple[str, ...]
    problems: Callable[[Settings], Iterable[str]]


CHECKS: list[Check] = []
"""The settings' own checks across fields, in the order their problems are reported."""

_DEFERRED = "proxy_component.checks_deferred"


def _check(*reads: str) -> Callable[[Callable[[Settings], Iterator[str]]], Callable[[Settings], Iterator[str]]]:
    def register(problems: Callable[[Settings], Iterator[str]]) -> Callable[[Settings], Iterator[str]]:
        CHECKS.append(Check(reads, problems))
        return problems

    return register
