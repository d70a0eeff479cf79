"""The shared reads of a live cluster: one `Cluster` (the official `kubernetes` client's APIs, imported on use, and
the requests made through them), lists page by page as the API server's JSON, gets by name, the API kinds the
commands read (`Api`, each one RBAC verb on one resource) and the errors a user can act on (`CheckError`,
`explain`), and `scrub`, which keeps credentials out of anything printed.

Every request goes through `Cluster`, which counts it and records its `Access`: the tests compare what a command
did with the role `access.rbac_objects` renders for it.
"""

from __future__ import annotations

import gc
import inspect
import json
import os
import queue
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from pydantic_core import from_json

from ..settings import Settings, redact_url

PAGE = 500  # objects per list call
LOG_CHUNK = 1 << 16  # bytes of a streamed log read at a time (`Cluster.log_lines`)
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"  # a list's items' metadata
Obj = dict[str, Any]


class CheckError(Exception):
    """The cluster cannot be read (unreachable, unknown context, refused, forbidden): a message a user can act on."""


class Api(NamedTuple):
    """A kind of object check reads: its API group and resource (for RBAC), and the client and method that read it."""

    group: str
    resource: str
    client: str  # "core", "apps", "batch", "networking", "policy", "certificates" or "custom" (CustomObjectsApi)
    method: str  # list_... (RBAC verb list), create_, delete_, patch_ (theirs), else read_/get_ (RBAC verb get)
    metadata_only: bool = False  # a list of the items' metadata alone (PartialObjectMetadataList)

    @property
    def verb(self) -> str:
        for prefix, verb in (("list_", "list"), ("create_", "create"), ("delete_", "delete"), ("patch_", "patch")):
            if self.method.startswith(prefix):
                return verb
        return "get"


NODES = Api("", "nodes", "core", "list_node")
NAMESPACES = Api("", "namespaces", "core", "read_namespace")
SERVICE_CIDRS = Api("networking.k8s.io", "servicecidrs", "networking", "list_service_cidr")
SERVICES = Api("", "services", "core", "read_namespaced_service")
DAEMON_SET = Api("apps", "daemonsets", "apps", "read_namespaced_daemon_set")
PODS = Api("", "pods", "core", "list_namespaced_pod")
ALL_PODS = Api("", "pods", "core", "list_pod_for_all_namespaces")
CONFIG_MAPS = Api("", "configmaps", "core", "read_namespaced_config_map")
SECRETS = Api("", "secrets", "core", "read_namespaced_secret")
# `check --probe`: its pods in their own namespace (any name: each run's are new), their logs and the proxy's.
PROBE_CREATE = Api("", "pods", "core", "create_namespaced_pod")
PROBE_DELETE = Api("", "pods", "core", "delete_namespaced_pod")
POD_LOGS = Api("", "pods/log", "core", "read_namespaced_pod_log")
# The kinds the stack transform writes the env into (a Deployment's ReplicaSets and Pods follow its template).
REPLICA_SETS = Api("apps", "replicasets", "apps", "list_namespaced_replica_set")
# A pod's Deployment: the ReplicaSets' owner references alone, without their templates (at 20,000 ReplicaSets a
# quarter fewer bytes for kube-apiserver to encode and this process to parse).
REPLICA_SET_OWNERS = REPLICA_SETS._replace(metadata_only=True)
JOBS = Api("batch", "jobs", "batch", "list_namespaced_job")  # a pod's CronJob
WORKLOADS: dict[str, Api] = {
    "Deployment": Api("apps", "deployments", "apps", "list_namespaced_deployment"),
    "StatefulSet": Api("apps", "statefulsets", "apps", "list_namespaced_stateful_set"),
    "DaemonSet": Api("apps", "daemonsets", "apps", "list_namespaced_daemon_set"),
    "Job": JOBS,
    "CronJob": Api("batch", "cronjobs", "batch", "list_namespaced_cron_job"),
}

