"""The values digest: what it covers, that it is stable, and that credentials are not cheap to guess from it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from proxy_component.render import plain_values
from proxy_component.render.digest import settings_digest, split_digest, values_digest, without_credentials
from proxy_component.settings import parse_settings

BASE = {"cluster": {"name": "c1", "podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}}


def test_same_settings_same_digest_and_each_value_changes_it() -> None:
    first = settings_digest(parse_settings(BASE))
    assert first == settings_digest(parse_settings(BASE))
    env, trust = split_digest(first)
    assert len(env) == 16
    assert set(env) <= set("0123456789abcdef")
    assert trust == "none", "no trusted CA"
    more = {**BASE, "proxy": {"noProxy": ["internal.example"]}}
    assert settings_digest(parse_settings(more)) != first, "a NO_PROXY entry is a new digest"


@pytest.mark.parametrize("field", ["http_proxy", "https_proxy", "no_proxy", "no_proxy_python", "java_options"])
def test_every_rendering_is_covered(field: str) -> None:
    values = plain_values(parse_settings(BASE))
    from dataclasses import replace

    changes: dict[str, Any] = {field: "other"}
    changed = replace(values, **changes)
    assert values_digest(changed, None) != values_digest(values, None)


def test_the_trusted_ca_is_its_own_part() -> None:
    values = plain_values(parse_settings(BASE))
    one = split_digest(values_digest(values, "-----BEGIN CERTIFICATE-----\nA\n"))
    two = split_digest(values_digest(values, "-----BEGIN CERTIFICATE-----\nB\n"))
    assert one[0] == two[0], "a CA rotation leaves the env part as it is"
    assert one[1] != two[1]
    assert one[1] != "none"


def test_the_digest_never_sees_a_credential() -> None:
    """Issue 37 item 4: the stamp is plain text on every pod template, so it is a sha256 of the values with the URLs'
    user info replaced by `<credentials>` (it was an unkeyed scrypt of the values with the password: an oracle). Two
    passwords give one digest; their pods are told apart by proxy-config's change time (live/stale.py)."""
    import hashlib

    values = plain_values(parse_settings(BASE))
    plain = values_digest(values, None)
    content = "\0".join(
        "" if v is None else str(v)
        for v in (values.http_proxy, values.https_proxy, values.no_proxy, values.no_proxy_python,
                  values.java_options, values.java_trust_options)
    ).encode()  # fmt: skip
    assert plain == hashlib.sha256(content).hexdigest()[:16] + "-none"
    one = dataclasses.replace(
        values, http_proxy="http://svc:pw-1@proxy.corp:3128", https_proxy="http://svc:pw-1@proxy.corp:3128"
    )
    two = dataclasses.replace(
        one, http_proxy="http://svc:pw-2@proxy.corp:3128", https_proxy="http://svc:pw-2@proxy.corp:3128"
    )
    other = dataclasses.replace(one, http_proxy="http://svc:pw-1@proxy2.corp:3128")
    assert values_digest(one, None) == values_digest(two, None) != values_digest(other, None)
    assert without_credentials("http://svc:pw-1@proxy.corp:3128") == "http://<credentials>@proxy.corp:3128"
    assert without_credentials("http://proxy.corp:3128") == "http://proxy.corp:3128"


def test_a_value_of_another_form_is_all_env() -> None:
    assert split_digest("reference") == ("reference", "")
