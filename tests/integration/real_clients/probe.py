"""Run every real client on a matrix of NO_PROXY values and URLs; print docs/client-probe.md.

    .venv/bin/python -m tests.integration.real_clients.probe > docs/client-probe.md

Needs root (the harness's network namespace) and `bash scripts/clients`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence

from .harness import REAL_CLIENTS, Answer, explain_many, versions

PROXY_HOST = "http-proxy.kube-system.svc.k8s.internal"
PROXY = f"http://{PROXY_HOST}:8888"

NO_PROXY_VALUES = (
    "example.com",
    ".example.com",
    "*.example.com",
    "*",
    "a.test,*",
    "example.com:8080",
    "10.0.0.0/8",
    "10.1.2.3",
    "10.1.2.3:8080",
    "fd00::/8",
    "fd00::1",
    "[fd00::1]",
    "localhost",
    "svc",
    ".svc",
    "0.1",
    "::1",
    "a.test, example.com",
    "EXAMPLE.COM",
)
URLS = (
    "http://example.com/",
    "http://api.example.com/",
    "http://notexample.com/",
    "http://example.com:8080/",
    "http://10.1.2.3/",
    "http://10.1.2.3:8080/",
    "http://10.200.0.1/",
    "http://10.0.0.1/",
    "http://[fd00::1]/",
    "http://[fd00::2]/",
    "http://localhost/",
    "http://127.0.0.1/",
    "http://[::1]/",
    "http://kubernetes.default.svc/",
    "http://svc/",
    "http://github.com/",
)
JAVA_PATTERNS = (
    "*.example.com",
    "example.*",
    "10.*",
    "[fd00::1]",
    "fd00::1",
    "[fd00:*",
    "localhost|127.*|[::1]",
    "EXAMPLE.COM",
    "",
)
SHORT = {
    "python-urllib": "urllib",
    "python-requests": "requests",
    "python-httpx": "httpx",
    "python-aiohttp": "aiohttp",
    "node-proxy-from-env": "pfe 2",
    "node-proxy-from-env-1": "pfe 1",
    "node-undici": "undici 8",
    "node-undici-7": "undici 7",
    "node-http": "node http",
    "node-fetch": "node fetch",
}


def java_options(non_proxy_hosts: str | None) -> str:
    options = (
        f"-Dhttp.proxyHost={PROXY_HOST} -Dhttp.proxyPort=8888 -Dhttps.proxyHost={PROXY_HOST} -Dhttps.proxyPort=8888"
    )
    return options if non_proxy_hosts is None else f"{options} -Dhttp.nonProxyHosts={non_proxy_hosts}"


def probe_env(no_proxy: str) -> dict[str, str]:
    return {
        "HTTP_PROXY": PROXY,
        "http_proxy": PROXY,
        "HTTPS_PROXY": PROXY,
        "https_proxy": PROXY,
        "NO_PROXY": no_proxy,
        "no_proxy": no_proxy,
        "NODE_USE_ENV_PROXY": "1",
        "JAVA_TOOL_OPTIONS": java_options(no_proxy.replace(",", "|")),
    }


# Which spelling wins: (label, env, urls). Java reads no environment variable: it is left out.
PRECEDENCE: tuple[tuple[str, dict[str, str], tuple[str, ...]], ...] = (
    (
        'NO_PROXY="github.com", no_proxy=""',
        {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "NO_PROXY": "github.com", "no_proxy": "", "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/",),
    ),
    (
        'no_proxy="github.com", NO_PROXY=""',
        {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "NO_PROXY": "", "no_proxy": "github.com", "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/",),
    ),
    (
        'NO_PROXY="github.com", no_proxy="example.com" (NO_PROXY first in environ)',
        {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "NO_PROXY": "github.com", "no_proxy": "example.com",
         "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/", "http://example.com/"),
    ),
    (
        'no_proxy="example.com", NO_PROXY="github.com" (no_proxy first in environ)',
        {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "no_proxy": "example.com", "NO_PROXY": "github.com",
         "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/", "http://example.com/"),
    ),
    (
        'only NO_PROXY="github.com" (upper case)',
        {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "NO_PROXY": "github.com", "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/",),
    ),
    (
        'only no_proxy="github.com" (lower case)',
        {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "no_proxy": "github.com", "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/",),
    ),
    (
        "only HTTP_PROXY (upper case), no NO_PROXY",
        {"HTTP_PROXY": PROXY, "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/",),
    ),
    (
        "only http_proxy (lower case), no NO_PROXY",
        {"http_proxy": PROXY, "NODE_USE_ENV_PROXY": "1"},
        ("http://github.com/",),
    ),
)  # fmt: skip


# Written by hand from the tables below (and the clients' sources where a table cannot tell); the tables are
# regenerated on every run, so a change in a client shows up there first.
RULES = """\
## The rules, per client (read from the tables below)

