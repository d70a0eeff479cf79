"""What one connection costs the image's tinyproxy in memory, by what the client does with it.

    sudo .venv/bin/python bench/bench_proxy_memory.py [--counts 0,128,512,1000] [--root ROOTFS] [--json]

Runs the image's own tinyproxy (its root filesystem, unpacked from `scripts/image amd64`, or --root) with chroot, as
the image's user, with the rendered tinyproxy.conf's limits (MaxClients 1024), in a network namespace of its own
(loopback only) and in a memory cgroup of its own (v1 `memory` or v2), beside an origin on loopback. For each count
of clients and each kind of client it opens that many connections, waits until the cgroup's memory stops moving,
and records the cgroup's usage (what a container's memory limit is judged on, socket buffers included where the
kernel charges them) and tinyproxy's resident set:

- `idle`: connected, nothing sent (tinyproxy waits for the request line);
- `headers`: a request line and 60 KiB of headers, the blank line never sent (just under the 64 KiB bound of a
  request's head, patches 0001 and 0007; the header flood's worst case);
- `long-line`: a request line of 16,300 bytes, never ended (just under the 16 KiB a request line may hold since
  patch 0022; before it, readline's own 128 KiB);
- `drip`: a request line sent a byte at a time, 2,048 bytes to each connection in turns (before patch 0007 each
  byte cost ~79 bytes of heap: a list node and a copy per recv);
- `silent`: a complete GET to an origin that accepts and never answers (tinyproxy waits for the response's head);
- `tunnel`: an idle CONNECT tunnel to the origin;
- `transfer`: a GET of an endless body from the origin that the client stops reading after 1 KiB (tinyproxy's
  relay buffers and the sockets' buffers full: a full transfer's worst case);
- `headers-transfer`: the same GET with 60 KiB of headers (before patch 0022 tinyproxy kept a request's headers
  until the connection ended, so both costs added up);
- `line-transfer`: the same GET with a 16,000-byte path (tinyproxy copies the request line into a URL, a host and
  a path while it reads the request).

The largest slope per connection is what `settings.PROXY_MEMORY_PER_CONNECTION_KIB` sizes the memory limit from
(`docs/guides/security.md`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_CLIENTS = 1792  # the default for a single-stack cluster (settings: 110 pods x 16 and the loopback reserve)
USER = 61888
HEADER_BYTES = 60 * 1024


def _unpack_image(dest: Path) -> Path:
    archive = Path(
        subprocess.run(
            ["bash", str(ROOT / "scripts/image"), "amd64"], check=True, capture_output=True, text=True
        ).stdout.splitlines()[-1]
    )
    layout = dest / "layout"
    layout.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(layout)], check=True)
    index = json.loads((layout / "index.json").read_text())
    blobs = layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_text())
    root = dest / "root"
    root.mkdir()
    with tarfile.open(blobs / manifest["layers"][0]["digest"].split(":")[1]) as layer:
        layer.extractall(root, numeric_owner=True, filter="fully_trusted")
    return root


class Origin:
    """Loopback TCP server: `GET` gets an endless body (1 MiB writes until the peer stops reading), anything else is
    echoed (the CONNECT tunnels' far end)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        # An origin that accepts and never answers (the kernel completes the handshakes; nothing reads).
        self.silent = socket.create_server(("127.0.0.1", 0), backlog=4096)
        self.silent_port = self.silent.getsockname()[1]

    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="origin").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            first = conn.recv(65536)
            while first.startswith(b"GET") and b"\r\n\r\n" not in first:  # the whole head before the answer
                more = conn.recv(65536)
                if not more:
                    return
                first += more
            if first.startswith(b"GET"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
                chunk = b"x" * (1 << 20)
                while True:
                    conn.sendall(chunk)
            while first:
                conn.sendall(first)
                first = conn.recv(65536)
        except OSError:
            pass


class Cgroup:
    def __init__(self, name: str) -> None:
        v1 = Path("/sys/fs/cgroup/memory")
        self.v2 = not v1.is_dir()
        base = (
            Path("/sys/fs/cgroup/unified")
            if self.v2 and Path("/sys/fs/cgroup/unified").is_dir()
            else (Path("/sys/fs/cgroup") if self.v2 else v1)
        )
        self.path = base / name
        self.path.mkdir()

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def usage(self) -> int:
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text())

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _settled(cgroup: Cgroup, timeout: float = 20.0) -> int:
    """The cgroup's usage once three readings 0.3 s apart agree within 0.5%."""
    readings: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        readings.append(cgroup.usage())
        last = readings[-3:]
        if len(last) == 3 and max(last) - min(last) <= 0.005 * max(last):
            return max(last)
        time.sleep(0.3)
    return max(readings[-3:])


def _drip(socks: list[socket.socket], count: int) -> None:
    """`count` bytes more to each connection, a byte at a time, in turns."""
    for _ in range(count):
        for s in socks:
            s.send(b"a")
        time.sleep(0.002)


