"""A time-bounded mutation fuzz of tinyproxy's request path, with h11 (a strict HTTP/1.1 parser) as the oracle.

The binary under test is each of the `tinyproxy_under_test` fixture's (tests/image/conftest.py): the image's own, then
its ASan+UBSan and TSan builds. Each runs on 127.0.0.1 inside a network namespace this module makes (`unshare -n`, so
the servers are on that namespace's loopback only), beside a recording origin that keeps every byte the proxy sends it.

Inputs come from a seed corpus of valid forward-proxy requests (absolute-form GET with and without a body, POST with
Content-Length, POST chunked with extensions and a trailer, HEAD, many fields, a CONNECT to a port ConnectPort does
not allow, and the fields tinyproxy rewrites: Connection, Proxy-Connection, Proxy-Authorization, Host), each
sometimes followed by a pipelined `GET http://smuggled.invalid/`, mutated by a `random.Random` seeded with (SEED,
the input's number): bytes flipped, inserted, deleted, special bytes (CR, LF, SP, HTAB, NUL, VT, FF, ',', ':', ';',
DEL, high bytes), lines duplicated, deleted, swapped or spliced from another seed, a field name's case, a
Content-Length number, chunk sizes split, merged or resized, a truncation. Input N is `make_input(N)`, whatever the
timing; how many run depends on the time bound (FUZZ_SECONDS per binary) and the machine.

Attribution: the origin's address in each input is a placeholder the mutations work around; it becomes an address
of the input's own, 127.A.B.C (all of 127/8 is the loopback), after mutating, so the local address of the origin's
accepted connection names the input that caused it, whatever the mutations did to the rest of the bytes, and however
many inputs are in flight at once. WORKERS clients send inputs, each on a fresh connection, and read the answer until
tinyproxy closes or is silent IDLE seconds (a share of them shut their sending side first); none sends while tinyproxy
has more than BUSY threads, so a slow build is never pushed into refusing connections at accept.

The oracle, per input, on what reached the origin: nothing; or bytes that h11 (server side, after test_framing's
Transfer-Encoding normalisation) reads as exactly one request start, with no error, not for `smuggled.invalid` (unless
the client's own first request line or head names it: a mutation can move it there), with at most one framing field (a digits-only Content-Length or one Transfer-Encoding), whose body, once complete, ends
exactly where the bytes end. A status of 400 or more (tinyproxy's own: the origin answers only 200) means nothing
complete reached the origin. The proxy answers the unmutated seeds as a forward proxy must (a canary after the time
bound too), is alive at the end, and a sanitizer build writes no report.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h11
import pytest

from tests.image.test_framing import TCHAR, _h11_te, status_of, stop

if TYPE_CHECKING:
    from tests.image.conftest import UnderTest

pytestmark = pytest.mark.image

ROOT = Path(__file__).resolve().parents[2]
SEED = 20251
FUZZ_SECONDS = {"image": 20.0, "asan": 20.0, "tsan": 20.0}
WORKERS = 64
BUSY = 96  # no input is sent while tinyproxy has more threads than this (one a connection): far below MaxClients, so
# a slower build (TSan) is never driven into refusing connections at accept, and every input is read by the proxy
PROXY_PORT = 8888
ORIGIN_PORT = 8000  # ConnectPort allows 443 only: a CONNECT to the origin must be refused
IDLE = 1.0  # a mutated input's answer: read until the proxy closes, or until it is silent this long
SEED_IDLE = 8.0  # an unmutated seed's, and the canary's
ANSWER_CAP = 4.0  # never read one answer longer than this (mutated inputs)
ORIGIN_CAP = 10.0  # an origin connection is read until the proxy closes it, or this long
HALF_CLOSE = 0.3  # the share of mutated inputs whose client shuts its sending side after the bytes
AUTHORITY = b"@O@"  # the origin's host:port in a seed; the input's own 127.A.B.C:ORIGIN_PORT after mutating
SMUGGLED = b"GET http://smuggled.invalid/ HTTP/1.1\r\nHost: smuggled.invalid\r\n\r\n"
REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

CONF = """Port {port}
Listen 127.0.0.1
Timeout 30
MaxClients 256
Allow 127.0.0.1
ConnectPort 443
LogLevel Info
DisableViaHeader Yes
LogFile "{log}"
"""


# --- the seed corpus and the mutations -------------------------------------------------------------------------

MANY = b"".join(b"X-Field-%d: value %d\r\n" % (n, n) for n in range(60))
SEEDS: list[tuple[str, bytes]] = [
    ("GET", b"GET http://@O@/get HTTP/1.1\r\nHost: @O@\r\nUser-Agent: fuzz\r\nAccept: */*\r\n\r\n"),
    ("GET with body", b"GET http://@O@/get-body HTTP/1.1\r\nHost: @O@\r\nContent-Length: 5\r\n\r\nhello"),
    (
        "POST Content-Length",
        b"POST http://@O@/post HTTP/1.1\r\nHost: @O@\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\n"
        b"hello world",
    ),
    (
        "POST chunked",
        b"POST http://@O@/chunked HTTP/1.1\r\nHost: @O@\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5;ext=1\r\nhello\r\n6;a="b c"\r\n world\r\n3\r\n!!!\r\n0\r\nX-Trailer: t\r\n\r\n',
    ),
    (
        "POST gzip, chunked",
        b"POST http://@O@/gzip HTTP/1.1\r\nHost: @O@\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        b"4\r\nabcd\r\n2;x\r\nef\r\n0\r\n\r\n",
    ),
    ("HEAD", b"HEAD http://@O@/head HTTP/1.1\r\nHost: @O@\r\nAccept: */*\r\n\r\n"),
    ("many fields", b"GET http://@O@/many HTTP/1.1\r\nHost: @O@\r\n" + MANY + b"\r\n"),
    ("CONNECT to a port not allowed", b"CONNECT @O@ HTTP/1.1\r\nHost: @O@\r\n\r\n"),
    (
        "rewritten fields",
        b"GET http://@O@/rewrite HTTP/1.1\r\nHost: @O@\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
        b"Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic dXNlcjpwYXNz\r\n\r\n",
    ),
    (
        "rewritten fields, POST",
        b"POST http://@O@/rewrite-post HTTP/1.1\r\nHost: other.invalid\r\nConnection: close\r\n"
        b"Proxy-Connection: close\r\nContent-Length: 3\r\n\r\nabc",
    ),
    ("HTTP/1.0", b"GET http://@O@/ten HTTP/1.0\r\nProxy-Connection: keep-alive\r\n\r\n"),
]
SPECIAL = [
    b"\r",
    b"\n",
    b" ",
    b"\t",
    b"\x00",
    b"\x0b",
    b"\x0c",
    b",",
    b":",
    b";",
    b"\x7f",
    b"\x80",
    b"\xff",
    b"\xc3\xa9",
    b"\r\n",
    b"\r\n\r\n",
    b" \r\n",
]
_CHUNK = re.compile(rb"([0-9A-Fa-f]+)((?:;[^\r\n]*)?)\r\n")
_CONTENT_LENGTH = re.compile(rb"(?i)(content-length[ \t]*:[ \t]*)([^\r\n]*)")


def _lines(data: bytes) -> list[bytes]:
    """The bytes as lines, each with its LF."""
    return [line for line in re.split(rb"(?<=\n)", data) if line]


def _pos(rng: random.Random, data: bytes) -> int:
    return rng.randrange(len(data) + 1)


def _flip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]


def _insert_byte(rng: random.Random, data: bytes) -> bytes:
    i = _pos(rng, data)
    return data[:i] + bytes([rng.randrange(256)]) + data[i:]


def _delete(rng: random.Random, data: bytes) -> bytes:
    i = _pos(rng, data)
    return data[:i] + data[i + rng.randint(1, 4) :]


def _insert_special(rng: random.Random, data: bytes) -> bytes:
    i = _pos(rng, data)
    return data[:i] + rng.choice(SPECIAL) + data[i:]


def _replace_special(rng: random.Random, data: bytes) -> bytes:
    i = _pos(rng, data)
    return data[:i] + rng.choice(SPECIAL) + data[i + 1 :]


def _duplicate_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"".join(lines[: i + 1] + lines[i:])


def _delete_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"".join(lines)


def _swap_lines(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines)


def _name_case(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    named = [i for i, line in enumerate(lines[1:], 1) if b":" in line]
    if not named:
        return _flip(rng, data)
    i = rng.choice(named)
    name, colon, rest = lines[i].partition(b":")
    how = rng.randrange(3)
    name = name.upper() if how == 0 else name.lower() if how == 1 else name.swapcase()
    lines[i] = name + colon + rest
    return b"".join(lines)


def _splice(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    donor = _lines(rng.choice([raw for _, raw in SEEDS] + [SMUGGLED]))
    i = rng.randrange(len(lines) + 1)
    return b"".join([*lines[:i], rng.choice(donor), *lines[i + rng.randint(0, 1) :]])


def _content_length(rng: random.Random, data: bytes) -> bytes:
    head_end = data.find(b"\r\n\r\n")
    rest = len(data) - head_end - 4 if head_end >= 0 else 0
    found = list(_CONTENT_LENGTH.finditer(data))
    if not found:  # add one among the fields
        lines = _lines(data)
        i = rng.randint(1, max(1, len(lines) - 1))
        return b"".join([*lines[:i], b"Content-Length: %d\r\n" % rng.randint(0, rest + 5), *lines[i:]])
    match = rng.choice(found)
    n = int(match.group(2)) if match.group(2).isdigit() else 5
    value = rng.choice(
        [
            b"%d" % (n + 1),
            b"%d" % max(0, n - 1),
            b"0",
            b"%d" % rest,
            b"%d" % max(0, rest - 1),
            b"%d" % (n * 10),
            b"99999999999999999999",
            b"-1",
            b"%d, %d" % (n, n),
            b"%d,%d" % (n, n + 1),
            b" %d " % n,
            b"+%d" % n,
            b"0%d" % n,
            b"0x%x" % n,
            b"",
            b"%de0" % n,
        ]
    )
    return data[: match.start(2)] + value + data[match.end(2) :]


def _chunks(rng: random.Random, data: bytes) -> bytes:
    """Split a chunk in two, merge two, or give one a size that is not its length."""
    head, sep, body = data.partition(b"\r\n\r\n")
    parsed: list[tuple[bytes, bytes]] = []
    pos = 0
    while match := _CHUNK.match(body, pos):
        size, start = int(match.group(1), 16), match.end()
        if size == 0 or body[start + size : start + size + 2] != b"\r\n":
            break
        parsed.append((match.group(2), body[start : start + size]))
        pos = start + size + 2
    if not parsed:
        return _content_length(rng, data)
    i = rng.randrange(len(parsed))
    ext, chunk = parsed[i]
    how = rng.randrange(3)
    if how == 0 and len(chunk) > 1:
        cut = rng.randint(1, len(chunk) - 1)
        parsed[i : i + 1] = [(ext, chunk[:cut]), (b"", chunk[cut:])]
    elif how == 1 and i + 1 < len(parsed):
        parsed[i : i + 2] = [(ext, chunk + parsed[i + 1][1])]
    else:
        wrong = rng.choice([b"%x" % (len(chunk) + 1), b"%x" % (len(chunk) - 1), b"0", b"%X" % (len(chunk) * 16 + 10)])
        out = b"".join(b"%x" % len(d) + e + b"\r\n" + d + b"\r\n" for e, d in parsed[:i])
        out += wrong + ext + b"\r\n" + chunk + b"\r\n"
        out += b"".join(b"%x" % len(d) + e + b"\r\n" + d + b"\r\n" for e, d in parsed[i + 1 :])
        return head + sep + out + body[pos:]
    return head + sep + b"".join(b"%x" % len(d) + e + b"\r\n" + d + b"\r\n" for e, d in parsed) + body[pos:]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))] if data else data


MUTATIONS: list[tuple[str, Callable[[random.Random, bytes], bytes]]] = [
    ("flip", _flip),
    ("insert byte", _insert_byte),
    ("delete bytes", _delete),
    ("insert special", _insert_special),
    ("replace with special", _replace_special),
    ("duplicate line", _duplicate_line),
    ("delete line", _delete_line),
    ("swap lines", _swap_lines),
    ("name case", _name_case),
    ("splice line", _splice),
    ("content-length", _content_length),
    ("chunk sizes", _chunks),
    ("truncate", _truncate),
]


def address(i: int) -> str:
    """Input i's own origin address: 127.A.B.C, each of A, B, C in 1-254."""
    a, rest = divmod(i, 254 * 254)
    b, c = divmod(rest, 254)
    return f"127.{a + 1}.{b + 1}.{c + 1}"


