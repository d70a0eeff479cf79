"""The typo corpus: no command prints a password, however its URL is mistyped.

Every single-character deletion, duplication and substitution (by `:`, `/`, `@`, `;` and a few others) of each
`:`, `/` and `@` and of each letter of the scheme, in credentialed proxy URLs (the upstream's, with a plain and
with a percent-encoded password, and the pods' `httpProxy`), goes through every command that reads settings:
`render`, `no-proxy`, `explain` and `check` (no cluster: it fails after the settings), each from a file (`render
-o`, whose files are read too) and with `--stack` (`render` to stdout; the Pulumi CLI's config output stood in
for, `layers.read_stack` runs as it does). The password, decoded, percent-encoded and in any letter case, is in no stdout, no stderr and no written
file; a URL that is still valid renders it only in Secrets. Pydantic's own error text never carries it. A URL
whose user name may hold the password, and an upstream without a port, get their warning from every command.
A sample runs as real processes: the installed command, and a stand-in `pulumi` on PATH for `--stack`.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pytest
import yaml
from pydantic import ValidationError

from proxy_component import cli
from proxy_component.settings import Settings, SettingsError, parse_settings

PLAIN = "S3cr3tPassw0rd"
ENCODED = "Pa%2Fss%23w0rd%3A9x"  # Pa/ss#w0rd:9x: a password that must be percent-encoded in a URL
BASES = (
    ("proxy.upstream.url", f"http://svc-proxy:{PLAIN}@proxy.corp.example:3128", PLAIN),
    ("proxy.upstream.url", f"http://svc-proxy:{ENCODED}@proxy.corp.example:3128", ENCODED),
    ("proxy.httpProxy", f"https://svc-proxy:{PLAIN}@proxy.corp.example:3128", PLAIN),
)
SUBSTITUTES = ":/@;.#?% x"
"""What a character is mistyped as: the URL's own delimiters, `;`, and a few that end or break a URL."""
EXAMPLE = yaml.safe_load(files("proxy_component").joinpath("data/example.yaml").read_text(encoding="utf-8"))
STACK = "dev"


def _mutations(url: str) -> list[tuple[str, str]]:
    """(label, url) for every single-character edit of the URL's `:`, `/`, `@` and scheme letters, each once."""
    scheme_end = url.index("://")
    out: dict[str, str] = {}
    for i, char in enumerate(url):
        if char not in ":/@" and i >= scheme_end:
            continue
        edits = [(f"del{i}", url[:i] + url[i + 1 :]), (f"dup{i}", url[:i] + char + url[i:])]
        substitutes = SUBSTITUTES + (char.upper() if char.isalpha() else "")
        edits += [(f"sub{i}x{ord(s):02x}", url[:i] + s + url[i + 1 :]) for s in substitutes if s != char]
        for label, edited in edits:
            out.setdefault(edited, label)
    out.pop(url, None)
    return sorted(((label, edited) for edited, label in out.items()), key=lambda item: item[0])


def _corpus() -> list[Any]:
    cases = []
    for number, (field, url, password) in enumerate(BASES):
        name = f"{field.rpartition('.')[2]}{number}"
        cases.append(pytest.param(field, url, password, id=f"{name}-as-given"))
        cases += [pytest.param(field, edited, password, id=f"{name}-{label}") for label, edited in _mutations(url)]
    return cases


CORPUS = _corpus()


def test_the_corpus_is_every_single_edit() -> None:
    """The corpus's size, so that a change to it shows: 3 URLs as given, and each one's distinct edits."""
    assert [len(_mutations(url)) for _, url, _ in BASES] == [114, 114, 127]
    assert len(CORPUS) == 358


def _forms(password: str) -> list[str]:
    """The password as it could appear: percent-encoded and decoded (searched in any letter case)."""
    return sorted({password, unquote(password), quote(unquote(password), safe="")})


def _leaks(text: str, password: str) -> list[str]:
    return [form for form in _forms(password) if form.lower() in text.lower()]


def _settings(field: str, url: str) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(EXAMPLE)
    if field == "proxy.upstream.url":
        data["proxy"]["upstream"] = {"url": url}
    else:
        data["proxy"]["httpProxy"] = url
    return data


def _stack_config(data: dict[str, Any]) -> str:
    """`pulumi config --json --show-secrets` of a stack holding these settings, `proxy` set as a secret."""
    return json.dumps(
        {
            f"proxy-component:{key}": {"value": json.dumps(value), "objectValue": value, "secret": key == "proxy"}
            for key, value in data.items()
        }
    )


