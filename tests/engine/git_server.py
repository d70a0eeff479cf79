"""Bare git repositories served over git's smart HTTP protocol with TLS on 127.0.0.1, for `pulumi package add`.

The CLI clones a plugin's repository with go-git over https:// only (sdk/go/common/workspace/plugins.go,
parsePluginSpecFromURL: `http://` and `file://` are refused), so the tests serve one as GitHub would: `git
http-backend` (git's own CGI program) behind a small threaded HTTPS server, its certificate from a CA made on the
spot that the CLI trusts through SSL_CERT_FILE. Each request is recorded, so a test can show the clone came from here.

It listens on port 443 of an address of its own in 127.0.0.0/8 (root binds it; the tests run as root): the CLI
names the plugin's folder after the URL's host and port, and the Python host refuses to create a venv under a path
with a `:` ("Refusing to create a venv in ... because it contains the PATH separator :"), so a URL with a port gives
a plugin that cannot install.

It is also reached by a name, GIT_HOST, as GitHub is: the CLI takes a source for a git repository only when its
host looks like a domain name (sdk/go/common/workspace/plugins.go, urlRegex: `.[a-z]+/`). Given an address, it
clones and installs the plugin, but the package it records loses the scheme (`127.x.y.z/...`), which it then takes
for a local path, and it panics (cmd/pulumi/packagecmd/package_add.go:224, os.Stat fails and it calls IsDir on
nil). `cli_wrapper` runs the CLI in a mount namespace of its own whose /etc/hosts maps GIT_HOST to the server's
address: nothing outside that process tree sees the name.
"""

from __future__ import annotations

import errno
import gzip
import os
import random
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from tests.pki import make_ca, make_leaf

GIT_HOST = "git.proxy-component.test"  # .test: reserved (RFC 2606), never a real host


class GitServer:
    """Where the server listens (by address, and by GIT_HOST for a CLI run through `cli_wrapper`), the CA file a
    client must trust, the hosts file that names it, and the requests it answered (method, path)."""

    def __init__(self, address: str, ca_file: Path, hosts_file: Path) -> None:
        self.address = address
        self.url = f"https://{address}"
        self.named_url = f"https://{GIT_HOST}"
        self.ca_file = ca_file
        self.hosts_file = hosts_file
        self.requests: list[tuple[str, str]] = []
        # What each git-upload-pack POST asked for: "ls-refs" (protocol v2's listing of the refs, which newer clients
        # such as go-git v6 send by POST after GET info/refs) or "fetch" (objects: a clone or a pull).
        self.upload_pack: list[str] = []


def cli_wrapper(server: GitServer, cli: Path, bin_dir: Path) -> Path:
    """A `pulumi` in bin_dir that runs `cli` (and the plugins it starts) in a mount namespace of its own, with
    server.hosts_file over /etc/hosts; bin_dir goes first on the PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "pulumi"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# The CLI with the test git server's name in /etc/hosts, seen by this process tree alone.\n"
        f'exec unshare --mount --propagation private sh -c \'mount --bind "$0" /etc/hosts && exec "$@"\' '
        f'"{server.hosts_file}" "{cli}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request body, by Content-Length or chunked transfer encoding."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";", 1)[0].strip(), 16)
            if size == 0:
                handler.rfile.readline()
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _handler(root: Path, server: GitServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _cgi(self) -> None:
            url = urlsplit(self.path)
            server.requests.append((self.command, url.path))
            body = _read_body(self) if self.command == "POST" else b""
            if self.command == "POST" and url.path.endswith("/git-upload-pack"):
                plain = gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body
                server.upload_pack.append("ls-refs" if b"command=ls-refs" in plain else "fetch")
            env = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GATEWAY_INTERFACE": "CGI/1.1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": url.path,
                "QUERY_STRING": url.query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": self.client_address[0],
                "SERVER_PROTOCOL": "HTTP/1.1",
            }
            if self.headers.get("Content-Encoding"):
                env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
            if self.headers.get("Git-Protocol"):
                env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
            result = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=300)
            head, _, payload = result.stdout.partition(b"\r\n\r\n")
            if not _:
                head, _, payload = result.stdout.partition(b"\n\n")
            status = 200 if result.returncode == 0 else 500
            headers = []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _cgi  # noqa: N815 (BaseHTTPRequestHandler's names)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def _free_loopback_address() -> str:
    """An address in 127.0.0.0/8 whose port 443 is free (concurrent test runs each take their own)."""
    for _ in range(50):
        host = f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
        with socket.socket() as probe:
            try:
                probe.bind((host, 443))
            except OSError as exc:
                if exc.errno == errno.EACCES:
                    raise RuntimeError(
                        "the git server needs root to listen on port 443 (see the module's docstring)"
                    ) from exc
                continue
            return host
    raise RuntimeError("no address in 127.0.0.0/8 has port 443 free")


@contextmanager
def serve_git(root: Path, work: Path) -> Iterator[GitServer]:
    """Serve the bare repositories under `root` at https://127.x.y.z/<path> (and https://GIT_HOST/<path> through
    `cli_wrapper`); stopped on exit."""
    host = _free_loopback_address()
    ca = make_ca("proxy-component test git server CA")
    leaf = make_leaf(ca, host, GIT_HOST)
    hosts_file = work / "hosts"
    hosts_file.write_text(Path("/etc/hosts").read_text() + f"\n{host} {GIT_HOST}\n")
    ca_file, cert_file, key_file = work / "git-ca.pem", work / "git-cert.pem", work / "git-key.pem"
    ca_file.write_text(ca.cert_pem)
    cert_file.write_text(leaf.cert_pem + ca.cert_pem)
    key_file.write_text(leaf.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    httpd = ThreadingHTTPServer((host, 443), BaseHTTPRequestHandler)
    server = GitServer(host, ca_file, hosts_file)
    httpd.RequestHandlerClass = _handler(root, server)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
