"""A fault-injecting HTTP proxy in front of the real kube-apiserver, for e2e tests.

usher talks plain HTTP to the proxy on loopback; the proxy forwards every
request (watches stream through unchanged) to the apiserver over TLS with the
admin client certificate, except the calls a test asked to fail: those get a
real-looking ``Status`` with the chosen HTTP code before ever reaching the
apiserver, and the calls a test asked to stall: those are held without an
answer (never forwarded) until the client gives up, and the watches a test
asked to expire: those are cut, held while the test changes the cluster behind
them, then told 410 Gone, so the client lists again. Every exchange is logged
with this process's monotonic times (``exchanges``), so a test can order the
calls of two clients, each behind its own proxy. It runs its own event loop
in a thread, so tests stay synchronous.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from e2e.controlplane import Cluster, free_ports, write_kubeconfig

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


@dataclass
class Fault:
    """Answer the first ``times`` requests matching ``method`` and ``path`` (a regex) with ``status``.

    ``forward``: pass each such request on to the API server first and answer ``status`` instead of its
    reply, as when the reply is lost on the way back (the API server acted; its client cannot know).
    ``first_per_path``: only the first request to each path (one per object: its client's retry goes through).
    """

    method: str
    path: str
    status: int
    times: int
    retry_after: str | None = None
    forward: bool = False
    first_per_path: bool = False
    injected: int = 0
    paths: set[str] = field(default_factory=set)
    """The paths it answered."""

    def applies(self, method: str, path: str) -> bool:
        if method != self.method or not re.search(self.path, path) or self.injected >= self.times:
            return False
        return not (self.first_per_path and path in self.paths)


@dataclass
class Stall:
    """Hold every request matching ``method`` and ``path`` (a regex) unanswered until its client hangs up, or
    with ``delay``, for that many seconds before sending it on."""

    method: str
    path: str
    stalled: int = 0
    delay: float | None = None


@dataclass
class ExpiredWatch:
    """Break the watches of ``path`` (a regex; a GET with ``watch=true``) as an API server that lost their history.

    `cut` ends the matching watches being relayed, and from then on holds every new matching watch request
    unanswered: the client's watch is down, and nothing that happens meanwhile reaches it. `restore` answers
    each held request as the API server answers a watch from a compacted resourceVersion (200 with one ERROR
    event, code 410 Gone: the client must list again), and lets later requests through. Both are safe to
    call from the test's thread. The query strings of the LISTs of ``path`` sent after `restore` (its GETs
    without ``watch``) are kept in ``relists``.
    """

    path: str
    broken: bool = False
    held: int = 0
    """Watch requests held while broken (each answered 410 on restore)."""
    expired: int = 0
    """Held watch requests answered 410."""
    restored: bool = False
    relists: list[str] = field(default_factory=list)
    relaying: set[asyncio.Task[object]] = field(default_factory=set)
    """The handlers relaying a matching watch now (each cancelled by `cut`, which closes its connection)."""
    loop: asyncio.AbstractEventLoop | None = None
    """The proxy's loop, once a matching request came."""
    reopened: asyncio.Event = field(default_factory=asyncio.Event)

    def matches(self, request: web.Request) -> bool:
        return request.method == "GET" and re.search(self.path, request.path) is not None

    def cut(self) -> None:
        self.reopened = asyncio.Event()
        self.broken = True
        if self.loop is not None:
            for task in list(self.relaying):
                self.loop.call_soon_threadsafe(task.cancel)

    def restore(self) -> None:
        self.restored = True
        self.broken = False
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.reopened.set)

    async def answer(self, request: web.Request) -> web.StreamResponse | None:
        """The held 410 for a matching watch while broken; None to forward the request (and relay it)."""
        if request.query.get("watch") not in ("true", "1"):
            if self.restored:
                self.relists.append(request.query_string)
            return None
        self.loop = asyncio.get_running_loop()
        if not self.broken:
            task = asyncio.current_task()
            assert task is not None
            self.relaying.add(task)
            task.add_done_callback(self.relaying.discard)
            return None
        self.held += 1
        await self.reopened.wait()
        self.expired += 1
        gone = {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "too old resource version (injected by the e2e fault proxy)",
                "reason": "Expired",
                "code": 410,
            },
        }
        return web.Response(status=200, content_type="application/json", text=json.dumps(gone) + "\n")


