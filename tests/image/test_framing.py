"""HTTP/1.1 message framing through tinyproxy (RFC 9112 sections 5 to 7), proven as a class of inputs.

The binary under test is the image's own, then the same sources built with ASan+UBSan and with TSan (the
`tinyproxy_under_test` fixture of tests/image/conftest.py). It runs on
127.0.0.1 inside a network namespace this module makes (`unshare -n`), with a recording origin beside it that keeps
every byte the proxy sends it. A few thousand requests are generated from fixed lists and a seeded random generator:
Transfer-Encoding spellings (case, OWS, tabs, empty elements, duplicates, codings before and after chunked, unknown
codings, obs-fold, two lines) each with and without Content-Length (equal, unequal, list, garbage), each body
followed or filled by a smuggled `GET http://smuggled.invalid/`; every byte 0x00-0xff in and before a field name and
in a field value; Content-Length spellings; chunk-size and trailer spellings. A strict reference of RFC 9112 says for
each whether it must be refused (400, or 501 for an unknown coding) or forwarded with which body, and h11 is the
oracle of what the origin received: a refused request left no complete request at the origin; a forwarded one is
exactly ONE request (one framing field, digits-only Content-Length), whose body is the intended one, with no byte
after it. The response side runs a misbehaving origin (Transfer-Encoding with Content-Length, two Content-Lengths,
obs-fold, bad names, bytes after the body): what the client receives is exactly one response under h11, or 502.
StatHost is compared whole; each refusal is one WARNING naming the client, never a header's value, and counted as a
bad connection; a sanitizer build writes no report.
"""

from __future__ import annotations

import concurrent.futures
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h11
import pytest

if TYPE_CHECKING:  # the module also runs as a script (its driver), where `tests` is not importable
    from tests.image.conftest import UnderTest

pytestmark = pytest.mark.image

SEED = 9112
PROXY_PORT = 8888
STATHOST = "proxy-component.invalid"
SMUGGLED = b"GET http://smuggled.invalid/ HTTP/1.1\r\nHost: smuggled.invalid\r\n\r\n"
SECRET = "c2VjcmV0OnNlY3JldA=="  # sent in refused requests: never to be logged
ORIGIN_MARK = b"@ORIGIN@"
KNOWN_CODINGS = {b"chunked", b"gzip", b"x-gzip", b"deflate", b"compress", b"x-compress"}
TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
CLIENT_TIMEOUT = 8.0
WORKERS = 24


@pytest.fixture(scope="module")
def framing_binary(tinyproxy_under_test: UnderTest) -> Path:
    """The tinyproxy binary under test: the image's, then its ASan+UBSan and TSan builds (tests/image/conftest.py)."""
    return tinyproxy_under_test.path


# --- the cases -------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One request sent through the proxy, and what the reference says must become of it."""

    kind: str  # "request", "response" or "stathost"
    group: str  # the family it belongs to, for the failure summary
    label: str
    raw: bytes  # the request bytes, ORIGIN_MARK for the origin's host:port, @ID@ for the case's number
    allowed: list[int]  # status codes the client may see
    body: bytes = b""  # the body the origin must receive (request) or the client (response)
    reply: bytes = b""  # response cases: what the origin answers
    method: str = "POST"
    complete: bool = True  # response cases: False when the response may be cut off


def _request(fields: list[bytes], body: bytes, *, method: bytes = b"POST", version: bytes = b"HTTP/1.1") -> bytes:
    head = method + b" http://" + ORIGIN_MARK + b"/case/@ID@ " + version + b"\r\nHost: " + ORIGIN_MARK + b"\r\n"
    return head + b"".join(f + b"\r\n" for f in fields) + b"\r\n" + body


def _ows_strip(value: bytes) -> bytes:
    return value.strip(b" \t")


def _is_token(value: bytes) -> bool:
    return bool(value) and all(c in TCHAR for c in value)


def _field_value_ok(value: bytes) -> bool:
    return all(c == 9 or (c >= 0x20 and c != 0x7F) for c in value)


def _content_length(values: list[bytes]) -> int | None:
    """The one length a list of Content-Length values means, or None when they are invalid or differ."""
    seen: set[int] = set()
    for value in values:
        for element in value.split(b","):
            element = _ows_strip(element)
            if not element or not element.isdigit() or not element.isascii():
                return None
            seen.add(int(element))
    return seen.pop() if len(seen) == 1 and max(seen) < 2**63 else None


