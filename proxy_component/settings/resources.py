"""What the proxy's containers may use: Kubernetes quantities, `Resources`, tinyproxy's measured memory per
connection and the memory limit derived from it, and the sizing of maxClients (its loopback reserve, its step)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from .base import _Model

LOOPBACK_RESERVE = 32  # of maxClients, kept for the node's own processes (at most an eighth of maxClients)
MAX_CLIENTS_STEP = 256  # a derived maxClients is rounded up to a multiple of this


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
