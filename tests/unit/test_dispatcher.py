"""The API dispatcher's call tracking, delays, no-op dropping and retries.

The HTTP transport is the seam: a recording transport answers with scripted
statuses (as httpx's MockTransport would); everything else is the real
dispatcher on a real event loop. The real API server path is covered by the
e2e suite.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from usher.adapters.dispatching import NO_OP, NOT_LEADING, SKIPPED, ApiCall, Dispatcher, Request, RetryPolicy
from usher.adapters.kubeapi import ApiResult
from usher.adapters.reporting import condition_patch


@dataclass
class RecordingApi:
    answers: list[int] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    running: Counter[str] = field(default_factory=Counter)
    overlap: bool = False
    latency: float = 0.0
    first_call: asyncio.Event = field(default_factory=asyncio.Event)

    async def request(self, method: str, path: str, body: Any = None, *, content_type: str = "") -> ApiResult:
        self.running[path] += 1
        self.overlap |= self.running[path] > 1
        self.calls.append((method, path, body))
        self.first_call.set()
        await asyncio.sleep(self.latency)
        self.running[path] -= 1
        status = self.answers.pop(0) if self.answers else 201
        return ApiResult(status=status, body={}, headers=self.headers if status == 429 else {})


@dataclass
class Observer:
    pending: Counter[str] = field(default_factory=Counter)
    finished: list[tuple[str, str]] = field(default_factory=list)

    def call_finished(self, call_type: str, result: str, seconds: float) -> None:
        self.finished.append((call_type, result))

    def pending_changed(self, call_type: str, delta: int) -> None:
        self.pending[call_type] += delta


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
    api, results, patches = RecordingApi(latency=0.05), [], []
    dispatcher = await run(api, workers=1)
    dispatcher.add(ApiCall.fixed("event", None, Request("POST", "/events", {})))  # keeps the only worker busy
    dispatcher.add(binding_call(results))
    dispatcher.add(patch_call("late", results=patches), current=pod_with(None))
    await settle(dispatcher)
    assert [c[1] for c in api.calls] == ["/events", "/pods/p/binding"]
    assert patches == [SKIPPED]


async def test_a_newer_call_of_the_same_kind_merges_without_resetting_the_delay() -> None:
    api = RecordingApi()
    dispatcher = await run(api)
    loop = asyncio.get_running_loop()
    started = loop.time()
    dispatcher.add(patch_call("first", delay=0.4), current=pod_with(None))
    await asyncio.sleep(0.3)
    dispatcher.add(patch_call("second", delay=0.4))
    await asyncio.wait_for(api.first_call.wait(), 5)
    fired = loop.time() - started
    await settle(dispatcher)
    # Due at 0.4 s; a reset delay would have fired at 0.7 s.
    assert 0.35 < fired < 0.65, f"fired after {fired:.2f}s: the first call's due time, not reset by the second"
    assert len(api.calls) == 1
    assert api.calls[0][2]["status"]["conditions"][0]["message"] == "second"


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
    dispatcher = Dispatcher(api, sleep=record_sleep, retry=RetryPolicy(attempts=5))  # type: ignore[arg-type]
    dispatcher.start()
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
    api = RecordingApi(latency=0.05)
    dispatcher = await run(api, workers=4)
    for i in range(5):
        dispatcher.add(patch_call(f"m{i}"), current=pod_with(None))
        await asyncio.sleep(0.01)
    await settle(dispatcher)
    assert not api.overlap
    assert api.calls[-1][2]["status"]["conditions"][0]["message"] == "m4", "the newest message lands last"


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
    dispatcher = Dispatcher(api, retry=RetryPolicy(attempts=3, initial_delay=0.001))  # type: ignore[arg-type]
    dispatcher.start()
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
