"""Upstream tinyproxy's fixes after the commit the image builds (364cdb6), each proven as a class of inputs: what the
image's record of them (docs/guides/images.md, "Upstream's fixes after 364cdb6") claims, and no more.

Four binaries run every case: upstream's 364cdb6 built with no patch (`scripts/image tinyproxy upstream`, the image's
loader and libc), which must show each flaw, so that each test can fail; then the image's own binary and its
ASan+UBSan and TSan builds, which must not. They run with test_framing.py's driver: tinyproxy and a recording origin on
127.0.0.1 in a network namespace the run makes (`unshare -n`), h11 as the oracle of what reached the origin and the
client.

- tinyproxy issue #623 / PR #624 (2026-08-30): whitespace between a field name and its colon. Upstream trims it; the
  image (patch 0002) refuses such a request with 400 and a WARNING, and trims it from a response's field name.
  Generated: nine field names (the framing fields, Host, the hop-by-hop fields, a credential, a one-letter name) x
  seven runs of spaces and tabs x three positions (alone, after and before a clean field of the same name), issue
  #623's own request, and controls with the same whitespace after the colon (OWS, which must pass); on the response
  side, six field names x the same whitespace, a Content-Length that conflicts once trimmed, and a Transfer-Encoding
  beside a Content-Length.
- tinyproxy issue #616 / PR #617 (2026-06-23): a Transfer-Encoding value that is not the literal `chunked` (trailing
  whitespace, a trailing comma, chunked before another coding) beside a Content-Length: 364cdb6 forwards both
  framing fields. The image (patches 0008 and 0011) reads the value as a list: beside a Content-Length it is refused
  (400), alone it is refused unless chunked is its last coding once (400, 501 for an unknown coding), and a valid
  one is forwarded as one normalised line. Generated: issue #616's five values, three spellings of chunked with four
  runs of spaces and tabs before, after or around them, six separators around chunked before, after and between
  other codings, two field lines; each with and without a Content-Length, the body followed by a smuggled request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from tests.image import test_framing as framing
from tests.image.conftest import _built
from tests.image.test_build import _image, _scripts_image

pytestmark = pytest.mark.image

BODY_CHUNKED = b"5\r\nhello\r\n0\r\n\r\n" + framing.SMUGGLED
BODY_LENGTH = b"hello" + framing.SMUGGLED
WHITESPACE = [b" ", b"\t", b"  ", b"\t\t", b" \t", b"\t ", b"    "]
WHITESPACE_WARNING = "Refused a request with whitespace before a header's colon from 127.0.0.1"


@dataclass
class Expect:
    """What a case checks beyond test_framing's judges: the bytes whose presence is the flaw upstream fixed (a
    field line forwarded with whitespace before its colon, or both framing fields), and what the image must deliver
    instead (a field line as it must arrive, or the one normalised Transfer-Encoding value)."""

    family: str  # "request whitespace", "response whitespace", "transfer-encoding", or a control
    spaced: bytes = b""  # the field name with its whitespace and colon, as the flaw forwards it
    line: bytes = b""  # response cases: the field line the client must receive instead
    te: bytes | None = None  # transfer-encoding cases: the normalised list the origin must receive when forwarded
    reproducer: bool = False  # the upstream issue's own request: upstream's 364cdb6 must show the flaw for it


# --- the cases -------------------------------------------------------------------------------------------------


def _value_for(name: bytes) -> bytes:
    """The value a spaced field carries: a length beside the clean one, chunked, a host, a credential, ..."""
    return {
        b"content-length": b"41",
        b"transfer-encoding": b"chunked",
        b"host": b"smuggled.invalid",
        b"connection": b"close",
        b"proxy-connection": b"keep-alive",
        b"proxy-authorization": b"Basic " + framing.SECRET.encode(),
    }.get(name.lower(), b"v")


REQUEST_NAMES = [
    b"Content-Length",
    b"Transfer-Encoding",
    b"Host",
    b"Connection",
    b"Proxy-Connection",
    b"Proxy-Authorization",
    b"Upgrade",
    b"X-Test",
    b"X",
]


def request_whitespace_cases() -> list[tuple[framing.Case, Expect]]:
    """Requests with whitespace before a field's colon (refused), and the same whitespace after it (forwarded)."""
    out: list[tuple[framing.Case, Expect]] = []

    def add(label: str, fields: list[bytes], body: bytes, expect: Expect) -> None:
        raw = framing._request(fields, body)
        allowed, forwarded = framing.reference(raw.replace(framing.ORIGIN_MARK, b"127.0.0.1:1"))
        out.append((framing.Case("request", expect.family, label, raw, allowed, forwarded), expect))

    for name in REQUEST_NAMES:
        value = _value_for(name)
        # a smuggled request after the body's first 5 bytes (its clean length) or after its last chunk
        body = BODY_CHUNKED if name == b"Transfer-Encoding" else BODY_LENGTH
        clean_length = [b"Content-Length: 5"] if name != b"Content-Length" else []
        clean = name + b": " + (b"5" if name == b"Content-Length" else value)
        for ws in WHITESPACE:
            spaced = name + ws + b": " + value
            for position, fields in (
                ("alone", [spaced]),
                ("after a clean one", [clean, spaced]),
                ("before a clean one", [spaced, clean]),
            ):
                label = f"{spaced!r} {position}"
                add(label, [*clean_length, *fields], body, Expect("request whitespace", spaced=name + ws + b":"))
            # the control: the same whitespace after the colon, around the value (OWS), which must pass
            control = name + b":" + ws + (b"5" if name == b"Content-Length" else value) + ws
            add(
                f"{control!r} (control)",
                [control] if name == b"Transfer-Encoding" else [*clean_length, control],
                body,
                Expect("control: whitespace after the colon"),
            )
    # Issue #623's own request, as far as the issue shows it (curl -d HELLO -H 'Content-Length : 100' ...): curl's
    # clean Content-Length of 5, four more with one to four spaces before the colon, Transfer-Encodings likewise.
    fields = [b"Content-Length: 5"]
    fields += [b"Content-Length" + b" " * n + b": " + str(100 * n).encode() for n in range(1, 5)]
    fields += [b"Transfer-Encoding" + b" " * n + b": chunked" for n in range(1, 4)]
    add(
        "issue #623's request",
        fields,
        b"HELLO" + framing.SMUGGLED,
        Expect("request whitespace", spaced=b"Content-Length :", reproducer=True),
    )
    return out