# `rollout`: the ReplicaSets behind pods, the kinds it restarts (read by name while it waits, patched to restart), the
# pods it evicts, the PodDisruptionBudgets it respects, and (rollout --capi, in the management cluster) a Cluster API
# cluster and its MachineDeployments.
RESTARTED: dict[str, Api] = {
    "Deployment": Api("apps", "deployments", "apps", "patch_namespaced_deployment"),
    "StatefulSet": Api("apps", "statefulsets", "apps", "patch_namespaced_stateful_set"),
    "DaemonSet": Api("apps", "daemonsets", "apps", "patch_namespaced_daemon_set"),
}
READ_OWNER: dict[str, Api] = {
    "Deployment": Api("apps", "deployments", "apps", "read_namespaced_deployment"),
    "StatefulSet": Api("apps", "statefulsets", "apps", "read_namespaced_stateful_set"),
    "DaemonSet": Api("apps", "daemonsets", "apps", "read_namespaced_daemon_set"),
    "ReplicaSet": Api("apps", "replicasets", "apps", "read_namespaced_replica_set"),
    "Pod": Api("", "pods", "core", "read_namespaced_pod"),
}
EVICTIONS = Api("", "pods/eviction", "core", "create_namespaced_pod_eviction")
PDBS = Api("policy", "poddisruptionbudgets", "policy", "list_namespaced_pod_disruption_budget")
# With Kyverno injection: Kyverno's admission controller (its version, from the image) and the legacy ClusterPolicy
# this project rendered (live/kyverno.py).
KYVERNO_DEPLOYMENT = Api("apps", "deployments", "apps", "read_namespaced_deployment")
CLUSTER_TRUST_BUNDLES = Api("certificates.k8s.io", "clustertrustbundles", "certificates", "read_cluster_trust_bundle")
LEGACY_POLICY = Api("kyverno.io", "clusterpolicies", "custom", "get_cluster_custom_object")
CAPI_CLUSTERS = Api("cluster.x-k8s.io", "clusters", "custom", "get_namespaced_custom_object")
CAPI_MACHINE_DEPLOYMENTS = Api("cluster.x-k8s.io", "machinedeployments", "custom", "list_namespaced_custom_object")


class Access(NamedTuple):
    """One request check makes: its API's verb, cluster-wide (namespace None) or in a namespace, of one name."""

    api: Api
    namespace: str | None = None
    name: str | None = None