def _fake_pulumi(monkeypatch: pytest.MonkeyPatch, data: dict[str, Any]) -> None:
    """The Pulumi CLI's answer to `read_stack`, in process: only `pulumi config` for this stack is expected."""
    config = _stack_config(data)

    def run(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert list(argv) == ["pulumi", "config", "--json", "--show-secrets", "--stack", STACK], argv
        return subprocess.CompletedProcess(list(argv), 0, stdout=config, stderr="")

    monkeypatch.setattr(subprocess, "run", run)  # the module layers.read_stack calls


def _commands(source: list[str], out: Path) -> list[list[str]]:
    """Each command that reads settings; `render` to files from a file, to stdout from a stack (one run of it per
    form: the corpus's valid URLs, which render every object, are most of its time)."""
    render = ["render", *source, "-o", str(out)] if source[0] != "--stack" else ["render", *source]
    return [
        render,
        ["no-proxy", *source],
        ["explain", *source],
        ["check", *source, "--kubeconfig", str(out.parent / "no-kubeconfig")],
    ]


def _outside_secrets(stream: str) -> str:
    """A rendered YAML stream without its Secrets: where a valid URL's password may not be."""
    return yaml.safe_dump_all([doc for doc in yaml.safe_load_all(stream) if doc and doc.get("kind") != "Secret"])


def _expected_warnings(field: str, url: str) -> list[str]:
    """An independent reading of which warnings a valid URL gets: a user name without a password, no port."""
    parts = urlsplit(url)
    expected = []
    if parts.username is not None and not parts.password:
        expected.append(f"proxy-component: warning: {field}: its user name ")
    if field == "proxy.upstream.url" and parts.port is None:
        expected.append("proxy-component: warning: proxy.upstream.url: gives no port")
    return expected


def _valid(data: dict[str, Any], password: str) -> bool:
    text = ""
    try:
        Settings.model_validate(data)
    except ValidationError as exc:
        text = f"{exc}\n{exc!r}"
    assert _leaks(text, password) == [], "pydantic's own error text"
    try:
        parse_settings(data)
    except SettingsError:
        return False
    return True


@pytest.mark.parametrize(("field", "url", "password"), CORPUS)
def test_no_command_prints_the_password_of_a_mistyped_url(
    field: str,
    url: str,
    password: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _settings(field, url)
    valid = _valid(data, password)
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(data))
    _fake_pulumi(monkeypatch, data)
    owner = "proxy.upstream." if field == "proxy.upstream.url" else f"{field}:"
    for source in ([str(path)], ["--stack", STACK, "--cwd", str(tmp_path)]):
        out_dir = tmp_path / f"out-{len(source)}"
        for argv in _commands(source, out_dir):
            code = cli.main(argv)
            captured = capsys.readouterr()
            assert "Traceback" not in captured.err
            assert _leaks(captured.err, password) == [], (argv, captured.err)
            shown = _outside_secrets(captured.out) if valid and argv[0] == "render" else captured.out
            assert _leaks(shown, password) == [], (argv, captured.out)
            if not valid:
                assert code == 2, (argv, captured.err)
                assert f"\n  {owner}" in captured.err, (argv, captured.err)
                continue
            assert code == (2 if argv[0] == "check" else 0), (argv, captured.err)
            for expected in _expected_warnings(field, url):
                assert expected in captured.err, (argv, captured.err)
        written = sorted(out_dir.glob("*")) if out_dir.exists() else []
        assert valid or written == [], "nothing is written from invalid settings"
        for file in written:
            assert _leaks(_outside_secrets(file.read_text()), password) == [], file.name


SAMPLE = ("del31", "sub16x3b")
"""A missing '@', and ';' for ':' (valid: a user name that holds the password); of the upstream's plain password."""


def test_the_installed_command_prints_no_password_of_a_sample(tmp_path: Path) -> None:
    """The sample through the command as a user runs it, `--stack` through a stand-in `pulumi` on PATH: every
    command from a file, `render` and `no-proxy` from the stack."""
    field, url, password = BASES[0]
    edits = dict(_mutations(url))
    command = Path(sys.executable).parent / "proxy-component"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for label in SAMPLE:
        data = _settings(field, edits[label])
        case = tmp_path / label
        case.mkdir()
        (case / "proxy.yaml").write_text(yaml.safe_dump(data))
        (case / "config.json").write_text(_stack_config(data))
        pulumi = bin_dir / "pulumi"
        pulumi.write_text(f'#!/bin/sh\n[ "$1 $2" = "config --json" ] || exit 9\nexec cat "{case / "config.json"}"\n')
        pulumi.chmod(0o755)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
        valid = label == "sub16x3b"
        file_form = _commands([str(case / "proxy.yaml")], case / "out-file")
        stack_form = _commands(["--stack", STACK, "--cwd", str(case)], case / "out-stack")
        for argv in [*file_form, *stack_form[:2]]:
            result = subprocess.run([str(command), *argv], capture_output=True, text=True, env=env, check=False)
            assert "Traceback" not in result.stderr
            assert _leaks(result.stderr, password) == [], (label, argv, result.stderr)
            shown = _outside_secrets(result.stdout) if valid and argv[0] == "render" else result.stdout
            assert _leaks(shown, password) == [], (label, argv)
            expected = 2 if not valid or argv[0] == "check" else 0
            assert result.returncode == expected, (label, argv, result.stderr)
            if valid:
                assert "proxy-component: warning: proxy.upstream.url: its user name holds ';'" in result.stderr
