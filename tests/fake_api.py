"""An API client for a loopback HTTP server that plays the API server: `answer(path)` gives each GET's status and
body. For the reads the stack program and `check` make before anything else (tests/component)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from typing import Any


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
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
