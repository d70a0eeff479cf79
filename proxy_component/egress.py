"""Who reaches what through the proxy: the nodes' access logs joined to pods (`proxy-component egress`).

Pure: it reads text and JSON it is given (each proxy pod's log, a pod list as `kubectl get pods -A -o json` gives
it, optionally Nodes) and never the network; `live/egress.py` fetches them from a cluster.

A proxy's log holds one access line per connection when it ends (`{"log":"access", ...}`, tinyproxy's patch 0025;
docs/guides/access-log.md), lines dropped by its rate bound (`{"log":"access-dropped","dropped":N}`), and tinyproxy's
aggregated refusals at accept (`Refused N connection(s) at accept: <cause> (last from <address>)`). A line carries
tinyproxy's own prefix (`NOTICE    Nov 28 18:49:05.123 [7]: `, in the tinyproxy container's log, or in the metrics
container's, which passes tinyproxy's log file on line by line), and `kubectl logs --timestamps` puts an RFC 3339
time first: both are read, and a bare JSON line too.

A client address is joined to the pod that had it then (the pod list is a snapshot: a pod that started after the
line, or an address no pod has now, stays `unknown`); a host-network client is its node. A request through the
proxy to a destination the cluster's own NO_PROXY composition says to reach directly (the cluster domain, `.svc`,
the service, pod and node ranges, the API server) is a NO_PROXY miss: reported with the workload's own proxy
variables and, per client of the model (`clients.py`), what that client does with them and why.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from .clients import Target
from .noproxy import NoProxy
from .redaction import mask_url

__all__ = [
    "AcceptRefusal",
    "Client",
    "Dropped",
    "Event",
    "Line",
    "Log",
    "Miss",
    "PodIndex",
    "Report",
    "Unreadable",
    "dot",
    "events",
    "parse_log",
    "report",
    "suggest",
    "table",
]

Obj = dict[str, Any]

PROXY_NAMES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")
"""The variables a miss reports from the workload's own spec."""
CLOCK_SKEW = timedelta(seconds=5)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
"""A line this much before a pod's start still joins to it (the proxy's clock and the API server's differ)."""

_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")
_PREFIX = re.compile(r"^[A-Z]+ +[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d\.\d{3} \[\d+\]: ")
_ACCEPT = re.compile(r"^Refused (\d+) connection\(s\) at accept: (.*) \(last from ([0-9A-Fa-f.:]+)\)$")


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def _time(text: str) -> datetime:
    """An RFC 3339 time (nanoseconds cut to microseconds), in UTC; ValueError otherwise."""
    if len(text) == 24 and text[-1] == "Z" and text[10] == "T" and text[19] == ".":  # the access line's own form
        return datetime.fromisoformat(text[:-1] + "+00:00")
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time")
    fraction = (m.group(2) or "")[:6].ljust(6, "0")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{fraction}{zone}").astimezone(timezone.utc)


