"""SettingsError, and how pydantic's errors become its lines: each names the field path, the value (never a
credential) and what is accepted."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from ..redaction import mask_url


class SettingsError(ValueError):
    """Invalid settings: one line per problem, each naming the field path, the value and what is accepted."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in self.problems))


_CREDENTIAL_FIELDS = ("url", "httpproxy", "httpsproxy", "nodehttpproxy", "nodehttpsproxy", "username")
"""The fields whose value may hold a credential (proxy URLs, a user name that may hold the password by mistake);
`password` is never shown at all."""


def _shown(path: str, value: Any) -> str:
    """How an invalid input appears in an error: never a password, a credentialed URL or a whole mapping."""
    last = re.sub(r"\[\d+\]$", "", path).rpartition(".")[2].replace("_", "").lower()
    if "password" in path.lower():
        return "(hidden)"
    if isinstance(value, (Mapping, list, tuple)):
        return f"(a {type(value).__name__})"
    if last in _CREDENTIAL_FIELDS:
        if isinstance(value, str) and last != "username":
            return repr(mask_url(value))
        return f"(a {type(value).__name__}, hidden)"
    if isinstance(value, str) and (path == "proxy" or path.startswith("proxy.") or "@" in value or "://" in value):
        return repr(mask_url(value))  # under `proxy`, any text may be a mistyped proxy URL (`upstream: URL`)
    return repr(value)


def _path(loc: tuple[int | str, ...]) -> str:
    if loc[-1:] == ("[key]",):  # a mapping's key failed: the mapping is the field, the message names the key
        loc = loc[:-2]
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _accepted_keys(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        fields = {(f.alias or n): f for n, f in current.model_fields.items()}
        fields.update(current.model_fields)
        info = fields.get(part)
        if info is None:
            return ""
        annotation = info.annotation
        inner = [
            a
            for a in getattr(annotation, "__args__", (annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not inner:
            return ""
        current = inner[0]
    return ", ".join(sorted(f.alias or n for n, f in current.model_fields.items()))


def _format(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        path = _path(loc) or "settings"
        msg = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            accepted = _accepted_keys(model, loc)
            problems.append(f"{path}: unknown key (accepted: {accepted})")
        elif error["type"] == "value_error":
            for line in msg.splitlines():  # a check that found several problems gives a line each
                if re.match(r"^[a-z][A-Za-z0-9_]*\.[A-Za-z0-9_.\[\]]*: ", line):
                    problems.append(line)  # a model check that names its own field
                else:
                    problems.append(f"{path}: {line}")
        elif error["type"] == "missing":
            problems.append(f"{path}: required (expected a value; see docs/reference/settings.md)")
        else:
            problems.append(f"{path}: {_shown(path, error.get('input'))}: {msg}")
    return problems
