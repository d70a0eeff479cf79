"""The corporate CA of a TLS-inspecting upstream, for workloads: the `proxy-trust` bundle and what a container gets.

A TLS-inspecting proxy re-signs every site with its own CA (`proxy.upstream.trustedCa`).
Each namespace that gets workloads' env (`namespaces`, and with Kyverno the proxy's
namespace, cloned into the others) gets a ConfigMap `proxy-trust` holding:

- `corporate-ca.crt`: the corporate CA alone (for `NODE_EXTRA_CA_CERTS`, which adds to Node's roots);
- `ca-bundle.crt`: the public roots plus the corporate CA, for the variables that replace a runtime's
  roots (`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE`);
- `truststore.p12` (binaryData): the same certificates as a PKCS#12 truststore for the JVM.

The public roots are certifi's (Mozilla's list), its version recorded in the annotation
`proxy-component.io/public-roots`: the bytes change only when certifi or the CA does.
The truststore is PKCS#12 without a MAC or encryption (the certificates are public), written by
cryptography and stripped of the MAC, whose salt is random: the same input gives the same bytes.

What a container gets (the trust group, decided here for every consumer): the four variables, the
volume mounted read-only at `MOUNT_PATH`, and with the java runtime `JDK_JAVA_OPTIONS` extended by
`JAVA_TRUST_OPTIONS`. A container that sets any of the four itself, or has a volumeMount at the path
or of the volume's name, gets none of it; a Pod with a volume of that name that is not this ConfigMap
gets none either. The builders (`trust_env_vars`, `trust_volume`, `trust_volume_mount`) serve Helm
values too.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..settings import Settings, ca_certificates
from ..settings.trust import certifi_changed

__all__ = [
    "BUNDLE_NAME",
    "CORPORATE_KEY",
    "CTB_LABEL",
    "CTB_SIGNER",
    "JAVA_TRUST_OPTIONS",
    "MERGED_KEY",
    "MOUNT_PATH",
    "ROOTS_ANNOTATION",
    "TRUSTSTORE_KEY",
    "TRUST_MANAGER_BUNDLE",
    "TRUST_NAMES",
    "Bundle",
    "PublicRoots",
    "bundle",
    "bundle_in",
    "certifi_roots",
    "cluster_trust_bundle_names",
    "cluster_trust_bundles",
    "java_truststore",
    "mount_free",
    "receives_trust",
    "sets_trust_names",
    "trust_bundle_object",
    "trust_bundle_objects",
    "trust_env_pairs",
    "trust_env_vars",
    "trust_manager_bundle",
    "trust_namespaces",
    "trust_volume",
    "trust_volume_mount",
    "unreached",
    "volume_free",
]

Obj = dict[str, Any]

BUNDLE_NAME = "proxy-trust"  # the ConfigMap in each namespace, and the pod volume's name
MOUNT_PATH = "/etc/proxy-component/trust"
CORPORATE_KEY = "corporate-ca.crt"
MERGED_KEY = "ca-bundle.crt"
TRUSTSTORE_KEY = "truststore.p12"
ROOTS_ANNOTATION = "proxy-component.io/public-roots"
TRUST_MANAGER_BUNDLE = "proxy-component-trust"
# injection.clusterTrustBundle: the signer of the project's ClusterTrustBundles (their names start with it, `/` as
# `:`), and the label that tells the corporate CA's bundle from the merged one; a pod projects each by both.
CTB_SIGNER = "proxy-component.io/trust"
CTB_LABEL = "proxy-component.io/trust-bundle"
CTB_BUNDLES = {CORPORATE_KEY: "corporate", MERGED_KEY: "merged"}

# The variables of the trust group, in the order a container gets them.
TRUST_NAMES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS")

# What the JVM adds to its JDK_JAVA_OPTIONS (java runtime): it reads no variable for its roots, and a trustStore
# replaces its cacerts, so the store holds the public roots too. No password: the store has no MAC.
JAVA_TRUST_OPTIONS = f"-Djavax.net.ssl.trustStore={MOUNT_PATH}/{TRUSTSTORE_KEY} -Djavax.net.ssl.trustStoreType=PKCS12"


@dataclass(frozen=True)
class PublicRoots:
    """The public roots the merged bundle starts from: PEM text, and where it came from (e.g. `certifi 2026.10.18`)."""

    pem: str
    source: str


def certifi_roots() -> PublicRoots:
    """certifi's bundle (Mozilla's roots, as Python's requests uses them), with certifi's version."""
    import certifi

    changed = " (changed on the machine that rendered it)" if certifi_changed() is not None else ""
    return PublicRoots(certifi.contents(), f"certifi {certifi.__version__}{changed}")


@dataclass(frozen=True)
class Bundle:
    """The contents of `proxy-trust`: the corporate CA alone, the merged PEM, the JVM truststore."""

    corporate: str
    merged: str
    truststore: bytes
    source: str
    public_count: int


def _certificates(pem: str) -> list[Any]:
    """Each PEM certificate of `pem` that cryptography reads (certifi holds a root with a negative serial number,
    which cryptography reads with a deprecation warning today and may refuse later: such a root stays in the PEM
    bundle and is left out of the truststore)."""
    from cryptography import x509

    out = []
    for text in ca_certificates(pem):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out.append(x509.load_pem_x509_certificate(text.encode("ascii")))
            except ValueError:
                continue
    return out


def _der_items(der: bytes) -> list[bytes]:
    """The encoded elements inside a DER SEQUENCE (the outer one of `der`)."""

    def header(i: int) -> tuple[int, int]:
        length, start = der[i + 1], i + 2
        if length & 0x80:
            count = length & 0x7F
            length, start = int.from_bytes(der[start : start + count], "big"), start + count
        return start, start + length

    if der[0] != 0x30:
        raise ValueError("not a DER SEQUENCE")
    start, end = header(0)
    items, i = [], start
    while i < end:
        _, item_end = header(i)
        items.append(der[i:item_end])
        i = item_end
    return items


def _der_sequence(items: list[bytes]) -> bytes:
    body = b"".join(items)
    n = len(body)
    if n < 0x80:
        return b"\x30" + bytes([n]) + body
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return b"\x30" + bytes([0x80 | len(size)]) + size + body


def java_truststore(certificates: list[tuple[str, Any]]) -> bytes:
    """A PKCS#12 truststore of (alias, certificate) pairs the JVM reads as trusted entries, without MAC or encryption.

    cryptography's `serialize_java_truststore` writes each certificate with Java's trusted-key-usage attribute,
    and a MAC whose salt is random; a PFX's MAC is optional (RFC 7292), so it is left out: the bytes depend on the
    certificates and aliases alone.
    """
    from cryptography.hazmat.primitives.serialization import NoEncryption, pkcs12

    bags = [pkcs12.PKCS12Certificate(cert, alias.encode("utf-8")) for alias, cert in certificates]
    version, auth_safe, *_mac = _der_items(pkcs12.serialize_java_truststore(bags, NoEncryption()))
    return _der_sequence([version, auth_safe])


def _alias(kind: str, cert: Any) -> str:
    from cryptography.hazmat.primitives import hashes

    return f"{kind}-{cert.fingerprint(hashes.SHA256()).hex()[:16]}"


@functools.lru_cache(maxsize=8)
def bundle(corporate: str, roots: PublicRoots) -> Bundle:
    """The bundle for a canonical trustedCa and public roots (cached: every namespace gets the same bytes)."""
    public = roots.pem.strip() + "\n"
    merged = f"{public}\n# proxy.upstream.trustedCa: the TLS-inspecting proxy's CA\n{corporate}"
    public_certs = _certificates(public)
    corporate_certs = _certificates(corporate)
    seen: set[str] = set()
    entries = []
    for kind, certs in (("corporate", corporate_certs), ("public", public_certs)):
        for cert in certs:
            alias = _alias(kind, cert)
            if alias not in seen:
                seen.add(alias)
                entries.append((alias, cert))
    return Bundle(corporate, merged, java_truststore(entries), roots.source, len(public_certs))


def trust_namespaces(settings: Settings) -> list[str]:
    """Namespaces that get `proxy-trust`: the listed ones, and the proxy's when Kyverno clones it from there."""
    if settings.trusted_ca is None:
        return []
    extra = {settings.deployment.namespace} if settings.injection.kyverno else set()
    return sorted(set(settings.namespaces) | extra)


