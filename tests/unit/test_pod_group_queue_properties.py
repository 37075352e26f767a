"""Property: with pod groups, a popped pod brings every waiting member of its group, and nothing else changes.

The queue machine of ``test_queue_properties`` (random adds, gate removals,
deletes, pops, attempt outcomes, cluster events, a PreEnqueue plugin whose
answer changes anywhere, time) with every pod in one of two pod groups and
``QueueOptions.pod_groups`` on: each pop takes the rest of the pod's group
with it (``pop_group``). Its invariants still hold (no pod lost or
duplicated, gated pods never popped, only the popped pod's own backoff is
checked: the members come along whatever theirs), and after each pop no
member of the group waits anywhere but as gated.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from tests.builders import make_pod
from tests.frameworks import scheduling_queue
from tests.unit.test_queue_properties import QueueMachine
from usher.core.queue import Where
from usher.core.types import PodInfo


class PodGroupQueueMachine(QueueMachine):
    def pod(self, name: str, gated: bool, priority: int) -> PodInfo:
        """A pod of group ``a`` (even names) or ``b`` (odd names)."""
        builder = make_pod().name(name).uid(f"uid-{name}").priority(priority).group("ab"[int(name[1:]) % 2])
        if gated:
            builder.gates("g")
        return PodInfo.from_api(builder.obj())

    @initialize(pop_early=st.booleans())
    def gate_pop_from_backoff_q(self, pop_early: bool) -> None:
        self.pop_early = pop_early
        self.queue = scheduling_queue(self.clock, self.framework, pop_from_backoff_q=pop_early, pod_groups=True)

    @rule()
    def pop(self) -> None:
        before = set(self.in_flight)
        super().pop()  # the head of activeQ, with the base machine's checks
        popped = set(self.in_flight) - before
        if not popped:
            return
        [name] = popped
        head = self.in_flight[name]
        members = self.queue.pop_group(head)
        assert members[0] is head
        for queued in members[1:]:
            other = queued.pod.name
            assert other in self.alive and other not in self.in_flight, f"{other} popped twice or after deletion"
            assert not queued.pod.scheduling_gates and not queued.gated, "a gated member came along"
            assert other not in self.quota.held, "a member came along though PreEnqueue rejects it now"
            assert queued.pod.group_key == head.pod.group_key
            self.in_flight[other] = queued
        for queued in self.queue.pods():
            if queued.pod.group_key == head.pod.group_key and queued.where is not Where.IN_FLIGHT:
                assert queued.gated, f"{queued.pod.name} of the popped group was left waiting"


PodGroupQueueMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
TestPodGroupQueueProperties = PodGroupQueueMachine.TestCase
