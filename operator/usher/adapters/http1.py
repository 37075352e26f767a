"""A keep-alive HTTP/1.1 client for usher's own API calls: one request per connection at a time, TLS by the
standard library, nothing else. Only ``usher.adapters.kubeapi`` uses it (an import-linter contract).

Why not aiohttp, which kopf's watches use and which the Kubernetes client wraps: on every binding and
Event, aiohttp's request machinery (cookies, tracing hooks, timers, URL objects, a task per response) and
the Kubernetes client's parameter handling cost usher 155 us of CPU per call against the real API server;
``KubeApi`` over this client costs 89 us, TLS included (3,000 Event POSTs, 32 in flight). Two calls per
scheduled pod make that a tenth of usher's CPU per pod.

What it does, and no more: ``Content-Length`` and ``chunked`` bodies (and, without either, a body read
to the end of the connection), interim (1xx) answers skipped, ``Connection: close``, and a bounded pool
of idle connections reused most recent first and dropped after ``idle_timeout``. The caller bounds each
call (``asyncio.timeout``). Failures raise ``ConnectionError`` (an ``OSError``: the connection was lost or
the answer malformed; the request may or may not have been acted on); a connection a call failed on,
timed out on or was cancelled on is closed, never reused. No proxies (``KubeApi`` keeps the Kubernetes
client for a proxied API server), no compression (none is asked for), no pipelining.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

IDLE_TIMEOUT = 60.0
"""Seconds an idle connection is kept: below kube-apiserver's 90 s (its http.Server IdleTimeout), so the
server never closes one as it is reused, and long enough that a burst finds the connections (each a TLS
handshake, about a millisecond of CPU) the previous one opened."""
MAX_HEAD = 64 * 1024
"""Bytes a response's status line and headers may take."""


_AT_SIZE_LINE = -1
_IN_TRAILER = -2


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 as this client reads it, or the connection ended inside it."""


@dataclass(frozen=True, slots=True)
class Response:
    """A complete answer: status, headers (names as the server sent them; repeated ones joined by ", ")."""

    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class ResponseParser:
    """Turns the bytes of one response, as they arrive in any pieces, into a `Response`. Pure.

    ``feed`` returns the response once it is complete (None until then); ``end`` is told the connection
    was closed and returns the response if its body runs to the close."""

    __slots__ = ("_body", "_buffer", "_chunk_left", "_head", "_length", "_mode", "_no_body")

    def __init__(self, *, no_body: bool = False) -> None:
        self._buffer = bytearray()
        self._no_body = no_body
        """A HEAD request's answer: headers only, whatever they announce."""
        self._head: tuple[int, dict[str, str], bool] | None = None
        self._mode = ""
        """"length", "chunked" or "close" once the head is read."""
        self._length = 0
        self._chunk_left = _AT_SIZE_LINE
        """A chunked body: bytes of the current chunk still to come, or where in the framing the parser is."""
        self._body: list[bytes] = []

    def feed(self, data: bytes) -> Response | None:
        self._buffer += data
        if self._head is None and not self._read_head():
            return None
        if self._mode == "length":
            if len(self._buffer) < self._length:
                return None
            if len(self._buffer) > self._length:
                raise ProtocolError("more bytes than the response's Content-Length")
            return self._done(bytes(self._buffer))
        if self._mode == "chunked":
            return self._read_chunks()
        return None  # "close": the body runs to the end of the connection

    def end(self) -> Response:
        """The connection closed: the response, if it was complete without more bytes."""
        if self._head is not None and self._mode == "close":
            return self._done(bytes(self._buffer))
        raise ProtocolError("the connection closed before the response was complete")

    def _read_head(self) -> bool:
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    raise ProtocolError(f"response headers longer than {MAX_HEAD} bytes")
                return False
            lines = self._buffer[:end].decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
            status = int(code)
            if not 100 <= status < 200:
                break
            # An interim answer (103 Early Hints; usher never asks for 100 Continue): the final one follows.
        headers: dict[str, str] = {}
        lowered: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            name, value = name.strip(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
            key = name.lower()
            lowered[key] = f"{lowered[key]}, {value}" if key in lowered else value
        connection = lowered.get("connection", "").lower()
        keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        if self._no_body or status in (204, 304):
            self._mode, self._length = "length", 0
        elif "chunked" in lowered.get("transfer-encoding", "").lower():
            self._mode = "chunked"
        elif "content-length" in lowered:
            length = lowered["content-length"]
            if not length.isdigit():
                raise ProtocolError(f"bad Content-Length {length!r}")
            self._mode, self._length = "length", int(length)
        else:
            self._mode, keep_alive = "close", False
        self._head = (status, headers, keep_alive)
        return True

    def _read_chunks(self) -> Response | None:
        buffer = self._buffer
        while True:
            if self._chunk_left == _AT_SIZE_LINE:
                line_end = buffer.find(b"\r\n")
                if line_end < 0:
                    return None
                size = bytes(buffer[:line_end]).split(b";", 1)[0].strip()  # chunk extensions ignored
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size[:20]!r}") from None
                if self._chunk_left < 0:
                    raise ProtocolError(f"bad chunk size {size[:20]!r}")
                del buffer[: line_end + 2]
                if self._chunk_left == 0:
                    self._chunk_left = _IN_TRAILER
            elif self._chunk_left == _IN_TRAILER:  # trailer fields (ignored) up to an empty line
                if buffer[:2] == b"\r\n":
                    end = 2
                else:
                    found = buffer.find(b"\r\n\r\n")
                    if found < 0:
                        return None
                    end = found + 4
                if len(buffer) > end:
                    raise ProtocolError("more bytes after the chunked response")
                return self._done(b"".join(self._body))
            else:
                length = self._chunk_left
                if len(buffer) < length + 2:
                    return None
                if buffer[length : length + 2] != b"\r\n":
                    raise ProtocolError("a chunk does not end in CRLF")
                self._body.append(bytes(buffer[:length]))
                del buffer[: length + 2]
                self._chunk_left = _AT_SIZE_LINE

    def _done(self, body: bytes) -> Response:
        assert self._head is not None
        status, headers, keep_alive = self._head
        return Response(status, headers, body, keep_alive)