@dataclass
class EveryNth:
    """Answer every ``every``-th request of any kind, watches included, with the next status of ``statuses``.

    Deterministic (a count, not a coin): ``every=10`` fails exactly one request in ten.
    """

    every: int
    statuses: tuple[int, ...] = (503, 429)
    retry_after: str | None = "1"
    matched: int = 0
    injected: Counter[int] = field(default_factory=Counter)


@dataclass(frozen=True)
class Exchange:
    """One request as the proxy saw it, in ``time.monotonic()`` seconds of the test process.

    ``arrived``: before it was forwarded (the API server cannot have acted on it earlier);
    ``answered``: when the API server's status line came back (it had acted by then).
    """

    method: str
    path: str
    status: int
    arrived: float
    answered: float


@dataclass
class FaultProxy:
    control_plane: Cluster
    faults: list[Fault] = field(default_factory=list)
    seen: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    port: int = 0
    stalls: list[Stall] = field(default_factory=list)
    expiring: list[ExpiredWatch] = field(default_factory=list)
    exchanges: list[Exchange] = field(default_factory=list)
    chaos: EveryNth | None = None
    forwarding: set[asyncio.Future[aiohttp.ClientResponse]] = field(default_factory=set)
    """Calls sent on to the API server whose status line has not come back yet."""
    unclaimed: set[asyncio.Future[aiohttp.ClientResponse]] = field(default_factory=set)
    """Of those, the ones whose client hung up: their answer is logged, then released unread."""

    def stall(self, method: str, path: str, delay: float | None = None) -> Stall:
        """Start holding matching requests, for ``delay`` seconds or until their client hangs up (safe to call
        from the test's thread)."""
        stall = Stall(method, path, delay=delay)
        self.stalls = [*self.stalls, stall]  # one assignment: the proxy's thread never sees a list mid-change
        return stall

    def expire_watches(self, path: str) -> ExpiredWatch:
        """Start watching for `ExpiredWatch.cut` on the watches of ``path`` (call before the client starts)."""
        fault = ExpiredWatch(path)
        self.expiring = [*self.expiring, fault]  # one assignment: the proxy's thread never sees a list mid-change
        return fault

    def answered(self, method: str, pattern: str) -> list[Exchange]:
        """The forwarded exchanges matching ``method`` and ``pattern``, in arrival order."""
        regex = re.compile(pattern)
        return [e for e in list(self.exchanges) if e.method == method and regex.search(e.path)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path) -> Path:
        """Plain HTTP to the proxy, no credentials: the proxy adds the admin certificate."""
        return write_kubeconfig(path, server=self.url, user="anonymous-through-proxy")

    def count(self, method: str, pattern: str, status: int) -> int:
        regex = re.compile(pattern)
        return sum(n for (m, p, s), n in self.seen.items() if m == method and s == status and regex.search(p))

    async def _handle(self, request: web.Request, session: aiohttp.ClientSession) -> web.StreamResponse:
        arrived = time.monotonic()
        for stall in self.stalls:
            if stall.method == request.method and re.search(stall.path, request.path):
                stall.stalled += 1
                if stall.delay is not None:
                    await asyncio.sleep(stall.delay)
                    break
                self.seen[(request.method, request.path, 0)] += 1
                await asyncio.get_running_loop().create_future()  # until the client hangs up (cancelled)
        for expiring in self.expiring:
            if expiring.matches(request):
                expired = await expiring.answer(request)
                if expired is not None:
                    self.seen[(request.method, request.path, 410)] += 1
                    return expired
        chaos = self.chaos
        if chaos is not None:
            chaos.matched += 1
            if chaos.matched % chaos.every == 0:
                status = chaos.statuses[sum(chaos.injected.values()) % len(chaos.statuses)]
                chaos.injected[status] += 1
                self.seen[(request.method, request.path, status)] += 1
                return _injected(status, chaos.retry_after, f"every {chaos.every}th request")
        for fault in self.faults:
            if fault.applies(request.method, request.path):
                fault.injected += 1
                fault.paths.add(request.path)
                self.seen[(request.method, request.path, fault.status)] += 1
                if fault.forward:
                    async with await self._forward(request, session, arrived) as lost:
                        await lost.read()
                return _injected(fault.status, fault.retry_after, f"{fault.injected}/{fault.times}")
        upstream = await self._forward(request, session, arrived)
        self.seen[(request.method, request.path, upstream.status)] += 1
        response = web.StreamResponse(
            status=upstream.status,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP},
        )
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientError):
            pass  # the client hung up on a watch: stop relaying it
        finally:
            upstream.release()
        return response

    async def _forward(
        self, request: web.Request, session: aiohttp.ClientSession, arrived: float
    ) -> aiohttp.ClientResponse:
        """Send the request on to the API server; its status line is recorded as an ``Exchange``."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        data = await request.read()

        async def send() -> aiohttp.ClientResponse:
            upstream = await session.request(
                request.method, self.control_plane.server + request.path_qs, headers=headers, data=data or None,
                timeout=None,
            )  # fmt: skip
            self.exchanges.append(Exchange(request.method, request.path, upstream.status, arrived, time.monotonic()))
            return upstream

        # Once sent, the API server acts on the call whether or not its client is still there: a replica that
        # exits with a binding in flight (its handler is cancelled when it hangs up) still has that binding
        # logged, with the time the API server answered it.
        sending = asyncio.ensure_future(send())
        self.forwarding.add(sending)
        sending.add_done_callback(self._forwarded)
        try:
            return await asyncio.shield(sending)
        except asyncio.CancelledError:
            self.unclaimed.add(sending)
            if sending.done():  # answered as the client hung up: the callback has already run
                self._forwarded(sending)
            raise

    def _forwarded(self, sending: asyncio.Future[aiohttp.ClientResponse]) -> None:
        """Forget a finished forward; release the answer nobody is left to relay."""
        self.forwarding.discard(sending)
        if sending in self.unclaimed:
            self.unclaimed.discard(sending)
            if not sending.cancelled() and sending.exception() is None:
                sending.result().release()


def _injected(status: int, retry_after: str | None, which: str) -> web.Response:
    """A real-looking API ``Status`` failure the API server never saw."""
    headers = {"Retry-After": retry_after} if retry_after else {}
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": status,
        "message": f"injected by the e2e fault proxy ({which})",
    }
    return web.json_response(body, status=status, headers=headers)


SETTLE_ITERATIONS = 20
"""Loop iterations after shutdown for closed transports' pending callbacks (each closes its socket)."""


