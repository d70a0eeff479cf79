"""The multi-language component's inputs are the pydantic model's, not a second hand-kept copy.

`provider_types.py` is what `_codegen` writes now, and the checked-in schema (which
tests/engine/test_languages.py compares with `pulumi package get-schema`) has exactly the model's keys, with
the model's types and required keys.
"""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from proxy_component._codegen import _strip, generate, type_name
from proxy_component.settings import Settings
from tests.conftest import ROOT

SCHEMA = json.loads((ROOT / "provider/schema.json").read_text())
TOKEN = "proxy-component:index:"


def _models() -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in found:
            return
        found.append(model)
        for field in model.model_fields.values():
            for inner in _leaves(field.annotation):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    visit(inner)

    visit(Settings)
    return found


def _leaves(annotation: Any) -> list[Any]:
    annotation, _ = _strip(annotation)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (list, dict):
        return _leaves(args[-1])
    return [annotation]


def _schema_type(annotation: Any) -> dict[str, Any]:
    """What the schema must say for a model field's type."""
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {"type": "integer" if all(isinstance(v, int) for v in typing.get_args(annotation)) else "string"}
    if origin is list:
        return {"type": "array", "items": _schema_type(typing.get_args(annotation)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_type(typing.get_args(annotation)[1])}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {"$ref": f"#/types/{TOKEN}{type_name(annotation)}"}
    if annotation in (str, SecretStr):
        return {"type": "string"}
    return {"type": {int: "integer", bool: "boolean"}[annotation]}


def test_provider_types_is_what_the_generator_writes_now() -> None:
    assert (ROOT / "proxy_component/provider_types.py").read_text() == generate(), (
        "run: python -m proxy_component._codegen > proxy_component/provider_types.py"
    )


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_the_schema_has_the_models_keys_types_and_required_keys(model: type[BaseModel]) -> None:
    spec = SCHEMA["types"][f"{TOKEN}{type_name(model)}"]
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    assert set(spec["properties"]) == set(fields)
    for key, field in fields.items():
        prop = {
            k: v for k, v in spec["properties"][key].items() if k in ("type", "items", "additionalProperties", "$ref")
        }
        assert prop == _schema_type(field.annotation), key
    assert set(spec.get("required", [])) == {key for key, field in fields.items() if field.is_required()}


def test_the_component_takes_the_settings_type_and_the_network_inputs() -> None:
    inputs = SCHEMA["resources"][f"{TOKEN}ClusterProxy"]["inputProperties"]
    assert inputs["settings"]["$ref"] == f"#/types/{TOKEN}Settings"
    network = {"podCidrs", "serviceCidrs", "nodeCidrs", "apiServerHosts", "apiServerIps", "ipFamily"}
    assert set(inputs) == {"settings", *network}
