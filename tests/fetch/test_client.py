"""Fetcher behaviour against a real server: redirects, decoding, limits, retries, timeouts, keep-alive."""

from __future__ import annotations

import asyncio
import gzip
import time
import tracemalloc
import zlib

import pytest

from harvester.fetch import (
    ConnectionFailed,
    DecodingError,
    Fetcher,
    FetchError,
    FetchTimeout,
    TooManyRedirects,
    UnsupportedScheme,
    check_url,
    parse_retry_after,
)
from harvester.words import size
from tests.fetch.fetch_helpers import Reply, Seen, TestServer, local_policy

pytestmark = pytest.mark.anyio

KiB = 1024
MiB = 1024 * KiB


async def fetch(fetcher: Fetcher, url: str, max_bytes: int = MiB, **kwargs: object):
    async with fetcher.open(url, max_bytes=max_bytes, **kwargs) as response:  # type: ignore[arg-type]
        body = await response.read()
        return response, body


# Redirects


async def test_redirect_chain_recorded(server: TestServer) -> None:
    server.reply("/a", 301, Location="/b")
    server.reply("/b", 302, Location=server.url("/c"))
    server.reply("/c", 200, b"landed")
    async with Fetcher(local_policy()) as fetcher:
        response, body = await fetch(fetcher, server.url("/a"))
    assert body == b"landed"
    assert response.requested_url == server.url("/a")
    assert response.url == server.url("/c")
    assert response.redirects == (server.url("/a"), server.url("/b"))
    assert response.status_code == 200


async def test_on_sent_is_called_as_each_request_goes_on_the_wire_its_connection_made(server: TestServer) -> None:
    """A host's pace is kept from when its requests go out: a new connection (here a name resolving in
    0.2 s) comes between a request's turn and its sending. ``on_sent`` is called once a request, each
    redirect hop included, after the connection was made."""
    from harvester.fetch import GuardedBackend, parse_networks

    async def slow(host: str, port: int) -> list[str]:
        await asyncio.sleep(0.2)
        return ["127.0.0.1"]

    server.reply("/a", 301, Location="/b")
    server.reply("/b", 200, b"landed")
    sent: list[float] = []
    backend = GuardedBackend(parse_networks(["127.0.0.1/32"]), resolver=slow)
    async with Fetcher(local_policy(), network_backend=backend) as fetcher:
        began = time.monotonic()
        _, body = await fetch(
            fetcher, server.url("/a", host="slow.test"), on_sent=lambda: sent.append(time.monotonic())
        )
    assert body == b"landed" and [seen.path for seen in server.requests] == ["/a", "/b"]
    assert len(sent) == 2
    assert sent[0] - began >= 0.2


def _chain(server: TestServer, length: int) -> None:
    for i in range(length):
        server.reply(f"/r{i}", 307, Location=f"/r{i + 1}")
    server.reply(f"/r{length}", 200, b"end")


async def test_five_redirects_followed(server: TestServer) -> None:
    _chain(server, 5)
    async with Fetcher(local_policy()) as fetcher:
        response, body = await fetch(fetcher, server.url("/r0"))
    assert body == b"end"
    assert len(response.redirects) == 5


async def test_more_than_five_redirects_refused(server: TestServer) -> None:
    _chain(server, 6)
    async with Fetcher(local_policy()) as fetcher:
        with pytest.raises(TooManyRedirects) as caught:
            await fetch(fetcher, server.url("/r0"))
    assert len(caught.value.redirects) == 6
    assert not caught.value.retryable
    assert server.hits("/r6") == 0


async def test_redirect_loop_refused(server: TestServer) -> None:
    server.reply("/loop", 302, Location="/loop")
    async with Fetcher(local_policy()) as fetcher:
        with pytest.raises(TooManyRedirects):
            await fetch(fetcher, server.url("/loop"))
    assert server.hits("/loop") == 6


@pytest.mark.parametrize("location", ["ftp://example.com/file", "file:///etc/passwd", "gopher://x/"])
async def test_redirect_to_other_schemes_refused(server: TestServer, location: str) -> None:
    server.reply("/", 302, Location=location)
    async with Fetcher(local_policy()) as fetcher:
        with pytest.raises(UnsupportedScheme) as caught:
            await fetch(fetcher, server.url("/"))
    assert caught.value.url.startswith(location.partition(":")[0] + ":")
    assert caught.value.redirects == (server.url("/"),)


