"""Property: under any sequence of queue operations, no pod is lost, duplicated or retried early.

A hypothesis state machine drives random adds, gate changes, deletes, pops,
attempt outcomes, cluster events, and clock advances with flushes, and after
every step checks the queue against a model of what must be true.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.builders import make_pod
from tests.frameworks import scheduling_queue
from tests.unit.test_queue import NODE_ADD, Rejector, framework_with
from usher.core.clock import FakeClock
from usher.core.events import pod_update_events
from usher.core.queue import QueuedPod, Where
from usher.core.queue.queueing import UNSCHEDULABLE_FLUSH_INTERVAL
from usher.core.types import PodInfo, PodKey

NAMES = [f"p{i}" for i in range(6)]
MAX_STEP = 40.0


def pod(name: str, gated: bool, priority: int) -> PodInfo:
    builder = make_pod().name(name).uid(f"uid-{name}").priority(priority)
    if gated:
        builder.gates("g")
    return PodInfo.from_api(builder.obj())


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.queue = scheduling_queue(self.clock, framework_with(Rejector("Fit")), pop_from_backoff_q=False)
        self.alive: dict[str, bool] = {}  # name -> gated
        self.in_flight: dict[str, QueuedPod] = {}
        self.failed_at: dict[str, float] = {}
        self.priority: dict[str, int] = {}

    def key(self, name: str) -> PodKey:
        return PodKey(f"default/{name}")

    @rule(name=st.sampled_from(NAMES), gated=st.booleans(), priority=st.integers(0, 3))
    def add(self, name: str, gated: bool, priority: int) -> None:
        if name in self.alive:
            return
        self.queue.add(pod(name, gated, priority))
        self.alive[name] = gated
        self.priority[name] = priority

    @rule(name=st.sampled_from(NAMES))
    def remove_gates(self, name: str) -> None:
        """The API server only lets gates be removed after creation, never added."""
        if not self.alive.get(name):
            return
        old = self.queue.get(self.key(name))
        assert old is not None
        new = pod(name, False, self.priority[name])
        self.queue.update(old.pod, new, pod_update_events(old.pod.raw, new.raw, assigned=False))
        self.alive[name] = False

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        self.queue.delete(self.key(name))
        self.alive.pop(name, None)
        self.in_flight.pop(name, None)

    @rule()
    def pop(self) -> None:
        queued = self.queue.pop()
        if queued is None:
            return
        name = queued.pod.name
        assert name in self.alive and name not in self.in_flight, f"{name} popped twice or after deletion"
        assert not queued.pod.scheduling_gates, "a gated pod was popped"
        if name in self.failed_at:
            earliest = self.failed_at[name] + self.queue.backoff_duration(queued)
            assert self.clock.now() >= earliest, f"{name} popped {earliest - self.clock.now():.2f}s early"
        self.in_flight[name] = queued

    @precondition(lambda self: bool(self.in_flight))
    @rule(data=st.data(), outcome=st.sampled_from(["bound", "rejected", "error"]))
    def finish(self, data: Any, outcome: str) -> None:
        name = data.draw(st.sampled_from(sorted(self.in_flight)))
        queued = self.in_flight.pop(name)
        if outcome == "bound":
            self.queue.done(queued.key)
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
                assert not queued.gated

    @invariant()
    def nothing_stays_in_the_pool_much_past_the_flush(self) -> None:
        limit = 300 + UNSCHEDULABLE_FLUSH_INTERVAL + MAX_STEP
        for queued in self.queue.pods():
            if queued.where is Where.UNSCHEDULABLE:
                assert self.clock.now() - queued.pool_since <= limit


QueueMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
TestQueueProperties = QueueMachine.TestCase
