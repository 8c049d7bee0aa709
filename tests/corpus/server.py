"""A route-table HTTP server for the corpus: each path answers exactly what a nasty site would send.

pytest-httpserver (werkzeug) cannot promise a ``Content-Length`` and then hang up halfway, which is how a
cut download looks on the wire, so this is a small ``ThreadingHTTPServer`` instead. A route says the
status, the headers and the body (bytes, an iterable of chunks sent with chunked encoding, or a callable
of the request), optionally a redirect, a delay, or "announce the whole body but close after N bytes".
A path can also hold a list of routes, answered in turn (the last one repeats): a page that fails twice
and then recovers.

Every request is logged (path, time, headers), so tests can assert what was *not* fetched: a refused
address never sees a request, a sitemap is read once, retries are bounded. With ``kernel_times`` a
request's time is when the kernel received its first bytes, not when a server thread got to read them:
this process may be busy (moto, served from it to the Lambda containers of the AWS politeness tests, held
its threads up to 0.27 s, and two requests sent 0.2 s apart were logged together). Linux stamps received
packets only while some socket asks for it, and turns stamping on in deferred kernel work: a server that
sets the option and is sent its first request at once may get it unstamped on a loaded machine (timed
when read, 0.3 s late). So this process keeps one stamping socket open for its life, and a server with
``kernel_times`` starts only once stamps are seen taken at arrival.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from harvester.demo.site import QuietServer

#: Linux's socket option for the kernel's receive time of a socket's data (``socket`` has no name for it).
_SO_TIMESTAMPNS = 35

XML = "application/xml"
HTML = "text/html; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Hit:
    """One request the server received."""

    path: str
    at: float  # time.monotonic() when it arrived
    headers: Mapping[str, str]


Body = bytes | str | Iterable[bytes] | Callable[[Hit], bytes | Iterable[bytes]]


@dataclass
class Route:
    """What one path answers.

    ``body`` may be bytes (or text, sent as UTF-8), an iterable of byte chunks (streamed with chunked
    transfer encoding, so a huge body never sits in memory), or a callable of the :class:`Hit` that
    returns either (a generator is used up by one request: wrap it in a callable to serve it again).
    ``location`` makes it a redirect (status 302 unless another 3xx is given). ``cut_after`` announces
    the full ``Content-Length`` but closes the connection after that many body bytes: a cut download.
    """

    body: Body = b""
    status: int = 200
    content_type: str | None = XML
    headers: Mapping[str, str] = field(default_factory=dict)
    location: str | None = None
    cut_after: int | None = None
    delay: float = 0.0


def redirect(location: str, status: int = 302) -> Route:
    return Route(status=status, location=location, content_type=None)


def not_found() -> Route:
    return Route(b"<html><body>Not found</body></html>", status=404, content_type=HTML)


class RouteServer:
    """A threaded HTTP/1.1 server answering from a route table; ``base`` is ``http://host:port``."""

    def __init__(self, host: str = "127.0.0.1", *, kernel_times: bool = False) -> None:
        self.kernel_times = kernel_times
        self.routes: dict[str, Route | list[Route]] = {}
        self.prefixes: dict[str, Route] = {}
        self.hits: list[Hit] = []
        #: Asked first for every request: a route to answer with instead of the table's (a 429 storm).
        self.override: Callable[[Hit], Route | None] | None = None
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._httpd = QuietServer((host, 0), _handler_for(self))
        if kernel_times:  # (set on the listener, a connection's first bytes are timed before it is accepted)
            _stamping_on()
            self._httpd.socket.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self.host = host
        self.port = self._httpd.server_address[1]
        self.base = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=f"corpus-{self.base}", daemon=True
        )

    # the route table -------------------------------------------------------------------------------

    def add(self, path: str, route: Route | list[Route]) -> str:
        """Serves ``route`` at ``path`` and returns its absolute URL."""
        self.routes[path] = route
        return self.url(path)

    def add_prefix(self, prefix: str, route: Route) -> None:
        """Serves ``route`` at every path under ``prefix`` that has no route of its own."""
        self.prefixes[prefix] = route

    def url(self, path: str) -> str:
        return self.base + path

    def update(self, routes: Mapping[str, Route | list[Route]]) -> None:
        self.routes.update(routes)

    # what happened ---------------------------------------------------------------------------------

    def hits_of(self, path: str) -> list[Hit]:
        return [h for h in self.hits if h.path == path]

    def count(self, path: str) -> int:
        return len(self.hits_of(path))

    def reset_log(self) -> None:
        with self._lock:
            self.hits.clear()
            self.max_in_flight = 0

    # lifecycle -------------------------------------------------------------------------------------

    def start(self) -> RouteServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # serving ---------------------------------------------------------------------------------------

    def _route_for(self, path: str) -> Route:
        route = self.routes.get(path)
        if route is None:
            route = self.routes.get(path.partition("?")[0])
        if route is None:
            route = next((r for prefix, r in self.prefixes.items() if path.startswith(prefix)), None)
        if route is None:
            return not_found()
        if isinstance(route, list):
            earlier = sum(1 for h in self.hits if h.path == path) - 1  # this hit is logged already
            return route[min(earlier, len(route) - 1)]
        return route

    def _enter(self, hit: Hit) -> None:
        with self._lock:
            self.hits.append(hit)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _handler_for(server: RouteServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # (headers and body go in two writes: Nagle held the body 40 ms)

        def log_message(self, format: str, *args: object) -> None:
            pass

        def setup(self) -> None:
            self._arrived: float | None = None
            if server.kernel_times:
                self.rbufsize = 0  # (no bytes of the next request read ahead of its timestamp)
                self.request.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            super().setup()

        def handle_one_request(self) -> None:
            if server.kernel_times:
                self._arrived = _arrival(self.connection)
            super().handle_one_request()

        def do_GET(self) -> None:
            at = self._arrived if self._arrived is not None else time.monotonic()
            hit = Hit(path=self.path, at=at, headers=dict(self.headers.items()))
            server._enter(hit)
            self._answering = True
            try:
                route = server.override(hit) if server.override else None
                self._answer(route or server._route_for(self.path), hit)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            finally:
                self._answered()

        def _answered(self) -> None:
            """The request leaves the in-flight count before the last bytes of its answer are written, not
            after: once they are, the client may take its next request to this host over another connection
            (a new handler thread) while this thread still waits for the GIL to count the end — on a loaded
            machine, one request too many in flight for a client that never had more than its limit out."""
            if self._answering:
                self._answering = False
                server._leave()

        def _answer(self, route: Route, hit: Hit) -> None:
            if route.delay:
                time.sleep(route.delay)
            status = route.status
            if route.location is not None and not 300 <= status < 400:
                status = 302
            self.send_response(status)
            if route.location is not None:
                self.send_header("Location", route.location)
            if route.content_type:
                self.send_header("Content-Type", route.content_type)
            for name, value in route.headers.items():
                self.send_header(name, value)
            body = route.body(hit) if callable(route.body) else route.body
            if isinstance(body, str):
                body = body.encode()
            if isinstance(body, bytes | bytearray):
                self._send_whole(bytes(body), route.cut_after)
            else:
                self._send_chunked(body)

        def _send_whole(self, body: bytes, cut_after: int | None) -> None:
            self.send_header("Content-Length", str(len(body)))
            if cut_after is not None:
                self.send_header("Connection", "close")
            self._answered()  # (the headers, then the body: no more waiting in between)
            self.end_headers()
            if cut_after is None:
                self.wfile.write(body)
                return
            self.wfile.write(body[:cut_after])
            self.wfile.flush()
            self.close_connection = True
            # Hang up hard, mid-body: the client has been promised len(body) bytes.
            self.connection.shutdown(socket.SHUT_RDWR)

        def _send_chunked(self, chunks: Iterable[bytes]) -> None:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self._answered()
            self.wfile.write(b"0\r\n\r\n")

    return Handler


_stamper: socket.socket | None = None
_stamping_seen = False
_stamper_lock = threading.Lock()


def _stamping_on(within: float = 5.0) -> None:
    """Keeps the kernel stamping received packets for this process's life and waits until it does: a
    datagram sent to the process's own stamping socket and read 20 ms later must carry its send time, not
    its read time. Raises if stamping is not on ``within`` seconds (the times would be wrong)."""
    global _stamper, _stamping_seen
    with _stamper_lock:
        if _stamping_seen:  # (the open stamping socket keeps it on)
            return
        if _stamper is None:
            _stamper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            _stamper.bind(("127.0.0.1", 0))
            _stamper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        deadline = time.monotonic() + within
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            while True:
                sent = time.time()
                sender.sendto(b"?", _stamper.getsockname())
                time.sleep(0.02)
                read = time.time()
                stamp = _stamp(_stamper.recvmsg(1, 64)[1])
                if stamp is not None and stamp - sent < (read - sent) / 2:
                    _stamping_seen = True
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError("the kernel does not stamp received packets (SO_TIMESTAMPNS)")


def _stamp(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The kernel's receive time (``time.time()`` clock) in a message's ancillary data, if there is one."""
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(payload) >= 16:
            seconds, nanos = struct.unpack("qq", payload[:16])
            return seconds + nanos / 1e9
    return None


def _arrival(connection: socket.socket) -> float | None:
    """When the kernel received the bytes waiting on ``connection`` (waits for some), on the
    ``time.monotonic()`` clock; None if the connection closed or the kernel gave no time."""
    try:
        data, ancillary, _, _ = connection.recvmsg(1, 64, socket.MSG_PEEK)
    except OSError:
        return None
    stamp = _stamp(ancillary) if data else None
    return None if stamp is None else stamp - _clock_offset()


def _clock_offset() -> float:
    """``time.time() - time.monotonic()``, read between two monotonic readings as close together as a few
    tries give (a thread switch between the two clocks' readings would shift a request's time by it)."""
    best = (float("inf"), 0.0)
    for _ in range(5):
        before = time.monotonic()
        real = time.time()
        after = time.monotonic()
        best = min(best, (after - before, real - (before + after) / 2))
        if best[0] < 0.0005:
            break
    return best[1]


@contextmanager
def serving(host: str = "127.0.0.1", *, kernel_times: bool = False) -> Iterator[RouteServer]:
    """A started :class:`RouteServer` on ``host`` (port chosen by the OS), stopped afterwards."""
    server = RouteServer(host, kernel_times=kernel_times).start()
    try:
        yield server
    finally:
        server.stop()
