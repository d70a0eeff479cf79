"""`proxy-component check --probe URL...`: through each node's proxy, to each URL, what really happens.

One short-lived Pod per node that runs a proxy pod, pinned there by `nodeName`, in a namespace of its own and with
the proxy's own image and pull Secrets (busybox's `sh`, `nc`, `base64` and `timeout`, which the project's image links:
nothing else). For each URL it opens a connection from the pod network to its node's proxy (`status.hostIP`, the proxy's
port) and sends what a client sends: `CONNECT host:port` for https (then, in the tunnel, a TLS ClientHello made by
this process), a `GET http://...` for http. It prints the raw bytes it got back, base64-encoded, and exits.

This process judges the transcript: tinyproxy's own status line and page (403 Filtered, 403 Access denied,
502 upstream unreachable, 500 unable to connect, with the proxy pod's log line telling a DNS failure from a
refused connection), an upstream's answer (407 and the like), and for https the origin's TLS answer, fed into the
very TLS client object that made the ClientHello: OpenSSL verifies the chain against `proxy.upstream.trustedCa`
(else this machine's default store) and the host name. A TLS 1.3 server's certificate is verified with its whole
first flight; a TLS 1.2 server's when OpenSSL moves on to its key exchange. No key is exchanged with the origin
beyond that: the probe shows what certificate the path presents, not that the origin holds its key.

Why a namespace of its own (`PROBE_NAMESPACE`, whose labels make the API server enforce Pod Security
`restricted` on every pod created there; `render --format check-rbac --probe` writes it and binds the role to
create and delete pods there only). RBAC cannot limit which pods a role creates: with the role in the proxy's
namespace (kube-system), whoever ran the probe could create a privileged pod with the host's PID namespace and
`/` mounted, on any node, or one that mounts any Secret or runs as any service account there, and delete any pod
there. The probe needs none of it: it runs on the pod network, as the proxy's non-root UID, without capabilities,
a service account token or any volume but an emptyDir, so it passes `restricted` (no hostNetwork needed). The other
way, a ValidatingAdmissionPolicy admitting only pods of the probe's exact shape, would have to enumerate every pod
field that grants privilege (a list each Kubernetes release extends, where `restricted` is Kubernetes' own,
versioned policy), match every identity the role is bound to, and guard deletes too. The namespace needs no CEL,
holds for whoever is bound to the role, and works on any cluster with Pod Security admission (GA since 1.25). Its
cost: the pull Secrets the image needs must be copied into that namespace (and whoever holds the role can read
them, as a pod there may mount them).
"""

from __future__ import annotations

import base64
import contextlib
import re
import secrets
import shlex
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from .dataplane.common import restricted_security_context
from .dataplane.workload import image_pull_secrets, node_selector, tolerations
from .settings import PROBE_NAMESPACE, Settings

__all__ = [
    "OUTCOMES",
    "PROBE_COMPONENT",
    "ProbeResult",
    "Target",
    "TlsClient",
    "classify",
    "parse_targets",
    "parse_transcript",
    "pod_script",
    "probe_pod",
    "tls_client",
]

PROBE_COMPONENT = "check-probe"
RUN_LABEL = "proxy-component.io/probe-run"
MARK = "proxy-component-probe"
# What a result can be; "ok" alone is not a failure.
OUTCOMES = (
    "ok",
    "filtered",  # tinyproxy's Filter refused the host
    "not-allowed",  # tinyproxy's Allow or ConnectPort refused the pod or the port
    "dns-failure",  # tinyproxy could not resolve the host
    "connect-failed",  # tinyproxy could not connect to the host (refused, unreachable)
    "upstream-refused",  # the upstream proxy is unreachable or refused the request
    "upstream-auth",  # the upstream proxy answered 407
    "tls-failure",  # the origin's (or the inspecting upstream's) certificate does not verify against the CA
    "timeout",  # no (complete) answer within the per-URL time
    "proxy-unreachable",  # the pod could not connect to its node's proxy
    "error",  # anything else: the detail says what
)
HRR_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")


