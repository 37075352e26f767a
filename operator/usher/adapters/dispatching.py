"""The API dispatcher: the only path by which usher writes to the API server.

Theory of operation. Calls about one object (a pod, by ``namespace/name``)
are *tracked*: at most one call per object waits at a time, and a newer one
meets it:

- a less relevant call than the waiting one is dropped (a status patch
  arriving after a binding: the binding matters more);
- a more relevant one replaces it (a binding replaces a status patch);
- one of the same type replaces it but keeps its due time: a call with a
  delay is not postponed by newer versions of itself; a call with a
  ``merge`` folds the waiting one's request into its own (kube-scheduler's
  APICall.Merge: a status patch keeps a nomination the newer one leaves
  alone);
- a call that would change nothing (its ``build`` returns None against the
  newest version of the object) is dropped, at once or when it falls due;
- ``sync_object`` hands the dispatcher each newer version of an object
  (from the watch), so a waiting call that became a no-op is dropped.

Untracked calls (Events, claim and volume writes, a preemption victim's
eviction) just run. A
*best-effort* call (an Event) is sent only when no other call is ready:
under a burst, bindings and status patches go first and Events follow, as
they carry nothing the cluster waits for; at most ``max_best_effort`` of them
wait (kube-scheduler's event broadcaster keeps 1,000 and drops the newest
beyond), the rest are dropped and counted. A *leader-only* call (a binding) is
sent only while ``leads()`` says this instance holds the lease, checked
right before every attempt; otherwise it finishes unsent (NOT_LEADING).
Worker tasks execute due calls
concurrently, never two for the same object at once; a call that arrives for
an object whose call is running waits for it. Each call is retried with
exponential backoff on throttling (429, honouring Retry-After), server
errors (5xx) and connection failures; any other answer is final and handed
to the call's ``on_done``. Nothing here blocks the event loop.

Time is injected: ``timers`` (the event loop's clock and ``call_later`` by
default) decides when delayed calls fall due, ``sleep`` how retries wait, so
tests move time by hand instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from usher.adapters.kubeapi import ApiResult, KubeApi

logger = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request to the API server, as an ApiCall builds it."""

    method: str
    path: str
    body: Mapping[str, Any] | list[Any] | None = None
    content_type: str = "application/json"


BuildFn = Callable[[Mapping[str, Any] | None], Request | None]
"""Build the request against the newest known version of the object; None: nothing to do."""


@dataclass(slots=True)
class ApiCall:
    """One write: what it is, which object it is about, and how to build it."""

    call_type: str
    object_key: str | None
    build: BuildFn
    relevance: int = 0
    delay: float = 0.0
    on_done: Callable[[ApiResult], None] | None = field(default=None, repr=False)
    leader_only: bool = False
    """Sent only while the dispatcher's ``leads()`` holds, checked right before each attempt."""
    merge: Callable[[BuildFn], BuildFn] | None = field(default=None, repr=False)
    """Given the build of the waiting call of the same type this one replaces, the build of both."""
    best_effort: bool = False
    """Sent only when no other call is ready, and dropped when ``max_best_effort`` such calls wait (untracked only)."""
    tracked: bool = True
    """False: runs as an untracked call though it names its object (for logs and tests), beside that object's
    tracked calls, never superseding them or superseded by them."""

    @classmethod
    def fixed(
        cls,
        call_type: str,
        object_key: str | None,
        request: Request,
        *,
        relevance: int = 0,
        on_done: Callable[[ApiResult], None] | None = None,
        leader_only: bool = False,
        best_effort: bool = False,
        tracked: bool = True,
    ) -> ApiCall:
        return cls(
            call_type,
            object_key,
            lambda _: request,
            relevance=relevance,
            on_done=on_done,
            leader_only=leader_only,
            best_effort=best_effort,
            tracked=tracked,
        )


