"""The root stack program and the example programs, run unchanged under Pulumi mocks."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime.config import set_all_config

from proxy_component import SettingsError
from tests.conftest import ROOT, Harness

PROVIDER = "pulumi:providers:kubernetes"


@pytest.fixture
def in_dir() -> Iterator[None]:
    before = os.getcwd()
    try:
        yield
    finally:
        os.chdir(before)
        set_all_config({})


def _stack_config(path: Path) -> dict[str, str]:
    config = yaml.safe_load(path.read_text())["config"]
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def _exports(harness: Harness) -> dict[str, Any]:
    from pulumi.runtime.settings import get_root_resource

    stack: Any = get_root_resource()
    return {k: harness.value(pulumi.Output.from_input(v)) for k, v in stack.outputs.items()}


def test_dev_stack_renders_the_example_cluster_to_a_directory(mocked: Harness, in_dir: None) -> None:
    set_all_config(_stack_config(ROOT / "Pulumi.dev.yaml"))
    os.chdir(ROOT)
    runpy.run_path(str(ROOT / "__main__.py"))
    registered = mocked.settle()
    (provider,) = [r for r in registered if r.typ == PROVIDER]
    assert provider.inputs["renderYamlToDirectory"] == "rendered/dev"
    children = [r for r in registered if r.typ.startswith("kubernetes:")]
    assert len(children) == 4
    assert all(r.provider is not None and "::cluster::" in r.provider for r in children)
    cli = subprocess.run(
        [sys.executable, "-m", "proxy_component.cli", "no-proxy", "examples/ipv6-only/proxy.yaml"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    exports = _exports(mocked)
    assert exports["noProxy"] == cli.stdout.strip()
    assert exports["proxyUrl"] == "http://http-proxy.kube-system.svc.k8s.internal:8888"


def test_an_unknown_stack_config_key_is_an_error(mocked: Harness, in_dir: None) -> None:
    set_all_config({"proxy-component:clustr": "{}", "proxy-component:cluster": '{"podCidrs": ["10.0.0.0/16"]}'})
    from proxy_component.stack import settings_from_config

    with pytest.raises(SettingsError, match=r"proxy-component:clustr: unknown stack config key \(accepted: "):
        settings_from_config()


def test_stack_config_errors_name_the_field(mocked: Harness, in_dir: None) -> None:
    set_all_config({"proxy-component:cluster": '{"podCidrs": ["10.0.0.0/99"]}'})
    from proxy_component.stack import settings_from_config

    with pytest.raises(SettingsError, match=r"cluster\.podCidrs\[0\]: '10\.0\.0\.0/99' is not a CIDR"):
        settings_from_config()


def test_ipv6_only_example_program(mocked: Harness, in_dir: None) -> None:
    runpy.run_path(str(ROOT / "examples/ipv6-only/__main__.py"))
    names = sorted(r.name for r in mocked.settle())
    assert names == [
        "ipv6-only",
        "ipv6-only-proxy-config-default",
        "ipv6-only-service",
        "ipv6-only-tinyproxy",
        "ipv6-only-tinyproxy-config",
    ]


def test_existing_program_example_uses_its_own_provider(mocked: Harness, in_dir: None) -> None:
    pulumi.runtime.set_mocks(mocked.mocks, project="existing-program", stack="prod", preview=False)
    set_all_config({"existing-program:kubeconfig": "apiVersion: v1\nkind: Config\n"}, ["existing-program:kubeconfig"])
    runpy.run_path(str(ROOT / "examples/existing-program/__main__.py"))
    registered = mocked.settle()
    kube = [r for r in registered if r.typ.startswith("kubernetes:")]
    assert {r.typ for r in kube} >= {"kubernetes:apps/v1:DaemonSet", "kubernetes:apps/v1:Deployment"}
    assert all(r.provider is not None and "::cluster::" in r.provider for r in kube)
    conf = next(r for r in kube if r.name == "egress-tinyproxy-config").inputs["data"]["tinyproxy.conf"]
    assert "Upstream http proxy.corp.example:3128\n" in conf
    assert "svc:" not in conf
    assert "@" not in conf


def test_embedded_default_is_the_ipv6_only_example() -> None:
    embedded = (ROOT / "proxy_component/data/example.yaml").read_text()
    assert embedded == (ROOT / "examples/ipv6-only/proxy.yaml").read_text()
