"""Cloud discovery: a cluster resource (or an existing cluster's name) in, a ClusterNetwork of Outputs out.

One module per cloud (`eks`, `gke`, `aks`); each imports its cloud SDK lazily,
so `import proxy_component` never loads one.
"""

from __future__ import annotations

from .network import ClusterNetwork

__all__ = ["ClusterNetwork"]
