"""What each client does with this cluster's destinations: cells, their intent, and a warning where they differ.

`destinations` lists the representative URLs of a cluster (the API server by
name and IP, a Service by every name form, a Service, pod and node IP,
loopback, the metadata endpoints, the user's own entries, an external host).
`intent` says what should happen to any URL: in-cluster ranges, names and the
user's entries bypass the proxy, everything else goes through it. `evaluate`
asks the client model (`clients.decide`) with the environment workloads really
get (`workload_values`, for a runtime selection: by default the cluster-wide one; plus any variable the workload sets
itself, such as ALL_PROXY, npm_config_* or REQUEST_METHOD), and `warnings` turns the cells that differ into one
line per cause, naming the clients, the destinations and what to do. The
command's `explain` and the component's preview print the same lines.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .clients import CLIENTS, TRUST, Client, Decision, Target, decide, matched_entry, workload_variables
from .noproxy import Category, Kind, NoProxy
from .render.env import CONFIG_NAME, env_pairs, workload_values
from .render.runtimes import JDK_JAVA_OPTIONS, NO_PROXY_PYTHON, java_skip_reason
from .render.trust import JAVA_TRUST_OPTIONS, trust_env_pairs
from .settings import Runtime, Settings

__all__ = [
    "GENERIC_LABELS",
    "Cell",
    "Destination",
    "TrustCell",
    "destinations",
    "evaluate",
    "intent",
    "preview_warnings",
    "trust_cells",
    "warnings",
    "workload_env",
]

SERVICE = "my-svc"
EXTERNAL = "http://github.com/"
USER_ROWS = 16  # of the user's own entries, the first ones in NO_PROXY order get a row


@dataclass(frozen=True)
class Destination:
    url: str
    label: str


@dataclass(frozen=True)
class Cell:
    """One client's decision for one URL, the intended one, and why they differ (empty when they agree)."""

    url: str
    client: str
    decision: Decision
    intended: Decision
    warning: str

    def as_dict(self) -> dict[str, str]:
        return {
            "url": self.url,
            "client": self.client,
            "decision": self.decision,
            "intended": self.intended,
            "warning": self.warning,
        }


def _namespace(settings: Settings) -> str:
    return settings.namespaces[0] if settings.namespaces else "default"


def _known_namespaces(settings: Settings) -> set[str]:
    return {
        "default",
        "kube-system",
        settings.deployment.namespace,
        *settings.namespaces,
        *settings.injection.exclude_namespaces,
    }


def _url(host: str, port: int | None = None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}{f':{port}' if port else ''}/"


def _address_in(cidr: str, offset: int = 10) -> str:
    network = ipaddress.ip_network(cidr)
    if network.num_addresses <= 2:
        return str(network.network_address)
    return str(network.network_address + min(offset, network.num_addresses - 2))


