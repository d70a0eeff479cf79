"""Which Kyverno the cluster runs, for what its release decides about the policies this project renders (issue 45).

Kyverno 1.20 ends legacy policy execution (kyverno/kyverno #17701, #17708): a `ClusterPolicy` enforces nothing any
more, and Kyverno's webhook denies every create or update of one, an unchanged re-apply included; 1.21 stops
shipping the legacy CRDs (#17718). So `injection.kyvernoPolicy: ClusterPolicy` injects nothing from 1.20 on.

The version is the tag of the admission controller's image: the Deployment `kyverno-admission-controller` that the
Helm chart makes in Kyverno's namespace (`kyverno`, release `kyverno`, as Kyverno's docs install it), whose container
`kyverno` runs `<registry>/kyverno/kyverno:<appVersion>`. It is read by name, so `check`'s role grants a `get` of
that one name (a ClusterRole: no Role in a namespace that may not exist). A digest-pinned image keeps its tag
(`...:v1.20.0@sha256:...`); an image without a readable tag, or no such Deployment, leaves the version unknown and
nothing is said.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "KYVERNO_DEPLOYMENT",
    "KYVERNO_NAMESPACE",
    "LEGACY_ENDS",
    "kyverno_version",
    "legacy_ended",
    "legacy_policy_message",
    "version_of",
]

KYVERNO_NAMESPACE = "kyverno"
KYVERNO_DEPLOYMENT = "kyverno-admission-controller"
LEGACY_ENDS = (1, 20)  # the first release that no longer runs ClusterPolicy
_TAG = re.compile(r":v?(\d+)\.(\d+)\.(\d+)(?:[-+][0-9A-Za-z.-]*)?(?:@sha256:[0-9a-f]+)?$")


Found = tuple[tuple[int, int, int], str]  # the version, and the Deployment that said so (`namespace/name`)


def version_of(deployment: Mapping[str, Any]) -> Found | None:
    """The Kyverno version of the admission controller's Deployment as the API server returns it; None when it runs
    no tagged `kyverno/kyverno` image."""
    metadata = deployment.get("metadata") or {}
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    for container in containers:
        image = str(container.get("image", ""))
        repository = image.split("@", 1)[0].rsplit(":", 1)[0]
        match = _TAG.search(image) if repository.endswith("kyverno/kyverno") else None
        if match:
            version = (int(match.group(1)), int(match.group(2)), int(match.group(3)))
            return version, f"{metadata.get('namespace')}/{metadata.get('name')}"
    return None


def legacy_ended(found: Found | None) -> bool:
    """That Kyverno no longer runs legacy policies (1.20 or later)."""
    return found is not None and found[0][:2] >= LEGACY_ENDS


def kyverno_version(api: Any) -> Found | None:
    """The cluster's Kyverno version from its admission controller's Deployment (the stack program's read, with
    the official client); None when it cannot be read or there is none."""
    from kubernetes import client

    try:
        response: Any = client.AppsV1Api(api).read_namespaced_deployment(
            KYVERNO_DEPLOYMENT, KYVERNO_NAMESPACE, _request_timeout=10, _preload_content=False
        )
        deployment = json.loads(response.data)
    except Exception:  # none (404), forbidden, unreachable: nothing is said
        return None
    return version_of(deployment) if isinstance(deployment, dict) else None


def legacy_policy_message(version: tuple[int, int, int], where: str) -> str:
    """Why a ClusterPolicy injects nothing under this Kyverno, and what to do."""
    shown = ".".join(str(part) for part in version)
    return (
        f"the cluster runs Kyverno {shown} ({where}), which no longer runs legacy policies: a ClusterPolicy enforces "
        "nothing, and Kyverno denies every create or update of one (kyverno/kyverno#17701), so no pod gets the proxy "
        "variables from it: remove injection.kyvernoPolicy (the default renders a MutatingPolicy and "
        "GeneratingPolicies, Kyverno 1.17 or later) and run `pulumi up`, which deletes the ClusterPolicy"
    )