def _decode_chunked(data: bytes) -> tuple[bytes, int] | None:
    """A strict chunked body (RFC 9112 section 7.1): its payload and length, or None if invalid or incomplete."""
    pos, out = 0, b""
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return None
        line = data[pos:end]
        size_text, _, ext = line.partition(b";")
        if b";" in line and not _field_value_ok(ext):
            return None
        if not re.fullmatch(rb"[0-9A-Fa-f]{1,15}", size_text):
            return None
        size, pos = int(size_text, 16), end + 2
        if size == 0:
            break
        if data[pos + size : pos + size + 2] != b"\r\n":
            return None
        out += data[pos : pos + size]
        pos += size + 2
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return None
        line, pos = data[pos:end], end + 2
        if not line:
            return out, pos
        name, colon, value = line.partition(b":")
        if not colon or not _is_token(name) or not _field_value_ok(value):
            return None


def reference(raw: bytes) -> tuple[list[int], bytes]:
    """What a strict HTTP/1.1 proxy must do with a request: the status codes allowed, and the body to forward."""
    lines, pos = [], 0
    while True:  # lines end in LF or CRLF (RFC 9112 section 2.2); the first empty one ends the header section
        end = raw.index(b"\n", pos)
        line, pos = raw[pos:end], end + 1
        line = line[:-1] if line.endswith(b"\r") else line
        if not line:
            break
        lines.append(line)
    request_line, fields, rest = lines[0], lines[1:], raw[pos:]
    http10 = request_line.endswith(b"HTTP/1.0")
    te: list[bytes] = []
    cl: list[bytes] = []
    for line in fields:
        if line[:1] in (b" ", b"\t"):
            return [400], b""  # obs-fold
        name, colon, value = line.partition(b":")
        if not colon or not _is_token(name) or not _field_value_ok(value):
            return [400], b""
        if name.lower() == b"transfer-encoding":
            te.append(_ows_strip(value))
        elif name.lower() == b"content-length":
            cl.append(_ows_strip(value))
    if len(fields) > 250:
        return [400, 431], b""
    if te:
        elements = [_ows_strip(e).lower() for e in b",".join(te).split(b",")]
        elements = [e for e in elements if e]
        unknown = any(_is_token(e) and e not in KNOWN_CODINGS for e in elements)
        also_501 = [501] if unknown else []
        if cl or http10 or not elements or not all(_is_token(e) for e in elements):
            return [400, *also_501], b""
        if unknown:
            return [501], b""
        if elements.count(b"chunked") != 1 or elements[-1] != b"chunked":
            return [400], b""
        decoded = _decode_chunked(rest)
        return ([200], decoded[0]) if decoded else ([400], b"")
    if cl:
        length = _content_length(cl)
        return ([200], rest[:length]) if length is not None else ([400], b"")
    return [200], b""


def _te_values() -> list[list[bytes]]:
    """Transfer-Encoding spellings: one list of field lines each (a single line, two lines, or obs-fold)."""
    singles = [
        b"chunked",
        b"Chunked",
        b"CHUNKED",
        b"cHuNkEd",
        b" chunked",
        b"chunked ",
        b"chunked\t",
        b"\tchunked",
        b"chunked,",
        b",chunked",
        b", chunked ,",
        b"chunked,,",
        b",",
        b"",
        b" ",
        b",,",
        b"gzip, chunked",
        b"gzip,chunked",
        b"x-gzip , deflate,chunked",
        b"compress, x-compress, chunked",
        b"GZIP, CHUNKED",
        b"gzip,\tchunked",
        b"identity, chunked",
        b"identity",
        b"chunked, gzip",
        b"gzip",
        b"deflate",
        b"chunked, chunked",
        b"chunked,chunked",
        b"Chunked, CHUNKED",
        b"gzip, chunked, chunked",
        b"xchunked",
        b"chunkedx",
        b"chunked-",
        b"chunk",
        b"br, chunked",
        b"chunked\tx",
        b"chunked x",
        b"chunked;q=1",
        b'"chunked"',
        b"chunked\x0b",
        b"chunked\x0c",
        b"chunked\x00",
        b"\x0bchunked",
        b"chunked\xff",
        b"gzip;chunked",
        b"chunked/1",
        b"chunked\r",
        b"chunked\x7f",
        b"chun ked",
        b"chunked, \x01",
    ]
    cases = [[b"Transfer-Encoding: " + v] for v in singles]
    for name in (
        b"transfer-encoding",
        b"TRANSFER-ENCODING",
        b"Transfer-Encoding ",
        b"Transfer-Encoding\t",
        b"Transfer_Encoding",
        b"Transfer-Encoding\x0b",
        b"Transfer-Encoding\x0c",
        b"Transfer-Encoding\r",
        b"\x0bTransfer-Encoding",
        b"Transfer-Encoding\x00",
    ):
        cases.append([name + b": chunked"])
    for first, second in (
        (b"gzip", b"chunked"),
        (b"chunked", b"gzip"),
        (b"chunked", b"chunked"),
        (b"chunked", b""),
        (b"", b"chunked"),
        (b"identity", b"chunked"),
        (b"chunked", b"x"),
        (b"chunked,", b","),
    ):
        cases.append([b"Transfer-Encoding: " + first, b"Transfer-Encoding: " + second])
    cases.append([b"Transfer-Encoding: gzip,", b" chunked"])
    cases.append([b"Transfer-Encoding:", b"\tchunked"])
    cases.append([b"Transfer-Encoding: chunked", b" "])
    cases.append([b"X-Folded: a", b" b", b"Transfer-Encoding: chunked"])
    return cases