def destinations(settings: Settings, no_proxy: NoProxy) -> list[Destination]:
    """This cluster's representative destinations, in a fixed order, without duplicate URLs."""
    c = settings.cluster
    ns, domain = _namespace(settings), c.dns_domain
    out: list[Destination] = [Destination("http://kubernetes.default.svc/", "API server by name")]
    api_ips = [e.value for e in no_proxy.entries if e.category is Category.API_SERVER and e.kind is Kind.IP]
    if not api_ips:
        api_ips = [_address_in(cidr, 1) for cidr in c.service_cidrs[:1]]
    out += [Destination(_url(ip), "API server by IP") for ip in api_ips[:1]]
    out += [
        Destination(_url(e.value), "API server by host name")
        for e in no_proxy.entries
        if e.category is Category.API_SERVER and e.kind is Kind.HOST
    ][:1]
    out += [
        Destination(_url(SERVICE), "Service by short name"),
        Destination(_url(f"{SERVICE}.{ns}"), "Service by name.namespace"),
        Destination(_url(f"{SERVICE}.{ns}.svc"), "Service by name.namespace.svc"),
        Destination(_url(f"{SERVICE}.{ns}.svc.{domain}"), "Service by FQDN"),
    ]
    for label, cidrs in (("Service IP", c.service_cidrs), ("pod IP", c.pod_cidrs), ("node IP", c.node_cidrs)):
        out += [
            Destination(_url(_address_in(cidr)), f"{label} (IPv{ipaddress.ip_network(cidr).version})") for cidr in cidrs
        ]
    out += [
        Destination("http://localhost/", "loopback"),
        Destination("http://127.0.0.1/", "loopback"),
        Destination("http://[::1]/", "loopback"),
    ]
    for entry in no_proxy.entries:
        if entry.category is Category.CLOUD_METADATA:
            host = f"node-1.{entry.value}" if entry.kind is Kind.SUFFIX else entry.value
            out.append(Destination(_url(host), "metadata endpoint"))
    users = [e for e in no_proxy.entries if e.category is Category.USER and e.kind is not Kind.WILDCARD]
    for entry in users[:USER_ROWS]:  # a sample: every row costs one decision per client and entry
        label = f"your noProxy entry {entry.tokens()[0]}"
        if entry.kind is Kind.CIDR:
            out.append(Destination(_url(_address_in(entry.value)), label))
        elif entry.kind is Kind.SUFFIX:
            out += [
                Destination(_url(entry.value, entry.port), label),
                Destination(_url(f"api.{entry.value}", entry.port), label),
            ]
        else:
            out.append(Destination(_url(entry.value, entry.port), label))
    out.append(Destination(EXTERNAL, "external host"))
    seen: set[str] = set()
    unique = []
    for d in out:
        if d.url not in seen:
            seen.add(d.url)
            unique.append(d)
    return unique


def intent(settings: Settings, no_proxy: NoProxy, url: str | Target) -> Decision:
    """What should happen: bypass for loopback, in-cluster ranges and names, and the entries; proxy otherwise.

    Entries are read as meant: a host name covers its subdomains, `.x` covers `x`, and a fully qualified name's
    trailing dot (`kubernetes.default.svc.cluster.local.`) names the same host.
    """
    t = url if isinstance(url, Target) else Target.parse(url)
    host = t.host.rstrip(".") if t.ip is None else t.host
    if t.host == "localhost" or (t.ip is not None and t.ip.is_loopback):
        return "bypass"
    c = settings.cluster
    if t.ip is not None:
        ranges = [*c.service_cidrs, *c.pod_cidrs, *c.node_cidrs, *c.api_server_ips]
        if any(t.ip in ipaddress.ip_network(r, strict=False) for r in ranges):
            return "bypass"
    else:
        labels = t.host.rstrip(".").split(".")
        if len(labels) == 1 or (len(labels) == 2 and labels[1] in _known_namespaces(settings)):
            return "bypass"  # a Service through the pod's DNS search path
    for entry in no_proxy.entries:
        if entry.port is not None and entry.port != t.port:
            continue
        if entry.kind is Kind.WILDCARD:
            return "bypass"
        if entry.kind in (Kind.IP, Kind.CIDR):
            network = entry.network
            if t.ip is not None and network is not None and t.ip.version == network.version and t.ip in network:
                return "bypass"
        elif host == entry.value or host.endswith("." + entry.value):
            return "bypass"
    return "proxy"


def workload_env(settings: Settings, no_proxy: NoProxy, selection: Iterable[Runtime] | None = None) -> dict[str, str]:
    """The environment a workload of `selection` (default: the cluster-wide one) gets: both spellings of the three
    variables and the selected runtimes' variables."""
    chosen = settings.runtimes.cluster_wide if selection is None else selection
    return {name: str(value) for name, value in env_pairs(workload_values(settings, no_proxy, selection=chosen))}


def _cells(settings: Settings, no_proxy: NoProxy, urls: Sequence[str], env: Mapping[str, str]) -> list[Cell]:
    cells = []
    for url in urls:
        t = Target.parse(url)
        wanted = intent(settings, no_proxy, t)
        for c in CLIENTS:
            decision = decide(c, env, t)
            why = "" if decision == wanted else _why(settings, no_proxy, env, c, t, decision, wanted)
            cells.append(Cell(url, c.id, decision, wanted, why))
    return cells


