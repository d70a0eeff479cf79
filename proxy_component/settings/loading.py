"""Reading settings: `parse_settings` validates a mapping in one round (every field error, then every check across
fields whose fields are valid, on the settings without the invalid ones) and `load_settings` reads a YAML file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from .errors import SettingsError, _format
from .model import _DEFERRED, CHECKS, Check, Settings


def parse_settings(data: Mapping[str, Any] | Settings | None, checks: Sequence[Check] = ()) -> Settings:
    """Validate a mapping (camelCase or snake_case keys) into Settings, or raise SettingsError with every problem.

    One round: every field error, then every check across fields (`CHECKS`, then the caller's `checks`, e.g. the
    plan's) whose fields are valid, run on the settings without the invalid ones.
    """
    if isinstance(data, Settings):  # its own checks ran when it was made
        _raise([problem for check in checks for problem in check.problems(data)])
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SettingsError(
            [f"settings: {type(data).__name__} given (expected a mapping of proxy, cluster, deployment, namespaces)"]
        )
    raw = _plain(data)
    problems: list[str] = []
    invalid: set[str] = set()
    try:
        settings = Settings.model_validate(raw, context={_DEFERRED: True})
    except ValidationError as exc:
        problems = _format(exc, Settings)
        settings, invalid = _valid_part(raw, exc)
    for check in (*CHECKS, *checks):
        if not _reads_invalid(check.reads, invalid):
            problems.extend(check.problems(settings))
    _raise(problems)
    return settings


def _raise(problems: list[str]) -> None:
    if problems:
        raise SettingsError(problems)


_PRUNED = object()


def _plain(value: Any) -> Any:
    """A copy of the input, mappings as dicts and sequences as lists, for `_valid_part` to cut invalid fields from."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _valid_part(data: dict[str, Any], exc: ValidationError) -> tuple[Settings, set[str]]:
    """The settings of `data` without its invalid fields (each at its default), and the fields left out, as the
    snake_case paths checks read. A field whose removal makes its object invalid (a required one) takes the object."""
    invalid: set[str] = set()
    errors = exc.errors(include_url=False)
    for _ in range(100):  # each round cuts at least one field; the settings have far fewer levels
        cut = False
        for error in errors:
            loc = tuple(error["loc"])
            where = _cut(data, loc)
            cut = cut or where is not None
            invalid.update({_check_path(loc), _check_path(where or ())})
        data = _without_pruned(data) if cut else {}
        if not cut:
            invalid.add("")
        try:
            return Settings.model_validate(data, context={_DEFERRED: True}), invalid
        except ValidationError as again:
            errors = again.errors(include_url=False)
    return Settings.model_validate({}, context={_DEFERRED: True}), {""}


def _cut(data: dict[str, Any], loc: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """Mark the deepest part of `loc` that `data` holds as cut (a missing key cuts its object); where, or None."""
    node: Any = data
    for depth, part in enumerate(loc):
        holds = (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        )
        if not holds:
            loc = loc[:depth]
            break
        if depth < len(loc) - 1:
            node = node[part]
    if not loc:
        return None
    parent: Any = data
    for part in loc[:-1]:
        parent = parent[part]
    if parent[loc[-1]] is _PRUNED:
        return None
    parent[loc[-1]] = _PRUNED
    return loc


def _without_pruned(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_pruned(item) for key, item in value.items() if item is not _PRUNED}
    if isinstance(value, list):
        return [_without_pruned(item) for item in value if item is not _PRUNED]
    return value


def _check_path(loc: tuple[int | str, ...]) -> str:
    """An error's location as checks name fields: snake_case names from the root, no list indices."""
    return ".".join(to_snake(part) for part in loc if isinstance(part, str) and part != "[key]")


def _reads_invalid(reads: Sequence[str], invalid: set[str]) -> bool:
    """A check reads an invalid field: that field, a part of it, or the object holding it (`""`: everything)."""
    return any(
        not bad or read == bad or read.startswith(f"{bad}.") or bad.startswith(f"{read}.")
        for read in reads
        for bad in invalid
    )


def load_settings(path: str, checks: Sequence[Check] = ()) -> Settings:
    """Read a YAML settings file; errors name the file. `checks`: as `parse_settings` takes them."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise SettingsError([f"{path}: cannot read ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise SettingsError([f"{path}: not UTF-8 text (expected a YAML file)"]) from None
    except yaml.YAMLError as exc:
        raise SettingsError([f"{path}: not valid YAML ({exc})"]) from None
    return parse_settings(data, checks)
