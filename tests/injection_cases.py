"""The shared table of injection cases (tests/fixtures/injection-cases.yaml) and what the stack transform makes of
each: the reference every other implementation (the MutatingAdmissionPolicy, the Kyverno policies) is held to."""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml

from proxy_component.render import plain_values
from proxy_component.render.digest import VALUES_ANNOTATION
from proxy_component.render.trust import BUNDLE_NAME
from proxy_component.settings import Settings, parse_settings
from proxy_component.transform import proxy_env_transform
from tests.pki import make_ca

TABLE = Path(__file__).resolve().parent / "fixtures" / "injection-cases.yaml"
Obj = dict[str, Any]
FIELDS = ("initContainers", "containers")


@dataclass(frozen=True)
class Case:
    name: str
    namespace: str
    annotations: dict[str, str]
    spec: Obj

    def pod(self, name: str | None = None) -> Obj:
        """The Pod as a user writes it (no ServiceAccount token, so no admission plugin adds a volume)."""
        metadata: Obj = {"name": name or self.name, "namespace": self.namespace}
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        spec = {"automountServiceAccountToken": False, **copy.deepcopy(self.spec)}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@functools.cache
def _raw() -> Obj:
    loaded: Obj = yaml.safe_load(TABLE.read_text())
    return loaded


@functools.cache
def _ca() -> str:
    return make_ca("Injection Table CA").cert_pem


def profile_raw(name: str) -> Obj:
    """A profile's settings as a user writes them (the generated CA in place)."""
    raw: Obj = copy.deepcopy(_raw()["profiles"][name])
    upstream = raw.get("proxy", {}).get("upstream", {})
    if upstream.get("trustedCa") == "GENERATED":
        upstream["trustedCa"] = _ca()
    return raw


def profile_settings(name: str) -> Settings:
    return parse_settings(profile_raw(name))


def profiles() -> list[str]:
    return list(_raw()["profiles"])


def namespaces() -> list[str]:
    return list(_raw()["namespaces"])


def cases() -> list[Case]:
    out = []
    for raw in _raw()["cases"]:
        spec = {key: raw[key] for key in ("volumes", "initContainers", "containers") if key in raw}
        out.append(Case(raw["name"], raw["namespace"], dict(raw.get("annotations") or {}), spec))
    return out


@dataclass(frozen=True)
class EphemeralCase:
    """Ephemeral containers added, one UPDATE of `pods/ephemeralcontainers` each, to the Pod of case `pod`."""

    name: str
    pod: str
    containers: list[Obj]


def ephemeral_cases() -> list[EphemeralCase]:
    return [EphemeralCase(raw["name"], raw["pod"], raw["ephemeralContainers"]) for raw in _raw()["ephemeral"]]


def _own_bundle(pod_spec: Obj) -> bool:
    return any(
        v.get("name") == BUNDLE_NAME and (v.get("configMap") or {}).get("name") == BUNDLE_NAME
        for v in pod_spec.get("volumes") or []
    )


def ephemeral_transformed(settings: Settings, admitted: Obj, containers: list[Obj]) -> list[Obj]:
    """`containers` as the stack transform renders ephemeral containers in the Pod `admitted` (as created and
    admitted): what a container of that Pod gets, with the trust group only where the Pod has the `proxy-trust`
    ConfigMap volume already, since a running Pod's volumes cannot change (a stand-in foreign volume of that name
    tells the transform so, as a user's own volume would)."""
    volumes = list(admitted["spec"].get("volumes") or [])
    if not _own_bundle(admitted["spec"]):
        volumes.append({"name": BUNDLE_NAME, "emptyDir": {}})
    metadata = {k: admitted["metadata"][k] for k in ("name", "namespace", "annotations") if k in admitted["metadata"]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
           "spec": {"volumes": volumes, "ephemeralContainers": copy.deepcopy(containers)}}  # fmt: skip
    out: list[Obj] = transformed(settings, pod)["spec"]["ephemeralContainers"]
    return out


def transformed(settings: Settings, pod: Obj) -> Obj:
    """The Pod as the stack transform renders it (unchanged when the transform leaves it alone)."""
    transform = proxy_env_transform(settings, plain_values(settings))
    args = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:core/v1:Pod", name="x", props=copy.deepcopy(pod), opts=pulumi.ResourceOptions()
    )
    result = transform(args)
    return copy.deepcopy(pod) if result is None else dict(result.props)


def _stored(entry: Obj) -> Obj:
    """An env entry as the API server stores it: an empty `value` is left out (Go's omitempty)."""
    return {k: v for k, v in entry.items() if not (k == "value" and v == "")}


def container_parts(containers: list[Obj]) -> list[Obj]:
    """Each container's name, env (as stored) and volumeMounts, in order."""
    return [
        {
            "name": c["name"],
            "env": [_stored(e) for e in c.get("env") or []],
            "volumeMounts": c.get("volumeMounts") or [],
        }
        for c in containers
    ]


def injected_parts(pod_spec: Obj) -> Obj:
    """What injection touches, to compare field by field and in order: each container's name, env and volumeMounts
    (by list), and the Pod's volumes as name and ConfigMap name (the API server defaults `defaultMode`)."""
    out: Obj = {field: container_parts(pod_spec.get(field) or []) for field in FIELDS}
    out["volumes"] = [
        {"name": v["name"], "configMap": (v.get("configMap") or {}).get("name")} for v in pod_spec.get("volumes") or []
    ]
    return out


def stamp(obj: Obj) -> str | None:
    """The values digest a Pod (or a template's metadata holder) was stamped with, None without one."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    found: str | None = annotations.get(VALUES_ANNOTATION)
    return found