def _chunked_bodies() -> list[tuple[str, bytes]]:
    """Valid chunked bodies, with the smuggled request after the message, inside a chunk, or after a zero chunk."""
    return [
        ("smuggled after the body", b"5\r\nhello\r\n0\r\n\r\n" + SMUGGLED),
        ("smuggled after a zero chunk", b"0\r\n\r\n" + SMUGGLED),
        ("smuggled as a chunk's data", f"{len(SMUGGLED):x}\r\n".encode() + SMUGGLED + b"\r\n0\r\n\r\n"),
    ]


def _content_lengths(body: bytes) -> list[list[bytes]]:
    """Content-Length field lines to add beside a Transfer-Encoding: none, equal, smaller, lists, garbage."""
    n = str(len(body)).encode()
    return [
        [],
        [b"Content-Length: " + n],
        [b"Content-Length: 0"],
        [b"Content-Length: 3"],
        [b"Content-Length: " + n + b", " + n],
        [b"Content-Length: 3, 30"],
        [b"Content-Length: abc"],
        [b"Content-Length: "],
        [b"Content-Length: 3", b"Content-Length: 3"],
    ]


def request_cases() -> list[Case]:
    """Every generated request: the reference gives each its allowed statuses and forwarded body."""
    raws: list[tuple[str, str, bytes]] = []
    for te in _te_values():
        for body_label, body in _chunked_bodies():
            for cl in _content_lengths(body):
                label = f"{b' | '.join(te)!r} + {b' | '.join(cl)!r}, {body_label}"
                raws.append(("transfer-encoding", label, _request(te + cl, body)))
    body = b"5\r\nhello\r\n0\r\n\r\n" + SMUGGLED
    raws.append(
        (
            "transfer-encoding",
            "HTTP/1.0 + chunked",
            _request([b"Transfer-Encoding: chunked"], body, version=b"HTTP/1.0"),
        )
    )
    rng = random.Random(SEED)
    pool = [
        b"chunked",
        b"Chunked",
        b"gzip",
        b"x-gzip",
        b"deflate",
        b"compress",
        b"identity",
        b"xchunked",
        b"br",
        b"",
        b" ",
        b"chunked\t",
        b"a b",
        b"CHUNKED",
        b"x-compress",
    ]
    separators = [b",", b", ", b" ,", b",\t", b",,", b" , "]
    for _ in range(400):
        elements = [rng.choice(pool) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.5:
            elements.append(b"chunked")
        value = b""
        for i, element in enumerate(elements):
            value += (rng.choice(separators) if i else b"") + element
        lines = [b"Transfer-Encoding: " + value]
        if rng.random() < 0.25 and b"," in value:
            first, _, second = value.partition(b",")
            lines = [b"Transfer-Encoding: " + first, b"Transfer-Encoding: " + second]
        body_label, body = rng.choice(_chunked_bodies())
        cl = rng.choice(_content_lengths(body))
        raws.append(
            ("transfer-encoding (random)", f"{b' | '.join(lines + cl)!r}, {body_label}", _request(lines + cl, body))
        )
    length_body = b"hello" + SMUGGLED
    for value in (
        b"5",
        b"05",
        b"005",
        b"5, 5",
        b"5,5",
        b" 5 ",
        b"5\t",
        b"5, 57",
        b"57, 5",
        b"5,",
        b",5",
        b"",
        b"+5",
        b"-5",
        b"0x5",
        b"5.0",
        b"5 5",
        b"1e1",
        b"99999999999999999999999",
        b"5\x0b",
        b"\xd9\xa5",
        b"0",
        b"5, 5, 5",
        b"5 ,5",
    ):
        raws.append(("content-length", repr(value), _request([b"Content-Length: " + value], length_body)))
    for first, second in ((b"5", b"5"), (b"5", b"6"), (b"5", b"5, 5"), (b"6", b"5"), (b"5", b"")):
        raws.append(
            (
                "content-length",
                f"{first!r} | {second!r}",
                _request([b"Content-Length: " + first, b"Content-Length: " + second], length_body),
            )
        )
    for byte in range(256):
        b = bytes([byte])
        raws.append(("field-name byte", f"X{b!r}-Test", _request([b"X" + b + b"-Test: v"], b"", method=b"GET")))
        raws.append(
            (
                "byte before colon",
                f"Transfer-Encoding{b!r}",
                _request([b"Transfer-Encoding" + b + b": chunked", b"Content-Length: 5"], b"0\r\n\r\n" + SMUGGLED),
            )
        )
        raws.append(("field-value byte", f"a{b!r}b", _request([b"X-Test: a" + b + b"b"], b"", method=b"GET")))
    for size in (
        b"5",
        b"05",
        b"0005",
        b"5;ext=1",
        b'5;a="b"',
        b"5 ;ext",
        b"5 ",
        b" 5",
        b"+5",
        b"-5",
        b"0x5",
        b"5\x0b",
        b"g",
        b"",
        b"000000000000000005",
        b"5;\x01",
    ):
        raws.append(
            (
                "chunk size",
                repr(size),
                _request([b"Transfer-Encoding: chunked"], size + b"\r\nhello\r\n0\r\n\r\n" + SMUGGLED),
            )
        )
    for label, body in (
        ("LF after size", b"5\nhello\r\n0\r\n\r\n" + SMUGGLED),
        ("no CRLF after data", b"5\r\nhelloX\r\n0\r\n\r\n" + SMUGGLED),
        ("LF after data", b"5\r\nhello\n0\r\n\r\n" + SMUGGLED),
        ("trailer", b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n" + SMUGGLED),
        ("bad trailer name", b"5\r\nhello\r\n0\r\nX Trailer: 1\r\n\r\n" + SMUGGLED),
        ("trailer obs-fold", b"5\r\nhello\r\n0\r\nX-T: 1\r\n 2\r\n\r\n" + SMUGGLED),
        ("trailer without colon", b"5\r\nhello\r\n0\r\nX-T\r\n\r\n" + SMUGGLED),
        ("trailer bare CR", b"5\r\nhello\r\n0\r\nX-T: 1\r2\r\n\r\n" + SMUGGLED),
        ("request as trailer", b"0\r\n" + SMUGGLED),
        ("two chunks", b"2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n" + SMUGGLED),
    ):
        raws.append(("chunked body", label, _request([b"Transfer-Encoding: chunked"], body)))
    for label, fields in (
        ("line without colon", [b"NoColon"]),
        ("obs-fold", [b"X-A: 1", b" 2"]),
        ("obs-fold first", [b" X-A: 1"]),
        ("status line as field", [b"HTTP/1.1 200 OK"]),
        ("bare CR at end", [b"X-A: 1\r"]),
        ("empty name", [b": v"]),
        ("LF line ends", [b"X-A: 1\n"]),
        ("secret with bad field", [b"Proxy-Authorization: Basic " + SECRET.encode(), b"X\x0b: v"]),
    ):
        raws.append(("field lines", label, _request(fields, b"", method=b"GET")))
    cases = []
    for group, label, raw in raws:
        allowed, body = reference(raw.replace(ORIGIN_MARK, b"127.0.0.1:1").replace(b"@ID@", b"0"))
        cases.append(Case("request", group, label, raw, allowed, body))
    return cases


def response_cases() -> list[Case]:
    """A misbehaving origin's responses: each must reach the client as exactly one response, or as 502."""
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled!"
    cases: list[Case] = []

    def add(
        group: str,
        label: str,
        reply: bytes,
        allowed: list[int],
        body: bytes = b"",
        *,
        method: str = "GET",
        complete: bool = True,
    ) -> None:
        raw = _request([], b"", method=method.encode())
        cases.append(Case("response", group, label, raw, allowed, body, reply, method, complete))

    chunked = b"5\r\nhello\r\n0\r\n\r\n"
    for te in (b"chunked", b"Chunked", b"gzip, chunked", b"chunked\t"):
        for cl in ([], [b"3"], [b"100"], [b"5, 5"], [b"5", b"7"], [b"abc"]):
            for after in (b"", extra):
                head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + te + b"\r\n"
                head += b"".join(b"Content-Length: " + v + b"\r\n" for v in cl)
                add(
                    "TE with CL",
                    f"{te!r} {cl!r} extra={bool(after)}",
                    head + b"\r\n" + chunked + after,
                    [200],
                    b"hello",
                )
    for cl, ok in (
        ([b"5"], True),
        ([b"5", b"5"], True),
        ([b"5, 5"], True),
        ([b"5", b"6"], False),
        ([b"5, 6"], False),
        ([b"abc"], False),
        ([b""], False),
        ([b"-5"], False),
    ):
        for after in (b"", extra, b"EXTRA"):
            head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"Content-Length: " + v + b"\r\n" for v in cl)
            add(
                "Content-Length",
                f"{cl!r} extra={after[:5]!r}",
                head + b"\r\nhello" + after,
                [200] if ok else [502],
                b"hello" if ok else b"",
            )
    for label, line in (
        ("obs-fold", b"X-A: 1\r\n 2\r\n"),
        ("bad name", b"X\x0b: 1\r\n"),
        ("space name", b"X A: 1\r\n"),
        ("control in value", b"X-A: 1\x012\r\n"),
        ("no colon", b"NoColon\r\n"),
        ("NUL in value", b"X-A: 1\x002\r\n"),
    ):
        add("field lines", label, b"HTTP/1.1 200 OK\r\n" + line + b"Content-Length: 5\r\n\r\nhello", [502])
    add(
        "interim",
        "100 then 200",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" + extra,
        [200],
        b"hello",
    )
    add(
        "no body",
        "HEAD with Content-Length",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + extra,
        [200],
        method="HEAD",
    )
    add("no body", "204 then bytes", b"HTTP/1.1 204 No Content\r\n\r\n" + extra, [204])
    add(
        "chunked",
        "invalid chunk size",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + extra,
        [200],
        complete=False,
    )
    add("close-delimited", "no framing", b"HTTP/1.1 200 OK\r\n\r\nhello", [200], b"hello")
    add("status line", "garbage status line", b"HTTP/1.1 2000 OK\r\nContent-Length: 5\r\n\r\nhello", [502])
    return cases


def stathost_cases() -> list[Case]:
    """Host values near the StatHost: only the name itself (any case, any port) may get the stats page."""
    cases = []
    for host, exact in (
        (STATHOST, True),
        (STATHOST + ":8888", True),
        (STATHOST + ":", True),
        (STATHOST.upper(), None),
        ("Proxy-Component.Invalid:80", None),
        (STATHOST[:-1], False),
        (STATHOST[:-1] + "x", False),
        (STATHOST + "x", False),
        (STATHOST + "x:8888", False),
        (STATHOST[:-1] + ":8888", False),
        ("proxy-component", False),
        ("p", False),
        ("", False),
        ("x" + STATHOST, False),
        (STATHOST + ".", False),
        (STATHOST.upper() + "X", False),
    ):
        raw = b"GET http://" + ORIGIN_MARK + b"/case/@ID@ HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n"
        allowed = {True: [1], False: [0], None: [0, 1]}[exact]  # 1: the stats page was served
        cases.append(Case("stathost", "stathost", repr(host), raw, allowed))
    return cases


# --- the driver, run inside the network namespace --------------------------------------------------------------

CONF = """Port {port}
Listen 127.0.0.1
Timeout 30
MaxClients 64
Allow 127.0.0.1
ConnectPort 443
StatHost "{stathost}"
LogLevel Info
DisableViaHeader Yes
LogFile "{log}"
"""


class Origin:
    """A recording origin on 127.0.0.1: every connection's bytes, keyed by the case named in its request target."""

    def __init__(self, replies: dict[int, bytes]) -> None:
        self.replies = replies
        self.received: dict[int, list[bytes]] = {}
        self.unattributed: list[bytes] = []
        self.lock = threading.Lock()
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(256)
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data, answered, case = b"", False, -1
        parser = h11.Connection(h11.SERVER)
        deadline = time.monotonic() + CLIENT_TIMEOUT
        conn.settimeout(0.3)
        try:
            while time.monotonic() < deadline:
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    chunk = None
                if chunk == b"":
                    break
                if chunk:
                    data += chunk
                    match = re.search(rb"/case/(\d+) ", data)
                    case = int(match.group(1)) if match and case < 0 else case
                if answered:
                    continue
                done = chunk is None
                if chunk:
                    try:
                        parser.receive_data(chunk)
                        while (event := parser.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                            done = done or isinstance(event, h11.EndOfMessage)
                    except h11.RemoteProtocolError:
                        done = True
                if done and case >= 0:
                    reply = self.replies.get(
                        case, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    )
                    conn.sendall(reply)
                    answered = True
                    if case in self.replies:
                        conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                if case >= 0:
                    self.received.setdefault(case, []).append(data)
                elif data:
                    self.unattributed.append(data)


def stop(proxy: subprocess.Popen[bytes]) -> bool:
    """Stop tinyproxy (TERM, then KILL after 10 s); whether it was still running."""
    alive = proxy.poll() is None
    proxy.terminate()
    try:
        proxy.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proxy.kill()
        proxy.wait()
    return alive


def _exchange(port: int, raw: bytes) -> bytes:
    """Send one request; what came back until the proxy closed (a reset, timeout or refusal is marked, not raised)."""
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT) as client:
            client.sendall(raw)
            while chunk := client.recv(65536):
                answer += chunk
    except (ConnectionResetError, BrokenPipeError):
        answer += b"\0RESET"
    except TimeoutError:
        answer += b"\0TIMEOUT"
    except OSError as e:
        answer += f"\0{e}".encode()
    return answer


def drive(cases_path: Path, binary: Path, workdir: Path) -> None:
    """Inside the namespace: start the origin and tinyproxy, send every case, write what each side saw."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    cases = [Case(**c) for c in json.loads(cases_path.read_text())]
    for c in cases:
        c.raw = bytes.fromhex(c.raw)  # type: ignore[arg-type]
        c.reply = bytes.fromhex(c.reply)  # type: ignore[arg-type]
    origin = Origin({i: c.reply for i, c in enumerate(cases) if c.kind == "response"})
    log = workdir / "tinyproxy.log"
    conf = workdir / "tinyproxy.conf"
    conf.write_text(CONF.format(port=PROXY_PORT, stathost=STATHOST, log=log))
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = f"detect_leaks=0:abort_on_error=0:halt_on_error=1:log_path={workdir}/asan"
    env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={workdir}/ubsan"
    env["TSAN_OPTIONS"] = f"halt_on_error=0:log_path={workdir}/tsan"
    proxy = subprocess.Popen(
        [str(binary), "-d", "-c", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=(workdir / "stderr").open("wb")
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", PROXY_PORT), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    mark = f"127.0.0.1:{origin.port}".encode()

    def one(i: int) -> tuple[int, bytes, float]:
        started = time.monotonic()
        raw = cases[i].raw.replace(ORIGIN_MARK, mark).replace(b"@ID@", str(i).encode())
        return i, _exchange(PROXY_PORT, raw), time.monotonic() - started

    started = time.monotonic()
    answers: dict[int, tuple[bytes, float]] = {}
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
        for i, answer, took in pool.map(one, range(len(cases))):
            answers[i] = (answer, took)
    elapsed = time.monotonic() - started
    time.sleep(0.5)  # the origin's last connections close
    stats = _exchange(PROXY_PORT, f"GET http://{STATHOST}/ HTTP/1.1\r\nHost: {STATHOST}\r\n\r\n".encode())
    alive = stop(proxy)
    with origin.lock:
        out = {
            "elapsed": elapsed,
            "alive": alive,
            "stats": stats.decode("latin-1"),
            "unattributed": [d.hex() for d in origin.unattributed],
            "results": [
                {
                    "answer": answers[i][0].hex(),
                    "took": answers[i][1],
                    "origin": [d.hex() for d in origin.received.get(i, [])],
                }
                for i in range(len(cases))
            ],
        }
    (workdir / "results.json").write_text(json.dumps(out))


# --- the oracle ------------------------------------------------------------------------------------------------


def status_of(answer: bytes) -> int | None:
    """The status code of the first response line in `answer`, or None."""
    match = re.match(rb"HTTP/\d\.\d (\d{3})", answer)
    return int(match.group(1)) if match else None


def _h11_te(data: bytes) -> bytes:
    """h11 knows only `Transfer-Encoding: chunked`; a list that ends in chunked frames the same, so it is read as
    that (a list that does not end in chunked is close-delimited: the field goes). Nothing else is changed."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    for i, line in enumerate(lines):
        name, colon, value = line.partition(b":")
        if colon and name.lower() == b"transfer-encoding":
            codings = [_ows_strip(e).lower() for e in value.split(b",") if _ows_strip(e)]
            if codings and all(c in KNOWN_CODINGS for c in codings) and codings.count(b"chunked") <= 1:
                lines[i] = b"Transfer-Encoding: chunked" if codings[-1] == b"chunked" else b"X-Removed: 1"
    return b"\r\n".join(lines) + sep + rest


@dataclass
class Parsed:
    """What h11 made of one side's bytes."""

    messages: int = 0  # complete messages (EndOfMessage)
    starts: int = 0  # requests or final responses begun
    body: bytes = b""
    trailing: bytes = b""
    error: str = ""
    head: bytes = b""
    statuses: list[int] = field(default_factory=list)


def parse_requests(data: bytes) -> Parsed:
    """The origin's bytes under h11 (server side)."""
    out = Parsed(head=data.partition(b"\r\n\r\n")[0])
    conn = h11.Connection(h11.SERVER)
    try:
        conn.receive_data(_h11_te(data))
        conn.receive_data(b"")
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                break
            if isinstance(event, h11.Request):
                out.starts += 1
            elif isinstance(event, h11.Data):
                out.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                out.messages += 1
                break
    except h11.RemoteProtocolError as e:
        out.error = str(e)
    out.trailing = conn.trailing_data[0]
    return out


def parse_response(data: bytes, method: str) -> Parsed:
    """The client's bytes under h11 (client side, after a request of `method`)."""
    out = Parsed()
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "x")]))
    conn.send(h11.EndOfMessage())
    try:
        conn.receive_data(_h11_te(data) if b"Transfer-Encoding" in data.partition(b"\r\n\r\n")[0] else data)
        conn.receive_data(b"")
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                break
            if isinstance(event, h11.Response):
                out.starts += 1
                out.statuses.append(event.status_code)
            elif isinstance(event, h11.Data):
                out.body += event.data
            elif isinstance(event, h11.EndOfMessage):
                out.messages += 1
    except h11.RemoteProtocolError as e:
        out.error = str(e)
    out.trailing = conn.trailing_data[0]
    return out


