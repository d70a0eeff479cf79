"""A helper the node-isolation tests run inside their own network namespaces (`ip netns exec NS python3 ...`).

    origin LOG PORT       accept TCP on [::]:PORT (IPv4 too); write one JSON line per connection
                          (the local address it arrived on, and the first request line) to LOG
    client CASES PROXY    send each case of the JSON file CASES through the proxy at PROXY (host:port)
                          as a plain GET and as a CONNECT; print one JSON object per case
    dns LOG ANSWERS ADDR...  a resolver on port 53 of each ADDR, UDP and TCP (one socket per address, so a
                          UDP answer leaves from the address asked): over UDP it answers every query truncated
                          (TC set, no records), so glibc asks again over TCP, where it answers A records from
                          the JSON object ANSWERS (name -> IPv4 addresses) and nothing else; one JSON line per
                          UDP query, TCP connection and TCP query (with the local address) to LOG

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


def _question(message: bytes) -> tuple[str, int, int]:
    """The query's name, type and the offset just past its question."""
    labels, offset = [], 12
    while message[offset]:
        length = message[offset]
        labels.append(message[offset + 1 : offset + 1 + length].decode("ascii").lower())
        offset += 1 + length
    qtype = int.from_bytes(message[offset + 1 : offset + 3], "big")
    return ".".join(labels), qtype, offset + 5


def _answer(query: bytes, addresses: list[str], truncated: bool) -> bytes:
    _, qtype, end = _question(query)
    records = [] if truncated or qtype != 1 else [socket.inet_aton(a) for a in addresses]
    flags = 0x8000 | 0x0400 | (0x0200 if truncated else 0) | (int.from_bytes(query[2:4], "big") & 0x0100) | 0x0080
    header = query[:2] + flags.to_bytes(2, "big") + (1).to_bytes(2, "big") + len(records).to_bytes(2, "big") + bytes(4)
    body = b"".join(b"\xc0\x0c" + b"\x00\x01\x00\x01" + (60).to_bytes(4, "big") + b"\x00\x04" + r for r in records)
    return header + query[12:end] + body


def dns(log_path: str, answers_json: str, addresses: list[str]) -> None:
    answers: dict[str, list[str]] = json.loads(answers_json)
    lock = threading.Lock()

    def log(row: dict[str, Any]) -> None:
        with lock, open(log_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")

    def bind(address: str, kind: socket.SocketKind) -> socket.socket:
        sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, kind)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, 53))
        return sock

    def serve_udp(udp: socket.socket, local: str) -> None:
        while True:
            query, peer = udp.recvfrom(4096)
            name, qtype, _ = _question(query)
            log({"transport": "udp", "local": local, "name": name, "type": qtype})
            udp.sendto(_answer(query, answers.get(name, []), truncated=True), peer)

    def accept(tcp: socket.socket) -> None:
        tcp.listen(64)
        while True:
            conn, _ = tcp.accept()
            threading.Thread(target=serve_tcp, args=(conn,), daemon=True).start()

    def serve_tcp(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(1.0)
            local = conn.getsockname()[0].removeprefix("::ffff:")
            log({"transport": "tcp", "event": "accept", "local": local})
            try:
                while True:
                    size = conn.recv(2, socket.MSG_WAITALL)
                    if len(size) < 2:
                        return
                    query = conn.recv(int.from_bytes(size, "big"), socket.MSG_WAITALL)
                    name, qtype, _ = _question(query)
                    log({"transport": "tcp", "event": "query", "local": local, "name": name, "type": qtype})
                    reply = _answer(query, answers.get(name, []), truncated=False)
                    conn.sendall(len(reply).to_bytes(2, "big") + reply)
            except (OSError, IndexError, UnicodeDecodeError):
                return

    threads = []
    for address in addresses:
        threads.append(threading.Thread(target=serve_udp, args=(bind(address, socket.SOCK_DGRAM), address)))
        threads.append(threading.Thread(target=accept, args=(bind(address, socket.SOCK_STREAM),)))
    for thread in threads:
        thread.daemon = True
        thread.start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    if sys.argv[1] == "origin":
        origin(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "dns":
        dns(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        raise SystemExit(f"unknown mode {sys.argv[1]!r}")
