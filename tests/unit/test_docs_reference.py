"""The reference pages under docs/reference/ are what the code generates (`python -m proxy_component._docs`): the
settings from the pydantic model, ClusterProxy's inputs, outputs and methods from the provider's schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from proxy_component import _docs
from proxy_component.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["settings.md", "outputs.md"])
def test_the_reference_is_what_the_code_generates(name: str) -> None:
    committed = (ROOT / "docs" / "reference" / name).read_text()
    assert committed == _docs.generate()[name], (
        f"docs/reference/{name} is not what the code generates: run `python -m proxy_component._docs`"
    )


def test_a_field_added_to_the_model_changes_the_settings_reference() -> None:
    """What makes the check above fail when a field is added without regenerating."""

    class Extended(Settings):
        """Everything, and one more."""

        extra_knob: bool = Field(default=False, description="A knob the model did not have.")

    page = _docs.settings_reference(Extended)
    assert page != _docs.settings_reference(Settings)
    assert "| `extraKnob` | `extra_knob` | boolean | `false` | A knob the model did not have. |" in page


def test_the_outputs_reference_reads_the_same_from_the_checked_in_schema() -> None:
    """The schema built here is the one the engine serves: its snapshot (provider/schema.json, which the engine lane
    compares with `pulumi package get-schema`) gives the same page."""
    snapshot = json.loads((ROOT / "provider" / "schema.json").read_text())
    assert _docs.outputs_reference(snapshot) == _docs.outputs_reference(_docs.provider_schema())


def test_the_settings_reference_names_every_key_of_every_model() -> None:
    page = _docs.settings_reference()
    models: list[type[BaseModel]] = [Settings]
    seen: set[type[BaseModel]] = set()
    while models:
        model = models.pop()
        if model in seen:
            continue
        seen.add(model)
        assert f"\n## {model.__name__}\n" in page
        for name, field in model.model_fields.items():
            assert f"| `{field.alias}` | `{name}` |" in page, (model.__name__, name)
            models += _nested(field.annotation)
    assert len(seen) > 10


def _nested(annotation: object) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    _docs._type(annotation, [], found)
    return found
