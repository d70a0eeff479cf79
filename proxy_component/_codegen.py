"""Write `provider_types.py`, the settings as TypedDicts of `pulumi.Input`, from the pydantic model.

The multi-language component's schema is inferred from Python annotations; the
pydantic model stays the one validator and the one description of the keys.
This module turns it into source (so that the schema analyzer finds each key's
docstring), and `tests/unit/test_provider_types.py` checks that the checked-in
file is what it writes now:

    python -m proxy_component._codegen > proxy_component/provider_types.py
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator

from pydantic import BaseModel, SecretStr
from pydantic.alias_generators import to_camel

from .settings import Settings

__all__ = ["generate", "type_name"]

LINE_LENGTH = 120  # ruff's, in pyproject.toml: the generated file is formatted as ruff would format it

HEADER = '''"""The settings as TypedDicts of `pulumi.Input`, for ClusterProxy in every Pulumi language.

Generated from the pydantic model in `settings.py` by `python -m proxy_component._codegen`; do not edit.
Each key is the YAML file's camelCase key in the schema (its snake_case name here).
"""

# No `from __future__ import annotations`: the schema analyzer reads these annotations as objects.
from collections.abc import Mapping, Sequence
from typing import TypedDict

import pulumi
from typing_extensions import NotRequired

__all__ = [
{names}]
'''


def type_name(model: type[BaseModel]) -> str:
    """The schema type of a settings model: its name (`ClusterSettings`). The SDKs name the input forms themselves:
    `ClusterSettingsArgs` in TypeScript and Go, next to Go's plain `ClusterSettings`."""
    return model.__name__


def _strip(annotation: typing.Any) -> tuple[typing.Any, bool]:
    """The annotation without Annotated and None, and whether None was allowed."""
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(annotation))
            if len(args) != 1:
                raise TypeError(f"{annotation!r}: unions other than X | None have no schema type")
            annotation = args[0]
        else:
            return annotation, optional


def _python(annotation: typing.Any, models: list[type[BaseModel]]) -> tuple[str, str]:
    """(the Input-typed Python annotation, a note on accepted values) for one field type."""
    annotation, _ = _strip(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        values = typing.get_args(annotation)
        base = "int" if all(isinstance(v, int) for v in values) else "str"
        return f"pulumi.Input[{base}]", "One of: " + ", ".join(str(v) for v in values) + "."
    if origin is list:
        inner, note = _python(typing.get_args(annotation)[0], models)
        return f"pulumi.Input[Sequence[{inner}]]", note
    if origin is dict:
        inner, note = _python(typing.get_args(annotation)[1], models)
        return f"pulumi.Input[Mapping[str, {inner}]]", note
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in models:
            models.append(annotation)
        return f"pulumi.Input[{type_name(annotation)}]", ""
    if annotation is SecretStr:
        return "pulumi.Input[str]", "Kept in Secrets only."
    if annotation in (str, int, bool):
        return f"pulumi.Input[{annotation.__name__}]", ""
    raise TypeError(f"{annotation!r} has no schema type")


def _class(model: type[BaseModel], models: list[type[BaseModel]]) -> Iterator[str]:
    doc = (model.__doc__ or model.__name__).strip().splitlines()[0]
    yield f"class {type_name(model)}(TypedDict):"
    yield f'    """{doc}"""'
    yield ""
    for name, field in model.model_fields.items():
        if (field.alias or name) != to_camel(name):
            raise TypeError(f"{model.__name__}.{name}: alias {field.alias!r} is not camelCase of the name")
        annotation, note = _python(field.annotation, models)
        line = f"    {name}: NotRequired[{annotation}]" if not field.is_required() else f"    {name}: {annotation}"
        if len(line) > LINE_LENGTH and not field.is_required():  # as ruff format wraps it
            line = f"    {name}: NotRequired[\n        {annotation}\n    ]"
        yield line
        text = " ".join(part for part in ((field.description or "").strip(), note) if part)
        if text:
            yield f'    """{text.replace(chr(92), chr(92) * 2).replace(chr(34) * 3, "")}"""'
        yield ""


def generate() -> str:
    """The source of `provider_types.py`: one TypedDict per settings model, nested ones first."""
    models: list[type[BaseModel]] = [Settings]
    bodies: dict[type[BaseModel], list[str]] = {}
    i = 0
    while i < len(models):  # breadth-first: `_class` appends the nested models it meets
        bodies[models[i]] = list(_class(models[i], models))
        i += 1
    order = list(reversed(models))  # a type is defined before the types that refer to it
    names = "".join(f'    "{type_name(m)}",\n' for m in sorted(models, key=type_name))
    parts = [HEADER.format(names=names)]
    for model in order:
        parts.append("\n" + "\n".join(bodies[model]).rstrip() + "\n")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(generate())
