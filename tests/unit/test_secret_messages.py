"""No error of the command carries the upstream password: every settings-error case of `settings_errors/`, given a
credentialed upstream (or with its own password swapped for a marker), fails `render`, `no-proxy`, `explain` and
`check` with its field-naming lines and never the password; so do cases whose bad field is the one holding it.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component import cli

ERRORS = Path(__file__).parent / "settings_errors"
CASES = sorted(p.stem for p in ERRORS.glob("*.yaml"))
PASSWORD = "Fl33t-pw-7319"
UPSTREAM = f"http://svc:{PASSWORD}@proxy.corp.example:3128"
# Cases whose bad value is the credentialed field itself, or sits beside it.
OWN = {
    "typo_beside_the_url": {"proxy": {"noproxy": [".corp.example"], "upstream": {"url": UPSTREAM}}},
    "bad_port_in_the_url": {"proxy": {"upstream": {"url": f"http://svc:{PASSWORD}@proxy.corp.example:99999"}}},
    "bad_scheme_in_the_url": {"proxy": {"httpProxy": f"socks5://svc:{PASSWORD}@proxy.corp.example:1080"}},
    "path_in_the_url": {"proxy": {"httpsProxy": f"http://svc:{PASSWORD}@proxy.corp.example:3128/x"}},
    "password_beside_a_url_password": {
        "proxy": {"upstream": {"url": UPSTREAM, "username": "svc", "password": PASSWORD}}
    },
    "typo_of_password": {"proxy": {"upstream": {"url": "http://proxy.corp.example:3128", "passwrd": PASSWORD}}},
    "password_as_a_number": {"proxy": {"upstream": {"url": "http://proxy.corp.example:3128", "password": 73190}}},
    "credentials_in_no_proxy": {"proxy": {"noProxy": [f"svc:{PASSWORD}@proxy.corp.example"]}},
    "upstream_as_a_mistyped_string": {"proxy": {"upstream": f"http//svc:{PASSWORD}proxy.corp.example:3128"}},
    "credentials_in_a_node_proxy": {"proxy": {"nodeHttpProxy": f"ftp://svc:{PASSWORD}@proxy.corp.example:21"}},
    "bad_cidr_beside_the_url": {
        "cluster": {"podCidrs": ["10.0.0.1/33"]},
        "proxy": {"upstream": {"url": UPSTREAM, "trustedCa": "-----BEGIN CERTIFICATE-----\nnot\n"}},
    },
}


def _with_password(data: Any) -> Any:
    """The case with every password it holds replaced by PASSWORD, and a credentialed upstream when it has none."""
    text = re.sub(r"(://[^:/@\s]+:)[^\s]*@", rf"\g<1>{PASSWORD}@", yaml.safe_dump(data, width=1000))
    text = re.sub(r"(\bpassword: ).*", rf"\g<1>{PASSWORD}", text)
    if PASSWORD not in text:  # a URL without user info: give it some
        text = re.sub(r"(https?|ftp|socks5)://", rf"\g<1>://svc:{PASSWORD}@", text, count=1)
    out = yaml.safe_load(text) or {}
    if isinstance(out, dict) and isinstance(out.get("proxy", {}), dict):
        proxy = out.setdefault("proxy", {})
        if "upstream" not in proxy and "httpProxy" not in proxy:
            proxy["upstream"] = {"url": UPSTREAM}
    return out


# Cases about how a password is spelled in the URL, which the marker would make valid: left out here; that their
# own passwords never show is test_settings.test_errors_never_echo_a_password.
SPELLING = {"password_unencoded", "upstream_password_at"}


def _cases() -> list[tuple[str, Any]]:
    cases = [
        (case, _with_password(yaml.safe_load((ERRORS / f"{case}.yaml").read_text())))
        for case in CASES
        if case not in SPELLING
    ]
    return cases + [(name, copy.deepcopy(data)) for name, data in OWN.items()]


@pytest.mark.parametrize(("case", "data"), _cases(), ids=[c for c, _ in _cases()])
def test_no_command_prints_the_password_of_a_bad_settings_file(
    case: str, data: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump(data))
    assert PASSWORD in path.read_text() or case in ("password_as_a_number", "not_a_mapping")
    outputs = []
    for argv in (
        ["render", str(path)],
        ["render", str(path), "-o", str(tmp_path / "out")],
        ["no-proxy", str(path)],
        ["explain", str(path)],
        ["check", str(path), "--kubeconfig", str(tmp_path / "none")],
    ):
        code = cli.main(argv)
        captured = capsys.readouterr()
        outputs.append(captured.out + captured.err)
        assert code == 2, (argv, captured.err)
        assert "invalid settings" in captured.err or "proxy-component:" in captured.err
        assert "Traceback" not in captured.err
    assert not (tmp_path / "out").exists(), "nothing is half-written"
    for text in outputs:
        assert PASSWORD not in text
        assert "73190" not in text


@pytest.mark.parametrize(
    "pair", [f"ALL_PROXY http://svc:{PASSWORD}@proxy.corp.example:3128", f"ALL_PROXY:http//svc:{PASSWORD}proxy.corp"]
)
def test_explain_env_without_its_equals_sign_is_named_masked(pair: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`explain --env`'s value is often a proxy URL: a pair without '=' is reported without its password."""
    assert cli.main(["explain", "--env", pair]) == 2
    err = capsys.readouterr().err
    assert "--env: " in err
    assert "is not NAME=VALUE" in err
    assert PASSWORD not in err