@dataclass(frozen=True)
class Line:
    """One connection through a node's proxy, as its access line says."""

    time: datetime
    node: str
    client: str
    client_port: int
    method: str
    host: str
    port: int
    upstream: bool
    status: int
    result: str  # ok, refused, error
    cause: str
    bytes_from_client: int
    bytes_to_client: int
    duration_ms: int

    @property
    def destination(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The destination as a URL a client would have used: https for a tunnel, http otherwise."""
        scheme = "https" if self.method == "CONNECT" else "http"
        return f"{scheme}://{self.destination}"


@dataclass(frozen=True)
class AcceptRefusal:
    """tinyproxy's aggregated refusals at accept (the client limits, MaxClients, Allow) on one node."""

    time: datetime | None
    node: str
    count: int
    cause: str
    last_from: str


@dataclass(frozen=True)
class Dropped:
    """Access lines a proxy's rate bound dropped (its `access-dropped` line)."""

    count: int


@dataclass(frozen=True)
class Unreadable:
    """A line that looked like an access line and was not one."""


Event = Line | AcceptRefusal | Dropped | Unreadable


@dataclass
class Log:
    """What the proxies' logs held, in memory (a small log, or the tests'): access lines, refusals at accept, lines
    the rate bound dropped, lines not read. A large one is read as a stream of events (`events`) instead."""

    lines: list[Line] = field(default_factory=list)
    refusals: list[AcceptRefusal] = field(default_factory=list)
    dropped: int = 0
    unreadable: int = 0

    def extend(self, other: Log) -> None:
        self.lines += other.lines
        self.refusals += other.refusals
        self.dropped += other.dropped
        self.unreadable += other.unreadable

    def add(self, event: Event) -> None:
        if isinstance(event, Line):
            self.lines.append(event)
        elif isinstance(event, AcceptRefusal):
            self.refusals.append(event)
        elif isinstance(event, Dropped):
            self.dropped += event.count
        else:
            self.unreadable += 1

    def events(self) -> Iterator[Event]:
        yield from self.lines
        yield from self.refusals
        if self.dropped:
            yield Dropped(self.dropped)
        for _ in range(self.unreadable):
            yield Unreadable()


_FIELDS: dict[str, type] = {
    "time": str,
    "client": str,
    "client_port": int,
    "method": str,
    "host": str,
    "port": int,
    "upstream": bool,
    "status": int,
    "result": str,
    "cause": str,
    "bytes_from_client": int,
    "bytes_to_client": int,
    "duration_ms": int,
}


def _access(obj: Mapping[str, Any], node: str) -> Line | None:
    """The Line of an access object, None where a field is missing or of another type (counted as unreadable)."""
    for key, kind in _FIELDS.items():
        value = obj.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return None
    try:
        when = _time(obj["time"])
    except ValueError:
        return None
    host = obj["host"].rpartition("@")[2].lower()  # never a userinfo, had a proxy logged one
    return Line(
        when, node, obj["client"], obj["client_port"], obj["method"], host, obj["port"],
        obj["upstream"], obj["status"], obj["result"], obj["cause"], obj["bytes_from_client"],
        obj["bytes_to_client"], obj["duration_ms"],
    )  # fmt: skip


def events(lines: Iterable[str], node: str = "") -> Iterator[Event]:
    """The access lines, refusals at accept and drops of one proxy's log, line by line (`node`: the proxy's node,
    if known). Other lines (tinyproxy's own notices, the watcher's) are skipped; a line that looks like an access
    line and is not one is Unreadable."""
    for raw in lines:
        line = raw.strip()
        stamp = ""  # kubectl's --timestamps, read only for a refusal at accept (an access line has its own)
        if line[:2] == "20" and (m := _TIMESTAMP.match(line)):
            stamp = m.group(1)
            line = line[m.end() :]
        if line[:1] != "{":
            line = _PREFIX.sub("", line, count=1)
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                if '"log"' in line:
                    yield Unreadable()
                continue
            if not isinstance(obj, dict):
                continue
            kind = obj.get("log")
            if kind == "access":
                parsed = _access(obj, node)
                yield Unreadable() if parsed is None else parsed
            elif kind == "access-dropped" and isinstance(obj.get("dropped"), int):
                yield Dropped(obj["dropped"])
        elif m := _ACCEPT.match(line):
            try:
                when: datetime | None = _time(stamp) if stamp else None
            except ValueError:
                when = None
            yield AcceptRefusal(when, node, int(m.group(1)), m.group(2), m.group(3))


def parse_log(text: str, node: str = "") -> Log:
    """`events` of a whole log's text, kept in memory."""
    out = Log()
    for event in events(text.splitlines(), node):
        out.add(event)
    return out


@dataclass(frozen=True)
class Client:
    """Who a client address was: a pod (its namespace, workload and proxy variables) or a node."""

    namespace: str  # "" for a node
    workload: str  # "Deployment/web", "Pod/debug", "Node/<name>", or "unknown"
    pod: str
    variables: tuple[tuple[str, str], ...] = ()  # the pod's own proxy variables, as its spec writes them
    env_from: tuple[str, ...] = ()  # its envFrom sources ("ConfigMap/proxy-config")

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.workload)


UNKNOWN = Client("", "unknown", "")


