"""Pod groups in the pure core: PodGroups as read, members counted by state, and how the queue moves a gang.

The queue tests run the real default framework (GangScheduling included) over
the real cache and event handlers, so a pod's way from gated to activeQ is
the one ``usher run`` takes.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pod_group
from tests.frameworks import FakeHandle
from usher.config import default_config
from usher.core.cache import Cache
from usher.core.clock import FakeClock
from usher.core.framework.building import build_framework
from usher.core.handling import EventHandlers
from usher.core.plugins.gangscheduling import WAITING_FOR_QUORUM
from usher.core.plugins.registry import in_tree_registry
from usher.core.podgroups import Member, PodGroup, PodGroupStates, Workload
from usher.core.queue import QueuedPod, QueueOptions, SchedulingQueue, Where
from usher.core.types import NodeName, PodInfo, PodKey, pod_group_key

# -- PodGroup and Workload as read -------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "min_count", "error"),
    [
        ({"schedulingPolicy": {"gang": {"minCount": 8}}}, 8, ""),
        ({"schedulingPolicy": {"basic": {}}}, None, ""),
        ({}, None, "spec.schedulingPolicy: exactly one of basic and gang must be set, got none"),
        (
            {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}},
            None,
            "spec.schedulingPolicy: exactly one of basic and gang must be set, got both",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            1,
            "spec.schedulingPolicy.gang.minCount: must be a positive integer, got 0",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": "8"}}},
            1,
            "spec.schedulingPolicy.gang.minCount: must be a positive integer, got '8'",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 2}}, "priority": "high"},
            2,
            "spec.priority: must be an integer, got 'high'",
        ),
    ],
    ids=[
        "gang",
        "basic",
        "no policy",
        "both policies",
        "minCount zero",
        "minCount a string",
        "priority not an integer",
    ],
)
def test_a_pod_group_is_read_without_ever_raising(spec: dict[str, Any], min_count: int | None, error: str) -> None:
    raw = make_pod_group("train")
    raw["spec"] = spec
    group = PodGroup.from_api(raw)
    assert (group.key, group.min_count, group.error) == ("default/train", min_count, error)
    assert group.problem == (f"PodGroup default/train cannot be scheduled: {error}" if error else "")


def test_a_pod_group_knows_its_priority_workload_and_condition() -> None:
    raw = make_pod_group("train-0", 3, priority=100, workloadRef={"workloadName": "train", "templateName": "worker"})
    raw["status"] = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled"}]}
    group = PodGroup.from_api(raw)
    assert (group.priority, group.quorum, group.policy, group.generation) == (100, 3, "gang", 1)
    assert group.workload is not None and (group.workload.workload, group.workload.template) == ("train", "worker")
    condition = group.condition()
    assert condition is not None and condition["status"] == "True"
    assert PodGroup.from_api(make_pod_group("b")).quorum == 1


def test_a_workload_shows_its_controller_and_its_templates_policies() -> None:
    workload = Workload.from_api(
        {
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {
                "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"},
                "podGroupTemplates": [
                    {"name": "worker", "schedulingPolicy": {"gang": {"minCount": 8}}},
                    {"name": "driver", "schedulingPolicy": {"basic": {}}},
                    {"name": "odd", "schedulingPolicy": {}},
                ],
            },
        }
    )
    assert workload.key == "ml/train" and workload.controller == "batch/Job train"
    assert workload.templates == {"worker": "gang (minCount 8)", "driver": "basic", "odd": "malformed"}


# -- members by state -----------------------------------------------------------------


def member(name: str, group: str = "train", uid: str | None = None, node: str = "") -> PodInfo:
    builder = make_pod().name(name).uid(uid or f"uid-{name}").group(group)
    if node:
        builder = builder.node(node)
    return PodInfo.from_api(builder.obj())


def counts(states: PodGroupStates, group: str = "train") -> tuple[int, int, list[PodKey]]:
    state = states.get(pod_group_key("default", group))
    assert state is not None
    return state.all_count, state.scheduled_count, state.keys(Member.UNSCHEDULED)


def test_members_are_counted_by_state_and_a_group_goes_once_it_has_neither_object_nor_members() -> None:
    states = PodGroupStates()
    states.track(member("a"), Member.UNSCHEDULED)
    states.track(member("b"), Member.ASSUMED)
    states.track(member("c", node="n1"), Member.ASSIGNED)
    assert counts(states) == (3, 2, ["default/a"])
    states.track(member("b"), Member.UNSCHEDULED)  # its binding failed
    assert counts(states) == (3, 1, ["default/a", "default/b"])
    for name in "abc":
        states.drop(PodKey(f"default/{name}"))
    assert states.get(pod_group_key("default", "train")) is None

    states.on_pod_group(False, make_pod_group("train", 2))
    states.track(member("a"), Member.UNSCHEDULED)
    states.drop(PodKey("default/a"))
    assert counts(states) == (0, 0, [])  # the PodGroup keeps its state
    states.on_pod_group(True, make_pod_group("train", 2))
    assert states.get(pod_group_key("default", "train")) is None


def test_a_pod_of_no_group_or_with_gang_support_off_is_never_tracked() -> None:
    states, off = PodGroupStates(), PodGroupStates(enabled=False)
    states.track(PodInfo.from_api(make_pod().name("solo").obj()), Member.UNSCHEDULED)
    off.track(member("a"), Member.UNSCHEDULED)
    assert list(states) == [] and list(off) == []


def test_a_pod_group_event_reports_old_and_new_and_a_redelivery_nothing() -> None:
    states = PodGroupStates()
    raw = make_pod_group("train", 3)
    old, new = states.on_pod_group(False, raw)
    assert old is None and new is not None and new.min_count == 3
    assert states.on_pod_group(False, copy.deepcopy(raw)) == (None, None)
    lowered = copy.deepcopy(raw)
    lowered["metadata"]["resourceVersion"] = "2"
    lowered["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2
    old, new = states.on_pod_group(False, lowered)
    assert old is not None and new is not None and (old.min_count, new.min_count) == (3, 2)
    old, new = states.on_pod_group(True, lowered)
    assert old is not None and new is None
    assert states.on_pod_group(True, lowered) == (None, None)


def test_the_cache_moves_members_as_it_assumes_forgets_sees_bound_and_removes() -> None:
    cache = Cache()
    cache.add_or_update_node(make_node().name("n1").obj())
    a, b = member("a"), member("b")
    cache.pod_groups.track(a, Member.UNSCHEDULED)
    cache.pod_groups.track(b, Member.UNSCHEDULED)
    cache.assume(a, NodeName("n1"))
    assert cache.pod_groups.member(a.key) is Member.ASSUMED
    cache.forget(a)
    assert cache.pod_groups.member(a.key) is Member.UNSCHEDULED
    cache.assume(a, NodeName("n1"))
    cache.add_or_update_pod(member("a", node="n1"))
    assert cache.pod_groups.member(a.key) is Member.ASSIGNED
    cache.remove_pod(a.key)
    assert cache.pod_groups.member(a.key) is None
    assert counts(cache.pod_groups) == (1, 0, ["default/b"])


# -- the queue: a gang held, released and popped together --------------------------------


class Gangs:
    """The default framework with GangScheduling over one cache, the queue and the event handlers."""

    def __init__(self, clock: FakeClock) -> None:
        self.cache = Cache()
        profile = default_config().profiles[0]
        self.framework = build_framework(
            profile, registry=in_tree_registry(), handle=FakeHandle(pod_groups=self.cache.pod_groups)
        )
        assert self.framework.plugins.queue_sort is not None
        self.queue = SchedulingQueue(
            clock,
            profiles={"usher": self.framework},
            sort_key=self.framework.plugins.queue_sort.sort_key,
            options=QueueOptions(pod_groups=True),
        )
        self.handlers = EventHandlers(self.cache, self.queue, {"usher"})

    def add(self, *names: str, group: str = "train") -> None:
        for name in names:
            self.handlers.on_pod("ADDED", make_pod().name(name).uid(f"uid-{name}").group(group).obj())

    def where(self, name: str) -> str:
        queued = self.queue.get(PodKey(f"default/{name}"))
        assert queued is not None
        return "gated" if queued.gated else queued.where.value

    def pop(self) -> QueuedPod:
        queued = self.queue.pop()
        assert queued is not None
        return queued


@pytest.fixture
def gangs() -> Gangs:
    return Gangs(FakeClock())


def test_a_gang_is_held_until_min_count_pods_are_known_then_all_of_them_move(gangs: Gangs) -> None:
    gangs.handlers.on_pod_group("ADDED", make_pod_group("train", 3))
    gangs.add("a", "b")
    assert [gangs.where(n) for n in "ab"] == ["gated", "gated"]
    queued = gangs.queue.get(PodKey("default/a"))
    assert queued is not None and queued.gating_message == WAITING_FOR_QUORUM

    gangs.add("c")  # the third pod completes the quorum: its arrival moves the other two

    assert [gangs.where(n) for n in "abc"] == ["active", "active", "active"]


def test_pods_that_came_before_their_pod_group_wait_for_it(gangs: Gangs) -> None:
    gangs.add("a", "b")
    queued = gangs.queue.get(PodKey("default/a"))
    assert (
        queued is not None
        and queued.gating_message == 'waiting for pods\'s pod group "train" to appear in scheduling queue'
    )
    gangs.handlers.on_pod_group("ADDED", make_pod_group("other", 1))
    assert [gangs.where(n) for n in "ab"] == ["gated", "gated"]

    gangs.handlers.on_pod_group("ADDED", make_pod_group("train", 2))

    assert [gangs.where(n) for n in "ab"] == ["active", "active"]


def test_lowering_min_count_releases_a_gang_and_raising_it_does_not(gangs: Gangs) -> None:
    raw = make_pod_group("train", 4)
    gangs.handlers.on_pod_group("ADDED", raw)
    gangs.add("a", "b")
    raised = copy.deepcopy(raw)
    raised["metadata"]["resourceVersion"] = "2"
    raised["spec"]["schedulingPolicy"]["gang"]["minCount"] = 5
    gangs.handlers.on_pod_group("MODIFIED", raised)
    assert [gangs.where(n) for n in "ab"] == ["gated", "gated"]

    lowered = copy.deepcopy(raised)
    lowered["metadata"]["resourceVersion"] = "3"
    lowered["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2
    gangs.handlers.on_pod_group("MODIFIED", lowered)

    assert [gangs.where(n) for n in "ab"] == ["active", "active"]


def test_pop_group_takes_every_waiting_member_but_gated_and_in_flight_ones(gangs: Gangs) -> None:
    gangs.handlers.on_pod_group("ADDED", make_pod_group("train", 1))
    gangs.handlers.on_pod_group("ADDED", make_pod_group("other", 1))
    gangs.add("a", "b", "c", "d")
    gangs.handlers.on_pod("ADDED", make_pod().name("e").uid("uid-e").group("train").gates("wait").obj())
    gangs.add("x", group="other")
    first = gangs.pop()
    assert first.pod.name == "a"
    binding = gangs.queue.pop_group(first)
    assert [q.pod.name for q in binding] == ["a", "b", "c", "d"]
    assert all(q.where is Where.IN_FLIGHT and q.attempts == 1 for q in binding)
    # a and b fail (pool), c backs off, d stays in flight (binding), e is held by its scheduling gate.
    gangs.queue.add_unschedulable(binding[0], unschedulable_plugins={"NodeResourcesFit"})
    gangs.queue.add_unschedulable(binding[1], unschedulable_plugins={"NodeResourcesFit"})
    gangs.queue.add_unschedulable(binding[2])  # an error: backoffQ
    gangs.add("f")
    assert [gangs.where(n) for n in "abcdef"] == [
        "unschedulable",
        "unschedulable",
        "backoff",
        "in_flight",
        "gated",
        "active",
    ]

    assert [q.pod.name for q in gangs.queue.pop_group(gangs.pop())] == ["x"]  # another group: alone
    popped = gangs.pop()
    members = gangs.queue.pop_group(popped)

    assert [q.pod.name for q in members] == ["f", "a", "b", "c"]
    assert [gangs.where(n) for n in "abcdef"] == ["in_flight"] * 4 + ["gated", "in_flight"]
    gangs.queue.done(binding[3], "n1")
    gangs.queue.delete(PodKey("default/e"))
    assert gangs.queue.get(PodKey("default/d")) is None


def test_without_pod_groups_in_the_queue_a_member_is_popped_alone(gangs: Gangs) -> None:
    queue = SchedulingQueue(
        FakeClock(),
        profiles={"usher": gangs.framework},
        sort_key=lambda q: (q.pod.name,),
        options=QueueOptions(pod_groups=False),
    )
    gangs.handlers.on_pod_group("ADDED", make_pod_group("train"))
    queue.add(member("a"))
    queue.add(member("b"))
    first = queue.pop()
    assert first is not None and [q.pod.name for q in queue.pop_group(first)] == ["a"]
