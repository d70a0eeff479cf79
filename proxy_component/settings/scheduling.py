"""Scheduling: the Kubernetes types a pod spec takes, validated as the API server validates them (tolerations,
node affinity), the PriorityClass, and the OS label the proxy selects nodes by."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .base import _Model
from .names import _DNS_NAME, LabelKey, LabelValue

OS_LABEL = "kubernetes.io/os"


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