SKIPPED = ApiResult(status=0, body={"message": "superseded by a more relevant call"})
NO_OP = ApiResult(status=204, body={"message": "nothing to change"})
NOT_LEADING = ApiResult(status=0, body={"message": "not sent: this instance does not hold the lease"})
DROPPED = ApiResult(status=0, body={"message": "not sent: too many best-effort calls waiting"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long retryable failures are retried: exponential backoff with jitter, or Retry-After."""

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


class Cancellable(Protocol):
    """A pending timer callback that can be called off."""

    def cancel(self) -> None: ...


class Timers(Protocol):
    """The dispatcher's time: a monotonic ``now`` and callbacks run once a delay has passed on that scale."""

    def now(self) -> float: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable: ...


class LoopTimers:
    """The running event loop's clock and timers (the default)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        return asyncio.get_running_loop().call_later(delay, callback)


class CallObserver(Protocol):
    """What the dispatcher reports about each call (implemented by the metrics adapter)."""

    def call_finished(self, call_type: str, result: str, seconds: float) -> None: ...

    def call_dropped(self, call_type: str) -> None:
        """A best-effort call was dropped unsent: too many were waiting."""
        ...

    def pending_changed(self, call_type: str, delta: int) -> None: ...


class _Unobserved:
    def call_finished(self, call_type: str, result: str, seconds: float) -> None:
        pass

    def call_dropped(self, call_type: str) -> None:
        pass

    def pending_changed(self, call_type: str, delta: int) -> None:
        pass


@dataclass(slots=True)
class _Waiting:
    call: ApiCall
    due: float
    timer: Cancellable | None = None


class _Lanes(asyncio.Queue[_Waiting | str]):
    """The calls ready to run: best-effort ones only when no other waits, each lane in arrival order.

    An `asyncio.Queue` with its storage replaced (as `asyncio.PriorityQueue` does), so waiting
    workers are woken as before.
    """

    def _init(self, maxsize: int) -> None:
        self._first: deque[_Waiting | str] = deque()
        self._later: deque[_Waiting | str] = deque()

    def _put(self, item: _Waiting | str) -> None:
        if isinstance(item, _Waiting) and item.call.best_effort:
            self._later.append(item)
        else:
            self._first.append(item)

    def _get(self) -> _Waiting | str:
        return self._first.popleft() if self._first else self._later.popleft()

    def qsize(self) -> int:
        return len(self._first) + len(self._later)

    def empty(self) -> bool:
        return not (self._first or self._later)

    @property
    def best_effort(self) -> int:
        """Best-effort calls waiting."""
        return len(self._later)


class Dispatcher:
    """Queues, merges, delays, runs and retries usher's API writes (see the theory of operation above)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        workers: int = 64,
        max_best_effort: int = 1000,
        retry: RetryPolicy | None = None,
        observer: CallObserver | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        timers: Timers | None = None,
        leads: Callable[[], bool] = lambda: True,
    ) -> None:
        """``leads``: whether this instance holds the lease now (leader-only calls wait for nothing else).

        ``max_best_effort``: how many best-effort calls may wait; a newer one is dropped (`DROPPED`).
        ``workers``: calls in flight at most, one HTTP connection each (`connect` pools 64). kube-scheduler
        binds each pod in a goroutine of its own, so in a burst its bindings hold their share of the API
        server's concurrency; with 16, usher's bindings queued here behind a client sending 32 at a time.
        """
        self._api = api
        self._timers: Timers = timers or LoopTimers()
        self._leads = leads
        self._ready = _Lanes()
        self._max_best_effort = max_best_effort
        self._dropping = False
        self._workers_count = workers
        self._workers: list[asyncio.Task[None]] = []
        self._retry = retry or RetryPolicy()
        self._observer: CallObserver = observer or _Unobserved()
        self._sleep = sleep
        self._waiting: dict[str, _Waiting] = {}
        self._running: set[str] = set()
        self._objects: dict[str, Mapping[str, Any]] = {}
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"dispatcher-worker-{i}") for i in range(self._workers_count)
        ]

    def halt(self) -> None:
        """Stop sending at once (leadership lost): every worker is cancelled now; ``stop`` still awaits them."""
        for task in self._workers:
            task.cancel()

    async def stop(self) -> None:
        self.halt()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        for waiting in self._waiting.values():
            if waiting.timer is not None:
                waiting.timer.cancel()

    # ------------------------------------------------------------------ intake

    def add(self, call: ApiCall, current: Mapping[str, Any] | None = None) -> None:
        """Queue a call; returns at once. ``current`` is the newest known version of its object."""
        key = call.object_key if call.tracked else None
        if key is None:
            if call.best_effort and self._ready.best_effort >= self._max_best_effort:
                self._drop(call)
                return
            self._dropping = False
            self._track(call.call_type, +1)
            self._ready.put_nowait(_Waiting(call, 0.0))
            return
        if current is not None:
            self._objects[key] = current
        waiting = self._waiting.get(key)
        if waiting is not None:
            old = waiting.call
            if call.relevance < old.relevance:
                self._finish(call, SKIPPED)
                return
            if call.call_type == old.call_type:
                if call.merge is not None:
                    call.build = call.merge(old.build)
                self._finish(old, SKIPPED)  # merged: the newest version wins, the due time stays
                waiting.call = call
            else:
                self._finish(old, SKIPPED, pending=True)
                self._track(call.call_type, +1)
                waiting.call = call
                self._schedule(key, waiting, self._now() + call.delay)
            self._drop_if_noop(key)
            return
        if key not in self._running and call.build(self._objects.get(key)) is None:
            self._finish(call, NO_OP)
            self._forget_object(key)
            return
        self._track(call.call_type, +1)
        waiting = _Waiting(call, 0.0)
        self._waiting[key] = waiting
        self._schedule(key, waiting, self._now() + call.delay)

    async def call(self, call: ApiCall, current: Mapping[str, Any] | None = None) -> ApiResult:
        """Queue a call and wait for its result (the binding cycle's calls); the loop keeps running."""
        done: asyncio.Future[ApiResult] = asyncio.get_running_loop().create_future()
        then = call.on_done

        def finished(result: ApiResult) -> None:
            if then is not None:
                then(result)
            if not done.done():
                done.set_result(result)

        call.on_done = finished
        self.add(call, current)
        return await done

    def sync_object(self, key: str, obj: Mapping[str, Any]) -> None:
        """A newer version of an object seen by the watch: refresh its waiting call (cheap if none)."""
        if key in self._waiting or key in self._running:
            self._objects[key] = obj
            self._drop_if_noop(key)

    def forget_object(self, key: str) -> None:
        """The object is gone: drop its waiting call."""
        waiting = self._waiting.pop(key, None)
        if waiting is not None:
            if waiting.timer is not None:
                waiting.timer.cancel()
            self._finish(waiting.call, SKIPPED, pending=True)
        self._forget_object(key)

    def pending(self, key: str) -> ApiCall | None:
        waiting = self._waiting.get(key)
        return waiting.call if waiting is not None else None

    @property
    def workers(self) -> int:
        """Calls in flight at most: the connections a burst of calls uses."""
        return self._workers_count

    @property
    def idle(self) -> bool:
        return not self._waiting and self._ready.empty() and self._busy == 0

    async def drained(self) -> None:
        """Wait until every call that is due has finished (delayed calls are not waited for)."""
        while not (
            self._ready.empty() and self._busy == 0 and all(w.due > self._now() for w in self._waiting.values())
        ):
            self._idle.clear()
            await self._idle.wait()

    # ------------------------------------------------------------------ internals

    def _now(self) -> float:
        return self._timers.now()

    def _schedule(self, key: str, waiting: _Waiting, due: float) -> None:
        if waiting.timer is not None:
            waiting.timer.cancel()
        waiting.due = due
        delay = due - self._now()
        if delay <= 0:
            waiting.timer = None
            self._ready.put_nowait(key)
        else:
            waiting.timer = self._timers.call_later(delay, lambda: self._ready.put_nowait(key))

    def _drop(self, call: ApiCall) -> None:
        if not self._dropping:  # once per burst: the first drop after a call got through
            self._dropping = True
            logger.warning(
                "%d best-effort calls waiting: dropping new ones (%s) until they drain",
                self._ready.best_effort,
                call.call_type,
            )
        self._observer.call_dropped(call.call_type)
        self._finish(call, DROPPED)

    def _drop_if_noop(self, key: str) -> None:
        waiting = self._waiting.get(key)
        if waiting is None or key in self._running:
            return
        if waiting.call.build(self._objects.get(key)) is None:
            del self._waiting[key]
            if waiting.timer is not None:
                waiting.timer.cancel()
            self._finish(waiting.call, NO_OP, pending=True)
            self._forget_object(key)

    def _forget_object(self, key: str) -> None:
        if key not in self._waiting and key not in self._running:
            self._objects.pop(key, None)

    def _track(self, call_type: str, delta: int) -> None:
        self._observer.pending_changed(call_type, delta)

    def _finish(self, call: ApiCall, result: ApiResult, *, pending: bool = False) -> None:
        if pending:
            self._track(call.call_type, -1)
        if call.on_done is not None:
            try:
                call.on_done(result)
            except Exception:
                logger.exception("handling the result of %s %s failed", call.call_type, call.object_key)
        self._wake_drain()

    def _wake_drain(self) -> None:
        self._idle.set()

    async def _work(self) -> None:
        while True:
            item = await self._ready.get()
            if isinstance(item, _Waiting):  # untracked
                await self._run(item.call, None)
                continue
            key = item
            waiting = self._waiting.get(key)
            if waiting is None or waiting.due > self._now() + 1e-3:
                continue  # dropped, replaced by a later schedule, or a stale timer
            if key in self._running:
                continue  # re-queued when the running call finishes
            del self._waiting[key]
            self._running.add(key)
            try:
                await self._run(waiting.call, key)
            finally:
                self._running.discard(key)
                follow_up = self._waiting.get(key)
                if follow_up is not None and follow_up.due <= self._now():
                    self._ready.put_nowait(key)
                self._forget_object(key)

    async def _run(self, call: ApiCall, key: str | None) -> None:
        self._busy += 1
        try:
            request = call.build(self._objects.get(key) if key is not None else None)
            result = NO_OP if request is None else await self._execute(call, request)
        finally:
            self._busy -= 1
        self._finish(call, result, pending=True)

    async def _execute(self, call: ApiCall, request: Request) -> ApiResult:
        call_type, key = call.call_type, call.object_key
        started = self._now()
        result = ApiResult(status=0, body={"message": "not attempted"})
        for attempt in range(1, self._retry.attempts + 1):
            if call.leader_only and not self._leads():
                # Fencing: the event loop may run this worker before the elector notices the deadline.
                logger.warning("%s %s: %s", call_type, key, NOT_LEADING.message)
                return NOT_LEADING
            retry_after: str | None = None
            try:
                result = await self._api.request(
                    request.method, request.path, request.body, content_type=request.content_type
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                result = ApiResult(status=0, body={"message": f"{type(exc).__name__}: {exc}"})
            else:
                retry_after = result.headers.get("Retry-After")
            if result.status != 0 and result.status not in RETRYABLE_STATUSES:
                break
            if attempt < self._retry.attempts:
                delay = self._retry.delay(attempt, retry_after)
                logger.info("%s %s: %s; retrying in %.2fs", call_type, key, result.message, delay)
                await self._sleep(delay)
        self._observer.call_finished(call_type, "success" if result.ok else "error", self._now() - started)
        if not result.ok:
            # 404/409 are answers the caller handles (gone, already bound, conflict); anything else is a failure
            # users must be able to see, e.g. a 403 when RBAC lacks a verb.
            level = logging.INFO if result.status in (404, 409) else logging.WARNING
            logger.log(level, "%s %s failed: HTTP %d: %s", call_type, key, result.status, result.message)
        return result