def input_of(ip: str) -> int:
    """The input whose origin address `ip` is (-1 for none)."""
    parts = [int(p) for p in ip.split(".")]
    if parts[0] != 127 or not all(1 <= p <= 254 for p in parts[1:]):
        return -1
    return (parts[1] - 1) * 254 * 254 + (parts[2] - 1) * 254 + parts[3] - 1


@dataclass
class Input:
    """One fuzz input: which seed, what was done to it, and its bytes (the placeholder already replaced)."""

    number: int
    seed: str
    mutations: list[str]
    half_close: bool
    raw: bytes


def make_input(i: int) -> Input:
    """Input i, the same for the same i on every run: the first 2 * len(SEEDS) are the seeds as they are (each alone,
    then followed by the smuggled request), the others mutated 1 to 4 times."""
    rng = random.Random(f"{SEED}:{i}")
    mutations: list[str] = []
    if i < 2 * len(SEEDS):
        label, data = SEEDS[i % len(SEEDS)]
        data += SMUGGLED if i >= len(SEEDS) else b""
        half_close = False
    else:
        label, data = rng.choice(SEEDS)
        data += SMUGGLED if rng.random() < 0.5 else b""
        for _ in range(rng.randint(1, 4)):
            name, mutate = rng.choice(MUTATIONS)
            mutations.append(name)
            data = mutate(rng, data) or data
        half_close = rng.random() < HALF_CLOSE
    raw = data.replace(AUTHORITY, f"{address(i)}:{ORIGIN_PORT}".encode())
    return Input(i, label, mutations, half_close, raw)


