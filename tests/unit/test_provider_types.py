"""The multi-language component's inputs are the pydantic model's, not a second hand-kept copy.

`provider_types.py` is what `_codegen` writes now, and the checked-in schema (which
tests/engine/test_languages.py compares with `pulumi package get-schema`) has exactly the model's keys, with
the model's types and required keys.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr
from pydantic.alias_generators import to_camel

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
    assert inputs["installation"]["$ref"] == f"#/types/{TOKEN}Settings"
    assert inputs["installationStack"]["type"] == "string"
    network = {"podCidrs", "serviceCidrs", "nodeCidrs", "apiServerHosts", "apiServerIps", "ipFamily"}
    assert set(inputs) == {"settings", "installation", "installationStack", *network}


def _python_method(name: str) -> Any:
    """The Python ClusterProxy method a schema method mirrors (helmValuesFor -> helm_values_for)."""
    from proxy_component.component import ClusterProxy

    return getattr(ClusterProxy, re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name))


def test_each_method_takes_the_python_methods_arguments() -> None:
    """helmValuesFor, kustomization and containerEnv take what helm_values_for, kustomization and container_env take,
    the same ones required, as plain values (they decide which names and objects the result holds)."""
    from proxy_component.provider import METHODS

    resource = SCHEMA["resources"][f"{TOKEN}ClusterProxy"]
    assert resource["methods"] == {m.name: f"{TOKEN}ClusterProxy/{m.name}" for m in METHODS}
    assert {m.name for m in METHODS} == {"helmValuesFor", "kustomization", "containerEnv"}
    for method in METHODS:
        spec = SCHEMA["functions"][f"{TOKEN}ClusterProxy/{method.name}"]
        parameters = list(inspect.signature(_python_method(method.name)).parameters.values())[1:]
        args = {to_camel(p.name): p for p in parameters}
        inputs = spec["inputs"]["properties"]
        assert inputs.pop("__self__") == {"$ref": f"#/resources/{TOKEN}ClusterProxy"}
        assert set(inputs) == set(args), method.name
        assert set(spec["inputs"]["required"]) == {"__self__"} | {
            key for key, p in args.items() if p.default is inspect.Parameter.empty
        }
        assert all(prop == {"type": "string", "plain": True, "description": prop["description"]}
                   for prop in inputs.values()), method.name  # fmt: skip
        assert spec["outputs"]["required"] == sorted(spec["outputs"]["properties"])


def test_container_env_returns_what_a_pod_spec_takes() -> None:
    outputs = SCHEMA["functions"][f"{TOKEN}ClusterProxy/containerEnv"]["outputs"]["properties"]
    assert {key: prop["items"]["$ref"] for key, prop in outputs.items()} == {
        "env": f"#/types/{TOKEN}ContainerEnvVar",
        "volumeMounts": f"#/types/{TOKEN}VolumeMount",
        "volumes": f"#/types/{TOKEN}Volume",
    }
    types = SCHEMA["types"]
    assert set(types[f"{TOKEN}ContainerEnvVar"]["properties"]) == {"name", "value", "valueFrom"}
    assert types[f"{TOKEN}ContainerEnvVar"]["required"] == ["name"]
    assert set(types[f"{TOKEN}Volume"]["properties"]) == {"name", "configMap"}
    assert set(types[f"{TOKEN}VolumeMount"]["properties"]) == {"name", "mountPath", "readOnly"}


def test_the_component_has_the_runtime_and_trust_outputs_the_python_component_has() -> None:
    outputs = SCHEMA["resources"][f"{TOKEN}ClusterProxy"]["properties"]
    assert {"noProxyPython", "jdkJavaOptions", "runtimeEnv", "trust"} <= set(outputs)
    assert outputs["trust"]["$ref"] == f"#/types/{TOKEN}TrustGroup"
    assert "trust" not in SCHEMA["resources"][f"{TOKEN}ClusterProxy"]["required"]
    assert set(SCHEMA["types"][f"{TOKEN}RuntimeEnv"]["properties"]) == {"java", "node", "python"}
    assert set(SCHEMA["types"][f"{TOKEN}TrustGroup"]["properties"]) == {"env", "volume", "volumeMount",
                                                                        "jdkJavaOptions"}  # fmt: skip


def test_every_method_returns_one_value_to_languages_that_lift_it() -> None:
    """helmValuesFor gives the values themselves (not {values: ...}) in TypeScript, Go, Python and .NET."""
    for language in ("nodejs", "go", "python", "csharp"):
        assert SCHEMA["language"][language]["liftSingleValueMethodReturns"] is True