@dataclass
class Cluster:
    """The API clients of one cluster, its server's URL, and the requests made through them."""

    clients: dict[str, Any]  # "core", "apps", "batch", "networking" -> the client's API objects
    server: str
    requests: int = 0
    # The kubeconfig context the clients use ("" for a Pod's service account), for the line that says which cluster
    # a command judges.
    context: str = ""
    accessed: set[Access] = field(default_factory=set)
    # Within `remembering()`: each get's and each whole list's result, so that the parts of one command that read the
    # same object (check's proxy-config and its stale pods) make one request. None: every call asks the API server.
    memo: dict[tuple[Access, tuple[tuple[str, str], ...]], Any] | None = None
    # Whether a list asks for its next page while this one is parsed (see `_pages`), and lists named by `ahead` are
    # read in the background; off, every page is asked for when it is needed, one after the other.
    prefetch: bool = True
    # Whether lists are read from the API server's watch cache (see `_first`); off, consistent reads from etcd.
    cached: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Lists named by `ahead`, by memo key, and the background readers' queue of them (started on first use).
    _ahead: dict[tuple[Access, tuple[tuple[str, str], ...]], _Ahead] = field(default_factory=dict, repr=False)
    _jobs: queue.Queue[_Ahead] | None = field(default=None, repr=False)
    # The background reads in flight (`_background`, `_read_ahead`): each one's end, awaited by `_end_ahead`.
    _inflight: set[threading.Event] = field(default_factory=set, repr=False)

    @contextmanager
    def remembering(self) -> Iterator[None]:
        """Reads inside this block are made once: a snapshot of the cluster for one judgement. Polls (rollout
        waiting for a restart) must not use it.

        The cyclic garbage collector is paused for the block: the snapshot is parsed JSON (dicts, lists and strings
        without a cycle, freed by their reference counts), and with 20,000 pods, ReplicaSets and Deployments held
        at once, each collection their allocations set off rescanned all of them, which took as long as reading
        them (bench/README.md, `check` at scale)."""
        previous, self.memo = self.memo, {}
        interrupted = False
        with _gc_paused():
            try:
                yield
            except KeyboardInterrupt:
                interrupted = True
                raise
            finally:
                # Dropped before the collector resumes: its first collection would otherwise scan all of it.
                self.memo = previous
                self._end_ahead(wait=not interrupted)

    def _end_ahead(self, wait: bool = True) -> None:
        """Drop the lists read ahead and not (or not wholly) used, after an error most of them, and wait for the
        background reads still in flight: a process that exits while a daemon thread is inside OpenSSL is aborted
        (SIGABRT: `check` was, after printing a 401), so none is left in a request when the snapshot ends."""
        for ahead in self._ahead.values():
            ahead.drop()
        self._ahead = {}
        if wait:  # not after Ctrl-C, which must end the command now: a request blocked on a silent server stays so
            self.settle()

    def settle(self) -> None:
        """Wait (up to AHEAD_GRACE seconds) for the background reads in flight: what a command does before it
        returns, so that the process never exits with a daemon thread inside OpenSSL."""
        deadline = time.monotonic() + AHEAD_GRACE
        with self._lock:
            inflight = list(self._inflight)
        for done in inflight:
            done.wait(max(0.0, deadline - time.monotonic()))

    @contextmanager
    def _in_flight(self) -> Iterator[None]:
        """A background read, known to `settle` until it ends."""
        done = threading.Event()
        with self._lock:
            self._inflight.add(done)
        try:
            yield
        finally:
            with self._lock:
                self._inflight.discard(done)
            done.set()

    def _background(self, run: Callable[[], None], name: str) -> None:
        """`run` in a daemon thread (an interrupted command exits without waiting for it), known to `settle`."""

        def body() -> None:
            with self._in_flight():
                run()

        threading.Thread(target=body, daemon=True, name=name).start()

    def ahead(self, access: Access, **selectors: str) -> None:
        """Within `remembering()`: this list will be needed, so read its pages now, in the background, while the
        command judges what it has (READ_AHEAD lists at a time, in the order they were named). The same requests
        as when `list_json` reads it: the API server encodes one list while this process parses another. A list
        `list_json` reaches before a background reader has started it is read there, as without this."""
        if self.memo is None or not self.prefetch:
            return
        key = (access, tuple(sorted(selectors.items())))
        if key in self.memo or key in self._ahead:
            return
        job = self._ahead[key] = _Ahead(lambda token: self._page(access, selectors, token))
        if self._jobs is None:
            self._jobs = queue.Queue()
            for n in range(READ_AHEAD):
                threading.Thread(target=self._read_ahead, daemon=True, name=f"read-ahead {n}").start()
        self._jobs.put(job)

    def _read_ahead(self) -> None:
        """A background reader: the lists named by `ahead`, one after the other, each known to `_end_ahead` while
        it is read."""
        assert self._jobs is not None
        while True:
            job = self._jobs.get()
            # Known before it starts: `_end_ahead` drops, then waits for what started before that.
            with self._in_flight():
                if job.start():
                    job.run()

    def supports(self, api: Api) -> bool:
        return hasattr(self.clients[api.client], api.method)

    def _count(self, access: Access) -> None:
        with self._lock:  # a list's next page is asked for from a thread of its own
            self.requests += 1
            self.accessed.add(access)

    def _call(self, access: Access, **kwargs: Any) -> Any:
        method = getattr(self.clients[access.api.client], access.api.method)
        self._count(access)
        if access.api.metadata_only and _takes_headers(method):  # before kubernetes 36: the whole objects
            kwargs["_headers"] = {"Accept": METADATA_ONLY}
        if access.name is not None:
            if access.namespace is None:  # a cluster-scoped object by name (the proxy's Namespace)
                return method(access.name, **kwargs)
            return method(access.name, access.namespace, **kwargs)
        return method(**kwargs) if access.namespace is None else method(access.namespace, **kwargs)

    def request(self, access: Access, *args: Any, **kwargs: Any) -> Any:
        """One call of the access's method with these arguments (a name the access leaves open, a body)."""
        method = getattr(self.clients[access.api.client], access.api.method)
        self._count(access)
        return method(*args, **kwargs)

    def log_lines(self, access: Access, pod: str, namespace: str, **kwargs: Any) -> Iterator[str]:
        """One container's log (`read_namespaced_pod_log` with these arguments), line by line as the API server
        streams it: a busy proxy's day of access lines is gigabytes, never held whole. The request is made when the
        first line is asked for; an error status raises then. Bytes that are not UTF-8 are replaced."""
        response = self.request(access, pod, namespace, _preload_content=False, **kwargs)
        try:
            rest = b""
            for chunk in response.stream(LOG_CHUNK):
                rest += chunk
                *whole, rest = rest.split(b"\n")
                for line in whole:
                    yield line.decode("utf-8", "replace").rstrip("\r")
            if rest:
                yield rest.decode("utf-8", "replace").rstrip("\r")
        finally:
            response.release_conn()

    def list(self, access: Access, **selectors: str) -> Iterator[Any]:
        """Every item of a list call, page by page, as the client's models (the probe's few pods)."""
        token: str | None = None
        while True:
            page = self._call(access, limit=PAGE, **({"_continue": token} if token else {}), **selectors)
            yield from page.items
            token = page.metadata._continue
            if not token:
                return

    def _raw(self, access: Access, **kwargs: Any) -> bytes:
        """One call's response body, unparsed."""
        return bytes(self._call(access, _preload_content=False, **kwargs).data)

    def _json(self, access: Access, **kwargs: Any) -> Obj:
        """One call's response as the API server's JSON, parsed by the stdlib: the client's models cost several
        times the parse per object (its deserializer builds and validates every nested field)."""
        return _parse(self._raw(access, **kwargs))

    def list_json(self, access: Access, **selectors: str) -> Iterator[Obj]:
        """Every item of a list call, page by page, as the API server's JSON (camelCase keys, absent fields absent)."""
        if self.memo is None:
            return self._pages(access, **selectors)
        key = (access, tuple(sorted(selectors.items())))
        if key not in self.memo:
            ahead = self._ahead.get(key)
            pages = ahead.items() if ahead is not None and ahead.claim() else None
            self.memo[key] = list(pages if pages is not None else self._pages(access, **selectors))
        return iter(self.memo[key])

    def _first(self, selectors: dict[str, str]) -> dict[str, str | int]:
        """A list's first request. With `cached`, `resourceVersion=0`: the API server answers from its watch cache
        (the objects as of the latest change it has seen, usually the latest), as controllers' informers list, in
        one response, since the cache does not page; a server that reads etcd instead pages it. Without it, a
        consistent read, in pages. The pages after the first carry no resourceVersion: their continue token holds
        it."""
        return {"limit": PAGE, **selectors, **({"resource_version": "0"} if self.cached else {})}

    def _page(self, access: Access, selectors: dict[str, str], token: str | None) -> bytes:
        """A list's first page (token None), or the page after the one whose continue token this is."""
        if token is None:
            return self._raw(access, **self._first(selectors))
        return self._raw(access, limit=PAGE, _continue=token, **selectors)

    def _pages(self, access: Access, **selectors: str) -> Iterator[Obj]:
        """The items of each page. With `prefetch`, the next page is asked for as soon as this one's continue token
        is read from the head of its body (the API server writes the list's metadata before its items), so that the
        API server encodes page n+1 while page n is parsed here: the same requests, overlapped."""
        token: str | None = None
        raw = self._page(access, selectors, None)
        while True:
            ahead = _head_continue(raw) if self.prefetch else None
            upcoming = self._later(access, selectors, ahead) if ahead else None
            page = _parse(raw)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                assert upcoming is None, "a continue token in the head of a page whose metadata has none"
                return
            raw = upcoming() if upcoming is not None and ahead == token else self._page(access, selectors, token)

    def _later(self, access: Access, selectors: dict[str, str], token: str) -> Callable[[], bytes]:
        """`_page` in a daemon thread (an interrupted command exits without waiting for it); the returned function
        waits for its body, or raises its exception."""
        box: queue.Queue[tuple[bytes | None, BaseException | None]] = queue.Queue(maxsize=1)

        def run() -> None:
            try:
                box.put((self._page(access, selectors, token), None))
            except BaseException as exc:  # handed to the reader, raised there
                box.put((None, exc))

        self._background(run, f"next page of {access.api.resource}")

        def result() -> bytes:
            body, error = box.get()
            if error is not None:
                raise error
            assert body is not None
            return body

        return result

    def served(self, group_version: str) -> set[str] | None:
        """The resources the API server serves in a group/version (discovery, which every authenticated user may
        read), empty when it serves no such group/version; None without a discovery client (tests' fakes)."""
        api = self.clients.get("discovery")
        if api is None:
            return None
        group, _, version = group_version.partition("/")
        self.requests += 1
        try:
            found = api.get_api_resources(group, version)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return set()
            raise
        return {str(r.name) for r in found.resources or []}

    def get_json(self, access: Access) -> Obj | None:
        """The named object as the API server's JSON, or None where it does not exist."""
        if self.memo is None:
            return self._get(access)
        key = (access, ())
        if key not in self.memo:
            self.memo[key] = self._get(access)
        return self.memo[key]  # type: ignore[no-any-return]

    def _get(self, access: Access) -> Obj | None:
        try:
            return self._json(access)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise


