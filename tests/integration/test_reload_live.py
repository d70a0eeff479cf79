"""The tinyproxy container's command as rendered (`proxy_command`): reload in place, never a restart, never a bad file.

Debian's real tinyproxy 1.11 as the watcher shell's child (busybox `sh`, the image's shell), on a directory written
as the kubelet writes a config volume (`tests/reload_harness.KubeletDir`). All traffic stays on loopback: the
destinations and the corporate proxy are local servers. The image lane runs the same scenario with the image's own
binary and busybox (`tests/image/test_reload_image.py`).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy_component.dataplane.metrics import GENERATION_KEY
from proxy_component.settings import Settings, parse_settings
from tests.reload_harness import (
    TIMEOUT,
    KubeletDir,
    LineEchoServer,
    Load,
    Tunnel,
    UpstreamServer,
    config_files,
    free_port,
    once,
    serving,
    wait_for,
    watcher,
)

CLUSTER = {"podCidrs": ["10.244.0.0/16"], "nodeCidrs": ["192.168.0.0/24"]}


@pytest.fixture(scope="module")
def shell() -> list[str]:
    busybox = shutil.which("busybox")
    if busybox is None or shutil.which("tinyproxy") is None:
        pytest.fail("these tests run busybox sh and Debian's tinyproxy: apt-get install busybox tinyproxy-bin")
    return [busybox, "sh"]


@pytest.fixture
def echo() -> Iterator[LineEchoServer]:
    server = LineEchoServer(b"direct: ")
    with serving(server):
        yield server


@pytest.fixture
def upstream() -> Iterator[UpstreamServer]:
    server = UpstreamServer()
    with serving(server):
        yield server


def _settings(tmp: Path, echo: LineEchoServer, upstream: UpstreamServer | None, **extra: Any) -> Settings:
    deployment = {
        "port": extra.pop("port", None) or free_port(),
        "configDir": str(tmp / "config"),
        "connectPorts": [443, echo.port],
        "denyDestinations": extra.pop("deny", [r"^169\.254\."]),
        "firewall": {"enabled": False, "allowClusterDestinations": True},
        **({"drain": extra.pop("drain")} if "drain" in extra else {}),
    }
    proxy: dict[str, Any] = {}
    if upstream is not None:
        proxy["upstream"] = {
            "url": f"http://svc:{extra.pop('password', 'first-Pa55')}@127.0.0.1:{upstream.port}",
            "noUpstream": extra.pop("no_upstream", []),
        }
    return parse_settings({"cluster": CLUSTER, "deployment": deployment, "proxy": proxy, **extra})


def _basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"svc:{password}".encode()).decode()


def test_a_no_upstream_entry_and_a_password_rotation_reload_without_a_cut_or_a_failed_request(
    shell: list[str], tmp_path: Path, echo: LineEchoServer, upstream: UpstreamServer
) -> None:
    """The issue's scenario on loopback: 20 requests a second and two long tunnels across both reloads."""
    settings = _settings(tmp_path, echo, upstream)
    port = settings.deployment.port
    volume = KubeletDir(tmp_path / "config")
    volume.write(config_files(settings))
    proxy = ("127.0.0.1", port)
    target = ("127.0.0.1", echo.port)
    with watcher(settings, tmp_path / "watcher.log", shell) as running:
        pid = running.tinyproxy_pid
        wait_for(lambda: once(proxy, target) == "upstream: x", "tinyproxy to accept")
        long_tunnels = [Tunnel(proxy, target) for _ in range(2)]
        assert [t.echo("hello") for t in long_tunnels] == ["upstream: hello"] * 2
        with Load(proxy, target) as load:
            wait_for(lambda: load.ok >= 20, "the load to run")
            # 1. A noUpstream entry: new tunnels to 127.0.0.1 go direct from then on.
            added = _settings(tmp_path, echo, upstream, port=port, no_upstream=["127.0.0.1"])
            swapped = volume.write(config_files(added))
            running.wait_line("reloaded tinyproxy with config generation", 1)
            wait_for(lambda: once(proxy, target) == "direct: x", "the new rule to apply")
            noupstream_s = time.monotonic() - swapped
            assert [t.echo("after 1") for t in long_tunnels] == ["upstream: after 1"] * 2
            # 2. The password rotated (noUpstream back to none, so that tunnels reach the upstream): the upstream sees
            # the new one on new tunnels; the generation is the same as the first config's.
            rotated = _settings(tmp_path, echo, upstream, port=port, password="second-Pa55")
            swapped = volume.write(config_files(rotated))
            running.wait_line("reloaded tinyproxy with config generation", 2)
            wait_for(
                lambda: (
                    once(proxy, target) == "upstream: x" and upstream.seen[-1].authorization == _basic("second-Pa55")
                ),
                "the new password on a new tunnel",
            )
            password_s = time.monotonic() - swapped
            assert [t.echo("after 2") for t in long_tunnels] == ["upstream: after 2"] * 2
            count = load.ok
            wait_for(lambda: load.ok >= count + 20, "the load to go on after the reloads")
        assert load.failed == [], load.failed[:5]
        assert running.tinyproxy_pid == pid
        assert running.proc.poll() is None
        os.kill(pid, 0)  # the same process, never restarted
        assert config_files(rotated)[GENERATION_KEY] == config_files(settings)[GENERATION_KEY]
        assert config_files(added)[GENERATION_KEY] != config_files(settings)[GENERATION_KEY]
        assert "second-Pa55" not in running.text()
        assert "first-Pa55" not in running.text()
        for tunnel in long_tunnels:
            tunnel.close()
    print(
        f"\nreload: {load.ok} requests, 0 failed, 2 long tunnels kept; noUpstream in force {noupstream_s:.2f} s and "
        f"the new password {password_s:.2f} s after the files changed (1 s poll)"
    )


