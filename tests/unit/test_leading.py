"""Leader election's timing: a leader that cannot renew stops before any follower may take over.

Everything runs on virtual time: one FakeClock, a ``sleep`` that parks the
caller until the driver moves the clock to its wake-up time, and a fake
Lease API (the elector's LeaseApi protocol, nothing more) with
resourceVersion conflicts like the API server's. A stalled call never
answers: it parks until its own timeout has passed on the virtual clock and
then raises TimeoutError, as the real client does, so a call without a
timeout would hang the test. No test sleeps or reads the wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from usher.adapters.kubeapi import ApiResult
from usher.adapters.leading import LeaderElector, LeaseSettings
from usher.core.clock import FakeClock

SETTINGS = LeaseSettings(name="usher", namespace="ns", lease_duration=4.0, renew_deadline=3.0, retry_period=1.0)


class VirtualTime:
    """Sleeps on a FakeClock: ``advance`` wakes the earliest sleeper after the event loop has gone idle."""

    def __init__(self) -> None:
        self.clock = FakeClock(start=100.0)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.clock.now() + max(0.0, seconds), next(self._order), future))
        await future

    async def run_until(self, done: Callable[[], bool], *, limit: float = 120.0) -> None:
        """Let every task run until idle, then jump to the next wake-up; until ``done()`` or ``limit`` virtual s."""
        end = self.clock.now() + limit
        while True:
            for _ in range(20):  # the fakes never touch real I/O: a few passes reach idleness
                await asyncio.sleep(0)
            if done():
                return
            assert self._sleepers, "every task is blocked without a timeout"
            when, _, future = heapq.heappop(self._sleepers)
            assert when <= end, f"not done after {limit} virtual seconds"
            if future.cancelled():
                continue
            self.clock.advance(max(0.0, when - self.clock.now()))
            future.set_result(None)


@dataclass
class Call:
    who: str
    verb: str
    at: float
    timeout: float


@dataclass
class FakeLeases:
    """One Lease in a fake API server shared by the candidates; each candidate gets a ``view``."""

    time: VirtualTime
    lease: dict[str, Any] | None = None
    version: int = 0
    stalled: set[str] = field(default_factory=set)
    """Candidates whose calls hang (never answered; they end by their own timeout)."""
    failing: dict[str, int] = field(default_factory=dict)
    """Candidates whose calls the server answers with this HTTP status."""
    calls: list[Call] = field(default_factory=list)
    stored_renewals: list[tuple[str, float]] = field(default_factory=list)
    """(holder, virtual time the server stored the write)."""

    def view(self, who: str) -> LeaseView:
        return LeaseView(self, who)

    async def serve(self, who: str, verb: str, timeout: float, lease: Mapping[str, Any] | None) -> ApiResult:
        self.calls.append(Call(who, verb, self.time.clock.now(), timeout))
        if who in self.stalled:
            await self.time.sleep(timeout)
            raise TimeoutError("the fake API server never answered")
        if who in self.failing:
            return ApiResult(self.failing[who], {"message": "injected"})
        if verb == "get":
            return ApiResult(200, self.lease) if self.lease is not None else ApiResult(404, {"reason": "NotFound"})
        assert lease is not None
        if verb == "create" and self.lease is not None:
            return ApiResult(409, {"reason": "AlreadyExists"})
        if verb == "replace" and (
            self.lease is None or lease["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]
        ):
            return ApiResult(409, {"reason": "Conflict"})
        self.version += 1
        self.lease = {**lease, "metadata": {**lease["metadata"], "resourceVersion": str(self.version)}}
        self.stored_renewals.append((str(lease["spec"]["holderIdentity"]), self.time.clock.now()))
        return ApiResult(200, self.lease)


@dataclass
class LeaseView:
    """The LeaseApi of one candidate."""

    server: FakeLeases
    who: str

    async def get(self, *, timeout: float) -> ApiResult:
        return await self.server.serve(self.who, "get", timeout, None)

    async def create(self, lease: Mapping[str, Any], *, timeout: float) -> ApiResult:
        return await self.server.serve(self.who, "create", timeout, lease)

    async def replace(self, lease: Mapping[str, Any], *, timeout: float) -> ApiResult:
        return await self.server.serve(self.who, "replace", timeout, lease)


@dataclass
class Recorder:
    changes: list[tuple[str, bool]] = field(default_factory=list)

    def leading_changed(self, lease: str, leading: bool) -> None:
        self.changes.append((lease, leading))


@dataclass
class Candidate:
    elector: LeaderElector
    recorder: Recorder
    lost_at: float | None = None
    led_at: float | None = None


class Cluster:
    def __init__(self) -> None:
        self.time = VirtualTime()
        self.server = FakeLeases(self.time)
        self.tasks: list[asyncio.Task[None]] = []

    def candidate(self, who: str, settings: LeaseSettings = SETTINGS) -> Candidate:
        recorder = Recorder()
        candidate: Candidate

        def on_lost() -> None:
            assert not candidate.elector.leading.is_set(), "on_lost comes after leading is cleared"
            candidate.lost_at = self.time.clock.now()

        elector = LeaderElector(
            settings,
            self.server.view(who),
            on_lost,
            clock=self.time.clock,
            sleep=self.time.sleep,
            recorder=recorder,
            identity=who,
        )
        candidate = Candidate(elector, recorder)
        self.tasks.append(asyncio.create_task(self._watch(candidate, elector.run())))
        return candidate

    async def _watch(self, candidate: Candidate, run: Coroutine[Any, Any, None]) -> None:
        async def note_leading() -> None:
            await candidate.elector.leading.wait()
            candidate.led_at = self.time.clock.now()

        noting = asyncio.create_task(note_leading())
        try:
            await run
        finally:
            noting.cancel()

    def last_stored_renewal(self, who: str) -> float:
        return max(at for holder, at in self.server.stored_renewals if holder == who)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


@pytest.mark.parametrize(
    ("fault", "renewals_before"),
    [
        ("stall", 0),
        ("stall", 3),
        ("http 500", 2),
        ("http 403", 1),
    ],
    ids=[
        "lease calls hang right after acquiring",
        "lease calls hang after three renewals",
        "the API server answers 500",
        "the API server forbids the renewal",
    ],
)
async def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline(fault: str, renewals_before: int) -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.time.run_until(lambda: len(cluster.server.stored_renewals) == 1 + renewals_before)
    assert a.elector.leading.is_set()
    if fault == "stall":
        cluster.server.stalled.add("a")
    else:
        cluster.server.failing["a"] = int(fault.split()[1])
    await cluster.time.run_until(lambda: a.lost_at is not None)
    assert a.lost_at is not None
    last = cluster.last_stored_renewal("a")
    assert a.lost_at - last <= SETTINGS.renew_deadline, "stopped no later than the renew deadline"
    assert a.lost_at - last < SETTINGS.lease_duration
    assert not a.elector.leading.is_set()
    assert a.recorder.changes == [("usher", False), ("usher", True), ("usher", False)]
    assert all(task.done() for task in cluster.tasks), "run() returns once leadership is lost"
    cluster.stop()


async def test_every_lease_call_of_a_leader_ends_by_its_renew_deadline() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.time.run_until(lambda: len(cluster.server.stored_renewals) == 3)
    cluster.server.stalled.add("a")
    await cluster.time.run_until(lambda: a.lost_at is not None)
    stored = [at for holder, at in cluster.server.stored_renewals if holder == "a"]
    leader_calls = [c for c in cluster.server.calls if c.at >= stored[0]]
    assert leader_calls
    for call in leader_calls:
        renewed = max(at for at in stored if at <= call.at)
        assert call.at + call.timeout <= renewed + SETTINGS.renew_deadline, call
    cluster.stop()


@pytest.mark.parametrize("fault", ["stall", "http 503"], ids=["its calls hang", "the server answers 503"])
async def test_a_stalled_leader_stops_before_the_follower_takes_over(fault: str) -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.time.run_until(a.elector.leading.is_set)
    b = cluster.candidate("b")
    await cluster.time.run_until(lambda: len(cluster.server.stored_renewals) >= 4)
    assert not b.elector.leading.is_set(), "a follower waits while the leader renews"
    if fault == "stall":
        cluster.server.stalled.add("a")
    else:
        cluster.server.failing["a"] = 503
    await cluster.time.run_until(lambda: b.led_at is not None)
    assert a.lost_at is not None and b.led_at is not None
    assert a.lost_at < b.led_at, "never two leaders at once"
    last = cluster.last_stored_renewal("a")
    assert b.led_at - last >= SETTINGS.lease_duration, "the follower waited out the lease duration"
    assert b.recorder.changes == [("usher", False), ("usher", True)]
    cluster.stop()


async def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.time.run_until(a.elector.leading.is_set)
    assert cluster.server.lease is not None
    cluster.server.lease["spec"]["holderIdentity"] = "intruder"
    taken = cluster.time.clock.now()
    await cluster.time.run_until(lambda: a.lost_at is not None)
    assert a.lost_at is not None and a.lost_at - taken <= SETTINGS.retry_period
    cluster.stop()


async def test_a_candidate_acquires_a_free_lease_and_renews_every_retry_period() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.time.run_until(lambda: len(cluster.server.stored_renewals) == 5)
    times = [at for _, at in cluster.server.stored_renewals]
    assert [round(b - a, 6) for a, b in itertools.pairwise(times)] == [SETTINGS.retry_period] * 4
    assert a.elector.leading.is_set() and a.lost_at is None
    cluster.stop()


async def test_a_leader_no_longer_holds_once_its_deadline_passed_even_before_the_elector_runs() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.time.run_until(lambda: len(cluster.server.stored_renewals) == 2)
    assert a.elector.holds()
    # The event loop is busy (a long scheduling cycle): time passes, the elector's task does not run.
    cluster.time.clock.advance(SETTINGS.renew_deadline)
    assert a.elector.leading.is_set(), "the elector has not noticed yet"
    assert not a.elector.holds(), "but the dispatcher's fence already refuses bindings"
    cluster.stop()