READ_AHEAD = 2  # lists read in the background at once (`Cluster.ahead`)
AHEAD_GRACE = 10.0  # seconds the end of a snapshot waits for background reads in flight (`Cluster._end_ahead`)


class _Ahead:
    """One list read ahead by a background reader: its raw pages in order, then the end (None) or the reader's
    error; `claim` decides, once, whether the reader or `list_json` reads it."""

    def __init__(self, read: Callable[[str | None], bytes]) -> None:
        self.read = read
        # "reading" (a background reader has it), "taken" (and list_json reads its pages), "claimed" (list_json reads
        # it itself), "dropped" (not wanted: a reader stops after its current page)
        self.state = "pending"
        self.pages: queue.Queue[tuple[bytes, str | None] | BaseException | None] = queue.Queue()
        self.lock = threading.Lock()

    def start(self) -> bool:
        with self.lock:
            if self.state != "pending":
                return False
            self.state = "reading"
            return True

    def claim(self) -> bool:
        """True, once, when a background reader has this list (read it with `items`); False when it had not
        started, and now never will, or was claimed before: the caller reads the list itself."""
        with self.lock:
            if self.state == "reading":
                self.state = "taken"
                return True
            if self.state == "pending":
                self.state = "claimed"
            return False

    def drop(self) -> None:
        """No longer wanted: a background reader stops after its current page."""
        with self.lock:
            self.state = "dropped"

    def run(self) -> None:
        try:
            raw = self.read(None)
            while True:
                token = _continue(raw)
                self.pages.put((raw, token))
                if token is None or self.state == "dropped":
                    break
                raw = self.read(token)
            self.pages.put(None)
        except BaseException as exc:  # handed to the reader of the list, raised there
            self.pages.put(exc)

    def items(self) -> Iterator[Obj]:
        """The list's items, page by page as the background reader delivers them."""
        while True:
            got = self.pages.get()
            if isinstance(got, BaseException):
                raise got
            assert got is not None, "a background list ended before a page without a continue token"
            raw, ahead = got
            page = _parse(raw)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if token != ahead:  # the head's token (what the reader asked for next) is the page's own
                raise AssertionError(f"a list page's continue token {token!r} is not the one at its head {ahead!r}")
            if not token:
                return


