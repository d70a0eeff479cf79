"""Cloud discovery: a cluster resource (or an existing cluster's name) in, a ClusterNetwork of Outputs out.

One module per cloud (`eks`, `gke`, `aks`); each imports its cloud SDK lazily,
inside the functions that need it, so `import proxy_component` (and this
package) never loads one. See docs/discovery.md for what each cloud gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any, TypeVar, cast

import pulumi
from pulumi.output import UNKNOWN

from .network import ClusterNetwork

__all__ = ["ClusterNetwork", "aks", "cloud_sdk", "eks", "gke", "required"]

T = TypeVar("T")

_CLOUD_MODULES = ("aks", "eks", "gke")


@contextmanager
def cloud_sdk(extra: str, package: str) -> Iterator[None]:
    """Import a cloud SDK inside this block; when it is missing, the ImportError names the extra that installs it."""
    try:
        yield
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != package:
            raise
        raise ImportError(
            f"{package} is not installed ({exc}); cloud discovery needs it: pip install 'proxy-component[{extra}]'",
            name=package,
        ) from exc


def required(value: T | None, where: str) -> T:
    """A cluster attribute discovery cannot do without: unknown while a preview has no value yet, else an error.

    A preview of a cluster that does not exist yet may show such an attribute as
    absent; it is then left unknown, so that the preview neither fails nor drops
    the entries it will have.
    """
    if value is not None and value != "":
        return value
    if pulumi.runtime.is_dry_run():
        return cast(T, UNKNOWN)
    raise ValueError(f"{where}: not set on the cluster, so discovery cannot read it (give it explicitly instead)")


def __getattr__(name: str) -> Any:
    if name in _CLOUD_MODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