def _framing_fields_ok(head: bytes) -> str:
    """One framing field at most, as a strict next hop reads it: '' or what is wrong."""
    names = [line.partition(b":")[0].lower() for line in head.split(b"\r\n")[1:]]
    cls = [
        line.partition(b":")[2].strip()
        for line in head.split(b"\r\n")[1:]
        if line.lower().startswith(b"content-length:")
    ]
    if names.count(b"transfer-encoding") > 1:
        return "two Transfer-Encoding lines forwarded"
    if b"transfer-encoding" in names and cls:
        return "Transfer-Encoding and Content-Length forwarded"
    if len(cls) > 1 or (cls and not cls[0].isdigit()):
        return f"Content-Length forwarded as {cls!r}"
    return ""


def judge_request(case: Case, answer: bytes, origin: list[bytes]) -> str:
    """'' when the proxy did what the reference says, as h11 reads what reached the origin; else why not."""
    status = status_of(answer)
    parsed = [parse_requests(d) for d in origin]
    complete = sum(p.messages for p in parsed)
    for p in parsed:  # checked first: bytes past the message's end are the worst outcome, whatever the status
        if p.messages and p.trailing:
            return f"{len(p.trailing)} bytes after the request reached the origin: {p.trailing[:50]!r}"
    if 200 not in case.allowed:
        if status not in case.allowed:
            return f"status {status}, expected {case.allowed}"
        if complete:
            return f"refused, yet {complete} complete request(s) reached the origin"
        return ""
    if status != 200:
        return f"status {status}, expected 200; origin: {[p.error for p in parsed]}"
    if len(parsed) != 1:
        return f"{len(parsed)} origin connections"
    p = parsed[0]
    if p.error:
        return f"the origin's bytes are no valid request to h11: {p.error}"
    if p.messages != 1 or p.starts != 1:
        return f"{p.starts} request(s), {p.messages} complete"
    if p.body != case.body:
        return f"body {p.body[:40]!r}, expected {case.body[:40]!r}"
    if p.trailing:
        return f"{len(p.trailing)} bytes after the request: {p.trailing[:50]!r}"
    return _framing_fields_ok(p.head)


