"""Helm (and Carvel addon) values that carry the proxy into known charts, and a deep merge into a user's own values.

Each `Profile` names the chart, the dotted key paths it sets and the file its
keys were checked against, so a reviewer can re-check them. A profile's
values hold the three proxy leaves and nothing else: plain strings from the
command, `pulumi.Output`s from the component; a builder puts them where they
belong and never looks inside them. Where a chart takes an env list, the list
is `env_vars(values)`: both spellings of the three variables, then the runtime variables of the values'
selection (`ProxyValues.select`; the annotation cannot reach values rendered before the pods exist).

A profile also declares the in-cluster names its chart's components call each
other by (`Profile.names`: derived from the Helm release name and the cluster
domain where the chart derives them, `hosts` for the release its docs use).
Clients match NO_PROXY's CIDRs only against IP literals, so the pod and service
CIDRs never cover a name; `profile_no_proxy` composes the cluster's NO_PROXY plus
these names (category `CHART`) for that profile's values only, never into the
cluster-wide NO_PROXY. `left_out` lists the chart's containers the profile leaves
without the proxy on purpose, each with its reason; the Helm lane (tests/helm)
renders the profiles through the real charts with `helm template` and holds them
to both.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, NamedTuple

import yaml

from ..noproxy import NoProxy
from ..settings import HelmValuesSecret, NetworkValues, Runtime, Settings, SettingsError, release_name
from .digest import stamped
from .env import VALUES_ANNOTATION, ProxyValues, env_vars, workload_values
from .trust import bundle_in, trust_env_vars, trust_volume, trust_volume_mount

__all__ = [
    "PROFILES",
    "RENAMED",
    "VALUES_SECRETS_READS",
    "LeftOut",
    "Profile",
    "UnknownProfileError",
    "check_values_secrets",
    "helm_values",
    "merge_values",
    "profile_no_proxy",
    "profile_values",
    "values_secret",
    "values_secret_name",
    "values_secrets_problems",
    "values_yaml",
]

Values = dict[str, Any]


class LeftOut(NamedTuple):
    """A container of the chart that the profile leaves without the proxy on purpose, and why.

    `pattern` is `workload/container`, shell-style globs over the rendered names (release prefixes differ).
    """

    pattern: str
    reason: str


@dataclass(frozen=True)
class Profile:
    """How one chart takes the proxy settings: the keys it sets, where they were verified, and the builder.

    `hosts` are the in-cluster names the chart's components call each other by
    (empty when they talk only to the API server) for `release`, the release name
    the chart's docs use, in a cluster whose domain is cluster.local; `derive`,
    when set, gives them for another release name or cluster domain, as the
    chart's templates name them. `source` says where they come from. `left_out`
    lists the containers the profile leaves out on purpose, each with its reason.
    `trust_keys` are the keys set only with `proxy.upstream.trustedCa`: the
    `proxy-trust` volume and mounts (and the trust variables where the proxy's
    keys are no env list); with them, the env lists carry the trust group too.
    `annotation_keys` are where the chart takes annotations for the pods the
    profile gives the env: each gets `VALUES_ANNOTATION` with the values' digest
    (when they have one), so `check` can tell a pod that holds old values.
    """

    name: str
    chart: str
    keys: tuple[str, ...]
    source: str
    description: str
    build: Callable[[ProxyValues], Values]
    hosts: tuple[str, ...] = ()
    release: str | None = None
    derive: Callable[[str, str], tuple[str, ...]] | None = None
    left_out: tuple[LeftOut, ...] = ()
    trust_keys: tuple[str, ...] = ()
    annotation_keys: tuple[str, ...] = ()

    def names(self, release: str | None = None, dns_domain: str = "cluster.local") -> tuple[str, ...]:
        """The in-cluster names for a release (default: the docs' `release`) in a cluster with this domain."""
        if self.derive is None:
            return self.hosts
        return self.derive(release or self.release or self.name, dns_domain)

    def no_proxy_sources(
        self, release: str | None = None, dns_domain: str = "cluster.local"
    ) -> tuple[tuple[str, str], ...]:
        """The (value, origin) pairs this profile adds to its own NO_PROXY."""
        return tuple((host, f"helm profile {self.name}") for host in self.names(release, dns_domain))


class UnknownProfileError(KeyError):
    """`helm_values` was asked for a profile that `PROFILES` does not hold."""

    def __init__(self, profile: str, where: str = "profile") -> None:
        self.profile = profile
        self.message = f"{where}: {_unknown(profile)}"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class _Leaf(enum.Enum):
    """What a key path receives: one of the three values, or the six-entry env list (with a trusted CA, the trust
    group's variables after them); and, only with a trusted CA, the trust group's variables alone (a chart whose
    proxy keys are no env list), the `proxy-trust` volume or its mount (`render.trust`)."""

    HTTP = "http_proxy"
    HTTPS = "https_proxy"
    NO = "no_proxy"
    ENV = "env"
    TRUST_ENV = "trust_env"
    VOLUMES = "volumes"
    MOUNTS = "volume_mounts"
    ANNOTATIONS = "annotations"


_TRUST_ONLY = frozenset({_Leaf.TRUST_ENV, _Leaf.VOLUMES, _Leaf.MOUNTS})
_NOT_PROXY_KEYS = _TRUST_ONLY | {_Leaf.ANNOTATIONS}


def _unknown(profile: str) -> str:
    """Why `profile` is refused: renamed (naming the new name and why), or unknown (naming the accepted ones)."""
    if profile in RENAMED:
        return (
            f"{profile!r} was renamed {RENAMED[profile]!r} in 0.2.0: its values are TKG addon data values (read by "
            f"ytt when TKG installs the addon), and a Helm chart named {profile} accepts them and does nothing"
        )
    return f"{profile!r} is not a known Helm values profile (expected one of: {', '.join(sorted(PROFILES))})"


def _leaf(kind: _Leaf, values: ProxyValues, trusted: bool) -> Any:
    if kind is _Leaf.ENV:
        return [*env_vars(values.trusted()), *trust_env_vars()] if trusted else env_vars(values)
    if kind is _Leaf.TRUST_ENV:
        return trust_env_vars()
    if kind is _Leaf.VOLUMES:
        return [trust_volume()]
    if kind is _Leaf.MOUNTS:
        return [trust_volume_mount()]
    if kind is _Leaf.ANNOTATIONS:
        return {VALUES_ANNOTATION: values.digest}
    return getattr(values, kind.value)


def _builder(spec: tuple[tuple[str, _Leaf], ...]) -> Callable[[ProxyValues], Values]:
    """The values of a spec. The trust group only where the chart takes the mount too: its variables name files
    in it, and a variable naming a missing file breaks every TLS call (OpenSSL then loads no root at all)."""
    mounts = any(kind is _Leaf.MOUNTS for _, kind in spec)

    def build(values: ProxyValues) -> Values:
        trusted = values.trust and mounts
        out: Values = {}
        for path, kind in spec:
            if (kind in _TRUST_ONLY and not trusted) or (kind is _Leaf.ANNOTATIONS and values.digest is None):
                continue
            *parents, last = path.split(".")
            node = out
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = _leaf(kind, values, trusted)
        return out

    return build


def _profile(
    name: str,
    chart: str,
    source: str,
    description: str,
    spec: tuple[tuple[str, _Leaf], ...],
    *,
    release: str | None = None,
    derive: Callable[[str, str], tuple[str, ...]] | None = None,
    left_out: tuple[LeftOut, ...],
) -> Profile:
    """A profile whose `keys` and builder come from one spec, so they cannot drift apart; `left_out` must be
    declared. Its `hosts` are what `derive` gives for the docs' release and cluster.local (none without it)."""
    hosts = derive(release or name, "cluster.local") if derive is not None else ()
    keys = tuple(path for path, kind in spec if kind not in _NOT_PROXY_KEYS)
    trust_keys = tuple(path for path, kind in spec if kind in _TRUST_ONLY)
    annotations = tuple(path for path, kind in spec if kind is _Leaf.ANNOTATIONS)
    return Profile(
        name,
        chart,
        keys,
        source,
        description,
        _builder(spec),
        hosts,
        release,
        derive,
        left_out,
        trust_keys,
        annotations,
    )


def _helm_name(text: str) -> str:
    """Helm's `trunc 63 | trimSuffix "-"`, which every name helper of these charts ends with."""
    text = text[:63]
    return text[:-1] if text.endswith("-") else text


def _fullname(release: str, name: str) -> str:
    """The usual `<chart>.fullname` helper without fullnameOverride: the release name when it contains `name`,
    else `<release>-<name>`."""
    return _helm_name(release if name in release else f"{release}-{name}")


def _argo_cd_names(release: str, dns_domain: str) -> tuple[str, ...]:
    """argo-helm's names (charts/argo-cd/templates/_common.tpl, _helpers.tpl @af0a9310, chart 10.1.1): the chart's
    full name from nameOverride `argocd`, its components `<fullname>-<component>`, and Redis HA's HAProxy from the
    redis-ha subchart's own full name (`<release>-redis-ha`), which does not include `argocd`."""
    full = _fullname(release, "argocd")
    names = {_helm_name(f"{full}-{part}") for part in ("commit-server", "dex-server", "redis", "repo-server")}
    names.add(_helm_name(f"{_fullname(release, 'redis-ha')}-haproxy"))
    return tuple(sorted(names))


_CLOUDZERO_DOMAIN = "svc.cluster.local"


def _cloudzero_names(release: str, dns_domain: str) -> tuple[str, ...]:
    """The chart writes `<service>.<namespace>.svc.cluster.local` whatever the cluster's domain is; the cluster
    domain entry covers them only when the domain is cluster.local (or a parent of svc.cluster.local)."""
    domain = dns_domain.strip(".").lower()
    if domain == _CLOUDZERO_DOMAIN or _CLOUDZERO_DOMAIN.endswith(f".{domain}"):
        return ()
    return (f".{_CLOUDZERO_DOMAIN}",)


def _triple(prefix: str, http: str, https: str, no: str) -> tuple[tuple[str, _Leaf], ...]:
    return ((f"{prefix}{http}", _Leaf.HTTP), (f"{prefix}{https}", _Leaf.HTTPS), (f"{prefix}{no}", _Leaf.NO))


def _mounts(*pairs: tuple[str, str]) -> tuple[tuple[str, _Leaf], ...]:
    """(volumes key, volumeMounts key) per component: where the chart takes the `proxy-trust` volume and mount."""
    return tuple(spot for volumes, mounts in pairs for spot in ((volumes, _Leaf.VOLUMES), (mounts, _Leaf.MOUNTS)))


def _envs(*paths: str) -> tuple[tuple[str, _Leaf], ...]:
    return tuple((path, _Leaf.ENV) for path in paths)


def _annotations(*paths: str) -> tuple[tuple[str, _Leaf], ...]:
    return tuple((path, _Leaf.ANNOTATIONS) for path in paths)


_SNAKE = ("http_proxy", "https_proxy", "no_proxy")
_CAMEL = ("httpProxy", "httpsProxy", "noProxy")

_ALL = (
    _profile(
        "cert-manager",
        "jetstack/cert-manager (https://charts.jetstack.io)",
        "cert-manager/cert-manager: deploy/charts/cert-manager/values.yaml @001eb00d (documented top-level "
        "http_proxy, https_proxy, no_proxy); deploy/charts/cert-manager/templates/deployment.yaml @02ee550c "
        "(they become HTTP_PROXY, HTTPS_PROXY, NO_PROXY on the controller container). Hosts: none, no "
        "component calls another (the API server calls the webhook's Service, and does not read these variables)",
        "The controller is the component that calls ACME servers; the chart sets the upper-case variables from "
        "these three top-level keys. The webhook and cainjector talk only to the API server.",
        (
            *_triple("", *_SNAKE),
            ("extraEnv", _Leaf.TRUST_ENV),
            *_mounts(("volumes", "volumeMounts")),
            *_annotations("podAnnotations"),
        ),
        left_out=(
            LeftOut("*-cainjector/cert-manager-cainjector", "injects CA bundles into API objects: API server only"),
            LeftOut("*-webhook/cert-manager-webhook", "serves the API server's admission calls; calls nothing outside"),
            LeftOut(
                "*-startupapicheck/cert-manager-startupapicheck",
                "post-install hook (`check api`): waits until the API server accepts cert-manager's resources",
            ),
        ),
    ),
    _profile(
        "argo-cd",
        "argo/argo-cd (https://argoproj.github.io/argo-helm)",
        "argoproj/argo-helm: charts/argo-cd/values.yaml @2792db17 (controller.env, dex.env, server.env, "
        "repoServer.env, applicationSet.extraEnv, notifications.extraEnv, commitServer.extraEnv, global.env); "
        "charts/argo-cd/templates/argocd-repo-server/deployment.yaml @011824fa (env = concat global.env repoServer.env)"
        ". Hosts: derived from the release name (argocd-commit-server, argocd-dex-server, argocd-redis, "
        "argocd-redis-ha-haproxy, argocd-repo-server for a release named argocd), from argoproj/argo-helm @af0a9310 "
        "(chart 10.1.1) charts/argo-cd/templates/_common.tpl (argo-cd.fullname is the release name when it contains "
        "nameOverride 'argocd', else <release>-argocd; components are <fullname>-<component>; redis-ha's HAProxy is "
        "<release>-redis-ha-haproxy, or <release>-haproxy when the release name contains redis-ha) and _helpers.tpl "
        "(argocd-cmd-params-cm presets: repo.server argocd-repo-server:8081, read by server, controller and "
        "applicationSet, and notifications' --argocd-repo-server; redis.server argocd-redis:6379, or "
        "argocd-redis-ha-haproxy:6379 with redis-ha.enabled, read by server, controller and repoServer; "
        "server.dex.server https://argocd-dex-server:5556, read by server; commit.server argocd-commit-server:8086 "
        "with commitServer.enabled, read by controller); argoproj/argo-cd common/common.go @010192f5 (the same "
        "repo, commit, dex and redis names are the compiled-in defaults). No component calls argocd-server or the "
        "applicationset, notifications or application controller: their Services serve users, SCM webhooks and "
        "metrics",
        "Every component that reaches outside: repoServer (Git, Helm and OCI repositories), controller (remote "
        "cluster APIs), server (SSO/OIDC, remote clusters), applicationSet (SCM and pull-request generators), "
        "notifications (Slack, webhooks, mail), dex (upstream identity providers), commitServer (pushes hydrated "
        "manifests; off by default, the key is harmless then). Not redis, which makes no outbound calls. Not "
        "global.env: the chart concatenates it with each component's list, so a user's global.env plus ours "
        "would repeat names, while per-component lists merge without duplicates. The components call each other "
        "by short Service names over gRPC, which honours HTTPS_PROXY: the profile's NO_PROXY adds those names.",
        (
            *_envs(
                "applicationSet.extraEnv",
                "commitServer.extraEnv",
                "controller.env",
                "dex.env",
                "notifications.extraEnv",
                "repoServer.env",
                "server.env",
            ),
            *_mounts(
                ("applicationSet.extraVolumes", "applicationSet.extraVolumeMounts"),
                ("commitServer.extraVolumes", "commitServer.extraVolumeMounts"),
                ("controller.volumes", "controller.volumeMounts"),
                ("dex.volumes", "dex.volumeMounts"),
                ("notifications.extraVolumes", "notifications.extraVolumeMounts"),
                ("repoServer.volumes", "repoServer.volumeMounts"),
                ("server.volumes", "server.volumeMounts"),
            ),
            *_annotations(
                "applicationSet.podAnnotations",
                "commitServer.podAnnotations",
                "controller.podAnnotations",
                "dex.podAnnotations",
                "notifications.podAnnotations",
                "repoServer.podAnnotations",
                "server.podAnnotations",
            ),
        ),
        release="argocd",
        derive=_argo_cd_names,
        left_out=(
            LeftOut("*-repo-server/copyutil", "init container: copies the argocd binary into a shared volume"),
            LeftOut("*-dex-server/copyutil", "init container: copies the argocd binary into a shared volume"),
            LeftOut("*-redis/redis", "Redis serves the other components and makes no outbound calls"),
            LeftOut(
                "*-redis-secret-init/secret-init",
                "pre-install hook (`argocd admin redis-initial-password`): writes the Redis password Secret through "
                "the API server",
            ),
        ),
    ),
    _profile(
        "cloudzero-agent",
        "cloudzero/cloudzero-agent (chart >= 1.2.12)",
        "Cloudzero/cloudzero-agent: helm/docs/egress-proxy.md @af79c256 (defaults.env reaches every chart-managed "
        "container; the chart never sets the proxy variables itself; seed 003); helm/docs/releases/1.2.13.md "
        "@af79c256 (defaults.env added in 1.2.12, lowest precedence). Hosts: helm/templates/_helpers.tpl "
        "@e7edccc3 names every Service <release>-cz-<component> (cloudzero-agent.internal.resourceName), and the "
        "agent reaches the aggregator, kube-state-metrics and the API server by <service>.<namespace>.svc."
        "cluster.local, written literally whatever the cluster's domain is (helm/templates/_alloy_helpers.tpl, "
        "_helpers.tpl, _cm_helpers.tpl @e7edccc3): the cluster domain entry covers them when it is cluster.local, "
        "else the profile adds .svc.cluster.local",
        "One chart-wide list reaches every container the chart itself manages (agent, aggregator collector and "
        "shipper, webhook server, validator, jobs); all are Go binaries that read the variables. Not the vendored "
        "kube-state-metrics subchart, which reads only the API server.",
        (*_envs("defaults.env"), *_annotations("defaults.annotations")),
        derive=_cloudzero_names,
        left_out=(
            LeftOut(
                "*-cz-ksm/ksm",
                "kube-state-metrics, a vendored subchart that defaults.env does not reach; it reads the API server only",
            ),
        ),
    ),
    _profile(
        "env",
        "generic: charts with a top-level env list",
        "seed 000 (Helm values, method 4: a top-level env list); giantswarm/cluster-apps-operator: "
        "service/controller/resource/clustersecret/desired.go @03504133 writes the same shape",
        "For charts whose single workload reads a top-level env list of {name, value} entries, such as Giant Swarm's "
        "external-dns-app 3.5.0 (its external-dns container). Hosts: none, the chart is not known.",
        (*_envs("env"), *_annotations("podAnnotations")),
        left_out=(),
    ),
    _profile(
        "external-secrets",
        "external-secrets/external-secrets (https://charts.external-secrets.io)",
        "external-secrets/external-secrets: deploy/charts/external-secrets/values.yaml @c07d6894 (extraEnv, "
        "webhook.extraEnv, certController.extraEnv); deploy/charts/external-secrets/templates/deployment.yaml "
        "@01b05737 (top-level extraEnv is the controller container's env). Hosts: none, no component calls another "
        "(the API server calls the webhook's Service)",
        "Only the controller talks to the secret providers (cloud secret managers, Vault, ...). The webhook "
        "validates resources and the cert controller keeps the webhook certificate: both talk to the API server "
        "only, so webhook.extraEnv and certController.extraEnv are left alone.",
        (*_envs("extraEnv"), *_mounts(("extraVolumes", "extraVolumeMounts")), *_annotations("podAnnotations")),
        left_out=(
            LeftOut("*-cert-controller/cert-controller", "keeps the webhook's certificate: API server only"),
            LeftOut("*-webhook/webhook", "serves the API server's admission calls; calls nothing outside"),
        ),
    ),
    _profile(
        "giantswarm-cluster-values",
        "Giant Swarm <cluster>-cluster-values Secret/ConfigMap (cluster-apps-operator)",
        "giantswarm/cluster-apps-operator: service/controller/resource/clustersecret/desired.go @03504133 "
        '(values["cluster"]["proxy"] = {http, https, noProxy} and a top-level env list; seed 001); '
        "giantswarm/cert-manager-app 4.1.1 @5ce35116 templates/proxy.yaml (cluster.proxy, overridden by its own "
        "proxy block, becomes the cert-manager-app-proxy ConfigMap that values.yaml's extraEnv reads into the "
        "controller, webhook and cainjector); giantswarm/external-dns-app 3.5.0 @d3738a4f templates/deployment.yaml "
        "(top-level env is the external-dns container's env; it reads no cluster.proxy). Hosts: none, these are "
        "cluster-wide values for many charts, not one chart's components",
        "The values file Giant Swarm's app platform merges into every app of the cluster: cluster.proxy for the "
        "charts that read it (cert-manager-app 4.1.1), and the env list for charts whose workload reads a top-level "
        "env (external-dns-app 3.5.0). Not the top-level http_proxy, https_proxy and no_proxy that "
        "cluster-apps-operator also writes: neither chart reads them, and the upstream cert-manager chart refuses "
        "this file (its schema allows no cluster key); use the cert-manager profile for that chart.",
        (*_triple("cluster.proxy.", "http", "https", "noProxy"), *_envs("env")),
        left_out=(
            LeftOut(
                "cert-manager-giantswarm-clusterissuer/cert-manager-giantswarm-clusterissuer",
                "post-install hook: kubectl waits for the webhook and applies the ClusterIssuers through the API server",
            ),
        ),
    ),
    _profile(
        "tkg-kapp-controller",
        "TKG addon kapp-controller (Carvel package data values, not a Helm chart)",
        "vmware-tanzu/tanzu-framework: providers/ytt/02_addons/kapp-controller/kapp-controller_addon_data.lib.yaml "
        "@d980c5a4 (kappController.config.httpProxy, httpsProxy, noProxy); vmware-tanzu/community-edition: "
        "cli/cmd/plugin/standalone-cluster/kapp/values.go (same nesting); seed 002. Hosts: none, kapp-controller "
        "talks to the API server and registries (the API server calls its packaging API)",
        "kapp-controller fetches package bundles and images from registries. Upstream Carvel installs take the "
        "same three keys in the kapp-controller-config Secret (carvel-dev/kapp-controller: "
        "config/overlays/controller-config-overlay.yml); this profile is the TKG addon layout.",
        _triple("kappController.config.", *_CAMEL),
        left_out=(),
    ),
    _profile(
        "kyverno",
        "kyverno/kyverno (https://kyverno.github.io/kyverno/)",
        "kyverno/kyverno: charts/kyverno/templates/admission-controller/deployment.yaml @678318a5 "
        "(admissionController.container.extraEnvVars); background-controller/deployment.yaml @0101d004 "
        "(backgroundController.extraEnvVars); cleanup-controller/deployment.yaml @0249a88d "
        "(cleanupController.extraEnvVars); reports-controller/deployment.yaml @02accab3 "
        "(reportsController.extraEnvVars). Hosts: none, the controllers talk to the API server and not to each "
        "other (the API server calls the admission and cleanup controllers' webhook Services)",
        "All four controllers can reach outside: admission (verifyImages against registries, Sigstore/TUF; "
        "apiCall context), background (generate and mutate-existing rules with apiCall or imageRegistry "
        "context), reports (background scans, registry client), cleanup (global context entries). Not the "
        "admission controller's kyverno-pre init container (API server only), and not global.extraEnvVars: "
        "each template concatenates it with the component's list (kyverno @111e07bb), the kyverno-pre init "
        "container's too, so it would reach kyverno-pre, and a user's global.extraEnvVars plus ours would repeat "
        "names.",
        (
            *_envs(
                "admissionController.container.extraEnvVars",
                "backgroundController.extraEnvVars",
                "cleanupController.extraEnvVars",
                "reportsController.extraEnvVars",
            ),
            *_mounts(
                ("admissionController.extraVolumes", "admissionController.extraVolumeMounts"),
                ("backgroundController.extraVolumes", "backgroundController.extraVolumeMounts"),
                ("cleanupController.extraVolumes", "cleanupController.extraVolumeMounts"),
                ("reportsController.extraVolumes", "reportsController.extraVolumeMounts"),
            ),
            *_annotations(
                "admissionController.podAnnotations",
                "backgroundController.podAnnotations",
                "cleanupController.podAnnotations",
                "reportsController.podAnnotations",
            ),
        ),
        left_out=(
            LeftOut("kyverno-admission-controller/kyverno-pre", "init container (kyvernopre): API server only"),
            LeftOut(
                "*/test",
                "helm test Pods: readiness-checker calls the chart's own Services (check-http --service-name) and "
                "nothing outside",
            ),
            LeftOut(
                "*-migrate-resources/kyverno-cli", "post-upgrade hook: migrates stored resources in the API server"
            ),
            LeftOut("*-rm-webhooks/kubectl", "pre-delete hook: deletes the webhook configurations in the API server"),
            LeftOut("*-scale-to-zero/kubectl", "pre-delete hook: scales the controllers down through the API server"),
        ),
    ),
    _profile(
        "proxy",
        "generic: charts with proxy.{httpProxy,httpsProxy,noProxy}",
        "seed 000 (Helm values: 'if the chart has specific proxy settings')",
        "A common convention for charts with their own proxy settings; check the chart's values before use. Hosts: "
        "none, the chart is not known.",
        _triple("proxy.", *_CAMEL),
        left_out=(),
    ),
    _profile(
        "tkg-vsphere-cpi",
        "TKG addon vsphere-cpi (Carvel package data values, not a Helm chart)",
        "vmware-tanzu/community-edition: addons/packages/vsphere-cpi/1.22.6/bundle/config/schema.yaml @c579071a "
        "(vsphereCPI.http_proxy, https_proxy, no_proxy); vmware-tanzu/tanzu-framework: "
        "providers/ytt/02_addons/cpi/cpi_secret_crs.yaml (the <cluster>-vsphere-cpi-addon Secret); seed 002. "
        "Hosts: none, the cloud provider talks to vCenter and the API server only",
        "The cloud provider talks to vCenter. TKG addon values only: the upstream vsphere-cpi Helm chart "
        "(kubernetes/cloud-provider-vsphere, 1.36.0) accepts them and does nothing, and has no key that sets its "
        "container's env.",
        _triple("vsphereCPI.", *_SNAKE),
        left_out=(),
    ),
    _profile(
        "tkg-vsphere-csi",
        "TKG addon vsphere-csi (Carvel package data values, not a Helm chart)",
        "vmware-tanzu/tanzu-framework: providers/ytt/02_addons/csi/csi_addon_data.lib.yaml @ac28f563 "
        "(vsphereCSI.http_proxy, https_proxy, no_proxy); seed 002. Hosts: none, the CSI controller talks to vCenter "
        "and the API server, its sidecars to the driver over a Unix socket",
        "The CSI controller talks to vCenter.",
        _triple("vsphereCSI.", *_SNAKE),
        left_out=(),
    ),
)

PROFILES: Mapping[str, Profile] = MappingProxyType({p.name: p for p in sorted(_ALL, key=lambda p: p.name)})

# Names of 0.1 that 0.2.0 refuses, with the profile they became: fed to a Helm chart of the old name, those values
# were accepted and did nothing.
RENAMED: Mapping[str, str] = MappingProxyType(
    {"kapp-controller": "tkg-kapp-controller", "vsphere-cpi": "tkg-vsphere-cpi", "vsphere-csi": "tkg-vsphere-csi"}
)


def helm_values(profile: str, values: ProxyValues) -> Values:
    """The values of one profile, fresh on every call (no two calls or key paths share a container).

    `values.no_proxy` should be the profile's own NO_PROXY (`profile_no_proxy`), which adds its chart's hosts.
    """
    return _chosen(profile).build(values)


def _chosen(profile: str) -> Profile:
    try:
        return PROFILES[profile]
    except KeyError:
        raise UnknownProfileError(profile) from None


def profile_no_proxy(
    settings: Settings, profile: str, network: NetworkValues | None = None, release: str | None = None
) -> NoProxy:
    """The cluster's NO_PROXY plus the profile's own names for `release` (default: the chart docs' release name)
    and the cluster's domain, for that profile's values only."""
    if release is not None:
        release_name(release)
    sources = _chosen(profile).no_proxy_sources(release, settings.cluster.dns_domain)
    return settings.no_proxy(network, extra=sources)


def profile_values(
    settings: Settings,
    profile: str,
    network: NetworkValues | None = None,
    values: ProxyValues | None = None,
    selection: Iterable[Runtime] | None = None,
    release: str | None = None,
) -> ProxyValues:
    """The values one profile's builder receives: `values`' URLs (default: the settings') and its NO_PROXY for
    `release`, for `selection` (default: `values`' selection, else the cluster-wide flags); the digest is the
    cluster's (`values`', else the settings' own), not one of the profile's NO_PROXY."""
    http, https = (values.http_proxy, values.https_proxy) if values else (None, None)
    if selection is None:
        selection = values.selection if values else settings.runtimes.cluster_wide
    no_proxy = profile_no_proxy(settings, profile, network, release)
    digest = (
        values.digest if values else stamped(workload_values(settings, settings.no_proxy(network)), settings).digest
    )
    return replace(workload_values(settings, no_proxy, http, https, selection), digest=digest)


def merge_values(user: Mapping[str, Any], proxy: Mapping[str, Any]) -> Values:
    """The user's values with the proxy values merged in, for `helm.v3.Release` or `helm.v4.Chart`.

    The user's keys are never clobbered: their scalars (and any value whose
    type differs from the proxy's) win; mappings merge recursively; an env-style
    list (every entry a mapping with a `name`; an empty user list counts) gets
    the proxy entries whose name it does not have yet, appended in order; any
    other list is the user's. Anything neither a mapping nor a list is an opaque
    leaf, kept by identity. The inputs are not mutated and the result shares no
    container with them.
    """
    return _merge_mappings(user, proxy)


def _merge_mappings(user: Mapping[Any, Any], proxy: Mapping[Any, Any]) -> dict[Any, Any]:
    merged = {key: (_merge(value, proxy[key]) if key in proxy else _copy(value)) for key, value in user.items()}
    for key, value in proxy.items():
        if key not in merged:
            merged[key] = _copy(value)
    return merged


def _merge(mine: Any, theirs: Any) -> Any:
    if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
        return _merge_mappings(mine, theirs)
    if isinstance(mine, list) and isinstance(theirs, list) and theirs and _is_env(mine) and _is_env(theirs):
        merged = [_copy(entry) for entry in mine]
        names = [entry["name"] for entry in mine]
        for entry in theirs:
            if entry["name"] not in names:
                merged.append(_copy(entry))
                names.append(entry["name"])
        return merged
    return _copy(mine)


def _is_env(items: list[Any]) -> bool:
    return all(isinstance(item, Mapping) and "name" in item for item in items)


def _copy(value: Any) -> Any:
    """Fresh containers all the way down, the same leaves."""
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


# What `values_secrets_problems` reads (`trust_namespaces`: the namespaces that get proxy-trust).
VALUES_SECRETS_READS = (
    "helm_values_secrets",
    "proxy.upstream.trusted_ca",
    "namespaces",
    "injection.kyverno",
    "deployment.namespace",
)


def check_values_secrets(settings: Settings) -> None:
    """Refuse a `helmValuesSecrets` entry whose profile the catalog does not hold, or whose chart's pods would mount
    a `proxy-trust` that its namespace does not get, naming the entry."""
    problems = values_secrets_problems(settings)
    if problems:
        raise SettingsError(problems)


def values_secrets_problems(settings: Settings) -> list[str]:
    """Every problem `check_values_secrets` refuses."""
    problems = [
        f"{_entry(spec)}.profile: {_unknown(spec.profile)}"
        for spec in settings.helm_values_secrets
        if spec.profile not in PROFILES
    ]
    problems += [
        f"{_entry(spec)}.namespace: {spec.namespace!r} gets no proxy-trust, which the {spec.profile} values mount with proxy.upstream.trustedCa set, so the chart's "
        "pods would not start (expected a namespace listed in namespaces, or injection.kyverno: true)"
        for spec in settings.helm_values_secrets
        if spec.profile in PROFILES
        and settings.trusted_ca is not None
        and PROFILES[spec.profile].trust_keys
        and not bundle_in(settings, spec.namespace)
    ]
    return problems


def _entry(spec: HelmValuesSecret) -> str:
    """A `helmValuesSecrets` entry named by what it holds: the settings keep the entries sorted, so a position
    would not be the one the user wrote."""
    return f"helmValuesSecrets (profile {spec.profile}, namespace {spec.namespace})"


def values_secret_name(spec: HelmValuesSecret) -> str:
    return spec.name or f"{spec.profile}-proxy-values"


def values_secret(spec: HelmValuesSecret, values_yaml: Any) -> dict[str, Any]:
    """A Secret with key `values.yaml`, for Flux `HelmRelease.valuesFrom` or an app platform."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": values_secret_name(spec),
            "namespace": spec.namespace,
            "labels": {"app.kubernetes.io/part-of": "proxy-component", "proxy-component.io/helm-profile": spec.profile},
        },
        "type": "Opaque",
        "stringData": {"values.yaml": values_yaml},
    }


def values_yaml(profile: str, values: ProxyValues) -> str:
    """One profile's values as YAML text (plain strings only)."""
    return yaml.safe_dump(helm_values(profile, values), sort_keys=False, default_flow_style=False)