class Target(NamedTuple):
    """One URL to probe: its scheme, host (no brackets), port and request target."""

    url: str
    scheme: str
    host: str
    port: int
    path: str

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_targets(urls: Sequence[str]) -> list[Target]:
    """The --probe URLs, each http:// or https:// with a host; errors name the value."""
    targets = []
    for url in urls:
        parts = urlsplit(url)
        example = "(expected e.g. https://registry-1.docker.io/v2/)"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--probe: {url!r} is not an http:// or https:// URL with a host {example}")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ValueError(f"--probe: {url!r} has an invalid port {example}") from None
        if parts.username or parts.password:
            raise ValueError(f"--probe: {url!r} carries credentials, which the probe would log {example}")
        targets.append(Target(url, parts.scheme, parts.hostname, port, parts.path or "/"))
    return targets


@dataclass
class TlsClient:
    """A TLS client without a socket: its ClientHello goes through the probe pod, the answer comes back to it."""

    obj: ssl.SSLObject
    incoming: ssl.MemoryBIO
    outgoing: ssl.MemoryBIO
    hello: bytes
    ca: str  # what the chain is verified against, for the report


def tls_client(host: str, trusted_ca: str | None) -> TlsClient:
    """A client for `host` that verifies against the trustedCa bundle, else the default store, and its ClientHello."""
    context = ssl.create_default_context(cadata=trusted_ca) if trusted_ca else ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context.wrap_bio(incoming, outgoing, server_hostname=host)
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    ca = "proxy.upstream.trustedCa" if trusted_ca else "the default trust store"
    return TlsClient(obj, incoming, outgoing, outgoing.read(), ca)


def _request(target: Target) -> str:
    """The request line and headers, as a printf format (only \\r\\n escapes) safe inside single quotes."""
    if target.scheme == "https":
        text = f"CONNECT {target.authority} HTTP/1.1\\r\\nHost: {target.authority}\\r\\n\\r\\n"
    else:
        text = (
            f"GET http://{target.authority}{target.path} HTTP/1.1\\r\\nHost: {target.authority}\\r\\n"
            "User-Agent: proxy-component-probe\\r\\nConnection: close\\r\\n\\r\\n"
        )
    return text.replace("%", "%%")


def pod_script(targets: Sequence[Target], hellos: Sequence[bytes | None], port: int, wait: int) -> str:
    """The probe pod's /bin/sh script: every URL at once (each within `wait` seconds), then the transcripts in order.

    `$PROXY_HOST` is the node's address (the downward API's status.hostIP); files go to the scratch emptyDir at
    /probe (`$PROBE_DIR` elsewhere, as in the tests).
    """
    lines = [
        "set -u",
        'cd "${PROBE_DIR:-/probe}"',
        "probe() {",
        f'  {{ printf "$2"; [ -z "$3" ] || printf %s "$3" | base64 -d; sleep {wait}; }} \\',
        f'    | timeout -s KILL {wait} nc "$PROXY_HOST" {port} 2>"$1.err" | base64 >"$1.out"',
        "}",
    ]
    for index, (target, hello) in enumerate(zip(targets, hellos, strict=True)):
        encoded = base64.b64encode(hello).decode("ascii") if hello else ""
        lines.append(f"probe {index} {shlex.quote(_request(target))} {shlex.quote(encoded)} &")
    lines.append("wait")
    lines.append(f"for i in {' '.join(str(i) for i in range(len(targets)))}; do")
    lines.append(f'  echo "{MARK} $i out"; cat "$i.out"; echo "{MARK} $i err"; cat "$i.err"')
    lines.append("done")
    lines.append(f'echo "{MARK} end"')
    return "\n".join(lines) + "\n"


def probe_pod(settings: Settings, node: str, run: str, index: int, script: str, deadline: int) -> dict[str, Any]:
    """The probe Pod for one node, in `PROBE_NAMESPACE`: the proxy's image and pull Secrets, pinned, with the
    proxy's nodeSelector and tolerations (it runs where a proxy pod runs), non-root, read-only, no capabilities,
    no service account token (Pod Security `restricted`), killed by the kubelet after `deadline` seconds at the
    latest."""
    d = settings.deployment
    uid = d.run_as_user
    tolerated = tolerations(settings)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"proxy-component-probe-{run}-{index}",
            "namespace": PROBE_NAMESPACE,
            "labels": probe_labels(run),
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": deadline,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "nodeSelector": node_selector(settings),
            **({"tolerations": tolerated} if tolerated else {}),
            **image_pull_secrets(settings),
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": uid,
                "runAsGroup": uid,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": d.image,
                    "imagePullPolicy": d.image_pull_policy,
                    "command": ["/bin/sh", "-c", script],
                    "env": [{"name": "PROXY_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "100m", "memory": "32Mi"},
                    },
                    "securityContext": restricted_security_context(),
                    "volumeMounts": [{"name": "scratch", "mountPath": "/probe"}],
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}],
        },
    }


