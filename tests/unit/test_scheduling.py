"""The run-time pieces (loop, scheduling and binding cycles, failure reporting) over fakes of their ports.

The scheduler is built by the composition root's ``build_scheduler`` exactly
as ``usher run`` builds it, with the real core (cache, queue, plugins) and
fakes only where the API server and Prometheus would be: a writer that keeps
the calls it is given, a binder that answers as the test says, a recorder
that keeps what it is told. No test sleeps: the loop runs as a task and the
test yields to it until a condition holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pvc
from tests.frameworks import RecordingClaimWriter, RecordingVolumeWriter
from usher.adapters.dispatching import ApiCall
from usher.adapters.kubeapi import ApiResult
from usher.app import build_scheduler
from usher.config import default_config
from usher.core.clock import FakeClock
from usher.core.queue import Where
from usher.core.types import Cause, NodeName, PodInfo, PodKey, Status, error
from usher.explaining import explain, render
from usher.features import parse_feature_gates
from usher.scheduling.scheduler import Scheduler


@dataclass
class RecordingWriter:
    """The dispatcher's place: keeps every call (Events and status patches) in order."""

    calls: list[ApiCall] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)

    def add(self, call: ApiCall, current: Mapping[str, Any] | None = None) -> None:
        self.calls.append(call)

    def sync_object(self, key: str, obj: Mapping[str, Any]) -> None:
        pass

    def forget_object(self, key: str) -> None:
        self.forgotten.append(key)

    def events(self, reason: str) -> list[Mapping[str, Any]]:
        bodies = [call.build(None) for call in self.calls if call.call_type == "event"]
        return [r.body for r in bodies if r is not None and isinstance(r.body, Mapping) and r.body["reason"] == reason]

    def conditions(self, pod: str) -> list[Mapping[str, Any]]:
        found = []
        for call in self.calls:
            if call.call_type == "pod_status_patch" and call.object_key == pod:
                request = call.build(None)
                assert request is not None and isinstance(request.body, Mapping)
                found.extend(request.body["status"]["conditions"])
        return found


@dataclass
class ScriptedBinder:
    """Binds by answering with the next scripted status (Success once the script runs out)."""

    answers: list[Status] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def bind(self, pod: PodInfo, node: NodeName) -> Status:
        self.calls.append((pod.key, node))
        return self.answers.pop(0) if self.answers else Status()