def test_a_filter_tinyproxy_cannot_compile_is_never_loaded(
    shell: list[str], tmp_path: Path, echo: LineEchoServer
) -> None:
    """tinyproxy exits on a reloaded Filter that does not compile: the watcher refuses it, the proxy serves on; the
    next good files are loaded."""
    settings = _settings(tmp_path, echo, None)
    port = settings.deployment.port
    volume = KubeletDir(tmp_path / "config")
    volume.write(config_files(settings))
    proxy, target = ("127.0.0.1", port), ("127.0.0.1", echo.port)
    with watcher(settings, tmp_path / "watcher.log", shell) as running:
        pid = running.tinyproxy_pid
        wait_for(lambda: once(proxy, target) == "direct: x", "tinyproxy to accept")
        tunnel = Tunnel(proxy, target)
        bad = config_files(settings)
        bad["filter"] = "a{1\n("  # POSIX regcomp refuses both
        volume.write(bad)
        line = running.wait_line("refused")
        assert "exits 65" in line, running.text()
        assert running.count("Bad regex") == 1, running.text()
        assert once(proxy, target) == "direct: x"
        assert tunnel.echo("still") == "direct: still"
        # A refused config stays refused; the next files are judged afresh.
        good = _settings(tmp_path, echo, None, port=port, deny=[r"^169\.254\.", r"^127\.0\.0\.1$"])
        volume.write(config_files(good))
        running.wait_line("reloaded tinyproxy")
        wait_for(lambda: " 403 " in once(proxy, target), "the new Filter rule")
        assert tunnel.echo("old tunnels are not judged again") == "direct: old tunnels are not judged again"
        assert running.tinyproxy_pid == pid
        assert running.proc.poll() is None
        tunnel.close()


def test_a_config_that_does_not_parse_and_a_new_port_are_not_loaded(
    shell: list[str], tmp_path: Path, echo: LineEchoServer
) -> None:
    settings = _settings(tmp_path, echo, None)
    port = settings.deployment.port
    volume = KubeletDir(tmp_path / "config")
    volume.write(config_files(settings))
    proxy, target = ("127.0.0.1", port), ("127.0.0.1", echo.port)
    with watcher(settings, tmp_path / "watcher.log", shell) as running:
        wait_for(lambda: once(proxy, target) == "direct: x", "tinyproxy to accept")
        broken = config_files(settings)
        broken["tinyproxy.conf"] += "NoSuchDirective yes\n"
        volume.write(broken)
        assert "exits 70" in running.wait_line("refused"), running.text()
        assert running.count("Syntax error on line") == 1
        moved = _settings(tmp_path, echo, None, port=free_port())
        volume.write(config_files(moved))
        running.wait_line("changes Port: not reloaded")
        assert once(proxy, target) == "direct: x", "the old port serves on until the pod is replaced"
        assert running.count("reloaded tinyproxy") == 0