def _workload(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    if not owners:
        return f"Pod/{meta.get('name', '')}"
    kind, name = owners[0].get("kind", ""), owners[0].get("name", "")
    template_hash = (meta.get("labels") or {}).get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
        return f"Deployment/{name[: -len(template_hash) - 1]}"
    return f"{kind}/{name}"


def _variables(pod: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The proxy variables the pod's containers set, each once (the first container's first), values or refs."""
    seen: dict[str, str] = {}
    sources: list[str] = []
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for entry in container.get("env") or []:
            name = entry.get("name")
            if name in PROXY_NAMES and name not in seen:
                if "value" in entry:  # a proxy URL may hold a credential: never shown
                    value = str(entry["value"])
                    seen[name] = value if name.lower() == "no_proxy" else mask_url(value)
                else:
                    ref = entry.get("valueFrom") or {}
                    for kind, key in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                        if kind in ref:
                            seen[name] = f"<{key} {ref[kind].get('name')} key {ref[kind].get('key')}>"
                    seen.setdefault(name, "<from the pod's spec>")
        for source in container.get("envFrom") or []:
            for kind, key in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                if kind in source:
                    text = f"{key}/{source[kind].get('name')}"
                    if text not in sources:
                        sources.append(text)
    return tuple(sorted(seen.items(), key=lambda kv: PROXY_NAMES.index(kv[0]))), tuple(sources)


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        return text


class PodIndex:
    """Client addresses to pods and nodes, from a pod list (and optionally Nodes)."""

    def __init__(self, pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]] = ()) -> None:
        self.by_address: dict[str, list[tuple[datetime | None, Client]]] = defaultdict(list)
        self.nodes: dict[str, str] = {}
        self._normal: dict[str, str] = {}
        for node in nodes:
            name = (node.get("metadata") or {}).get("name", "")
            for a in (node.get("status") or {}).get("addresses") or []:
                if a.get("type") in ("InternalIP", "ExternalIP"):
                    self.nodes[_address(a.get("address", ""))] = name
        for pod in pods:
            meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
            ips = [i.get("ip", "") for i in status.get("podIPs") or []] or (
                [status["podIP"]] if status.get("podIP") else []
            )
            if spec.get("hostNetwork"):
                for ip in ips:
                    self.nodes.setdefault(_address(ip), spec.get("nodeName", ""))
                continue
            start = status.get("startTime") or meta.get("creationTimestamp")
            started = _time(start) if isinstance(start, str) else None
            variables, sources = _variables(pod)
            client = Client(meta.get("namespace", ""), _workload(pod), meta.get("name", ""), variables, sources)
            for ip in ips:
                self.by_address[_address(ip)].append((started, client))

    def client(self, address: str, when: datetime) -> Client:
        """The pod that had `address` at `when`: of those that had started by then, the latest to start (a pod
        list holds only the pods of its moment); else its node; else UNKNOWN."""
        address = self._normal.get(address) or self._normal.setdefault(address, _address(address))
        best: tuple[datetime, str] | None = None
        found = UNKNOWN
        for started, c in self.by_address.get(address, ()):
            moment = started or _EPOCH
            if moment <= when + CLOCK_SKEW and (best is None or (moment, c.pod) > best):
                best, found = (moment, c.pod), c
        if found is not UNKNOWN:
            return found
        if address in self.nodes:
            return Client("", f"Node/{self.nodes[address]}", "")
        if _is_ip(address) and ipaddress.ip_address(address).is_loopback:
            return Client("", "Node/(the proxy's own)", "")
        return UNKNOWN


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


_NONE: dict[str, int] = {}


@dataclass(slots=True)
class Destination:
    """What one workload did with one destination (slots: a fleet's day holds hundreds of thousands)."""

    requests: int = 0
    bytes_from_client: int = 0
    bytes_to_client: int = 0
    last_seen: datetime | None = None
    upstream: bool = False
    refused: dict[str, int] = field(default_factory=lambda: _NONE)  # cause -> count (refused and error results)

    def add(self, line: Line) -> None:
        self.requests += 1
        self.bytes_from_client += line.bytes_from_client
        self.bytes_to_client += line.bytes_to_client
        self.upstream = self.upstream or line.upstream
        if self.last_seen is None or line.time > self.last_seen:
            self.last_seen = line.time
        if line.result != "ok":
            if self.refused is _NONE:
                self.refused = {}
            cause = line.cause or line.result
            self.refused[cause] = self.refused.get(cause, 0) + 1


@dataclass(frozen=True)
class Verdict:
    """One client's decision for a missed destination with the workload's variables, and why."""

    client: str
    decision: str
    why: str


@dataclass
class Miss:
    """Requests through the proxy to a destination the cluster's NO_PROXY composition reaches directly."""

    client: Client
    destination: str
    url: str
    count: int = 0
    last_seen: datetime | None = None
    reason: str = ""
    verdicts: list[Verdict] = field(default_factory=list)


@dataclass
class Report:
    """The report: per workload and destination, the misses, the refusals at accept, and what could not be joined."""

    by_workload: dict[tuple[str, str], dict[str, Destination]]
    misses: list[Miss]
    accept: list[tuple[AcceptRefusal, Client]]
    lines: int
    dropped: int
    unreadable: int
    unknown_clients: list[str]
    since: datetime | None
    until: datetime | None

    def as_dict(self) -> Obj:
        def when(t: datetime | None) -> str | None:
            return None if t is None else t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

        workloads = []
        for (namespace, workload), destinations in sorted(self.by_workload.items()):
            workloads.append(
                {
                    "namespace": namespace,
                    "workload": workload,
                    "destinations": [
                        {
                            "destination": name,
                            "requests": d.requests,
                            "bytes_from_client": d.bytes_from_client,
                            "bytes_to_client": d.bytes_to_client,
                            "last_seen": when(d.last_seen),
                            "upstream": d.upstream,
                            "refused": dict(sorted(d.refused.items())),
                        }
                        for name, d in sorted(destinations.items())
                    ],
                }
            )
        return {
            "since": when(self.since),
            "until": when(self.until),
            "lines": self.lines,
            "dropped_by_rate_bound": self.dropped,
            "unreadable": self.unreadable,
            "unknown_clients": self.unknown_clients,
            "workloads": workloads,
            "no_proxy_misses": [
                {
                    "namespace": m.client.namespace,
                    "workload": m.client.workload,
                    "destination": m.destination,
                    "requests": m.count,
                    "last_seen": when(m.last_seen),
                    "reason": m.reason,
                    "variables": dict(m.client.variables),
                    "env_from": list(m.client.env_from),
                    "clients": [v.__dict__ for v in m.verdicts],
                }
                for m in self.misses
            ],
            "refused_at_accept": [
                {
                    "node": r.node,
                    "cause": r.cause,
                    "count": r.count,
                    "last_from": r.last_from,
                    "last_from_workload": f"{c.namespace}/{c.workload}" if c.namespace else c.workload,
                }
                for r, c in self.accept
            ],
        }


def _in_cluster(host: str, names: Sequence[str]) -> str:
    """Why a destination is the cluster's own by its name alone ("" when it is not): `names` are the cluster
    domain's suffixes (`.svc`, `.svc.<domain>`, `.<domain>`)."""
    bare = host.rstrip(".")
    for suffix in names:
        if bare == suffix.lstrip(".") or bare.endswith(suffix):
            return f"the name ends with {suffix}"
    if "." not in bare and not _is_ip(bare):
        return "a short name (a Service through the pod's DNS search path)"
    return ""


Intent = Any  # Callable[[Target], str]: "bypass" or "proxy" for the cluster (explain.intent bound to its settings)
Explain = Any  # Callable[[Client, Target], list[Verdict]]: each client's decision with the workload's variables


def report(
    source: Log | Iterable[Event],
    index: PodIndex,
    *,
    domain: str = "cluster.local",
    intent: Intent | None = None,
    verdicts: Explain | None = None,
    since: datetime | None = None,
    kernel: Sequence[tuple[str, Any]] = (),
) -> Report:
    """The report of the access lines at or after `since`, read once, in any order (a stream of `events` holds no
    line in memory: only the aggregates). `intent(target)`: the cluster's own decision (explain.intent with the
    settings), which finds misses by the cluster's ranges and NO_PROXY; without it, by name alone.
    `verdicts(client, target)`: each client's decision with a workload's variables (explain), for the pod of the
    workload whose name sorts first. `kernel`: the ranges the proxy's kernel rules refuse it (rule name, network):
    a `connect` failure to an address in one is reported as `kernel-rules:<rule>` (the rules reset the connect)."""
    names = (".svc", f".svc.{domain}", f".{domain}")
    by_workload: dict[tuple[str, str], dict[str, Destination]] = defaultdict(lambda: defaultdict(Destination))
    misses: dict[tuple[tuple[str, str], str], Miss] = {}
    reasons: dict[str, str] = {}
    unknown: set[str] = set()
    refusals: list[AcceptRefusal] = []
    lines = dropped = unreadable = 0
    first: datetime | None = None
    last: datetime | None = None
    for event in source.events() if isinstance(source, Log) else source:
        if not isinstance(event, Line):
            if isinstance(event, AcceptRefusal):
                refusals.append(event)
            elif isinstance(event, Dropped):
                dropped += event.count
            else:
                unreadable += 1
            continue
        line = event
        if since is not None and line.time < since:
            continue
        lines += 1
        first = line.time if first is None or line.time < first else first
        last = line.time if last is None or line.time > last else last
        if kernel and line.cause == "connect" and _is_ip(line.host):
            address = ipaddress.ip_address(line.host)
            rule = next((r for r, net in kernel if address.version == net.version and address in net), None)
            if rule is not None:
                line = replace(line, cause=f"kernel-rules:{rule}")
        client = index.client(line.client, line.time)
        if client is UNKNOWN:
            unknown.add(_address(line.client))
        by_workload[client.key][line.destination].add(line)
        url = line.url
        reason = reasons.get(url)
        if reason is None:
            if intent is not None:
                bypass = intent(Target.parse(url)) == "bypass"
                reason = (_in_cluster(line.host, names) or "in the cluster's ranges or NO_PROXY") if bypass else ""
            else:
                reason = _in_cluster(line.host, names)
            reasons[url] = reason
        if reason:
            key = (client.key, line.destination)
            miss = misses.get(key)
            if miss is None:
                miss = misses[key] = Miss(client, line.destination, url, reason=reason)
            elif client.pod < miss.client.pod:
                miss.client = client
            miss.count += 1
            miss.last_seen = line.time if miss.last_seen is None or line.time > miss.last_seen else miss.last_seen
    for miss in misses.values():
        if verdicts is not None:
            miss.verdicts = verdicts(miss.client, Target.parse(miss.url))
    accept = [(r, index.client(r.last_from, r.time or datetime.now(timezone.utc))) for r in refusals]
    return Report(
        {k: dict(v) for k, v in by_workload.items()},
        sorted(misses.values(), key=lambda m: (m.client.key, m.destination)),
        sorted(accept, key=lambda a: (a[0].node, a[0].cause, a[0].last_from, a[0].count)),
        lines,
        dropped,
        unreadable,
        sorted(unknown),
        first,
        last,
    )


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _when(t: datetime | None) -> str:
    return "-" if t is None else t.strftime("%Y-%m-%d %H:%M:%S")


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _who(client: Client) -> tuple[str, str]:
    return (client.namespace or "-", client.workload)


def table(r: Report) -> str:
    """The report as text: destinations per workload, refusals, NO_PROXY misses, refusals at accept."""
    out = [f"{r.lines} connections from {_when(r.since)} to {_when(r.until)} UTC"]
    if r.dropped:
        out.append(f"{r.dropped} more were not logged: the proxies' access-log rate bound dropped them")
    if r.unreadable:
        out.append(f"{r.unreadable} access lines could not be read")
    rows: list[tuple[str, ...]] = [
        ("NAMESPACE", "WORKLOAD", "DESTINATION", "REQUESTS", "SENT", "RECEIVED", "LAST SEEN", "VIA")
    ]
    refused: list[tuple[str, ...]] = [("NAMESPACE", "WORKLOAD", "DESTINATION", "CAUSE", "COUNT")]
    for (namespace, workload), destinations in sorted(r.by_workload.items()):
        for name, d in sorted(destinations.items()):
            rows.append((namespace or "-", workload, name, str(d.requests), _bytes(d.bytes_from_client),
                         _bytes(d.bytes_to_client), _when(d.last_seen), "upstream" if d.upstream else "direct"))  # fmt: skip
            refused += [(namespace or "-", workload, name, cause, str(n)) for cause, n in sorted(d.refused.items())]
    out += ["", "Destinations", *_columns(rows)]
    if len(refused) > 1:
        out += ["", "Refused or failed, by cause", *_columns(refused)]
    if r.misses:
        out += ["", "NO_PROXY misses: in-cluster destinations sent through the proxy"]
        for m in r.misses:
            namespace, workload = _who(m.client)
            out.append(f"- {namespace} {workload} -> {m.destination}: {m.count} requests, last {_when(m.last_seen)}")
            out.append(f"  why in-cluster: {m.reason}")
            own = ", ".join(f"{k}={v}" for k, v in m.client.variables) or "none set in the pod's spec"
            out.append(f"  the pod's proxy variables: {own}")
            if m.client.env_from:
                out.append(f"  envFrom: {', '.join(m.client.env_from)}")
            grouped: dict[tuple[str, str], list[str]] = {}
            for v in m.verdicts:
                grouped.setdefault((v.decision, v.why), []).append(v.client)
            for (decision, why), clients in grouped.items():
                out.append(f"  {', '.join(clients)}: {decision}{': ' + why if why else ''}")
            if not m.verdicts and m.client.namespace:
                out.append("  no client of the model sends it to the proxy with these variables: set by the program")
    if r.accept:
        rows = [("NODE", "CAUSE", "COUNT", "LAST FROM", "ITS WORKLOAD")]
        for refusal, client in r.accept:
            namespace, workload = _who(client)
            rows.append((refusal.node or "-", refusal.cause, str(refusal.count), refusal.last_from,
                         f"{namespace}/{workload}" if client.namespace else workload))  # fmt: skip
        out += ["", "Refused at accept (tinyproxy counts these, it does not log each)", *_columns(rows)]
    if r.unknown_clients:
        out += ["", f"Addresses no pod or node of the pod list had then: {', '.join(r.unknown_clients)}"]
    return "\n".join(out) + "\n"


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot(r: Report) -> str:
    """A Graphviz digraph: namespaces (clusters of workloads) to destinations, edges labelled with request counts;
    NO_PROXY misses red, refusals dashed."""
    lines = ["digraph egress {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    namespaces: dict[str, list[str]] = defaultdict(list)
    for namespace, workload in sorted(r.by_workload):
        namespaces[namespace or "nodes"].append(workload)
    for i, (namespace, workloads) in enumerate(sorted(namespaces.items())):
        lines.append(f"  subgraph cluster_{i} {{ label={_dot_id(namespace)};")
        lines += [f"    {_dot_id(f'{namespace}/{w}')} [label={_dot_id(w)}];" for w in workloads]
        lines.append("  }")
    missed = {(m.client.key, m.destination) for m in r.misses}
    destinations = sorted({d for ds in r.by_workload.values() for d in ds})
    lines += [f"  {_dot_id('dest:' + d)} [label={_dot_id(d)}, shape=ellipse];" for d in destinations]
    for (namespace, workload), ds in sorted(r.by_workload.items()):
        for name, d in sorted(ds.items()):
            style = []
            if ((namespace, workload), name) in missed:
                style.append("color=red")
            if d.refused and sum(d.refused.values()) == d.requests:
                style.append("style=dashed")
            attrs = ", ".join([f"label={_dot_id(str(d.requests))}", *style])
            source = _dot_id(f"{namespace or 'nodes'}/{workload}")
            lines.append(f"  {source} -> {_dot_id('dest:' + name)} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _filter_pattern(host: str) -> str:
    """tinyproxy's Filter (ERE, `FilterType ere`, case-insensitive): the host and its subdomains."""
    return "(^|\\.)" + re.escape(host).replace("\\-", "-") + "$"


def suggest(r: Report, no_proxy: NoProxy | None = None) -> str:
    """Per namespace, the destinations its workloads reached through the proxy (not refused, not misses), as
    tinyproxy Filter lines and as NO_PROXY-style host entries; and the misses as the NO_PROXY entries that would
    have sent them direct. The start of an allowlist: nothing here is enforced."""
    missed = {(m.client.key, m.destination) for m in r.misses}
    reached: dict[str, set[tuple[str, int]]] = defaultdict(set)
    misses: dict[str, set[str]] = defaultdict(set)
    for (namespace, workload), ds in r.by_workload.items():
        for name, d in ds.items():
            host, _, port = name.rpartition(":")
            host = host.strip("[]")
            if ((namespace, workload), name) in missed:
                misses[namespace or "nodes"].add(host)
            elif d.requests > sum(d.refused.values()):
                reached[namespace or "nodes"].add((host, int(port)))
    out = ["# Destinations seen, per namespace: the start of an allowlist (nothing is enforced)."]
    for namespace in sorted(set(reached) | set(misses)):
        out += ["", f"## namespace {namespace}"]
        hosts = sorted({h for h, _ in reached[namespace]})
        if hosts:
            out.append("# tinyproxy Filter (FilterType ere, FilterDefaultDeny Yes for an allowlist):")
            out += [_filter_pattern(h) for h in hosts]
            ports = sorted({p for _, p in reached[namespace]})
            out.append(f"# ports: {', '.join(map(str, ports))}")
            out.append(f"# as host entries: {','.join(hosts)}")
        if misses[namespace]:
            entries = sorted({_no_proxy_entry(h) for h in misses[namespace]})
            have = set(no_proxy.tokens()) if no_proxy is not None else set()
            add = [e for e in entries if e not in have]
            out.append(
                f"# NO_PROXY entries for the misses: {','.join(add) if add else '(already listed: see why above)'}"
            )
    return "\n".join(out) + "\n"


def _no_proxy_entry(host: str) -> str:
    """The NO_PROXY entry that covers a missed host: its address, or `.svc`/the cluster domain suffix, or itself."""
    if _is_ip(host):
        return host
    labels = host.rstrip(".").split(".")
    if "svc" in labels:
        return "." + ".".join(labels[labels.index("svc") :])
    return host.rstrip(".")
