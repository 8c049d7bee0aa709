"""Helpers for tests/fetch: a small HTTP/1.1 loopback server that counts connections and records requests.

pytest-httpserver cannot count accepted connections or stream a slow body, and the keep-alive and timeout
tests need both; this server is a few lines of ``http.server``.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harvester.fetch import FetchPolicy, parse_networks


@dataclass
class Reply:
    status: int = 200
    body: bytes | Iterable[bytes] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # before the status line
    chunk_delay: float = 0.0  # between body pieces of an iterable body


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    client: tuple[str, int]


Route = Callable[["Seen"], Reply]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_GET(self) -> None:
        app = self.server.app
        seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, self.client_address)
        app.requests.append(seen)
        route = app.routes.get(self.path.split("?")[0])
        reply = route(seen) if route else Reply(404, b"not found")
        if reply.delay:
            time.sleep(reply.delay)
        self.send_response(reply.status)
        headers = {k.lower(): v for k, v in reply.headers.items()}
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if isinstance(reply.body, bytes):
            if "content-length" not in headers:
                self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
        else:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in reply.body:
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    app: TestServer

    def get_request(self) -> tuple[socket.socket, tuple[str, int]]:
        request = super().get_request()
        self.app.connections += 1
        return request

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients hanging up on purpose (limits, timeouts) are part of the tests


class TestServer:
    __test__ = False

    def __init__(self, host: str = "127.0.0.1", ssl_context: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[Seen] = []
        self.connections = 0
        self.httpd = _HTTPServer((host, 0), _Handler)
        self.httpd.app = self
        if ssl_context is not None:
            self.httpd.socket = ssl_context.wrap_socket(self.httpd.socket, server_side=True)
        self.host = host
        self.port = self.httpd.server_address[1]
        self.scheme = "https" if ssl_context else "http"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"{self.scheme}://{host or self.host}:{self.port}{path}"

    def reply(self, path: str, status: int = 200, body: bytes = b"", **headers: str) -> None:
        self.routes[path] = lambda _seen: Reply(status, body, {k.replace("_", "-"): v for k, v in headers.items()})

    def route(self, path: str) -> Callable[[Route], Route]:
        def register(fn: Route) -> Route:
            self.routes[path] = fn
            return fn

        return register

    def sequence(self, path: str, *replies: Reply) -> None:
        """Answers ``path`` with each reply in turn, then the last one for ever."""
        queue = list(replies)

        def answer(_seen: Seen) -> Reply:
            return queue.pop(0) if len(queue) > 1 else queue[0]

        self.routes[path] = answer

    def hits(self, path: str) -> int:
        return sum(1 for seen in self.requests if seen.path == path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def local_policy(**changes: object) -> FetchPolicy:
    """Only 127.0.0.1 allowed, quick retries and timeouts."""
    values: dict[str, object] = {
        "allow_networks": parse_networks(["127.0.0.1/32"]),
        "retries": 0,
        "backoff_base": 0.01,
        "backoff_max": 2.0,
        "connect_timeout": 2.0,
        "read_timeout": 5.0,
        "total_timeout": 20.0,
    }
    values.update(changes)
    return FetchPolicy(**values)  # type: ignore[arg-type]
