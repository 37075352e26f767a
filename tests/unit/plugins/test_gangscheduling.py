"""GangScheduling: PreEnqueue, PlacementFeasible, Permit and the hints, with kube-scheduler's messages."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_pod, make_pod_group
from tests.frameworks import FakeHandle
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import PlacementProgress
from usher.core.hints import PreQueueingHintResult
from usher.core.plugins.gangscheduling import (
    PERMIT_TIMEOUT,
    WAITING_AT_PERMIT,
    WAITING_FOR_QUORUM,
    GangScheduling,
    its_min_count_lowered,
    its_pod_group_added,
    pod_of_same_group_added,
)
from usher.core.podgroups import Member, PodGroup, PodGroupStates
from usher.core.types import Code, NodeName, PodInfo, PodKey, QueueingHint

QUEUE, SKIP = QueueingHint.QUEUE, QueueingHint.QUEUE_SKIP


@dataclass
class RecordingWaitingPods:
    allowed: list[tuple[str, str]] = field(default_factory=list)

    def allow(self, key: PodKey, plugin: str) -> None:
        self.allowed.append((key, plugin))

    def reject(self, key: PodKey, plugin: str, message: str) -> None:
        raise AssertionError("GangScheduling never rejects a waiting pod")


def member(name: str, group: str = "train", **kwargs: Any) -> PodInfo:
    builder = make_pod().name(name).group(group)
    if "node" in kwargs:
        builder = builder.node(kwargs["node"])
    return PodInfo.from_api(builder.obj())


def plugin(
    pod_group: dict[str, Any] | None = None, members: dict[str, Member] | None = None, *, enabled: bool = True
) -> tuple[GangScheduling, FakeHandle]:
    """The plugin over pod-group states holding ``pod_group`` and ``members`` (name -> state) of group train."""
    states = PodGroupStates(enabled=enabled)
    if pod_group is not None:
        states.on_pod_group(False, pod_group)
    for name, state in (members or {}).items():
        states.track(member(name), state)
    handle = FakeHandle(pod_groups=states)
    handle.waiting_pods = RecordingWaitingPods()  # type: ignore[assignment]
    return GangScheduling(handle), handle


# -- PreEnqueue -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod_group", "members", "pod", "message"),
    [
        (None, {}, PodInfo.from_api(make_pod().name("solo").obj()), ""),
        (
            None,
            {"a": Member.UNSCHEDULED},
            member("a"),
            'waiting for pods\'s pod group "train" to appear in scheduling queue',
        ),
        (
            make_pod_group("train", 3),
            {"a": Member.UNSCHEDULED, "b": Member.UNSCHEDULED},
            member("a"),
            WAITING_FOR_QUORUM,
        ),
        (
            make_pod_group("train", 3),
            {"a": Member.UNSCHEDULED, "b": Member.ASSUMED, "c": Member.ASSIGNED},
            member("a"),
            "",
        ),
        (make_pod_group("train", 2), {"a": Member.UNSCHEDULED, "b": Member.UNSCHEDULED}, member("a"), ""),
        (make_pod_group("train"), {"a": Member.UNSCHEDULED}, member("a"), ""),
        (
            make_pod_group("train", schedulingPolicy={}),
            {"a": Member.UNSCHEDULED},
            member("a"),
            "PodGroup default/train cannot be scheduled: spec.schedulingPolicy: exactly one of basic and gang must be "
            "set, got none",
        ),
    ],
    ids=[
        "a pod of no group passes",
        "a pod whose PodGroup is not known yet waits for it",
        "a gang waits until minCount of its pods are known",
        "assumed and bound members count towards minCount",
        "a gang with minCount pods known passes",
        "the basic policy never waits for other pods",
        "a malformed PodGroup holds its pods and says why",
    ],
)
def test_pre_enqueue_holds_a_pod_until_its_pod_group_and_its_quorum_are_known(
    pod_group: dict[str, Any] | None, members: dict[str, Member], pod: PodInfo, message: str
) -> None:
    gang, _ = plugin(pod_group, members)
    status = gang.pre_enqueue(pod)
    assert status.message == message
    assert status.code is (Code.SUCCESS if not message else Code.UNSCHEDULABLE_AND_UNRESOLVABLE)


def test_with_gang_support_off_every_pod_passes_pre_enqueue_and_permit() -> None:
    gang, _ = plugin(make_pod_group("train", 3), {}, enabled=False)
    assert gang.pre_enqueue(member("a")).ok
    assert gang.permit(CycleState(), member("a"), NodeName("n1")) == (gang.pre_enqueue(member("a")), 0.0)


# -- PlacementFeasible ---------------------------------------------------------


@pytest.mark.parametrize(
    ("min_count", "scheduled", "remaining", "code", "message"),
    [
        (3, 0, 2, Code.UNSCHEDULABLE, "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining"),
        (3, 2, 0, Code.UNSCHEDULABLE, "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining"),
        (3, 1, 2, Code.WAIT, "minCount (3) is not yet satisfied: 1 scheduled, 2 remaining"),
        (3, 3, 0, Code.SUCCESS, ""),
        (3, 3, 5, Code.SUCCESS, ""),
        (None, 0, 1, Code.WAIT, "minCount (1) is not yet satisfied: 0 scheduled, 1 remaining"),
        (None, 0, 0, Code.UNSCHEDULABLE, "minCount (1) cannot be satisfied: 0 scheduled, 0 remaining"),
    ],
    ids=[
        "too few members left to reach minCount",
        "the last member did not fit",
        "minCount still within reach",
        "minCount met",
        "minCount met with members still to place",
        "basic policy: one pod is enough, none yet",
        "basic policy: nobody placed and nobody left",
    ],
)
def test_placement_feasible_ends_a_group_cycle_once_min_count_is_met_or_out_of_reach(
    min_count: int | None, scheduled: int, remaining: int, code: Code, message: str
) -> None:
    gang, _ = plugin()
    group = PodGroup.from_api(make_pod_group("train", min_count))
    status = gang.placement_feasible(group, PlacementProgress(remaining=remaining, scheduled=scheduled))
    assert (status.code, status.message) == (code, message)


# -- Permit --------------------------------------------------------------------


def test_permit_holds_assumed_members_until_min_count_then_allows_them_all() -> None:
    gang, handle = plugin(make_pod_group("train", 3), {"a": Member.ASSUMED, "b": Member.UNSCHEDULED})
    status, timeout = gang.permit(CycleState(), member("a"), NodeName("n1"))
    assert (status.code, status.message, timeout) == (Code.WAIT, WAITING_AT_PERMIT, PERMIT_TIMEOUT)

    handle.pod_groups.track(member("b"), Member.ASSUMED)
    handle.pod_groups.track(member("c", node="n1"), Member.ASSIGNED)
    status, timeout = gang.permit(CycleState(), member("b"), NodeName("n1"))

    assert status.ok and timeout == 0
    assert handle.waiting_pods.allowed == [("default/a", "GangScheduling"), ("default/b", "GangScheduling")]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("pod_group", "code", "message"),
    [
        (make_pod_group("train"), Code.SUCCESS, ""),
        (None, Code.ERROR, "failed to get podGroup default/train: not found"),
    ],
    ids=["the basic policy never waits", "an unknown PodGroup is an error"],
)
def test_permit_of_groups_without_a_quorum(pod_group: dict[str, Any] | None, code: Code, message: str) -> None:
    gang, _ = plugin(pod_group, {"a": Member.ASSUMED})
    status, _ = gang.permit(CycleState(), member("a"), NodeName("n1"))
    assert (status.code, status.message) == (code, message)


# -- queueing hints --------------------------------------------------------------


def raw_member(name: str, group: str | None = "train", namespace: str = "default") -> dict[str, Any]:
    builder = make_pod().name(name).namespace(namespace)
    return (builder.group(group) if group else builder).obj()


def updated(pod_group: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(pod_group)
    new["metadata"]["resourceVersion"] = str(int(new["metadata"]["resourceVersion"]) + 1)
    new["spec"].update(changes)
    return new


GANG_OF_4 = make_pod_group("train", 4)


@pytest.mark.parametrize(
    ("hint", "pod", "old", "new", "expected"),
    [
        (pod_of_same_group_added, member("a"), None, raw_member("b"), QUEUE),
        (pod_of_same_group_added, member("a"), None, raw_member("b", "other"), SKIP),
        (pod_of_same_group_added, member("a"), None, raw_member("b", namespace="elsewhere"), SKIP),
        (pod_of_same_group_added, member("a"), None, raw_member("b", None), SKIP),
        (pod_of_same_group_added, PodInfo.from_api(raw_member("a", None)), None, raw_member("b"), SKIP),
        (its_pod_group_added, member("a"), None, make_pod_group("train", 2), QUEUE),
        (its_pod_group_added, member("a"), None, make_pod_group("other", 2), SKIP),
        (
            its_min_count_lowered,
            member("a"),
            GANG_OF_4,
            updated(GANG_OF_4, schedulingPolicy={"gang": {"minCount": 3}}),
            QUEUE,
        ),
        (
            its_min_count_lowered,
            member("a"),
            GANG_OF_4,
            updated(GANG_OF_4, schedulingPolicy={"gang": {"minCount": 5}}),
            SKIP,
        ),
        (its_min_count_lowered, member("a"), GANG_OF_4, updated(GANG_OF_4, priority=7), SKIP),
        (
            its_min_count_lowered,
            member("a"),
            make_pod_group("train"),
            updated(make_pod_group("train"), priority=1),
            SKIP,
        ),
        (
            its_min_count_lowered,
            member("a", "other"),
            GANG_OF_4,
            updated(GANG_OF_4, schedulingPolicy={"gang": {"minCount": 1}}),
            SKIP,
        ),
        (
            its_min_count_lowered,
            member("a"),
            make_pod_group("train", schedulingPolicy={}),
            updated(make_pod_group("train", 2)),
            QUEUE,
        ),
    ],
    ids=[
        "a pod of the same group added",
        "a pod of another group added",
        "a pod of a group of the same name in another namespace added",
        "a pod of no group added",
        "the waiting pod belongs to no group",
        "its PodGroup added",
        "another PodGroup added",
        "minCount lowered",
        "minCount raised",
        "something else of the PodGroup changed",
        "an update of a basic policy",
        "another group's minCount lowered",
        "a malformed PodGroup fixed",
    ],
)
def test_the_hints_queue_a_gang_only_for_what_can_complete_it(
    hint: Any, pod: PodInfo, old: Any, new: Any, expected: QueueingHint
) -> None:
    assert hint(pod, old, new) is expected


def test_the_registered_events_are_kube_schedulers() -> None:
    gang, _ = plugin()
    assert [(r.event.resource, r.event.action) for r in gang.events_to_register()] == [
        (Resource.UNSCHEDULED_POD, ActionType.ADD),
        (Resource.ASSIGNED_POD, ActionType.ADD),
        (Resource.POD_GROUP, ActionType.ADD),
        (Resource.POD_GROUP, ActionType.UPDATE),
    ]
    assert ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD).label == "UnscheduledPodAdd"


def test_pre_queueing_hints_narrow_each_event_to_the_members_of_its_group() -> None:
    gang, _ = plugin(make_pod_group("train", 3), {"a": Member.UNSCHEDULED, "b": Member.ASSUMED})
    pod_added, _, group_added, group_updated = gang.events_to_register()
    members = PreQueueingHintResult(all_pods=False, pods=frozenset({PodKey("default/a"), PodKey("default/b")}))
    nobody = PreQueueingHintResult(all_pods=False, pods=frozenset())
    assert pod_added.pre_hint is not None and group_added.pre_hint is not None and group_updated.pre_hint is not None
    assert pod_added.pre_hint(None, raw_member("c")) == members
    assert pod_added.pre_hint(None, raw_member("c", None)) == nobody
    assert group_added.pre_hint(None, make_pod_group("train", 2)) == members
    assert group_updated.pre_hint(make_pod_group("train", 3), make_pod_group("train", 2)) == members
    assert group_added.pre_hint(None, make_pod_group("unknown", 2)) == nobody
