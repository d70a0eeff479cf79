"""The previous image's tinyproxy (`1.11.3-git-364cdb6-pc6`: the image's sources with patches 0001-0024, before the
access log's 0025; `scripts/image tinyproxy pc6 amd64`, run with the image's own loader and libc) given the config
this version renders.

- `deployment.accessLog.enabled: false` renders no `AccessLog` line: pc6 reads the config and serves (its stats page
  answers on the StatHost), which docs/guides/access-log.md promises to a cluster that pins the previous image.
- The default (the access log on) is refused as a syntax error naming the `AccessLog` line: what the watcher of a
  pod still on pc6 finds in the new files during an upgrade, before that pod is replaced. It keeps its running
  config then (the refused-config path of tests/image/test_reload.py), and `check` says `proxy-config-refused`.

Each run is in a network namespace of its own (`unshare -n`, its loopback up): tinyproxy listens on all addresses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from proxy_component.dataplane.config import tinyproxy_conf, tinyproxy_filter
from proxy_component.settings import parse_settings
from tests.image.test_build import _image, _scripts_image
from tests.image.test_upstream_fixes import _runner

pytestmark = pytest.mark.image

SETTINGS = {"cluster": {"podCidrs": ["10.244.0.0/16"], "serviceCidrs": ["10.96.0.0/12"]}, "namespaces": ["default"]}
PORT = 8888

# Inside the namespace: start tinyproxy, then wait (20 s at most) until its stats page answers on loopback or it
# exits; say which, with its exit status and output.
CHILD = r"""
import json, socket, subprocess, sys, time
binary, conf, port, stathost = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
proxy = subprocess.Popen([binary, "-d", "-c", conf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
deadline, answer = time.monotonic() + 20, ""
while time.monotonic() < deadline and proxy.poll() is None and not answer:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(f"GET http://{stathost}/ HTTP/1.0\r\nHost: {stathost}\r\n\r\n".encode())
            answer = s.makefile("rb").readline().decode(errors="replace").strip()
    except OSError:
        time.sleep(0.05)
exited = proxy.poll()
if exited is None:
    proxy.terminate()
output = proxy.communicate(timeout=20)[0].decode(errors="replace")
print(json.dumps({"answer": answer, "exited": exited, "output": output}))
"""


def _run(binary: Path, workdir: Path, settings: Mapping[str, Any]) -> dict[str, object]:
    s = parse_settings(settings)
    workdir.mkdir()
    (workdir / "filter").write_text(tinyproxy_filter(s))
    conf = tinyproxy_conf(s, s.allowed_sources()).replace(
        'Filter "/etc/tinyproxy/filter"', f'Filter "{workdir}/filter"'
    )
    (workdir / "tinyproxy.conf").write_text(conf)
    stathost = next(line.split('"')[1] for line in conf.splitlines() if line.startswith("StatHost "))
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", CHILD, str(binary), str(workdir / "tinyproxy.conf"), str(PORT), stathost],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    result["conf"] = conf
    return result


@pytest.fixture(scope="module")
def pc6(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _image("amd64", tmp_path_factory).root
    return _runner(tmp_path_factory.mktemp("pc6"), root, _scripts_image("tinyproxy", "pc6", "amd64"))


def test_pc6_reads_the_config_with_the_access_log_off_and_serves(pc6: Path, tmp_path: Path) -> None:
    off = _run(pc6, tmp_path / "off", {**SETTINGS, "deployment": {"accessLog": {"enabled": False}}})
    assert "AccessLog" not in str(off["conf"])
    assert off["exited"] is None, off["output"]
    assert str(off["answer"]).startswith("HTTP/1.0 200"), off


def test_pc6_refuses_the_default_config_naming_the_access_log_line(pc6: Path, tmp_path: Path) -> None:
    on = _run(pc6, tmp_path / "on", SETTINGS)
    conf = str(on["conf"])
    line = conf.splitlines().index("AccessLog On") + 1
    assert on["answer"] == ""
    assert on["exited"] not in (None, 0), on["output"]
    assert f"Syntax error on line {line}" in str(on["output"]), on["output"]


def test_the_image_serves_the_default_config(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The control: the same run with the image's own tinyproxy (patch 0025) reads the default, access log on."""
    root = _image("amd64", tmp_path_factory).root
    image = _runner(tmp_path_factory.mktemp("image"), root, root / "usr/bin/tinyproxy")
    on = _run(image, tmp_path / "on", SETTINGS)
    assert on["exited"] is None, on["output"]
    assert str(on["answer"]).startswith("HTTP/1.0 200"), on