# --- the driver, run inside the network namespace --------------------------------------------------------------


class Origin:
    """The recording origin: every connection's bytes, by the input its local address names. It answers 200 once
    the bytes so far hold a complete request (or h11 refuses them), and reads on until the proxy closes."""

    def __init__(self) -> None:
        self.received: dict[int, list[bytes]] = {}
        self.lock = threading.Lock()
        self.active = 0
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("0.0.0.0", ORIGIN_PORT))  # the namespace has its loopback only
        self.server.listen(1024)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.server.accept()
            with self.lock:
                self.active += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        number = input_of(conn.getsockname()[0])
        data, answered = b"", False
        deadline = time.monotonic() + ORIGIN_CAP
        conn.settimeout(0.2)
        try:
            while time.monotonic() < deadline:
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                data += chunk
                if not answered:
                    seen = parse_forwarded(data)
                    if seen.complete or seen.error:
                        conn.sendall(REPLY)
                        answered = True
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.received.setdefault(number, []).append(data)
                self.active -= 1

    def settle(self, limit: float) -> None:
        """Wait until no connection is open (and none opened in the last half second), at most `limit` seconds."""
        end = time.monotonic() + limit
        quiet_since = time.monotonic()
        while time.monotonic() < end:
            with self.lock:
                busy = self.active > 0
            if busy:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 0.5:
                return
            time.sleep(0.05)