def probe_labels(run: str | None = None) -> dict[str, str]:
    """Every probe pod's labels (cleanup selects them); `run` tells one invocation's pods from another's."""
    labels = {"app.kubernetes.io/part-of": "proxy-component", "app.kubernetes.io/component": PROBE_COMPONENT}
    return {**labels, RUN_LABEL: run} if run else labels


@dataclass(frozen=True)
class Transcript:
    """What the pod got back for one URL: the raw bytes and nc's own complaints."""

    data: bytes
    stderr: str


def parse_transcript(log: str, count: int) -> dict[int, Transcript] | None:
    """The pod's log as transcripts by URL index; None when it is not a complete probe log."""
    sections: dict[tuple[int, str], list[str]] = {}
    current: tuple[int, str] | None = None
    ended = False
    for line in log.splitlines():
        if line.startswith(f"{MARK} "):
            words = line.split()
            if words[1:] == ["end"]:
                ended = True
                current = None
            elif len(words) == 3 and words[1].isdigit() and words[2] in ("out", "err"):
                current = (int(words[1]), words[2])
                sections[current] = []
            continue
        if current is not None:
            sections[current].append(line)
    if not ended:
        return None
    out: dict[int, Transcript] = {}
    for index in range(count):
        encoded = "".join(sections.get((index, "out"), []))
        try:
            data = base64.b64decode(encoded, validate=True)
        except ValueError:
            return None
        out[index] = Transcript(data, "\n".join(sections.get((index, "err"), [])).strip())
    return out


@dataclass(frozen=True)
class ProbeResult:
    """One node and URL: what happened, in one word of OUTCOMES, and in a sentence."""

    node: str
    url: str
    outcome: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{'ok' if self.ok else 'FAIL'}: Node {self.node}: {self.url}: {self.outcome}: {self.detail}"


def _head(data: bytes) -> tuple[str, dict[str, str], bytes] | None:
    """The status line, headers (lower-case names) and the rest, or None before a complete head."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, rest


def _tinyproxy_cause(body: bytes) -> str:
    match = re.search(rb"<p>(.*?)</p>", body)
    return match.group(1).decode("latin-1") if match else ""


def classify(
    node: str, target: Target, transcript: Transcript | None, *, wait: int, tls: TlsClient | None = None,
    proxy_log: str = "", upstream: bool = False,
) -> ProbeResult:  # fmt: skip
    """Judge one transcript; `proxy_log` is the node's proxy pod's recent log (tells DNS from refused)."""

    def result(outcome: str, detail: str) -> ProbeResult:
        return ProbeResult(node, target.url, outcome, detail)

    if transcript is None:
        return result("timeout", "the probe pod gave no complete result within its deadline")
    if not transcript.data:
        if "can't connect" in transcript.stderr or "bad address" in transcript.stderr:
            return result("proxy-unreachable", f"the pod could not connect to its node's proxy: {transcript.stderr}")
        return result("timeout", f"the proxy sent nothing back within {wait} s")
    parsed = _head(transcript.data)
    if parsed is None:
        return result("timeout", f"the proxy's answer was incomplete after {wait} s")
    status, headers, rest = parsed
    code = status.split(" ", 2)[1] if len(status.split(" ")) > 1 else ""
    # `tinyproxy/1.11.2` up to 1.11.2; `tinyproxy` alone from upstream's 2024 change on (the image's build).
    server = headers.get("server", "")
    from_tinyproxy = server == "tinyproxy" or server.startswith("tinyproxy/")
    if from_tinyproxy and code != "200":
        cause = _tinyproxy_cause(rest)
        if status.endswith(" Filtered"):
            return result("filtered", f"tinyproxy's Filter refused {target.host}: {status}")
        if code == "403":
            return result("not-allowed", f"tinyproxy refused: {status} ({cause})")
        if code == "502" and "upstream" in status.lower():
            return result("upstream-refused", f"tinyproxy could not reach the upstream proxy: {status}")
        if code == "500" and "Unable to connect" in status:
            hint = _log_cause(proxy_log, target)
            if hint == "dns":
                return result("dns-failure", f"tinyproxy could not resolve {target.host} ({status}; its log: DNS)")
            if hint == "connect":
                return result("connect-failed", f"tinyproxy could not connect to {target.authority} ({status})")
            return result(
                "connect-failed",
                f"tinyproxy could not connect to {target.authority} ({status}); its log did not say whether DNS "
                "failed or the connection was refused",
            )
        return result("error", f"tinyproxy answered {status} ({cause})")
    if code == "407":
        return result("upstream-auth", f"the upstream proxy wants credentials: {status}")
    if target.scheme == "http":
        if upstream and code in ("403", "502", "503", "504") and not from_tinyproxy:
            return result("upstream-refused", f"answered {status} (the upstream proxy's or the origin's)")
        return result("ok", f"the origin answered {status}")
    if code != "200":
        outcome = "upstream-refused" if upstream else "error"
        return result(outcome, f"the CONNECT was answered {status}")
    assert tls is not None, "an https target needs its TLS client"
    return _tls_result(result, tls, rest, wait)


def _log_cause(log: str, target: Target) -> str:
    """tinyproxy's own log line for this host and port: "dns", "connect" or "" (the last one wins)."""
    cause = ""
    spelled = f"{target.host}:{target.port}"
    for line in log.splitlines():
        if f"Could not retrieve address info for {spelled}" in line:
            cause = "dns"
        elif f"Could not establish a connection to {spelled}" in line:
            cause = "connect"
    return cause