Terms: *bare* = the entry's own host (`example.com` for entry `.example.com`); *sub* = a name under it
(`api.example.com`); *dot boundary* = suffix match only at a label boundary (`example.com` never matches
`notexample.com` in any client here); *raw suffix* = plain string suffix.

| client | which spelling | `x` | `.x` | `*.x` | `*` | CIDR v4 / v6 | `host:port` | IPv6 entry | case | loopback | errors |
|---|---|---|---|---|---|---|---|---|---|---|---|
| curl 7.88 | `no_proxy`, then `NO_PROXY` if lower unset/empty; proxy: only `http_proxy` (never `HTTP_PROXY`; `HTTPS_PROXY` is read, per its docs) | bare + sub | bare + sub | nothing | alone only | v4 yes / v6 no | entry never matches | bare `fd00::1` only | insensitive | none | none |
| wget 1.21 | lower case only (`http_proxy`, `no_proxy`) | bare + sub | sub only | nothing | nothing | no | entry never matches | bare only | insensitive | none | none |
| Python urllib | lower case if set (an empty lower case value *removes* the upper one) | bare + sub (port optional) | bare + sub | nothing | alone only | no | yes (exact port) | bracketed `[fd00::1]` only (host keeps brackets) | insensitive | none | none |
| requests 2.34 | its own rule `no_proxy or NO_PROXY` (empty lower falls through), OR urllib's | bare + sub | bare + sub | nothing | alone only (via urllib) | v4 yes / v6 no | names yes; IPv4 entries with a port never match | bare only | insensitive | none | none |
| httpx 0.28 | urllib's `getproxies()` | bare + sub | sub only | nothing | alone or in a list | no (`10.0.0.0/8` matches only `10.0.0.0`) | yes | bare only; `[fd00::1]` or `fd00::/8` make `httpx.Client()` raise InvalidURL: every request fails | insensitive | none | `[v6]`, `v6/len` |
| aiohttp 3.14 | urllib's (lower case if set) | bare + sub | bare + sub | nothing | alone only | no | never (host given without port) | bare only (host without brackets) | insensitive | none | none |
| Go 1.26 | `NO_PROXY` if non-empty, else `no_proxy` (upper wins, unlike all others); `HTTP_PROXY` before `http_proxy` | bare + sub | sub only | sub only | alone or in a list | v4 yes / v6 yes | yes | bare; `[fd00::1]` without a port is ignored | insensitive | `localhost` and loopback IPs never proxied | none |
| Ruby 3.1 (uri 0.12) | `no_proxy` if set (even empty), else `NO_PROXY` | bare + sub | sub only | nothing | nothing | on the *resolved* address: v4 yes; v6 entries are split at `:` | yes | broken: the parser splits at `:`, so `fd00::1` and `::1` become entries `fd00` and `1`, and `1` matches every host ending in `.1` (10.0.0.1, 10.200.0.1) | insensitive | any host *resolving* to 127.x/::1 never proxied (it does a DNS lookup) | none |
| proxy-from-env 1.1 / 2.1 (identical here) | `no_proxy` or `NO_PROXY` (empty lower falls through) | bare only (exact) | sub only (raw suffix) | sub only (raw suffix after `*`) | alone or in a list | no | yes | bracketed only | insensitive (NO_PROXY lowercased) | none | none |
| undici 8.12 EnvHttpProxyAgent | `no_proxy ?? NO_PROXY` (empty lower wins) | bare + sub | bare + sub | sub only | alone or in a list | no | yes | bare and bracketed | insensitive | none | none |
| undici 7.30 EnvHttpProxyAgent | same | bare + sub | bare + sub | bare + sub | alone only | no | yes | bracketed only | insensitive | none | none |
| Node 24 http (NODE_USE_ENV_PROXY) | `no_proxy` or `NO_PROXY` (empty lower falls through) | bare only (exact) | bare + sub | sub only | alone or in a list | no | yes | bare only | insensitive | none | none |
| Node 24 fetch (NODE_USE_ENV_PROXY) | like undici 7 (Node 24 bundles undici 7) | bare + sub | bare + sub | bare + sub | alone only | no | yes | bracketed only | insensitive | none | none |
| npm 11 (@npmcli/agent 4.0) | variable names lower-cased, the *last* one in the environment wins; an http URL uses `https_proxy` first | bare + sub (whole labels) | bare + sub | nothing | nothing | no | entry never matches | bracketed only | **sensitive** | none | none |
| Java 17 ProxySelector | JAVA_TOOL_OPTIONS only (`-Dhttp.nonProxyHosts`, `\\|`-separated) | bare only (exact) | nothing (the dot is literal) | sub only (`*` = any characters) | everything | no | entry never matches | bracketed `[fd00::1]` only; `[fd00:*` matches the prefix | insensitive | `localhost\\|127.*\\|[::1]\\|0.0.0.0\\|[::0]` appended unless the value is empty | a space in the value splits JAVA_TOOL_OPTIONS: the JVM does not start |