def exchange(raw: bytes, *, half_close: bool, idle: float, cap: float) -> bytes:
    """Send `raw` on a fresh connection; what came back until the proxy closed, was silent `idle` seconds, or `cap`
    passed (a reset or refusal is marked after what was read, not raised)."""
    answer = b""
    end = time.monotonic() + cap
    try:
        with socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=idle) as client:
            client.sendall(raw)
            if half_close:
                client.shutdown(socket.SHUT_WR)
            while time.monotonic() < end:
                chunk = client.recv(65536)
                if not chunk:
                    break
                answer += chunk
    except TimeoutError:
        answer += b"\0TIMEOUT"
    except ConnectionRefusedError:
        answer += b"\0REFUSED"
    except OSError as e:
        answer += f"\0{type(e).__name__}".encode()
    return answer


def drive(binary: Path, workdir: Path, seconds: float) -> None:
    """Inside the namespace: the origin and tinyproxy; inputs 0, 1, 2, ... from WORKERS threads until `seconds`
    have passed; then the canary; results.json holds what each input's client and origin saw."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    origin = Origin()
    log = workdir / "tinyproxy.log"
    conf = workdir / "tinyproxy.conf"
    conf.write_text(CONF.format(port=PROXY_PORT, log=log))
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = f"detect_leaks=0:abort_on_error=0:halt_on_error=1:log_path={workdir}/asan"
    env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={workdir}/ubsan"
    env["TSAN_OPTIONS"] = f"halt_on_error=0:log_path={workdir}/tsan"
    with (workdir / "stderr").open("wb") as stderr:
        proxy = subprocess.Popen(
            [str(binary), "-d", "-c", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    lock = threading.Lock()
    answers: dict[int, tuple[bytes, float]] = {}
    counter = [0]
    started = time.monotonic()
    deadline = started + seconds

    def threads_of_proxy() -> int:
        try:
            status = Path(f"/proc/{proxy.pid}/status").read_text()
        except OSError:
            return 0
        match = re.search(r"^Threads:\s*(\d+)", status, re.M)
        return int(match.group(1)) if match else 0

    busy = [0, 0]  # tinyproxy's threads now, and the most seen

    def watch() -> None:
        while time.monotonic() < deadline:
            busy[0] = threads_of_proxy()
            busy[1] = max(busy)
            time.sleep(0.01)

    def work() -> None:
        while True:
            while busy[0] > BUSY and time.monotonic() < deadline:
                time.sleep(0.01)
            with lock:
                if time.monotonic() >= deadline:
                    return
                i = counter[0]
                counter[0] += 1
            one = make_input(i)
            seed = i < 2 * len(SEEDS)
            t0 = time.monotonic()
            answer = exchange(
                one.raw,
                half_close=one.half_close,
                idle=SEED_IDLE if seed else IDLE,
                cap=2 * SEED_IDLE if seed else ANSWER_CAP,
            )
            with lock:
                answers[i] = (answer, time.monotonic() - t0)

    threads = [threading.Thread(target=watch), *(threading.Thread(target=work) for _ in range(WORKERS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    origin.settle(ORIGIN_CAP + 2)
    canary_number = counter[0]
    canary = SEEDS[0][1].replace(AUTHORITY, f"{address(canary_number)}:{ORIGIN_PORT}".encode())
    canary_answer = exchange(canary, half_close=False, idle=SEED_IDLE, cap=2 * SEED_IDLE)
    origin.settle(ORIGIN_CAP + 2)
    alive = stop(proxy)
    with origin.lock:
        out = {
            "elapsed": elapsed,
            "alive": alive,
            "exit": proxy.returncode,
            "inputs": canary_number,
            "threads": busy[1],
            "canary": {
                "raw": canary.hex(),
                "answer": canary_answer.hex(),
                "origin": [d.hex() for d in origin.received.get(canary_number, [])],
            },
            "stray": [d.hex() for d in origin.received.get(-1, [])],
            "results": [
                {
                    "answer": answers[i][0][:4096].hex(),
                    "took": answers[i][1],
                    "origin": [d.hex() for d in origin.received.get(i, [])],
                }
                for i in range(canary_number)
            ],
        }
    (workdir / "results.json").write_text(json.dumps(out))


# --- the oracle ------------------------------------------------------------------------------------------------


@dataclass
class Seen:
    """What h11 (server side) made of the bytes one origin connection received, with no end of input assumed."""

    starts: int = 0
    complete: bool = False
    error: str = ""
    trailing: bytes = b""
    targets: list[bytes] = field(default_factory=list)
    hosts: list[bytes] = field(default_factory=list)


def parse_forwarded(data: bytes) -> Seen:
    """h11 on one origin connection's bytes (after test_framing's Transfer-Encoding normalisation): the request
    starts, whether one message is complete, an error, and what is left after the message."""
    out = Seen()
    conn = h11.Connection(h11.SERVER)
    try:
        conn.receive_data(_h11_te(data))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED:
                break
            if isinstance(event, h11.Request):
                out.starts += 1
                out.targets.append(bytes(event.target))
                out.hosts += [bytes(v) for n, v in event.headers if n == b"host"]
            elif isinstance(event, h11.EndOfMessage):
                out.complete = True
                break
    except h11.RemoteProtocolError as e:
        out.error = str(e) or type(e).__name__
    out.trailing = bytes(conn.trailing_data[0])
    return out


def _framing_fields(head: bytes) -> str:
    """One framing field at most, Content-Length digits only, as a strict next hop reads it: '' or what is wrong."""
    fields = [line.partition(b":") for line in head.split(b"\r\n")[1:]]
    te = [v for n, _, v in fields if n.lower() == b"transfer-encoding"]
    cl = [v.strip(b" \t") for n, _, v in fields if n.lower() == b"content-length"]
    if len(te) > 1:
        return "two Transfer-Encoding fields forwarded"
    if te and cl:
        return "Transfer-Encoding and Content-Length forwarded"
    if len(cl) > 1 or (cl and not (cl[0].isdigit() and cl[0].isascii())):
        return f"Content-Length forwarded as {cl!r}"
    return ""


def _request_line_flaw(line: bytes) -> str:
    """What RFC 9112 section 3 finds wrong with a request line h11 refused."""
    parts = line.split(b" ")
    if len(parts) != 3:
        return f"{len(parts)} parts between single spaces"
    method, target, version = parts
    if not method or not all(c in TCHAR for c in method):
        return "a method that is not a token"
    if not target or not all(0x21 <= c <= 0x7E for c in target):
        return "a request-target with a byte outside VCHAR"
    if not re.fullmatch(rb"HTTP/[0-9]\.[0-9]", version):
        return "an HTTP-version that is not HTTP/DIGIT.DIGIT"
    return "other"


def failure_kind(why: str) -> str:
    """A failure's kind: its reason without the bytes it quotes, numbers dropped."""
    return re.sub(r"\b\d+\b", "N", re.sub(r"[:(\[ ]*(?:bytearray\()?\bb['\"].*", "", why)).rstrip(": ")


