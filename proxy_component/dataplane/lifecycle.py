"""The tinyproxy container's life: what it runs (tinyproxy and the watcher that reloads it in place when the kubelet
updates its config, and drains it on SIGTERM), and what a change of rolls its pods instead."""

from __future__ import annotations

import hashlib

from ..settings import Settings
from .config import CONFIG_KEY, GENERATION_LENGTH
from .firewall import firewall_text
from .metrics import GENERATION_KEY

__all__ = ["RELOAD_LOG_PREFIX", "RESTART_ANNOTATION", "STATUS_PERIOD", "proxy_command", "restart_inputs"]

# On the pod template: what a change of restarts the proxy pods (tinyproxy does not reload it), readable, never a
# credential nor derived from one.
RESTART_ANNOTATION = "proxy-component/restart-inputs"
RELOAD_LOG_PREFIX = "proxy-component: "  # the lines the tinyproxy container's watcher writes (proxy_command)
STATUS_PERIOD = 600  # seconds (polls) between the watcher's lines that repeat what it runs, for `check` to read


def restart_inputs(settings: Settings, firewall: str | None = None) -> str:
    """The pod template's annotation: what tinyproxy cannot reload, so that a change of it rolls the DaemonSet.

    `Port` (tinyproxy keeps the sockets it opened) and the kernel rules (`nftables.conf`, loaded by the init
    container when the pod starts: the firewall ranges, the client limits, the upstream's address) as a sha256 of
    their text, which holds no credential. Readable, so that a preview's diff names the part that changed.
    Everything else tinyproxy reloads in place (`proxy_command`). `firewall` is the nftables text when a run-time
    network adds ranges to it; by default it is rendered from the settings.
    """
    text = firewall_text(settings, firewall)
    rules = hashlib.sha256(text.encode()).hexdigest()[:GENERATION_LENGTH] if text else "off"
    return f"port={settings.deployment.port} firewall={rules}"