@dataclass
class RecordingRecorder:
    """Every recorder protocol; keeps the scheduling outcomes it is told."""

    attempts: list[tuple[str, str]] = field(default_factory=list)
    scheduled: list[tuple[int, bool]] = field(default_factory=list)
    handled: list[str] = field(default_factory=list)
    algorithm_runs: int = 0
    preemption_attempts: int = 0
    victims_chosen: list[int] = field(default_factory=list)
    preemptions_finished: list[tuple[str, str]] = field(default_factory=list)
    preemptions_evaluated: list[tuple[str, str]] = field(default_factory=list)
    group_attempts: list[str] = field(default_factory=list)
    placements: list[tuple[int, int]] = field(default_factory=list)
    workload_preemptions: list[tuple[str, int]] = field(default_factory=list)
    disruptions: list[tuple[str, int, int]] = field(default_factory=list)
    permit_waits: list[str] = field(default_factory=list)
    placement_times: list[str] = field(default_factory=list)

    def algorithm_finished(self, seconds: float) -> None:
        self.algorithm_runs += 1

    def attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        self.attempts.append((result, profile))

    def pod_scheduled(self, *, attempts: int, sli_seconds: float | None, flushed: bool) -> None:
        self.scheduled.append((attempts, flushed))

    def event_handled(self, event: str, seconds: float) -> None:
        self.handled.append(event)

    def preemption_attempted(self) -> None:
        self.preemption_attempts += 1

    def preemption_victims_chosen(self, count: int) -> None:
        self.victims_chosen.append(count)

    def preemption_evaluated(self, preemptor: str, result: str, seconds: float) -> None:
        self.preemptions_evaluated.append((preemptor, result))

    def preemption_finished(self, preemptor: str, result: str, seconds: float) -> None:
        self.preemptions_finished.append((preemptor, result))

    def preemption_disruptions(self, preemptor: str, budget_violations: int, group_disruptions: int) -> None:
        self.disruptions.append((preemptor, budget_violations, group_disruptions))

    def permit_waited(self, result: str, seconds: float) -> None:
        self.permit_waits.append(result)

    def placement_timed(self, result: str, profile: str, seconds: float) -> None:
        self.placement_times.append(result)

    def pod_group_attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        self.group_attempts.append(result)

    def pod_group_algorithm_finished(self, seconds: float) -> None:
        pass

    def placements_evaluated(self, profile: str, generated: int, feasible: int) -> None:
        self.placements.append((generated, feasible))

    def workload_preemption_attempted(self, result: str, victims: int) -> None:
        self.workload_preemptions.append((result, victims))

    def incoming(self, queue: str, event: str) -> None:
        pass

    def hint_evaluated(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        pass

    def pre_hint_evaluated(self, plugin: str, result: str) -> None:
        pass

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        pass

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        pass


@dataclass
class Harness:
    scheduler: Scheduler
    clock: FakeClock
    writer: RecordingWriter
    binder: ScriptedBinder
    recorder: RecordingRecorder
    leading: asyncio.Event

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Yield to the loop and its tasks until ``condition`` holds (bounded in rounds, not time)."""
        for _ in range(10_000):
            if condition():
                return
            await asyncio.sleep(0)
        raise AssertionError(f"never happened: {what}")

    async def idle(self) -> None:
        """Let every ready task run to its next wait."""
        for _ in range(200):
            await asyncio.sleep(0)

    def nodes(self, *names: str, cpu: str = "2") -> None:
        for name in names:
            node = make_node().name(name).capacity(cpu=cpu, memory="4Gi", pods=110).obj()
            self.scheduler.events.on_node("ADDED", node)

    def pod(self, raw: dict[str, Any]) -> PodKey:
        self.scheduler.events.on_pod("ADDED", raw)
        meta = raw["metadata"]
        return PodKey(f"{meta['namespace']}/{meta['name']}")


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    clock = FakeClock()
    writer = RecordingWriter()
    binder = ScriptedBinder()
    recorder = RecordingRecorder()
    leading = asyncio.Event()
    leading.set()
    scheduler = build_scheduler(
        default_config(),
        parse_feature_gates(None),
        clock=clock,
        recorder=recorder,
        writer=writer,
        binder=binder,
        claim_writer=RecordingClaimWriter(),
        volume_writer=RecordingVolumeWriter(),
        leading=leading,
        seed=1,
    )
    scheduler.events.mark_synced()
    task = asyncio.create_task(scheduler.loop.run())
    yield Harness(scheduler, clock, writer, binder, recorder, leading)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_pod_that_fits_is_bound_reported_scheduled_and_counted(harness: Harness) -> None:
    harness.nodes("n1")
    key = harness.pod(make_pod().name("p").req(cpu="1").obj())

    await harness.until(lambda: harness.recorder.scheduled != [], "the pod is scheduled")

    assert harness.binder.calls == [(key, "n1")]
    assert harness.scheduler.cache.node_of(key) == "n1"
    assert harness.scheduler.queue.get(key) is None
    assert harness.recorder.attempts == [("scheduled", "usher")]
    assert harness.recorder.scheduled == [(1, False)]
    assert [e["note"] for e in harness.writer.events("Scheduled")] == ["Successfully assigned default/p to n1"]
    assert "PodAdd" in harness.recorder.handled and "NodeAdd" in harness.recorder.handled


async def test_a_follower_pops_nothing_until_it_leads(harness: Harness) -> None:
    harness.leading.clear()
    harness.nodes("n1")
    key = harness.pod(make_pod().name("p").obj())
    await harness.idle()

    assert harness.binder.calls == []
    assert harness.recorder.algorithm_runs == 0

    harness.leading.set()
    await harness.until(lambda: harness.binder.calls != [], "the new leader binds")
    assert harness.binder.calls == [(key, "n1")]


async def test_a_burst_s_bindings_start_after_at_most_yield_every_scheduling_cycles(harness: Harness) -> None:
    from usher.scheduling.loop import YIELD_EVERY

    cycles_at_bind: list[int] = []
    bind = harness.binder.bind

    async def counting(pod: PodInfo, node: NodeName) -> Status:
        cycles_at_bind.append(harness.recorder.algorithm_runs)
        return await bind(pod, node)

    harness.binder.bind = counting  # type: ignore[method-assign]
    harness.leading.clear()
    harness.nodes("n1")
    for i in range(3 * YIELD_EVERY):
        harness.pod(make_pod().name(f"p{i}").obj())
    harness.leading.set()
    await harness.until(lambda: len(harness.binder.calls) == 3 * YIELD_EVERY, "every pod is bound")

    # A pod's binding waits for the loop's next yield: never more than YIELD_EVERY cycles behind it.
    assert max(cycles - i for i, cycles in enumerate(cycles_at_bind)) <= YIELD_EVERY
    assert cycles_at_bind[0] >= 1


async def test_an_unschedulable_pod_is_requeued_and_reported_once_a_minute(harness: Harness) -> None:
    harness.nodes("n1", cpu="1")
    key = harness.pod(make_pod().name("big").req(cpu="4").obj())

    await harness.until(lambda: harness.recorder.attempts != [], "the attempt fails")

    assert harness.recorder.attempts == [("unschedulable", "usher")]
    queued = harness.scheduler.queue.get(key)
    assert queued is not None and queued.unschedulable_plugins == {"NodeResourcesFit"}
    # 4 cpu on a 1-cpu node: no eviction can help (kube-scheduler v1.37's fitsRequest: Unresolvable).
    message = (
        "0/1 nodes are available: 1 Insufficient cpu."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    assert [e["note"] for e in harness.writer.events("FailedScheduling")] == [message]
    assert harness.writer.conditions(key)[-1]["reason"] == "Unschedulable"
    record = harness.scheduler.attempts.last(key)
    assert record is not None and record.nodes == {"n1": "Insufficient cpu"}


async def test_the_same_failure_is_reported_by_an_event_at_most_once_a_minute(harness: Harness) -> None:
    harness.nodes("n1")
    harness.binder.answers = [error("binding rejected: etcd is down")] * 3
    key = harness.pod(make_pod().name("p").obj())
    await harness.until(lambda: len(harness.recorder.attempts) == 1, "the first binding fails")

    harness.clock.advance(30)  # past the backoff, within the minute
    harness.nodes("n1")  # any event wakes the loop
    await harness.until(lambda: len(harness.recorder.attempts) == 2, "the second binding fails")
    assert len(harness.writer.events("FailedScheduling")) == 1
    assert len(harness.writer.conditions(key)) == 2  # the condition is re-asserted every time
    assert harness.writer.conditions(key)[-1]["reason"] == "SchedulerError", "an error, not a rejection"

    harness.clock.advance(31)  # a minute after the first report: news again
    harness.nodes("n1")
    await harness.until(lambda: len(harness.recorder.attempts) == 3, "the third binding fails")
    assert len(harness.writer.events("FailedScheduling")) == 2


async def test_a_binding_conflict_is_retried_silently_until_the_watch_shows_the_pod_bound(harness: Harness) -> None:
    harness.nodes("n1")
    harness.binder.answers = [error("pod is bound already", Cause.POD_CONFLICT)]
    raw = make_pod().name("p").obj()
    key = harness.pod(raw)

    await harness.until(lambda: harness.binder.calls != [], "the binding is tried")
    await harness.idle()

    # A 409 is no proof (etcd failing mid-request answers 409 too): the pod stays queued, nothing reported.
    queued = harness.scheduler.queue.get(key)
    assert queued is not None and queued.where is not Where.IN_FLIGHT
    assert harness.scheduler.cache.node_of(key) is None
    assert harness.writer.events("FailedScheduling") == []
    assert harness.recorder.attempts == []

    bound = {**raw, "metadata": {**raw["metadata"], "resourceVersion": "2"}, "spec": {**raw["spec"], "nodeName": "n1"}}
    harness.scheduler.events.on_pod("MODIFIED", bound)
    assert harness.scheduler.queue.get(key) is None


async def test_a_deleted_pod_is_not_retried_nor_reported(harness: Harness) -> None:
    harness.nodes("n1")
    harness.binder.answers = [error("pod no longer exists", Cause.POD_NOT_FOUND)]
    key = harness.pod(make_pod().name("p").obj())

    await harness.until(lambda: harness.binder.calls != [], "the binding is tried")
    await harness.idle()

    assert harness.scheduler.queue.get(key) is None
    assert harness.scheduler.cache.node_of(key) is None
    assert harness.writer.events("FailedScheduling") == []
    assert harness.recorder.attempts == []


async def test_a_failed_binding_forgets_the_assumption_and_retries_the_pod(harness: Harness) -> None:
    harness.nodes("n1")
    harness.binder.answers = [error("binding rejected: etcd is down")]
    key = harness.pod(make_pod().name("p").obj())

    await harness.until(lambda: harness.recorder.attempts != [], "the binding fails")

    assert harness.recorder.attempts == [("error", "usher")]
    assert harness.scheduler.cache.node_of(key) is None
    assert harness.scheduler.queue.get(key) is not None
    notes = [e["note"] for e in harness.writer.events("FailedScheduling")]
    assert notes == ["binding rejected: etcd is down"]

    harness.clock.advance(11)  # past the maximum backoff
    harness.nodes("n2")
    await harness.until(lambda: harness.recorder.scheduled != [], "the retry binds")
    assert harness.recorder.scheduled == [(2, False)]


async def test_a_bug_in_one_cycle_costs_that_pod_one_attempt_not_the_loop(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.nodes("n1")
    real = harness.scheduler.cache.node_infos
    calls = 0

    def broken_once() -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug")
        return real()

    monkeypatch.setattr(harness.scheduler.cache, "node_infos", broken_once)
    first = harness.pod(make_pod().name("unlucky").obj())
    await harness.until(lambda: calls == 1, "the first cycle raises")
    second = harness.pod(make_pod().name("next").obj())

    await harness.until(lambda: (second, "n1") in harness.binder.calls, "the next pod is still scheduled")
    assert harness.scheduler.queue.get(first) is not None


async def test_a_malformed_pod_is_reported_on_the_pod_and_the_loop_goes_on(harness: Harness) -> None:
    harness.nodes("n1")
    bad = harness.pod(make_pod().name("bad").req(cpu="lots").obj())
    good = harness.pod(make_pod().name("good").obj())

    await harness.until(lambda: harness.binder.calls != [], "the good pod is bound")

    assert harness.binder.calls == [(good, "n1")]
    notes = [e["note"] for e in harness.writer.events("FailedScheduling")]
    assert len(notes) == 1 and notes[0].startswith("pod cannot be scheduled:")
    assert harness.writer.conditions(bad)[-1]["reason"] == "Unschedulable"


async def test_a_pod_asking_for_more_than_int64_is_reported_as_malformed_and_the_loop_goes_on(
    harness: Harness,
) -> None:
    """A quantity the API server stores but kube-scheduler's int64 arithmetic overflows on (``1e999999``)."""
    harness.nodes("n1")
    huge = harness.pod(make_pod().name("huge").req(memory="1e999999").obj())
    good = harness.pod(make_pod().name("good").obj())

    await harness.until(lambda: harness.binder.calls != [], "the good pod is bound")

    assert harness.binder.calls == [(good, "n1")]
    assert harness.scheduler.queue.get(huge) is None
    [note] = [e["note"] for e in harness.writer.events("FailedScheduling")]
    assert note.startswith("pod cannot be scheduled: quantity '1e999999' is out of range")
    assert harness.writer.conditions(huge)[-1]["reason"] == "Unschedulable"


async def test_a_deleted_pod_is_forgotten_by_the_writer_and_the_explain_records(harness: Harness) -> None:
    harness.nodes("n1", cpu="1")
    raw = make_pod().name("big").req(cpu="4").obj()
    key = harness.pod(raw)
    await harness.until(lambda: harness.scheduler.attempts.last(key) is not None, "the attempt fails")

    harness.scheduler.events.on_pod("DELETED", raw)

    assert harness.scheduler.attempts.last(key) is None
    assert harness.writer.forgotten == [key]
    assert harness.scheduler.queue.get(key) is None


async def test_a_higher_priority_pod_preempts_is_nominated_and_the_victim_is_marked(harness: Harness) -> None:
    harness.nodes("n1", cpu="2")
    low = harness.pod(make_pod().name("low").priority(1).node("n1").req(cpu="2").obj())
    high = harness.pod(make_pod().name("high").priority(100).req(cpu="2").obj())

    await harness.until(lambda: harness.recorder.attempts != [], "the preemptor's attempt fails")

    assert harness.recorder.preemption_attempts == 1 and harness.recorder.victims_chosen == [1]
    assert harness.recorder.disruptions == [("pod", 0, 0)], "no budget broken, no pod group disrupted"
    assert harness.scheduler.queue.nominator.node_of(high) == "n1"
    patches = [c for c in harness.writer.calls if c.call_type == "pod_status_patch"]
    victim_patch = next(c for c in patches if c.object_key == low).build(None)
    assert victim_patch is not None and isinstance(victim_patch.body, Mapping)
    [condition] = victim_patch.body["status"]["conditions"]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "PreemptionByScheduler")
    own = next(c for c in patches if c.object_key == high).build(None)
    assert own is not None and isinstance(own.body, Mapping) and own.body["status"]["nominatedNodeName"] == "n1"
    [note] = [e["note"] for e in harness.writer.events("FailedScheduling")]
    assert note == (
        "0/1 nodes are available: 1 Insufficient cpu."
        " preemption: found a potential placement for pod on node n1, preempting 1 victims"
    )


