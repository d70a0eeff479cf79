"""An optional Kyverno ClusterPolicy that injects the proxy env into every Pod's containers.

One `foreach` entry per variable and container list, each guarded by a
precondition that the container does not set that name yet, so an existing
variable is never overwritten (a plain strategic merge, as in Giant Swarm's
policy, would replace it). Namespaces in `injection.excludeNamespaces`
(kube-system by default) and Pods annotated `<optOutAnnotation>: "false"` are
skipped. Rules match Pods only (autogen is off), so workload specs in Git stay
as written. With credentials the env reads `secretKeyRef`s, and a generate
rule clones `proxy-config` from the proxy's namespace into every namespace.
Ephemeral containers arrive through the `pods/ephemeralcontainers`
subresource, which a Pod CREATE rule never sees; a rule on that subresource
covers them.
"""

from __future__ import annotations

from typing import Any

from ..settings import Settings
from .env import CONFIG_NAME, ProxyValues, pod_env

__all__ = ["POLICY_NAME", "cluster_policy"]

Obj = dict[str, Any]

POLICY_NAME = "proxy-component-inject-env"

_LISTS = (
    ("containers", "Pod", True),
    ("initContainers", "Pod", False),
    ("ephemeralContainers", "Pod/ephemeralcontainers", False),
)


def _foreach(field: str, entry: Obj) -> Obj:
    name = entry["name"]
    return {
        "list": f"request.object.spec.{field}",
        "preconditions": {
            "all": [
                {"key": f"{{{{ element.env[?name=='{name}'] || `[]` | length(@) }}}}", "operator": "Equals", "value": 0}
            ]
        },
        "patchStrategicMerge": {"spec": {field: [{"(name)": "{{ element.name }}", "env": [entry]}]}},
    }


def _exclusions(settings: Settings, kind: str) -> Obj:
    injection = settings.injection
    # An empty `namespaces: []` clause would count as a match and exclude every Pod: leave it out instead.
    namespaces = (
        [{"resources": {"namespaces": list(injection.exclude_namespaces)}}] if injection.exclude_namespaces else []
    )
    return {
        "any": [*namespaces, {"resources": {"kinds": [kind], "annotations": {injection.opt_out_annotation: "false"}}}]
    }


def _inject_rule(settings: Settings, env: list[Obj], field: str, kind: str, always_present: bool) -> Obj:
    rule: Obj = {
        "name": f"inject-{field.lower()}",
        "match": {"any": [{"resources": {"kinds": [kind]}}]},
        "exclude": _exclusions(settings, kind),
    }
    if not always_present:
        # foreach over an absent list has failed in some Kyverno releases (kyverno#2552): guard the rule.
        rule["preconditions"] = {
            "all": [
                {
                    "key": f"{{{{ request.object.spec.{field}[] || `[]` | length(@) }}}}",
                    "operator": "GreaterThanOrEquals",
                    "value": 1,
                }
            ]
        }
    rule["mutate"] = {"foreach": [_foreach(field, entry) for entry in env]}
    return rule


def _clone_exclusions(settings: Settings) -> list[str]:
    return sorted({*settings.injection.exclude_namespaces, settings.deployment.namespace, *settings.namespaces})


def _clone_rule(settings: Settings) -> Obj:
    return {
        "name": "clone-proxy-config",
        "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
        # Not the source's namespace, nor those where this component already manages proxy-config.
        "exclude": {"any": [{"resources": {"names": _clone_exclusions(settings)}}]},
        "generate": {
            "generateExisting": True,
            "apiVersion": "v1",
            "kind": "Secret",
            "name": CONFIG_NAME,
            "namespace": "{{ request.object.metadata.name }}",
            "synchronize": True,
            "clone": {"namespace": settings.deployment.namespace, "name": CONFIG_NAME},
        },
    }


def cluster_policy(settings: Settings, values: ProxyValues) -> Obj:
    """The ClusterPolicy; `values` are used as literals only when the URLs carry no credentials."""
    env = pod_env(settings, values)
    rules = [_clone_rule(settings)] if settings.has_credentials else []
    rules += [_inject_rule(settings, env, field, kind, present) for field, kind, present in _LISTS]
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": POLICY_NAME,
            "annotations": {
                "policies.kyverno.io/title": "Inject HTTP proxy environment",
                "policies.kyverno.io/description": (
                    "Adds HTTP_PROXY, HTTPS_PROXY and NO_PROXY (both spellings) to every container that does "
                    "not set them, outside the excluded namespaces and unless the Pod opts out."
                ),
                "pod-policies.kyverno.io/autogen-controllers": "none",
            },
            "labels": {"app.kubernetes.io/part-of": "proxy-component"},
        },
        # Injection only adds env: when Kyverno is down, a Pod created without it beats every Pod creation
        # in the cluster failing (Kyverno's default, Fail); such a Pod lacks the env until it is recreated.
        "spec": {"background": False, "failurePolicy": "Ignore", "rules": rules},
    }