def _smuggled(seen: Seen, sent: bytes) -> bool:
    """Whether the smuggled request reached the origin: after the forwarded message, or as the forwarded request
    when the client's first request does not name smuggled.invalid itself (a mutation can move its target into the
    first request line, or its Host field into the first head, and then forwarding it is no smuggling)."""
    head = re.split(rb"\r?\n\r?\n", sent.lstrip(b"\r\n"), maxsplit=1)[0]
    first_line = head.partition(b"\n")[0]
    return (
        (seen.complete and b"smuggled.invalid" in seen.trailing)
        or any(b"smuggled.invalid" in t for t in seen.targets if b"smuggled.invalid" not in first_line)
        or any(b"smuggled.invalid" in h for h in seen.hosts if b"smuggled.invalid" not in head)
    )


def judge(sent: bytes, answer: bytes, origin: list[bytes]) -> str:
    """'' when what reached the origin for the input `sent` is nothing, or one request h11 accepts with nothing
    after it (and nothing complete when tinyproxy answered an error status); else why not."""
    if len(origin) > 1:
        return f"{len(origin)} origin connections for one client connection"
    status = status_of(answer)
    for data in origin:
        if not data:
            return "the origin was connected to and sent no byte (a tunnel?)"
        seen = parse_forwarded(data)
        if _smuggled(seen, sent):
            return "the smuggled request reached the origin"
        if seen.error:
            line = data.partition(b"\r\n")[0]
            if "request line" in seen.error:
                return f"h11 refuses the forwarded request line ({_request_line_flaw(line)}): {line[:80]!r}"
            return f"h11 refuses the forwarded bytes: {seen.error}"
        if seen.starts != 1:
            return f"{seen.starts} request starts in the forwarded bytes"
        if seen.complete and seen.trailing:
            return f"{len(seen.trailing)} bytes after the forwarded request: {seen.trailing[:60]!r}"
        if why := _framing_fields(data.partition(b"\r\n\r\n")[0]):
            return why
        if seen.complete and status is not None and status >= 400:
            return f"tinyproxy answered {status}, yet a complete request reached the origin"
    return ""