_HEAD = re.compile(rb'^\{[^\[{]*"metadata"\s*:\s*\{([^{}]*)\}')
_CONTINUE = re.compile(rb'"continue"\s*:\s*"([A-Za-z0-9+/=_-]+)"')


def _head_continue(raw: bytes) -> str | None:
    """A list body's continue token, from its metadata at the head (before the items), or None."""
    head = _HEAD.match(raw[:4096])
    found = _CONTINUE.search(head.group(1)) if head else None
    return found.group(1).decode() if found else None


def _continue(raw: bytes) -> str | None:
    """A list body's continue token: from its head where the head is the list's metadata, else from the parsed
    body (a server that writes the items first)."""
    head = _HEAD.match(raw[:4096])
    if head is None or (b'"continue"' in head.group(1) and not _CONTINUE.search(head.group(1))):
        token = (_parse(raw).get("metadata") or {}).get("continue")
        return str(token) if token else None
    found = _CONTINUE.search(head.group(1))
    return found.group(1).decode() if found else None


def _takes_headers(method: Any) -> bool:
    """Whether a client method takes `_headers` (the `kubernetes` client from version 36 on)."""
    try:
        return "_headers" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def _parse(raw: bytes) -> Obj:
    """A response body as Python objects, parsed by pydantic-core's JSON parser (jiter, in Rust; already installed
    with pydantic): 0.62 s for the 122 MB of 25,000 pods where the standard library's `json` took 1.06 s. Object
    keys are interned (`cache_strings="keys"`): a list repeats the same few hundred keys in every item."""
    with _gc_paused():
        return dict(from_json(raw, cache_strings="keys"))


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused, as while parsing a page: its objects are new dicts and lists without
    cycles, and the collections their allocation triggers rescan every object alive (a page of pods is some
    100,000), which took three times as long as the parse itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_NO_KUBECONFIG = (
    "no kubeconfig: --kubeconfig is not given, $KUBECONFIG is not set and ~/.kube/config does not exist, and this "
    "is not a Pod (KUBERNETES_SERVICE_HOST is not set) (expected one of them)"
)