def response_whitespace_cases() -> list[tuple[framing.Case, Expect]]:
    """Responses with whitespace before a field's colon: the client gets the field without it, or a 502."""
    out: list[tuple[framing.Case, Expect]] = []
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled!"

    def add(label: str, reply: bytes, allowed: list[int], body: bytes, expect: Expect) -> None:
        raw = framing._request([], b"", method=b"GET")
        out.append((framing.Case("response", expect.family, label, raw, allowed, body, reply, "GET"), expect))

    for ws in WHITESPACE:
        for name, value in ((b"X-Test", b"v"), (b"Content-Type", b"text/plain"), (b"Set-Cookie", b"a=b"), (b"X", b"y")):
            reply = b"HTTP/1.1 200 OK\r\n" + name + ws + b": " + value + b"\r\nContent-Length: 5\r\n\r\nhello"
            add(
                f"{name + ws + b': ' + value!r}",
                reply,
                [200],
                b"hello",
                Expect("response whitespace", spaced=name + ws + b":", line=name + b": " + value),
            )
        # Content-Length with whitespace, and bytes after the body the length excludes
        add(
            f"{b'Content-Length' + ws + b': 5'!r} + extra",
            b"HTTP/1.1 200 OK\r\nContent-Length" + ws + b": 5\r\n\r\nhello" + extra,
            [200],
            b"hello",
            Expect("response whitespace", spaced=b"Content-Length" + ws + b":", line=b"Content-Length: 5"),
        )
        # two lengths that conflict once the name is trimmed: 502, as for any two lengths that differ
        add(
            f"Content-Length: 5 and {b'Content-Length' + ws + b': 14'!r}",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length" + ws + b": 14\r\n\r\nhello" + extra,
            [502],
            b"",
            Expect("response whitespace", spaced=b"Content-Length" + ws + b":"),
        )
        # a Transfer-Encoding hidden by whitespace beside a Content-Length: chunked wins, the length goes
        add(
            f"{b'Transfer-Encoding' + ws + b': chunked'!r} and Content-Length: 3",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding"
            + ws
            + b": chunked\r\nContent-Length: 3\r\n\r\n"
            + b"5\r\nhello\r\n0\r\n\r\n"
            + extra,
            [200],
            b"hello",
            Expect("response whitespace", spaced=b"Transfer-Encoding" + ws + b":", line=b"Transfer-Encoding: chunked"),
        )
    return out


