"""The one validated input: the proxy, the cluster's network, the proxy deployment and the consumers.

The component, the root stack program (from stack config) and the command (from
a YAML file) all read this model. Keys are camelCase; snake_case is accepted
too; unknown keys are errors. Every error names the field path, the bad value
and what is accepted.

Import from here; the modules, each importing only those listed after it (the import-linter contract in
`pyproject.toml`):

- `loading`: `parse_settings` and `load_settings`;
- `checks`: the checks across fields;
- `model`: `Settings`, its derived values, and the registry of checks (`Check`, `CHECKS`);
- `deployment`: the DaemonSet (`DeploymentSettings`), its firewall, metrics, drain and deadlines;
- `injection`: the consumers (injection, runtimes, Cluster API, Helm values Secrets);
- `proxy`: the proxy URLs, their redaction and the upstream;
- `scheduling`: tolerations, node affinity and the PriorityClass;
- `resources`: quantities, the proxy's memory and maxClients' sizing;
- `trust`: the CA bundle of a TLS-inspecting upstream;
- `network`: the CIDR, IP and host types, `ClusterSettings` and the run-time `NetworkValues`;
- `names`: Kubernetes names and the names that are taken;
- `base`: the models' common base;
- `errors`: `SettingsError` and the formatting of pydantic's errors.
"""

from __future__ import annotations

from .checks import PREFER_SAME_NODE_GA_MINOR, TRAFFIC_DISTRIBUTION_MINOR, traffic_distribution
from .deployment import (
    ACCESS_LOG_LINES_PER_SECOND,
    DEFAULT_ACCESS_LOG_LINES_PER_SECOND,
    DEFAULT_CONNECTIONS_PER_CLIENT,
    DEFAULT_DENY,
    DEFAULT_FIREWALL_DENY,
    DEFAULT_FIREWALL_IMAGE,
    DEFAULT_IMAGE,
    DEFAULT_METRICS_PORT,
    DEFAULT_NEW_CONNECTIONS_PER_SECOND,
    STAT_HOST,
    AccessLogSettings,
    DeadlineSettings,
    DenyPattern,
    DeploymentSettings,
    DrainSettings,
    FirewallSettings,
    ImageRef,
    MetricsSettings,
    PullPolicy,
    image_is_mutable,
)
from .errors import SettingsError
from .injection import (
    ADMISSION_BETA_MINOR,
    ADMISSION_GA_MINOR,
    NO_RUNTIMES,
    RUNTIMES,
    CapiSettings,
    HelmValuesSecret,
    InjectionSettings,
    KyvernoPolicy,
    Runtime,
    RuntimeSettings,
    TransformEnv,
    parse_runtimes,
)
from .loading import load_settings, parse_settings
from .model import CHECKS, Check, Settings
from .names import (
    PROBE_NAMESPACE,
    RESERVED_NAMES,
    DnsLabel,
    DnsSubdomain,
    LabelKey,
    LabelValue,
    ReleaseName,
    namespace_name,
    release_name,
)
from .network import (
    DEFAULT_MAX_PODS_PER_NODE,
    IP,
    NETWORK_FIELDS,
    ApiHost,
    Cidr,
    Cloud,
    ClusterSettings,
    DnsName,
    IpFamily,
    ListenPort,
    NetworkValues,
    NoProxyEntry,
    Port,
    SourceRange,
    check_network,
    infer_ip_family,
)
from .proxy import ProxySettings, ProxyUrl, UpstreamSettings, UpstreamUrl, redact_url
from .resources import (
    LOOPBACK_RESERVE,
    MAX_CLIENTS_STEP,
    PROXY_BASE_MEMORY_KIB,
    PROXY_MEMORY_PER_CONNECTION_KIB,
    Quantity,
    ResourceName,
    Resources,
    default_proxy_memory_limit,
    loopback_reserve,
    proxy_memory_needed,
    quantity_bytes,
)
from .scheduling import (
    DEFAULT_PRIORITY_CLASS,
    OS_LABEL,
    SYSTEM_PRIORITY_CLASSES,
    Affinity,
    NodeAffinity,
    NodeSelector,
    NodeSelectorOperator,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    TaintEffect,
    Toleration,
)
from .trust import TrustedCa, ca_certificates

__all__ = [
    "ACCESS_LOG_LINES_PER_SECOND",
    "ADMISSION_BETA_MINOR",
    "ADMISSION_GA_MINOR",
    "CHECKS",
    "DEFAULT_ACCESS_LOG_LINES_PER_SECOND",
    "DEFAULT_CONNECTIONS_PER_CLIENT",
    "DEFAULT_DENY",
    "DEFAULT_FIREWALL_DENY",
    "DEFAULT_FIREWALL_IMAGE",
    "DEFAULT_IMAGE",
    "DEFAULT_MAX_PODS_PER_NODE",
    "DEFAULT_METRICS_PORT",
    "DEFAULT_NEW_CONNECTIONS_PER_SECOND",
    "DEFAULT_PRIORITY_CLASS",
    "IP",
    "LOOPBACK_RESERVE",
    "MAX_CLIENTS_STEP",
    "NETWORK_FIELDS",
    "NO_RUNTIMES",
    "OS_LABEL",
    "PREFER_SAME_NODE_GA_MINOR",
    "PROBE_NAMESPACE",
    "PROXY_BASE_MEMORY_KIB",
    "PROXY_MEMORY_PER_CONNECTION_KIB",
    "RESERVED_NAMES",
    "RUNTIMES",
    "STAT_HOST",
    "SYSTEM_PRIORITY_CLASSES",
    "TRAFFIC_DISTRIBUTION_MINOR",
    "AccessLogSettings",
    "Affinity",
    "ApiHost",
    "CapiSettings",
    "Check",
    "Cidr",
    "Cloud",
    "ClusterSettings",
    "DeadlineSettings",
    "DenyPattern",
    "DeploymentSettings",
    "DnsLabel",
    "DnsName",
    "DnsSubdomain",
    "DrainSettings",
    "FirewallSettings",
    "HelmValuesSecret",
    "ImageRef",
    "InjectionSettings",
    "IpFamily",
    "KyvernoPolicy",
    "LabelKey",
    "LabelValue",
    "ListenPort",
    "MetricsSettings",
    "NetworkValues",
    "NoProxyEntry",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorOperator",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "Port",
    "PreferredSchedulingTerm",
    "ProxySettings",
    "ProxyUrl",
    "PullPolicy",
    "Quantity",
    "ReleaseName",
    "ResourceName",
    "Resources",
    "Runtime",
    "RuntimeSettings",
    "Settings",
    "SettingsError",
    "SourceRange",
    "TaintEffect",
    "Toleration",
    "TransformEnv",
    "TrustedCa",
    "UpstreamSettings",
    "UpstreamUrl",
    "ca_certificates",
    "check_network",
    "default_proxy_memory_limit",
    "image_is_mutable",
    "infer_ip_family",
    "load_settings",
    "loopback_reserve",
    "namespace_name",
    "parse_runtimes",
    "parse_settings",
    "proxy_memory_needed",
    "quantity_bytes",
    "redact_url",
    "release_name",
    "traffic_distribution",
]
