"""Property: under any sequence of queue operations, no pod is lost, duplicated or retried early.

A hypothesis state machine drives random adds, gate changes, deletes, pops
(early pops from backoffQ included), attempt outcomes, cluster events, a
PreEnqueue plugin whose answer changes while pods wait anywhere, and clock
advances with flushes, and after every step checks the queue against a model
of what must be true.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.builders import make_pod
from tests.frameworks import scheduling_queue
from tests.unit.test_queue import NODE_ADD, Rejector
from usher.core.clock import FakeClock
from usher.core.events import ActionType, ClusterEvent, Resource, pod_update_events
from usher.core.framework.runtime import Framework, PluginSet
from usher.core.hints import ClusterEventWithHint
from usher.core.plugins.queuesort import PrioritySort
from usher.core.plugins.schedulinggates import SchedulingGates
from usher.core.queue import QueuedPod, Where
from usher.core.queue.queueing import UNSCHEDULABLE_FLUSH_INTERVAL
from usher.core.types import PodInfo, PodKey, Status, unschedulable

NAMES = [f"p{i}" for i in range(6)]
MAX_STEP = 40.0


def pod(name: str, gated: bool, priority: int) -> PodInfo:
    builder = make_pod().name(name).uid(f"uid-{name}").priority(priority)
    if gated:
        builder.gates("g")
    return PodInfo.from_api(builder.obj())


QUOTA_UPDATE = ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.UPDATE)  # stands for what releases a Quota hold


@dataclass
class Quota:
    """A PreEnqueue plugin whose answer changes at any time, wherever the pod waits."""

    name: str = "Quota"
    held: set[str] = field(default_factory=set)

    def pre_enqueue(self, p: PodInfo) -> Status:
        return unschedulable("over quota") if p.name in self.held else Status()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        return [ClusterEventWithHint(QUOTA_UPDATE)]


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.quota = Quota()
        gates, fit = SchedulingGates(), Rejector("Fit")
        plugins = PluginSet(queue_sort=PrioritySort(), pre_enqueue=[gates, self.quota], all=[gates, self.quota, fit])  # type: ignore[list-item]
        self.framework = Framework("usher", plugins)
        self.pop_early = False
        self.queue = scheduling_queue(self.clock, self.framework, pop_from_backoff_q=False)
        self.alive: dict[str, bool] = {}  # name -> gated
        self.in_flight: dict[str, QueuedPod] = {}
        self.failed_at: dict[str, float] = {}
        self.priority: dict[str, int] = {}
        self.held_in_active: set[str] = set()

    def key(self, name: str) -> PodKey:
        return PodKey(f"default/{name}")

    def pod(self, name: str, gated: bool, priority: int) -> PodInfo:
        """The pod of that name (a machine that varies what pods look like overrides this)."""
        return pod(name, gated, priority)

    @initialize(pop_early=st.booleans())
    def gate_pop_from_backoff_q(self, pop_early: bool) -> None:
        """SchedulerPopFromBackoffQ on or off: a rejected pod may leave backoffQ early only when on."""
        self.pop_early = pop_early
        self.queue = scheduling_queue(self.clock, self.framework, pop_from_backoff_q=pop_early)

    @rule(name=st.sampled_from(NAMES), gated=st.booleans(), priority=st.integers(0, 3))
    def add(self, name: str, gated: bool, priority: int) -> None:
        if name in self.alive:
            return
        self.queue.add(self.pod(name, gated, priority))
        self.alive[name] = gated
        self.priority[name] = priority

    @rule(name=st.sampled_from(NAMES))
    def remove_gates(self, name: str) -> None:
        """The API server only lets gates be removed after creation, never added."""
        if not self.alive.get(name):
            return
        old = self.queue.get(self.key(name))
        assert old is not None
        new = self.pod(name, False, self.priority[name])
        self.queue.update(old.pod, new, pod_update_events(old.pod.raw, new.raw, assigned=False))
        self.alive[name] = False

    @precondition(lambda self: bool(self.alive))
    @rule(data=st.data(), held=st.booleans())
    def quota_changes(self, data: Any, held: bool) -> None:
        """The plugin's answer changes with no event: asked again on every way out of backoffQ or the pool."""
        name = data.draw(st.sampled_from(sorted(self.alive)))
        queued = self.queue.get(self.key(name))
        if held:
            self.quota.held.add(name)
            if queued is not None and queued.where is Where.ACTIVE:
                self.held_in_active.add(name)  # as in kube-scheduler, a pop from activeQ does not ask again
        else:
            self.quota.held.discard(name)
            self.held_in_active.discard(name)

    def backing_off(self) -> list[str]:
        return sorted(q.pod.name for q in self.queue.pods() if q.where is Where.BACKOFF)

    @precondition(lambda self: bool(self.backing_off()))
    @rule(data=st.data())
    def quota_holds_a_pod_in_backoff(self, data: Any) -> None:
        """The case a pop from backoffQ must not miss: the answer changed while the pod waited there,
        and the loop asks for the next pod straight away."""
        self.quota.held.add(data.draw(st.sampled_from(self.backing_off())))
        self.pop()

    @rule()
    def quota_released(self) -> None:
        self.queue.move_all(QUOTA_UPDATE)

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        self.queue.delete(self.key(name))
        self.alive.pop(name, None)
        self.in_flight.pop(name, None)

    @rule()
    def pop(self) -> None:
        from_backoff = self.queue.pending()["active"] == 0  # only PopFromBackoffQ can answer then
        queued = self.queue.pop()
        if queued is None:
            return
        name = queued.pod.name
        assert name in self.alive and name not in self.in_flight, f"{name} popped twice or after deletion"
        assert not queued.pod.scheduling_gates, "a gated pod was popped"
        held_in_active = name in self.held_in_active
        self.held_in_active.discard(name)
        assert name not in self.quota.held or held_in_active, "popped though PreEnqueue rejected it on its way"
        assert not queued.gated
        assert not from_backoff or (self.pop_early and not queued.consecutive_errors), "popped early, not allowed to"
        if name in self.failed_at and not from_backoff:
            earliest = self.failed_at[name] + self.queue.backoff_duration(queued)
            assert self.clock.now() >= earliest, f"{name} popped {earliest - self.clock.now():.2f}s early"
        self.in_flight[name] = queued

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data(), outcome=st.sampled_from(["bound", "rejected", "error"]))
    def finish(self, data: Any, outcome: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.in_flight)))
        queued = self.in_flight.pop(name)
        if outcome == "bound":
            self.queue.done(queued)
            self.alive.pop(name, None)
            return
        plugins = ["Fit"] if outcome == "rejected" else []
        self.queue.add_unschedulable(queued, unschedulable_plugins=plugins)
        self.failed_at[name] = self.clock.now()

    @rule()
    def cluster_event(self) -> None:
        self.queue.move_all(NODE_ADD)

    @rule(seconds=st.floats(0.1, MAX_STEP))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.queue.flush()

    @invariant()
    def every_pod_is_in_exactly_one_place(self) -> None:
        pods = {q.pod.name: q for q in self.queue.pods()}
        assert set(pods) == set(self.alive), "lost or phantom pods"
        counts = self.queue.pending()
        in_flight = [n for n, q in pods.items() if q.where is Where.IN_FLIGHT]
        assert sorted(in_flight) == sorted(self.in_flight)
        assert sum(counts.values()) + len(in_flight) == len(pods)
        by_place = {w: sum(1 for q in pods.values() if q.where is w) for w in Where}
        assert by_place[Where.ACTIVE] == counts["active"]
        assert by_place[Where.BACKOFF] == counts["backoff"]
        assert by_place[Where.UNSCHEDULABLE] == counts["unschedulable"] + counts["gated"]
        assert by_place[Where.NOWHERE] == 0

    @invariant()
    def gated_pods_wait_and_only_they_count_as_gated(self) -> None:
        for queued in self.queue.pods():
            if queued.where is Where.IN_FLIGHT:
                continue
            if queued.pod.scheduling_gates:
                assert queued.where is Where.UNSCHEDULABLE and queued.gated
            else:
                assert not queued.gated or queued.gating_plugin == "Quota"
            if queued.gated:
                assert queued.where is Where.UNSCHEDULABLE, "a gated pod waits in the pool, nowhere else"

    @invariant()
    def nothing_stays_in_the_pool_much_past_the_flush(self) -> None:
        limit = 300 + UNSCHEDULABLE_FLUSH_INTERVAL + MAX_STEP
        for queued in self.queue.pods():
            if queued.where is Where.UNSCHEDULABLE:
                assert self.clock.now() - queued.pool_since <= limit


QueueMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestQueueProperties = QueueMachine.TestCase