async def test_a_preemptor_is_held_until_its_evictions_return_then_retried_if_an_event_came_meanwhile(
    harness: Harness,
) -> None:
    harness.nodes("n1", cpu="2")
    low = harness.pod(make_pod().name("low").priority(1).node("n1").req(cpu="2").obj())
    high = harness.pod(make_pod().name("high").priority(100).req(cpu="2").obj())
    await harness.until(lambda: harness.recorder.attempts != [], "the preemptor's attempt fails")

    harness.nodes("n2", cpu="4")  # an event that would retry the pod at once: held instead
    await harness.idle()
    queued = harness.scheduler.queue.get(high)
    assert queued is not None and queued.gating_plugin == "DefaultPreemption"
    assert len(harness.recorder.attempts) == 1
    uid = queued.pod.uid

    condition = next(c for c in harness.writer.calls if c.call_type == "pod_status_patch" and c.object_key == low)
    assert condition.on_done is not None
    condition.on_done(ApiResult(200, {}))
    delete = next(c for c in harness.writer.calls if c.call_type == "pod_delete")
    assert delete.object_key == low and delete.on_done is not None
    delete.on_done(ApiResult(200, {}))

    await harness.until(lambda: len(harness.recorder.attempts) == 2, "the preemptor is retried")
    assert harness.recorder.preemptions_evaluated == [("pod", "Success")]
    assert harness.recorder.preemptions_finished == [("pod", "success")]
    assert [e["note"] for e in harness.writer.events("Preempted")] == [f"Preempted by pod {uid} on node n1"]