def evaluate(
    settings: Settings,
    no_proxy: NoProxy,
    urls: Sequence[str] | None = None,
    selection: Iterable[Runtime] | None = None,
    own: Mapping[str, str] | None = None,
) -> list[Cell]:
    """One cell per URL and client, URLs in order, clients in the model's order, for a workload of `selection`
    that sets the variables `own` itself (they replace the rendered ones of the same name)."""
    if urls is None:
        urls = [d.url for d in destinations(settings, no_proxy)]
    return _cells(settings, no_proxy, urls, {**workload_env(settings, no_proxy, selection), **(own or {})})


def _why(
    settings: Settings, no_proxy: NoProxy, env: Mapping[str, str], c: Client, t: Target, got: Decision, wanted: Decision
) -> str:
    """One line, the same for every client it applies to: why the decision differs from the intent, and what to do."""
    own = workload_variables(c, env, t.scheme)
    if own and decide(c, {k: v for k, v in env.items() if k not in own}, t) != got:
        return _own_variables(own)
    if got == "error":
        return (
            "fails on every request: httpx refuses IPv6 CIDRs and bracketed IPv6 addresses in NO_PROXY (InvalidURL "
            f"when a client is created): select the python runtime (annotation {settings.runtimes.annotation}: "
            f"python), which gives both spellings {NO_PROXY_PYTHON}"
        )
    if c.id == "java" and "JDK_JAVA_OPTIONS" not in env:
        skipped = java_skip_reason(settings.http_proxy, settings.https_proxy)
        if skipped:
            return f"JVMs ignore the *_proxy variables, and JDK_JAVA_OPTIONS is not rendered: {skipped}"
        return (
            "JVMs ignore the *_proxy variables: select the java runtime for JVM workloads (annotation "
            f"{settings.runtimes.annotation}: java, runtimes.namespaces or runtimes.java) so that they get "
            "JDK_JAVA_OPTIONS"
        )
    if c.requires and any(env.get(k) != v for k, v in c.requires):
        return (
            "Node's http and fetch ignore the variables without NODE_USE_ENV_PROXY=1: select the node runtime for "
            f"Node workloads (annotation {settings.runtimes.annotation}: node, runtimes.namespaces or runtimes.node)"
        )
    if got == "proxy":
        if t.ip is None and t.host.endswith(".") and decide(c, env, replace(t, host=t.host.rstrip("."))) == wanted:
            bare = t.host.rstrip(".")
            covering = next((e.value for e in no_proxy.entries if _entry_covers(e.value.lstrip("."), bare)), None)
            fix = f", or add '{covering.lstrip('.')}.' to proxy.noProxy" if covering else ""
            return (
                f"these clients keep the trailing dot of {t.host}, which no NO_PROXY entry ends with, so they send it "
                f"to the proxy: call in-cluster names without the trailing dot{fix}"
            )
        if t.ip is None and not any(
            _entry_covers(e.value, t.host) for e in no_proxy.entries if e.kind in (Kind.HOST, Kind.SUFFIX)
        ):
            return (
                "no NO_PROXY entry can cover a Service's short name, so it goes to the proxy, whose node resolver "
                "cannot resolve it: call the Service as <name>.<namespace>.svc or by its FQDN"
            )
        if c.id == "java" and t.ip is not None:
            return (
                "Java's nonProxyHosts has no CIDRs and these ranges have no prefix pattern, so the JVM sends "
                "these addresses to the proxy: address them by name"
            )
        if (
            t.ip is not None
            and t.ip.version == 6
            and any(e.kind is Kind.IP and e.value == t.host for e in no_proxy.entries)
        ):
            if all(decide(c, {**env, "no_proxy": v, "NO_PROXY": v}, t) == "proxy" for v in (t.host, f"[{t.host}]")):
                return (
                    "Ruby splits NO_PROXY entries at ':', so no IPv6 address entry works for it: address the "
                    "destination by name"
                )
            return (
                "these clients match an IPv6 address only bracketed ([addr]), which is listed only when NO_PROXY "
                "holds an IPv6 CIDR (httpx refuses brackets): address the destination by name"
            )
        if t.ip is not None and not (c.cidr and t.ip.version in c.cidr):
            return (
                f"these clients read no IPv{t.ip.version} CIDRs in NO_PROXY, so they send addresses in the "
                "cluster's ranges to the proxy: address them by name"
            )
        return f"no NO_PROXY entry in a form these clients read covers {t.host}: add one"
    entry = matched_entry(c, env, t)
    if c.id == "ruby" and entry is not None and ":" not in entry and any(":" in e.value for e in no_proxy.entries):
        return (
            f"Ruby splits NO_PROXY entries at ':' and reads {entry!r} out of an IPv6 entry, which matches {t.host}, "
            "so it connects directly: set no_proxy without IPv6 entries for Ruby workloads"
        )
    if entry is not None:
        return f"these clients read NO_PROXY entry {entry!r} as covering {t.host}, so they connect directly"
    return f"these clients do not send {t.host} to the proxy"