def judge_response(case: Case, answer: bytes) -> str:
    """'' when the client got exactly one (possibly cut-off) response as allowed; else why not."""
    status = status_of(answer)
    if 502 in case.allowed:
        return "" if status == 502 else f"status {status}, expected 502"
    p = parse_response(answer, case.method)
    status = p.statuses[0] if p.statuses else status  # the final response's, after any 1xx
    if status not in case.allowed:
        return f"status {status}, expected {case.allowed}"
    if p.error and case.complete:
        return f"not one valid response to h11: {p.error}"
    if p.starts != 1 or p.messages > 1:
        return f"{p.starts} responses, {p.messages} complete"
    if case.complete and (p.messages != 1 or p.body != case.body):
        return f"{p.messages} complete, body {p.body[:40]!r}, expected {case.body!r}"
    if p.trailing:
        return f"{len(p.trailing)} bytes after the response: {p.trailing[:50]!r}"
    return ""


def judge_stathost(case: Case, answer: bytes) -> str:
    """'' when the stats page was served exactly as allowed."""
    served = int(b"open connections" in answer)
    return "" if served in case.allowed else f"stats page served: {bool(served)}"


# --- the run and the tests -------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run of every case through one binary."""

    cases: list[Case]
    results: list[dict[str, Any]]
    elapsed: float
    alive: bool
    stats: str
    log: str
    reports: dict[str, str]
    unattributed: list[bytes]

    def answer(self, i: int) -> bytes:
        return bytes.fromhex(self.results[i]["answer"])

    def origin(self, i: int) -> list[bytes]:
        return [bytes.fromhex(d) for d in self.results[i]["origin"]]