async def test_a_preemptor_whose_eviction_fails_waits_out_its_backoff_though_nothing_else_is_queued(
    harness: Harness,
) -> None:
    """PopFromBackoffQ takes a rejected pod early when activeQ is empty; a failed eviction's backoff is an
    error's, kept in full, so an eviction that keeps failing (403, a webhook) is no busy loop."""
    harness.nodes("n1", cpu="2")
    low = harness.pod(make_pod().name("low").priority(1).node("n1").req(cpu="2").obj())
    high = harness.pod(make_pod().name("high").priority(100).req(cpu="2").obj())
    await harness.until(lambda: harness.recorder.attempts != [], "the preemptor's attempt fails")

    condition = next(c for c in harness.writer.calls if c.call_type == "pod_status_patch" and c.object_key == low)
    assert condition.on_done is not None
    condition.on_done(ApiResult(403, {"message": "pods is forbidden"}))
    await harness.idle()
    queued = harness.scheduler.queue.get(high)
    assert queued is not None and queued.where is Where.BACKOFF
    assert len(harness.recorder.attempts) == 1, "not taken early from backoffQ, though activeQ is empty"
    assert harness.recorder.preemptions_finished == [("pod", "error")]

    harness.clock.advance(11)  # past the maximum backoff
    harness.nodes("n2", cpu="1")  # wakes the loop; too small for the preemptor
    await harness.until(lambda: len(harness.recorder.attempts) == 2, "retried once its backoff is over")