def _own_variables(names: Sequence[str]) -> str:
    """Why a variable the workload sets itself changes these clients' decision, and what to do."""
    if "REQUEST_METHOD" in names:
        return (
            "the workload sets REQUEST_METHOD, which marks a CGI process: Go then refuses HTTP_PROXY (an error on "
            "every http request), Python's clients drop HTTP_PROXY and Ruby reads CGI_HTTP_PROXY instead: unset "
            "REQUEST_METHOD in the workload's environment"
        )
    npm = [n for n in names if n.lower().startswith("npm_config_")]
    if npm:
        return (
            f"the workload sets {', '.join(npm)}, which proxy-from-env 1 reads ahead of the rendered variables "
            "(npm_config_no_proxy ahead of NO_PROXY): unset it, or give it the rendered value"
        )
    return (
        f"the workload sets {', '.join(names)}, which these clients use as their proxy when the scheme's own "
        "variable gives none: set HTTP_PROXY and HTTPS_PROXY, or unset it"
    )


def _entry_covers(value: str, host: str) -> bool:
    return host == value or host.endswith("." + value)


# Destinations every cluster has whatever its settings (the API server's name, a Service's names, loopback, an
# external host): what clients do with them is the same everywhere, so `explain` shows it and previews do not.
GENERIC_LABELS = frozenset(
    {
        "API server by name",
        "Service by short name",
        "Service by name.namespace",
        "Service by name.namespace.svc",
        "Service by FQDN",
        "loopback",
        "external host",
    }
)


def preview_warnings(settings: Settings, no_proxy: NoProxy) -> list[str]:
    """The warnings that apply to these settings: a client that misses a destination these settings make (a range,
    the API server's address, a metadata endpoint, a noProxy entry); each cause once. The ones every cluster has
    are `explain`'s."""
    labels = {d.url: d.label for d in destinations(settings, no_proxy)}
    cells = [c for c in evaluate(settings, no_proxy) if labels.get(c.url) not in GENERIC_LABELS]
    return warnings(settings, no_proxy, cells)


def warnings(settings: Settings, no_proxy: NoProxy, cells: Sequence[Cell] | None = None) -> list[str]:
    """One line per distinct cause: the clients, the destinations it hits, and what to do; in a stable order."""
    if cells is None:
        cells = evaluate(settings, no_proxy)
    labels = {d.url: d.label for d in destinations(settings, no_proxy)}
    grouped: dict[str, tuple[list[str], list[str]]] = {}
    for cell in cells:
        if not cell.warning:
            continue
        clients, urls = grouped.setdefault(cell.warning, ([], []))
        if cell.client not in clients:
            clients.append(cell.client)
        if cell.url not in urls:
            urls.append(cell.url)
    every = list(dict.fromkeys(cell.url for cell in cells))
    lines = []
    for text, (clients, urls) in grouped.items():
        shown = (
            "every destination"
            if urls == every and len(every) > 1
            else ", ".join(f"{u} ({labels[u]})" if u in labels else u for u in urls)
        )
        lines.append(f"{text} [{', '.join(clients)}; {shown}]")
    return lines