def _tls13(data: bytes) -> bool:
    """Whether the ServerHello at the start of `data` selects TLS 1.3 (supported_versions = 0x0304)."""
    try:
        if data[0] != 22 or data[5] != 2:
            return False
        pos = 5 + 4 + 2 + 32
        pos += 1 + data[pos]  # session id
        pos += 2 + 1  # cipher suite, compression
        end = pos + 2 + int.from_bytes(data[pos : pos + 2], "big")
        pos += 2
        while pos + 4 <= end:
            kind, size = int.from_bytes(data[pos : pos + 2], "big"), int.from_bytes(data[pos + 2 : pos + 4], "big")
            if kind == 0x002B and data[pos + 4 : pos + 6] == b"\x03\x04":
                return True
            pos += 4 + size
    except IndexError:
        return False
    return False


def _tls_result(result: Callable[[str, str], ProbeResult], tls: TlsClient, data: bytes, wait: int) -> ProbeResult:
    if not data:
        return result("timeout", f"the tunnel opened but the origin sent no TLS answer within {wait} s")
    if len(data) > 43 and data[0] == 22 and data[5] == 2 and data[11:43] == HRR_RANDOM:
        return result("error", "the origin asked for a second ClientHello (HelloRetryRequest): not judged")
    tls.incoming.write(data)
    try:
        tls.obj.do_handshake()
    except ssl.SSLCertVerificationError as exc:
        return result("tls-failure", f"the certificate does not verify against {tls.ca}: {exc.verify_message}")
    except ssl.SSLWantReadError:
        if not _tls13(data) and tls.outgoing.pending:
            return result("ok", f"TLS 1.2: the certificate verifies against {tls.ca}")
        return result("timeout", f"the origin's TLS answer was incomplete after {wait} s")
    except ssl.SSLError as exc:
        return result("tls-failure", f"TLS failed: {exc.reason or exc}")
    return result("ok", f"{tls.obj.version()}: the certificate verifies against {tls.ca}")


def run_id() -> str:
    """A short random id for one invocation's pods."""
    return secrets.token_hex(3)


def wait_until(condition: Callable[[], bool], deadline: float, interval: float = 1.0) -> bool:
    """Poll `condition` until it holds or `deadline` (time.monotonic) passes."""
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def nodes_of(pods: Iterable[Any]) -> list[str]:
    """The nodes that run a proxy pod, sorted."""
    return sorted({p.spec.node_name for p in pods if p.spec and p.spec.node_name and not p.metadata.deletion_timestamp})
