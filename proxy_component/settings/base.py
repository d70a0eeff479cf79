"""The base of every settings model: camelCase keys, snake_case accepted too, unknown keys refused, frozen, and the
input kept out of pydantic's own errors (`errors` shows it, redacted)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )
