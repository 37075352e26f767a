"""The API dispatcher: the only path by which usher writes to the API server.

Calls are queued and executed by a pool of worker tasks, so the scheduling
loop never waits on the network. Each call is retried with exponential
backoff on throttling (429, honouring Retry-After), server errors (5xx) and
connection failures; other answers are final and handed to the call's
``on_done`` callback, which runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from usher.adapters.kubeapi import ApiResult, KubeApi

logger = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(slots=True)
class ApiCall:
    """One write: ``method path body``, what it is for, and who to tell when it is over."""

    call_type: str
    object_key: str
    method: str
    path: str
    body: Mapping[str, Any] | None = None
    content_type: str = "application/json"
    on_done: Callable[[ApiResult], None] | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 8
    initial_delay: float = 0.2
    max_delay: float = 10.0

    def delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.max_delay * 3)
            except ValueError:
                pass
        base = min(self.initial_delay * 2 ** (attempt - 1), self.max_delay)
        return float(base * (0.5 + random.random() / 2))  # jitter: retries of a burst must not align


class CallObserver(Protocol):
    """What the dispatcher reports about each call (implemented by the metrics adapter)."""

    def call_finished(self, call_type: str, result: str, seconds: float) -> None: ...

    def pending_changed(self, call_type: str, delta: int) -> None: ...


class _Unobserved:
    def call_finished(self, call_type: str, result: str, seconds: float) -> None:
        pass

    def pending_changed(self, call_type: str, delta: int) -> None:
        pass


class Dispatcher:
    def __init__(
        self,
        api: KubeApi,
        *,
        workers: int = 16,
        retry: RetryPolicy | None = None,
        observer: CallObserver | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._api = api
        self._queue: asyncio.Queue[ApiCall] = asyncio.Queue()
        self._workers_count = workers
        self._workers: list[asyncio.Task[None]] = []
        self._retry = retry or RetryPolicy()
        self._observer: CallObserver = observer or _Unobserved()
        self._sleep = sleep
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"dispatcher-worker-{i}") for i in range(self._workers_count)
        ]

    async def stop(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    def add(self, call: ApiCall) -> None:
        """Queue a call; returns at once."""
        self._observer.pending_changed(call.call_type, +1)
        self._idle.clear()
        self._queue.put_nowait(call)

    @property
    def idle(self) -> bool:
        return self._queue.empty() and self._busy == 0

    async def drained(self) -> None:
        """Wait until every queued call has finished."""
        await self._idle.wait()

    async def _work(self) -> None:
        while True:
            call = await self._queue.get()
            self._busy += 1
            try:
                result = await self._execute(call)
            finally:
                self._busy -= 1
                self._observer.pending_changed(call.call_type, -1)
                if self.idle:
                    self._idle.set()
            if call.on_done is not None:
                try:
                    call.on_done(result)
                except Exception:
                    logger.exception("handling the result of %s %s failed", call.call_type, call.object_key)

    async def _execute(self, call: ApiCall) -> ApiResult:
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = ApiResult(status=0, body={"message": "not attempted"})
        for attempt in range(1, self._retry.attempts + 1):
            retry_after: str | None = None
            try:
                result = await self._api.request(call.method, call.path, call.body, content_type=call.content_type)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                result = ApiResult(status=0, body={"message": f"{type(exc).__name__}: {exc}"})
            else:
                retry_after = result.headers.get("Retry-After")
            if result.status != 0 and result.status not in RETRYABLE_STATUSES:
                break
            if attempt < self._retry.attempts:
                delay = self._retry.delay(attempt, retry_after)
                logger.info("%s %s: %s; retrying in %.2fs", call.call_type, call.object_key, result.message, delay)
                await self._sleep(delay)
        outcome = "success" if result.ok else "error"
        self._observer.call_finished(call.call_type, outcome, loop.time() - started)
        return result
