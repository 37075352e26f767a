"""The API dispatcher's call tracking, delays, no-op dropping and retries.

The HTTP transport is the seam: a recording transport answers with scripted
statuses (as httpx's MockTransport would); everything else is the real
dispatcher on a real event loop. Time is injected: fake timers the tests move
by hand, and a sleep that only records, so no test waits for the wall clock
or depends on how fast it runs. The real API server path is covered by the
e2e suite.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from usher.adapters.dispatching import DROPPED, NO_OP, NOT_LEADING, SKIPPED, ApiCall, Dispatcher, Request, RetryPolicy
from usher.adapters.kubeapi import ApiResult
from usher.adapters.preempting import disruption_condition_call, victim_delete_call
from usher.adapters.reporting import condition_patch, pod_status_call
from usher.core.types import PodInfo


@dataclass
class RecordingApi:
    """Answers from a script; ``gate``, when given, holds every request until the test opens it."""

    answers: list[int] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    running: Counter[str] = field(default_factory=Counter)
    overlap: bool = False
    gate: asyncio.Event | None = None
    first_call: asyncio.Event = field(default_factory=asyncio.Event)

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "") -> ApiResult:
        self.running[path] += 1
        self.overlap |= self.running[path] > 1
        self.calls.append((method, path, body))
        self.first_call.set()
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)  # let other workers run meanwhile, as a real request would
        self.running[path] -= 1
        status = self.answers.pop(0) if self.answers else 201
        return ApiResult(status=status, body={}, headers=self.headers if status == 429 else {})


@dataclass
class Observer:
    pending: Counter[str] = field(default_factory=Counter)
    finished: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def call_finished(self, call_type: str, result: str, seconds: float) -> None:
        self.finished.append((call_type, result))

    def call_dropped(self, call_type: str) -> None:
        self.dropped.append(call_type)

    def pending_changed(self, call_type: str, delta: int) -> None:
        self.pending[call_type] += delta


class FakeTimers:
    """The dispatcher's clock and timers, moved by hand: ``advance`` runs the callbacks that fall due."""

    @dataclass
    class Handle:
        cancelled: bool = False

        def cancel(self) -> None:
            self.cancelled = True

    def __init__(self) -> None:
        self._now = 0.0
        self._order = itertools.count()
        self._timers: list[tuple[float, int, FakeTimers.Handle, Callable[[], None]]] = []

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimers.Handle:
        handle = FakeTimers.Handle()
        heapq.heappush(self._timers, (self._now + delay, next(self._order), handle, callback))
        return handle

    async def advance(self, seconds: float) -> None:
        """Move time on, run what fell due in due order, and let the workers take it up."""
        self._now += seconds
        while self._timers and self._timers[0][0] <= self._now:
            _, _, handle, callback = heapq.heappop(self._timers)
            if not handle.cancelled:
                callback()
        for _ in range(5):
            await asyncio.sleep(0)


async def no_sleep(seconds: float) -> None:
    pass


def patch_call(message: str, *, delay: float = 0.0, results: list[ApiResult] | None = None) -> ApiCall:
    def build(current: Mapping[str, Any] | None) -> Request | None:
        patch = condition_patch(current, kind="PodScheduled", status="False", reason="Unschedulable", message=message)
        return None if patch is None else Request("PATCH", "/pods/p/status", patch)

    return ApiCall(
        "pod_status_patch",
        "ns/p",
        build,
        relevance=1,
        delay=delay,
        on_done=results.append if results is not None else None,
    )


def binding_call(results: list[ApiResult]) -> ApiCall:
    return ApiCall.fixed(
        "pod_binding", "ns/p", Request("POST", "/pods/p/binding", {}), relevance=2, on_done=results.append
    )


def pod_with(message: str | None) -> dict[str, Any]:
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
    return {"metadata": {"name": "p"}, "status": {"conditions": conditions if message else []}}


async def run(api: RecordingApi, observer: Observer | None = None, **kw: Any) -> Dispatcher:
    kw.setdefault("timers", FakeTimers())
    kw.setdefault("sleep", no_sleep)
    dispatcher = Dispatcher(api, observer=observer, **kw)  # type: ignore[arg-type]
    dispatcher.start()
    return dispatcher


