"""The one validated input: the proxy, the cluster's network, the proxy deployment and the consumers.

The component, the root stack program (from stack config) and the command (from
a YAML file) all read this model. Keys are camelCase; snake_case is accepted
too; unknown keys are errors. Every error names the field path, the bad value
and what is accepted.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal
from urllib.parse import quote, unquote, urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from .dataplane.image import DEFAULT_IMAGE as OWN_IMAGE
from .dataplane.image import USER_ID as OWN_USER_ID
from .noproxy import (
    Category,
    NoProxy,
    NoProxyError,
    Source,
    cloud_metadata_sources,
    cluster_domain_sources,
    compose,
    loopback_sources,
    parse_entry,
)
from .redaction import mask_url

__all__ = [
    "CHECKS",
    "DEFAULT_FIREWALL_IMAGE",
    "DEFAULT_IMAGE",
    "DEFAULT_PRIORITY_CLASS",
    "NETWORK_FIELDS",
    "NO_RUNTIMES",
    "OS_LABEL",
    "PROBE_NAMESPACE",
    "RUNTIMES",
    "STAT_HOST",
    "Affinity",
    "CapiSettings",
    "Check",
    "ClusterSettings",
    "DeploymentSettings",
    "FirewallSettings",
    "HelmValuesSecret",
    "InjectionSettings",
    "NetworkValues",
    "NodeAffinity",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PreferredSchedulingTerm",
    "ProxySettings",
    "Resources",
    "Runtime",
    "RuntimeSettings",
    "Settings",
    "SettingsError",
    "Toleration",
    "UpstreamSettings",
    "ca_certificates",
    "check_network",
    "default_proxy_memory_limit",
    "image_is_mutable",
    "infer_ip_family",
    "load_settings",
    "namespace_name",
    "parse_runtimes",
    "parse_settings",
    "proxy_memory_needed",
    "quantity_bytes",
    "redact_url",
    "release_name",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DNS_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")


class SettingsError(ValueError):
    """Invalid settings: one line per problem, each naming the field path, the value and what is accepted."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in self.problems))


# --- field validators ------------------------------------------------------------------------


def _cidr(value: str) -> str:
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not a CIDR (expected e.g. 10.0.0.0/16 or fd00:10::/56)") from None
    return str(network)


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address (expected e.g. 10.96.0.1 or fd00:10:96::1)") from None


def _dns_name(value: str) -> str:
    name = value.lower().rstrip(".")
    if not _DNS_NAME.match(name):
        raise ValueError(
            f"{value!r} is not a DNS name (expected lower-case labels of a-z, 0-9 and '-', e.g. cluster.local)"
        )
    return name


def _region(value: str) -> str:
    if not re.match(r"^[a-z]{2}(-[a-z]+)+-[0-9]+$", value):
        raise ValueError(f"{value!r} is not a cloud region (expected e.g. eu-west-1)")
    return value


