"""deployment.deadlines.dnsSeconds, through the resolver's own options: the proxy container's RES_OPTIONS
(`timeout:N attempts:1`) bound a name's lookup by every nameserver of the node's resolv.conf (glibc asks at most 3,
each N seconds), whatever options the node's file has.

The image's tinyproxy (built for this machine, first on PATH: tests/conftest.py) runs in a network namespace of the
test's own, whose resolv.conf (`ip netns exec` binds /etc/netns/NAME/resolv.conf) names three nameservers on its
loopback that take every query and never answer (so no ICMP error ends the wait early), and asks for
`options timeout:5 attempts:2`: without RES_OPTIONS a lookup would take about 30 s. With the rendered RES_OPTIONS
tinyproxy answers its 500 within dnsSeconds; with a longer timeout, later (the option is what bounds it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proxy_component.settings import parse_settings

NAMESERVERS = ("127.0.0.53", "127.0.0.54", "127.0.0.55")

LOOKUP = """
import json, os, socket, subprocess, sys, time
conf, options = sys.argv[1], sys.argv[2]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
silent = []
for address in sys.argv[3:]:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((address, 53))
    tcp = socket.socket()
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind((address, 53))
    tcp.listen(16)
    silent += [udp, tcp]
proxy = subprocess.Popen(["tinyproxy", "-d", "-c", conf], env={**os.environ, "RES_OPTIONS": options},
                         stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
end = time.monotonic() + 10
while True:
    try:
        socket.create_connection(("127.0.0.1", 8888), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > end or proxy.poll() is not None:
            raise SystemExit("tinyproxy did not listen")
        time.sleep(0.05)
client = socket.create_connection(("127.0.0.1", 8888), timeout=60)
started = time.monotonic()
client.sendall(b"GET http://unanswered.example/ HTTP/1.1\\r\\nHost: unanswered.example\\r\\n\\r\\n")
answer = client.recv(4096)
elapsed = time.monotonic() - started
proxy.kill()
print(json.dumps({"elapsed": elapsed, "status": answer.split(b"\\r\\n", 1)[0].decode("latin-1")}))
"""


def _lookup(tmp_path: Path, options: str) -> dict[str, object]:
    missing = [tool for tool in ("ip", "tinyproxy") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        pytest.fail(f"needs root and {', '.join(missing) or 'its tools'}: network namespaces of its own")
    name = f"pc-dns-{os.getpid()}"
    etc = Path("/etc/netns") / name
    conf = tmp_path / "tinyproxy.conf"
    conf.write_text("Port 8888\nListen 127.0.0.1\nMaxClients 8\nLogLevel Info\nAllow 127.0.0.1\n")
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        etc.mkdir(parents=True)
        servers = "".join(f"nameserver {address}\n" for address in NAMESERVERS)
        (etc / "resolv.conf").write_text(f"{servers}options timeout:5 attempts:2\n")
        done = subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, "-c", LOOKUP, str(conf), options, *NAMESERVERS],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        result: dict[str, object] = json.loads(done.stdout)
        return result
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)
        shutil.rmtree(etc, ignore_errors=True)


def test_a_lookup_gives_up_within_dns_seconds(tmp_path: Path) -> None:
    settings = parse_settings({"deployment": {"deadlines": {"dnsSeconds": 3}}})
    options = settings.deployment.deadlines.resolver_options
    assert options == "timeout:1 attempts:1"
    bounded = _lookup(tmp_path, options)
    assert str(bounded["status"]).split(" ")[1] == "500", bounded  # tinyproxy's "Unable to connect"
    assert float(str(bounded["elapsed"])) <= 3 + 1.5, bounded  # three nameservers, a second each
    # The same with 3 s a nameserver: about 9 s, so the option, not something else, ended the first lookup.
    slower = _lookup(tmp_path, "timeout:3 attempts:1")
    assert float(str(slower["elapsed"])) >= 6, slower
