"""`check`'s judgement of one container against its runtime selection (the live lane runs the whole command)."""

from __future__ import annotations

from typing import Any

from proxy_component.check import _container_problem
from proxy_component.render import plain_values
from proxy_component.render.env import env_pairs
from proxy_component.settings import RUNTIMES, parse_settings

SETTINGS = parse_settings({"cluster": {"podCidrs": ["fd00:10:244::/56"]}, "runtimes": {"java": True}})
VALUES = plain_values(SETTINGS)
OURS = dict(env_pairs(VALUES.select(RUNTIMES)))


def _container(pairs: dict[str, Any]) -> dict[str, Any]:
    return {"env": [{"name": k, "value": v, "literal": True} for k, v in pairs.items()], "envFrom": []}


def _problem(selection: set[str], pairs: dict[str, Any]) -> str:
    expected = dict(env_pairs(VALUES.select(selection)))  # type: ignore[arg-type]
    return _container_problem(_container(pairs), expected, OURS)


def test_a_container_with_what_its_selection_gives_is_clean() -> None:
    assert _problem({"java"}, dict(env_pairs(VALUES.select({"java"})))) == ""
    assert _container_problem({"env": [], "envFrom": [{"configMapRef": {"name": "proxy-config"}}]}, {}, OURS) == ""


def test_a_selected_runtime_variable_missing_and_one_left_from_before_opt_in() -> None:
    six = dict(env_pairs(VALUES.select(set())))
    assert _problem({"java"}, six) == (
        "its runtimes select java but it lacks JDK_JAVA_OPTIONS (recreate its pods, or it set a proxy name)"
    )
    assert _problem(set(), {**six, "NODE_USE_ENV_PROXY": "1"}) == (
        "has proxy-component's NODE_USE_ENV_PROXY but its runtimes do not select node: injected before runtimes "
        "were opt-in (recreate its pods, or select the runtime)"
    )
    assert _problem(set(), {**six, "NODE_USE_ENV_PROXY": "yes"}) == "", "the workload's own value is its business"


def test_no_proxy_is_judged_for_the_selection() -> None:
    full = str(SETTINGS.no_proxy())
    six = dict(env_pairs(VALUES.select(set())))
    assert _problem(set(), {**six, "no_proxy": full}) == (
        "no_proxy is stale (differs from the composed NO_PROXY for its runtimes)"
    )
    assert _problem({"python"}, six) == "NO_PROXY is stale (differs from the composed NO_PROXY for its runtimes)"
