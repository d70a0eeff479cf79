"""`check` and `rollout` stop on SIGINT and SIGTERM even when started with SIGINT ignored, as a shell starts a
background job (`proxy-component rollout --apply &` in a script): Python then leaves SIGINT ignored unless the
command installs its own handler. The commands run as processes against an API server on 127.0.0.1 that accepts
the connection and never answers, so that each is blocked in a read when the signal comes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = """\
cluster:
  podCidrs: ["10.0.0.0/16"]
  serviceCidrs: ["10.0.0.0/24"]
  nodeCidrs: ["192.0.2.0/24"]
namespaces: [default]
"""


@pytest.fixture
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


# How the command is started: a small Python that sets the signal state, then execs the command (an ignored
# disposition and the signal mask are kept across exec). Not preexec_fn: its fork runs Python in a child of this
# process, whose other threads (gRPC's, from the engine's SDK) may leave that child aborted before its exec.
_IGNORE_SIGINT = "signal.signal(signal.SIGINT, signal.SIG_IGN)"
# A signal mask that blocks both (a blocked signal stays pending, never delivered).
_BLOCK_BOTH = "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})"


def _started(setup: str, argv: list[str]) -> list[str]:
    return [sys.executable, "-c", f"import os, signal, sys; {setup}; os.execv(sys.executable, sys.argv[1:])",
            sys.executable, *argv]  # fmt: skip


@pytest.mark.parametrize("started", [_IGNORE_SIGINT, _BLOCK_BOTH], ids=["sigint-ignored", "both-blocked"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["check"], "proxy-component check: interrupted"),  # no probe pods to speak of without --probe
        (["rollout", "--apply"], "proxy-component rollout: interrupted before anything was restarted"),
    ],
    ids=["check", "rollout"],
)
def test_a_signal_stops_a_command_started_with_sigint_ignored_or_blocked(
    silent_server: tuple[int, list[socket.socket]],
    tmp_path: Path,
    signum: int,
    command: list[str],
    said: str,
    started: str,
) -> None:
    port, accepted = silent_server
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    config = tmp_path / "proxy.yaml"
    config.write_text(SETTINGS)
    proc = subprocess.Popen(
        _started(started, ["-m", "proxy_component.cli", command[0], str(config), "--kubeconfig", str(kubeconfig),
                           *command[1:]]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not accepted:  # the command is waiting for the server's answer
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never connected"
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == said
