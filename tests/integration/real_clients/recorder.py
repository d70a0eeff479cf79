"""The recording listeners the traffic-based clients talk to, run by the harness inside its network namespace.

    python3 recorder.py LOG PROXY_PORT ORIGIN_PORT...

    proxy    127.0.0.1:PROXY_PORT records each request line (absolute-form `GET http://host/...` or
             `CONNECT host:port`) with its Host header; answers 200 to a GET and 502 to a CONNECT
    origins  [::]:PORT (IPv4 too) for each ORIGIN_PORT record each direct connection: the local address and
             port it arrived on, the request line and Host header, or for TLS the ClientHello's server name

One JSON line per event is appended to LOG. Prints "ready" once every socket listens. Standard library only.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from typing import Any

TIMEOUT = 3.0
_lock = threading.Lock()


def _log(path: str, event: dict[str, Any]) -> None:
    with _lock, open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(event) + "\n")


def _read_head(conn: socket.socket) -> bytes:
    """The request head (up to the empty line), or for TLS the first record; whatever arrived before a timeout."""
    data = b""
    while len(data) < 65536:
        if data[:1] == b"\x16" and len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big"):
            break
        if data[:1] != b"\x16" and b"\r\n\r\n" in data:
            break
        try:
            chunk = conn.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def _sni(record: bytes) -> str:
    """The server name of a TLS ClientHello record, or ""."""
    try:
        pos = 5 + 4 + 2 + 32  # record header, handshake header, client version, random
        pos += 1 + record[pos]  # session id
        pos += 2 + int.from_bytes(record[pos : pos + 2], "big")  # cipher suites
        pos += 1 + record[pos]  # compression methods
        end = pos + 2 + int.from_bytes(record[pos : pos + 2], "big")
        pos += 2
        while pos + 4 <= end:
            kind, size = int.from_bytes(record[pos : pos + 2], "big"), int.from_bytes(record[pos + 2 : pos + 4], "big")
            if kind == 0:  # server_name: list length, name type, name length, name
                length = int.from_bytes(record[pos + 7 : pos + 9], "big")
                return record[pos + 9 : pos + 9 + length].decode("ascii", "replace")
            pos += 4 + size
    except IndexError:
        pass
    return ""


def _parse_http(head: bytes) -> tuple[str, str]:
    lines = head.decode("latin-1").split("\r\n")
    host = next((line.split(":", 1)[1].strip() for line in lines[1:] if line.lower().startswith("host:")), "")
    return lines[0], host


def _serve(conn: socket.socket, role: str, log_path: str) -> None:
    with conn:
        conn.settimeout(TIMEOUT)
        local, port = conn.getsockname()[:2]
        event: dict[str, Any] = {"role": role, "local": local.removeprefix("::ffff:"), "port": port}
        head = _read_head(conn)
        if head[:1] == b"\x16":
            event.update(tls=True, sni=_sni(head))
            _log(log_path, event)
            return
        line, host = _parse_http(head)
        event.update(tls=False, line=line, host=host)
        _log(log_path, event)
        try:
            if role == "proxy" and line.upper().startswith("CONNECT "):
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            elif line:
                body = f"{role} saw {line}\n".encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
        except OSError:
            pass


def _listen(family: int, address: str, port: int) -> socket.socket:
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    server.bind((address, port))
    server.listen(128)
    return server


def _accept(server: socket.socket, role: str, log_path: str) -> None:
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, role, log_path), daemon=True).start()


def main(argv: list[str]) -> None:
    log_path, proxy_port, origin_ports = argv[0], int(argv[1]), sorted({int(p) for p in argv[2:]})
    servers = [(_listen(socket.AF_INET, "127.0.0.1", proxy_port), "proxy")]
    servers += [(_listen(socket.AF_INET6, "::", port), "origin") for port in origin_ports]
    threads = [threading.Thread(target=_accept, args=(s, role, log_path), daemon=True) for s, role in servers]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    sys.stdin.read()  # run until the harness closes our stdin (or kills us)


if __name__ == "__main__":
    main(sys.argv[1:])
