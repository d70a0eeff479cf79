"""Adopting objects that already exist: who owns each one the plan names, what the stack may take, and what it
leaves behind (issue 44; docs/guides/adopting.md).

The stack program reads each object of the plan before it registers anything:

- **Ours**: it carries `proxy-component.io/owner` with this stack's `org/project/stack` (every object the component
  makes does), or, made before that annotation, a pulumi-kubernetes field manager while this stack has deployed.
  Nothing to say.
- **Another owner's**: another stack's annotation, another Pulumi program's field manager, a Helm release, an Argo CD
  or Flux object. Refused by name, `adoptExisting` or not, unless `proxy-component:adoptFrom` names that owner.
- **Nobody's** (kubectl, a script): taken with Pulumi's own `import` when `proxy-component:adoptExisting` is true,
  so the preview shows each as `= import` and its diff as `~ update`; otherwise refused with what to do.

For an import, `up` first hands kubectl's field managers' fields to `before-first-apply`, which pulumi-kubernetes
moves to its own manager on its update (pkg/await/await.go, fixCSAFieldManagers): so the fields the stack does not
set (the runbook's `args`, kubectl's `last-applied-configuration`) go with that update instead of staying under
kubectl's name. A preview changes nothing; it says what the update removes, which changes roll the proxy's pods, and
what stays behind (objects the live DaemonSet mounts that the plan does not make, other managers' fields).

Pure reads and one JSON patch of `metadata.managedFields`, with the official client; no `pulumi` here.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..render.plan import OWNER_ANNOTATION, Planned

__all__ = [
    "HANDED_OVER",
    "Adoption",
    "Existing",
    "decide",
    "fields_not_set",
    "hand_over",
    "is_kubectl",
    "kubectl_fields_missing",
    "left_behind_objects",
    "object_path",
    "read_existing",
    "request",
    "status_message",
    "template_changes",
]

# What pulumi-kubernetes takes over on its first update (fixCSAFieldManagers): the name the other managers' fields
# are handed to.
HANDED_OVER = "before-first-apply"
_PULUMI = "pulumi-kubernetes"
_TIMEOUT = 10
_HELM_RELEASE = ("meta.helm.sh/release-namespace", "meta.helm.sh/release-name")
_ARGO = "argocd.argoproj.io/tracking-id"
_FLUX = ("kustomize.toolkit.fluxcd.io/namespace", "kustomize.toolkit.fluxcd.io/name")
_FLUX_HELM = ("helm.toolkit.fluxcd.io/namespace", "helm.toolkit.fluxcd.io/name")


def _plural(kind: str) -> str:
    lower = kind.lower()
    return f"{lower[:-1]}ies" if lower.endswith("y") else f"{lower}s"


def object_path(api_version: str, kind: str, namespace: str | None, name: str) -> str:
    """The REST path of one object (`/api/v1/namespaces/kube-system/services/http-proxy`)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{scope}/{_plural(kind)}/{name}"


def request(
    api: Any,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> Any:
    """One call to the API server through the official client's `ApiClient` (its auth, TLS and proxy settings), the
    answer's JSON; an `ApiException` with the status for an answer that is not 2xx. Both generations of the client:
    `call_api(resource_path, method, ...)` before kubernetes 35, `param_serialize` then `call_api(method, url, ...)`."""
    import inspect

    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json", "Content-Type": content_type}
    if "resource_path" in inspect.signature(api.call_api).parameters:
        response = api.call_api(
            path, method, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"],
            _preload_content=False, _return_http_data_only=True, _request_timeout=_TIMEOUT,
        )  # fmt: skip
        return json.loads(response.data)
    method, url, headers, body, post = api.param_serialize(
        method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, body=body, post_params=post, _request_timeout=_TIMEOUT)
    data = response.read()
    if not 200 <= response.status < 300:
        raise ApiException(status=response.status, reason=response.reason, body=data)
    return json.loads(data)


def status_message(exc: Exception) -> str:
    """The API server's own message of a failed call (its Status), else the status or the error's type."""
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, AttributeError):
        message = None
    status = getattr(exc, "status", None)
    return f"{status}: {message}" if message else str(status or type(exc).__name__)


