"""proxy.upstream.trustedCa: each block a CA certificate valid now; every other input named and refused."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from proxy_component.cli import main
from proxy_component.settings import SettingsError, ca_certificates, parse_settings
from tests.pki import make_ca, make_leaf

UPSTREAM = "http://proxy.corp:3128"


def _settings(trusted: Any) -> dict[str, Any]:
    return {
        "proxy": {"upstream": {"url": UPSTREAM, "trustedCa": trusted}},
        "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]},
        "namespaces": ["apps"],
    }


def _error(trusted: Any) -> str:
    with pytest.raises(SettingsError) as caught:
        parse_settings(_settings(trusted))
    (problem,) = caught.value.problems
    assert problem.startswith("proxy.upstream.trustedCa: "), problem
    return problem


def test_one_ca_or_several_in_any_order_and_spelling_give_one_canonical_bundle() -> None:
    first, second = make_ca("Corp Root"), make_ca("Corp Issuing")
    one = parse_settings(_settings(first.cert_pem + second.cert_pem)).trusted_ca
    other = parse_settings(_settings([second.cert_pem, "# comment\n" + first.cert_pem, first.cert_pem])).trusted_ca
    crlf = parse_settings(_settings((second.cert_pem + first.cert_pem).replace("\n", "\r\n"))).trusted_ca
    assert one == other == crlf
    assert one is not None
    subjects = sorted(x509.load_pem_x509_certificate(p.encode()).subject.rfc4514_string() for p in ca_certificates(one))
    assert subjects == ["CN=Corp Issuing", "CN=Corp Root"]


def test_no_trusted_ca_is_none() -> None:
    settings = parse_settings({"proxy": {"upstream": {"url": UPSTREAM}}})
    assert settings.trusted_ca is None
    assert parse_settings({}).trusted_ca is None


def test_a_private_key_is_refused_and_never_echoed() -> None:
    ca = make_ca()
    problem = _error(ca.cert_pem + ca.key_pem)
    assert "private key" in problem
    body = ca.key_pem.splitlines()[1]
    assert body not in problem
    with pytest.raises(SettingsError) as caught:
        parse_settings(_settings(ca.key_pem))
    assert body not in str(caught.value)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: make_ca(valid_from=timedelta(days=-30), valid_for=timedelta(days=10)), "expired on"),
        (lambda: make_ca(valid_from=timedelta(days=5)), "is not valid before"),
        (lambda: make_ca(ca=False), "is not a CA certificate"),
        (lambda: make_ca(ca=None), "is not a CA certificate"),
        (lambda: make_ca(key_cert_sign=False), "without keyCertSign"),
        (lambda: make_leaf(make_ca(), "proxy.corp"), "is not a CA certificate"),
    ],
    ids=["expired", "not-yet-valid", "leaf-basic-constraints", "no-basic-constraints", "no-cert-sign", "server-cert"],
)
def test_a_certificate_that_cannot_anchor_trust_is_refused(make: Any, expected: str) -> None:
    issued = make()
    problem = _error(make_ca("Good").cert_pem + issued.cert_pem)
    assert expected in problem
    assert issued.cert.subject.rfc4514_string() in problem
    assert "block " in problem


def test_a_truncated_pem_is_refused() -> None:
    pem = make_ca().cert_pem
    lines = pem.splitlines(keepends=True)
    assert "truncated" in _error("".join(lines[:-1]))
    cut = "".join(lines[:3]) + lines[-1]
    assert "not a readable X.509 certificate" in _error(cut)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no PEM block found"),
        ("not a certificate", "no PEM block found"),
        ("-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n", "'X509 CRL', not a certificate"),
        ("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "not a readable X.509 certificate"),
    ],
)
def test_text_that_is_no_certificate_is_refused(text: str, expected: str) -> None:
    assert expected in _error(text)


def test_a_list_of_something_else_is_refused() -> None:
    assert "a list of" in _error([make_ca().cert_pem, 3])


def test_a_bad_bundle_renders_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(_settings(make_ca(ca=False).cert_pem)))
    out = tmp_path / "out"
    assert main(["render", str(config), "-o", str(out)]) == 2
    captured = capsys.readouterr()
    assert "proxy.upstream.trustedCa: block 1 of 1" in captured.err
    assert captured.out == ""
    assert not out.exists()


def test_explain_says_when_the_ca_reaches_no_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "settings.yaml"
    lonely = {**_settings(make_ca().cert_pem), "namespaces": []}
    config.write_text(yaml.safe_dump(lonely))
    assert main(["explain", str(config)]) == 0
    assert "no namespace gets proxy-trust" in capsys.readouterr().out
    config.write_text(yaml.safe_dump({**lonely, "injection": {"kyverno": True}}))
    assert main(["explain", str(config)]) == 0
    assert "no namespace gets proxy-trust" not in capsys.readouterr().out, "Kyverno clones it into every namespace"