async def settle(dispatcher: Dispatcher) -> None:
    await asyncio.wait_for(dispatcher.drained(), 5)
    await dispatcher.stop()


async def test_a_binding_replaces_a_waiting_status_patch() -> None:
    api, results = RecordingApi(), []
    dispatcher = await run(api)
    patch_results: list[ApiResult] = []
    dispatcher.add(patch_call("0/1 nodes", delay=10, results=patch_results), current=pod_with(None))
    dispatcher.add(binding_call(results))
    await settle(dispatcher)
    assert [c[0] for c in api.calls] == ["POST"]
    assert patch_results == [SKIPPED]
    assert results[0].ok


async def test_a_status_patch_after_a_waiting_binding_is_dropped() -> None:
    api, results, patches = RecordingApi(gate=asyncio.Event()), [], []
    dispatcher = await run(api, workers=1)
    dispatcher.add(ApiCall.fixed("event", None, Request("POST", "/events", {})))
    await asyncio.wait_for(api.first_call.wait(), 5)  # the only worker is busy with it
    dispatcher.add(binding_call(results))
    dispatcher.add(patch_call("late", results=patches), current=pod_with(None))
    assert patches == [SKIPPED], "dropped at once: the binding waiting for the worker matters more"
    api.gate.set()  # type: ignore[union-attr]
    await settle(dispatcher)
    assert [c[1] for c in api.calls] == ["/events", "/pods/p/binding"]
    assert patches == [SKIPPED]