def _in_pod() -> bool:
    """Like kubectl: no kubeconfig to read, and the variables kubelet gives every Pod."""
    if os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config")):
        return False
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


@contextmanager
def kubeconfig_path(value: str | None) -> Iterator[str | None]:
    """A path for a kubeconfig given as a path or as the file's contents (a stack's `proxy-component:kubeconfig`,
    a secret): the contents go to a private scratch file (0600) that is removed when the block ends."""
    if value is None or "\n" not in value:
        yield value
        return
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "kubeconfig")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
            handle.write(value)
        yield path


def connect(kubeconfig: str | None = None, context: str | None = None) -> Cluster:
    """A client for the cluster of the kubeconfig (default: $KUBECONFIG or ~/.kube/config) and context; in a Pod
    without either, its service account (the in-cluster config)."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:
        raise CheckError(
            "the kubernetes package, a dependency of proxy-component, is missing: pip install -U proxy-component"
        ) from None
    if kubeconfig is None and context is None and _in_pod():
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise CheckError(f"in-cluster config (a Pod's service account): {exc}") from None
        api = client.ApiClient(configuration)
    else:
        default = os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config"))
        if kubeconfig is None and not default:
            raise CheckError(_NO_KUBECONFIG)
        # The client reads $KUBECONFIG once, when it is imported: name the file as it is now.
        kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        where = f"kubeconfig {kubeconfig}"
        try:
            contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise CheckError(f"{where}: {exc}") from None
        except OSError as exc:
            raise CheckError(f"{where}: cannot read ({exc.strerror})") from None
        names = sorted(str(c.get("name")) for c in contexts or [] if isinstance(c, dict))
        if context is not None and context not in names:
            raise CheckError(
                f"context {context!r} is not in {where} (expected one of: {', '.join(names) or 'none, it has no contexts'})"
            )
        context = context or (str(current.get("name")) if isinstance(current, dict) else None)
        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
        except ConfigException as exc:
            raise CheckError(f"{where}: {exc}") from None
        except OSError as exc:
            raise CheckError(f"{where}: cannot read ({exc.strerror})") from None
    clients = {
        "core": client.CoreV1Api(api),
        "apps": client.AppsV1Api(api),
        "batch": client.BatchV1Api(api),
        "networking": client.NetworkingV1Api(api),
        "policy": client.PolicyV1Api(api),
        "certificates": client.CertificatesV1Api(api),
        "discovery": client.CustomObjectsApi(api),  # get_api_resources: GET /apis/<group>/<version>
        "custom": client.CustomObjectsApi(api),
    }
    return Cluster(clients, server=redact_url(str(api.configuration.host)), context=context or "")


def _status_message(exc: Exception) -> str:
    """The API server's own message of a failed request (it names the verb, resource, namespace and user)."""
    body = getattr(exc, "body", None)
    try:
        message = json.loads(body)["message"] if body else ""
    except (ValueError, TypeError, KeyError):
        message = ""
    return str(message or getattr(exc, "reason", "") or "")