# --- the run and the tests -------------------------------------------------------------------------------------


@dataclass
class Fuzzed:
    """One binary's fuzz run: what each input's client got and what its origin connections received."""

    kind: str
    inputs: int
    elapsed: float
    alive: bool
    exit: int | None
    answers: list[bytes]
    origins: list[list[bytes]]
    canary: dict[str, Any]
    stray: list[bytes]
    reports: dict[str, str]
    stderr: str
    threads: int  # the most threads tinyproxy had at once
    refused_at_accept: int  # connections tinyproxy reset at accept (MaxClients): inputs it never read
    failures: list[tuple[int, str]] = field(default_factory=list)

    def summary(self) -> str:
        forwarded = sum(1 for o in self.origins if any(o))
        complete = sum(1 for o in self.origins if any(parse_forwarded(d).complete for d in o if d))
        statuses = Counter(status_of(a) for a in self.answers)
        refused = sum(n for s, n in statuses.items() if s is not None and s >= 400)
        by_status = ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items(), key=lambda x: x[0] or 0) if s)
        return (
            f"fuzz [{self.kind}]: {self.inputs} inputs in {self.elapsed:.1f} s ({self.inputs / self.elapsed:.0f}/s), "
            f"{forwarded} forwarded ({complete} complete), {refused} refused by status, "
            f"{statuses[None]} with no status; statuses {{{by_status}}}; at most {self.threads} threads, "
            f"{self.refused_at_accept} refused at accept; {len(self.failures)} failures"
        )

    def failure_report(self, limit: int = 12) -> str:
        """The failures by kind, then the first input of each kind and more up to `limit`, each with its bytes."""
        kinds = Counter(failure_kind(why) for _, why in self.failures)
        lines = [f"{n} failed: {kind}" for kind, n in kinds.most_common()]
        firsts = {failure_kind(why): (i, why) for i, why in reversed(self.failures)}
        shown = sorted(firsts.values())
        shown += [f for f in self.failures if f not in shown][: max(0, limit - len(shown))]
        for i, why in shown:
            one = make_input(i)
            lines.append(
                f"input {i} (make_input({i}): seed {one.seed!r}, {one.mutations}, half_close={one.half_close}): {why}\n"
                f"  status {status_of(self.answers[i])}, sent {len(one.raw)} bytes, hex: {one.raw[:200].hex()}"
                f"{'...' if len(one.raw) > 200 else ''}\n"
                f"  origin got: {[d[:160] for d in self.origins[i]]!r}"
            )
        return "\n".join(lines)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