def _open(kind: str, port: int, origin: int, silent: int, count: int) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        if kind == "headers":
            lines = [f"X-Filler-{i}: {'a' * 590}\r\n".encode() for i in range(HEADER_BYTES // 605)]
            s.sendall(b"GET http://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(lines))
        elif kind == "tunnel":
            s.sendall(f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n\r\n".encode())
            reply = s.recv(4096)
            assert b" 200 " in reply.split(b"\r\n", 1)[0], reply
        elif kind == "long-line":
            s.sendall(b"GET http://127.0.0.1/" + b"a" * 16300)
        elif kind == "drip":
            s.sendall(b"GET http://127.0.0.1/")
        elif kind == "silent":
            s.sendall(f"GET http://127.0.0.1:{silent}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        elif kind in ("transfer", "headers-transfer", "line-transfer"):
            filler = b""
            if kind == "headers-transfer":
                filler = b"".join(f"X-Filler-{i}: {'a' * 590}\r\n".encode() for i in range(HEADER_BYTES // 605))
            path = "/big" + ("a" * 16000 if kind == "line-transfer" else "")
            s.sendall(f"GET http://127.0.0.1:{origin}{path} HTTP/1.1\r\nHost: 127.0.0.1:{origin}\r\n".encode()
                      + filler + b"\r\n")  # fmt: skip
            s.recv(1024)
        socks.append(s)
    return socks


KINDS = ("idle", "headers", "long-line", "drip", "silent", "tunnel", "transfer", "headers-transfer", "line-transfer")


def measure(root: Path, counts: list[int], kinds: tuple[str, ...] = KINDS) -> list[dict[str, object]]:
    origin = Origin()
    port = 18888
    (root / "etc/tinyproxy").mkdir(parents=True, exist_ok=True)
    conf = root / "etc/tinyproxy/tinyproxy.conf"
    conf.write_text(
        f"Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients {MAX_CLIENTS}\nLogLevel Warning\n"
        f'Allow 127.0.0.1\nConnectPort {origin.port}\nStatHost "tinyproxy.stats"\n'
    )
    rows: list[dict[str, object]] = []
    for kind in kinds:
        cgroup = Cgroup(f"proxy-bench-{os.getpid()}-{kind}")
        proc = subprocess.Popen(
            [
                "chroot",
                f"--userspec={USER}:{USER}",
                str(root),
                "/usr/bin/tinyproxy",
                "-d",
                "-c",
                "/etc/tinyproxy/tinyproxy.conf",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            cgroup.add(proc.pid)
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            held: list[socket.socket] = []
            for count in counts:
                new = _open(kind, port, origin.port, origin.silent_port, count - len(held))
                if kind == "drip":  # the earlier connections had theirs
                    _drip(new, 2048)
                held += new
                usage = _settled(cgroup)
                rows.append({"kind": kind, "connections": count, "cgroup": usage, "rss": _rss(proc.pid)})
                print(f"{kind:9} {count:5} cgroup {usage / 2**20:8.1f} MiB  rss {_rss(proc.pid) / 2**20:8.1f} MiB",
                      file=sys.stderr)  # fmt: skip
            for s in held:
                s.close()
        finally:
            proc.kill()
            proc.wait()
            cgroup.remove()
    return rows


def worst_per_connection(rows: list[dict[str, object]]) -> float:
    """The largest cost of one connection, in KiB: each kind's slope from none to its most connections."""
    worst = 0.0
    for kind in {str(row["kind"]) for row in rows}:
        mine = sorted((int(str(r["connections"])), int(str(r["cgroup"]))) for r in rows if r["kind"] == kind)
        (n0, u0), (n1, u1) = mine[0], mine[-1]
        if n1 > n0:
            worst = max(worst, (u1 - u0) / (n1 - n0) / 1024)
    return worst


def _table(rows: list[dict[str, object]]) -> str:
    out = ["| client | connections | cgroup MiB | RSS MiB | per connection (cgroup, KiB) |", "|---|---|---|---|---|"]
    base: dict[str, int] = {}
    for row in rows:
        kind, count, usage = str(row["kind"]), int(str(row["connections"])), int(str(row["cgroup"]))
        base.setdefault(kind, usage)
        per = f"{(usage - base[kind]) / count / 1024:.0f}" if count else "-"
        out.append(f"| {kind} | {count} | {usage / 2**20:.1f} | {int(str(row['rss'])) / 2**20:.1f} | {per} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="0,128,512,1000")
    parser.add_argument("--root", type=Path)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which clients, comma-separated")
    args = parser.parse_args()
    if os.environ.get("PROXY_BENCH_NETNS") != "1":  # a network namespace of its own, loopback up
        os.execvp("unshare", ["unshare", "--net", "sh", "-c", 'ip link set lo up && PROXY_BENCH_NETNS=1 exec "$@"', "sh",
                              sys.executable, *sys.argv])  # fmt: skip
    counts = sorted({0, *(int(c) for c in args.counts.split(","))})
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or _unpack_image(Path(tmp))
        rows = measure(root, counts, tuple(args.kinds.split(",")))
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    print(f"worst case: {worst_per_connection(rows):.0f} KiB a connection", file=sys.stderr)


if __name__ == "__main__":
    main()