async def test_a_nomination_preemption_can_no_longer_honour_is_cleared(harness: Harness) -> None:
    harness.nodes("n1", cpu="2")
    harness.pod(make_pod().name("peer").priority(100).node("n1").req(cpu="2").obj())
    raw = make_pod().name("high").priority(100).req(cpu="2").obj()
    raw["status"]["nominatedNodeName"] = "n1"
    key = harness.pod(raw)
    harness.scheduler.queue.nominate(PodInfo.from_api(raw), "n1")

    await harness.until(lambda: harness.recorder.attempts != [], "the attempt fails")

    assert harness.scheduler.queue.nominator.node_of(key) is None
    patch = next(c for c in harness.writer.calls if c.call_type == "pod_status_patch" and c.object_key == key)
    request = patch.build(raw)
    assert request is not None and isinstance(request.body, Mapping)
    assert request.body["status"]["nominatedNodeName"] is None


async def test_explain_shows_the_nomination_and_the_victims_still_to_go(harness: Harness) -> None:
    harness.nodes("n1", cpu="2")
    low_raw = make_pod().name("low").priority(1).node("n1").req(cpu="2").obj()
    low = harness.pod(low_raw)
    high = harness.pod(make_pod().name("high").priority(100).req(cpu="2").obj())
    await harness.until(lambda: harness.recorder.attempts != [], "the preemptor's attempt fails")

    report = explain(harness.scheduler, high)
    assert report["nominatedNode"] == "n1" and report["waitingForVictims"] == [low]
    assert "  nominated to node n1 (preemption made room there); waiting for its victims to go: default/low" in (
        render(report).splitlines()
    )

    harness.scheduler.events.on_pod("DELETED", low_raw)
    assert explain(harness.scheduler, high)["waitingForVictims"] == []