def proxy_command(settings: Settings) -> list[str]:
    """What the tinyproxy container runs: tinyproxy, in the foreground as the shell's child, and a watcher that
    reloads it when the kubelet updates the mounted config.

    The kubelet writes a ConfigMap or Secret volume as a directory whose `..data` symlink it swaps atomically to a
    new timestamped directory. Once a second the shell reads where `..data` points (`cd -P`, a built-in). When it
    moved, it checks the new files with tinyproxy itself, which parses the config and compiles the Filter exactly
    as a reload would, then fails to listen on the port the running proxy holds (exit 71, EX_OSERR): only that
    exit sends SIGUSR1. tinyproxy keeps its old config when a reloaded config does not parse, but exits when a
    reloaded Filter does not compile (src/filter.c), so a bad file must never reach it. A new `Port` is never
    reloaded (tinyproxy keeps its sockets): the pod template changes with it and the pod is replaced.

    No capability, no shared process namespace: the shell and tinyproxy run as one user in one container, and the
    shell signals its own child. When tinyproxy exits, the shell exits with its status (the kubelet restarts the
    container). SIGTERM drains (`deployment.drain`): tinyproxy keeps serving `endpointSeconds` while the pod's
    endpoint leaves every node's rules, then the shell counts the established connections to the proxy's port (the
    node's /proc/net/tcp and tcp6, world-readable) once a second until none is left or `connectionSeconds` have
    passed, and only then passes SIGTERM on; SIGINT is passed on at once. Shell built-ins, `sleep` and `timeout`:
    the image's busybox has them.
    Every line it writes starts with `RELOAD_LOG_PREFIX` and names the config generation (`GENERATION_KEY`, never
    a credential) it started with or loaded, and the kubelet's directory of those files (`..2026_11_27_03_00_00.N`:
    when the kubelet wrote them, to the second); it repeats that every `STATUS_PERIOD` seconds, so that `check`
    finds it in the last minutes of the log, and judges a change of the credentials alone (same generation) by
    that time against the config object's.
    """
    d = settings.deployment
    script = "\n".join(
        [
            "set -u",
            f"dir={_shell_quote(d.config_dir)}",
            f'conf="$dir/{CONFIG_KEY}"',
            f'say() {{ echo "{RELOAD_LOG_PREFIX}$*"; }}',
            "# Where the kubelet's ..data points now: a new directory for every update of the config object.",
            'snapshot() { (cd -P "$dir/..data" 2>/dev/null && pwd -P) || echo none; }',
            f'generation() {{ g=unknown; read -r g 2>/dev/null < "$1/{GENERATION_KEY}"; echo "$g"; }}',
            'port() { while read -r k v rest; do [ "$k" = Port ] && { echo "$v"; return; }; done < "$1"; echo; }',
            "# The established connections to the proxy's port, on the node's network (hostNetwork).",
            "open_connections() {",
            "  n=0",
            "  for f in /proc/net/tcp /proc/net/tcp6; do",
            '    [ -r "$f" ] || continue',
            '    while read -r _ local _ st _; do [ "$st" = 01 ] && [ "${local##*:}" = '
            f'{d.port:04X} ] && n=$((n + 1)); done < "$f"',
            "  done",
            '  echo "$n"',
            "}",
            "drain() {",
            f'  say "stopping: serving new connections {d.drain.endpoint_seconds}s more (while this pod leaves every '
            f"node's rules), then open connections up to {d.drain.connection_seconds}s\"",
            f"  sleep {d.drain.endpoint_seconds}",
            "  t=0; n=$(open_connections)",
            f'  say "waiting for $n open connection(s) to close, at most {d.drain.connection_seconds}s"',
            f'  while [ "$n" -gt 0 ] && [ "$t" -lt {d.drain.connection_seconds} ]; do sleep 1; t=$((t + 1)); '
            "n=$(open_connections); done",
            '  say "stopping tinyproxy after ${t}s of draining: $n connection(s) still open"',
            "  kill -TERM $pid 2>/dev/null",
            "}",
            'tinyproxy -d -c "$conf" &',
            "pid=$!",
            "trap drain TERM",
            "trap 'kill -TERM $pid 2>/dev/null' INT",
            'loaded=$(snapshot); running=$(port "$conf"); current=$(generation "$dir"); files=${loaded##*/}; i=0',
            'say "started tinyproxy (pid $pid) with config generation $current (files $files)"',
            'while kill -0 "$pid" 2>/dev/null; do',
            "  sleep 1 & wait $!",
            "  i=$((i + 1))",
            f'  [ $((i % {STATUS_PERIOD})) -eq 0 ] && say "running config generation $current (files $files)"',
            "  now=$(snapshot)",
            '  [ "$now" = "$loaded" ] && continue',
            '  [ "$now" = none ] && { loaded=$now; continue; }',
            '  new=$(generation "$now")',
            '  if [ "$(port "$now/tinyproxy.conf")" != "$running" ]; then',
            '    say "config generation $new (files ${now##*/}) changes Port: not reloaded (the pod is replaced for it)"',
            "    loaded=$now; continue",
            "  fi",
            '  out=$(timeout 5 tinyproxy -d -c "$now/tinyproxy.conf" 2>&1 </dev/null); rc=$?',
            '  if [ "$rc" -ne 71 ]; then',
            '    printf "%s\\n" "$out" | while read -r line; do',
            '      case "$line" in *"Syntax error"*|*"Bad regex"*|*"Could not open"*|*"filter file"*|*"MUST"*|*"Bad port"*)',
            '        say "  $line";; esac',
            "    done",
            '    say "config generation $new (files ${now##*/}) refused (tinyproxy exits $rc on it): not reloaded, the running config stays"',
            "    loaded=$now; continue",
            "  fi",
            '  [ "$(snapshot)" = "$now" ] || continue',
            '  kill -USR1 "$pid" && say "reloaded tinyproxy with config generation $new (files ${now##*/})"',
            "  loaded=$now; current=$new; files=${now##*/}",
            "done",
            'wait "$pid"; rc=$?',
            'say "tinyproxy exited ($rc)"',
            'exit "$rc"',
        ]
    )
    return ["/bin/sh", "-c", script]


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
