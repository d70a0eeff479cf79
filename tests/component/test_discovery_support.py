"""Shared pieces of the discovery tests (invokes answered, tinyproxy's Allow, seed 003's lists), and their own tests."""

from __future__ import annotations

import ipaddress
import re
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pulumi
import pytest
from pulumi.output import Unknown

from proxy_component import ClusterNetwork, Settings, parse_settings
from proxy_component.discovery import required
from proxy_component.settings import NETWORK_FIELDS, NetworkValues
from tests.conftest import SEEDS, Harness, RecordingMocks, harness

SEED_003 = SEEDS / "003_e15d5dedf3923704.txt"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SERVICE = "kubernetes:core/v1:Service"


Answer = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


def answering(harness: Harness, calls: Mapping[str, Answer]) -> list[str]:
    """Let `calls` answer the harness's invokes: a result per token, or a function of the invoke's arguments.

    Results go back in the form the mock monitor accepts (a failures list, not None).
    Returns the list that will hold each invoke's provider reference.
    """
    answers = dict(calls)
    recorded = RecordingMocks.call
    providers: list[str] = []

    def call(self: RecordingMocks, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        providers.append(args.provider)
        answer = answers.get(args.token)
        if callable(answer):
            self.calls[args.token] = answer(dict(args.args))
        elif answer is not None:
            self.calls[args.token] = answer
        return recorded(self, args)

    harness.mocks.call = types.MethodType(call, harness.mocks)  # type: ignore[method-assign]
    return providers


@contextmanager
def program(preview: bool) -> Iterator[Harness]:
    """A second, independent mocked program in the same test, e.g. the preview of what a test just ran."""
    yield from harness(preview)


def allow(harness: Harness, proxy: str = "egress") -> list[str]:
    """tinyproxy's Allow sources, in order, from the rendered tinyproxy.conf."""
    (config,) = [r for r in harness.of_type(CONFIG_MAP) if r.name == f"{proxy}-tinyproxy-config"]
    conf: str = config.inputs["data"]["tinyproxy.conf"]
    return [line.removeprefix("Allow ") for line in conf.splitlines() if line.startswith("Allow ")]


def service_families(harness: Harness, proxy: str = "egress") -> tuple[str, list[str] | None]:
    spec = harness.one(SERVICE, f"{proxy}-service").inputs["spec"]
    return spec["ipFamilyPolicy"], spec.get("ipFamilies")


def origins(harness: Harness, network: ClusterNetwork, settings: Settings | None = None) -> dict[str, tuple[str, ...]]:
    """Each composed NO_PROXY entry's origins, for the network resolved as ClusterProxy resolves it."""

    def values(resolved: dict[str, Any]) -> NetworkValues:
        lists = {k: [v] if isinstance(v, str) else list(v or []) for k, v in resolved.items()}
        return NetworkValues(origin=network.origin, origins=dict(network.origins), **lists)

    resolved = pulumi.Output.all(**{name: getattr(network, name) for name in NETWORK_FIELDS}).apply(values)
    composed = (settings or parse_settings({})).no_proxy(harness.value(resolved))
    return {entry.value: entry.origins for entry in composed.entries}


def registered_set(harness: Harness) -> list[tuple[str, str]]:
    return sorted((r.typ, r.name) for r in harness.settle())


# --- seed 003 ----------------------------------------------------------------------------------

_SECTIONS = {"AWS EKS": "aws", "GKE": "gcp", "Azure AKS": "azure"}


def seed_no_proxy() -> dict[str, list[str]]:
    """The NO_PROXY values of seed 003's worked examples, by cloud."""
    found: dict[str, list[str]] = {}
    cloud: str | None = None
    lines = SEED_003.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() in _SECTIONS:
            cloud = _SECTIONS[line.strip()]
        elif cloud is not None and line.strip() == "- name: NO_PROXY":
            value = re.fullmatch(r'\s*value: "(?P<v>[^"]+)"', lines[i + 1])
            assert value is not None, f"seed 003 line {i + 2}: {lines[i + 1]!r}"
            found[cloud] = value.group("v").split(",")
            cloud = None
    return found


def uncovered(ours: str, seed: list[str]) -> list[str]:
    """The seed entries our NO_PROXY does not cover: not one of our tokens nor, for a CIDR, inside one of ours."""
    tokens = ours.split(",")
    ours_nets = []
    for token in tokens:
        if "/" in token:
            ours_nets.append(ipaddress.ip_network(token))
    missing = []
    for entry in seed:
        if entry in tokens:
            continue
        if "/" in entry:
            net = ipaddress.ip_network(entry)
            if any(net.version == o.version and net.subnet_of(o) for o in ours_nets):  # type: ignore[arg-type]
                continue
        missing.append(entry)
    return missing


def test_seed_003_gives_one_no_proxy_line_per_cloud() -> None:
    assert seed_no_proxy() == {
        "aws": ["localhost", "127.0.0.1", "169.254.169.254", "cluster.local", "10.0.0.0/8", "172.20.0.0/16"],
        "gcp": [
            "localhost",
            "127.0.0.1",
            "169.254.169.254",
            "metadata.google.internal",
            "cluster.local",
            "10.0.0.0/14",
            "10.4.0.0/19",
        ],
        "azure": ["localhost", "127.0.0.1", "169.254.169.254", "cluster.local", "10.244.0.0/16", "10.0.0.0/16"],
    }


@pytest.mark.parametrize(
    ("ours", "missing"),
    [
        ("localhost,cluster.local,.cluster.local,10.0.0.0/8", []),
        ("localhost,.cluster.local,10.0.0.0/9", ["cluster.local", "10.0.0.0/8"]),
        ("127.0.0.1,cluster.local,10.0.0.0/7", ["localhost"]),
        ("localhost,cluster.local,fd00::/8", ["10.0.0.0/8"]),
    ],
)
def test_covering_means_a_token_or_a_containing_cidr(ours: str, missing: list[str]) -> None:
    assert uncovered(ours, ["localhost", "cluster.local", "10.0.0.0/8"]) == missing


def test_a_missing_attribute_is_unknown_in_a_preview(mocked_preview: Harness) -> None:
    assert isinstance(required(None, "eks:prod.vpcConfig.vpcId"), Unknown)
    assert isinstance(required("", "eks:prod.vpcConfig.vpcId"), Unknown)
    assert required("vpc-0a1b2c3d4e5f67890", "eks:prod.vpcConfig.vpcId") == "vpc-0a1b2c3d4e5f67890"


def test_a_missing_attribute_is_an_error_naming_it_in_an_update(mocked: Harness) -> None:
    message = (
        "eks:prod.vpcConfig.vpcId: not set on the cluster, so discovery cannot read it (give it explicitly instead)"
    )
    with pytest.raises(ValueError, match=r"^eks:prod\.vpcConfig\.vpcId: ") as raised:
        required(None, "eks:prod.vpcConfig.vpcId")
    assert str(raised.value) == message