@dataclass(frozen=True)
class TrustCell:
    """How one client gets the TLS-inspecting proxy's CA in a workload with the trust group: the variable (or
    property) it takes the CA from, empty when none; and, when none, why and what to do."""

    client: str
    source: str
    warning: str

    def as_dict(self) -> dict[str, str]:
        return {"client": self.client, "source": self.source, "warning": self.warning}


def trust_cells(settings: Settings, no_proxy: NoProxy, selection: Iterable[Runtime] | None = None) -> list[TrustCell]:
    """One cell per client of the model, for a workload of `selection` that gets the trust group; [] without
    `proxy.upstream.trustedCa`."""
    if settings.trusted_ca is None:
        return []
    chosen = frozenset(settings.runtimes.cluster_wide if selection is None else selection)
    values = workload_values(settings, no_proxy, selection=chosen).trusted()
    env = {**{name: str(value) for name, value in env_pairs(values)}, **dict(trust_env_pairs())}
    cells = []
    for c in CLIENTS:
        trust = TRUST[c.id]
        if trust.jvm:
            if JAVA_TRUST_OPTIONS in env.get(JDK_JAVA_OPTIONS, ""):
                cells.append(TrustCell(c.id, f"{JDK_JAVA_OPTIONS} (javax.net.ssl.trustStore)", ""))
            else:
                cells.append(
                    TrustCell(
                        c.id,
                        "",
                        "JVMs take the truststore from JDK_JAVA_OPTIONS, rendered with the java runtime: select it "
                        f"(annotation {settings.runtimes.annotation}: java)",
                    )
                )
            continue
        found = next((name for name in trust.variables if env.get(name)), "")
        if found:
            cells.append(TrustCell(c.id, f"{found} ({'added' if trust.adds else 'merged bundle'})", ""))
        else:
            cells.append(
                TrustCell(
                    c.id,
                    "",
                    f"reads none of the trust variables, so it fails verification through the inspecting proxy: "
                    f"give it the CA by {trust.otherwise} (the bundle is mounted at {env['SSL_CERT_FILE']})",
                )
            )
    return cells


def resolve_env(
    settings: Settings, no_proxy: NoProxy, variables: Mapping[str, str], env_from: Sequence[str]
) -> dict[str, str]:
    """A pod's proxy variables as its clients read them: what its spec writes, a reference to `proxy-config` (by
    `envFrom` or by key) as the settings render it; another reference stays unresolved (left out)."""
    rendered = workload_env(settings, no_proxy)
    env: dict[str, str] = {}
    if any(source.split("/", 1)[1] == CONFIG_NAME for source in env_from):
        env.update(rendered)
    for name, value in variables.items():
        if not value.startswith("<"):
            env[name] = value
        elif f" {CONFIG_NAME} key " in value and name in rendered:
            env[name] = rendered[name]
    return env


def miss_verdicts(
    settings: Settings, no_proxy: NoProxy, env: Mapping[str, str], url: str | Target
) -> list[tuple[str, Decision, str]]:
    """For a destination the cluster reaches directly that went through the proxy: each client of the model that
    sends it to the proxy with `env`, and why (the same reasons `explain` gives)."""
    t = url if isinstance(url, Target) else Target.parse(url)
    wanted = intent(settings, no_proxy, t)
    unset = "NO_PROXY" not in env and "no_proxy" not in env
    out = []
    for c in CLIENTS:
        decision = decide(c, env, t)
        if decision != wanted:
            why = (
                "the pod sets a proxy and no NO_PROXY, so these clients send every destination to the proxy: give it "
                f"the namespace's {CONFIG_NAME} (envFrom) or the injection's variables"
                if unset and decision == "proxy"
                else _why(settings, no_proxy, env, c, t, decision, wanted)
            )
            out.append((c.id, decision, why))
    return out