def unreached(settings: Settings) -> str | None:
    """Why a trustedCa reaches no Pod, when it does not: no namespace gets proxy-trust. None otherwise."""
    if settings.trusted_ca is None or trust_namespaces(settings):
        return None
    nodes = "; only the Cluster API nodes install it" if settings.capi.enabled else ""
    return (
        "proxy.upstream.trustedCa: no namespace gets proxy-trust (namespaces is empty and injection.kyverno is off), "
        f"so no Pod gets the CA{nodes} (list the workloads' namespaces in namespaces, or turn on injection.kyverno)"
    )


def bundle_in(settings: Settings, namespace: str) -> bool:
    """`proxy-trust` is in `namespace`: the plan's, or (with Kyverno) the clone in every namespace it injects."""
    return settings.trusted_ca is not None and (settings.injection.kyverno or namespace in trust_namespaces(settings))


def trust_bundle_object(settings: Settings, namespace: str, roots: PublicRoots | None = None) -> Obj:
    """The `proxy-trust` ConfigMap of one namespace (`roots` default: certifi's)."""
    if settings.trusted_ca is None:
        raise ValueError("proxy.upstream.trustedCa is not set: there is no trust bundle to render")
    made = bundle(settings.trusted_ca, roots or certifi_roots())
    digest = hashlib.sha256(made.corporate.encode("ascii")).hexdigest()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": BUNDLE_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": "trust-bundle"},
            "annotations": {
                ROOTS_ANNOTATION: f"{made.source} ({made.public_count} certificates)",
                "proxy-component.io/trusted-ca-sha256": digest,
            },
        },
        "data": {CORPORATE_KEY: made.corporate, MERGED_KEY: made.merged},
        "binaryData": {TRUSTSTORE_KEY: base64.b64encode(made.truststore).decode("ascii")},
    }