@contextmanager
def running(control_plane: Cluster, faults: list[Fault], *, chaos: EveryNth | None = None) -> Iterator[FaultProxy]:
    proxy = FaultProxy(control_plane, faults, port=free_ports(1)[0], chaos=chaos)
    context = control_plane.admin.ssl_context()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Event | None = None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        handlers: set[asyncio.Task[object]] = set()
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context), headers=control_plane.admin.headers()
        )

        async def handle(request: web.Request) -> web.StreamResponse:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                return await proxy._handle(request, session)
            finally:
                handlers.discard(task)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", proxy.port).start()
        ready.set()
        await stop.wait()
        pending = list(handlers)
        for task in pending:  # open watches would otherwise hold the shutdown for a minute
            task.cancel()
        # Let the cancelled handlers finish and hand their upstream connections back, so closing the
        # session closes every socket (else they are garbage-collected later, in another test, as
        # "unclosed transport" ResourceWarnings that pytest turns into that test's failure).
        await asyncio.gather(*pending, return_exceptions=True)
        sending = list(proxy.forwarding)
        for task in sending:
            task.cancel()
        await asyncio.gather(*sending, return_exceptions=True)
        await session.close()
        await runner.cleanup()

    async def settle() -> None:
        # Closing a transport only schedules its socket's close (call_soon); run_until_complete stops the
        # loop as soon as serve() returns, so without a few more iterations those sockets would be closed
        # by the garbage collector, later, in another test ("unclosed transport" ResourceWarnings).
        for _ in range(SETTLE_ITERATIONS):
            await asyncio.sleep(0)

    def run() -> None:
        loop.run_until_complete(serve())
        loop.run_until_complete(settle())

    thread = threading.Thread(target=run, name="fault-proxy", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the fault proxy did not start")
    try:
        yield proxy
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


__all__ = ["EveryNth", "Exchange", "ExpiredWatch", "Fault", "FaultProxy", "Stall", "running"]