async def test_other_schemes_refused_up_front() -> None:
    async with Fetcher(local_policy()) as fetcher:
        for url in ("file:///etc/passwd", "ftp://127.0.0.1/", "javascript:alert(1)", "/relative"):
            with pytest.raises(UnsupportedScheme):
                await fetch(fetcher, url)


async def test_credentials_do_not_follow_a_redirect_to_another_origin(server: TestServer, server2: TestServer) -> None:
    from harvester.fetch import parse_networks

    server.reply("/", 302, Location=server2.url("/there"))
    server2.reply("/there", 200, b"ok")
    policy = local_policy(allow_networks=parse_networks(["127.0.0.0/8"]))
    headers = {"Authorization": "Bearer s3cret", "If-None-Match": '"v1"'}
    async with Fetcher(policy) as fetcher:
        _, body = await fetch(fetcher, server.url("/"), headers=headers)
    assert body == b"ok"
    assert server.requests[0].headers["authorization"] == "Bearer s3cret"
    assert "authorization" not in server2.requests[0].headers
    assert server2.requests[0].headers["if-none-match"] == '"v1"'


async def test_unfollowed_3xx_is_a_response(server: TestServer) -> None:
    server.reply("/nm", 304)
    server.reply("/nl", 302)  # no Location
    async with Fetcher(local_policy()) as fetcher:
        response, body = await fetch(fetcher, server.url("/nm"), headers={"If-None-Match": '"x"'})
        assert (response.status_code, body, response.complete) == (304, b"", True)
        response, _ = await fetch(fetcher, server.url("/nl"))
        assert response.status_code == 302
    assert server.requests[0].headers["if-none-match"] == '"x"'


# Bodies: decoding and limits


async def test_gzip_content_encoding_undone(server: TestServer) -> None:
    page = b"<html>" + b"hello " * 5000 + b"</html>"
    server.reply("/gz", 200, gzip.compress(page), Content_Encoding="gzip", Content_Type="text/html; charset=UTF-8")
    server.reply("/xgz", 200, gzip.compress(page), Content_Encoding="x-gzip")
    server.reply("/deflate", 200, zlib.compress(page), Content_Encoding="deflate")
    server.reply("/identity", 200, page, Content_Encoding="identity")
    async with Fetcher(local_policy()) as fetcher:
        for path in ("/gz", "/xgz", "/deflate", "/identity"):
            response, body = await fetch(fetcher, server.url(path))
            assert body == page, path
            assert response.complete
            assert response.truncated is None
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"


async def test_content_type_and_charset(server: TestServer) -> None:
    server.reply("/", 200, b"x", Content_Type='Text/HTML; Charset="ISO-8859-1"')
    async with Fetcher(local_policy()) as fetcher:
        response, _ = await fetch(fetcher, server.url("/"))
    assert (response.content_type, response.charset) == ("text/html", "iso-8859-1")


async def test_gzipped_document_without_content_encoding_is_left_alone(server: TestServer) -> None:
    document = gzip.compress(b"<urlset/>")
    server.reply("/sitemap.xml.gz", 200, document, Content_Type="application/gzip")
    async with Fetcher(local_policy()) as fetcher:
        _, body = await fetch(fetcher, server.url("/sitemap.xml.gz"))
    assert body == document  # the sitemap reader inflates this layer, not the fetcher


async def test_only_one_content_encoding_layer_undone(server: TestServer) -> None:
    inner = gzip.compress(b"<urlset/>")
    server.reply("/twice", 200, gzip.compress(inner), Content_Encoding="gzip")
    server.reply("/stacked", 200, gzip.compress(inner), Content_Encoding="gzip, gzip")
    server.reply("/br", 200, b"\x0b\x02\x80hello\x03", Content_Encoding="br")
    async with Fetcher(local_policy()) as fetcher:
        _, body = await fetch(fetcher, server.url("/twice"))
        assert body == inner
        for path in ("/stacked", "/br"):
            with pytest.raises(DecodingError, match="unsupported Content-Encoding"):
                await fetch(fetcher, server.url(path))


async def test_corrupt_gzip_is_a_decoding_error(server: TestServer) -> None:
    server.reply("/", 200, b"\x1f\x8b\x08\x00garbage-garbage-garbage", Content_Encoding="gzip")
    async with Fetcher(local_policy()) as fetcher:
        with pytest.raises(DecodingError, match="corrupt"):
            await fetch(fetcher, server.url("/"))