def test_tinyproxy_exiting_ends_the_container_and_sigint_reaches_tinyproxy_at_once(
    shell: list[str], tmp_path: Path, echo: LineEchoServer
) -> None:
    settings = _settings(tmp_path, echo, None)
    KubeletDir(tmp_path / "config").write(config_files(settings))
    with watcher(settings, tmp_path / "one.log", shell) as running:
        os.kill(running.tinyproxy_pid, signal.SIGKILL)
        assert running.proc.wait(TIMEOUT) == 137, running.text()
        assert running.count("tinyproxy exited (137)") == 1
    with watcher(settings, tmp_path / "two.log", shell) as running:
        pid = running.tinyproxy_pid
        running.proc.send_signal(signal.SIGINT)
        running.proc.wait(TIMEOUT)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), "tinyproxy to exit")
        assert running.count("tinyproxy exited") == 1, running.text()
        assert running.count("stopping") == 0, running.text()


DRAIN = {"endpointSeconds": 2, "connectionSeconds": 4}


def _draining(tmp_path: Path, echo: LineEchoServer, name: str) -> tuple[Settings, tuple[str, int], tuple[str, int]]:
    settings = _settings(tmp_path / name, echo, None, drain=DRAIN)
    KubeletDir(tmp_path / name / "config").write(config_files(settings))
    return settings, ("127.0.0.1", settings.deployment.port), ("127.0.0.1", echo.port)


def test_sigterm_drains_new_connections_served_for_endpoint_seconds_then_the_open_tunnel_until_it_closes(
    shell: list[str], tmp_path: Path, echo: LineEchoServer
) -> None:
    """Issue 35 item 2: on SIGTERM (the kubelet's, when the pod is deleted) tinyproxy keeps accepting for
    `drain.endpointSeconds` (the pod's endpoint is leaving every node's rules meanwhile), then lives on while a
    tunnel is open, and stops as soon as it closes, well within `drain.connectionSeconds`."""
    settings, proxy, target = _draining(tmp_path, echo, "closes")
    with watcher(settings, tmp_path / "closes.log", shell) as running:
        pid = running.tinyproxy_pid
        wait_for(lambda: once(proxy, target) == "direct: x", "tinyproxy to accept")
        tunnel = Tunnel(proxy, target)
        assert tunnel.echo("before") == "direct: before"
        running.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        running.wait_line("stopping: serving new connections 2s more")
        # New connections are still served during the endpoint window: a client whose node has not yet dropped
        # the endpoint is not refused.
        assert once(proxy, target, "during") == "direct: during"
        assert time.monotonic() - signalled < 2, "served within the endpoint window"
        # After it, the open tunnel keeps tinyproxy up: the shell counted it.
        line = running.wait_line("open connection(s) to close", timeout=10)
        assert "waiting for 1 open connection(s) to close, at most 4s" in line, line
        assert tunnel.echo("still") == "direct: still"
        assert running.proc.poll() is None
        assert Path(f"/proc/{pid}").exists()
        tunnel.close()
        closed = time.monotonic()
        assert running.proc.wait(TIMEOUT) == 0, running.text()
        assert time.monotonic() - closed < 3, "tinyproxy stopped once the last connection closed"
        line = running.wait_line("stopping tinyproxy after")
        assert line.endswith("0 connection(s) still open"), line
        assert running.count("tinyproxy exited (0)") == 1, running.text()


def test_sigterm_cuts_a_tunnel_still_open_after_connection_seconds(
    shell: list[str], tmp_path: Path, echo: LineEchoServer
) -> None:
    settings, proxy, target = _draining(tmp_path, echo, "bounded")
    assert settings.deployment.drain.grace_seconds == 2 + 4 + 5
    with watcher(settings, tmp_path / "bounded.log", shell) as running:
        wait_for(lambda: once(proxy, target) == "direct: x", "tinyproxy to accept")
        tunnel = Tunnel(proxy, target)
        assert tunnel.echo("before") == "direct: before"
        running.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        assert running.proc.wait(2 + 4 + TIMEOUT) == 0, running.text()
        took = time.monotonic() - signalled
        assert 2 + 4 <= took < 2 + 4 + 3, took
        line = running.wait_line("stopping tinyproxy after 4s of draining")
        assert line.endswith("1 connection(s) still open"), line
        try:
            cut = tunnel.echo("after")
        except OSError:
            cut = ""
        assert cut == "", "the tunnel was closed when tinyproxy stopped"
        tunnel.close()
