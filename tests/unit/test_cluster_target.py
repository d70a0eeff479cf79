"""Issue 44: every live command acts on the cluster its stack names. `check` and `rollout` with --stack resolve the
kubeconfig and context as the stack's provider does (the stack's `proxy-component:kubeconfig` and `context`, else the
ambient kubeconfig), say which cluster they judge before anything else, and refuse a flag that names another one; a
context that is not in the kubeconfig is refused with the contexts it holds. No request is made: the servers are
loopback ports nothing listens on (tests/engine/test_live.py runs the commands against two real test clusters)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy_component.cli import _connect, main
from proxy_component.layers import ClusterTarget, Layered
from proxy_component.live import CheckError, connect

TOKEN = "t0ken-Of-cluster-b"


def kubeconfig(current: str = "a") -> str:
    """Two clusters on loopback ports no server listens on; b's user has a token."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": current,
            "clusters": [
                {"name": "a", "cluster": {"server": "https://127.0.0.1:1"}},
                {"name": "b", "cluster": {"server": "https://127.0.0.1:2"}},
            ],
            "users": [{"name": "ua", "user": {"token": "a"}}, {"name": "ub", "user": {"token": TOKEN}}],
            "contexts": [
                {"name": "a", "context": {"cluster": "a", "user": "ua"}},
                {"name": "b", "context": {"cluster": "b", "user": "ub"}},
            ],
        }
    )


@pytest.fixture
def ambient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ambient kubeconfig ($KUBECONFIG) names cluster a as current."""
    path = tmp_path / "ambient"
    path.write_text(kubeconfig("a"))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


def args(command: str = "check", kubeconfig: str | None = None, context: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(command=command, kubeconfig=kubeconfig, context=context)


def stack(**target: Any) -> Layered:
    return Layered({}, {}, ClusterTarget("s", **target))


def test_a_stack_without_a_target_judges_the_ambient_current_context(
    ambient: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _connect(args(), stack())
    assert (cluster.server, cluster.context) == ("https://127.0.0.1:1", "a")
    assert capsys.readouterr().err == (
        "proxy-component check: judging the cluster at https://127.0.0.1:1 (context a, from stack s's ambient "
        "kubeconfig (it sets no proxy-component:kubeconfig))\n"
    )


def test_the_stacks_context_wins_over_the_ambient_current_one(
    ambient: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _connect(args("rollout"), stack(context="b"))
    assert (cluster.server, cluster.context) == ("https://127.0.0.1:2", "b")
    assert "from stack s's proxy-component:context)" in capsys.readouterr().err


def test_the_stacks_kubeconfig_contents_are_read_and_never_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stack holds the file itself (a secret): the command reads it from a private scratch copy."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    cluster = _connect(args(), stack(kubeconfig=kubeconfig("b")))
    assert (cluster.server, cluster.context) == ("https://127.0.0.1:2", "b")
    err = capsys.readouterr().err
    assert "from stack s's proxy-component:kubeconfig)" in err
    assert TOKEN not in err
    assert TOKEN not in repr(stack(kubeconfig=kubeconfig("b")))


def test_a_relative_kubeconfig_of_the_stack_is_the_project_directorys(tmp_path: Path) -> None:
    from proxy_component.layers import _target

    (tmp_path / "kube").write_text(kubeconfig("b"))
    target = _target("s", {"kubeconfig": "kube", "context": ""}, str(tmp_path))
    assert (target.kubeconfig, target.context) == (str(tmp_path / "kube"), None)
    assert _target("s", {"kubeconfig": kubeconfig()}, None).kubeconfig == kubeconfig()


@pytest.mark.parametrize(
    ("flags", "target", "said"),
    [
        ({"context": "a"}, {"context": "b"}, "--context 'a': stack s targets the cluster of its proxy-component:context, which is 'b'"),
        ({"context": "b"}, {}, "which is nothing (the ambient kubeconfig)"),
        ({"kubeconfig": "/elsewhere"}, {"kubeconfig": kubeconfig()}, "proxy-component:kubeconfig, which is its contents"),
    ],
)  # fmt: skip
def test_a_flag_that_names_another_cluster_than_the_stacks_is_refused(
    ambient: Path, flags: dict[str, str], target: dict[str, str], said: str
) -> None:
    with pytest.raises(CheckError) as raised:
        _connect(args(**flags), stack(**target))
    assert said in str(raised.value), str(raised.value)
    assert TOKEN not in str(raised.value)


def test_the_same_flag_as_the_stacks_is_accepted(ambient: Path) -> None:
    assert _connect(args(context="b"), stack(context="b")).context == "b"
    assert _connect(args(kubeconfig=str(ambient)), stack(kubeconfig=str(ambient))).context == "a"


def test_a_context_typo_names_the_contexts_the_kubeconfig_holds(ambient: Path) -> None:
    with pytest.raises(CheckError) as raised:
        connect(None, "prod-ue")
    assert str(raised.value) == f"context 'prod-ue' is not in kubeconfig {ambient} (expected one of: a, b)"


def test_check_with_a_context_typo_exits_2_before_reading_anything(
    ambient: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        yaml.safe_dump({"cluster": {"name": "t", "podCidrs": ["10.0.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}})
    )
    assert main(["check", str(config), "--context", "prod-ue"]) == 2
    err = capsys.readouterr().err
    assert "context 'prod-ue' is not in kubeconfig" in err, err
    assert "(expected one of: a, b)" in err, err
    assert "Traceback" not in err