class _Connection(asyncio.Protocol):
    """One connection: sends a request, resolves the pending future with its response."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser: ResponseParser | None = None
        self._answer: asyncio.Future[Response] | None = None
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport: asyncio's are ``asyncio.Transport``s; uvloop's TLS one has the same methods without
        # being a subclass.
        self._transport = cast(asyncio.Transport, transport)

    def exchange(self, request: bytes, *, no_body: bool) -> asyncio.Future[Response]:
        assert self._transport is not None and self._answer is None
        self._parser = ResponseParser(no_body=no_body)
        self._answer = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return self._answer

    def data_received(self, data: bytes) -> None:
        if self._parser is None or self._answer is None or self._answer.done():
            self.close()  # bytes nobody asked for: the connection can no longer be trusted
            return
        try:
            response = self._parser.feed(data)
        except ProtocolError as error:
            self._fail(error)
            return
        if response is not None:
            self._answer.set_result(response)
            self._parser = self._answer = None

    def eof_received(self) -> bool | None:
        if self._parser is not None and self._answer is not None and not self._answer.done():
            try:
                self._answer.set_result(self._parser.end())
            except ProtocolError as error:
                self._fail(error)
        self.closed = True
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._answer is not None and not self._answer.done():
            error = ProtocolError(f"connection lost: {exc}" if exc else "connection closed by the server")
            self._answer.set_exception(error)
        self._parser = self._answer = None

    def _fail(self, error: ProtocolError) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(error)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


class HttpPool:
    """Requests to one server over at most ``limit`` kept-alive connections."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        limit: int = 64,
        idle_timeout: float = IDLE_TIMEOUT,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host, self._port = host, port
        self._ssl, self._server_hostname = ssl_context, server_hostname
        self._limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._idle_timeout = idle_timeout
        self._now = now
        self.connections_made = 0
        """Connections opened so far (a kept-alive pool opens few)."""

    async def request(self, head: bytes, body: bytes, *, no_body: bool = False) -> Response:
        """Send ``head`` (request line and headers, ending in an empty line) and ``body``; the response.

        The caller bounds the call (``asyncio.timeout``): a connection left by a timeout or a cancellation
        is closed."""
        async with self._slots:
            return await self._exchange(self._reuse() or await self._connect(), head + body, no_body)

    async def warm(self, count: int, head: bytes) -> int:
        """Open connections until ``count`` are open (``limit`` at most), each used once for ``head`` (a
        cheap GET without a body) and then kept idle; returns how many were opened and kept.

        A burst of calls then finds its connections: each one opened on a call's own path costs a TLS
        handshake of the loop's CPU (and the API server's) and a few loop turns of that call's latency.
        Each is used once because the API server drops a connection that never sent a request after 32 s
        (its ReadHeaderTimeout), and one that has only after 90 s idle, past ``idle_timeout``. A connection
        that fails is not retried: the calls open what they need."""
        wanted = min(count, self._limit) - len(self._open)
        if wanted <= 0:
            return 0
        kept = await asyncio.gather(*(self._warm_one(head) for _ in range(wanted)), return_exceptions=True)
        return sum(1 for k in kept if k is True)

    async def _warm_one(self, head: bytes) -> bool:
        async with self._slots:
            connection = await self._connect()
            await self._exchange(connection, head, False)
        return not connection.closed

    async def _exchange(self, connection: _Connection, request: bytes, no_body: bool) -> Response:
        """One request on ``connection``; afterwards it is kept idle (the answer allowing) or closed."""
        try:
            response = await connection.exchange(request, no_body=no_body)
        except BaseException:  # a timeout, a cancellation or a failure: its state is unknown
            connection.close()
            self._open.discard(connection)
            raise
        if response.keep_alive and not connection.closed:
            connection.idle_since = self._now()
            self._idle.append(connection)
        else:
            connection.close()
            self._open.discard(connection)
        return response

    def _reuse(self) -> _Connection | None:
        stale_before = self._now() - self._idle_timeout
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and connection.idle_since >= stale_before:
                return connection
            connection.close()
            self._open.discard(connection)
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        hostname = self._server_hostname if self._ssl is not None else None
        _, connection = await loop.create_connection(
            _Connection, self._host, self._port, ssl=self._ssl, server_hostname=hostname
        )
        self._open.add(connection)
        self.connections_made += 1
        return connection

    async def close(self) -> None:
        for connection in self._open:
            connection.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks
