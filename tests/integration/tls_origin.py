"""An HTTPS origin the trust test runs inside its network namespace (`ip netns exec NS python3 tls_origin.py ...`).

    tls_origin.py NAME ADDR PORT CERT KEY LOG

Serves GET on ADDR:PORT over TLS with CERT/KEY (HTTP/1.1 only), answers `NAME saw PATH` and appends one JSON line
per request to LOG; prints "ready" once listening. Only the standard library, so it runs under any python3.
"""

from __future__ import annotations

import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME, ADDR, PORT, CERT, KEY, LOG = sys.argv[1:7]
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    timeout = 10

    def do_GET(self) -> None:
        with LOCK, open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps({"origin": NAME, "path": self.path}) + "\n")
        body = f"{NAME} saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads LOG."""


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks for the host's FQDN (a DNS query): not here.
        import socketserver

        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = NAME, int(PORT)


context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
context.set_alpn_protocols(["http/1.1"])
server = Server((ADDR, int(PORT)), Handler)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