async def test_gzip_cut_short_is_not_complete(server: TestServer) -> None:
    whole = gzip.compress(b"a" * 100_000 + bytes(range(256)) * 100)
    server.reply("/", 200, whole[: len(whole) // 2], Content_Encoding="gzip")
    async with Fetcher(local_policy()) as fetcher:
        response, body = await fetch(fetcher, server.url("/"))
    assert body
    assert not response.complete
    assert response.truncated is None


async def test_page_over_the_limit_is_truncated(server: TestServer) -> None:
    server.reply("/big", 200, b"x" * 100_000)
    server.reply("/exact", 200, b"y" * 10_000)
    server.routes["/chunked"] = lambda _s: Reply(200, (b"z" * 4096 for _ in range(10)))
    async with Fetcher(local_policy()) as fetcher:
        response, body = await fetch(fetcher, server.url("/big"), max_bytes=10_000)
        assert body == b"x" * 10_000
        assert response.truncated == "larger than 9.8 KiB"
        assert not response.complete
        response, body = await fetch(fetcher, server.url("/exact"), max_bytes=10_000)
        assert (len(body), response.truncated, response.complete) == (10_000, None, True)
        response, body = await fetch(fetcher, server.url("/chunked"), max_bytes=10_000)
        assert (len(body), response.truncated) == (10_000, "larger than 9.8 KiB")


def _bomb(size: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    parts = [compressor.compress(zeros) for _ in range(size // MiB)]
    return b"".join([*parts, compressor.flush()])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb(128 * MiB)  # ~130 KiB on the wire


async def test_gzip_bomb_is_cut_with_little_memory(server: TestServer, bomb: bytes) -> None:
    server.reply("/bomb", 200, bomb, Content_Encoding="gzip", Content_Type="application/xml")
    limit = MiB
    async with Fetcher(local_policy()) as fetcher:
        tracemalloc.start()
        try:
            produced = 0
            largest = 0
            async with fetcher.open(server.url("/bomb"), max_bytes=limit) as response:
                async for chunk in response.iter_bytes():
                    produced += len(chunk)
                    largest = max(largest, len(chunk))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert produced <= limit + 64 * KiB
    assert largest <= 64 * KiB
    assert response.truncated == f"larger than {size(limit)}"
    assert not response.complete
    assert peak < 4 * MiB, peak  # the bomb is 128 MiB inflated


async def test_endless_compressed_stream_bounded_by_its_encoded_size(server: TestServer) -> None:
    empty_member = gzip.compress(b"")

    def endless(_seen: Seen) -> Reply:
        return Reply(200, (empty_member * 1000 for _ in range(10_000)), {"Content-Encoding": "gzip"})

    server.routes["/"] = endless
    async with Fetcher(local_policy()) as fetcher:
        response, body = await fetch(fetcher, server.url("/"), max_bytes=10_000)
    assert body == b""
    assert response.truncated is not None
    assert "compressed" in response.truncated


async def test_body_broken_off_raises_and_is_not_complete(server: TestServer) -> None:
    server.reply("/", 200, b"only part", Content_Length="100000", Connection="close")
    async with Fetcher(local_policy()) as fetcher, fetcher.open(server.url("/"), max_bytes=MiB) as response:
        with pytest.raises(ConnectionFailed, match="body broken off") as caught:
            await response.read()
    assert caught.value.retryable
    assert not response.complete
    assert response.truncated is None


async def test_body_read_once(server: TestServer) -> None:
    server.reply("/", 200, b"abc")
    async with Fetcher(local_policy()) as fetcher, fetcher.open(server.url("/"), max_bytes=10) as response:
        assert await response.read() == b"abc"
        with pytest.raises(RuntimeError):
            await response.read()


# Retries


async def test_503_then_200_retried(server: TestServer) -> None:
    server.sequence("/", Reply(503, b"busy"), Reply(200, b"ok"))
    async with Fetcher(local_policy(retries=2)) as fetcher:
        response, body = await fetch(fetcher, server.url("/"))
    assert (response.status_code, body, response.attempts) == (200, b"ok", 2)
    assert server.hits("/") == 2


async def test_retries_exhausted_hand_over_the_last_response(server: TestServer) -> None:
    server.reply("/", 500, b"broken")
    async with Fetcher(local_policy(retries=2)) as fetcher:
        response, body = await fetch(fetcher, server.url("/"))
    assert (response.status_code, body, response.attempts) == (500, b"broken", 3)
    assert server.hits("/") == 3


async def test_429_retry_after_honoured(server: TestServer) -> None:
    server.sequence("/", Reply(429, b"", {"Retry-After": "1"}), Reply(200, b"ok"))
    async with Fetcher(local_policy(retries=1)) as fetcher:
        started = time.monotonic()
        response, _ = await fetch(fetcher, server.url("/"))
        waited = time.monotonic() - started
    assert response.status_code == 200
    assert waited >= 1.0


async def test_retry_after_beyond_the_maximum_is_not_waited_for(server: TestServer) -> None:
    server.reply("/", 429, b"", Retry_After="3600")
    async with Fetcher(local_policy(retries=2, backoff_max=5.0)) as fetcher:
        started = time.monotonic()
        response, _ = await fetch(fetcher, server.url("/"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3600"
    assert time.monotonic() - started < 1.0
    assert server.hits("/") == 1


@pytest.mark.parametrize("status", [404, 403, 410, 400, 401])
async def test_final_4xx_not_retried(server: TestServer, status: int) -> None:
    server.reply("/", status, b"no")
    async with Fetcher(local_policy(retries=2)) as fetcher:
        response, _ = await fetch(fetcher, server.url("/"))
    assert response.status_code == status
    assert server.hits("/") == 1


async def test_connection_errors_retried_then_raised() -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with Fetcher(local_policy(retries=2)) as fetcher:
        with pytest.raises(FetchError) as caught:
            await fetch(fetcher, f"http://127.0.0.1:{port}/")
    assert caught.value.retryable
    assert type(caught.value).__name__ == "ConnectionFailed"


def test_backoff_is_bounded_full_jitter() -> None:
    fetcher = Fetcher(local_policy(backoff_base=0.5, backoff_max=3.0))
    for attempt in range(8):
        ceiling = min(3.0, 0.5 * 2**attempt)
        delays = [fetcher._backoff(attempt) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling / 2  # jitter spans the range, not a constant


def test_parse_retry_after() -> None:
    from datetime import UTC, datetime

    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:30 GMT", now=now) == 30.0
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


# Timeouts


async def test_slow_server_raises_fetch_timeout(server: TestServer) -> None:
    server.routes["/slow"] = lambda _s: Reply(200, b"late", delay=1.5)
    async with Fetcher(local_policy(read_timeout=0.3)) as fetcher:
        started = time.monotonic()
        with pytest.raises(FetchTimeout) as caught:
            await fetch(fetcher, server.url("/slow"))
    assert time.monotonic() - started < 1.2
    assert caught.value.retryable


async def test_timeouts_are_retried(server: TestServer) -> None:
    server.sequence("/", Reply(200, b"late", delay=1.0), Reply(200, b"fast"))
    async with Fetcher(local_policy(read_timeout=0.3, retries=1)) as fetcher:
        response, body = await fetch(fetcher, server.url("/"))
    assert (body, response.attempts) == (b"fast", 2)


async def test_total_timeout_covers_a_slow_body(server: TestServer) -> None:
    def trickle(_seen: Seen) -> Reply:
        return Reply(200, (b"." * 100 for _ in range(50)), chunk_delay=0.1)

    server.routes["/"] = trickle
    async with Fetcher(local_policy(read_timeout=1.0, total_timeout=0.6)) as fetcher:
        started = time.monotonic()
        with pytest.raises(FetchTimeout, match="total time limit"):
            await fetch(fetcher, server.url("/"))
    assert time.monotonic() - started < 1.5


# Connection reuse and identity


async def test_keep_alive_reuses_one_connection(server: TestServer) -> None:
    server.reply("/page", 200, b"p" * 5000)
    server.reply("/moved", 301, b"see /page", Location="/page")
    async with Fetcher(local_policy()) as fetcher:
        for _ in range(5):
            _, body = await fetch(fetcher, server.url("/page"))
            assert len(body) == 5000
        await fetch(fetcher, server.url("/moved"))
    assert len(server.requests) == 7
    assert server.connections == 1


async def test_user_agent_sent(server: TestServer) -> None:
    server.reply("/", 200, b"")
    async with Fetcher(local_policy()) as fetcher:
        await fetch(fetcher, server.url("/"))
    async with Fetcher(local_policy(user_agent="Harvester/9 (+https://example.org/bot)")) as fetcher:
        await fetch(fetcher, server.url("/"))
    first, second = (seen.headers["user-agent"] for seen in server.requests)
    assert first.startswith("Harvester/")
    assert "+https://github.com/harvester-crawler/harvester" in first
    assert second == "Harvester/9 (+https://example.org/bot)"


async def test_cookies_are_not_carried(server: TestServer) -> None:
    server.reply("/set", 200, b"", Set_Cookie="session=abc; Path=/")
    server.reply("/next", 200, b"")
    async with Fetcher(local_policy()) as fetcher:
        await fetch(fetcher, server.url("/set"))
        await fetch(fetcher, server.url("/next"))
    assert "cookie" not in server.requests[1].headers


def test_check_url() -> None:
    check_url("https://example.com/a?b=c")
    with pytest.raises(UnsupportedScheme):
        check_url("mailto:someone@example.com")
    with pytest.raises(FetchError, match="longer than 2048"):
        check_url("https://example.com/" + "a" * 3000)
    with pytest.raises(FetchError, match="no host"):
        check_url("http:///path")


def test_open_returns_a_context_manager() -> None:
    # The engine writes `async with fetcher.open(...)`: open() must not become a coroutine.
    fetcher = Fetcher(local_policy())
    manager = fetcher.open("http://127.0.0.1:1/", max_bytes=10)
    assert hasattr(manager, "__aenter__")
    assert hasattr(manager, "__aexit__")


def test_httpcore_finds_the_event_loop_without_an_import_per_request():
    """httpcore asks sniffio which event loop runs, on every request; without sniffio installed each ask
    was a failed import, a search of sys.path (a fifth of a local page crawl's CPU, measured). It must
    be installed (a runtime dependency), and found once."""
    import importlib.util
    import sys

    from httpcore._synchronization import current_async_library

    assert importlib.util.find_spec("sniffio") is not None

    async def which() -> str:
        return current_async_library()

    assert asyncio.run(which()) == "asyncio"
    assert "sniffio" in sys.modules


async def test_a_header_the_caller_gives_replaces_the_default_of_that_name_whatever_its_case() -> None:
    """``headers={"accept": ...}`` is the Accept header, sent once: not a second one beside Accept: */*."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    seen: list[bytes] = []

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            seen.append(connection.recv(65536))
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/sitemap.xml"
    async with (
        Fetcher(local_policy()) as fetcher,
        fetcher.open(url, max_bytes=100, headers={"accept": "application/xml"}) as response,
    ):
        assert await response.read() == b"ok"
    thread.join(5)
    listener.close()
    lines = [line.lower() for line in seen[0].split(b"\r\n")]
    assert [line for line in lines if line.startswith(b"accept:")] == [b"accept: application/xml"]
    assert sum(line.startswith(b"user-agent:") for line in lines) == 1


async def test_the_body_and_headers_as_received_are_there_for_an_archive(server: TestServer) -> None:
    """What a WARC response record keeps: the status line, the headers in order as written, and the body
    with its Content-Encoding still on, beside the decoded body the engine reads."""
    import io

    page = b"<html>" + b"caf\xc3\xa9 " * 3000 + b"</html>"
    sent = gzip.compress(page)
    server.reply("/gz", 200, sent, Content_Encoding="gzip", X_First="1", Content_Type="text/html")
    raw = io.BytesIO()
    async with (
        Fetcher(local_policy()) as fetcher,
        fetcher.open(server.url("/gz"), max_bytes=MiB, headers={"If-None-Match": '"v0"'}) as response,
    ):
        response.raw_sink = raw
        body = b"".join([chunk async for chunk in response.iter_bytes()])

    assert body == page and raw.getvalue() == sent
    head = response.exchange
    assert (head.http_version, head.status, head.reason) == ("HTTP/1.1", 200, "OK")
    names = [name for name, _ in head.response_headers]
    assert names.index("Content-Encoding") < names.index("X-First") < names.index("Content-Type")
    assert ("If-None-Match", '"v0"') in head.request_headers
    assert any(name == "User-Agent" for name, _ in head.request_headers)
