"""The commands that read a live cluster: `check` (what drifted), `check --probe` (egress through each node's
proxy), each a small module over the shared reads of `cluster` and the accesses and role of `access`.

The official `kubernetes` client is imported only when `connect` is called (the `check` extra).
"""

from .access import CHECK_NAME, accesses, rbac_objects
from .check import Finding, check_cluster
from .cluster import Access, Api, CheckError, Cluster, connect, scrub
from .probe import probe_cluster

__all__ = [
    "CHECK_NAME",
    "Access",
    "Api",
    "CheckError",
    "Cluster",
    "Finding",
    "accesses",
    "check_cluster",
    "connect",
    "probe_cluster",
    "rbac_objects",
    "scrub",
]
