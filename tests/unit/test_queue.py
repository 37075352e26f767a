"""The scheduling queue, behaviour by behaviour, on a fake clock."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import framework, scheduling_queue
from usher.core.clock import FakeClock
from usher.core.events import ActionType, ClusterEvent, Resource, node_update_events, pod_update_events
from usher.core.framework.runtime import Framework, PluginSet
from usher.core.hints import ALL_PODS, ClusterEventWithHint, PreQueueingHintResult, only
from usher.core.plugins.queuesort import PrioritySort
from usher.core.plugins.schedulinggates import SchedulingGates
from usher.core.queue import QueuedPod, SchedulingQueue, Where
from usher.core.types import PodInfo, PodKey, QueueingHint, Status, unschedulable

NODE_ADD = ClusterEvent(Resource.NODE, ActionType.ADD)
NODE_LABEL = ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL)
CLAIM_ADD = ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.ADD)


def pod(name: str, priority: int = 0, **kw: Any) -> PodInfo:
    builder = make_pod().name(name).uid(f"uid-{name}").priority(priority)
    if "gates" in kw:
        builder.gates(*kw["gates"])
    return PodInfo.from_api(builder.obj())


@dataclass
class Recorder:
    moves: list[tuple[str, str]] = field(default_factory=list)
    hints: list[tuple[str, str, str]] = field(default_factory=list)
    pre_hints: list[tuple[str, str]] = field(default_factory=list)

    def incoming(self, queue: str, event: str) -> None:
        self.moves.append((queue, event))

    def hint_evaluated(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        self.hints.append((plugin, event, hint))

    def pre_hint_evaluated(self, plugin: str, result: str) -> None:
        self.pre_hints.append((plugin, result))


@dataclass
class Rejector:
    """A test plugin: registers ``events`` with a hint answering ``answer`` (or raising)."""

    name: str
    events: Sequence[ClusterEvent] = (NODE_ADD,)
    answer: QueueingHint | None = QueueingHint.QUEUE
    pre_hint: Callable[[Any, Any], PreQueueingHintResult] | None = None
    calls: list[str] = field(default_factory=list)

    def hint(self, p: PodInfo, old: Any, new: Any) -> QueueingHint:
        self.calls.append(p.name)
        if self.answer is None:
            raise RuntimeError("hint bug")
        return self.answer

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(e, hint=self.hint, pre_hint=self.pre_hint) for e in self.events]


def framework_with(*plugins: Any, gates: bool = True) -> Framework:
    plugin_set = PluginSet(queue_sort=PrioritySort())
    if gates:
        plugin_set.pre_enqueue.append(SchedulingGates())
        plugin_set.all.append(SchedulingGates())
    plugin_set.all.extend(plugins)
    return Framework("usher", plugin_set)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def popped(queue: SchedulingQueue) -> QueuedPod:
    queued = queue.pop()
    assert queued is not None
    return queued


def fail(queue: SchedulingQueue, name: str, *plugins: str, pending: Sequence[str] = ()) -> QueuedPod:
    queued = popped(queue)
    assert queued.pod.name == name
    queue.add_unschedulable(queued, unschedulable_plugins=plugins, pending_plugins=pending)
    return queued


def where(queue: SchedulingQueue, name: str) -> Where | None:
    queued = queue.get(PodKey(f"default/{name}"))
    return queued.where if queued is not None else None


# ---------------------------------------------------------------------- activeQ order


def test_higher_priority_pops_first_then_the_earlier_queue_time(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("low-old", 0))
    clock.advance(1)
    queue.add(pod("high", 10))
    clock.advance(1)
    queue.add(pod("low-new", 0))
    assert [popped(queue).pod.name for _ in range(3)] == ["high", "low-old", "low-new"]
    assert queue.pop() is None


def test_a_priority_change_while_queued_reorders_the_pod(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a", 0))
    queue.add(pod("b", 0))
    queue.update(pod("b", 0), pod("b", 100))
    assert popped(queue).pod.name == "b"


# ---------------------------------------------------------------------- backoff


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [(1, 1), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10), (1025, 10), (100_000, 10)],
    ids=str,
)
def test_backoff_doubles_from_one_second_up_to_ten(clock: FakeClock, failures: int, seconds: float) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a"))
    queued = popped(queue)
    queued.unschedulable_count = failures
    assert queue.backoff_duration(queued) == seconds


def test_a_max_backoff_of_zero_disables_backoff(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, max_backoff=0)
    queue.add(pod("a"))
    fail(queue, "a")  # an error: no rejecting plugin
    assert where(queue, "a") is Where.ACTIVE


def test_an_error_backs_off_and_is_never_popped_early(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a"))
    queued = fail(queue, "a")
    assert queued.consecutive_errors == 1
    assert queue.pending() == {"active": 0, "backoff": 1, "unschedulable": 0, "gated": 0}
    assert queue.pop() is None, "the error heap is never popped early"
    clock.advance(1)
    queue.flush()
    assert popped(queue).pod.name == "a"


def test_a_rejected_pod_in_backoff_is_popped_early_when_activeq_is_empty(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    queue.move_all(NODE_ADD)
    assert where(queue, "a") is Where.BACKOFF
    assert popped(queue).pod.name == "a"  # PopFromBackoffQ


def test_without_pop_from_backoffq_a_pod_waits_out_its_backoff(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit), pop_from_backoff_q=False)
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    queue.move_all(NODE_ADD)
    assert queue.pop() is None
    assert queue.next_wakeup() == pytest.approx(clock.now() + 1)
    clock.advance(1)
    queue.flush()
    assert popped(queue).pod.name == "a"


def test_the_queue_timestamp_resets_when_a_pod_fails(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a"))
    clock.advance(5)
    queue.add(pod("b"))
    queued = popped(queue)
    clock.advance(5)
    queue.add_unschedulable(queued)  # error -> backoff 1 s from *now*
    clock.advance(1)
    queue.flush()
    assert popped(queue).pod.name == "b", "a came back with a fresh timestamp, behind b"
    assert queued.initial_attempt_timestamp == 1005.0


# ---------------------------------------------------------------------- the unschedulable pool and hints


def test_a_rejected_pod_waits_in_the_pool_until_a_helpful_event(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    assert queue.pending()["unschedulable"] == 1
    clock.advance(60)
    queue.flush()
    assert queue.pop() is None
    assert queue.move_all(NODE_ADD) == 1
    assert where(queue, "a") is Where.ACTIVE  # its 1 s backoff is long over


def test_an_event_whose_hint_says_skip_leaves_the_pod_in_the_pool(clock: FakeClock) -> None:
    fit = Rejector("Fit", answer=QueueingHint.QUEUE_SKIP)
    queue = scheduling_queue(clock, framework_with(fit))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    assert queue.move_all(NODE_ADD) == 0
    assert fit.calls == ["a"]
    assert where(queue, "a") is Where.UNSCHEDULABLE


def test_an_event_the_rejecting_plugin_did_not_register_is_not_even_asked(clock: FakeClock) -> None:
    fit = Rejector("Fit", events=(NODE_ADD,))
    queue = scheduling_queue(clock, framework_with(fit, Rejector("Labels", events=(NODE_LABEL,))))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    assert queue.move_all(NODE_LABEL) == 0
    assert fit.calls == []


def test_only_the_hints_of_plugins_that_rejected_the_pod_are_asked(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    taints = Rejector("Taints")
    queue = scheduling_queue(clock, framework_with(fit, taints))
    queue.add(pod("a"))
    fail(queue, "a", "Taints")
    queue.move_all(NODE_ADD)
    assert (fit.calls, taints.calls) == ([], ["a"])


def test_a_hint_that_raises_counts_as_queue(clock: FakeClock) -> None:
    recorder = Recorder()
    buggy = Rejector("Buggy", answer=None)
    queue = scheduling_queue(clock, framework_with(buggy), recorder=recorder)
    queue.add(pod("a"))
    fail(queue, "a", "Buggy")
    assert queue.move_all(NODE_ADD) == 1
    assert recorder.hints == [("Buggy", "NodeAdd", "Error")]


def test_a_raising_hint_is_logged_once_per_plugin_and_event(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    buggy = Rejector("Buggy", events=(NODE_ADD, NODE_LABEL), answer=None)
    queue = scheduling_queue(clock, framework_with(buggy))
    queue.add(pod("a"))
    queue.add(pod("b"))
    fail(queue, "a", "Buggy")
    fail(queue, "b", "Buggy")
    with caplog.at_level(logging.WARNING, logger="usher.core.queue.queueing"):
        assert queue.move_all(NODE_ADD) == 2, "each raise still counts as Queue"
        queue.add(pod("c"))
        fail(queue, "c", "Buggy")
        queue.move_all(NODE_ADD)  # the same plugin and event again: no new line
        queue.add(pod("d"))
        fail(queue, "d", "Buggy")
        queue.move_all(NODE_LABEL)  # another event: its own line
    assert buggy.calls == ["a", "b", "c", "d"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "Buggy" in lines[0] and "NodeAdd" in lines[0] and "default/a" in lines[0] and "hint bug" in lines[0]
    assert "Buggy" in lines[1] and "NodeUpdateNodeLabel" in lines[1] and "default/d" in lines[1]
    assert all(r.exc_info is not None for r in caplog.records), "the traceback is kept"


def test_a_raising_pre_queueing_hint_is_logged_once_per_plugin_and_event(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(old: Any, new: Any) -> PreQueueingHintResult:
        raise KeyError("index")

    claims = Rejector("Claims", events=(CLAIM_ADD,), pre_hint=broken)
    queue = scheduling_queue(clock, framework_with(claims))
    queue.add(pod("a"))
    fail(queue, "a", "Claims")
    with caplog.at_level(logging.WARNING, logger="usher.core.queue.queueing"):
        queue.move_all(CLAIM_ADD)
        queue.move_all(CLAIM_ADD)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "Claims" in lines[0] and "ResourceClaimAdd" in lines[0] and "index" in lines[0]


def test_queue_from_a_pending_plugin_skips_the_backoff(clock: FakeClock) -> None:
    waiting = Rejector("Waiting")
    queue = scheduling_queue(clock, framework_with(waiting), pop_from_backoff_q=False)
    queue.add(pod("a"))
    fail(queue, "a", pending=["Waiting"])
    queue.move_all(NODE_ADD)
    assert where(queue, "a") is Where.ACTIVE


def test_queue_from_an_unschedulable_plugin_respects_the_backoff(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit), pop_from_backoff_q=False)
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    queue.move_all(NODE_ADD)
    assert where(queue, "a") is Where.BACKOFF


def test_a_wildcard_event_moves_every_rejected_pod(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit", answer=QueueingHint.QUEUE_SKIP)))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    assert queue.move_all(ClusterEvent(Resource.WILDCARD, ActionType.ALL, "ForceActivate")) == 1


def test_an_event_nobody_registered_returns_at_once_and_is_not_recorded(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit")))
    queue.add(pod("a"))
    popped(queue)
    assert queue.move_all(NODE_LABEL) == 0
    assert queue.in_flight_event_counts() == {}


def test_the_pool_is_flushed_after_five_minutes(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit")))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    clock.advance(299)
    queue.flush()
    assert where(queue, "a") is Where.UNSCHEDULABLE
    clock.advance(31)
    queue.flush()
    assert where(queue, "a") is Where.ACTIVE
    assert popped(queue).flushed


# ---------------------------------------------------------------------- gated pods (PreEnqueue)


def test_a_gated_pod_is_parked_and_counted_as_gated(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a", gates=["example.com/wait"]))
    assert queue.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 1}
    assert queue.pop() is None
    queued = queue.get(PodKey("default/a"))
    assert queued is not None
    assert queued.gating_plugin == "SchedulingGates"
    assert queued.gating_message == "Scheduling is blocked due to non-empty scheduling gates"


def _ungate(queue: SchedulingQueue, name: str, gates: Sequence[str] = ()) -> None:
    old = queue.get(PodKey(f"default/{name}"))
    assert old is not None
    new = pod(name, gates=list(gates)) if gates else pod(name)
    queue.update(old.pod, new, pod_update_events(old.pod.raw, new.raw, assigned=False))


def test_removing_every_gate_sends_the_pod_to_activeq_at_once(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a", gates=["one", "two"]))
    _ungate(queue, "a", gates=["two"])
    assert where(queue, "a") is Where.UNSCHEDULABLE, "one gate left"
    _ungate(queue, "a")
    assert queue.pending() == {"active": 1, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_another_pods_gates_removal_does_not_move_this_pod(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a", gates=["g"]))
    queue.add(pod("b", gates=["g"]))
    other = pod("b")
    event = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED)
    queue.move_all(event, pod("b", gates=["g"]).raw, other.raw)
    assert where(queue, "a") is Where.UNSCHEDULABLE


def test_a_gated_pod_is_rechecked_on_flush_but_not_every_30_seconds(clock: FakeClock) -> None:
    calls: list[str] = []

    class CountingGates(SchedulingGates):
        def pre_enqueue(self, p: PodInfo) -> Status:
            calls.append(p.name)
            return super().pre_enqueue(p)

    plugin_set = PluginSet(queue_sort=PrioritySort(), pre_enqueue=[CountingGates()], all=[CountingGates()])
    queue = scheduling_queue(clock, Framework("usher", plugin_set))
    queue.add(pod("a", gates=["g"]))
    assert calls == ["a"]
    for _ in range(11):  # 5.5 minutes of 30 s ticks
        clock.advance(30)
        queue.flush()
    assert calls == ["a", "a"], "re-checked once after 5 minutes"
    assert queue.pending()["gated"] == 1


@dataclass
class Toggle:
    """A PreEnqueue plugin whose answer the test changes (a claim deleted, a quota used up ...)."""

    name: str = "Toggle"
    held: set[str] = field(default_factory=set)

    def pre_enqueue(self, p: PodInfo) -> Status:
        return unschedulable("held") if p.name in self.held else Status()


def _toggled_queue(clock: FakeClock, **options: Any) -> tuple[SchedulingQueue, Toggle]:
    toggle = Toggle()
    fit = Rejector("Fit")
    plugin_set = PluginSet(queue_sort=PrioritySort(), pre_enqueue=[toggle], all=[toggle, fit])  # type: ignore[list-item]
    return scheduling_queue(clock, Framework("usher", plugin_set), **options), toggle


def _assert_gated_by_toggle(queue: SchedulingQueue) -> None:
    assert queue.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 1}
    queued = queue.get(PodKey("default/a"))
    assert queued is not None and queued.gating_plugin == "Toggle" and queued.gating_message == "held"


def _leave_backoff_by_expiry(queue: SchedulingQueue, clock: FakeClock) -> QueuedPod | None:
    clock.advance(1)
    queue.flush()
    return queue.pop()


def _leave_backoff_by_early_pop(queue: SchedulingQueue, clock: FakeClock) -> QueuedPod | None:
    return queue.pop()  # activeQ is empty: PopFromBackoffQ takes the head of backoffQ


@pytest.mark.parametrize(
    "leave_backoff",
    [
        pytest.param(_leave_backoff_by_expiry, id="the backoff expires and the flush moves it"),
        pytest.param(_leave_backoff_by_early_pop, id="PopFromBackoffQ takes it early"),
    ],
)
def test_a_pod_preenqueue_rejects_while_it_backs_off_is_gated_not_popped(
    clock: FakeClock, leave_backoff: Callable[[SchedulingQueue, FakeClock], QueuedPod | None]
) -> None:
    queue, toggle = _toggled_queue(clock)
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    queue.move_all(NODE_ADD)
    assert where(queue, "a") is Where.BACKOFF
    toggle.held = {"a"}  # changes while the pod waits in backoffQ
    assert leave_backoff(queue, clock) is None, "a pod PreEnqueue rejects is never popped"
    _assert_gated_by_toggle(queue)


def test_a_pod_preenqueue_rejects_is_gated_instead_of_entering_backoffq(clock: FakeClock) -> None:
    """As kube-scheduler with SchedulerPopFromBackoffQ: PreEnqueue runs on the way into backoffQ too."""
    queue, toggle = _toggled_queue(clock)
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    toggle.held = {"a"}
    queue.move_all(NODE_ADD)
    _assert_gated_by_toggle(queue)


def test_an_early_pop_skips_a_pod_preenqueue_rejects_and_takes_the_next(clock: FakeClock) -> None:
    queue, toggle = _toggled_queue(clock)
    queue.add(pod("a", priority=1))
    queue.add(pod("b"))
    fail(queue, "a", "Fit")
    fail(queue, "b", "Fit")
    queue.move_all(NODE_ADD)
    toggle.held = {"a"}  # a is the head of backoffQ (it failed first)
    assert popped(queue).pod.name == "b"
    assert where(queue, "a") is Where.UNSCHEDULABLE and queue.pending()["gated"] == 1


# ---------------------------------------------------------------------- in-flight events


def test_an_event_during_the_attempt_is_replayed_when_the_pod_fails(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit), pop_from_backoff_q=False)
    queue.add(pod("a"))
    queued = popped(queue)
    queue.move_all(NODE_ADD, None, make_node().obj())
    assert queue.in_flight_event_counts() == {"NodeAdd": 1}
    queue.add_unschedulable(queued, unschedulable_plugins=["Fit"])
    assert where(queue, "a") is Where.BACKOFF
    assert fit.calls == ["a"]
    assert queue.in_flight_event_counts() == {}


def test_an_event_during_the_attempt_that_does_not_help_leaves_the_pod_in_the_pool(clock: FakeClock) -> None:
    fit = Rejector("Fit", answer=QueueingHint.QUEUE_SKIP)
    queue = scheduling_queue(clock, framework_with(fit))
    queue.add(pod("a"))
    queued = popped(queue)
    queue.move_all(NODE_ADD)
    queue.add_unschedulable(queued, unschedulable_plugins=["Fit"])
    assert where(queue, "a") is Where.UNSCHEDULABLE


def test_events_before_the_pop_are_not_replayed(clock: FakeClock) -> None:
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit))
    queue.add(pod("a"))
    queue.add(pod("b"))
    first = popped(queue)
    queue.move_all(NODE_ADD)  # while a is in flight, before b is popped
    second = popped(queue)
    queue.done(first)
    queue.add_unschedulable(second, unschedulable_plugins=["Fit"])
    assert where(queue, "b") is Where.UNSCHEDULABLE
    assert queue.in_flight_event_counts() == {}


def test_a_pod_deleted_in_flight_is_not_requeued(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a"))
    queued = popped(queue)
    queue.delete(queued.key)
    queue.add_unschedulable(queued)
    assert len(queue) == 0


def test_the_end_of_an_earlier_pods_attempt_leaves_its_successor_in_flight(clock: FakeClock) -> None:
    """Deleted in flight, recreated under the same name and popped: the earlier outcome touches nothing."""
    fit = Rejector("Fit")
    queue = scheduling_queue(clock, framework_with(fit))
    queue.add(pod("a"))
    earlier = popped(queue)
    queue.delete(earlier.key)
    successor = PodInfo.from_api(make_pod().name("a").uid("uid-a2").obj())
    queue.add(successor)
    later = popped(queue)
    assert later is not earlier and later.pod.uid == "uid-a2"
    queue.done(earlier)  # the earlier binding's 409
    queue.add_unschedulable(earlier, unschedulable_plugins=["Fit"])
    assert queue.get(later.key) is later and later.where is Where.IN_FLIGHT
    queue.move_all(NODE_ADD)  # recorded for the successor's attempt
    queue.add_unschedulable(later, unschedulable_plugins=["Fit"])
    assert where(queue, "a") is not Where.UNSCHEDULABLE  # the event during its attempt was replayed


def test_an_update_in_flight_is_kept_for_the_next_attempt(clock: FakeClock) -> None:
    queue = scheduling_queue(clock)
    queue.add(pod("a"))
    queued = popped(queue)
    queue.update(queued.pod, pod("a", 7), [])
    queue.add_unschedulable(queued)
    assert queued.pod.priority == 7


# ---------------------------------------------------------------------- hints off (moveRequestCycle)


def test_with_hints_off_a_move_during_the_attempt_sends_the_pod_to_backoff(clock: FakeClock) -> None:
    fit = Rejector("Fit", answer=QueueingHint.QUEUE_SKIP)
    queue = scheduling_queue(clock, framework_with(fit), queueing_hints=False, pop_from_backoff_q=False)
    queue.add(pod("a"))
    queued = popped(queue)
    queue.move_all(NODE_ADD)
    queue.add_unschedulable(queued, unschedulable_plugins=["Fit"])
    assert where(queue, "a") is Where.BACKOFF
    assert fit.calls == [], "hints are not asked with the gate off"


def test_with_hints_off_no_move_during_the_attempt_parks_the_pod(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit")), queueing_hints=False)
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    assert where(queue, "a") is Where.UNSCHEDULABLE
    assert queue.move_all(NODE_ADD) == 1, "any matching registration counts as Queue"


# ---------------------------------------------------------------------- delete, activate, gauges


def test_a_deleted_pod_disappears_from_every_gauge(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit")))
    for name in ("active", "backoff", "pool"):
        queue.add(pod(name))
    queue.add(pod("gated", gates=["g"]))
    fail(queue, "active", "Fit")
    fail(queue, "backoff", "Fit")
    queue.move_all(NODE_ADD)
    for name in ("active", "backoff", "pool", "gated"):
        queue.delete(PodKey(f"default/{name}"))
    assert queue.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    assert len(queue) == 0
    assert queue.unschedulable_by_plugin() == {}


def test_activate_forces_a_pod_out_of_the_pool(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit")))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    queue.activate([PodKey("default/a")])
    assert where(queue, "a") is Where.ACTIVE


def test_retry_moves_a_pod_out_of_the_pool_but_honours_its_backoff(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit")))
    queue.add(pod("a"))
    fail(queue, "a", "Fit")
    queue.retry([PodKey("default/a")])
    assert where(queue, "a") is Where.BACKOFF
    clock.advance(queue.backoff_duration(queue.get(PodKey("default/a"))))  # type: ignore[arg-type]
    queue.flush()
    assert where(queue, "a") is Where.ACTIVE


def test_unschedulable_pods_are_counted_per_rejecting_plugin(clock: FakeClock) -> None:
    queue = scheduling_queue(clock, framework_with(Rejector("Fit"), Rejector("Taints")))
    queue.add(pod("a"))
    fail(queue, "a", "Fit", "Taints")
    assert queue.unschedulable_by_plugin() == {("Fit", "usher"): 1, ("Taints", "usher"): 1}


# ---------------------------------------------------------------------- PreQueueingHint (KEP-6132)


def test_a_pre_queueing_hint_narrows_the_pods_whose_hints_run(clock: FakeClock) -> None:
    recorder = Recorder()
    claims = Rejector("Claims", events=(CLAIM_ADD,), pre_hint=lambda old, new: only(PodKey("default/p3")))
    queue = scheduling_queue(clock, framework_with(claims), recorder=recorder)
    for i in range(5):
        queue.add(pod(f"p{i}"))
    for i in range(5):
        fail(queue, f"p{i}", "Claims")
    clock.advance(2)  # past the 1 s backoff
    assert queue.move_all(CLAIM_ADD) == 1
    assert claims.calls == ["p3"], "only the listed pod's hint runs"
    assert where(queue, "p3") is Where.ACTIVE
    assert recorder.pre_hints == [("Claims", "narrowed")]


def test_a_pre_queueing_hint_answering_all_pods_checks_every_pod(clock: FakeClock) -> None:
    recorder = Recorder()
    claims = Rejector("Claims", events=(CLAIM_ADD,), pre_hint=lambda old, new: ALL_PODS)
    queue = scheduling_queue(clock, framework_with(claims), recorder=recorder)
    for i in range(3):
        queue.add(pod(f"p{i}"))
    for i in range(3):
        fail(queue, f"p{i}", "Claims")
    assert queue.move_all(CLAIM_ADD) == 3
    assert recorder.pre_hints == [("Claims", "all_pods")]


def test_a_pre_queueing_hint_that_raises_means_all_pods(clock: FakeClock) -> None:
    def broken(old: Any, new: Any) -> PreQueueingHintResult:
        raise KeyError("index")

    claims = Rejector("Claims", events=(CLAIM_ADD,), pre_hint=broken)
    queue = scheduling_queue(clock, framework_with(claims))
    queue.add(pod("a"))
    fail(queue, "a", "Claims")
    assert queue.move_all(CLAIM_ADD) == 1


def test_a_plugin_without_pre_hint_still_sees_every_pod_it_rejected(clock: FakeClock) -> None:
    claims = Rejector("Claims", events=(CLAIM_ADD,), pre_hint=lambda old, new: only())
    other = Rejector("Other", events=(CLAIM_ADD,))
    queue = scheduling_queue(clock, framework_with(claims, other))
    queue.add(pod("a"))
    queue.add(pod("b"))
    fail(queue, "a", "Claims")
    fail(queue, "b", "Other")
    assert queue.move_all(CLAIM_ADD) == 1
    assert (claims.calls, other.calls) == ([], ["b"])


def test_with_the_gate_off_pre_queueing_hints_are_not_asked(clock: FakeClock) -> None:
    claims = Rejector("Claims", events=(CLAIM_ADD,), pre_hint=lambda old, new: only())
    queue = scheduling_queue(clock, framework_with(claims), pre_queueing_hints=False)
    queue.add(pod("a"))
    fail(queue, "a", "Claims")
    assert queue.move_all(CLAIM_ADD) == 1


# ---------------------------------------------------------------------- the default profile's real hints


def test_a_pod_too_big_for_every_node_comes_back_only_for_a_node_that_could_hold_it(clock: FakeClock) -> None:
    recorder = Recorder()
    queue = scheduling_queue(clock, framework(), recorder=recorder)
    queue.add(PodInfo.from_api(make_pod().name("big").req(cpu="8").obj()))
    fail(queue, "big", "NodeResourcesFit")
    small = make_node().capacity(cpu="4", memory="8Gi", pods=110).obj()
    queue.move_all(NODE_ADD, None, small)
    assert where(queue, "big") is Where.UNSCHEDULABLE
    labelled = make_node().label("zone", "a").obj()
    for event in node_update_events(small, labelled):
        queue.move_all(event, small, labelled)
    assert where(queue, "big") is Where.UNSCHEDULABLE
    large = make_node().capacity(cpu="16", memory="32Gi", pods=110).obj()
    queue.move_all(NODE_ADD, None, large)
    assert where(queue, "big") is Where.BACKOFF, "it failed a moment ago: 1 s backoff first"
    assert [h for h in recorder.hints if h[0] == "NodeResourcesFit"] == [
        ("NodeResourcesFit", "NodeAdd", "QueueSkip"),
        ("NodeResourcesFit", "NodeAdd", "Queue"),
    ]


def test_pre_queueing_hints_of_several_plugins_each_narrow_their_own_hints(clock: FakeClock) -> None:
    recorder = Recorder()
    first = Rejector("First", events=(CLAIM_ADD,), pre_hint=lambda old, new: only(PodKey("default/a")))
    second = Rejector("Second", events=(CLAIM_ADD,), pre_hint=lambda old, new: only(PodKey("default/b")))
    queue = scheduling_queue(clock, framework_with(first, second), recorder=recorder)
    for name in ("a", "b", "c"):
        queue.add(pod(name))
    for name in ("a", "b", "c"):
        fail(queue, name, "First", "Second")
    clock.advance(2)
    assert queue.move_all(CLAIM_ADD) == 2, "the union of both plugins' pods"
    assert (sorted(first.calls), sorted(second.calls)) == (["a"], ["b"]), "each plugin's hint only for its own pods"
    assert where(queue, "c") is Where.UNSCHEDULABLE


@dataclass
class AlikeRejector(Rejector):
    """A Rejector whose hint answers alike for pods of the same priority (``ClusterEventWithHint.alike``)."""

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(e, hint=self.hint, alike=lambda old, new: lambda p: p.priority) for e in self.events
        ]


def test_pods_the_hint_answers_alike_are_asked_once_per_event(clock: FakeClock) -> None:
    fit = AlikeRejector("Fit", answer=QueueingHint.QUEUE_SKIP)
    recorder = Recorder()
    queue = scheduling_queue(clock, framework_with(fit), recorder=recorder)
    for name, priority in (("a", 1), ("b", 1), ("c", 1), ("d", 2)):
        queue.add(pod(name, priority))
    for name in ("d", "a", "b", "c"):
        fail(queue, name, "Fit")
    assert queue.move_all(NODE_ADD) == 0
    assert len(fit.calls) == 2 and "d" in fit.calls, "one of a, b and c answers for the three"
    assert len(recorder.hints) == 2, "one evaluation per key, recorded as one"
    # The next event asks again: answers are kept for one event only.
    fit.calls.clear()
    fit.answer = QueueingHint.QUEUE
    assert queue.move_all(NODE_ADD) == 4
    assert len(fit.calls) == 2