def _dns_1035(value: str) -> str:
    if not re.match(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$", value):
        raise ValueError(f"{value!r} is not a Service name (expected 1-63 of a-z, 0-9 and '-', starting with a letter)")
    return value


def _dns_label(value: str) -> str:
    if not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a DNS-1123 label (expected 1-63 of a-z, 0-9 and '-', e.g. kube-system)")
    return value


def namespace_name(value: str) -> str:
    """A namespace name: a DNS-1123 label, or ValueError saying what is accepted."""
    return _dns_label(value)


def release_name(value: str) -> str:
    """A Helm release name: a DNS-1123 label of at most 53 characters (Helm's own limit), or ValueError saying so."""
    _dns_label(value)
    if len(value) > 53:
        raise ValueError(
            f"{value!r} has {len(value)} characters, and Helm refuses release names longer than 53 "
            "(expected a DNS-1123 label of at most 53 characters, e.g. argocd)"
        )
    return value


def _api_host(value: str) -> str:
    """An API server host: a DNS name or an IP; a URL is reduced to its host."""
    text = value.strip()
    if "://" in text:
        host = urlsplit(text).hostname
        if not host:
            raise ValueError(f"{value!r} is not a host name or URL with a host (expected e.g. api.example.com)")
        text = host
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return _dns_name(text)


def _no_proxy_entry(value: str) -> str:
    try:
        entry = parse_entry(value)
    except NoProxyError as exc:
        raise ValueError(str(exc)) from None
    if entry.network is not None and entry.network.prefixlen == 0:
        raise ValueError(
            f"{value!r} would send no address through the proxy (expected a host, suffix, IP or a narrower CIDR)"
        )
    if entry.value == "*":
        raise ValueError(
            f"{value!r} would disable the proxy for every host, and curl and Python honour '*' only as the whole "
            "value, so it cannot be combined with the cluster's entries (expected a host, suffix, IP or CIDR)"
        )
    return value.strip()


def _source_range(value: str) -> str:
    """A range allowed to use the proxy: anything wider than /8 would make tinyproxy (nearly) an open proxy."""
    network = ipaddress.ip_network(_cidr(value))
    if network.prefixlen < 8:
        raise ValueError(
            f"{value!r} is wider than /8: tinyproxy would serve (nearly) every address as an open proxy "
            "(expected the cluster's own pod or node ranges, e.g. 10.244.0.0/16)"
        )
    return str(network)


Cidr = Annotated[str, AfterValidator(_cidr)]
SourceRange = Annotated[str, AfterValidator(_source_range)]
IP = Annotated[str, AfterValidator(_ip)]
DnsName = Annotated[str, AfterValidator(_dns_name)]
DnsLabel = Annotated[str, AfterValidator(_dns_label)]
ReleaseName = Annotated[str, AfterValidator(release_name)]
ApiHost = Annotated[str, AfterValidator(_api_host)]
NoProxyEntry = Annotated[str, AfterValidator(_no_proxy_entry)]
Port = Annotated[int, Field(strict=True, ge=1, le=65535)]
# tinyproxy runs as its own unprivileged UID with every capability dropped, on the node's network: it cannot bind below 1024.
ListenPort = Annotated[int, Field(strict=True, ge=1024, le=65535)]


def _proxy_url(value: str, upstream: bool = False) -> str:
    """A proxy URL that every client can parse: http(s)://[user:pass@]host[:port], nothing else. For the upstream
    (`upstream`), every message offers only http://, what tinyproxy's Upstream takes (an https:// one is refused
    by the settings' own check, `_upstream_scheme`, with the reason)."""
    if upstream:
        begins = "http://"
        accepted = (
            "expected http://host:port, optionally with user:password@: tinyproxy reaches upstreams over plain HTTP"
        )
    else:
        begins = "http:// or https://"
        accepted = "expected http://host:port or https://host:port, optionally with user:password@"
    shown = mask_url(value)  # never the value: a typo may have moved its password anywhere
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        raise ValueError(f"{shown!r} is not a URL ({accepted})") from None
    try:
        port = parts.port
    except ValueError:
        raise ValueError(
            f"{shown!r} has a port that is not a number from 1 to 65535, or a password with an unencoded "
            f"'#', '/' or '?' (percent-encode it, e.g. %23) ({accepted})"
        ) from None
    if parts.scheme not in ("http", "https") or not value.strip().lower().startswith(f"{parts.scheme}://"):
        raise ValueError(f"{shown!r} does not begin with {begins} ({accepted})")
    if not parts.hostname:
        raise ValueError(f"{shown!r} has no host ({accepted})")
    if not _url_host_ok(parts.hostname):
        raise ValueError(
            f"{shown!r} has a host that is neither a host name nor an IP address: "
            "the JVM would read quotes, '|' or spaces in it as more options or patterns (expected letters, digits, "
            "'-', '_' and '.', e.g. proxy.corp, or an IP address)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{shown!r} has a path, query or fragment, which clients ignore or reject ({accepted})")
    if port == 0:
        raise ValueError(f"{shown!r} has port 0 ({accepted})")
    return parts._replace(path="").geturl()


_URL_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$")


def _url_host_ok(host: str) -> bool:
    """A proxy URL's host (lower case, brackets dropped) is a DNS-style name or an IP address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_URL_HOST.match(host))
    return True


def redact_url(url: str) -> str:
    """The URL safe for messages and plain outputs, whatever its shape: userinfo, and anything that could hold it
    after a typo, replaced by `***` (see `redaction.mask_url`)."""
    return mask_url(url)


_CREDENTIAL_FIELDS = ("url", "httpproxy", "httpsproxy", "nodehttpproxy", "nodehttpsproxy", "username")
"""The fields whose value may hold a credential (proxy URLs, a user name that may hold the password by mistake);
`password` is never shown at all."""


def _shown(path: str, value: Any) -> str:
    """How an invalid input appears in an error: never a password, a credentialed URL or a whole mapping."""
    last = re.sub(r"\[\d+\]$", "", path).rpartition(".")[2].replace("_", "").lower()
    if "password" in path.lower():
        return "(hidden)"
    if isinstance(value, (Mapping, list, tuple)):
        return f"(a {type(value).__name__})"
    if last in _CREDENTIAL_FIELDS:
        if isinstance(value, str) and last != "username":
            return repr(mask_url(value))
        return f"(a {type(value).__name__}, hidden)"
    if isinstance(value, str) and (path == "proxy" or path.startswith("proxy.") or "@" in value or "://" in value):
        return repr(mask_url(value))  # under `proxy`, any text may be a mistyped proxy URL (`upstream: URL`)
    return repr(value)


ProxyUrl = Annotated[str, AfterValidator(_proxy_url)]


def _upstream_url(value: str) -> str:
    return _proxy_url(value, upstream=True)


UpstreamUrl = Annotated[str, AfterValidator(_upstream_url)]


_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
_PEM_ACCEPTED = "expected one or more PEM blocks '-----BEGIN CERTIFICATE-----', each a CA certificate valid now"


def _pem_text(value: Any) -> Any:
    """A list of PEM texts is one bundle: the YAML file and stack config may give either."""
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise ValueError(f"a list of {sorted({type(v).__name__ for v in value})} ({_PEM_ACCEPTED})")
        return "\n".join(value)
    return value


def _trusted_ca(value: str) -> str:
    """CA certificates in PEM: each parsed, a CA, valid now; canonical order (by SHA-256), duplicates dropped.

    The text is never echoed in an error: a private key pasted here by mistake must not reach a log.
    """
    from datetime import datetime, timezone

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    begins = _PEM_BEGIN.findall(value)
    if any("PRIVATE KEY" in label for label in begins):
        raise ValueError(
            f"holds a private key (-----BEGIN {next(lb for lb in begins if 'PRIVATE KEY' in lb)}-----; value hidden): "
            f"a trust bundle is public, never give a key here ({_PEM_ACCEPTED})"
        )
    blocks = _PEM_BLOCK.findall(value)
    if not begins:
        raise ValueError(f"no PEM block found ({_PEM_ACCEPTED})")
    if len(blocks) != len(begins):
        raise ValueError(
            f"{len(begins)} BEGIN lines but {len(blocks)} complete blocks: the PEM is truncated ({_PEM_ACCEPTED})"
        )
    now = datetime.now(timezone.utc)
    unique: dict[bytes, str] = {}
    for i, (label, _body) in enumerate(blocks, 1):
        where = f"block {i} of {len(blocks)}"
        if label != "CERTIFICATE":
            raise ValueError(f"{where} is '{label}', not a certificate ({_PEM_ACCEPTED})")
        text = f"-----BEGIN CERTIFICATE-----\n{_body}-----END CERTIFICATE-----\n"
        try:
            cert = x509.load_pem_x509_certificate(text.encode("ascii", "replace"))
            subject = cert.subject.rfc4514_string() or "(empty subject)"
        except ValueError as exc:
            raise ValueError(f"{where} is not a readable X.509 certificate ({exc}; {_PEM_ACCEPTED})") from None
        try:
            ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            ca = False
        if not ca:
            raise ValueError(
                f"{where} ({subject}) is not a CA certificate (no basicConstraints CA:TRUE): give the CA that signs "
                f"the proxy's certificates, not a server certificate ({_PEM_ACCEPTED})"
            )
        try:
            signs = cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
        except x509.ExtensionNotFound:
            signs = True
        if not signs:
            raise ValueError(
                f"{where} ({subject}) has a key usage without keyCertSign, so it cannot sign ({_PEM_ACCEPTED})"
            )
        if cert.not_valid_after_utc < now:
            raise ValueError(
                f"{where} ({subject}) expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC ({_PEM_ACCEPTED})"
            )
        if cert.not_valid_before_utc > now:
            raise ValueError(
                f"{where} ({subject}) is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC "
                f"({_PEM_ACCEPTED})"
            )
        unique[cert.fingerprint(hashes.SHA256())] = cert.public_bytes(serialization.Encoding.PEM).decode("ascii")
    return "".join(unique[k] for k in sorted(unique))


TrustedCa = Annotated[str, BeforeValidator(_pem_text), AfterValidator(_trusted_ca)]


def ca_certificates(bundle: str) -> list[str]:
    """The PEM certificates of a canonical trustedCa bundle, one text each."""
    return [f"-----BEGIN CERTIFICATE-----\n{body}-----END CERTIFICATE-----\n" for _, body in _PEM_BLOCK.findall(bundle)]


# --- models ---------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )


class UpstreamSettings(_Model):
    """A corporate proxy that tinyproxy chains to; its credentials stay in a Secret."""

    url: UpstreamUrl
    username: str | None = None
    password: SecretStr | None = None
    no_upstream: list[NoProxyEntry] = Field(
        default_factory=list, description="Destinations tinyproxy reaches directly, not through the upstream."
    )
    trusted_ca: TrustedCa | None = Field(
        default=None,
        description="PEM CA certificates of a TLS-inspecting upstream (one text, or a list): public, not a secret.",
    )

    @property
    def warnings(self) -> list[str]:
        """What is valid but likely a typo: a user name that may hold the password, no port. Never a value."""
        lines = []
        if self.username is not None:
            lines += _user_name_warnings("proxy.upstream.username:", self.username, self.password is not None)
        else:
            lines += _url_warnings("proxy.upstream.url", self.url)
        if urlsplit(self.url).port is None:
            lines.append(
                "proxy.upstream.url: gives no port, so tinyproxy reaches the upstream on port 80 (expected "
                "host:port, e.g. http://proxy.corp.example:3128; write :80 when port 80 is meant)"
            )
        return lines

    @property
    def credentials(self) -> tuple[str, str] | None:
        parts = urlsplit(self.url)
        if self.username is not None:
            return (self.username, self.password.get_secret_value() if self.password else "")
        if parts.username is not None:
            return (unquote(parts.username), unquote(parts.password or ""))
        return None

    @property
    def url_with_credentials(self) -> str:
        """The upstream URL with userinfo, for node services that talk to it directly."""
        creds = self.credentials
        if creds is None:
            return self.url
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        user, password = (quote(c, safe="") for c in creds)
        return parts._replace(netloc=f"{user}:{password}@{host}").geturl()

    @property
    def endpoint(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return (parts.hostname or "", parts.port or 80)

    @property
    def address(self) -> str | None:
        """The upstream's IPv4 address when the URL gives one (the settings refuse IPv6 and odd spellings)."""
        host = self.endpoint[0]
        return host if _inet_aton(host) == host else None


def _url_warnings(field: str, url: str) -> list[str]:
    """The warnings for a valid proxy URL's user info (see `_user_name_warnings`)."""
    parts = urlsplit(url)
    if parts.username is None:
        return []
    return _user_name_warnings(f"{field}: its user name", unquote(parts.username), bool(parts.password))


def _user_name_warnings(where: str, user: str, has_password: bool) -> list[str]:
    """A user name that may hold the password, typed with ';' for ':' or without the ':' at all: a line naming
    `where` and why, never the name (it may be the password)."""
    reasons = []
    if ";" in user or "," in user:
        reasons.append("holds ';' or ',' (a ':' mistyped?)")
    if not has_password:
        reasons.append("comes with no password")
    if len(user) >= 16 and all(re.search(c, user) for c in ("[a-z]", "[A-Z]", "[0-9]")):
        reasons.append("looks random, like a password")
    if not reasons:
        return []
    said = ", ".join(reasons[:-1]) + (" and " if len(reasons) > 1 else "") + reasons[-1]
    return [f"{where} {said}: if it holds the password, write user:password@ (value hidden)"]


def _inet_aton(host: str) -> str | None:
    """The canonical IPv4 address that the C resolver reads `host` as (e.g. 0177.1 is 127.0.0.1), else None."""
    if not host or not re.fullmatch(r"[0-9a-fA-FxX.]+", host):
        return None
    try:
        return str(ipaddress.IPv4Address(socket.inet_aton(host)))
    except OSError:
        return None


class ProxySettings(_Model):
    """What pods and nodes use: the proxy URLs and extra NO_PROXY entries."""

    http_proxy: ProxyUrl | None = Field(default=None, description="Defaults to the in-cluster proxy's URL.")
    https_proxy: ProxyUrl | None = Field(default=None, description="Defaults to httpProxy.")
    no_proxy: list[NoProxyEntry] = Field(default_factory=list, description="Entries added after the cluster's own.")
    upstream: UpstreamSettings | None = None
    node_http_proxy: ProxyUrl | None = Field(
        default=None, description="What node services (containerd, kubelet) use; default: httpProxy, else the upstream."
    )
    node_https_proxy: ProxyUrl | None = Field(default=None, description="Default: nodeHttpProxy.")


IpFamily = Literal["ipv4", "ipv6", "dual"]
Cloud = Literal["none", "aws", "gcp", "azure"]


def _kubernetes_version(value: str) -> str:
    if not re.fullmatch(r"v?1\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?", value):
        raise ValueError(f"{value!r} is not a Kubernetes version (expected e.g. '1.35' or 'v1.36.3')")
    return value


DEFAULT_MAX_PODS_PER_NODE = 110  # the kubelet's default maxPods
LOOPBACK_RESERVE = 32  # of maxClients, kept for the node's own processes (at most an eighth of maxClients)
MAX_CLIENTS_STEP = 256  # a derived maxClients is rounded up to a multiple of this


class ClusterSettings(_Model):
    """The cluster's networks and endpoints, everything that must bypass the proxy."""

    name: DnsLabel | None = None
    dns_domain: DnsName = "cluster.local"
    pod_cidrs: list[SourceRange] = Field(default_factory=list)
    service_cidrs: list[Cidr] = Field(default_factory=list)
    node_cidrs: list[SourceRange] = Field(
        default_factory=list,
        description="The node pools' subnets. In NO_PROXY and in tinyproxy's Allow: every host in them, not only the "
        "cluster's nodes, may use the proxy and its upstream credentials, so give the subnets, not a whole private "
        "range (`check` warns, node-range-wide).",
    )
    api_server_hosts: list[ApiHost] = Field(default_factory=list)
    api_server_ips: list[IP] = Field(default_factory=list)
    ip_family: IpFamily | None = Field(default=None, description="Inferred from the pod and service CIDRs when unset.")
    cloud: Cloud = "none"
    region: Annotated[str, AfterValidator(_region)] | None = Field(
        default=None, description="AWS region, for the .compute.internal suffix."
    )
    max_pods_per_node: int = Field(
        default=DEFAULT_MAX_PODS_PER_NODE,
        ge=1,
        le=10000,
        description="The most pods a node runs (the kubelet's maxPods: 110 by default, an EKS node's by its instance "
        "type, GKE's and AKS's by the pool's setting): deployment.maxClients makes room for all of them at their "
        "share.",
    )
    kubernetes_version: Annotated[str, AfterValidator(_kubernetes_version)] | None = Field(
        default=None,
        description="The cluster's Kubernetes version, e.g. '1.35': picks the MutatingAdmissionPolicy API "
        "(v1beta1 on 1.34 and 1.35, v1 from 1.36, the default).",
    )

    @property
    def kubernetes_minor(self) -> int | None:
        """The minor version of `kubernetes_version` (35 for '1.35' or 'v1.35.2'), None when unset."""
        return None if self.kubernetes_version is None else int(self.kubernetes_version.lstrip("v").split(".")[1])

    @property
    def effective_ip_family(self) -> IpFamily:
        if self.ip_family is not None:
            return self.ip_family
        return infer_ip_family([*self.service_cidrs, *self.pod_cidrs], self.node_cidrs)


def infer_ip_family(cluster_ranges: Sequence[str], node_ranges: Sequence[str] = ()) -> IpFamily:
    """The family of the service and pod ranges; of the node ranges when those are unknown; ipv4 when nothing is."""
    for ranges in (cluster_ranges, node_ranges):
        versions = {ipaddress.ip_network(c, strict=False).version for c in ranges}
        if versions:
            return {frozenset({4}): "ipv4", frozenset({6}): "ipv6"}.get(frozenset(versions), "dual")  # type: ignore[return-value]
    return "ipv4"


ResourceName = Literal["cpu", "memory"]


def _quantities(cpu: str, memory: str) -> dict[ResourceName, str]:
    return {"cpu": cpu, "memory": memory}


def _quantities_cpu(cpu: str) -> dict[ResourceName, str]:
    return {"cpu": cpu}


def _quantity_text(value: Any) -> Any:
    """A number is a quantity too, as Kubernetes reads `cpu: 1` (e.g. from `pulumi config set --path`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format(value, "g") if isinstance(value, float) else str(value)
    return value


Quantity = Annotated[str, BeforeValidator(_quantity_text)]


# What tinyproxy (the image's, MaxClients 1792) needs, measured by bench/bench_proxy_memory.py in a memory cgroup with
# 1,000 connections of each kind: under 4 MiB with no client, and per connection 38 KiB idle, 44 KiB dripping a
# request line, 48 KiB waiting on a silent origin or an idle CONNECT tunnel, 54 KiB an unfinished 16 KiB request
# line, 106 KiB with 60 KiB of headers, 147 KiB a transfer whose client stops reading (relay buffers and socket
# buffers full), 153 KiB the same with 60 KiB of headers, 160 KiB with a 16 KiB path: the worst case.
PROXY_BASE_MEMORY_KIB = 4 * 1024
PROXY_MEMORY_PER_CONNECTION_KIB = 160
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_QUANTITY_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def proxy_memory_needed(max_clients: int) -> int:
    """Bytes tinyproxy may use with `max_clients` connections each at its worst (a stalled transfer)."""
    return (PROXY_BASE_MEMORY_KIB + max_clients * PROXY_MEMORY_PER_CONNECTION_KIB) * 1024


def loopback_reserve(max_clients: int) -> int:
    """tinyproxy's connections kept for the node's own processes (the kubelet's probes, over loopback): tinyproxy
    refuses other clients at accept once `max_clients` less these are open (its LoopbackReserve), so that a busy
    proxy still answers its probes."""
    return min(LOOPBACK_RESERVE, max_clients // 8)


def default_proxy_memory_limit(max_clients: int) -> str:
    """The proxy container's default memory limit: what `max_clients` connections need, a quarter more, in whole
    32 MiB steps (384Mi for the default 1792), so that no mix of clients within maxClients gets it OOM-killed."""
    step = 32 * 2**20
    return f"{-(-proxy_memory_needed(max_clients) * 5 // 4 // step) * 32}Mi"


def quantity_bytes(quantity: str) -> int:
    """A memory quantity (`192Mi`, `1G`, `134217728`) in bytes; `m` (milli) is taken as a thousandth."""
    match = _QUANTITY.match(quantity)
    if not match:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity (expected e.g. 64Mi)")
    number, unit = float(match.group(1)), match.group(2) or ""
    return int(number / 1000) if unit == "m" else int(number * _QUANTITY_UNITS[unit])


class Resources(_Model):
    """Container requests and limits, in Kubernetes quantity syntax (numbers are accepted, as `cpu: 1`).

    The proxy's memory limit defaults to what `deployment.maxClients` connections need (384Mi for 1792)."""

    requests: dict[ResourceName, Quantity] = Field(default_factory=lambda: _quantities("10m", "32Mi"))
    limits: dict[ResourceName, Quantity] = Field(default_factory=lambda: _quantities_cpu("500m"))

    @field_validator("requests", "limits")
    @classmethod
    def _quantity(cls, value: dict[str, str]) -> dict[str, str]:
        problems = [
            f"{key}: {quantity!r} is not a Kubernetes quantity (expected e.g. 100m or 64Mi)"
            for key, quantity in value.items()
            if not _QUANTITY.match(str(quantity))
        ]
        if problems:
            raise ValueError("\n".join(problems))
        return dict(sorted(value.items()))


# The host the kubelet's HTTP probes ask for: tinyproxy answers it with its stats page (`StatHost`) and connects
# nowhere. `.invalid` never resolves (RFC 2606), so it can hide no real destination.
STAT_HOST = "proxy-component.invalid"

# The Filter, a second layer behind the firewall: hosts the proxy refuses by their spelling. It sees names,
# never the address a name resolves to, so the kernel rules (FirewallSettings) are what holds; these catch
# every literal spelling of loopback, unspecified, link-local and metadata addresses that glibc's inet_aton and
# inet_pton accept (octal, hex, short and integer IPv4 forms; any IPv6 spelling of ::, ::1, ::ffff:0:0/96,
# fe80::/10 and fd00:ec2::/32), before tinyproxy even resolves them. tinyproxy matches case-insensitively.
DEFAULT_DENY: tuple[str, ...] = (
    r"^(.+\.)?localhost\.?$",
    r"^127\.",
    r"^0\.",
    # IPv4 in fewer than four parts (127.1, 2130706433, 0x7f000001), or with an octal or hex part (0177.0.0.1).
    r"^([0-9]+|0x[0-9a-f]*)(\.([0-9]+|0x[0-9a-f]*)){0,2}\.?$",
    r"^(([0-9]+|0x[0-9a-f]*)\.){0,3}0[0-9x][0-9a-f]*(\.([0-9]+|0x[0-9a-f]*)){0,3}\.?$",
    # IPv6 ::, ::1 and ::0.0.0.1 in any spelling, and IPv4-mapped addresses (::ffff:127.0.0.1, ::ffff:7f00:1).
    r"^\[?[0:]*:[0:]*1?(%[^]]*)?\]?$",
    r"^\[?[0:]*:0\.0\.0\.[01](%[^]]*)?\]?$",
    r"^\[?[0:]*:ffff:",
    r"^169\.254\.",
    r"^\[?fe[89ab][0-9a-f]:",
    r"^\[?fd00:0*ec2:",
    r"^metadata(\.google\.internal)?\.?$",
    r"^168\.63\.129\.16\.?$",
    r"^100\.100\.100\.200\.?$",
)

# What the kernel refuses to tinyproxy's UID, besides every address of the node itself (loopback included):
# the unspecified and link-local ranges (IMDS at 169.254.169.254 among them) and the clouds' other metadata
# endpoints (AWS IPv6 IMDS, Azure's wire server, Alibaba's metadata service).
DEFAULT_FIREWALL_DENY: tuple[str, ...] = (
    "0.0.0.0/8",
    "169.254.0.0/16",
    "168.63.129.16/32",
    "100.100.100.200/32",
    "::/128",
    "fe80::/10",
    "fd00:ec2::/32",
)


# The images the DaemonSet runs by default: the project's own (proxy_component/dataplane/image.py, built by scripts/image), for
# both containers and the probe pods, tagged with its tinyproxy's Debian version. Why the digest pin is yours to
# add, as `image:tag@sha256:...`, is in docs/guides/images.md.
DEFAULT_IMAGE = OWN_IMAGE
DEFAULT_FIREWALL_IMAGE = OWN_IMAGE
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGE_EXAMPLE = (
    f"expected e.g. {DEFAULT_IMAGE}, optionally pinned as ...:{DEFAULT_IMAGE.rsplit(':', 1)[1]}@sha256:<64 hex digits>"
)


def _image_ref(value: str) -> str:
    """An image reference, `name[:tag][@sha256:<64 hex digits>]`; a digest pins it whatever the tag does."""
    name, at, digest = value.partition("@")
    if not name or any(ch.isspace() for ch in value):
        raise ValueError(f"{value!r} is not an image reference ({_IMAGE_EXAMPLE})")
    if at and not _DIGEST.match(digest):
        raise ValueError(f"{value!r} has a digest that is not sha256: and 64 lower-case hex digits ({_IMAGE_EXAMPLE})")
    return value


def image_is_mutable(image: str) -> bool:
    """True for a reference that may point at other content tomorrow: no digest, and no tag or one without a digit.

    `latest`, `stable` or no tag at all move by design; a versioned tag (`1.11.2-1`, `v1.36.3`) is conventionally
    stable but can still be pushed again, which only a digest rules out.
    """
    name, at, _ = image.partition("@")
    if at:
        return False
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    return not any(ch.isdigit() for ch in tag)


ImageRef = Annotated[str, Field(min_length=1), AfterValidator(_image_ref)]
PullPolicy = Literal["IfNotPresent", "Always", "Never"]


def _deny_pattern(pattern: str) -> str:
    """One line of tinyproxy's Filter; it must leave the probes' host alone (tinyproxy filters before StatHost)."""
    if not pattern or any(ch in pattern for ch in '"\n\r'):
        raise ValueError(f"{pattern!r} is not a one-line pattern (expected e.g. ^169\\.254\\.)")
    try:
        compiled = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from None
    if compiled.search(STAT_HOST):
        raise ValueError(
            f"{pattern!r} matches {STAT_HOST!r}, the host the kubelet's probes ask tinyproxy for, so every "
            "probe would fail (expected a pattern that leaves that name alone)"
        )
    return pattern


DenyPattern = Annotated[str, AfterValidator(_deny_pattern)]


# One pod's share of the proxy (docs/guides/security.md): 16 open connections, counted by tinyproxy itself per client
# address from accept until the connection's thread ends, and 100 new ones a second (bursts of 200), counted by the
# kernel per source address. maxClients defaults to room for every pod a node can run at its share.
DEFAULT_CONNECTIONS_PER_CLIENT = 16
DEFAULT_NEW_CONNECTIONS_PER_SECOND = 100


class FirewallSettings(_Model):
    """Kernel rules that stop tinyproxy from reaching the node itself, link-local and metadata addresses.

    An init container with NET_ADMIN on the node's network loads an nftables
    table that rejects new TCP connections from tinyproxy's own UID
    (`deployment.runAsUser`) to any local address of the node and to
    `denyCidrs`. It checks the address actually connected to, so no spelling
    and no DNS name gets around it.
    """

    enabled: bool = Field(
        default=True, description="Load the rules; without them only the name Filter stands between pods and the node."
    )
    image: ImageRef = Field(
        default=DEFAULT_FIREWALL_IMAGE,
        description="An image with nft and a POSIX /bin/sh, run as root with NET_ADMIN only (the proxy's own has both).",
    )
    deny_cidrs: list[Cidr] = Field(
        default_factory=lambda: list(DEFAULT_FIREWALL_DENY),
        description="Destinations refused besides the node's own addresses.",
    )
    allow_cluster_destinations: bool = Field(
        default=False,
        description="Let tinyproxy reach the cluster's pod, service and node ranges; by default they are refused, "
        "since tinyproxy on the node's network would let a pod past its NetworkPolicy (those calls belong in NO_PROXY).",
    )
    max_connections_per_client: int = Field(
        default=DEFAULT_CONNECTIONS_PER_CLIENT,
        ge=0,
        le=65535,
        description="Open connections that one client may hold: a pod where the node reaches it by a host route "
        "through its own veth (Calico, AWS VPC CNI, kindnet/ptp, Azure transparent), else a client address (on a bridge "
        "or Cilium's cilium_host a dual-stack pod has one per family): "
        "counted by tinyproxy itself from accept until the connection ends, whatever state the client's socket is in, "
        "more refused at accept with a TCP reset (with or without the kernel rules). deployment.maxClients defaults to "
        "room for cluster.maxPodsPerNode pods at this share. 0: no limit, and one pod can take every one of "
        "maxClients. The node's own processes (loopback: the kubelet's probes) are exempt.",
    )
    new_connections_per_client_per_second: int = Field(
        default=DEFAULT_NEW_CONNECTIONS_PER_SECOND,
        ge=0,
        le=100000,
        description="New connections per second that one source address may open to the proxy's port, with bursts "
        "of twice as many; the kernel refuses more with a TCP reset. 0: no limit.",
    )

    @field_validator("deny_cidrs")
    @classmethod
    def _sorted(cls, value: list[str]) -> list[str]:
        nets = {ipaddress.ip_network(c) for c in value}
        return [str(n) for n in sorted(nets, key=lambda n: (n.version, n))]


# --- scheduling: the Kubernetes types a pod spec takes, validated as the API server validates them -----------------

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_LABEL_KEY_ACCEPTED = (
    "expected an optional DNS subdomain and '/', then 1-63 of a-z, A-Z, 0-9, '-', '_' and '.', starting and ending "
    "with a letter or digit, e.g. node.kubernetes.io/pool"
)
OS_LABEL = "kubernetes.io/os"


def _label_key(value: str) -> str:
    """A label key (a node label, a taint's key): `[prefix/]name`, as Kubernetes accepts them."""
    prefix, slash, name = value.rpartition("/")
    if (slash and not _DNS_NAME.match(prefix)) or not _LABEL_NAME.match(name):
        raise ValueError(f"{value!r} is not a label key ({_LABEL_KEY_ACCEPTED})")
    return value


def _label_value(value: str) -> str:
    if not _LABEL_VALUE.match(value):
        raise ValueError(
            f"{value!r} is not a label value (expected at most 63 of a-z, A-Z, 0-9, '-', '_' and '.', starting and "
            "ending with a letter or digit, or empty, e.g. egress)"
        )
    return value


def _dns_subdomain(value: str) -> str:
    if not _DNS_NAME.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 subdomain (expected at most 253 of a-z, 0-9, '-' and '.', each label "
            "starting and ending with a letter or digit, e.g. registry-credentials)"
        )
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]
DnsSubdomain = Annotated[str, AfterValidator(_dns_subdomain)]

# Where `check --probe` runs its pods: a namespace of their own, where Pod Security enforces `restricted` (probe.py).
PROBE_NAMESPACE = "proxy-component-probe"

# The classes every cluster has; Kubernetes reserves the `system-` prefix for them.
SYSTEM_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
DEFAULT_PRIORITY_CLASS = "system-node-critical"


def _priority_class(value: str) -> str:
    """A PriorityClass name, or "" for none; a `system-` name must be one of the two that exist."""
    accepted = f"{' or '.join(SYSTEM_PRIORITY_CLASSES)}, the name of a PriorityClass of yours, or '' for none"
    if value == "":
        return value
    if not _DNS_NAME.match(value):
        raise ValueError(f"{value!r} is not a PriorityClass name, a DNS-1123 subdomain (expected {accepted})")
    if value.startswith("system-") and value not in SYSTEM_PRIORITY_CLASSES:
        raise ValueError(
            f"{value!r} starts with 'system-', which Kubernetes reserves for its own classes, and no class of that "
            f"name exists (expected {accepted})"
        )
    return value


TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(_Model):
    """A toleration, as in a pod spec (core/v1 Toleration): the taint it tolerates on a node."""

    key: LabelKey | None = Field(default=None, description="The taint's key; none (with operator Exists): every taint.")
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Equal: the taint's value is `value`.")
    value: LabelValue | None = Field(default=None, description="With operator Equal: the taint's value.")
    effect: TaintEffect | None = Field(default=None, description="The taint's effect; none: every effect.")
    toleration_seconds: int | None = Field(
        default=None, strict=True, ge=0, description="With effect NoExecute: how long the pod stays once tainted."
    )

    @model_validator(mode="after")
    def _check(self) -> Toleration:
        shown = f"key {self.key!r}" if self.key else "no key"
        problems = []
        if self.key is None and self.operator != "Exists":
            problems.append(
                f"operator {self.operator!r} with no key: a toleration without a key must use operator 'Exists' "
                "(expected a key, or operator: Exists to tolerate every taint)"
            )
        if self.operator == "Exists" and self.value:
            problems.append(
                f"{shown}: operator 'Exists' with value {self.value!r}: Exists matches every value of the key "
                "(expected no value, or operator: Equal)"
            )
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            problems.append(
                f"{shown}: tolerationSeconds {self.toleration_seconds} with effect {self.effect!r}: only a "
                "NoExecute taint evicts, after that many seconds (expected effect: NoExecute, or no tolerationSeconds)"
            )
        if problems:
            raise ValueError("\n".join(problems))  # one line each, under the toleration's path
        return self

    def spec(self) -> dict[str, Any]:
        """The toleration as a pod spec holds it, only the fields given, in the API's order."""
        out: dict[str, Any] = {}
        if self.key is not None:
            out["key"] = self.key
        out["operator"] = self.operator
        if self.value is not None and self.operator == "Equal":
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class NodeSelectorRequirement(_Model):
    """One condition on a node's labels, as in a pod's node affinity (core/v1 NodeSelectorRequirement)."""

    key: LabelKey
    operator: NodeSelectorOperator
    values: list[LabelValue] = Field(
        default_factory=list,
        description="In, NotIn: one or more label values; Exists, DoesNotExist: none; Gt, Lt: one integer.",
    )

    @model_validator(mode="after")
    def _check(self) -> NodeSelectorRequirement:
        op, n = self.operator, len(self.values)
        if op in ("In", "NotIn") and n == 0:
            raise ValueError(f"key {self.key!r}: operator {op!r} needs values (expected one or more label values)")
        if op in ("Exists", "DoesNotExist") and n:
            raise ValueError(
                f"key {self.key!r}: operator {op!r} takes no values, got {self.values!r} (expected values: [], or "
                "operator In or NotIn)"
            )
        if op in ("Gt", "Lt") and (n != 1 or not re.fullmatch(r"[0-9]{1,18}", self.values[0])):
            raise ValueError(
                f"key {self.key!r}: operator {op!r} compares with one integer, got {self.values!r} "
                "(expected e.g. values: ['8'])"
            )
        return self

    @field_validator("values")
    @classmethod
    def _sorted(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


class NodeSelectorTerm(_Model):
    """Conditions a node must all meet (core/v1 NodeSelectorTerm, by labels: matchExpressions)."""

    match_expressions: list[NodeSelectorRequirement] = Field(description="All must hold.")

    @field_validator("match_expressions")
    @classmethod
    def _some(cls, value: list[NodeSelectorRequirement]) -> list[NodeSelectorRequirement]:
        if not value:
            raise ValueError(
                "[] matches no node (expected at least one requirement, e.g. {key: pool, operator: In, values: [general]})"
            )
        unique = {json.dumps(r.spec(), sort_keys=True): r for r in value}
        return [unique[k] for k in sorted(unique)]

    def spec(self) -> list[dict[str, Any]]:
        return [r.spec() for r in self.match_expressions]


class NodeSelector(_Model):
    """Node selector terms, any of which a node must meet (core/v1 NodeSelector)."""

    node_selector_terms: list[NodeSelectorTerm] = Field(description="Any one must hold (each term's conditions all).")

    @field_validator("node_selector_terms")
    @classmethod
    def _some(cls, value: list[NodeSelectorTerm]) -> list[NodeSelectorTerm]:
        if not value:
            raise ValueError("[] matches no node (expected at least one term with matchExpressions)")
        unique = {json.dumps(t.spec(), sort_keys=True): t for t in value}
        return [unique[k] for k in sorted(unique)]


class PreferredSchedulingTerm(_Model):
    """A term the scheduler prefers a node to meet, with its weight (core/v1 PreferredSchedulingTerm)."""

    weight: int = Field(strict=True, ge=1, le=100)
    preference: NodeSelectorTerm


class NodeAffinity(_Model):
    """Which nodes the proxy's pods may run on, by node labels (core/v1 NodeAffinity)."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None,
        description="Nodes must meet one of these terms, besides the proxy's own (no control-plane unless "
        "deployment.controlPlane, no virtual-kubelet or Fargate nodes).",
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, description="Terms the scheduler prefers."
    )

    @field_validator("preferred_during_scheduling_ignored_during_execution")
    @classmethod
    def _canonical(cls, value: list[PreferredSchedulingTerm]) -> list[PreferredSchedulingTerm]:
        unique = {json.dumps([t.weight, t.preference.spec()], sort_keys=True): t for t in value}
        return [unique[k] for k in sorted(unique)]


class Affinity(_Model):
    """The proxy's node affinity (core/v1 Affinity, its nodeAffinity only)."""

    node_affinity: NodeAffinity | None = None

    @model_validator(mode="before")
    @classmethod
    def _node_only(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            problems = [
                f"{to_camel(key)}: not accepted: a DaemonSet runs one pod on each node it selects, so pod "
                "(anti-)affinity could only keep it off nodes whose pods then have no proxy (expected "
                "nodeAffinity, or deployment.nodeSelector)"
                for key in ("podAffinity", "podAntiAffinity", "pod_affinity", "pod_anti_affinity")
                if key in data
            ]
            if problems:
                raise ValueError("\n".join(problems))
        return data


DEFAULT_METRICS_PORT = 9888


class MetricsSettings(_Model):
    """Per-node proxy metrics: an exporter beside tinyproxy (same image, same UID, no capability) that serves
    Prometheus' text format on a port of its own, and the objects that watch it.

    The exporter reads tinyproxy's stats page over loopback and its log (a file in a volume both containers mount;
    tinyproxy never waits for the exporter), and passes on to its own stdout the log lines an operator needs: every
    one but the probes'. Nothing it serves derives from a credential.
    """

    enabled: bool = Field(
        default=False,
        description="Run the exporter beside tinyproxy; tinyproxy then logs to a file the exporter reads, and "
        "`kubectl logs -c metrics` shows its log without the probes' lines.",
    )
    port: ListenPort = Field(
        default=DEFAULT_METRICS_PORT,
        description="The exporter's port on every node (hostNetwork): /metrics. Not the proxy's port.",
    )
    run_as_user: int = Field(
        default=OWN_USER_ID + 1,
        ge=1000,
        le=2**31 - 1,
        description="The exporter's UID, not tinyproxy's (the firewall refuses that UID's connections to the node, the "
        "stats page's among them); its group is tinyproxy's, which lets it read the log.",
    )
    scrape_annotations: bool = Field(
        default=False,
        description="Annotate the proxy's pods with prometheus.io/scrape, port and path, for a Prometheus that "
        "discovers pods by those annotations.",
    )
    pod_monitor: bool = Field(
        default=False, description="Create a PodMonitor (prometheus-operator's CRD must exist in the cluster)."
    )
    prometheus_rule: bool = Field(
        default=False,
        description="Create a PrometheusRule with the proxy's alerts (prometheus-operator's CRD must exist).",
    )
    grafana_dashboard: bool = Field(
        default=False,
        description="Create a ConfigMap holding a Grafana dashboard, labelled grafana_dashboard: '1' for Grafana's "
        "dashboard sidecar.",
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="Labels added to the PodMonitor and PrometheusRule, e.g. the `release` a Prometheus selects.",
    )
    firewall_counters: bool = Field(
        default=False,
        description="Also export the kernel rules' counters (tinyproxy_firewall_refusals_total by rule: the node, "
        "denied and cluster ranges, each per-client limit, the loopback reserve). Reading them needs CAP_NET_ADMIN in "
        "the node's network: a third container, root with NET_ADMIN alone (as the firewall init container), lists the "
        "table every 15 s into the log volume. NET_ADMIN there could also rewrite the node's firewall, which is why "
        "it is off by default. Needs deployment.firewall.enabled.",
    )

    @field_validator("labels")
    @classmethod
    def _sorted_labels(cls, value: dict[str, str]) -> dict[str, str]:
        return dict(sorted(value.items()))


class DrainSettings(_Model):
    """How a proxy pod leaves its node (a roll, `kubectl drain`, a node's shutdown) without dropping a request.

    The API server marks a deleted pod's endpoint not ready (`terminating`) at once, and every node's kube-proxy then
    sends new connections to the ready proxies of other nodes; while the pod's own proxy is the only one serving (a
    one-node cluster), kube-proxy keeps sending to it, since it still passes its readiness probe. On SIGTERM the
    container keeps tinyproxy serving `endpointSeconds`, the time for that change to reach every node, then waits
    for the connections still open (CONNECT tunnels, kept-alive clients) to close, at most `connectionSeconds`,
    before it stops tinyproxy. The pod's grace period is their sum and 5 s more. A change of either rolls the proxy
    (it is the pod's own spec).
    """

    endpoint_seconds: int = Field(
        default=5,
        ge=0,
        le=300,
        description="Seconds tinyproxy keeps accepting after the pod is told to stop: longer than the cluster takes "
        "to take a terminating endpoint out of every node's kube-proxy rules (about a second on a quiet cluster).",
    )
    connection_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Then, at most this many seconds for the connections still open to finish (a git clone, an image "
        "pull, a websocket through the proxy); those still open after it are cut.",
    )

    @property
    def grace_seconds(self) -> int:
        """The pod's terminationGracePeriodSeconds: both waits and 5 s for tinyproxy to stop."""
        return self.endpoint_seconds + self.connection_seconds + 5


class DeadlineSettings(_Model):
    """How long each phase of a connection through the proxy may take, in seconds: a connection past one is closed
    (504 when the response's head is late, 500 when the lookup or connect fails), so no client holds a thread longer
    than its phase needs. Sized from what real clients allow: a client sends its request at once (Apache's
    RequestReadTimeout gives 20 to 40 s), a resolver answers within seconds, Go's http.Transport gives a connect
    30 s, and nginx's proxy_read_timeout waits 60 s for a response."""

    request_head_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="From accept, for the request line and headers (tinyproxy's RequestHeadTimeout); the Allow "
        "decision is made at accept, before anything is read.",
    )
    dns_seconds: int = Field(
        default=9,
        ge=3,
        le=300,
        description="For a name's lookup, every nameserver of the node's resolv.conf included: the resolver's "
        "RES_OPTIONS get timeout:dnsSeconds/3 attempts:1, and glibc asks at most 3 nameservers in turn.",
    )
    connect_seconds: int = Field(
        default=30,
        ge=1,
        le=3600,
        description="For the TCP connects to the origin's (or the upstream's) addresses, together (ConnectTimeout).",
    )
    response_head_seconds: int = Field(
        default=120,
        ge=1,
        le=86400,
        description="From the request's end, for the origin's (or the upstream's) status line and headers "
        "(ResponseHeadTimeout); raise it for long polls that answer later.",
    )
    idle_seconds: int = Field(
        default=600,
        ge=1,
        le=86400,
        description="Then, the longest a connection or a CONNECT tunnel may pass no byte either way (tinyproxy's "
        "Timeout); an idle tunnel keeps counting against its client's share.",
    )

    @property
    def resolver_options(self) -> str:
        """RES_OPTIONS for the proxy container: at most `dns_seconds` for a lookup over up to 3 nameservers."""
        return f"timeout:{max(1, self.dns_seconds // 3)} attempts:1"


class DeploymentSettings(_Model):
    """The in-cluster tinyproxy: where it runs, which image, and who may use it for what."""

    enabled: bool = True
    namespace: DnsLabel = "kube-system"
    service_name: Annotated[str, AfterValidator(_dns_1035)] = "http-proxy"
    port: ListenPort = 8888
    image: ImageRef = Field(default=DEFAULT_IMAGE, description="Any image with tinyproxy >= 1.11 on PATH.")
    image_pull_policy: PullPolicy = Field(default="IfNotPresent", description="Of both containers.")
    run_as_user: int = Field(
        default=OWN_USER_ID,
        ge=1000,
        le=2**31 - 1,
        description="tinyproxy's UID (and GID): one no other process on the node uses, since the firewall matches it.",
    )
    firewall: FirewallSettings = Field(default_factory=FirewallSettings)
    deadlines: DeadlineSettings = Field(default_factory=DeadlineSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    drain: DrainSettings = Field(default_factory=DrainSettings)
    control_plane: bool = Field(
        default=False, description="Also run on control-plane nodes (node-role.kubernetes.io/control-plane)."
    )
    resources: Resources = Field(default_factory=Resources)
    allowed_source_cidrs: list[SourceRange] = Field(default_factory=list)
    connect_ports: list[Port] = Field(default_factory=lambda: [443])
    internal_traffic_policy: Literal["Cluster", "Local"] = "Cluster"
    traffic_distribution: Literal["auto", "PreferSameNode", "PreferClose", "none"] = Field(
        default="auto",
        description="The Service's trafficDistribution. auto: PreferSameNode when cluster.kubernetesVersion is 1.35 "
        "or later (GA there: a pod's own node's proxy first, another node's only while its own is not ready, so a "
        "restart on one node costs no request), else unset (an older API server refuses the value). none: unset.",
    )
    max_clients: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="tinyproxy's MaxClients: connections served at once. 0 (the default): room for every pod a node "
        "can run at its share, cluster.maxPodsPerNode x firewall.maxConnectionsPerClient (twice on a dual-stack "
        "cluster: a pod has an address per family) and the loopback reserve, rounded up to a multiple of 256 (1792 by "
        "default); a value below that is refused. The memory limit defaults to what this many need at their worst, "
        "measured (bench/bench_proxy_memory.py), and tinyproxy keeps an eighth (at most 32) of them for the node's "
        "own processes, the kubelet's probes.",
    )
    deny_destinations: list[DenyPattern] = Field(
        default_factory=lambda: list(DEFAULT_DENY),
        description="Extended regular expressions over the request's host that tinyproxy refuses (its Filter).",
    )
    config_dir: str = Field(default="/etc/tinyproxy", description="Where the config is mounted in the container.")
    image_pull_secrets: list[DnsSubdomain] = Field(
        default_factory=list,
        description="Secrets (kubernetes.io/dockerconfigjson) in the proxy's namespace that let nodes pull the image; "
        "check --probe's pods name them too, in their own namespace.",
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="Node labels the proxy's nodes must have, besides kubernetes.io/os: linux (and the probe's pods).",
    )
    tolerate_all_taints: bool = Field(
        default=True,
        description="Tolerate every taint (the proxy is every node's egress); false: only `tolerations`, e.g. where "
        "a toleration whitelist (PodTolerationRestriction) refuses the catch-all.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        description="Tolerations after the catch-all (which already tolerates every taint: they matter with "
        "tolerateAllTaints: false); the probe's pods get them too.",
    )
    affinity: Affinity | None = Field(
        default=None, description="Node affinity terms, combined with the proxy's own (nodeAffinity only)."
    )
    priority_class_name: Annotated[str, AfterValidator(_priority_class)] = Field(
        default=DEFAULT_PRIORITY_CLASS,
        description="The proxy's PriorityClass: system-node-critical (it is every node's egress), another class, or "
        "'' for none. Outside kube-system a cluster may refuse system-* classes without a ResourceQuota (GKE).",
    )

    @property
    def limits(self) -> dict[ResourceName, str]:
        """Both containers' limits: `resources.limits`, the memory limit defaulting to what maxClients needs."""
        limits = dict(self.resources.limits)
        limits.setdefault("memory", default_proxy_memory_limit(self.max_clients))
        return dict(sorted(limits.items()))

    @property
    def required_node_terms(self) -> list[NodeSelectorTerm]:
        """The required node affinity terms of `affinity` (any one must hold), none when not given."""
        node = self.affinity.node_affinity if self.affinity else None
        required = node.required_during_scheduling_ignored_during_execution if node else None
        return list(required.node_selector_terms) if required else []

    @property
    def preferred_node_terms(self) -> list[PreferredSchedulingTerm]:
        node = self.affinity.node_affinity if self.affinity else None
        return list(node.preferred_during_scheduling_ignored_during_execution) if node else []

    @field_validator("namespace")
    @classmethod
    def _not_the_probes(cls, value: str) -> str:
        if value == PROBE_NAMESPACE:
            raise ValueError(
                f"{value!r} is the namespace of check --probe's pods, where Pod Security enforces 'restricted', "
                "which refuses the proxy's pods (expected another namespace, e.g. kube-system)"
            )
        return value

    @field_validator("image_pull_secrets")
    @classmethod
    def _unique_names(cls, value: list[str]) -> list[str]:
        return sorted(set(value))

    @field_validator("node_selector")
    @classmethod
    def _linux_only(cls, value: dict[str, str]) -> dict[str, str]:
        if value.get(OS_LABEL, "linux") != "linux":
            raise ValueError(
                f"{OS_LABEL}: {value[OS_LABEL]!r}: the proxy's image runs on Linux nodes only (expected linux, or "
                "no such key: the proxy selects linux itself)"
            )
        return dict(sorted(value.items()))

    @field_validator("tolerations")
    @classmethod
    def _canonical_tolerations(cls, value: list[Toleration]) -> list[Toleration]:
        """By key, operator, value, effect and seconds, each once: their order means nothing to Kubernetes."""
        unique = {
            (
                t.key or "",
                t.operator,
                t.value or "",
                t.effect or "",
                -1 if t.toleration_seconds is None else t.toleration_seconds,
            ): t
            for t in value
        }
        return [unique[k] for k in sorted(unique)]

    @field_validator("config_dir")
    @classmethod
    def _config_dir(cls, value: str) -> str:
        if not value.startswith("/") or any(ch.isspace() or ch == '"' for ch in value):
            raise ValueError(f"{value!r} is not an absolute path without spaces (expected e.g. /etc/tinyproxy)")
        return value.rstrip("/") or "/"

    @field_validator("connect_ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("[] would let CONNECT reach every port (expected at least one port, e.g. [443])")
        return sorted(set(value))


NETWORK_FIELDS = ("service_cidrs", "pod_cidrs", "node_cidrs", "api_server_hosts", "api_server_ips", "cloud_entries")


_ANNOTATION_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def _annotation_key(value: str) -> str:
    if not _ANNOTATION_KEY.match(value):
        raise ValueError(f"{value!r} is not an annotation key (expected e.g. proxy-component.io/inject)")
    return value


KyvernoPolicy = Literal["MutatingPolicy", "ClusterPolicy"]
TransformEnv = Literal["value", "reference"]

# The first Kubernetes minor with MutatingAdmissionPolicy as beta (v1beta1, off by default), and the one where it is v1.
ADMISSION_BETA_MINOR = 34
ADMISSION_GA_MINOR = 36


class InjectionSettings(_Model):
    """Which workloads get the proxy env from the admission policy, the Kyverno policies and the stack transform."""

    exclude_namespaces: list[DnsLabel] = Field(default_factory=lambda: ["kube-system"])
    opt_out_annotation: Annotated[str, AfterValidator(_annotation_key)] = Field(
        default="proxy-component.io/inject",
        description='A workload or pod with this annotation set to "false" is skipped.',
    )
    kyverno: bool = Field(default=False, description="Create the Kyverno policies that inject the env into pods.")
    kyverno_policy: KyvernoPolicy = Field(
        default="MutatingPolicy",
        description="MutatingPolicy and GeneratingPolicy (policies.kyverno.io/v1, Kyverno >= 1.17), or the legacy "
        "ClusterPolicy (kyverno.io/v1) for Kyverno < 1.17.",
    )
    admission: bool = Field(
        default=False,
        description="Create a MutatingAdmissionPolicy and its binding: the API server injects the env into pods "
        "itself (Kubernetes >= 1.34; see cluster.kubernetesVersion).",
    )
    trust_manager: bool = Field(
        default=False,
        description="Create a trust-manager Bundle of its default CAs and proxy.upstream.trustedCa (needs trust-manager).",
    )
    transform_env: TransformEnv = Field(
        default="value",
        description="How the stack transform writes each variable: value (literals; a change of the proxy values "
        "rewrites, and so restarts, every injected workload at the next update) or reference (valueFrom the "
        "namespace's proxy-config; a change updates proxy-config alone, and running pods keep their values until "
        "proxy-component rollout or their next restart). A namespace without proxy-config gets values.",
    )

    @field_validator("exclude_namespaces")
    @classmethod
    def _sorted(cls, value: list[str]) -> list[str]:
        return sorted(set(value))


Runtime = Literal["java", "node", "python"]
RUNTIMES: tuple[Runtime, ...] = ("java", "node", "python")
NO_RUNTIMES = "none"


def parse_runtimes(value: str, where: str) -> frozenset[Runtime]:
    """A runtimes annotation's value: runtimes separated by commas (``java,node``), or ``none``.

    Raises ValueError naming `where`, the value and what is accepted. An empty value is
    refused: the Kyverno policy cannot tell it from an absent annotation.
    """
    tokens = value.split(",")
    if value == NO_RUNTIMES:
        return frozenset()
    if not value or any(t not in RUNTIMES for t in tokens) or len(set(tokens)) != len(tokens):
        raise ValueError(
            f"{where}: {value!r} is not a list of runtimes (expected {NO_RUNTIMES!r} or some of "
            f"{', '.join(RUNTIMES)} separated by commas without spaces, e.g. 'java,node')"
        )
    return frozenset(tokens)  # type: ignore[arg-type]


class RuntimeSettings(_Model):
    """Which runtimes' renderings workloads get beside the six variables: opt-in, per cluster, namespace, workload.

    A workload's selection is its annotation (`annotation` on the workload or its pod template,
    e.g. ``java,node`` or ``none``) when it has one, else its namespace's entry in `namespaces`,
    else the cluster-wide flags. java: JDK_JAVA_OPTIONS (the JVM ignores the *_proxy variables);
    node: NODE_USE_ENV_PROXY=1 (Node >= 24 reads them only with it); python: the Python-safe
    NO_PROXY in both spellings. Off by default: a JVM or Node process that starts to use the proxy
    sends short in-cluster names (http://my-svc:8080) to it, which it cannot resolve.
    """

    java: bool = Field(default=False, description="JDK_JAVA_OPTIONS for every workload that gets the env.")
    node: bool = Field(default=False, description="NODE_USE_ENV_PROXY=1 for every workload that gets the env.")
    python: bool = Field(default=False, description="The Python-safe NO_PROXY in both spellings, cluster-wide.")
    namespaces: dict[DnsLabel, list[Runtime]] = Field(
        default_factory=dict, description="A namespace's runtimes, replacing the cluster-wide flags there."
    )
    annotation: Annotated[str, AfterValidator(_annotation_key)] = Field(
        default="proxy-component.io/runtimes",
        description="On a workload or its pod template: its runtimes ('java,node', or 'none'), replacing the rest.",
    )

    @field_validator("namespaces")
    @classmethod
    def _canonical(cls, value: dict[str, list[Runtime]]) -> dict[str, list[Runtime]]:
        return {ns: sorted(set(value[ns]), key=RUNTIMES.index) for ns in sorted(value)}

    @property
    def cluster_wide(self) -> frozenset[Runtime]:
        return frozenset(r for r in RUNTIMES if getattr(self, r))

    def for_namespace(self, namespace: str) -> frozenset[Runtime]:
        """The selection of a workload in `namespace` that carries no annotation."""
        listed = self.namespaces.get(namespace)
        return self.cluster_wide if listed is None else frozenset(listed)

    def select(self, namespace: str, annotations: Mapping[str, Any] | None, where: str = "") -> frozenset[Runtime]:
        """A workload's selection from its namespace and annotations; ValueError (naming `where`) on a bad value."""
        value = (annotations or {}).get(self.annotation)
        if value is None:
            return self.for_namespace(namespace)
        if not isinstance(value, str):
            raise ValueError(f"{where}{self.annotation}: {value!r} is not a string (expected e.g. 'java,node')")
        return parse_runtimes(value, f"{where}{self.annotation}")


class CapiSettings(_Model):
    """Cluster API: the Secrets a management cluster needs so machines boot with the proxy."""

    enabled: bool = False
    namespace: DnsLabel = Field(
        default="default", description="Namespace of the Cluster object in the management cluster."
    )
    export_to_kubeadm: bool = Field(
        default=False,
        description="Also export the proxy variables before kubeadm runs, so static pods get them (with the full NO_PROXY).",
    )
    tkg_addons: bool = Field(
        default=False, description="TKG-style addon value Secrets for vSphere CPI, CSI and kapp-controller."
    )


class HelmValuesSecret(_Model):
    """A Secret with key `values.yaml` holding one profile's values, for Flux `valuesFrom` or app platforms."""

    profile: str
    namespace: DnsLabel
    name: DnsLabel | None = Field(default=None, description="Default: <profile>-proxy-values.")
    release: ReleaseName | None = Field(
        default=None,
        description="The chart's Helm release name, from which the profile derives the in-cluster names its NO_PROXY "
        "adds (argo-cd); default: the name the chart's docs use.",
    )
    runtimes: list[Runtime] | None = Field(
        default=None, description="The chart's runtimes (java, node, python); default: the cluster-wide flags."
    )


@dataclass(frozen=True)
class NetworkValues:
    """Network facts that arrive at run time (resolved Outputs of a cluster resource), with their origin.

    `origin` names where they came from (e.g. `eks:prod`); `origins` overrides it
    per field, so that explicitly overridden parts say so in provenance.
    `cloud_entries` are the cloud's metadata endpoints and internal DNS suffixes.
    """

    origin: str = "network"
    pod_cidrs: Sequence[str] = ()
    service_cidrs: Sequence[str] = ()
    node_cidrs: Sequence[str] = ()
    api_server_hosts: Sequence[str] = ()
    api_server_ips: Sequence[str] = ()
    cloud_entries: Sequence[str] = ()
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin_of(self, name: str) -> str:
        return f"{self.origins.get(name, self.origin)}.{to_camel(name)}"


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


# --- checks across fields ---------------------------------------------------------------------


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


@_check("proxy.upstream.url")
def _upstream_scheme(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is not None and urlsplit(upstream.url).scheme != "http":
        yield (
            f"proxy.upstream.url: {redact_url(upstream.url)!r} must use http:// (tinyproxy reaches upstreams over plain HTTP)"
        )


@_check("proxy.upstream.url")
def _upstream_host(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is None:
        return
    hostname = urlsplit(upstream.url).hostname
    if hostname and ":" in hostname:
        yield (
            f"proxy.upstream.url: {redact_url(upstream.url)!r} has an IPv6 host, which tinyproxy 1.11's Upstream cannot "
            "parse (expected a host name or an IPv4 address)"
        )
    canonical = _inet_aton(hostname or "")
    if canonical is not None and canonical != hostname:
        yield (
            f"proxy.upstream.url: {redact_url(upstream.url)!r} spells the IPv4 address {canonical} in a form only the "
            f"C resolver reads, which the firewall's exemption for the upstream cannot match (expected {canonical})"
        )


@_check("proxy.upstream.no_upstream")
def _upstream_exceptions(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    for i, raw in enumerate(upstream.no_upstream if upstream else []):
        if parse_entry(raw).port is not None:
            yield (
                f"proxy.upstream.noUpstream[{i}]: {raw!r} has a port, but tinyproxy's Upstream none matches "
                "hosts only (expected the host, suffix, IP or CIDR alone)"
            )


@_check("proxy.upstream.url", "proxy.upstream.username", "proxy.upstream.password")
def _upstream_credentials(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is None:
        return
    parts = urlsplit(upstream.url)
    if parts.username is not None and upstream.username is not None:
        yield "proxy.upstream: give the credentials either in url or in username/password, not both"
    user = upstream.username if upstream.username is not None else unquote(parts.username or "")
    password = upstream.password.get_secret_value() if upstream.password else unquote(parts.password or "")
    if upstream.password is not None and upstream.username is None:
        yield "proxy.upstream.password: a password needs proxy.upstream.username"
    if re.search(r'[:@"\s]', user):
        where = "proxy.upstream.username:" if upstream.username is not None else "proxy.upstream.url: its user name"
        yield (
            f"{where} holds ':', '@', '\"' or a space, which tinyproxy's Upstream cannot carry (value hidden: it may "
            "hold the password)"
        )
    if re.search(r'[@"\s]', password):
        yield "proxy.upstream.password: holds '@', '\"' or a space, which tinyproxy's Upstream cannot carry (value hidden)"


@_check("cluster.ip_family", "cluster.pod_cidrs", "cluster.service_cidrs")
def _ip_family(settings: Settings) -> Iterator[str]:
    cluster = settings.cluster
    if cluster.ip_family is None:
        return
    versions = {ipaddress.ip_network(c).version for c in (*cluster.pod_cidrs, *cluster.service_cidrs)}
    wanted = {"ipv4": {4}, "ipv6": {6}, "dual": {4, 6}}[cluster.ip_family]
    extra = versions - wanted
    if extra:
        yield (
            f"cluster.ipFamily: {cluster.ip_family!r} contradicts the IPv{extra.pop()} pod/service CIDRs "
            "(expected ipv4, ipv6 or dual to match cluster.podCidrs and cluster.serviceCidrs)"
        )


@_check(
    "deployment.max_clients",
    "deployment.firewall.max_connections_per_client",
    "cluster.max_pods_per_node",
    "cluster.ip_family",
    "cluster.pod_cidrs",
    "cluster.service_cidrs",
    "cluster.node_cidrs",
)
def _client_pool(settings: Settings) -> Iterator[str]:
    d, cluster = settings.deployment, settings.cluster
    share = d.firewall.max_connections_per_client
    if not share:
        return
    pods = cluster.max_pods_per_node * settings.client_families * share
    room = d.max_clients - loopback_reserve(d.max_clients)
    if room < pods:
        families = " x 2 address families (dual-stack)" if settings.client_families == 2 else ""
        least = settings.derived_max_clients
        yield (
            f"deployment.maxClients: {d.max_clients} leaves {room} connections to pods after the loopback reserve, but "
            f"cluster.maxPodsPerNode ({cluster.max_pods_per_node}) x deployment.firewall.maxConnectionsPerClient "
            f"({share}){families} is {pods}: the pods of one node could exhaust it (expected at least {least}, or 0 "
            "to derive it, or a lower share or maxPodsPerNode)"
        )


@_check("deployment.max_clients", "deployment.resources")
def _proxy_memory(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    memory = d.resources.limits.get("memory")
    if memory is None:
        return
    needed = proxy_memory_needed(d.max_clients)
    if quantity_bytes(memory) < needed:
        yield (
            f"deployment.resources.limits.memory: {memory!r} is below the {needed / 2**20:.0f} MiB that "
            f"deployment.maxClients ({d.max_clients}) connections need at their worst "
            f"({PROXY_MEMORY_PER_CONNECTION_KIB} KiB each, measured by bench/bench_proxy_memory.py): a mix of clients "
            f"within maxClients could get the proxy OOM-killed (expected at least "
            f"{default_proxy_memory_limit(d.max_clients)}, or no memory limit to derive it, or a lower maxClients)"
        )


@_check("deployment.firewall.enabled", "deployment.firewall.allow_cluster_destinations")
def _firewall(settings: Settings) -> Iterator[str]:
    firewall = settings.deployment.firewall
    if not firewall.enabled and not firewall.allow_cluster_destinations:
        yield (
            "deployment.firewall.allowClusterDestinations: false needs deployment.firewall.enabled: true, since only "
            "the kernel rules refuse the cluster's pod, service and node ranges (the Filter sees names, not where "
            "they lead) (expected enabled: true, or allowClusterDestinations: true to let tinyproxy reach them)"
        )


# What the URLs of node services (Settings.node_http_proxy, node_https_proxy) are made of.
_NODE_URLS = (
    "proxy.node_http_proxy",
    "proxy.node_https_proxy",
    "proxy.http_proxy",
    "proxy.upstream.url",
    "proxy.upstream.username",
    "proxy.upstream.password",
)


@_check("capi.enabled", "cluster.name")
def _capi_cluster_name(settings: Settings) -> Iterator[str]:
    if settings.capi.enabled and settings.cluster.name is None:
        yield "cluster.name: required when capi.enabled is true (expected the Cluster API cluster's name)"


@_check("capi.enabled", "cluster.dns_domain", *_NODE_URLS)
def _capi_node_urls(settings: Settings) -> Iterator[str]:
    if not settings.capi.enabled:
        return
    p = settings.proxy
    if settings.node_http_proxy is None:
        yield (
            "proxy.nodeHttpProxy: required when capi.enabled is true and neither proxy.httpProxy nor "
            "proxy.upstream.url is set: nodes cannot resolve the in-cluster Service name "
            "(expected a proxy URL that nodes reach, e.g. http://proxy.corp:3128)"
        )
    field = "proxy.nodeHttpProxy" if p.node_http_proxy else "proxy.httpProxy" if p.http_proxy else "proxy.upstream.url"
    urls = [(field, settings.node_http_proxy)]
    if p.node_https_proxy is not None:  # else it is the same URL
        urls.append(("proxy.nodeHttpsProxy", p.node_https_proxy))
    for name, url in urls:
        host = (urlsplit(url).hostname or "") if url else ""
        domain = settings.cluster.dns_domain
        if host.endswith((".svc", f".{domain}")) or ".svc." in host:
            yield (
                f"{name}: {redact_url(str(url))!r} is a cluster DNS name, which nodes (containerd, kubelet) cannot "
                "resolve (expected a proxy nodes reach directly: set proxy.nodeHttpProxy)"
            )


@_check("capi.enabled", "capi.export_to_kubeadm", *_NODE_URLS)
def _capi_kubeadm_credentials(settings: Settings) -> Iterator[str]:
    if settings.capi.enabled and settings.capi.export_to_kubeadm and settings.nodes_have_credentials:
        yield (
            "capi.exportToKubeadm: the node proxy URL carries credentials, which kubeadm would copy into the "
            "static pod manifests and which would stand in KubeadmControlPlane, not in a Secret "
            "(expected exportToKubeadm: false, or a node proxy without credentials)"
        )


@_check("runtimes.annotation", "injection.opt_out_annotation")
def _runtimes_annotation(settings: Settings) -> Iterator[str]:
    if settings.runtimes.annotation == settings.injection.opt_out_annotation:
        yield (
            f"runtimes.annotation: {settings.runtimes.annotation!r} is injection.optOutAnnotation too, whose 'false' "
            "is no list of runtimes (expected another key, e.g. proxy-component.io/runtimes)"
        )


@_check("proxy.upstream.url", "deployment.enabled", "deployment.firewall.enabled")
def _upstream_on_the_node(settings: Settings) -> Iterator[str]:
    upstream = settings.proxy.upstream
    if upstream is not None and settings.deployment.enabled and settings.deployment.firewall.enabled:
        host = upstream.endpoint[0].lower().rstrip(".")
        if host == "localhost" or host.endswith(".localhost"):
            yield (
                f"proxy.upstream.url: {redact_url(upstream.url)!r} names the node itself, which the firewall "
                "refuses to tinyproxy unless the upstream is given by its address (expected e.g. "
                f"http://127.0.0.1:{upstream.endpoint[1]}: the firewall then lets tinyproxy reach that address and "
                "port, and nothing else on the node)"
            )


@_check("injection.admission", "cluster.kubernetes_version")
def _admission_version(settings: Settings) -> Iterator[str]:
    minor = settings.cluster.kubernetes_minor
    if settings.injection.admission and minor is not None and minor < ADMISSION_BETA_MINOR:
        yield (
            f"injection.admission: cluster.kubernetesVersion {settings.cluster.kubernetes_version!r} has no "
            "MutatingAdmissionPolicy (expected Kubernetes 1.34 or later: v1beta1 on 1.34 and 1.35 with the "
            "MutatingAdmissionPolicy feature gate and runtime-config, v1 from 1.36; or injection.kyverno instead)"
        )


TRAFFIC_DISTRIBUTION_MINOR = {"PreferClose": 31, "PreferSameNode": 34}
"""The first minor version whose API server takes each trafficDistribution by default (PreferSameNode: beta, on by
default, in 1.34 and GA in 1.35; PreferClose: beta in 1.31)."""
PREFER_SAME_NODE_GA_MINOR = 35


def traffic_distribution(settings: Settings) -> str | None:
    """The Service's trafficDistribution, or None to leave it unset (`deployment.trafficDistribution`)."""
    chosen = settings.deployment.traffic_distribution
    if chosen == "none":
        return None
    if chosen == "auto":
        minor = settings.cluster.kubernetes_minor
        return "PreferSameNode" if minor is not None and minor >= PREFER_SAME_NODE_GA_MINOR else None
    return chosen


@_check("deployment.traffic_distribution", "cluster.kubernetes_version")
def _traffic_distribution_version(settings: Settings) -> Iterator[str]:
    chosen = settings.deployment.traffic_distribution
    minor = settings.cluster.kubernetes_minor
    first = TRAFFIC_DISTRIBUTION_MINOR.get(chosen)
    if first is not None and minor is not None and minor < first:
        yield (
            f"deployment.trafficDistribution: {chosen!r} is refused by the API server of cluster.kubernetesVersion "
            f"{settings.cluster.kubernetes_version!r} (expected Kubernetes 1.{first} or later for {chosen}; auto or "
            "none leave it unset on older clusters)"
        )


RESERVED_NAMES = {
    ("default", "kubernetes"): "the API server's own Service",
    **{
        ("kube-system", name): "a cluster add-on's (DNS, kube-proxy, the CNI, metrics-server)"
        for name in ("kube-dns", "coredns", "kube-proxy", "metrics-server", "aws-node", "calico-node", "cilium",
                     "cilium-operator", "konnectivity-agent", "kube-flannel-ds", "kindnet")
    },
}  # fmt: skip
"""Names the proxy's DaemonSet, Service and ConfigMap may never take: with `adoptExisting` they would take the object
over, and `destroy` would delete it (issue 44)."""


@_check("deployment.service_name", "deployment.namespace")
def _reserved_name(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    whose = RESERVED_NAMES.get((d.namespace, d.service_name))
    if d.enabled and whose is not None:
        yield (
            f"deployment.serviceName: {d.service_name!r} in namespace {d.namespace!r} is {whose} name: the proxy's "
            "DaemonSet, Service and ConfigMap would take that object over, and `destroy` would delete it (expected "
            "another name, e.g. http-proxy)"
        )


@_check("deployment.metrics", "deployment.firewall")
def _firewall_counters(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    if d.metrics.enabled and d.metrics.firewall_counters and not d.firewall.enabled:
        yield (
            "deployment.metrics.firewallCounters: true reads the counters of the kernel rules that "
            "deployment.firewall.enabled: false leaves out (expected firewallCounters: false, or the firewall on)"
        )


@_check("deployment.metrics", "deployment.port")
def _metrics_port(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    if d.metrics.enabled and d.metrics.port == d.port:
        other = DEFAULT_METRICS_PORT if d.port != DEFAULT_METRICS_PORT else DEFAULT_METRICS_PORT + 1
        yield (
            f"deployment.metrics.port: {d.metrics.port} is the proxy's own port (deployment.port); the exporter needs "
            f"a port of its own (expected another, e.g. {other})"
        )


@_check("deployment.metrics", "deployment.run_as_user")
def _metrics_user(settings: Settings) -> Iterator[str]:
    d = settings.deployment
    if d.metrics.enabled and d.metrics.run_as_user == d.run_as_user:
        yield (
            f"deployment.metrics.runAsUser: {d.metrics.run_as_user} is tinyproxy's own UID (deployment.runAsUser), "
            "whose connections to the node's addresses the firewall refuses, the stats page's on loopback among them "
            f"(expected another UID, e.g. {d.run_as_user + 1})"
        )


@_check("injection.trust_manager", "proxy.upstream.trusted_ca")
def _trust_manager_ca(settings: Settings) -> Iterator[str]:
    if settings.injection.trust_manager and settings.trusted_ca is None:
        yield (
            "injection.trustManager: true needs proxy.upstream.trustedCa, the CA the Bundle would distribute "
            "(expected trustManager: false, or the PEM CA of a TLS-inspecting upstream)"
        )


@_check("deployment.enabled", "proxy.http_proxy")
def _proxy_without_deployment(settings: Settings) -> Iterator[str]:
    if not settings.deployment.enabled and settings.proxy.http_proxy is None:
        yield (
            "proxy.httpProxy: required when deployment.enabled is false (expected the URL of the proxy pods should use)"
        )


def _ip_or_cidr(value: str) -> str:
    """An API server address as discovery gives it: one IP, or the range it lives in (a GKE master range)."""
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError(
            f"{value!r} is not an IP address or CIDR (expected e.g. 10.96.0.1 or 172.16.0.32/28)"
        ) from None


_NETWORK_CHECKS: dict[str, Callable[[str], str]] = {
    "pod_cidrs": _source_range,
    "service_cidrs": _cidr,
    "node_cidrs": _source_range,
    "api_server_hosts": _api_host,
    "api_server_ips": _ip_or_cidr,
}


def check_network(network: NetworkValues) -> None:
    """Check a run-time network's values as the settings check theirs: every bad one named by its origin and index.

    A value computed from another resource or from config arrives here, after the settings were checked; without
    this its first use would fail it with a NO_PROXY entry's error, or inside the engine with none of ours.
    """
    problems: list[str] = []
    for name, check in _NETWORK_CHECKS.items():
        for i, value in enumerate(getattr(network, name)):
            try:
                if not isinstance(value, str):
                    raise ValueError(f"{value!r} is a {type(value).__name__}, not a string")
                check(value)
            except ValueError as exc:
                problems.append(f"{network.origin_of(name)}[{i}]: {exc}")
    if problems:
        raise SettingsError(problems)


def _network_ranges(network: NetworkValues | None, names: Sequence[str], check: Callable[[str], str]) -> list[str]:
    """The run-time network's ranges of these fields, each checked; an error names its origin and index."""
    if network is None:
        return []
    ranges: list[str] = []
    for name in names:
        for i, value in enumerate(getattr(network, name)):
            try:
                ranges.append(check(value))
            except ValueError as exc:
                raise SettingsError([f"{network.origin_of(name)}[{i}]: {exc}"]) from None
    return ranges


def _collapsed(ranges: Sequence[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The ranges merged where they touch or nest, IPv4 first, each family in address order."""
    nets = [ipaddress.ip_network(r) for r in ranges]
    v4 = ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv4Network))
    v6 = ipaddress.collapse_addresses(n for n in nets if isinstance(n, ipaddress.IPv6Network))
    return [*v4, *v6]


# --- loading ------------------------------------------------------------------------------


def _path(loc: tuple[int | str, ...]) -> str:
    if loc[-1:] == ("[key]",):  # a mapping's key failed: the mapping is the field, the message names the key
        loc = loc[:-2]
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _accepted_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = {(f.alias or n): f for n, f in current.model_fields.items()}
        fields.update(current.model_fields)
        info = fields.get(part)
        if info is None:
            return ""
        annotation = info.annotation
        inner = [
            a
            for a in getattr(annotation, "__args__", (annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not inner:
            return ""
        current = inner[0]
    return ", ".join(sorted(f.alias or n for n, f in current.model_fields.items()))


def _format(exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        path = _path(loc) or "settings"
        msg = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            accepted = _accepted_keys(Settings, loc)
            problems.append(f"{path}: unknown key (accepted: {accepted})")
        elif error["type"] == "value_error":
            for line in msg.splitlines():  # a check that found several problems gives a line each
                if re.match(r"^[a-z][A-Za-z0-9_]*\.[A-Za-z0-9_.\[\]]*: ", line):
                    problems.append(line)  # a model check that names its own field
                else:
                    problems.append(f"{path}: {line}")
        elif error["type"] == "missing":
            problems.append(f"{path}: required (expected a value; see docs/reference/settings.md)")
        else:
            problems.append(f"{path}: {_shown(path, error.get('input'))}: {msg}")
    return problems


def parse_settings(data: Mapping[str, Any] | Settings | None, checks: Sequence[Check] = ()) -> Settings:
    """Validate a mapping (camelCase or snake_case keys) into Settings, or raise SettingsError with every problem.

    One round: every field error, then every check across fields (`CHECKS`, then the caller's `checks`, e.g. the
    plan's) whose fields are valid, run on the settings without the invalid ones.
    """
    if isinstance(data, Settings):  # its own checks ran when it was made
        _raise([problem for check in checks for problem in check.problems(data)])
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SettingsError(
            [f"settings: {type(data).__name__} given (expected a mapping of proxy, cluster, deployment, namespaces)"]
        )
    raw = _plain(data)
    problems: list[str] = []
    invalid: set[str] = set()
    try:
        settings = Settings.model_validate(raw, context={_DEFERRED: True})
    except ValidationError as exc:
        problems = _format(exc)
        settings, invalid = _valid_part(raw, exc)
    for check in (*CHECKS, *checks):
        if not _reads_invalid(check.reads, invalid):
            problems.extend(check.problems(settings))
    _raise(problems)
    return settings


def _raise(problems: list[str]) -> None:
    if problems:
        raise SettingsError(problems)


_PRUNED = object()


def _plain(value: Any) -> Any:
    """A copy of the input, mappings as dicts and sequences as lists, for `_valid_part` to cut invalid fields from."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _valid_part(data: dict[str, Any], exc: ValidationError) -> tuple[Settings, set[str]]:
    """The settings of `data` without its invalid fields (each at its default), and the fields left out, as the
    snake_case paths checks read. A field whose removal makes its object invalid (a required one) takes the object."""
    invalid: set[str] = set()
    errors = exc.errors(include_url=False)
    for _ in range(100):  # each round cuts at least one field; the settings have far fewer levels
        cut = False
        for error in errors:
            loc = tuple(error["loc"])
            where = _cut(data, loc)
            cut = cut or where is not None
            invalid.update({_check_path(loc), _check_path(where or ())})
        data = _without_pruned(data) if cut else {}
        if not cut:
            invalid.add("")
        try:
            return Settings.model_validate(data, context={_DEFERRED: True}), invalid
        except ValidationError as again:
            errors = again.errors(include_url=False)
    return Settings.model_validate({}, context={_DEFERRED: True}), {""}


def _cut(data: dict[str, Any], loc: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """Mark the deepest part of `loc` that `data` holds as cut (a missing key cuts its object); where, or None."""
    node: Any = data
    for depth, part in enumerate(loc):
        holds = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if not holds:
            loc = loc[:depth]
            break
        if depth < len(loc) - 1:
            node = node[part]
    if not loc:
        return None
    parent: Any = data
    for part in loc[:-1]:
        parent = parent[part]
    if parent[loc[-1]] is _PRUNED:
        return None
    parent[loc[-1]] = _PRUNED
    return loc


def _without_pruned(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_pruned(item) for key, item in value.items() if item is not _PRUNED}
    if isinstance(value, list):
        return [_without_pruned(item) for item in value if item is not _PRUNED]
    return value


def _check_path(loc: tuple[int | str, ...]) -> str:
    """An error's location as checks name fields: snake_case names from the root, no list indices."""
    return ".".join(to_snake(part) for part in loc if isinstance(part, str) and part != "[key]")


def _reads_invalid(reads: Sequence[str], invalid: set[str]) -> bool:
    """A check reads an invalid field: that field, a part of it, or the object holding it (`""`: everything)."""
    return any(
        not bad or read == bad or read.startswith(f"{bad}.") or bad.startswith(f"{read}.")
        for read in reads
        for bad in invalid
    )


def load_settings(path: str, checks: Sequence[Check] = ()) -> Settings:
    """Read a YAML settings file; errors name the file. `checks`: as `parse_settings` takes them."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise SettingsError([f"{path}: cannot read ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise SettingsError([f"{path}: not UTF-8 text (expected a YAML file)"]) from None
    except yaml.YAMLError as exc:
        raise SettingsError([f"{path}: not valid YAML ({exc})"]) from None
    return parse_settings(data, checks)
