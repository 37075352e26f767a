"""Leader election's timing: a leader that cannot renew stops before any follower may take over.

Everything runs on virtual time: one FakeClock, a ``sleep`` that parks the
caller until the driver moves the clock to its wake-up time, and a fake
Lease API (the elector's LeaseApi protocol, nothing more) with
resourceVersion and AlreadyExists conflicts like the API server's. A stalled
call never answers: it parks until its own timeout has passed on the virtual
clock and then raises TimeoutError, as the real client does, so a call
without a timeout would hang the test. ``PooledApi`` puts a KubeApi's
connection limit in front of it. No test sleeps or reads the wall clock.
``Cluster.run_until`` checks after every step that at most one candidate
``holds()`` the Lease: the fencing property of ``usher.adapters.leading``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from usher.adapters.kubeapi import ApiResult
from usher.adapters.leading import LEASE_CONNECTIONS, KubeLeases, LeaderElector, LeaseApi, LeaseSettings
from usher.core.clock import FakeClock

SETTINGS = LeaseSettings(name="usher", namespace="ns", lease_duration=4.0, renew_deadline=3.0, retry_period=1.0)
FRACTIONAL = LeaseSettings(name="usher", namespace="ns", lease_duration=10.9, renew_deadline=10.5, retry_period=1.0)
"""A lease duration of 10.9 s that a truncating elector (client-go's) records as 10, below the renew deadline."""


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

    async def run_until(
        self, done: Callable[[], bool], *, limit: float = 120.0, check: Callable[[], None] = lambda: None
    ) -> None:
        """Let every task run until idle, then jump to the next wake-up; until ``done()`` or ``limit`` virtual s.

        ``check`` runs at every idle point: what holds there holds until the next wake-up."""
        end = self.clock.now() + limit
        while True:
            for _ in range(20):  # the fakes never touch real I/O: a few passes reach idleness
                await asyncio.sleep(0)
            check()
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
    status: int = 0
    """The server's answer (0 while unanswered or when it never answered)."""


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
    before: Callable[[Call], None] = lambda call: None
    """Runs as each call arrives, before the server looks at the Lease (another client's write lands first)."""
    latency: float = 0.0
    """How long the server takes to answer (its network and storage)."""

    def view(self, who: str) -> LeaseView:
        return LeaseView(self, who)

    def store(self, spec: Mapping[str, Any]) -> None:
        """Another client's write of the Lease (a create when there is none)."""
        self.version += 1
        metadata = {"name": "usher", "namespace": "ns", "resourceVersion": str(self.version)}
        self.lease = {"metadata": metadata, "spec": dict(spec)}

    def delete(self) -> None:
        """``kubectl delete lease``."""
        self.lease = None

    def statuses(self, verb: str, *, since: float = 0.0) -> list[tuple[str, int]]:
        """(who, answer) of the answered ``verb`` calls that arrived at ``since`` or later."""
        return [(c.who, c.status) for c in self.calls if c.verb == verb and c.status and c.at >= since]

    async def serve(self, who: str, verb: str, timeout: float, lease: Mapping[str, Any] | None) -> ApiResult:
        call = Call(who, verb, self.time.clock.now(), timeout)
        self.calls.append(call)
        self.before(call)
        result = await self._answer(who, verb, timeout, lease)
        call.status = result.status
        return result

    async def _answer(self, who: str, verb: str, timeout: float, lease: Mapping[str, Any] | None) -> ApiResult:
        if who in self.stalled:
            await self.time.sleep(timeout)
            raise TimeoutError("the fake API server never answered")
        if self.latency:
            await self.time.sleep(self.latency)
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
        return ApiResult(201 if verb == "create" else 200, self.lease)


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
class PooledApi:
    """A KubeApi in front of the fake server, with a connection limit as usher's ``HttpPool`` has: a call
    waits for a free connection, all within its timeout (on virtual time). A binding holds its connection
    until its timeout: an API server slow to answer bindings."""

    server: FakeLeases
    who: str
    limit: int
    slots: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.slots = asyncio.Semaphore(self.limit)

    async def request(
        self, method: str, path: str, body: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> ApiResult:
        assert timeout is not None, "every call of the elector and the dispatcher has a timeout"
        started = self.server.time.clock.now()
        connecting = asyncio.ensure_future(self.slots.acquire())
        expiring = asyncio.ensure_future(self.server.time.sleep(timeout))
        await asyncio.wait({connecting, expiring}, return_when=asyncio.FIRST_COMPLETED)
        if not connecting.done():
            connecting.cancel()
            raise TimeoutError("no connection free before the timeout")
        expiring.cancel()
        try:
            left = timeout - (self.server.time.clock.now() - started)
            if path.endswith("/binding"):
                await self.server.time.sleep(left)
                raise TimeoutError("the binding was never answered")
            verb = {"GET": "get", "POST": "create", "PUT": "replace"}[method]
            return await self.server.serve(self.who, verb, left, body)
        finally:
            self.slots.release()


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
    task: asyncio.Task[None] | None = None


class Cluster:
    def __init__(self) -> None:
        self.time = VirtualTime()
        self.server = FakeLeases(self.time)
        self.tasks: list[asyncio.Task[None]] = []
        self.candidates: dict[str, Candidate] = {}

    def candidate(self, who: str, settings: LeaseSettings = SETTINGS, *, leases: LeaseApi | None = None) -> Candidate:
        recorder = Recorder()
        candidate: Candidate

        def on_lost() -> None:
            assert not candidate.elector.leading.is_set(), "on_lost comes after leading is cleared"
            candidate.lost_at = self.time.clock.now()

        elector = LeaderElector(
            settings,
            leases or self.server.view(who),
            on_lost,
            clock=self.time.clock,
            sleep=self.time.sleep,
            recorder=recorder,
            identity=who,
        )
        candidate = Candidate(elector, recorder)
        candidate.task = asyncio.create_task(self._watch(candidate, elector.run()))
        self.tasks.append(candidate.task)
        self.candidates[who] = candidate
        return candidate

    def leaders(self) -> list[str]:
        return [who for who, candidate in self.candidates.items() if candidate.elector.holds()]

    def one_leader_at_most(self) -> None:
        assert len(self.leaders()) <= 1, f"two leaders at {self.time.clock.now():.3f}: {self.leaders()}"

    async def run_until(self, done: Callable[[], bool], *, limit: float = 120.0) -> None:
        """``VirtualTime.run_until``, checking at every step that no two candidates hold the Lease at once."""
        await self.time.run_until(done, limit=limit, check=self.one_leader_at_most)

    async def run_for(self, seconds: float) -> None:
        end = self.time.clock.now() + seconds
        await self.run_until(lambda: self.time.clock.now() >= end, limit=seconds + 1)

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
    await cluster.run_until(lambda: len(cluster.server.stored_renewals) == 1 + renewals_before)
    assert a.elector.leading.is_set()
    if fault == "stall":
        cluster.server.stalled.add("a")
    else:
        cluster.server.failing["a"] = int(fault.split()[1])
    await cluster.run_until(lambda: a.lost_at is not None)
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
    await cluster.run_until(lambda: len(cluster.server.stored_renewals) == 3)
    cluster.server.stalled.add("a")
    await cluster.run_until(lambda: a.lost_at is not None)
    stored = [at for holder, at in cluster.server.stored_renewals if holder == "a"]
    leader_calls = [c for c in cluster.server.calls if c.at >= stored[0]]
    assert leader_calls
    for call in leader_calls:
        renewed = max(at for at in stored if at <= call.at)
        assert call.at + call.timeout <= renewed + SETTINGS.renew_deadline, call
    cluster.stop()


@pytest.mark.parametrize(
    ("fault", "settings"),
    [("stall", SETTINGS), ("http 503", SETTINGS), ("stall", FRACTIONAL), ("http 503", FRACTIONAL)],
    ids=[
        "its calls hang",
        "the server answers 503",
        "its calls hang, with a 10.9s lease and a 10.5s renew deadline",
        "the server answers 503, with a 10.9s lease and a 10.5s renew deadline",
    ],
)
async def test_a_stalled_leader_stops_before_the_follower_takes_over(fault: str, settings: LeaseSettings) -> None:
    cluster = Cluster()
    a = cluster.candidate("a", settings)
    await cluster.run_until(a.elector.leading.is_set)
    b = cluster.candidate("b", settings)
    await cluster.run_until(lambda: len(cluster.server.stored_renewals) >= 4)
    assert not b.elector.leading.is_set(), "a follower waits while the leader renews"
    if fault == "stall":
        cluster.server.stalled.add("a")
    else:
        cluster.server.failing["a"] = 503
    await cluster.run_until(lambda: b.led_at is not None)
    assert a.lost_at is not None and b.led_at is not None
    assert a.lost_at < b.led_at, "never two leaders at once"
    last = cluster.last_stored_renewal("a")
    assert b.led_at - last >= settings.lease_duration, "the follower waited out the lease duration"
    assert b.recorder.changes == [("usher", False), ("usher", True)]
    cluster.stop()


@pytest.mark.parametrize(
    ("lease_duration", "renew_deadline", "retry_period", "recorded"),
    [(4.0, 3.0, 1.0, 4), (10.9, 10.5, 1.0, 11), (15.0, 10.0, 2.0, 15), (0.5, 0.4, 0.3, 1)],
    ids=["4s records 4", "10.9s records 11, not 10", "15s records 15", "0.5s records 1, not 0"],
)
async def test_the_lease_records_the_lease_duration_rounded_up_to_whole_seconds(
    lease_duration: float, renew_deadline: float, retry_period: float, recorded: int
) -> None:
    settings = LeaseSettings("usher", "ns", lease_duration, renew_deadline, retry_period)
    cluster = Cluster()
    cluster.server.store({"holderIdentity": None})  # created empty, as the chart does
    cluster.candidate("a", settings)
    await cluster.run_until(lambda: len(cluster.server.stored_renewals) == 3)
    assert cluster.server.lease is not None
    assert cluster.server.lease["spec"]["leaseDurationSeconds"] == recorded
    assert recorded >= lease_duration > renew_deadline, "a follower never waits less than the leader assumes"
    cluster.stop()


@pytest.mark.parametrize(
    ("durations", "rule"),
    [
        ((3.0, 3.0, 1.0), "lease duration .* must be greater than the renew deadline"),
        ((4.0, 1.2, 1.0), r"renew deadline .* must be greater than 1.2 x the retry period"),
        ((4.0, 3.0, 0.0), "retry period must be a finite number of seconds above 0"),
        ((float("inf"), 3.0, 1.0), "lease duration must be a finite number"),
        ((4.0, float("nan"), 1.0), "renew deadline must be a finite number"),
        ((2.0**31, 3.0, 1.0), "at most 2147483647s"),
    ],
    ids=[
        "a lease duration equal to the renew deadline",
        "a renew deadline of 1.2 retry periods",
        "a zero retry period",
        "an infinite lease duration",
        "a NaN renew deadline",
        "a lease duration past the Lease's int32",
    ],
)
async def test_the_elector_refuses_durations_that_break_the_fencing_argument(
    durations: tuple[float, float, float], rule: str
) -> None:
    settings = LeaseSettings("usher", "ns", *durations)
    with pytest.raises(ValueError, match=rule):
        LeaderElector(settings, Cluster().server.view("a"), lambda: None)


async def test_a_lease_deleted_under_a_live_leader_is_recreated_by_it_within_a_retry_period() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.run_until(a.elector.leading.is_set)
    await cluster.run_for(SETTINGS.retry_period / 2)
    b = cluster.candidate("b")  # reads half a retry period after each renewal: it sees the Lease missing
    await cluster.run_for(2.5 * SETTINGS.retry_period)
    cluster.server.delete()
    deleted = cluster.time.clock.now()
    await cluster.run_until(lambda: cluster.server.lease is not None)
    assert cluster.time.clock.now() - deleted <= SETTINGS.retry_period, "re-created at the leader's next renewal"
    await cluster.run_for(5 * SETTINGS.lease_duration)
    assert cluster.server.lease is not None and cluster.server.lease["spec"]["holderIdentity"] == "a"
    assert a.elector.holds() and a.lost_at is None, "the leader led on throughout"
    assert ("b", 404) in cluster.server.statuses("get", since=deleted), "the follower saw it missing"
    assert b.led_at is None and cluster.server.statuses("create", since=deleted) == [("a", 201)]
    cluster.stop()


@pytest.mark.parametrize(
    ("what_happens_to_a", "a_settings", "b_settings"),
    [("stall", SETTINGS, SETTINGS), ("die", SETTINGS, SETTINGS), ("stall", FRACTIONAL, SETTINGS)],
    ids=[
        "its calls hang",
        "it died without releasing",
        "its calls hang, and the follower's own lease is shorter than the one it saw recorded",
    ],
)
async def test_a_lease_deleted_under_a_leader_that_cannot_renew_is_recreated_by_a_follower_after_it_stopped(
    what_happens_to_a: str, a_settings: LeaseSettings, b_settings: LeaseSettings
) -> None:
    cluster = Cluster()
    a = cluster.candidate("a", a_settings)
    await cluster.run_until(a.elector.leading.is_set)
    b = cluster.candidate("b", b_settings)
    await cluster.run_for(3 * SETTINGS.retry_period)
    last = cluster.last_stored_renewal("a")
    if what_happens_to_a == "stall":
        cluster.server.stalled.add("a")
    else:
        assert a.task is not None
        a.task.cancel()
        del cluster.candidates["a"]  # a dead process holds nothing
    cluster.server.delete()
    deleted = cluster.time.clock.now()
    await cluster.run_until(lambda: b.led_at is not None)
    assert b.led_at is not None
    assert cluster.server.statuses("create", since=deleted) == [("b", 201)], "the follower re-created it"
    assert b.led_at - deleted >= a_settings.lease_duration_seconds, "after it stayed missing for a lease duration"
    assert b.led_at - last > a_settings.renew_deadline
    if what_happens_to_a == "stall":
        assert a.lost_at is not None and a.lost_at < b.led_at, "the old leader had stopped"
    cluster.stop()


async def test_with_no_lease_the_first_candidates_create_it_after_a_lease_duration_and_one_leads() -> None:
    """Both find no Lease, wait, and create it in the same instant: one create wins, the other gets 409."""
    cluster = Cluster()
    cluster.server.latency = 0.01  # both read "no Lease" before either create arrives
    a, b = cluster.candidate("a"), cluster.candidate("b")
    await cluster.run_until(lambda: a.led_at is not None or b.led_at is not None)
    started = 100.0
    assert cluster.time.clock.now() - started >= SETTINGS.lease_duration, "a missing Lease may be a deleted one"
    await cluster.run_for(5 * SETTINGS.lease_duration)
    assert sorted(cluster.server.statuses("create")) == [("a", 201), ("b", 409)]
    assert cluster.leaders() == ["a"] and b.led_at is None, "the create that met AlreadyExists did not lead"
    cluster.stop()


async def test_a_leader_whose_recreation_meets_another_candidates_create_stops_at_once() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.run_until(a.elector.leading.is_set)
    await cluster.run_for(2 * SETTINGS.retry_period)
    cluster.server.delete()
    deleted = cluster.time.clock.now()

    def b_creates_first(call: Call) -> None:
        if call.who == "a" and call.verb == "create":
            cluster.server.store({"holderIdentity": "b", "leaseDurationSeconds": 4, "renewTime": "later"})

    cluster.server.before = b_creates_first
    await cluster.run_until(lambda: a.lost_at is not None)
    assert cluster.server.statuses("create", since=deleted) == [("a", 409)]
    [create] = [c for c in cluster.server.calls if c.verb == "create" and c.at >= deleted]
    assert a.lost_at == create.at, "it stopped on the 409, not at its renew deadline"
    assert not a.elector.holds()
    cluster.stop()


@pytest.mark.parametrize(
    "own_client", [True, False], ids=["on a client of its own it renews", "on the dispatcher's client it would starve"]
)
async def test_bindings_holding_every_connection_of_the_dispatchers_client_do_not_delay_renewals(
    own_client: bool,
) -> None:
    cluster = Cluster()
    dispatchers = PooledApi(cluster.server, "a", limit=4)
    electors = PooledApi(cluster.server, "a", limit=LEASE_CONNECTIONS) if own_client else dispatchers
    a = cluster.candidate("a", leases=KubeLeases(electors, namespace="ns", name="usher"))  # type: ignore[arg-type]
    await cluster.run_until(a.elector.leading.is_set)

    async def bind_forever() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await dispatchers.request("POST", "/api/v1/namespaces/ns/pods/p/binding", {}, timeout=30.0)

    saturated = cluster.time.clock.now()
    cluster.tasks += [asyncio.create_task(bind_forever()) for _ in range(dispatchers.limit)]
    await cluster.run_until(lambda: a.lost_at is not None or cluster.time.clock.now() >= saturated + 60)
    if own_client:
        assert a.lost_at is None and a.elector.holds()
        renewals = [at for _, at in cluster.server.stored_renewals if at > saturated]
        assert [round(b - a, 6) for a, b in itertools.pairwise(renewals)] == [SETTINGS.retry_period] * (
            len(renewals) - 1
        )
        assert len(renewals) >= 59, "renewed every retry period while the dispatcher's connections were all busy"
    else:
        assert a.lost_at is not None and a.lost_at - saturated <= SETTINGS.renew_deadline
    cluster.stop()


async def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.run_until(a.elector.leading.is_set)
    assert cluster.server.lease is not None
    cluster.server.lease["spec"]["holderIdentity"] = "intruder"
    taken = cluster.time.clock.now()
    await cluster.run_until(lambda: a.lost_at is not None)
    assert a.lost_at is not None and a.lost_at - taken <= SETTINGS.retry_period
    cluster.stop()


async def test_a_candidate_acquires_a_free_lease_and_renews_every_retry_period() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.run_until(lambda: len(cluster.server.stored_renewals) == 5)
    times = [at for _, at in cluster.server.stored_renewals]
    assert [round(b - a, 6) for a, b in itertools.pairwise(times)] == [SETTINGS.retry_period] * 4
    assert a.elector.leading.is_set() and a.lost_at is None
    cluster.stop()


async def test_a_leader_no_longer_holds_once_its_deadline_passed_even_before_the_elector_runs() -> None:
    cluster = Cluster()
    a = cluster.candidate("a")
    await cluster.run_until(lambda: len(cluster.server.stored_renewals) == 2)
    assert a.elector.holds()
    # The event loop is busy (a long scheduling cycle): time passes, the elector's task does not run.
    cluster.time.clock.advance(SETTINGS.renew_deadline)
    assert a.elector.leading.is_set(), "the elector has not noticed yet"
    assert not a.elector.holds(), "but the dispatcher's fence already refuses bindings"
    cluster.stop()
