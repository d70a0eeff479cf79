"""`check`'s reads through the real `kubernetes` client against a loopback stand-in of the API server: the raw
JSON parsed (not the client's models), pages followed by their `continue` token, one request counted per page,
a 404 read as absent and a 403 explained with the API server's own message."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pydantic_core
import pytest
from kubernetes import client

from proxy_component.live import cluster as cluster_module
from proxy_component.live.cluster import (
    METADATA_ONLY,
    NAMESPACES,
    NODES,
    PAGE,
    PODS,
    REPLICA_SET_OWNERS,
    REPLICA_SETS,
    Access,
    CheckError,
    Cluster,
    explain,
)

NODE_COUNT = PAGE * 2 + 7  # three pages
FORBIDDEN = 'namespaces "locked" is forbidden: User "alice" cannot get resource "namespaces" in API group ""'


class _Handler(BaseHTTPRequestHandler):
    asked: ClassVar[list[str]] = []
    accepts: ClassVar[list[str]] = []  # each request's Accept header
    second_page = threading.Event()  # set when page 2 is asked for
    expired: ClassVar[str | None] = None  # a continue token answered 410 Gone
    release = threading.Event()  # what the pods of a namespace named slow-* wait for

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.asked.append(self.path)
        self.accepts.append(self.headers.get("Accept", ""))
        if query.get("continue") == "500":
            self.second_page.set()
        if url.path.startswith("/api/v1/namespaces/slow-"):
            self.release.wait(timeout=10)
            self._answer(200, {"kind": "PodList", "metadata": {}, "items": []})
        elif url.path == "/api/v1/nodes" and self.expired is not None and query.get("continue") == self.expired:
            self._answer(410, {"kind": "Status", "status": "Failure", "message": "too old", "code": 410})
        elif url.path == "/api/v1/nodes":
            start, limit = int(query.get("continue", "0")), int(query["limit"])
            names = [f"n{i:04d}" for i in range(start, min(start + limit, NODE_COUNT))]
            token = str(start + limit) if start + limit < NODE_COUNT else None
            items = [{"metadata": {"name": n, "labels": {"kubernetes.io/os": "linux"}}, "spec": {}} for n in names]
            self._answer(200, {"kind": "NodeList", "metadata": {"continue": token} if token else {}, "items": items})
        elif url.path == "/apis/apps/v1/namespaces/apps/replicasets":
            meta = {"name": "web-1", "namespace": "apps", "ownerReferences": [{"kind": "Deployment", "name": "web",
                    "controller": True}]}  # fmt: skip
            if self.headers.get("Accept", "").startswith("application/json;as=PartialObjectMetadataList;"):
                item = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
                self._answer(200, {"kind": "PartialObjectMetadataList", "metadata": {}, "items": [item]})
            else:
                self._answer(200, {"kind": "ReplicaSetList", "metadata": {}, "items": [{"metadata": meta,
                                   "spec": {"template": {}}}]})  # fmt: skip
        elif url.path == "/api/v1/namespaces/kube-system":
            self._answer(200, {"kind": "Namespace", "metadata": {"name": "kube-system", "labels": {"a": "b"}}})
        elif url.path == "/api/v1/namespaces/locked":
            self._answer(403, {"kind": "Status", "status": "Failure", "message": FORBIDDEN, "code": 403})
        else:
            self._answer(404, {"kind": "Status", "status": "Failure", "message": "not found", "code": 404})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    _Handler.asked = []
    _Handler.accepts = []
    _Handler.second_page.clear()
    _Handler.expired = None
    _Handler.release.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        api = client.ApiClient(configuration)
        yield Cluster({"core": client.CoreV1Api(api), "apps": client.AppsV1Api(api)}, server=configuration.host)
        api.close()  # type: ignore[no-untyped-call]
    finally:
        server.shutdown()
        server.server_close()


def _queries() -> list[dict[str, list[str]]]:
    return [parse_qs(urlsplit(p).query) for p in _Handler.asked]


def test_a_list_follows_every_page_and_counts_one_request_per_page(cluster: Cluster) -> None:
    nodes = list(cluster.list_json(Access(NODES)))
    assert [n["metadata"]["name"] for n in nodes] == [f"n{i:04d}" for i in range(NODE_COUNT)]
    assert all(type(n) is dict for n in nodes), "plain JSON, not the client's models"
    assert cluster.requests == 3
    assert [q.get("continue") for q in _queries()] == [None, ["500"], ["1000"]]
    assert cluster.accessed == {Access(NODES)}


@pytest.mark.parametrize("cached", [True, False], ids=["watch-cache", "consistent"])
def test_a_list_asks_the_watch_cache_first_and_its_next_pages_by_their_token_alone(
    cluster: Cluster, cached: bool
) -> None:
    """resourceVersion=0 on a list's first request (the API server then answers from its watch cache, unpaged);
    never beside a continue token, which the API server refuses (422). Off: consistent reads."""
    cluster.cached = cached
    assert len(list(cluster.list_json(Access(NODES)))) == NODE_COUNT
    assert [(q.get("resourceVersion"), q.get("limit"), q.get("continue")) for q in _queries()] == [
        (["0"] if cached else None, ["500"], None),
        (None, ["500"], ["500"]),
        (None, ["500"], ["1000"]),
    ]


def _asked_for(count: int, within: float = 5) -> bool:
    """Whether the stand-in has had `count` requests within `within` seconds."""
    deadline = time.monotonic() + within
    while len(_Handler.asked) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(_Handler.asked) >= count


def test_a_list_named_ahead_is_read_in_the_background_and_handed_over_whole(cluster: Cluster) -> None:
    with cluster.remembering():
        cluster.ahead(Access(NODES))
        cluster.ahead(Access(NODES))  # named twice: read once
        assert _asked_for(3), "all three pages asked for before anything wanted them"
        nodes = list(cluster.list_json(Access(NODES)))
        assert len(list(cluster.list_json(Access(NODES)))) == NODE_COUNT
    assert [n["metadata"]["name"] for n in nodes] == [f"n{i:04d}" for i in range(NODE_COUNT)]
    assert cluster.requests == len(_Handler.asked) == 3, "the same requests as reading it when wanted"
    assert [q.get("continue") for q in _queries()] == [None, ["500"], ["1000"]]


def test_a_list_wanted_before_a_background_reader_is_free_is_read_where_it_is_wanted(cluster: Cluster) -> None:
    """Two slow lists hold both background readers; the nodes, named third, are read by list_json itself, at
    once and only there. The snapshot then ends with an error: the slow lists are dropped unread, and the end
    waits for their requests in flight (a process that exits while a daemon thread is inside OpenSSL is aborted:
    `check` was, with SIGABRT, after printing a 401)."""
    released = threading.Timer(0.5, _Handler.release.set)
    started: list[float] = []

    def judge_then_fail() -> None:
        with cluster.remembering():
            cluster.ahead(Access(PODS, "slow-a"))
            cluster.ahead(Access(PODS, "slow-b"))
            assert _asked_for(2)
            cluster.ahead(Access(NODES))
            assert len(list(cluster.list_json(Access(NODES)))) == NODE_COUNT
            assert cluster.requests == 5
            released.start()
            started.append(time.monotonic())
            raise RuntimeError("a judgement failed")

    with pytest.raises(RuntimeError):
        judge_then_fail()
    assert time.monotonic() - started[0] >= 0.4, "the end of the snapshot waited for the slow requests"
    assert _Handler.release.is_set()
    assert cluster._inflight == set(), "no background read left in flight"
    assert not _asked_for(6, within=0.5), "nothing more is asked for"
    assert sorted(p.partition("?")[0] for p in _Handler.asked) == [
        *["/api/v1/namespaces/slow-a/pods", "/api/v1/namespaces/slow-b/pods"],
        *["/api/v1/nodes"] * 3,
    ]


def test_a_failed_page_read_ahead_is_raised_where_the_list_is_wanted(cluster: Cluster) -> None:
    _Handler.expired = "1000"
    with cluster.remembering():
        cluster.ahead(Access(NODES))
        assert _asked_for(3)
        with pytest.raises(client.ApiException) as caught:
            list(cluster.list_json(Access(NODES)))
    assert caught.value.status == 410


def test_the_collector_is_paused_for_a_snapshot_and_resumes_once_it_is_dropped(cluster: Cluster) -> None:
    """At 20,000 pods the collections a snapshot's allocations set off rescanned all of it; and the memo is
    dropped before the collector resumes, so that its first collection does not scan it either."""
    assert gc.isenabled()
    with cluster.remembering():
        assert not gc.isenabled()
        nodes = cluster.list_json(Access(NODES))
        assert cluster.memo
    assert gc.isenabled()
    assert cluster.memo is None
    assert len(list(nodes)) == NODE_COUNT, "what was handed out stays whole"
    with pytest.raises(RuntimeError), cluster.remembering():
        raise RuntimeError("a judgement failed")
    assert gc.isenabled(), "resumed after an error too"


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "one-after-the-other"])
def test_the_next_page_is_asked_for_while_this_one_is_read(cluster: Cluster, prefetch: bool) -> None:
    """With prefetch the API server has page 2's request before the reader is done with page 1 (it encodes that
    page while this one is parsed); without, only once the reader wants it. The requests are the same."""
    cluster.prefetch = prefetch
    nodes = cluster.list_json(Access(NODES))
    next(nodes)
    assert _Handler.second_page.wait(timeout=5 if prefetch else 0.5) is prefetch
    assert len(list(nodes)) == NODE_COUNT - 1
    assert cluster.requests == 3
    assert [parse_qs(urlsplit(p).query).get("continue") for p in _Handler.asked] == [None, ["500"], ["1000"]]


def test_a_failed_prefetched_page_is_raised_to_the_reader(cluster: Cluster) -> None:
    _Handler.expired = "1000"
    nodes = cluster.list_json(Access(NODES))
    read = [next(nodes) for _ in range(PAGE * 2)]  # the first two pages, read whole
    assert read[-1]["metadata"]["name"] == f"n{PAGE * 2 - 1:04d}"
    with pytest.raises(client.ApiException) as caught:
        next(nodes)
    assert caught.value.status == 410
    assert cluster.requests == 3


def test_a_read_is_the_objects_json_or_none_where_it_does_not_exist(cluster: Cluster) -> None:
    assert cluster.get_json(Access(NAMESPACES, None, "kube-system")) == {
        "kind": "Namespace",
        "metadata": {"name": "kube-system", "labels": {"a": "b"}},
    }
    assert cluster.get_json(Access(NAMESPACES, None, "gone")) is None
    assert cluster.requests == 2


def test_a_refused_read_is_explained_with_the_api_servers_message(cluster: Cluster) -> None:
    with pytest.raises(client.ApiException) as caught:
        cluster.get_json(Access(NAMESPACES, None, "locked"))
    error = explain(caught.value, cluster)
    assert isinstance(error, CheckError)
    assert str(error) == (
        f"{cluster.server}: 403 Forbidden: {FORBIDDEN}: check needs the roles that `proxy-component render CONFIG "
        "--format check-rbac` writes (with --probe for check --probe), bound to this identity"
    )


def test_the_garbage_collector_is_paused_only_while_a_response_is_parsed(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's parse allocates some 100,000 dicts and lists; collections triggered meanwhile rescan everything
    alive (three times the parse at 5,000 pods). Paused for the parse, restored after, an error included."""
    seen: list[bool] = []
    parse = pydantic_core.from_json

    def loads(data: bytes, **options: Any) -> Any:
        seen.append(gc.isenabled())
        return parse(data, **options)

    monkeypatch.setattr(cluster_module, "from_json", loads)
    assert gc.isenabled()
    assert len(list(cluster.list_json(Access(NODES)))) == NODE_COUNT
    assert seen == [False, False, False]
    assert gc.isenabled()
    with pytest.raises(client.ApiException):
        cluster.get_json(Access(NAMESPACES, None, "locked"))
    assert gc.isenabled()
    monkeypatch.setattr(cluster_module, "from_json", lambda data, **options: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cluster.get_json(Access(NAMESPACES, None, "kube-system"))
    assert gc.isenabled(), "re-enabled after a failed parse"
    gc.disable()
    try:
        monkeypatch.setattr(cluster_module, "from_json", loads)
        cluster.get_json(Access(NAMESPACES, None, "kube-system"))
        assert not gc.isenabled(), "a collector the caller paused stays paused"
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("body", "token"),
    [
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"123","continue":"eyJ2IjoibWV0YS5rOHMu'
            b'aW8vdjEiLCJydiI6MTIzfQ","remainingItemCount":7},"items":[]}',
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ",
        ),
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a",'
            b'"annotations":{"x":"\\"continue\\":\\"b\\""}}}]}',
            None,
        ),
        (b'{"kind":"Status","metadata":{},"message":"continue"}', None),
    ],
    ids=["the-api-servers-head", "a-token-only-in-an-item", "no-list"],
)
def test_the_continue_token_is_read_from_the_head_only(body: bytes, token: str | None) -> None:
    from proxy_component.live.cluster import _head_continue

    assert _head_continue(body) == token


