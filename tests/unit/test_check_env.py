"""`check`'s judgement of one container against its runtime selection (the live lane runs the whole command)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.injections import SELECTIONS
from proxy_component.live.check import NoProxyTokens, _container_problem
from proxy_component.render import plain_values
from proxy_component.render.env import env_pairs
from proxy_component.render.runtimes import python_no_proxy
from proxy_component.settings import RUNTIMES, Runtime, parse_settings

SETTINGS = parse_settings({"cluster": {"podCidrs": ["fd00:10:244::/56"]}, "runtimes": {"java": True}})
VALUES = plain_values(SETTINGS)
OURS = dict(env_pairs(VALUES.select(RUNTIMES)))
TOKENS = NoProxyTokens.of(SETTINGS.no_proxy())
FULL = str(SETTINGS.no_proxy())
PYTHON_SAFE = python_no_proxy(SETTINGS.no_proxy())
STALE = "NO_PROXY is stale: it lacks {}, which the composed NO_PROXY holds (re-apply its env and recreate its pods)"


def _container(pairs: dict[str, Any]) -> dict[str, Any]:
    return {"env": [{"name": k, "value": v, "literal": True} for k, v in pairs.items()], "envFrom": []}


def _problem(selection: set[Runtime] | frozenset[Runtime], pairs: dict[str, Any]) -> str:
    expected = dict(env_pairs(VALUES.select(selection)))
    return _container_problem(_container(pairs), expected, OURS, TOKENS)


def test_the_two_renderings_differ_here() -> None:
    assert "fd00:10:244::/56" in FULL
    assert "fd00:10:244::/56" not in PYTHON_SAFE
    assert TOKENS.python_unsafe == {"fd00:10:244::/56", "[::1]"}


@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: ",".join(sorted(s)) or "none")
def test_a_container_with_what_its_selection_gives_is_clean(selection: frozenset[Runtime]) -> None:
    assert _problem(selection, dict(env_pairs(VALUES.select(selection)))) == ""


def test_a_container_that_reads_proxy_config_is_judged_there() -> None:
    container = {"env": [], "envFrom": [{"configMapRef": {"name": "proxy-config"}}]}
    assert _container_problem(container, {}, OURS, TOKENS) == ""


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


def test_the_python_safe_list_is_not_stale_whatever_the_selection() -> None:
    """What a chart's values or a Kustomize patch rendered with the python runtime carry, on a workload without
    the annotation: both spellings the Python-safe list."""
    six = dict(env_pairs(VALUES.select(set())))
    assert _problem(set(), {**six, "NO_PROXY": PYTHON_SAFE, "no_proxy": PYTHON_SAFE}) == ""
    assert _problem({"python"}, {**six, "NO_PROXY": FULL}) == "", "the composed list in NO_PROXY, with python"


def test_more_entries_than_composed_are_not_stale() -> None:
    """A chart profile's NO_PROXY adds the chart's own hosts to the composed list."""
    six = dict(env_pairs(VALUES.select(set())))
    assert _problem(set(), {**six, "NO_PROXY": f"{FULL},.cert-manager.svc", "no_proxy": f"{PYTHON_SAFE},x.corp"}) == ""


def test_a_list_that_lacks_a_composed_entry_is_stale() -> None:
    six = dict(env_pairs(VALUES.select(set())))
    without_kubernetes = ",".join(t for t in FULL.split(",") if t != "kubernetes")
    assert _problem(set(), {**six, "NO_PROXY": without_kubernetes}) == STALE.format("kubernetes")
    many = _problem(set(), {**six, "no_proxy": "localhost"})
    assert many == (
        "no_proxy is stale: it lacks 127.0.0.1, ::1, cluster.local, .cluster.local, svc and 3 more, which the "
        "composed NO_PROXY holds (re-apply its env and recreate its pods)"
    )


def test_no_proxy_with_what_httpx_raises_on_is_reported() -> None:
    """0.1 gave no_proxy the composed list: its IPv6 CIDRs and bracketed addresses make httpx raise at start."""
    six = dict(env_pairs(VALUES.select(set())))
    assert _problem(set(), {**six, "no_proxy": FULL}) == (
        "no_proxy holds [::1], fd00:10:244::/56, on which httpx raises InvalidURL when a client is created "
        "(proxy-component gives no_proxy the Python-safe list: re-apply its env and recreate its pods)"
    )


def test_variables_the_container_sets_itself_that_change_a_clients_decision() -> None:
    """npm's npm_config_* (proxy-from-env 1 reads them first) and REQUEST_METHOD (CGI: Go refuses HTTP_PROXY)."""
    six = dict(env_pairs(VALUES.select(set())))
    assert _problem(set(), {**six, "npm_config_no_proxy": "example.com"}) == (
        "sets npm_config_no_proxy, which proxy-from-env 1 reads ahead of the proxy env "
        "(npm_config_no_proxy ahead of NO_PROXY) (proxy-component explain --env NAME=VALUE shows what each client "
        "then does)"
    )
    both = _problem(set(), {**six, "NPM_CONFIG_PROXY": "http://other:3128", "REQUEST_METHOD": "GET"})
    assert both.startswith("sets NPM_CONFIG_PROXY, which proxy-from-env 1")
    assert "; sets REQUEST_METHOD, which marks a CGI process: Go then refuses HTTP_PROXY" in both
    assert _problem(set(), {**six, "ALL_PROXY": "http://other:3128"}) == "", "the rendered variables come first"