DRIVER = ["unshare", "-n", sys.executable, "-m", "tests.image.test_fuzz_requests", "drive"]


def fuzz(binary: Path, kind: str, workdir: Path, seconds: float) -> Fuzzed:
    """Run the driver in a network namespace of its own, then judge every input."""
    done = subprocess.run(
        [*DRIVER, str(binary), str(workdir), str(seconds)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=seconds + 180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads((workdir / "results.json").read_text())
    results = out["results"]
    run = Fuzzed(
        kind=kind,
        inputs=out["inputs"],
        elapsed=out["elapsed"],
        alive=out["alive"],
        exit=out["exit"],
        answers=[bytes.fromhex(r["answer"]) for r in results],
        origins=[[bytes.fromhex(d) for d in r["origin"]] for r in results],
        canary=out["canary"],
        stray=[bytes.fromhex(d) for d in out["stray"]],
        reports={
            p.name: p.read_text(errors="replace")
            for p in workdir.iterdir()
            if p.name.startswith(("asan", "ubsan", "tsan"))
        },
        stderr=_read(workdir / "stderr"),
        threads=out["threads"],
        refused_at_accept=sum(
            int(n) for n in re.findall(r"Refused (\d+) connection\(s\) at accept", _read(workdir / "tinyproxy.log"))
        ),
    )
    for i in range(run.inputs):
        if why := judge(make_input(i).raw, run.answers[i], run.origins[i]):
            run.failures.append((i, why))
    return run


@pytest.fixture(scope="module")
def fuzzed(tinyproxy_under_test: UnderTest, tmp_path_factory: pytest.TempPathFactory) -> Fuzzed:
    """The fuzz run of one binary of `tinyproxy_under_test`, its summary printed (`pytest -s`)."""
    kind = tinyproxy_under_test.kind
    run = fuzz(tinyproxy_under_test.path, kind, tmp_path_factory.mktemp(f"fuzz-{kind}"), FUZZ_SECONDS[kind])
    print(f"\n{run.summary()}")
    return run


def test_what_reaches_the_origin_is_at_most_one_request(fuzzed: Fuzzed) -> None:
    """For every mutated input, the origin received nothing, or exactly one request start that h11 accepts, never
    the smuggled one, with one framing field and nothing after its end; nothing complete when tinyproxy answered an
    error status."""
    if fuzzed.failures:
        pytest.fail(f"{fuzzed.summary()}\n{fuzzed.failure_report()}", pytrace=False)
    assert not fuzzed.stray, fuzzed.stray[:5]


def test_the_seeds_are_served_and_the_fuzz_is_not_vacuous(fuzzed: Fuzzed) -> None:
    """The unmutated seeds (alone and with the smuggled request after them) are forwarded as one complete request
    and answered 200, the CONNECT to a port not allowed is refused with nothing at the origin; a share of the mutated
    inputs reached the origin, so the oracle had something to judge."""
    for i in range(2 * len(SEEDS)):
        label = SEEDS[i % len(SEEDS)][0]
        status = status_of(fuzzed.answers[i])
        if label.startswith("CONNECT"):
            assert status == 403, (label, fuzzed.answers[i][:200])
            assert not fuzzed.origins[i], (label, fuzzed.origins[i])
            continue
        assert status == 200, (label, fuzzed.answers[i][:200])
        assert len(fuzzed.origins[i]) == 1, (label, fuzzed.origins[i])
        assert parse_forwarded(fuzzed.origins[i][0]).complete, (label, fuzzed.origins[i][0][:300])
    forwarded = sum(1 for o in fuzzed.origins if any(o))
    assert fuzzed.inputs >= 100, fuzzed.summary()
    assert forwarded >= fuzzed.inputs // 10, fuzzed.summary()


def test_the_proxy_stays_alive_with_no_sanitizer_report(fuzzed: Fuzzed) -> None:
    """tinyproxy is running after the time bound and serves a canary request; a sanitizer build wrote no report."""
    assert fuzzed.alive, f"tinyproxy exited ({fuzzed.exit}): {fuzzed.stderr[-2000:]}"
    canary = bytes.fromhex(fuzzed.canary["answer"])
    assert status_of(canary) == 200, canary[:300]
    origin = [bytes.fromhex(d) for d in fuzzed.canary["origin"]]
    assert len(origin) == 1, origin
    assert parse_forwarded(origin[0]).complete, origin[0][:300]
    assert not fuzzed.reports, "\n".join(f"{name}:\n{text[:3000]}" for name, text in fuzzed.reports.items())


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "drive":
    drive(Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]))