ISSUE_616 = [b"chunked,", b"chunked ", b"chunked, gzip", b"chunked  ,  gzip", b"chunked\t"]
OWS = [b"", b" ", b"\t", b"  ", b" \t"]
SEPARATORS = [b",", b", ", b" ,", b",,", b" , ", b",\t"]


def _normalised(lines: list[bytes]) -> bytes:
    elements = [e.strip(b" \t").lower() for e in b",".join(lines).split(b",")]
    return b", ".join(e for e in elements if e)


def transfer_encoding_cases() -> list[tuple[framing.Case, Expect]]:
    """Transfer-Encoding values that are not the literal `chunked`, with and without a Content-Length."""
    values: list[tuple[list[bytes], bool]] = [([v], True) for v in ISSUE_616]
    for chunked in (b"chunked", b"Chunked", b"CHUNKED"):
        values += [([left + chunked + right], False) for left in OWS for right in OWS if left or right]
        for sep in SEPARATORS:
            values += [
                ([chunked + sep], False),
                ([sep + chunked], False),
                ([b"gzip" + sep + chunked], False),
                ([chunked + sep + b"gzip"], False),
                ([chunked + sep + chunked], False),
                ([b"deflate" + sep + b"x-chunked" + sep + chunked], False),
            ]
    values += [
        ([b"gzip", b"chunked"], False),
        ([b"chunked", b"gzip"], False),
        ([b"chunked ", b"chunked"], False),
        ([b"gzip,", b" chunked\t"], False),
    ]
    out: list[tuple[framing.Case, Expect]] = []
    for lines, reproducer in values:
        for with_length in (False, True):
            fields = [b"Transfer-Encoding: " + line for line in lines]
            if with_length:
                fields.append(b"Content-Length: " + str(len(BODY_CHUNKED)).encode())
            raw = framing._request(fields, BODY_CHUNKED)
            allowed, forwarded = framing.reference(raw.replace(framing.ORIGIN_MARK, b"127.0.0.1:1"))
            label = f"{b' | '.join(lines)!r}{' + Content-Length' if with_length else ''}"
            case = framing.Case("request", "transfer-encoding", label, raw, allowed, forwarded)
            out.append(
                (case, Expect("transfer-encoding", te=_normalised(lines), reproducer=reproducer and with_length))
            )
    return out


def all_cases() -> list[tuple[framing.Case, Expect]]:
    return request_whitespace_cases() + response_whitespace_cases() + transfer_encoding_cases()


# --- the binaries and the run ----------------------------------------------------------------------------------


