"""A small asyncio client for the benchmark: many concurrent writes and one watch, little CPU.

Why not the kubernetes client: its models deserialise every object into
Python classes, which costs far more CPU than the writes themselves; on a
2-core machine the harness must leave the CPU to the API server and the
scheduler under test. This client sends pre-built JSON over a pool of
keep-alive connections with the control plane's admin certificate.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import aiohttp

from e2e.controlplane import Cluster

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    """The API server answered with an error status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body.strip()[:500]}")
        self.status = status


class Api:
    """Admin access to one control plane's API server over ``connections`` keep-alive connections."""

    def __init__(self, plane: Cluster, connections: int = 32) -> None:
        self.server = plane.server
        self._context = plane.admin.ssl_context()
        self._headers = plane.admin.headers()
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        connector = aiohttp.TCPConnector(ssl=self._context, limit=self._connections + 8)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), headers=self._headers
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Api used outside `async with`")
        return self._session

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", seconds: float = 60
    ) -> Any:
        """One request; returns the decoded JSON answer, raises `ApiError` on status >= 400."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.server + path, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=seconds)
        ) as response:
            raw = await response.read()
            if response.status >= 400:
                raise ApiError(response.status, method, path, raw.decode("utf-8", "replace"))
            return json.loads(raw) if raw else None

    async def collect_garbage(self) -> int:
        """Run the API server's Go garbage collector to completion; returns its collections so far.

        Why: a 100-pod phase lasts 0.2 s, and the API server's heap grows by tens of MiB in it. Whether
        one of its collections (0.1 s of its CPU, on the cores the scheduler uses) fell inside such a
        phase was a matter of where the setup had left its heap: it moved a contender's pods/s by about
        25 %, the same for every scheduler (bench/NOTES.md). Collecting before every measured phase
        starts each one from the same heap. pprof's heap handler collects first when asked (``gc=1``);
        the API server must run with ``--profiling=true``. RuntimeError when its count of collections
        did not move: the phase would start from whatever heap the setup left.
        """
        before = await self.gc_cycles()
        await self._get("/debug/pprof/heap", {"gc": "1"})
        after = await self.gc_cycles()
        if after <= before:
            raise RuntimeError(
                f"the API server did not collect its garbage when asked ({before} collections before, {after} after)"
            )
        return after

    async def gc_cycles(self) -> int:
        """The API server's garbage collections since it started (``go_gc_duration_seconds_count``)."""
        return gc_count((await self._get("/metrics")).decode("utf-8", "replace"))

    async def _get(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        """The raw body of a GET that is not JSON (pprof, metrics); `ApiError` on status >= 400."""
        async with self.session.get(
            self.server + path, params=params, timeout=aiohttp.ClientTimeout(total=60)
        ) as response:
            body = await response.read()
            if response.status >= 400:
                raise ApiError(response.status, "GET", path, body.decode("utf-8", "replace"))
            return body

    async def watch(
        self, path: str, resource_version: str, *, params: Mapping[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield the events of one watch from ``resource_version`` until the server ends it."""
        query = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true", **(params or {})}
        async with self.session.get(
            self.server + path, params=query, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)
        ) as response:
            if response.status >= 400:
                raise ApiError(response.status, "WATCH", path, (await response.read()).decode("utf-8", "replace"))
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)


async def run_all(items: Iterable[T], action: Callable[[T], Awaitable[object]], concurrency: int = 32) -> None:
    """Run ``action`` for every item with at most ``concurrency`` in flight; the first error propagates.

    Why workers rather than one task per item: tens of thousands of pending
    tasks cost memory and scheduling overhead for nothing.
    """
    iterator = iter(items)

    async def worker() -> None:
        for item in iterator:
            await action(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())


async def cancel(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel the tasks and wait until each has ended (the harness's watches and workers)."""
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def gc_count(metrics: str) -> int:
    """``go_gc_duration_seconds_count`` of a Go component's Prometheus text (ValueError when absent).

    A scan for the one line, not prometheus_client's parser (`bench.contenders.parse_metrics`): the API
    server's /metrics is about 2 MiB, which the parser takes 0.29 s to read, the scan 3 ms, and each measured
    phase reads it three times."""
    for line in metrics.splitlines():
        if line.startswith("go_gc_duration_seconds_count"):
            name, _, value = line.rpartition(" ")
            if name.strip() in ("go_gc_duration_seconds_count", "go_gc_duration_seconds_count{}"):
                return int(float(value))
    raise ValueError("no go_gc_duration_seconds_count in the metrics")