async def test_slow_cycles_yield_to_other_tasks_between_pods(harness: Harness) -> None:
    ticks = iter(range(1_000_000))
    start = time.perf_counter()
    harness.scheduler.loop._timer = lambda: start + (next(ticks) + 1) * 0.02  # each cycle looks 20 ms long
    harness.nodes("n1", cpu="1")
    for name in ("a", "b"):
        harness.pod(make_pod().name(name).req(cpu="4").obj())
    seen: list[int] = []

    async def other_task() -> None:
        seen.append(len(harness.recorder.attempts))

    task = asyncio.create_task(other_task())
    await harness.until(lambda: len(harness.recorder.attempts) == 2, "both pods are tried")
    await task

    assert seen == [1], "the other task ran between the two attempts, not after both"


async def test_preempting_on_a_node_clears_lower_priority_nominations_there(harness: Harness) -> None:
    harness.nodes("n1", cpu="2")
    harness.pod(make_pod().name("low").priority(1).node("n1").req(cpu="2").obj())
    mid_raw = make_pod().name("mid").priority(50).req(cpu="2").gates("hold").obj()
    mid_raw["status"]["nominatedNodeName"] = "n1"
    mid = harness.pod(mid_raw)
    assert harness.scheduler.queue.nominator.node_of(mid) == "n1"

    harness.pod(make_pod().name("high").priority(100).req(cpu="2").obj())
    await harness.until(lambda: harness.recorder.victims_chosen == [1], "the high-priority pod preempts")

    assert harness.scheduler.queue.nominator.node_of(mid) is None
    patches = [
        c.build(mid_raw) for c in harness.writer.calls if c.call_type == "pod_status_patch" and c.object_key == mid
    ]
    assert any(r is not None and r.body == {"status": {"nominatedNodeName": None}} for r in patches)


