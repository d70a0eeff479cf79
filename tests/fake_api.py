"""An API client for a loopback HTTP server that plays the API server: `answer(path)` gives each GET's status and
body (bytes, or an iterator of chunks: a streamed log). For the reads the stack program and `check` make before
anything else (tests/component)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any


class CutShortError(Exception):
    """Raised by a streamed body: the server closes the connection there, without the chunked body's end."""


@contextlib.contextmanager
def api_server(answer: Callable[[str], tuple[Any, ...]], userinfo: str = "") -> Iterator[Any]:
    """The client, its host `http://[userinfo@]127.0.0.1:PORT`; the server stops when the block ends."""
    from kubernetes import client

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answered = answer(self.path.split("?")[0])
            status, body = answered[0], answered[1]
            content_type = answered[2] if len(answered) > 2 else "application/json"  # a log is text/plain
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            # Chunks as they are made (a pod's log streams so); CutShortError: the connection lost before the end.
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for chunk in body:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except CutShortError:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        configuration = client.Configuration()
        configuration.host = f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{server.server_address[1]}"
        yield client.ApiClient(configuration)
    finally:
        server.shutdown()
        server.server_close()
