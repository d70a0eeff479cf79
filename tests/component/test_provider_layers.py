"""Settings that another language sends as Outputs, and the installation layer, through the provider's `construct`
under mocks: an Output (whole, or nested at any depth) whose value is known is used as that value, the objects equal
those made from the plain settings; an unknown one is an error naming its field; `installation` and
`installationStack` merge by the fleet's rules (`layers`), conflicts named with both sources.

The values are deserialized from the wire as the engine sends them (`rpc.deserialize_properties` of output values),
so the Outputs are the provider's own. The same shapes run under the real engine from TypeScript, Go and YAML in
tests/engine/test_languages.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from google.protobuf import struct_pb2  # type: ignore[import-untyped]
from pulumi.errors import InputPropertiesError
from pulumi.provider.server import ProviderServicer
from pulumi.runtime import rpc

from proxy_component import provider
from proxy_component.component import TYPE_TOKEN
from tests.conftest import Harness, unwrap

PASSWORD = "Layer-Pa55-6021"
SETTINGS: dict[str, Any] = {
    "cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/16"], "nodeCidrs": ["10.0.0.0/16"],
                "dnsDomain": "k8s.internal"},
    "proxy": {
        "upstream": {"url": "http://proxy.corp.example:3128", "username": "svc", "password": PASSWORD,
                     "noUpstream": [".corp.example"]},
        "noProxy": [".corp.example"],
    },
    "namespaces": ["default", "apps"],
    "deployment": {"resources": {"limits": {"memory": "1Gi"}}},
}  # fmt: skip
INSTALLATION: dict[str, Any] = {
    "proxy": {
        "upstream": {"url": "http://proxy.corp.example:3128", "username": "svc", "password": PASSWORD},
        "noProxy": [".corp.example"],
    },
    "namespaces": ["default"],
}
CLUSTER: dict[str, Any] = {
    "cluster": SETTINGS["cluster"],
    "proxy": {"upstream": {"noUpstream": [".corp.example"]}},
    "namespaces": ["apps"],
    "deployment": SETTINGS["deployment"],
}


@pytest.fixture
def served() -> provider._Provider:
    return provider._Provider([provider.ClusterProxy], provider.PACKAGE, version="0.0.0")


def _wire(value: Any, unknown: bool = False, secret: bool = False) -> dict[str, Any]:
    """One output value as the engine sends it (`keepOutputValues`)."""
    out: dict[str, Any] = {rpc._special_sig_key: rpc._special_output_value_sig}
    if not unknown:
        out["value"] = value
    if secret:
        out["secret"] = True
    return out


def _inputs(mocked: Harness, sent: dict[str, Any]) -> dict[str, Any]:
    """The construct inputs as the provider's server makes them from the wire's Struct."""
    struct = struct_pb2.Struct()
    struct.update(copy.deepcopy(sent))
    return mocked.run(ProviderServicer._construct_inputs(struct, {}))


def _objects(mocked: Harness, served: provider._Provider, name: str, sent: dict[str, Any]) -> dict[str, Any]:
    """Construct from the wire's properties; every child object's inputs by its name, as the mocks saw them."""
    inputs = _inputs(mocked, sent)
    before = len(mocked.mocks.registered)
    mocked.program(lambda: served.construct(name, TYPE_TOKEN, inputs))
    made = mocked.settle()[before:]
    return {f"{r.typ}::{r.name.removeprefix(name)}": r.inputs for r in made if r.typ != TYPE_TOKEN}


def _problems(error: InputPropertiesError) -> list[str]:
    """The error's problem lines, under its first line `invalid settings:`."""
    first, *lines = str(error).splitlines()
    assert first == "invalid settings:"
    return [line.removeprefix("  ") for line in lines]