def trust_bundle_objects(settings: Settings, roots: PublicRoots | None = None) -> list[Obj]:
    return [trust_bundle_object(settings, ns, roots) for ns in trust_namespaces(settings)]


def _anchor_pem(cert: Any) -> str | None:
    """`cert` as a PEM trust anchor the API server takes in a ClusterTrustBundle (a CA certificate with valid basic
    constraints that Go's x509 parses: a positive serial number), None otherwise."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        serial = cert.serial_number
    if not constraints.ca or serial <= 0:
        return None
    pem: str = cert.public_bytes(Encoding.PEM).decode("ascii")
    return pem


@functools.cache
def _anchors(pem: str) -> tuple[tuple[str, ...], int]:
    """The certificates of `pem` the API server takes in a bundle, each once, in order, and how many it would not
    (cached: certifi's roots are read once per process, as `bundle` reads them)."""
    out: dict[str, None] = {}
    certs = _certificates(pem)
    left = len(ca_certificates(pem)) - len(certs)
    for cert in certs:
        anchor = _anchor_pem(cert)
        if anchor is None:
            left += 1
        else:
            out[anchor] = None
    return tuple(out), left


def cluster_trust_bundle_names() -> list[str]:
    """The names of the project's ClusterTrustBundles (injection.clusterTrustBundle), in the plan's order."""
    return [f"{CTB_SIGNER.replace('/', ':')}:{CTB_BUNDLES[key]}" for key in (CORPORATE_KEY, MERGED_KEY)]


def cluster_trust_bundles(settings: Settings, roots: PublicRoots | None = None) -> list[Obj]:
    """injection.clusterTrustBundle: the corporate CA and the merged bundle as two cluster-scoped ClusterTrustBundles
    of the signer `CTB_SIGNER`, one per `CTB_LABEL` value (what `trust_volume` projects). Public roots the API
    server would refuse (no CA basic constraints, a negative serial number) are left out and counted in the
    annotation; the ConfigMaps' `ca-bundle.crt` still holds them."""
    if settings.trusted_ca is None:
        raise ValueError("proxy.upstream.trustedCa is not set: there is no trust bundle to render")
    made = bundle(settings.trusted_ca, roots or certifi_roots())
    corporate, _ = _anchors(made.corporate)
    kept, left = _anchors((roots or certifi_roots()).pem)
    merged = "".join(dict.fromkeys((*kept, *corporate)))
    refused = f"; {left} more that the API server refuses left out" if left else ""
    out: list[Obj] = []
    for key, pem, note in (
        (CORPORATE_KEY, "".join(corporate), None),
        (MERGED_KEY, merged, f"{made.source} ({len(kept)} certificates{refused})"),
    ):
        kind = CTB_BUNDLES[key]
        out.append(
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "ClusterTrustBundle",
                "metadata": {
                    "name": cluster_trust_bundle_names()[len(out)],
                    "labels": {
                        "app.kubernetes.io/part-of": "proxy-component",
                        "app.kubernetes.io/component": "trust-bundle",
                        CTB_LABEL: kind,
                    },
                    **({"annotations": {ROOTS_ANNOTATION: note}} if note else {}),
                },
                "spec": {"signerName": CTB_SIGNER, "trustBundle": pem},
            }
        )
    return out


