"""The network object that discovery returns and ClusterProxy accepts: a cluster's ranges and endpoints as Inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pulumi

from ..settings import NETWORK_FIELDS, NetworkValues

__all__ = ["ClusterNetwork", "StrList"]

StrList = pulumi.Input[Sequence[pulumi.Input[str]]] | pulumi.Input[str] | None


@dataclass(frozen=True, kw_only=True)
class ClusterNetwork:
    """A cluster's network as Inputs, e.g. Outputs of an EKS/GKE/AKS cluster created in the same program.

    Each list field takes a list of strings or a single string, plain or as
    Inputs. They add to the explicit `cluster.*` settings; `origin` names them
    in provenance and in error messages. `cloud_entries` are the cloud's
    metadata endpoints and DNS suffixes; `ip_family` (`ipv4`, `ipv6`, `dual`)
    sets the Service's families unless `cluster.ipFamily` is set. The
    `discovery` package builds these from cluster resources.
    """

    pod_cidrs: StrList = None
    service_cidrs: StrList = None
    node_cidrs: StrList = None
    api_server_hosts: StrList = None
    api_server_ips: StrList = None
    cloud_entries: StrList = None
    ip_family: pulumi.Input[str] | None = None
    origin: str = "network"
    origins: Mapping[str, str] = field(default_factory=dict)

    @property
    def gives_allow_sources(self) -> bool:
        return self.pod_cidrs is not None or self.node_cidrs is not None

    def override(self, origin: str = "override", **fields: Any) -> ClusterNetwork:
        """A copy with some fields replaced by explicit values, which provenance names `origin`."""
        unknown = sorted(set(fields) - set(NETWORK_FIELDS) - {"ip_family"})
        if unknown:
            raise TypeError(
                f"ClusterNetwork.override: unknown fields {unknown} (accepted: {', '.join(NETWORK_FIELDS)}, ip_family)"
            )
        origins = {**self.origins, **{name: origin for name in fields}}
        return replace(self, origins=origins, **fields)

    def values(self) -> pulumi.Output[NetworkValues]:
        """The Inputs resolved into the plain values the settings compose, with their origins."""
        origin, origins = self.origin, dict(self.origins)

        def resolve(resolved: dict[str, Any]) -> NetworkValues:
            lists = {name: _as_list(resolved[name]) for name in NETWORK_FIELDS}
            return NetworkValues(origin=origin, origins=origins, **lists)

        return pulumi.Output.all(**{name: getattr(self, name) for name in NETWORK_FIELDS}).apply(resolve)


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]