SHAPES = {
    "whole": lambda: {"settings": _wire(SETTINGS, secret=True)},
    "one object": lambda: {"settings": {**SETTINGS, "cluster": _wire(SETTINGS["cluster"])}},
    "deep": lambda: {
        "settings": {
            **SETTINGS,
            "proxy": {
                **SETTINGS["proxy"],
                "upstream": {**SETTINGS["proxy"]["upstream"], "password": _wire(PASSWORD, secret=True)},
            },
            "deployment": {"resources": {"limits": _wire({"memory": "1Gi"})}},
        }
    },
    "a list": lambda: {"settings": {**SETTINGS, "namespaces": _wire(["default", "apps"])}},
    "a list item": lambda: {"settings": {**SETTINGS, "namespaces": ["default", _wire("apps", secret=True)]}},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_settings_known_as_outputs_make_the_objects_of_the_plain_settings(
    mocked: Harness, served: provider._Provider, shape: str
) -> None:
    plain = _objects(mocked, served, "plain", {"settings": SETTINGS})
    assert any("ConfigMap" in key and "apps" in json.dumps(obj) for key, obj in plain.items())
    got = _objects(mocked, served, f"{shape.replace(' ', '-')}", SHAPES[shape]())
    assert got == plain
    text = json.dumps(got)
    assert "1Gi" in text
    assert "k8s.internal" in text


@pytest.mark.parametrize(
    ("sent", "field"),
    [
        ({"settings": _wire(None, unknown=True)}, "settings"),
        ({"settings": {**SETTINGS, "cluster": _wire(None, unknown=True)}}, "settings.cluster"),
        ({"settings": {**SETTINGS, "namespaces": ["default", _wire(None, unknown=True)]}}, "settings.namespaces[1]"),
        ({"settings": CLUSTER, "installation": _wire(None, unknown=True)}, "installation"),
        ({"settings": CLUSTER, "installationStack": _wire(None, unknown=True)}, "installationStack"),
    ],
)
def test_an_unknown_output_is_one_line_naming_its_field(
    mocked_preview: Harness, served: provider._Provider, sent: dict[str, Any], field: str
) -> None:
    inputs = _inputs(mocked_preview, sent)
    with pytest.raises(InputPropertiesError) as caught:
        mocked_preview.program(lambda: served.construct("egress", TYPE_TOKEN, inputs))
    message = str(caught.value)
    assert _problems(caught.value)[0].startswith(f"{field}: is not known when the component is created"), message
    assert len(_problems(caught.value)) == 1
    assert "StackReference" in message
    assert PASSWORD not in message
    assert "Traceback" not in message


def test_the_installation_input_merges_as_the_stack_program_does(mocked: Harness, served: provider._Provider) -> None:
    plain = _objects(mocked, served, "plain", {"settings": SETTINGS})
    got = _objects(mocked, served, "layered", {"settings": CLUSTER, "installation": _wire(INSTALLATION, secret=True)})
    assert got == plain


def test_the_installation_stack_input_reads_its_output(mocked: Harness, served: provider._Provider) -> None:
    mocked.mocks.calls["pulumi:pulumi:readStackOutputs"] = {"outputs": {"installation": INSTALLATION}}
    plain = _objects(mocked, served, "plain", {"settings": SETTINGS})
    got = _objects(mocked, served, "stacked", {"settings": CLUSTER, "installationStack": "fleet"})
    assert got == plain
    token, args = mocked.mocks.invoked[-1]
    assert (token, args) == ("pulumi:pulumi:readStackOutputs", {"name": "organization/proxy-component/fleet"})
    mocked.mocks.calls["pulumi:pulumi:readStackOutputs"] = {"outputs": {"other": 1}}
    with pytest.raises(InputPropertiesError, match="\n  installationStack: stack 'fleet' has no output 'installation'"):
        _objects(mocked, served, "missing", {"settings": CLUSTER, "installationStack": "fleet"})


def test_a_value_both_layers_set_is_named_with_both_sources(mocked: Harness, served: provider._Provider) -> None:
    cluster = copy.deepcopy(CLUSTER)
    cluster["proxy"]["upstream"]["url"] = "http://other.corp.example:3128"
    installation = {**INSTALLATION, "cluster": {"name": "fleet"}}
    with pytest.raises(InputPropertiesError) as caught:
        _objects(mocked, served, "both", {"settings": cluster, "installation": _wire(installation, secret=True)})
    assert _problems(caught.value) == [
        "cluster: belongs to each cluster stack (its ranges, domain and name), not to the installation "
        "(installation): move it to the cluster stacks' config",
        "proxy.upstream.url: set by the installation (installation) and by this cluster (ClusterProxy settings); "
        "it belongs to one layer: remove it from one of them",
    ]
    with pytest.raises(InputPropertiesError, match="\n  installation and installationStack: both set"):
        _objects(mocked, served, "twice", {"settings": CLUSTER, "installation": INSTALLATION,
                                           "installationStack": "fleet"})  # fmt: skip


def test_a_typo_in_the_installation_is_refused_not_dropped(mocked: Harness, served: provider._Provider) -> None:
    installation = {**INSTALLATION, "proxy": {**INSTALLATION["proxy"], "noProxi": ["x.example"]}}
    with pytest.raises(InputPropertiesError, match=r"proxy\.noProxi"):
        _objects(mocked, served, "typo", {"settings": CLUSTER, "installation": installation})


def test_secret_inputs_stay_out_of_every_plain_object(mocked: Harness, served: provider._Provider) -> None:
    got = _objects(mocked, served, "secret", {"settings": CLUSTER, "installation": _wire(INSTALLATION, secret=True)})
    for key, obj in got.items():
        if PASSWORD in json.dumps(unwrap(obj)):
            assert key.startswith("kubernetes:core/v1:Secret::"), key


def test_the_python_component_takes_the_same_installation_inputs(mocked: Harness) -> None:
    from proxy_component.component import ClusterProxy, ClusterProxyArgs

    def made(name: str, args: ClusterProxyArgs) -> dict[str, Any]:
        before = len(mocked.mocks.registered)
        mocked.program(lambda: ClusterProxy(name, args))
        return {
            f"{r.typ}::{r.name.removeprefix(name)}": r.inputs for r in mocked.settle()[before:] if r.typ != TYPE_TOKEN
        }

    plain = made("plain", ClusterProxyArgs(settings=SETTINGS))
    assert made("inline", ClusterProxyArgs(settings=CLUSTER, installation=INSTALLATION)) == plain
    mocked.mocks.calls["pulumi:pulumi:readStackOutputs"] = {"outputs": {"installation": INSTALLATION}}
    assert made("stacked", ClusterProxyArgs(settings=CLUSTER, installation_stack="org/fleet/installation")) == plain
    assert mocked.mocks.invoked[-1] == ("pulumi:pulumi:readStackOutputs", {"name": "org/fleet/installation"})
