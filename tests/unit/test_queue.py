"""The skeleton queue: ordering, backoff, the unschedulable pool and its flush."""

from __future__ import annotations

import pytest

from tests.builders import make_pod
from usher.core.clock import FakeClock
from usher.core.queue import SchedulingQueue
from usher.core.types import PodInfo


def pod(name: str, priority: int = 0) -> PodInfo:
    return PodInfo.from_api(make_pod().name(name).priority(priority).obj())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock: FakeClock) -> SchedulingQueue:
    return SchedulingQueue(clock)


def test_higher_priority_pops_first_then_older(queue: SchedulingQueue, clock: FakeClock) -> None:
    queue.add(pod("low-old", 0))
    clock.advance(1)
    queue.add(pod("high", 10))
    clock.advance(1)
    queue.add(pod("low-new", 0))
    popped = [queue.pop(), queue.pop(), queue.pop()]
    assert [q.pod.name for q in popped if q] == ["high", "low-old", "low-new"]
    assert queue.pop() is None


def test_a_failed_pod_waits_in_the_pool_until_an_event(queue: SchedulingQueue, clock: FakeClock) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    queue.add_unschedulable(q)
    assert queue.pending() == {"active": 0, "backoff": 0, "unschedulable": 1}
    clock.advance(60)
    queue.flush()
    assert queue.pop() is None
    assert queue.move_all("NodeAdd") == 1
    assert queue.pending()["active"] == 1  # backoff of 1 s long over


def test_an_event_during_the_attempt_sends_the_pod_to_backoff_not_the_pool(
    queue: SchedulingQueue, clock: FakeClock
) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    queue.move_all("NodeAdd")
    queue.add_unschedulable(q)
    assert queue.pending() == {"active": 0, "backoff": 1, "unschedulable": 0}
    clock.advance(0.5)
    queue.flush()
    assert queue.pop() is None
    clock.advance(0.5)
    queue.flush()
    assert queue.pop() is q


@pytest.mark.parametrize(
    ("failures", "backoff"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)],
    ids=str,
)
def test_backoff_doubles_up_to_the_maximum(queue: SchedulingQueue, failures: int, backoff: float) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    q.unschedulable_count = failures
    assert queue.backoff_duration(q) == backoff


def test_the_pool_is_flushed_after_five_minutes(queue: SchedulingQueue, clock: FakeClock) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    queue.add_unschedulable(q)
    clock.advance(299)
    queue.flush()
    assert queue.pending()["unschedulable"] == 1
    clock.advance(31)
    queue.flush()
    assert queue.pending()["active"] == 1
    assert ("active", "UnschedulableTimeout") in queue.incoming


def test_a_pod_deleted_while_queued_is_never_popped(queue: SchedulingQueue) -> None:
    queue.add(pod("a"))
    queue.delete(pod("a").key)
    assert queue.pop() is None
    assert len(queue) == 0


def test_a_pod_deleted_in_flight_is_not_requeued(queue: SchedulingQueue) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    queue.delete(q.key)
    queue.add_unschedulable(q)
    assert len(queue) == 0


def test_errors_back_off_even_without_events(queue: SchedulingQueue, clock: FakeClock) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    queue.add_unschedulable(q, error=True)
    assert queue.pending()["backoff"] == 1
    assert queue.next_wakeup() == pytest.approx(clock.now() + 1)


def test_done_removes_the_pod(queue: SchedulingQueue) -> None:
    queue.add(pod("a"))
    q = queue.pop()
    assert q is not None
    queue.done(q.key)
    assert len(queue) == 0
