"""The consumers of the proxy values: which workloads get them injected (`InjectionSettings`: the admission policy,
Kyverno, the stack transform, trust-manager), which runtimes' renderings they get (`RuntimeSettings`), Cluster API
(`CapiSettings`) and the Helm values Secrets (`HelmValuesSecret`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from .base import _Model
from .names import DnsLabel, ReleaseName, _annotation_key

KyvernoPolicy = Literal["MutatingPolicy", "ClusterPolicy"]
TransformEnv = Literal["value", "reference"]

# The first Kubernetes minor with MutatingAdmissionPolicy as beta (v1beta1, off by default), and the one where it is v1.
ADMISSION_BETA_MINOR = 34
ADMISSION_GA_MINOR = 36
# The first minor where ClusterTrustBundle (certificates.k8s.io/v1) and its projected-volume source are GA, on by default.
CLUSTER_TRUST_BUNDLE_MINOR = 37


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
    cluster_trust_bundle: bool = Field(
        default=False,
        description="Also publish proxy.upstream.trustedCa as ClusterTrustBundles (certificates.k8s.io/v1, "
        "Kubernetes >= 1.37; signer proxy-component.io/trust), and mount the proxy-trust volume's PEM files from "
        "them: the CA is rotated in every pod from one cluster-scoped object. The per-namespace proxy-trust "
        "ConfigMaps stay (Java's trust store is in them).",
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