def is_kubectl(manager: str) -> bool:
    """kubectl's field managers (`kubectl-client-side-apply`, `kubectl-create`, ...), whose fields the import takes."""
    return manager == "kubectl" or manager.startswith("kubectl-") or manager == HANDED_OVER


@dataclass(frozen=True)
class Existing:
    """One object of the plan as the cluster holds it."""

    kind: str
    api_version: str
    namespace: str | None
    name: str
    obj: Mapping[str, Any]

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.obj.get("metadata") or {}

    @property
    def label(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    @property
    def import_id(self) -> str:
        """The id pulumi-kubernetes gives the object, and so its `import` id."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def entries(self) -> list[Mapping[str, Any]]:
        return [e for e in self.metadata.get("managedFields") or [] if isinstance(e, Mapping)]

    @property
    def managers(self) -> list[str]:
        """The field managers of the object itself (not of its status), in the API server's order, once each."""
        names: list[str] = []
        for entry in self.entries:
            name = str(entry.get("manager", ""))
            if not entry.get("subresource") and name not in names:
                names.append(name)
        return names

    def owner(self) -> tuple[str, str] | None:
        """(the `adoptFrom` value that names it, how it was told) of whoever else claims the object, from the
        annotation this project adds, then Helm's, Argo CD's and Flux's marks, then a Pulumi field manager; None
        when nobody does (kubectl, a script). The annotation's own value may be this stack (`decide` says)."""
        annotations = self.metadata.get("annotations") or {}
        labels = self.metadata.get("labels") or {}
        if OWNER_ANNOTATION in annotations:
            value = str(annotations[OWNER_ANNOTATION])
            return value, f"stack {value} (annotation {OWNER_ANNOTATION})"
        if labels.get("app.kubernetes.io/managed-by") == "Helm" or all(k in annotations for k in _HELM_RELEASE):
            release = "/".join(str(annotations.get(k, "?")) for k in _HELM_RELEASE)
            return f"helm:{release}", f"Helm release {release} (annotations meta.helm.sh/release-*)"
        if _ARGO in annotations:
            app = str(annotations[_ARGO]).split(":", 1)[0]
            return f"argocd:{app}", f"Argo CD application {app} (annotation {_ARGO})"
        for keys, what in ((_FLUX, "Flux Kustomization"), (_FLUX_HELM, "Flux HelmRelease")):
            if all(k in labels for k in keys):
                ref = "/".join(str(labels[k]) for k in keys)
                return f"flux:{ref}", f"{what} {ref} (labels {keys[1].split('/')[0]}/*)"
        pulumi = [m for m in self.managers if m.startswith(_PULUMI)]
        if pulumi:
            return pulumi[0], f"a Pulumi program (field manager {pulumi[0]}, no {OWNER_ANNOTATION} annotation)"
        return None


def read_existing(planned: list[Planned], api: Any) -> list[Existing]:
    """The plan's workload objects that exist. An object that cannot be read (forbidden, unreachable) is left to the
    engine, which fails on it if it is in the way."""
    found: list[Existing] = []
    for p in planned:
        if p.cluster != "workload":
            continue
        meta = p.obj["metadata"]
        kind, api_version = str(p.obj["kind"]), str(p.obj["apiVersion"])
        namespace, name = meta.get("namespace"), str(meta["name"])
        path = object_path(api_version, kind, namespace, name)
        try:
            obj = request(api, "GET", path)
        except Exception:  # ApiException with its status (404: none), or unreachable
            continue
        if isinstance(obj, Mapping):
            found.append(Existing(kind, api_version, namespace, name, obj))
    return found


@dataclass
class Adoption:
    """What the stack does with the objects that exist: import them (`imports`; with `adoptExisting` its own too, for
    which the engine imports nothing while they are in its state), take them from nobody or `adoptFrom` (`taken`, also
    in `imports`), or refuse (`problems`)."""

    imports: list[Existing] = field(default_factory=list)
    taken: list[Existing] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def decide(
    existing: list[Existing], me: str, adopt: bool, adopt_from: str | None, deployed: bool, where: str
) -> Adoption:
    """For each existing object: ours (nothing), another owner's (refused unless `adopt_from` names it), or nobody's
    (imported with `adopt`, refused without). `deployed`: this stack has deployed before, so an object with a Pulumi
    field manager and no owner annotation is this stack's own from before the annotation."""
    result = Adoption()
    for item in existing:
        owner = item.owner()
        if owner is not None and owner[0] == me:
            if adopt:
                result.imports.append(item)  # in the state already: the engine imports nothing
            continue
        if owner is not None and owner[0].startswith(_PULUMI) and deployed:
            if adopt:
                result.imports.append(item)
            continue
        if owner is not None and owner[0] != adopt_from:
            result.problems.append(
                f"{item.label}: already exists in the cluster ({where}) and belongs to {owner[1]}; this stack "
                f"({me}) never takes another owner's object, adoptExisting or not: remove it from that owner first "
                f"(another stack: `pulumi state delete` of it there, or destroy that stack), or, if that owner is "
                f"gone for good, set proxy-component:adoptFrom: {owner[0]!r}"
            )
        elif owner is None and not adopt:
            made_by = ", ".join(item.managers) or "no field manager"
            result.problems.append(
                f"{item.label}: already exists in the cluster ({where}), made by {made_by}, and this stack does not "
                "own it, so `pulumi up` would fail on AlreadyExists: set proxy-component:adoptExisting: true to "
                "import it (the preview then shows each import with its diff; docs/guides/adopting.md), or delete it"
            )
        else:
            result.imports.append(item)
            result.taken.append(item)
    return result


def _union(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _union(out[key], value)
        else:
            out.setdefault(key, value)
    return out


def handed_over_entries(item: Existing) -> list[dict[str, Any]] | None:
    """`metadata.managedFields` with kubectl's entries (and an earlier `before-first-apply`) merged into one
    `before-first-apply` Update entry; None when there is nothing to hand over."""
    taken = [e for e in item.entries if not e.get("subresource") and is_kubectl(str(e.get("manager", "")))]
    if not taken or [str(e.get("manager")) for e in taken] == [HANDED_OVER]:
        return None
    fields: dict[str, Any] = {}
    for entry in taken:
        fields = _union(fields, entry.get("fieldsV1") or {})
    kept = [dict(e) for e in item.entries if not any(e is t for t in taken)]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    merged = {
        "manager": HANDED_OVER,
        "operation": "Update",
        "apiVersion": item.api_version,
        "time": stamp,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    return [*kept, merged]


def hand_over(item: Existing, api: Any) -> bool:
    """Give kubectl's fields of `item` to `before-first-apply` (one JSON patch, conditional on the version read);
    False when there was nothing to hand over."""
    entries = handed_over_entries(item)
    if entries is None:
        return False
    patch = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": item.metadata.get("resourceVersion")},
        {"op": "replace", "path": "/metadata/managedFields", "value": entries},
    ]
    path = object_path(item.api_version, item.kind, item.namespace, item.name)
    query = [("fieldManager", "proxy-component-adopt")]
    request(api, "PATCH", path, query=query, body=patch, content_type="application/json-patch+json")
    return True


def _key_matches(element: Any, key: Mapping[str, Any]) -> bool:
    return isinstance(element, Mapping) and all(element.get(k) == v for k, v in key.items())


def _describe_key(key: Mapping[str, Any]) -> str:
    return ",".join(f"{v}" for v in key.values())


def _missing(fields: Mapping[str, Any], value: Any, path: str) -> Iterator[str]:
    """The paths under `fields` (a FieldsV1 tree) that `value` does not hold, each at its first missing level."""
    for key, sub in fields.items():
        if key == ".":
            continue
        if key.startswith("f:"):
            name = key[2:]
            child_path = f"{path}.{name}" if path else name
            if not isinstance(value, Mapping) or name not in value:
                yield child_path
            elif isinstance(sub, Mapping) and sub:
                yield from _missing(sub, value[name], child_path)
        elif key.startswith("k:"):
            try:
                wanted = json.loads(key[2:])
            except ValueError:
                continue
            match = next((e for e in value if _key_matches(e, wanted)), None) if isinstance(value, list) else None
            child_path = f"{path}[{_describe_key(wanted)}]"
            if match is None:
                yield child_path
            elif isinstance(sub, Mapping) and sub:
                yield from _missing(sub, match, child_path)
        elif key.startswith("v:"):
            try:
                wanted_value = json.loads(key[2:])
            except ValueError:
                continue
            if not isinstance(value, list) or wanted_value not in value:
                yield f"{path}[{wanted_value}]"


def fields_not_set(item: Existing, planned_obj: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per field manager of the object: the fields it holds that the plan does not set. kubectl's go with the
    import's update (`hand_over`); any other manager's stay."""
    out: dict[str, list[str]] = {}
    for entry in item.entries:
        if entry.get("subresource"):
            continue
        manager = str(entry.get("manager", ""))
        if manager.startswith(_PULUMI):
            continue
        paths = [p for p in _missing(entry.get("fieldsV1") or {}, planned_obj, "") if not p.startswith("status")]
        if paths:
            out.setdefault(manager, [])
            out[manager] += [p for p in paths if p not in out[manager]]
    return out


def kubectl_fields_missing(item: Existing, after: Mapping[str, Any]) -> list[str]:
    """The fields kubectl's managers hold on the live object that `after` (the dry run of the stack's object, the API
    server's defaults applied) no longer has: what the import's update removes."""
    out: list[str] = []
    for entry in item.entries:
        if entry.get("subresource") or not is_kubectl(str(entry.get("manager", ""))):
            continue
        out += [p for p in _missing(entry.get("fieldsV1") or {}, after, "") if p not in out]
    return out


def _mounted(pod_spec: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The ConfigMaps and Secrets a pod spec mounts or reads its environment from, as (kind, name)."""
    found: set[tuple[str, str]] = set()
    for volume in pod_spec.get("volumes") or []:
        if not isinstance(volume, Mapping):
            continue
        if isinstance(volume.get("configMap"), Mapping):
            found.add(("ConfigMap", str(volume["configMap"].get("name"))))
        if isinstance(volume.get("secret"), Mapping):
            found.add(("Secret", str(volume["secret"].get("secretName"))))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if isinstance(source, Mapping) and isinstance(source.get("configMap"), Mapping):
                found.add(("ConfigMap", str(source["configMap"].get("name"))))
            if isinstance(source, Mapping) and isinstance(source.get("secret"), Mapping):
                found.add(("Secret", str(source["secret"].get("name"))))
    for container in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        for source in (container.get("envFrom") or []) if isinstance(container, Mapping) else []:
            if isinstance(source.get("configMapRef"), Mapping):
                found.add(("ConfigMap", str(source["configMapRef"].get("name"))))
            if isinstance(source.get("secretRef"), Mapping):
                found.add(("Secret", str(source["secretRef"].get("name"))))
    return found


def left_behind_objects(item: Existing, planned_obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The ConfigMaps and Secrets the live DaemonSet uses that the planned one does not: nothing deletes them."""
    live = ((item.obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    new = ((planned_obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return sorted(_mounted(live) - _mounted(new))


def template_changes(before: Any, after: Any, path: str = "spec.template") -> list[str]:
    """The paths where two pod templates (both as the API server defaults them) differ: any one rolls the pods."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            out += template_changes(before.get(key), after.get(key), f"{path}.{key}")
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        named = all(isinstance(x, Mapping) and "name" in x for x in [*before, *after])
        out = []
        for index, (b, a) in enumerate(zip(before, after, strict=True)):
            label = b["name"] if named and b.get("name") == a.get("name") else str(index)
            out += template_changes(b, a, f"{path}[{label}]")
        return out
    return [] if before == after else [path]