def test_a_body_parses_as_the_standard_librarys_json_reads_it() -> None:
    """pydantic-core's parser (what `_parse` uses) against `json.loads`: escapes, non-ASCII, big and negative
    integers, floats, nulls, empty containers, a repeated key (the last one wins in both)."""
    body = (
        '{"kind":"PodList","items":[{"metadata":{"name":"caf\\u00e9-\u00e9\\ud83d\\ude00","annotations":{"a":"x\\"y\\\\z\\n"},'
        '"generation":18446744073709551617,"n":-3,"r":1.5e-3,"z":0.1},"spec":{},"status":null,"l":[],"t":true,"f":false}],'
        '"metadata":{"continue":"","continue":"tok"}}'
    ).encode()
    assert cluster_module._parse(body) == json.loads(body)
    with pytest.raises(ValueError, match="EOF"):
        cluster_module._parse(body[:-1])


def test_a_pods_deployment_is_read_from_the_replicasets_metadata_alone(cluster: Cluster) -> None:
    """The ReplicaSets that lead a stale pod to its Deployment are listed as PartialObjectMetadataList: their owner
    references without their templates; the rollout plan's own read of them (an owner's template) is whole."""
    (owners,) = list(cluster.list_json(Access(REPLICA_SET_OWNERS, "apps")))
    assert owners == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {
        "name": "web-1", "namespace": "apps", "ownerReferences": [{"kind": "Deployment", "name": "web",
        "controller": True}]}}  # fmt: skip
    (whole,) = list(cluster.list_json(Access(REPLICA_SETS, "apps")))
    assert "spec" in whole
    assert _Handler.accepts == [METADATA_ONLY, "application/json"]
    assert cluster.accessed == {Access(REPLICA_SET_OWNERS, "apps"), Access(REPLICA_SETS, "apps")}


def test_a_client_without_headers_reads_the_whole_replicasets(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before version 36 the `kubernetes` client's methods take no `_headers` (they refuse an unknown keyword):
    the ReplicaSets are then listed whole, which holds the same metadata."""
    apps = cluster.clients["apps"]
    whole = apps.list_namespaced_replica_set

    def older(namespace: str, **kwargs: Any) -> Any:  # as kubernetes 35's generated methods check their keywords
        if "_headers" in kwargs:
            raise TypeError("Got an unexpected keyword argument '_headers' to method list_namespaced_replica_set")
        return whole(namespace, **kwargs)

    monkeypatch.setattr(apps, "list_namespaced_replica_set", older)
    (item,) = list(cluster.list_json(Access(REPLICA_SET_OWNERS, "apps")))
    assert item["metadata"]["ownerReferences"] == [{"kind": "Deployment", "name": "web", "controller": True}]
    assert _Handler.accepts == ["application/json"]