def trust_manager_bundle(settings: Settings) -> Obj:
    """A trust-manager `Bundle` (injection.trustManager): trust-manager's default CAs plus the corporate CA, synced
    to a ConfigMap `proxy-component-trust` in every namespace, with JKS (password "changeit") and PKCS#12 beside."""
    if settings.trusted_ca is None:
        raise ValueError("proxy.upstream.trustedCa is not set: there is no trust bundle to render")
    return {
        "apiVersion": "trust.cert-manager.io/v1alpha1",
        "kind": "Bundle",
        "metadata": {"name": TRUST_MANAGER_BUNDLE, "labels": {"app.kubernetes.io/part-of": "proxy-component"}},
        "spec": {
            "sources": [{"useDefaultCAs": True}, {"inLine": settings.trusted_ca}],
            "target": {
                "configMap": {"key": MERGED_KEY},
                "additionalFormats": {"jks": {"key": "truststore.jks"}, "pkcs12": {"key": TRUSTSTORE_KEY}},
            },
        },
    }


def trust_env_pairs() -> list[tuple[str, str]]:
    """The trust group's variables: the merged bundle for those that replace a runtime's roots, the corporate CA
    alone for Node's, which adds to them."""
    merged, corporate = f"{MOUNT_PATH}/{MERGED_KEY}", f"{MOUNT_PATH}/{CORPORATE_KEY}"
    return [
        ("SSL_CERT_FILE", merged),  # OpenSSL (curl, Python's ssl, httpx, aiohttp, Ruby), Go
        ("REQUESTS_CA_BUNDLE", merged),  # requests (which otherwise uses certifi)
        ("CURL_CA_BUNDLE", merged),  # the curl tool
        ("NODE_EXTRA_CA_CERTS", corporate),  # Node, added to its built-in roots
    ]


def trust_env_vars() -> list[Obj]:
    return [{"name": name, "value": value} for name, value in trust_env_pairs()]


def trust_volume(settings: Settings | None = None) -> Obj:
    """The pod volume: `proxy-trust` (a missing ConfigMap keeps the Pod from starting, never runs it without). With
    injection.clusterTrustBundle, a projected volume of the same name and files: the two PEM files from the
    ClusterTrustBundles of the project's signer (the kubelet rewrites them in running pods when a bundle changes),
    the JVM's truststore from the ConfigMap."""
    if settings is None or not settings.injection.cluster_trust_bundle:
        return {"name": BUNDLE_NAME, "configMap": {"name": BUNDLE_NAME}}
    sources: list[Obj] = [
        {
            "clusterTrustBundle": {
                "signerName": CTB_SIGNER,
                "labelSelector": {"matchLabels": {CTB_LABEL: CTB_BUNDLES[key]}},
                "path": key,
            }
        }
        for key in (CORPORATE_KEY, MERGED_KEY)
    ]
    sources.append({"configMap": {"name": BUNDLE_NAME, "items": [{"key": TRUSTSTORE_KEY, "path": TRUSTSTORE_KEY}]}})
    return {"name": BUNDLE_NAME, "projected": {"sources": sources}}


def trust_volume_mount() -> Obj:
    return {"name": BUNDLE_NAME, "mountPath": MOUNT_PATH, "readOnly": True}


def _entries(container: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    found = container.get(key) or []
    return [e for e in found if isinstance(e, Mapping)] if isinstance(found, list) else []


def sets_trust_names(container: Mapping[str, Any]) -> bool:
    """The container sets one of the trust variables itself (even empty)."""
    return any(e.get("name") in TRUST_NAMES for e in _entries(container, "env"))


def mount_free(container: Mapping[str, Any]) -> bool:
    """No volumeMount of the container is at the mount path or of the volume's name."""
    return not any(
        m.get("name") == BUNDLE_NAME or str(m.get("mountPath", "")).rstrip("/") == MOUNT_PATH
        for m in _entries(container, "volumeMounts")
    )


def volume_free(pod_spec: Mapping[str, Any]) -> bool:
    """The Pod has no volume named `proxy-trust` other than this ConfigMap."""
    for volume in _entries(pod_spec, "volumes"):
        if volume.get("name") == BUNDLE_NAME:
            config = volume.get("configMap")
            if not (isinstance(config, Mapping) and config.get("name") == BUNDLE_NAME):
                return False
    return True


def receives_trust(container: Mapping[str, Any]) -> bool:
    """The container gets the trust group (in a Pod where `volume_free` holds): it sets none of the variables and
    mounts nothing at the path or of the name."""
    return not sets_trust_names(container) and mount_free(container)
