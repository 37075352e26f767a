"""Watch events reach the right place: the cache for assigned pods, the queue for ours."""

from __future__ import annotations

import pytest

from tests.builders import make_node, make_pod
from usher.core.cache import Cache
from usher.core.clock import FakeClock
from usher.core.handling import EventHandlers
from usher.core.queue import SchedulingQueue
from usher.core.types import pod_key


@pytest.fixture
def handlers() -> EventHandlers:
    return EventHandlers(Cache(), SchedulingQueue(FakeClock()), {"usher"})


def test_our_unscheduled_pod_is_queued(handlers: EventHandlers) -> None:
    handlers.on_pod("ADDED", make_pod().name("a").obj())
    assert handlers.queue.pending()["active"] == 1


def test_another_schedulers_pod_is_ignored(handlers: EventHandlers) -> None:
    handlers.on_pod("ADDED", make_pod().scheduler("default-scheduler").obj())
    assert len(handlers.queue) == 0


def test_an_assigned_pod_of_any_scheduler_is_counted(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").obj())
    handlers.on_pod("ADDED", make_pod().scheduler("default-scheduler").node("n").req(cpu="1").obj())
    assert handlers.cache.node("n").requested["cpu"] == 1000  # type: ignore[union-attr]


def test_a_pod_bound_leaves_the_queue(handlers: EventHandlers) -> None:
    pod = make_pod().name("a")
    handlers.on_pod("ADDED", pod.obj())
    handlers.on_pod("MODIFIED", pod.node("n").version().obj())
    assert len(handlers.queue) == 0
    assert handlers.cache.node_of(pod_key("default", "a")) == "n"


def test_a_deleted_pod_leaves_everything(handlers: EventHandlers) -> None:
    handlers.on_pod("ADDED", make_pod().name("a").obj())
    handlers.on_pod("DELETED", make_pod().name("a").obj())
    assert len(handlers.queue) == 0


def test_a_malformed_pod_is_reported_not_raised(handlers: EventHandlers) -> None:
    bad = make_pod().name("bad").req(cpu="lots").obj()
    handlers.on_pod("ADDED", bad)
    assert len(handlers.queue) == 0
    assert [m.pod["metadata"]["name"] for m in handlers.malformed] == ["bad"]
    assert "invalid quantity 'lots'" in handlers.malformed[0].message


def test_a_redelivered_version_changes_nothing(handlers: EventHandlers) -> None:
    pod = make_pod().name("a").version("7").obj()
    handlers.on_pod("ADDED", pod)
    popped = handlers.queue.pop()
    assert popped is not None
    handlers.on_pod("MODIFIED", pod)
    assert handlers.queue.pop() is None


def test_node_heartbeats_requeue_nothing(handlers: EventHandlers) -> None:
    handlers.on_node("ADDED", make_node().name("n").condition("Ready", "True", "t1").obj())
    handlers.on_pod("ADDED", make_pod().name("a").obj())
    q = handlers.queue.pop()
    assert q is not None
    handlers.queue.add_unschedulable(q)
    handlers.on_node("MODIFIED", make_node().name("n").condition("Ready", "True", "t2").obj())
    assert handlers.queue.pending()["unschedulable"] == 1
    handlers.on_node("MODIFIED", make_node().name("n").capacity(cpu="64", memory="1Ti", pods=110).obj())
    assert handlers.queue.pending()["unschedulable"] == 0