Surprises worth a test of their own:

- `0.1` matches `10.0.0.1` and `10.200.0.1` (dot-boundary suffix on an IPv4 literal) in wget, urllib, requests,
  httpx, aiohttp, Ruby, undici 7/8, Node fetch and npm; not in curl, Go, proxy-from-env, Node http, Java.
- Ruby turns `fd00::1` or `::1` into an entry `1` that bypasses every IPv4 address ending in `.1`.
- Bare vs bracketed IPv6 entries against `http://[fd00::1]/`: bare works in curl, wget, requests, httpx, aiohttp,
  Go, undici 8, Node http; bracketed works in urllib, proxy-from-env, undici 7/8, Node fetch, npm, Java; only
  undici 8 accepts both; Ruby accepts neither; httpx *fails* on the bracketed one.
- `*` inside a list (`a.test,*`) disables the proxy in httpx, Go, proxy-from-env, undici 8, Node http, Java;
  curl, urllib, requests, aiohttp, undici 7 and Node fetch honour `*` only alone; wget, Ruby, npm never.
- Spelling: with `NO_PROXY=github.com` and `no_proxy=""`, curl, requests, Go, proxy-from-env and Node http bypass
  github.com, the others proxy it (npm because `no_proxy` came later in the environment). With both set to
  different values every client reads the lower case one except Go (upper) and npm (the later one).
- Node http vs Node fetch differ on `x` (exact vs bare + sub), `*.x`, `*` in a list, `0.1` and IPv6 spelling.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(results: Mapping[str, Mapping[str, Answer]], clients: Sequence[str], urls: Sequence[str]) -> list[str]:
    head = "| URL | " + " | ".join(SHORT.get(c, c) for c in clients) + " |"
    rows = [head, "|" + "---|" * (len(clients) + 1)]
    for url in urls:
        rows.append(f"| `{url}` | " + " | ".join(results[c][url].decision for c in clients) + " |")
    return rows


