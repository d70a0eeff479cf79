"""deployment.accessLog (issue 46 item 1): its defaults, its bounds and their errors, and the tinyproxy.conf lines it
renders (`AccessLog`, `AccessLogRate`: patch 0025 of the image's tinyproxy); a change of it is reloaded in place. What
the lines hold is the image lane's (tests/image/test_access_log.py)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy_component.dataplane.config import config_generation, config_object, tinyproxy_conf
from proxy_component.dataplane.lifecycle import restart_inputs
from proxy_component.dataplane.workload import daemonset
from proxy_component.settings import (
    ACCESS_LOG_LINES_PER_SECOND,
    DEFAULT_ACCESS_LOG_LINES_PER_SECOND,
    AccessLogSettings,
    SettingsError,
    parse_settings,
)

CLUSTER = {"podCidrs": ["10.244.0.0/16"]}


def _conf_lines(access_log: dict[str, Any] | None = None) -> list[str]:
    deployment = {"accessLog": access_log} if access_log is not None else {}
    settings = parse_settings({"cluster": CLUSTER, "deployment": deployment})
    conf = tinyproxy_conf(settings, settings.allowed_sources())
    return [line for line in conf.splitlines() if line.startswith("AccessLog")]


def test_the_defaults_turn_it_on_at_100_lines_a_second() -> None:
    settings = parse_settings({})
    assert settings.deployment.access_log == AccessLogSettings(enabled=True, max_lines_per_second=100)
    assert (DEFAULT_ACCESS_LOG_LINES_PER_SECOND, ACCESS_LOG_LINES_PER_SECOND) == (100, (1, 10000))
    assert _conf_lines() == ["AccessLog On", "AccessLogRate 100"]


@pytest.mark.parametrize(
    ("given", "lines"),
    [
        ({"enabled": False}, []),
        ({"maxLinesPerSecond": 1}, ["AccessLog On", "AccessLogRate 1"]),
        ({"maxLinesPerSecond": 10000}, ["AccessLog On", "AccessLogRate 10000"]),
        ({"max_lines_per_second": 250, "enabled": True}, ["AccessLog On", "AccessLogRate 250"]),
        ({"enabled": False, "maxLinesPerSecond": 7}, []),
    ],
)
def test_the_settings_render_the_directives(given: dict[str, Any], lines: list[str]) -> None:
    """Each once (tinyproxy reads the last of a directive; there is one of each); off, neither: tinyproxy's own
    default is Off, and the previous image (pc6, without patch 0025), which refuses the directives, reads the config."""
    assert _conf_lines(given) == lines


def test_the_lines_follow_the_log_level_they_need() -> None:
    """tinyproxy writes access lines at Notice: the rendered LogLevel must let Notice through."""
    settings = parse_settings({"cluster": CLUSTER})
    conf = tinyproxy_conf(settings, settings.allowed_sources()).splitlines()
    assert "LogLevel Notice" in conf
    assert conf.index("AccessLog On") > conf.index("LogLevel Notice")


@pytest.mark.parametrize("value", [0, -1, 10001, 1_000_000, "lots", 2.5, True, None])
def test_a_rate_out_of_range_names_the_field_the_value_and_the_range(value: Any) -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({"deployment": {"accessLog": {"maxLinesPerSecond": value}}})
    assert caught.value.problems == [
        f"deployment.accessLog.maxLinesPerSecond: {value!r} is not a whole number of lines a second from 1 to 10000 "
        "(expected e.g. 100; turn the access log off with accessLog.enabled: false)"
    ]


def test_an_unknown_key_or_a_bad_switch_is_refused() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings({"deployment": {"accessLog": {"rate": 5, "enabled": "sometimes"}}})
    assert sorted(caught.value.problems) == [
        "deployment.accessLog.enabled: 'sometimes': Input should be a valid boolean, unable to interpret input",
        "deployment.accessLog.rate: unknown key (accepted: enabled, maxLinesPerSecond)",
    ]


def test_a_change_reloads_in_place() -> None:
    """The config (and its generation) changes; the DaemonSet, its pod template and the config object's name do not:
    the kubelet updates the mounted file and the container's watcher reloads tinyproxy (lifecycle.proxy_command)."""
    base = parse_settings({"cluster": CLUSTER})
    for change in ({"enabled": False}, {"maxLinesPerSecond": 5}):
        other = parse_settings({"cluster": CLUSTER, "deployment": {"accessLog": change}})
        assert config_generation(other, other.allowed_sources()) != config_generation(base, base.allowed_sources())
        assert restart_inputs(other) == restart_inputs(base)
        assert daemonset(other, restart_inputs(other)) == daemonset(base, restart_inputs(base))
        ours, theirs = config_object(base, "conf"), config_object(other, "conf")
        assert (ours["kind"], ours["metadata"]["name"]) == (theirs["kind"], theirs["metadata"]["name"])
