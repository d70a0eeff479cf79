"""A helper the node-isolation tests run inside their own network namespaces (`ip netns exec NS python3 ...`).

    origin LOG PORT       accept TCP on [::]:PORT (IPv4 too); write one JSON line per connection
                          (the local address it arrived on, and the first request line) to LOG
    client CASES PROXY    send each case of the JSON file CASES through the proxy at PROXY (host:port)
                          as a plain GET and as a CONNECT; print one JSON object per case

Only the standard library, so it runs under any python3. Every socket has a timeout.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

TIMEOUT = 5.0


def _first_line(sock: socket.socket) -> str:
    data = b""
    while b"\n" not in data and len(data) < 8192:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0].decode("latin-1").rstrip("\r")


def origin(log_path: str, port: int) -> None:
    server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    server.bind(("::", port))
    server.listen(128)
    lock = threading.Lock()
    print("ready", flush=True)

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(TIMEOUT)
            local = conn.getsockname()[0].removeprefix("::ffff:")
            with lock, open(log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps({"local": local, "event": "accept"}) + "\n")
            try:
                line = _first_line(conn)
            except OSError:
                line = ""
            with lock, open(log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps({"local": local, "event": "request", "line": line}) + "\n")
            body = f"origin at {local} saw {line}\n".encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    while True:
        conn, _ = server.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def _exchange(proxy: tuple[str, int], request: bytes, then: bytes | None = None) -> tuple[str, str]:
    """Send a request to the proxy; the status line, and after a 200 to a CONNECT, the tunnelled answer's."""
    with socket.create_connection(proxy, timeout=TIMEOUT) as sock:
        sock.sendall(request)
        status = _first_line(sock)
        if then is None or " 200 " not in f"{status} ":
            return status, ""
        # tinyproxy's tunnel answer ends with an empty line; read past it, then talk to the origin.
        sock.sendall(then)
        rest = b""
        try:
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                rest += chunk
        except OSError:
            pass
        lines = [line for line in rest.decode("latin-1").splitlines() if line.startswith("HTTP/")]
        return status, lines[0] if lines else ""


def client(cases_path: str, proxy_addr: str) -> None:
    host, _, port = proxy_addr.rpartition(":")
    proxy = (host, int(port))
    with open(cases_path, encoding="utf-8") as handle:
        cases: list[dict[str, Any]] = json.load(handle)
    lock = threading.Lock()

    def run(case: dict[str, Any]) -> None:
        authority = _authority(case["host"], case["port"])
        result: dict[str, Any] = {"id": case["id"]}
        get = f"GET http://{authority}/get-{case['id']} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        connect = f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
        inner = f"GET /tunnel-{case['id']} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
        for method, request, then in (("get", get, None), ("connect", connect, inner.encode())):
            try:
                result[method] = _exchange(proxy, request.encode(), then)
            except OSError as exc:
                result[method] = [f"error: {exc}", ""]
        with lock:
            print(json.dumps(result), flush=True)

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(run, cases))


if __name__ == "__main__":
    if sys.argv[1] == "origin":
        origin(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
