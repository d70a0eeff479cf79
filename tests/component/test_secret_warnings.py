"""A credential mistyped where a program reads it: the preview warns naming the field, and no error or warning of
the component, the cluster stack, the installation stack or the provider carries the value."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from importlib.resources import files
from typing import Any

import pytest
import yaml
from pulumi.runtime.config import set_all_config

from proxy_component import ClusterProxy, ClusterProxyArgs, SettingsError
from proxy_component.provider import settings_from_inputs
from tests.conftest import ROOT, Harness

PASSWORD = "S3cr3tPassw0rd"
EXAMPLE: dict[str, Any] = yaml.safe_load(files("proxy_component").joinpath("data/example.yaml").read_text())
SEMICOLON = f"http://svc-proxy;{PASSWORD}@proxy.corp.example"
"""';' for ':' (the password is then part of the user name), and no port."""
EXPECTED = [
    "proxy.upstream.url: its user name holds ';' or ',' (a ':' mistyped?), comes with no password and looks random, "
    "like a password: if it holds the password, write user:password@ (value hidden)",
    "proxy.upstream.url: gives no port, so tinyproxy reaches the upstream on port 80 (expected host:port, e.g. "
    "http://proxy.corp.example:3128; write :80 when port 80 is meant)",
]


@pytest.fixture
def in_dir() -> Iterator[None]:
    before = os.getcwd()
    try:
        yield
    finally:
        os.chdir(before)
        set_all_config({})


def _warnings(mocked: Harness, caplog: pytest.LogCaptureFixture) -> list[str]:
    logs = mocked.logs(caplog)
    assert not any(PASSWORD in message for _, message in logs)
    return [message for level, message in logs if level == "WARNING"]


def test_the_preview_warns_of_a_user_name_that_may_hold_the_password(
    mocked: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    settings = {**EXAMPLE, "proxy": {**EXAMPLE["proxy"], "upstream": {"url": SEMICOLON}}}
    ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    warnings = _warnings(mocked, caplog)
    assert [w for w in warnings if w.startswith("proxy.upstream.url: ")] == EXPECTED


def test_a_well_typed_upstream_gets_no_such_warning(mocked: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    url = f"http://svc-proxy:{PASSWORD}@proxy.corp.example:3128"
    settings = {**EXAMPLE, "proxy": {**EXAMPLE["proxy"], "upstream": {"url": url}}}
    ClusterProxy("egress", ClusterProxyArgs(settings=settings))
    assert not any(w.startswith("proxy.upstream") for w in _warnings(mocked, caplog))


def test_the_installation_stack_warns_too(mocked: Harness, caplog: pytest.LogCaptureFixture, in_dir: None) -> None:
    """The installation stack, which holds the upstream and makes no object of its own, says it in its preview."""
    from proxy_component.stack import main

    caplog.set_level("INFO")
    set_all_config(
        {
            "proxy-component:layer": "installation",
            "proxy-component:proxy": json.dumps({"upstream": {"url": SEMICOLON}}),
        }
    )
    os.chdir(ROOT)
    assert main() is None
    assert _warnings(mocked, caplog) == EXPECTED


def test_stack_config_that_is_not_json_is_named_not_shown(mocked: Harness, in_dir: None) -> None:
    """`pulumi config set proxy-component:proxy URL` without --path: the SDK's own error would print the value."""
    from proxy_component.stack import settings_from_config

    set_all_config({"proxy-component:proxy": f"http//svc-proxy:{PASSWORD}@proxy.corp.example:3128"})
    with pytest.raises(SettingsError) as caught:
        settings_from_config()
    assert caught.value.problems == [
        "proxy-component:proxy: is not JSON (value hidden: it may hold a credential; expected settings set with "
        "--path, e.g. pulumi config set --secret --path 'proxy-component:proxy.upstream.url' "
        "http://user:password@proxy.corp:3128)"
    ]


def test_the_provider_names_settings_that_are_no_object_by_type() -> None:
    with pytest.raises(SettingsError) as caught:
        settings_from_inputs(f"http://svc-proxy:{PASSWORD}@proxy.corp.example:3128")
    assert caught.value.problems == [
        "settings: a str is not an object (value hidden; expected e.g. {namespaces: [default]})"
    ]