CHECK_ROLE = (
    "check needs the roles that `proxy-component render CONFIG --format check-rbac` writes (with --probe for check "
    "--probe), bound to this identity"
)


def explain(exc: Exception, cluster: Cluster, role: str = CHECK_ROLE) -> CheckError | None:
    """A CheckError for an API or connection failure; None for anything else (a bug, to surface as one). `role`
    says, after a 403, which role the command needs."""
    status = getattr(exc, "status", None)
    if status == 401:
        return CheckError(
            f"{cluster.server}: 401 Unauthorized: the API server does not accept these credentials (a wrong or "
            "expired token, or a client certificate it does not trust): renew them (e.g. kubectl create token) or "
            "choose another --kubeconfig or --context"
        )
    if status == 403:
        return CheckError(f"{cluster.server}: 403 Forbidden: {_status_message(exc)}: {role}")
    if status in (400, 422):  # a request the server refused as malformed (e.g. a label selector): its own words
        return CheckError(f"{cluster.server}: the API server answered {status}: {_status_message(exc)}")
    if status is not None:
        return CheckError(f"{cluster.server}: the API server answered {status} {getattr(exc, 'reason', '')}")
    name = type(exc).__name__
    if name in ("MaxRetryError", "NewConnectionError", "ProtocolError", "ConnectionRefusedError") or isinstance(
        exc, OSError
    ):
        return CheckError(f"{cluster.server}: cannot reach the API server ({name}); check --kubeconfig and --context")
    return None


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^\s/'\"]*@")


def scrub(text: str, settings: Settings) -> str:
    """`text` (e.g. a traceback) without credentials: any URL's userinfo, and the settings' passwords anywhere."""
    secrets: set[str] = set()
    urls = (settings.http_proxy, settings.https_proxy, settings.node_http_proxy, settings.node_https_proxy)
    for url in urls:
        if url:
            password = urlsplit(url).password
            secrets |= {password, unquote(password)} if password else set()
    upstream = settings.proxy.upstream
    credentials = upstream.credentials if upstream else None
    if credentials and credentials[1]:
        secrets |= {credentials[1]}
    text = _USERINFO.sub(r"\1***@", text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