def _runner(directory: Path, root: Path, binary: Path) -> Path:
    """A script that runs `binary` (built against the image's libc) with the image's own loader and libraries."""
    libs = ":".join(str(root / d) for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"))
    script = directory / "tinyproxy"
    script.write_text(
        f'#!/bin/sh\nexec "{root}/usr/lib64/ld-linux-x86-64.so.2" --library-path "{libs}" "{binary}" "$@"\n'
    )
    script.chmod(0o755)
    return script


@dataclass
class Result:
    flavour: str
    cases: list[tuple[framing.Case, Expect]]
    run: framing.Run


@pytest.fixture(scope="module", params=["upstream", "image", "asan", "tsan"])
def result(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Result:
    """Every case through one binary: upstream's 364cdb6 with no patch, the image's, or its sanitizer builds."""
    flavour: str = request.param
    workdir = tmp_path_factory.mktemp(f"upstream-fixes-{flavour}")
    if flavour in ("upstream", "image"):
        root = _image("amd64", tmp_path_factory).root
        binary = (
            _scripts_image("tinyproxy", "upstream", "amd64") if flavour == "upstream" else root / "usr/bin/tinyproxy"
        )
        binary = _runner(workdir, root, binary)
    else:
        binary = _built("tinyproxy", f"host-{flavour}")
    cases = all_cases()
    serial = [{**asdict(c), "raw": c.raw.hex(), "reply": c.reply.hex(), "body": ""} for c, _ in cases]
    (workdir / "cases.json").write_text(json.dumps(serial))
    done = subprocess.run(
        ["unshare", "-n", sys.executable, framing.__file__, "drive", str(workdir / "cases.json"), str(binary),
         str(workdir)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads((workdir / "results.json").read_text())
    reports = {
        p.name: p.read_text(errors="replace") for p in workdir.iterdir() if p.name.startswith(("asan", "ubsan", "tsan"))
    }
    log = (workdir / "tinyproxy.log").read_text(errors="replace") if (workdir / "tinyproxy.log").exists() else ""
    run = framing.Run(
        [c for c, _ in cases],
        out["results"],
        out["elapsed"],
        out["alive"],
        out["stats"],
        log,
        reports,
        [bytes.fromhex(d) for d in out["unattributed"]],
    )
    return Result(flavour, cases, run)


# --- the judges ------------------------------------------------------------------------------------------------


def _head(data: bytes) -> bytes:
    return data.partition(b"\r\n\r\n")[0]


def _te_lines(head: bytes) -> list[bytes]:
    return [
        line.partition(b":")[2].strip(b" \t")
        for line in head.split(b"\r\n")[1:]
        if line.partition(b":")[0].lower() == b"transfer-encoding"
    ]


def _flawed(case: framing.Case, expect: Expect, answer: bytes, origin: list[bytes]) -> bool:
    """Whether the binary did what upstream's fix stops: forwarded a field line with whitespace before its colon (to
    the origin, or to the client), or forwarded a Transfer-Encoding and a Content-Length both."""
    if expect.family == "response whitespace":
        return expect.spaced in _head(answer)
    if expect.family == "request whitespace":
        return any(expect.spaced in _head(data) for data in origin)
    heads = [_head(data).lower() for data in origin]
    return any(b"\r\ntransfer-encoding" in h and b"\r\ncontent-length" in h for h in heads)


def _judge(case: framing.Case, expect: Expect, answer: bytes, origin: list[bytes]) -> str:
    """'' when the image's binary did what the record says; else why not."""
    if case.kind == "response":
        why = framing.judge_response(case, answer)
        if why or framing.status_of(answer) == 502:
            return why
        head = _head(answer)
        if expect.spaced in head:
            return f"forwarded {expect.spaced!r} to the client"
        if b"\r\n" + expect.line + b"\r\n" not in head + b"\r\n":
            return f"{expect.line!r} not in the client's head {head[:300]!r}"
        return ""
    why = framing.judge_request(case, answer, origin)
    if why or framing.status_of(answer) != 200 or expect.te is None:
        return why
    te = _te_lines(_head(origin[0]))
    if te != [expect.te]:
        return f"Transfer-Encoding forwarded as {te!r}, expected one line {expect.te!r}"
    return ""


def _failures(result: Result, family: str) -> tuple[list[str], int]:
    failures, total = [], 0
    for i, (case, expect) in enumerate(result.cases):
        if expect.family != family:
            continue
        total += 1
        why = _judge(case, expect, result.run.answer(i), result.run.origin(i))
        if why:
            failures.append(f"[{case.group}] {case.label}: {why}")
    return failures, total


def _flaws(result: Result, family: str) -> tuple[list[str], list[str], int]:
    """On upstream's binary: the cases of a family that show the flaw, those that do not, and how many there are."""
    shown: list[str] = []
    not_shown: list[str] = []
    for i, (case, expect) in enumerate(result.cases):
        if expect.family != family:
            continue
        answer, origin = result.run.answer(i), result.run.origin(i)
        (shown if _flawed(case, expect, answer, origin) else not_shown).append(
            f"{case.label} (status {framing.status_of(answer)})"
        )
    return shown, not_shown, len(shown) + len(not_shown)


def _reproducers_flawed(result: Result, family: str) -> list[str]:
    return [
        case.label
        for i, (case, expect) in enumerate(result.cases)
        if expect.family == family and expect.reproducer
        and not _flawed(case, expect, result.run.answer(i), result.run.origin(i))
    ]  # fmt: skip


# --- the tests -------------------------------------------------------------------------------------------------


def test_whitespace_before_a_colon_in_a_request(result: Result) -> None:
    """Issue #623 / PR #624. Upstream's 364cdb6 forwards every field line with whitespace before its colon verbatim
    (issue #623's request included: five Content-Lengths reach the origin). The image's binary refuses every such
    request with 400, one WARNING each and no complete request at the origin, whatever the field's name, the
    whitespace (spaces, tabs, mixed, up to four) or its position beside a clean field of the same name."""
    if result.flavour == "upstream":
        shown, not_shown, total = _flaws(result, "request whitespace")
        print(f"upstream 364cdb6 forwarded a spaced field line in {len(shown)}/{total} requests")
        assert not _reproducers_flawed(result, "request whitespace"), "issue #623's request shows no flaw"
        assert not not_shown, not_shown[:20]
        return
    failures, total = _failures(result, "request whitespace")
    assert total == 3 * len(REQUEST_NAMES) * len(WHITESPACE) + 1, total
    assert not failures, f"{len(failures)}/{total} failed:\n" + "\n".join(failures[:40])
    warnings = result.run.log.count(WHITESPACE_WARNING)
    assert warnings == total, (warnings, total)
    assert framing.SECRET not in result.run.log


def test_whitespace_after_a_colon_is_not_refused(result: Result) -> None:
    """The control: the same whitespace after the colon (OWS around a value, RFC 9112 section 5) is forwarded as one
    request with the intended body by the image's binary, for each of the nine names."""
    failures, total = _failures(result, "control: whitespace after the colon")
    assert total == len(REQUEST_NAMES) * len(WHITESPACE), total
    if result.flavour == "upstream":  # measured, not judged: the harness sends valid requests it forwards
        print(f"upstream 364cdb6 forwarded {total - len(failures)}/{total} control requests as sent")
        assert len(failures) < total, "upstream forwarded none of the controls: the harness, not the binary"
        return
    assert not failures, f"{len(failures)}/{total} failed:\n" + "\n".join(failures[:40])


def test_whitespace_before_a_colon_in_a_response(result: Result) -> None:
    """The response half of PR #624. Upstream's 364cdb6 passes every response's field line with whitespace before its
    colon to the client verbatim. The image's binary gives the client the field without the whitespace (so a
    Content-Length or Transfer-Encoding so spelt frames the response as a strict client reads it), and a 502 for
    two Content-Lengths that conflict once trimmed."""
    if result.flavour == "upstream":
        shown, not_shown, total = _flaws(result, "response whitespace")
        print(f"upstream 364cdb6 passed a spaced field line to the client in {len(shown)}/{total} responses")
        assert not not_shown, not_shown[:20]
        return
    failures, total = _failures(result, "response whitespace")
    assert total == 7 * len(WHITESPACE), total
    assert not failures, f"{len(failures)}/{total} failed:\n" + "\n".join(failures[:40])


def test_transfer_encoding_other_than_chunked(result: Result) -> None:
    """Issue #616 / PR #617. Upstream's 364cdb6 forwards both a Transfer-Encoding and a Content-Length when the value
    is not the literal `chunked` (each of issue #616's five). The image's binary never forwards both: beside a
    Content-Length every value is refused (400); alone, a list whose last coding is chunked, once, is forwarded as
    one normalised line (lower case, `, ` between codings, no empty element) with the intended body and nothing after
    it; any other list is refused (400, or 501 for an unknown coding)."""
    if result.flavour == "upstream":
        shown, _, total = _flaws(result, "transfer-encoding")
        print(f"upstream 364cdb6 forwarded both framing fields in {len(shown)}/{total} requests")
        missing = _reproducers_flawed(result, "transfer-encoding")
        assert not missing, f"issue #616's values that show no flaw on 364cdb6: {missing}"
        return
    failures, total = _failures(result, "transfer-encoding")
    assert total > 300, total
    assert not failures, f"{len(failures)}/{total} failed:\n" + "\n".join(failures[:40])
    forwarded = sum(
        1
        for i, (case, expect) in enumerate(result.cases)
        if expect.family == "transfer-encoding" and framing.status_of(result.run.answer(i)) == 200
    )
    refused_with_length = sum(
        1
        for i, (case, expect) in enumerate(result.cases)
        if expect.family == "transfer-encoding" and case.label.endswith("+ Content-Length")
        and framing.status_of(result.run.answer(i)) == 400
    )  # fmt: skip
    assert forwarded > 50, forwarded  # not vacuous: normalised lists were forwarded
    assert refused_with_length == total // 2, (refused_with_length, total)


def test_alive_with_no_sanitizer_report(result: Result) -> None:
    """The binary was still running after every case, and a sanitizer build wrote no report (the trimming of a
    response's field name and the list parser run under ASan+UBSan and TSan)."""
    assert result.run.alive, "tinyproxy exited during the run"
    assert not result.run.unattributed, result.run.unattributed[:5]
    assert not result.run.reports, "\n".join(f"{n}:\n{t[:3000]}" for n, t in result.run.reports.items())