async def test_explain_shows_where_each_of_the_pods_claims_stands(harness: Harness) -> None:
    harness.nodes("n1", cpu="2")
    wffc = {
        "metadata": {"name": "local"},
        "provisioner": "example.com/csi",
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    harness.scheduler.events.on_volume("storageclasses", "ADDED", wffc)
    harness.scheduler.events.on_volume(
        "persistentvolumeclaims", "ADDED", make_pvc().name("late").storage_class("local").obj()
    )
    pod = harness.pod(make_pod().name("p").pvc("missing", volume="a").pvc("late", volume="b").obj())
    await harness.until(lambda: harness.recorder.attempts != [], "the attempt fails")

    lines = render(explain(harness.scheduler, pod)).splitlines()
    assert "  volume a: claim missing does not exist" in lines
    assert "  volume b: claim late unbound, class local binds when a node is chosen (WaitForFirstConsumer)" in lines


async def test_a_failed_binding_frees_its_room_for_the_pods_it_kept_out(harness: Harness) -> None:
    # kube-scheduler's handleBindingCycleError: forgetting the assumed pod is an AssignedPodDelete.
    harness.nodes("n1", cpu="2")
    release = asyncio.Event()
    scripted = harness.binder.bind

    async def bind(pod: PodInfo, node: NodeName) -> Status:
        if pod.name == "big":
            await release.wait()
            return error("binding rejected: etcd is down")
        return await scripted(pod, node)

    harness.binder.bind = bind  # type: ignore[method-assign]
    harness.pod(make_pod().name("big").req(cpu="2").obj())
    await harness.until(lambda: harness.scheduler.cache.is_assumed(PodKey("default/big")), "big is assumed")
    small = harness.pod(make_pod().name("small").req(cpu="1").obj())
    await harness.until(
        lambda: (
            harness.scheduler.queue.get(small) is not None
            and harness.scheduler.queue.get(small).where is Where.UNSCHEDULABLE
        ),
        "small waits for room",
    )  # type: ignore[union-attr]

    release.set()
    await harness.until(
        lambda: harness.scheduler.queue.get(small).where is not Where.UNSCHEDULABLE, "small is requeued"
    )  # type: ignore[union-attr]
    harness.clock.advance(1)  # small's backoff
    harness.nodes("n1")  # wakes the loop; no cluster event
    await harness.until(lambda: ("default/small", "n1") in harness.binder.calls, "small is bound where big was")


@pytest.mark.parametrize("phase", ["PreBind", "Bind"])
async def test_a_binding_cycle_cancelled_at_shutdown_rolls_back_only_before_bind(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, phase: str
) -> None:
    """Cancelled before Bind, the cycle unreserves and forgets the assumed pod (its rollback writes drain before
    the Lease is released); cancelled in Bind, the binding is the dispatcher's, and rolling back beside a binding
    that may still land would leave a bound pod without what it reserved."""
    from usher.core.framework.runtime import Framework

    held = asyncio.Event()
    unreserved: list[str] = []
    real_unreserve = Framework.run_unreserve

    async def waiting_pre_bind(self: Framework, state: Any, pod: PodInfo, node: NodeName) -> Status:
        if phase == "PreBind":
            held.set()
            await asyncio.Event().wait()
        return Status()

    async def waiting_bind(pod: PodInfo, node: NodeName) -> Status:
        held.set()
        await asyncio.Event().wait()
        return Status()

    def recording_unreserve(self: Framework, state: Any, pod: PodInfo, node: NodeName) -> None:
        unreserved.append(pod.key)
        real_unreserve(self, state, pod, node)

    monkeypatch.setattr(Framework, "run_pre_bind", waiting_pre_bind)
    monkeypatch.setattr(Framework, "run_unreserve", recording_unreserve)
    harness.binder.bind = waiting_bind  # type: ignore[method-assign]
    harness.nodes("n1")
    key = harness.pod(make_pod().name("p").req(cpu="1").obj())
    await harness.until(held.is_set, f"the cycle waits in {phase}")
    [task] = harness.scheduler.loop.bindings_in_flight()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    if phase == "PreBind":
        assert unreserved == [key]
        assert not harness.scheduler.cache.is_assumed(key)
    else:
        assert unreserved == []
        assert harness.scheduler.cache.is_assumed(key), "the binding may still land: the assumption stays"