@pytest.fixture(scope="module")
def run(framing_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Every case through the binary, in a network namespace of its own, with sanitizer reports sent to files."""
    workdir = tmp_path_factory.mktemp("framing")
    cases = request_cases() + response_cases() + stathost_cases()
    serial = [{**asdict(c), "raw": c.raw.hex(), "reply": c.reply.hex(), "body": ""} for c in cases]
    (workdir / "cases.json").write_text(json.dumps(serial))
    done = subprocess.run(
        [
            "unshare",
            "-n",
            sys.executable,
            __file__,
            "drive",
            str(workdir / "cases.json"),
            str(framing_binary),
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads((workdir / "results.json").read_text())
    reports = {
        p.name: p.read_text(errors="replace") for p in workdir.iterdir() if p.name.startswith(("asan", "ubsan", "tsan"))
    }
    log = (workdir / "tinyproxy.log").read_text(errors="replace") if (workdir / "tinyproxy.log").exists() else ""
    return Run(
        cases,
        out["results"],
        out["elapsed"],
        out["alive"],
        out["stats"],
        log,
        reports,
        [bytes.fromhex(d) for d in out["unattributed"]],
    )


def _kind_of_failure(why: str) -> str:
    """Sorts a failure: something smuggled past the message's end, framing forwarded two ways, or a rule broken."""
    if "after the re" in why or "complete request(s) reached" in why or re.match(r"[2-9]\d* re", why):
        return "bytes or a message past the message's end"
    if "forwarded" in why or "no valid request" in why or "not one valid response" in why:
        return "framing a strict parser refuses forwarded"
    return "refusal rule (status) not applied"


def _summary(failures: list[tuple[Case, str]], total: Counter[str]) -> str:
    by_group = Counter(c.group for c, _ in failures)
    by_kind = Counter(_kind_of_failure(why) for _, why in failures)
    lines = [f"{by_group[g]}/{total[g]} failed: {g}" for g in sorted(total) if by_group[g]]
    lines += [f"{n} of the failures: {kind}" for kind, n in by_kind.most_common()]
    lines += [f"  [{c.group}] {c.label}: {why}" for c, why in failures[:40]]
    return "\n".join(lines)


def test_requests_are_framed_strictly(run: Run) -> None:
    """Every generated request is either refused with the reference's status and no complete request at the origin,
    or reaches the origin as exactly one request (h11), with one framing field, the intended body, and nothing
    after it: no smuggled request, whatever the Transfer-Encoding, Content-Length, field bytes or chunk sizes."""
    failures, total = [], Counter[str]()
    for i, case in enumerate(run.cases):
        if case.kind != "request":
            continue
        total[case.group] += 1
        why = judge_request(case, run.answer(i), run.origin(i))
        if why:
            failures.append((case, why))
    print(f"{sum(total.values())} requests in {run.elapsed:.1f} s")
    assert not failures, _summary(failures, total)
    assert not run.unattributed, run.unattributed[:5]


def test_responses_are_framed_strictly(run: Run) -> None:
    """Every misbehaving origin's response reaches the client as exactly one response under h11 (its Content-Length
    dropped beside Transfer-Encoding, identical lengths collapsed, nothing after the body), or as 502."""
    failures, total = [], Counter[str]()
    for i, case in enumerate(run.cases):
        if case.kind != "response":
            continue
        total[case.group] += 1
        why = judge_response(case, run.answer(i))
        if why:
            failures.append((case, why))
    assert not failures, _summary(failures, total)


def test_stathost_is_the_whole_name(run: Run) -> None:
    """Only Host values that are the StatHost itself, with or without a port, are served the stats page: a prefix or
    an extension of it never is."""
    failures, total = [], Counter[str]()
    for i, case in enumerate(run.cases):
        if case.kind == "stathost":
            total[case.group] += 1
            why = judge_stathost(case, run.answer(i))
            if why:
                failures.append((case, why))
    assert not failures, _summary(failures, total)


def test_each_refusal_is_logged_once_and_counted(run: Run) -> None:
    """Each refused request or response is one WARNING naming the client's address (never a header's value) and
    one bad connection on the stats page; the proxy is still running after every case."""
    assert run.alive, "tinyproxy exited during the run"
    refused = sum(
        1
        for i, c in enumerate(run.cases)
        if c.kind == "request" and 200 not in c.allowed and b"Server: tinyproxy" in run.answer(i)
    ) + sum(1 for i, c in enumerate(run.cases) if c.kind == "response" and status_of(run.answer(i)) == 502)
    warnings = re.findall(r"^WARNING .*Refused a (?:request from|response to) 127\.0\.0\.1", run.log, re.M)
    whitespace = re.findall(
        r"^WARNING .*Refused a request with whitespace before a header's colon from 127\.0\.0\.1", run.log, re.M
    )
    assert refused > 0
    assert len(warnings) + len(whitespace) == refused, (len(warnings), len(whitespace), refused)
    assert SECRET not in run.log
    match = re.search(r"Number of bad connections: (\d+)", run.stats)
    assert match, run.stats[:500]
    assert int(match.group(1)) >= refused, (match.group(1), refused)


def test_no_sanitizer_report(run: Run) -> None:
    """A sanitizer build (ASAN/UBSAN/TSAN_OPTIONS log_path set by this module) wrote no report over the whole run."""
    assert not run.reports, "\n".join(f"{name}:\n{text[:3000]}" for name, text in run.reports.items())


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "drive":
    drive(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