async def test_a_victims_eviction_is_not_superseded_by_its_binding_still_waiting() -> None:
    """Preemption may pick a pod assumed a moment ago, whose binding still waits for a worker. Its
    DisruptionTarget patch and delete must run anyway (kube-scheduler sends them past its dispatcher)."""
    api, bindings, evictions = RecordingApi(gate=asyncio.Event()), [], []
    dispatcher = await run(api, workers=1)
    dispatcher.add(ApiCall.fixed("event", None, Request("POST", "/events", {})))
    await asyncio.wait_for(api.first_call.wait(), 5)  # the only worker is busy with it
    dispatcher.add(binding_call(bindings))
    victim = PodInfo.from_api({"metadata": {"namespace": "ns", "name": "p", "uid": "u1"}, "spec": {}})
    dispatcher.add(disruption_condition_call(victim, "usher", evictions.append))
    dispatcher.add(victim_delete_call(victim, evictions.append))
    assert evictions == [], "neither is dropped while the binding waits"
    api.gate.set()  # type: ignore[union-attr]
    await settle(dispatcher)
    assert sorted((method, path) for method, path, _ in api.calls) == [
        ("DELETE", "/api/v1/namespaces/ns/pods/p"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p/status"),
        ("POST", "/events"),
        ("POST", "/pods/p/binding"),
    ]
    assert [r.ok for r in evictions] == [True, True] and bindings[0].ok


async def test_a_newer_call_of_the_same_kind_merges_without_resetting_the_delay() -> None:
    api, timers = RecordingApi(), FakeTimers()
    dispatcher = await run(api, timers=timers)
    dispatcher.add(patch_call("first", delay=5), current=pod_with(None))
    await timers.advance(3)
    dispatcher.add(patch_call("second", delay=5))  # merged: due at 5 s still, not at 3 + 5 = 8 s
    await timers.advance(1.9)
    assert api.calls == [], "not due before 5 s"
    await timers.advance(0.1)
    await settle(dispatcher)
    assert len(api.calls) == 1, "fired at 5 s, the first call's due time, not reset by the second"
    assert api.calls[0][2]["status"]["conditions"][0]["message"] == "second"


async def test_a_newer_status_patch_keeps_the_nomination_of_the_one_it_replaces() -> None:
    # kube-scheduler's PodStatusPatchCall.Merge. Without it a preemptor failing again before its first
    # patch went out ("not eligible" while its victims terminate) never showed its nominatedNodeName.
    api, timers = RecordingApi(), FakeTimers()
    dispatcher = await run(api, timers=timers)
    pod = {"metadata": {"namespace": "ns", "name": "p"}, "status": {}}

    def failed(message: str, nominated: str | None) -> Callable[[Mapping[str, Any] | None], dict[str, Any] | None]:
        def patch_for(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
            patch = condition_patch(
                current, kind="PodScheduled", status="False", reason="Unschedulable", message=message
            )
            if nominated is not None:
                patch = patch or {"status": {}}
                patch["status"]["nominatedNodeName"] = nominated or None
            return patch

        return patch_for

    dispatcher.add(pod_status_call(pod, failed("preempting on n1", "n1"), delay=1), current=pod)
    dispatcher.add(pod_status_call(pod, failed("not eligible", None), delay=1), current=pod)
    await timers.advance(1)
    await settle(dispatcher)
    assert len(api.calls) == 1
    status = api.calls[0][2]["status"]
    assert status["nominatedNodeName"] == "n1"
    assert [c["message"] for c in status["conditions"]] == ["not eligible"]


async def test_a_call_that_changes_nothing_is_dropped_at_once() -> None:
    api, results = RecordingApi(), []
    dispatcher = await run(api)
    dispatcher.add(patch_call("same", results=results), current=pod_with("same"))
    await settle(dispatcher)
    assert api.calls == []
    assert results == [NO_OP]


async def test_a_watch_update_that_makes_a_waiting_call_a_no_op_drops_it() -> None:
    api, results, observer = RecordingApi(), [], Observer()
    dispatcher = await run(api, observer)
    dispatcher.add(patch_call("reason", delay=5, results=results), current=pod_with(None))
    assert observer.pending["pod_status_patch"] == 1
    dispatcher.sync_object("ns/p", pod_with("reason"))
    await settle(dispatcher)
    assert api.calls == [] and results == [NO_OP]
    assert observer.pending["pod_status_patch"] == 0


async def test_server_errors_and_throttling_are_retried_with_backoff() -> None:
    slept: list[float] = []

    async def record_sleep(seconds: float) -> None:
        slept.append(seconds)

    api, results = RecordingApi(answers=[500, 429, 503], headers={"Retry-After": "2"}), []
    dispatcher = await run(api, sleep=record_sleep, retry=RetryPolicy(attempts=5))
    dispatcher.add(binding_call(results))
    await settle(dispatcher)
    assert len(api.calls) == 4 and results[0].status == 201
    assert slept[1] == 2.0, "Retry-After is honoured"
    assert 0.1 <= slept[0] <= 0.2 and 0.4 <= slept[2] <= 0.8, "exponential backoff with jitter"


async def test_a_final_error_is_not_retried() -> None:
    api, results = RecordingApi(answers=[409]), []
    dispatcher = await run(api)
    dispatcher.add(binding_call(results))
    await settle(dispatcher)
    assert len(api.calls) == 1 and results[0].status == 409


async def test_never_two_calls_for_one_object_at_once() -> None:
    api = RecordingApi(gate=asyncio.Event())
    dispatcher = await run(api, workers=4)
    dispatcher.add(patch_call("m0"), current=pod_with(None))
    await asyncio.wait_for(api.first_call.wait(), 5)  # m0 is running and held there
    for i in range(1, 5):
        dispatcher.add(patch_call(f"m{i}"))
        for _ in range(3):
            await asyncio.sleep(0)  # idle workers get every chance to take the newer call up
    assert len(api.calls) == 1, "the newer calls wait while m0 runs, though three workers are idle"
    api.gate.set()  # type: ignore[union-attr]
    await settle(dispatcher)
    assert not api.overlap
    messages = [call[2]["status"]["conditions"][0]["message"] for call in api.calls]
    assert messages == ["m0", "m4"], "the waiting versions merged; the newest lands last"


@pytest.mark.parametrize("count", [50])
async def test_untracked_calls_all_run_and_the_gauge_returns_to_zero(count: int) -> None:
    api, observer = RecordingApi(), Observer()
    dispatcher = await run(api, observer)
    for _ in range(count):
        dispatcher.add(ApiCall.fixed("event", None, Request("POST", "/events", {})))
    await settle(dispatcher)
    assert len(api.calls) == count
    assert observer.pending["event"] == 0
    assert observer.finished.count(("event", "success")) == count


async def test_call_waits_for_the_result_and_still_tells_on_done() -> None:
    api, results = RecordingApi(answers=[503, 201]), []
    dispatcher = await run(api, retry=RetryPolicy(attempts=3))
    result = await dispatcher.call(binding_call(results))
    await settle(dispatcher)
    assert result.status == 201 and results == [result]


async def test_a_halted_dispatcher_sends_nothing_more_not_even_queued_bindings() -> None:
    api, results = RecordingApi(), []
    dispatcher = await run(api, workers=2)
    dispatcher.halt()  # leadership lost: synchronous, before any worker runs again
    dispatcher.add(binding_call(results))
    for _ in range(20):
        await asyncio.sleep(0)
    await dispatcher.stop()
    assert api.calls == []
    assert results == []


async def test_a_leader_only_call_is_not_sent_once_this_instance_no_longer_leads() -> None:
    api, results, events = RecordingApi(), [], []
    leads = True
    dispatcher = await run(api, leads=lambda: leads)
    leads = False  # the renew deadline passed; the elector has not run yet
    dispatcher.add(
        ApiCall.fixed(
            "pod_binding", "ns/p", Request("POST", "/pods/p/binding", {}), on_done=results.append, leader_only=True
        )
    )
    dispatcher.add(ApiCall.fixed("event", None, Request("POST", "/events", {}), on_done=events.append))
    await settle(dispatcher)
    assert [c[1] for c in api.calls] == ["/events"], "only the leader-only call was held back"
    assert results == [NOT_LEADING]
    assert events[0].ok


def event_call(n: int, results: list[ApiResult] | None = None) -> ApiCall:
    return ApiCall.fixed(
        "event",
        None,
        Request("POST", f"/events/{n}", {}),
        best_effort=True,
        on_done=results.append if results is not None else None,
    )


async def test_best_effort_calls_go_after_every_other_ready_call() -> None:
    # A burst of scheduled pods: each binding's Event must not delay the next pod's binding.
    api = RecordingApi(gate=asyncio.Event())
    dispatcher = await run(api, workers=1)
    dispatcher.add(event_call(0))
    await asyncio.wait_for(api.first_call.wait(), 5)  # the only worker is busy with it
    for n in range(1, 4):
        dispatcher.add(event_call(n))
        dispatcher.add(
            ApiCall.fixed("pod_binding", f"ns/p{n}", Request("POST", f"/pods/p{n}/binding", {}), relevance=2)
        )
    dispatcher.add(ApiCall.fixed("resourceclaim_unreserve", None, Request("PATCH", "/claims/c", {})))
    api.gate.set()  # type: ignore[union-attr]
    await settle(dispatcher)
    assert [c[1] for c in api.calls] == [
        "/events/0",
        "/pods/p1/binding",
        "/pods/p2/binding",
        "/pods/p3/binding",
        "/claims/c",  # untracked but not best-effort: in arrival order with the bindings
        "/events/1",
        "/events/2",
        "/events/3",
    ]


async def test_best_effort_calls_beyond_the_limit_are_dropped_and_counted() -> None:
    api, observer = RecordingApi(gate=asyncio.Event()), Observer()
    dispatcher = await run(api, observer, workers=1, max_best_effort=3)
    results: list[ApiResult] = []
    dispatcher.add(event_call(0, results))
    await asyncio.wait_for(api.first_call.wait(), 5)
    for n in range(1, 7):
        dispatcher.add(event_call(n, results))  # 1-3 wait; 4-6 find three waiting
    assert results == [DROPPED] * 3, "dropped at once, told to their callers"
    api.gate.set()  # type: ignore[union-attr]
    await settle(dispatcher)
    assert [c[1] for c in api.calls] == ["/events/0", "/events/1", "/events/2", "/events/3"]
    assert observer.dropped == ["event"] * 3
    assert observer.pending["event"] == 0, "a dropped call was never pending"
    dispatcher = await run(api, observer, workers=1, max_best_effort=3)
    dispatcher.add(event_call(7, results))
    await settle(dispatcher)
    assert api.calls[-1][1] == "/events/7", "room again once drained"