def errors(results: Mapping[str, Mapping[str, Answer]], clients: Sequence[str]) -> list[str]:
    """One line per client that answered "error", with its own words, so a misclassification is visible."""
    lines = []
    for client in clients:
        failed = {url: a for url, a in results[client].items() if a.decision == "error"}
        if failed:
            first = next(iter(failed.values())).detail.replace("\n", " ")[:240]
            lines.append(f"- error from {client} for {len(failed)} URL(s), e.g.: `{first}`")
    return lines


def main() -> int:
    started = time.monotonic()
    out: list[str] = []
    found = versions()
    out += [
        "# How real HTTP clients read NO_PROXY",
        "",
        "Generated by `.venv/bin/python -m tests.integration.real_clients.probe > docs/client-probe.md` (as root,",
        "after `bash scripts/clients`): every cell is a real client's own answer, through the harness in",
        "`tests/integration/real_clients/` — its decision function where it has one (Python urllib, requests, httpx,",
        "aiohttp, Go, Ruby, proxy-from-env, npm's agent, Java's ProxySelector), otherwise a real request inside a",
        "network namespace with only `lo`, seen by a recording proxy or a recording origin (curl, wget, undici,",
        "Node's http and fetch). `proxy`: the client sends the request to the proxy; `bypass`: it connects",
        "directly; `error`: it refuses before connecting.",
        "",
        "Unless said otherwise each probe sets `HTTP_PROXY`, `http_proxy`, `HTTPS_PROXY` and `https_proxy` to",
        f"`{PROXY}`, `NO_PROXY` and `no_proxy` to the same value, `NODE_USE_ENV_PROXY=1`, and for Java",
        "`JAVA_TOOL_OPTIONS` with `-Dhttp.proxyHost`/`-Dhttps.proxyHost` and `-Dhttp.nonProxyHosts=` the probe value",
        "with `,` replaced by `|`.",
        "",
        "## Versions",
        "",
        "| client | version |",
        "|---|---|",
    ]
    out += [f"| {c} | {_cell(found[c])} |" for c in REAL_CLIENTS]
    out += ["", RULES, "## NO_PROXY values", ""]
    for value in NO_PROXY_VALUES:
        results = explain_many(probe_env(value), URLS)
        out += [f"### NO_PROXY=`{value}`", "", *table(results, REAL_CLIENTS, URLS), ""]
        notes = errors(results, REAL_CLIENTS)
        out += [*notes, ""] if notes else []
    out += ["## Which variable wins", "", "Java reads no environment variable (only JAVA_TOOL_OPTIONS): not shown.", ""]
    clients = [c for c in REAL_CLIENTS if c != "java"]
    head = "| environment | URL | " + " | ".join(SHORT.get(c, c) for c in clients) + " |"
    out += [head, "|" + "---|" * (len(clients) + 2)]
    for label, env, urls in PRECEDENCE:
        results = explain_many(env, urls, clients)
        for url in urls:
            out.append(f"| {label} | `{url}` | " + " | ".join(results[c][url].decision for c in clients) + " |")
    out += ["", "## Java: http.nonProxyHosts patterns", ""]
    out += [
        "`JAVA_TOOL_OPTIONS` with the proxy hosts and `-Dhttp.nonProxyHosts=<pattern>`; rows URLs, columns patterns.",
        "",
    ]
    java: dict[str, Mapping[str, Answer]] = {}
    for pattern in JAVA_PATTERNS:
        env = {"JAVA_TOOL_OPTIONS": java_options(pattern)}
        java[pattern] = explain_many(env, URLS, ["java"])["java"]
    java["(not set)"] = explain_many({"JAVA_TOOL_OPTIONS": java_options(None)}, URLS, ["java"])["java"]
    patterns = list(java)
    out += ["| URL | " + " | ".join(f"`{_cell(p)}`" if p else "`` (empty)" for p in patterns) + " |"]
    out += ["|" + "---|" * (len(patterns) + 1)]
    for url in URLS:
        out.append(f"| `{url}` | " + " | ".join(java[p][url].decision for p in patterns) + " |")
    out += ["", f"_Probe run took {time.monotonic() - started:.0f} s._", ""]
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
