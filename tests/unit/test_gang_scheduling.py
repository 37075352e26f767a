"""Gangs at run time: the pod-group cycle, Permit, the barrier before Bind and the reports, over fakes of the ports.

Built by the composition root's ``build_scheduler`` as ``usher run`` builds
it, with the test harness of ``test_scheduling`` (a recording writer, a
scripted binder, a fake clock; nothing sleeps). One extra plugin, ``Stall``,
lets a test hold or fail a member's PreBind, to see what a gang does when
one member does not make it to Bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pod_group
from tests.frameworks import RecordingClaimWriter, RecordingVolumeWriter
from tests.unit.dra.builders import make_claim
from tests.unit.test_scheduling import Harness, RecordingRecorder, RecordingWriter, ScriptedBinder
from usher.adapters.kubeapi import ApiResult
from usher.app import build_scheduler
from usher.config import default_config, parse_config
from usher.core.clock import FakeClock
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.gangscheduling import WAITING_FOR_QUORUM
from usher.core.plugins.registry import in_tree_registry
from usher.core.queue import Where
from usher.core.types import NodeName, PodInfo, PodKey, Status, error
from usher.explaining import explain, render
from usher.features import parse_feature_gates


@dataclass
class Stall:
    """A PreBind plugin: holds the pods named in ``held`` until released, fails those in ``failing``."""

    name = "Stall"
    held: dict[str, asyncio.Event] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    reached: list[str] = field(default_factory=list)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        self.reached.append(pod.name)
        if pod.name in self.held:
            await self.held[pod.name].wait()
        return error(f"PreBind of {pod.name} failed") if pod.name in self.failing else Status()


CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "usher", "plugins": {"preBind": {"enabled": [{"name": "Stall"}]}}}],
}


@dataclass
class Gangs(Harness):
    stall: Stall = field(default_factory=Stall)

    def pod_group(self, name: str, min_count: int | None = None, **kwargs: Any) -> dict[str, Any]:
        raw = make_pod_group(name, min_count, **kwargs)
        self.scheduler.events.on_pod_group("ADDED", raw)
        return raw

    def member(self, name: str, group: str = "train", cpu: str = "1", **spec: Any) -> PodKey:
        raw = make_pod().name(name).uid(f"uid-{name}").group(group).req(cpu=cpu).obj()
        raw["spec"].update(spec)
        return self.pod(raw)

    def bound(self) -> list[str]:
        return sorted(key.split("/", 1)[1] for key, _ in self.binder.calls)

    def group_conditions(self, name: str = "train") -> list[Mapping[str, Any]]:
        found = []
        for call in self.writer.calls:
            if call.call_type == "pod_group_status_patch" and call.object_key == f"podgroups/default/{name}":
                request = call.build(None)
                assert request is not None and isinstance(request.body, Mapping)
                found.extend(request.body["status"]["conditions"])
        return found

    def failed_notes(self, *names: str) -> list[str]:
        events = self.writer.events("FailedScheduling")
        return [e["note"] for e in events if e["regarding"]["name"] in names]

    def requested_cpu(self) -> int:
        return sum(node.requested.get("cpu", 0) for node in self.scheduler.cache.node_infos())


@pytest.fixture
async def gangs() -> AsyncIterator[Gangs]:
    clock = FakeClock()
    writer, binder, recorder = RecordingWriter(), ScriptedBinder(), RecordingRecorder()
    leading = asyncio.Event()
    leading.set()
    stall = Stall()
    registry = in_tree_registry()
    registry.register("Stall", lambda args, handle: stall)
    scheduler = build_scheduler(
        parse_config(CONFIG, registry=registry),
        parse_feature_gates(None),
        clock=clock,
        recorder=recorder,
        writer=writer,
        binder=binder,
        claim_writer=RecordingClaimWriter(),
        volume_writer=RecordingVolumeWriter(),
        leading=leading,
        registry=registry,
        seed=1,
    )
    scheduler.events.mark_synced()
    task = asyncio.create_task(scheduler.loop.run())
    yield Gangs(scheduler, clock, writer, binder, recorder, leading, stall)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


# -- all or nothing ------------------------------------------------------------------


async def test_a_gang_that_fits_is_bound_whole_and_its_pod_group_says_so(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.pod_group("train", 3)
    for name in ("a", "b", "c"):
        gangs.member(name)

    await gangs.until(lambda: len(gangs.recorder.scheduled) == 3, "the gang is bound")

    assert gangs.bound() == ["a", "b", "c"]
    assert gangs.recorder.attempts == [("scheduled", "usher")] * 3
    assert gangs.recorder.permit_waits == ["Success"] * 2, "the first two waited at Permit for the third"
    [condition] = gangs.group_conditions()
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodGroupInitiallyScheduled",
        "True",
        "Scheduled",
    )
    assert condition["observedGeneration"] == 1


async def test_a_gang_that_cannot_fit_binds_nobody_holds_nothing_and_says_why_once(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="2")
    gangs.pod_group("train", 3)
    for name in ("a", "b", "c"):
        gangs.member(name)

    await gangs.until(lambda: len(gangs.recorder.attempts) == 3, "the gang's attempt fails")

    assert gangs.binder.calls == [] and gangs.requested_cpu() == 0
    assert gangs.recorder.attempts == [("unschedulable", "usher")] * 3
    notes = gangs.failed_notes("a", "b", "c")
    assert len(notes) == 3 and len(set(notes)) == 1, "one message for the group, on every member"
    match = re.fullmatch(
        r"pod group default/train: (minCount \(3\) cannot be satisfied: 2 scheduled, 0 remaining; pod default/[abc]: "
        r"0/1 nodes are available: 1 Insufficient cpu\. preemption: 0/1 nodes are available: "
        r"1 No preemption victims found for incoming pod\.)",
        notes[0],
    )
    assert match is not None, notes[0]
    detail = match.group(1)
    for name in ("a", "b", "c"):
        queued = gangs.scheduler.queue.get(PodKey(f"default/{name}"))
        assert queued is not None and queued.where is Where.UNSCHEDULABLE
        assert queued.unschedulable_plugins == {"NodeResourcesFit", "GangScheduling"}
    [condition] = gangs.group_conditions()
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", detail)

    # Nothing is held for the gang: a pod that needs the whole node still fits.
    whole = gangs.pod(make_pod().name("whole").req(cpu="2").obj())
    await gangs.until(lambda: (whole, "n1") in gangs.binder.calls, "the smaller pod binds")


async def test_two_gangs_competing_for_room_for_one_never_both_stay_partial(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="3")
    gangs.pod_group("a", 3)
    gangs.pod_group("b", 3)
    for i in range(3):
        gangs.member(f"a{i}", group="a")
        gangs.member(f"b{i}", group="b")

    await gangs.until(lambda: len(gangs.recorder.attempts) == 6, "both gangs were tried")

    bound = gangs.bound()
    assert bound in (["a0", "a1", "a2"], ["b0", "b1", "b2"])
    loser = "b" if bound[0].startswith("a") else "a"
    assert all(gangs.scheduler.queue.get(PodKey(f"default/{loser}{i}")) is not None for i in range(3))
    assert gangs.group_conditions(loser)[-1]["reason"] == "Unschedulable"


async def test_pods_wait_for_min_count_as_kube_scheduler_says_then_go_together(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.pod_group("train", 3)
    gangs.member("a")
    gangs.member("b")
    await gangs.idle()

    assert gangs.binder.calls == [] and gangs.recorder.attempts == []
    assert [c["message"] for c in gangs.writer.conditions(PodKey("default/a"))] == [WAITING_FOR_QUORUM]
    report = explain(gangs.scheduler, PodKey("default/a"))
    assert report["podGroup"]["waitingFor"] == "1 more pod of PodGroup default/train"
    assert "    waiting for 1 more pod of PodGroup default/train" in render(report).splitlines()

    gangs.member("c")
    await gangs.until(lambda: len(gangs.recorder.scheduled) == 3, "the gang goes once the last pod comes")
    assert gangs.bound() == ["a", "b", "c"]


async def test_pods_whose_pod_group_comes_later_wait_for_it(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.member("a")
    gangs.member("b")
    await gangs.idle()
    assert [c["message"] for c in gangs.writer.conditions(PodKey("default/a"))] == [
        'waiting for pods\'s pod group "train" to appear in scheduling queue'
    ]
    assert render(explain(gangs.scheduler, PodKey("default/a"))).splitlines()[2] == (
        "  pod group default/train: waiting for PodGroup default/train to be created"
    )

    gangs.pod_group("train", 2)
    await gangs.until(lambda: len(gangs.recorder.scheduled) == 2, "the gang goes once its PodGroup exists")


async def test_lowering_min_count_lets_a_waiting_gang_go(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    raw = gangs.pod_group("train", 3)
    gangs.member("a")
    gangs.member("b")
    await gangs.idle()
    assert gangs.binder.calls == []

    lowered = copy.deepcopy(raw)
    lowered["metadata"]["resourceVersion"] = "2"
    lowered["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2
    gangs.scheduler.events.on_pod_group("MODIFIED", lowered)

    await gangs.until(lambda: len(gangs.recorder.scheduled) == 2, "the gang goes with its new minCount")


async def test_the_basic_policy_schedules_its_pods_one_by_one(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="1")
    gangs.pod_group("train")
    gangs.member("a")
    gangs.member("b")

    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "both were tried")

    assert len(gangs.binder.calls) == 1
    [loser] = [n for n in ("a", "b") if gangs.scheduler.queue.get(PodKey(f"default/{n}")) is not None]
    assert gangs.failed_notes(loser)[0].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert gangs.group_conditions()[-1]["status"] == "True"


async def test_members_that_disagree_on_priority_are_a_scheduler_error(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.pod_group("train", 2, priority=10)
    gangs.member("a", priority=10)
    gangs.member("b", priority=5)

    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "the group is refused")

    message = "all pods in a single pod group should have the same priority as the pod group's priority, got 5 and 10"
    assert gangs.recorder.attempts == [("error", "usher")] * 2 and gangs.binder.calls == []
    assert gangs.failed_notes("a", "b") == [message] * 2
    assert gangs.group_conditions()[-1]["reason"] == "SchedulerError"
    assert gangs.group_conditions()[-1]["message"] == message


async def test_a_malformed_pod_group_is_reported_on_the_pods_it_blocks(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.pod_group("train", 2, schedulingPolicy={"gang": {"minCount": "two"}})
    gangs.member("a")
    await gangs.idle()

    message = (
        "PodGroup default/train cannot be scheduled: spec.schedulingPolicy.gang.minCount: must be a positive "
        "integer, got 'two'"
    )
    assert [c["message"] for c in gangs.writer.conditions(PodKey("default/a"))] == [message]
    assert [c["reason"] for c in gangs.writer.conditions(PodKey("default/a"))] == ["NotReadyForScheduling"]
    other = gangs.pod(make_pod().name("solo").obj())
    await gangs.until(lambda: (other, "n1") in gangs.binder.calls, "everything else is still scheduled")


# -- preemption: single pods where they decide, else the whole group (workload-aware) -------------


@pytest.mark.parametrize(
    ("min_count", "members", "preempts"),
    [(1, 1, True), (2, 2, True), (3, 3, False)],
    ids=[
        "a gang of one preempts as a pod would",
        "a gang one pod short preempts for that pod",
        "a gang that cannot fit even without every victim evicts nobody",
    ],
)
async def test_a_gang_preempts_only_what_lets_it_fit(
    gangs: Gangs, min_count: int, members: int, preempts: bool
) -> None:
    gangs.nodes("n1", cpu="2")
    low = gangs.pod(make_pod().name("low").priority(1).node("n1").req(cpu="2").obj())
    gangs.nodes("n2", cpu="1")
    gangs.pod(make_pod().name("filler").priority(1000).node("n2").req(cpu="1").obj())
    if members == 2:  # room for one member on n3: the gang is one pod short
        gangs.nodes("n3", cpu="2")
    gangs.pod_group("train", min_count, priority=100)
    for i in range(members):
        gangs.member(f"m{i}", cpu="2", priority=100)

    await gangs.until(lambda: len(gangs.recorder.attempts) == members, "the gang's attempt fails")

    assert gangs.binder.calls == []
    victim_marked = any(c.call_type == "pod_status_patch" and c.object_key == low for c in gangs.writer.calls)
    nominated = [m for i in range(members) if gangs.scheduler.queue.nominator.node_of(m := PodKey(f"default/m{i}"))]
    assert victim_marked == preempts
    assert len(nominated) == (1 if preempts else 0)
    recorder = gangs.recorder
    assert recorder.preemption_attempts + len(recorder.workload_preemptions) == 1, (
        "the one-pod PostFilter or the group's"
    )
    if not preempts:
        assert all("preemption: " in note for note in gangs.failed_notes("m0", "m1", "m2"))


def marked(gangs: Gangs) -> set[str]:
    """The pods preemption marked as disruption targets: status patches of pods that are no members."""
    calls = gangs.writer.calls
    return {str(c.object_key) for c in calls if c.call_type == "pod_status_patch" and "/m" not in str(c.object_key)}


async def test_a_gang_short_of_several_pods_evicts_what_it_needs_across_nodes(gangs: Gangs) -> None:
    for node in ("n1", "n2", "n3"):
        gangs.nodes(node, cpu="2")
    for node in ("n1", "n2"):
        gangs.pod(make_pod().name(f"low-{node}").priority(1).node(node).req(cpu="2").obj())
    gangs.pod(make_pod().name("high-n3").priority(1000).node("n3").req(cpu="2").obj())
    gangs.pod_group("train", 2, priority=100)
    for i in range(2):
        gangs.member(f"m{i}", cpu="2", priority=100)

    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "the gang's attempt fails")

    assert marked(gangs) == {"default/low-n1", "default/low-n2"}
    assert gangs.recorder.workload_preemptions == [("Success", 2)]
    assert gangs.recorder.preemptions_evaluated == [("podgroup", "Success")]
    assert gangs.recorder.victims_chosen == [], "scheduler_preemption_victims counts single pods' preemptions only"
    assert gangs.recorder.disruptions == [("podgroup", 0, 0)], "lone pods evicted: no pod group disrupted"
    assert gangs.recorder.group_attempts == ["unschedulable"], "it waits for its victims to go"
    nominator = gangs.scheduler.queue.nominator
    assert {nominator.node_of(PodKey(f"default/m{i}")) for i in range(2)} == {"n1", "n2"}
    assert gangs.failed_notes("m0")[0].endswith("preemption: found a placement for podgroup, preempting 2 victims")
    assert gangs.scheduler.cache.node("n1").pods and gangs.scheduler.cache.node("n2").pods, "the cache is restored"


async def test_a_gang_evicting_a_group_disrupted_as_a_whole_counts_one_workload_disruption(gangs: Gangs) -> None:
    for node in ("n1", "n2"):
        gangs.nodes(node, cpu="2")
    gangs.pod_group("old", 2, priority=1, disruptionMode={"all": {}})
    for i, node in enumerate(("n1", "n2")):
        gangs.pod(make_pod().name(f"old-{i}").uid(f"uid-old-{i}").group("old").node(node).req(cpu="2").obj())
    gangs.pod_group("train", 2, priority=100)
    for i in range(2):
        gangs.member(f"m{i}", cpu="2", priority=100)

    await gangs.until(lambda: gangs.recorder.workload_preemptions != [], "the gang preempts")

    assert marked(gangs) == {"default/old-0", "default/old-1"}
    assert gangs.recorder.workload_preemptions == [("Success", 2)]
    assert gangs.recorder.disruptions == [("podgroup", 0, 1)], "one unit: the whole old group"


async def test_a_gang_retried_while_its_victims_go_does_not_preempt_again(gangs: Gangs) -> None:
    """kube's isOngoingPreemption, with usher's own record of the nominations: the members' API status
    does not show them yet when the gang comes back (the patches are still on their way) while its
    victims are terminating; preempting again would evict more than the gang needs."""
    for node in ("n1", "n2", "n3"):
        gangs.nodes(node, cpu="2")
    low = {}
    for node in ("n1", "n2", "n3"):
        raw = make_pod().name(f"low-{node}").priority(1).node(node).req(cpu="2").obj()
        gangs.pod(raw)
        low[node] = raw
    gangs.pod_group("train", 2, priority=100)
    for i in range(2):
        gangs.member(f"m{i}", cpu="2", priority=100)
    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "the gang's attempt fails")
    first = marked(gangs)
    assert len(first) == 2 and gangs.recorder.workload_preemptions == [("Success", 2)]

    for key in first:  # the victims' DisruptionTarget and deletion come back; the nominations do not yet
        raw = low[key.split("-", 1)[1]]
        raw["metadata"]["resourceVersion"] = "2"
        raw["metadata"]["deletionTimestamp"] = "2026-11-26T00:00:00Z"
        raw["status"]["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
        gangs.scheduler.events.on_pod("MODIFIED", raw)
    for call in list(gangs.writer.calls):  # the eviction calls return: nothing holds the gang back any more
        if call.call_type in ("pod_status_patch", "pod_delete") and str(call.object_key) in first:
            assert call.on_done is not None
            call.on_done(ApiResult(200, {}))
    deletes = [c for c in gangs.writer.calls if c.call_type == "pod_delete"]
    assert {str(c.object_key) for c in deletes} == first
    for call in deletes:
        assert call.on_done is not None
        call.on_done(ApiResult(200, {}))
    assert gangs.recorder.preemptions_finished == [("podgroup", "success")]
    gangs.clock.advance(301)
    gangs.scheduler.queue.flush()  # the 5-minute flush sends the gang back
    gangs.nodes("n4", cpu="1")  # an event wakes the loop (the node itself helps nobody)
    await gangs.until(lambda: len(gangs.recorder.workload_preemptions) == 2, "the gang is tried again")

    assert marked(gangs) == first, "no third pod evicted"
    assert gangs.recorder.workload_preemptions[-1] == ("Success", 0), "ongoing: nominations kept, nobody evicted"


async def test_a_gang_keeps_the_victims_it_can_live_with(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    node = make_node().name("n2").capacity(cpu="2", memory="4Gi", pods=110).label("pool", "b").obj()
    gangs.scheduler.events.on_node("ADDED", node)
    gangs.pod(make_pod().name("small").priority(1).node("n1").req(cpu="1").obj())
    gangs.pod(make_pod().name("big").priority(2).node("n1").req(cpu="3").obj())
    gangs.pod(make_pod().name("other").priority(1).node("n2").req(cpu="2").obj())
    gangs.pod_group("train", 2, priority=100)
    gangs.member("m0", cpu="3", priority=100)
    gangs.member("m1", cpu="2", priority=100, nodeSelector={"pool": "b"})

    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "the gang's attempt fails")

    # m0 needs 3 cpu on n1 (big goes, small stays), m1 takes n2 (other goes).
    assert marked(gangs) == {"default/big", "default/other"}


async def test_a_gang_never_evicts_a_group_of_its_priority_or_above(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="2")
    gangs.nodes("n2", cpu="2")
    gangs.pod(make_pod().name("peer-1").priority(100).node("n1").req(cpu="2").obj())
    gangs.pod(make_pod().name("low-2").priority(1).node("n2").req(cpu="2").obj())
    gangs.pod_group("train", 2, priority=100)
    for i in range(2):
        gangs.member(f"m{i}", cpu="2", priority=100)

    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "the gang's attempt fails")

    assert marked(gangs) == set(), "one victim frees room for one member: the gang still does not fit"
    assert gangs.scheduler.queue.nominator.node_of(PodKey("default/m0")) is None
    assert gangs.recorder.workload_preemptions == [("Unschedulable", 0)]
    assert gangs.recorder.preemptions_evaluated == [("podgroup", "Unschedulable")]


async def test_a_gang_of_preemption_policy_never_evicts_nobody(gangs: Gangs) -> None:
    for node in ("n1", "n2"):
        gangs.nodes(node, cpu="2")
        gangs.pod(make_pod().name(f"low-{node}").priority(1).node(node).req(cpu="2").obj())
    gangs.pod_group("train", 2, priority=100)
    for i in range(2):
        gangs.member(f"m{i}", cpu="2", priority=100, preemptionPolicy="Never")

    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "the gang's attempt fails")

    assert marked(gangs) == set()
    assert "preemption: not eligible due to preemptionPolicy=Never." in gangs.failed_notes("m0")[0]


# -- the barrier before Bind -------------------------------------------------------------


async def test_a_member_failing_before_bind_rolls_its_whole_gang_back(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.pod_group("train", 3)
    gangs.stall.held["c"] = asyncio.Event()  # c is still in PreBind when b fails
    gangs.stall.failing.add("b")
    for name in ("a", "b", "c"):
        gangs.member(name)
    await gangs.until(lambda: len(gangs.recorder.attempts) == 2, "b failed and a was rolled back")

    gangs.stall.held["c"].set()
    await gangs.until(lambda: len(gangs.recorder.attempts) == 3, "c was rolled back too")

    assert gangs.binder.calls == [] and gangs.requested_cpu() == 0
    assert sorted(gangs.recorder.attempts) == [
        ("error", "usher"),
        ("unschedulable", "usher"),
        ("unschedulable", "usher"),
    ]
    rolled_back = (
        "rolled back with its gang: pod default/b of pod group default/train was not bound: PreBind of b failed"
    )
    assert gangs.failed_notes("a", "c") == [rolled_back] * 2
    for name in ("a", "b", "c"):  # all back in the queue, backing off
        queued = gangs.scheduler.queue.get(PodKey(f"default/{name}"))
        assert queued is not None and queued.where is Where.BACKOFF and not queued.rejectors

    gangs.stall.failing.clear()
    gangs.clock.advance(11)
    gangs.nodes("n1", cpu="4")  # any event wakes the loop
    await gangs.until(lambda: len(gangs.binder.calls) == 3, "the gang binds whole on its next try")


async def test_a_member_deleted_on_its_way_to_bind_takes_its_gang_back(gangs: Gangs) -> None:
    gangs.nodes("n1", cpu="4")
    gangs.pod_group("train", 2)
    gangs.stall.held["b"] = asyncio.Event()
    gangs.member("a")
    gangs.member("b")
    await gangs.until(lambda: "b" in gangs.stall.reached and "a" in gangs.stall.reached, "both reach PreBind")

    gangs.scheduler.events.on_pod("DELETED", make_pod().name("b").uid("uid-b").group("train").obj())
    await gangs.until(lambda: len(gangs.recorder.attempts) == 1, "a is rolled back")
    gangs.stall.held["b"].set()
    await gangs.idle()

    assert gangs.binder.calls == [] and gangs.requested_cpu() == 0
    queued = gangs.scheduler.queue.get(PodKey("default/a"))  # alone, below minCount: held for the quorum again
    assert queued is not None and queued.gated and queued.gating_message == WAITING_FOR_QUORUM
    assert gangs.failed_notes("b") == []  # a deleted pod is not reported on


# -- gang support off ---------------------------------------------------------------------


async def test_without_pod_groups_served_every_pod_is_scheduled_on_its_own() -> None:
    writer, binder = RecordingWriter(), ScriptedBinder()
    leading = asyncio.Event()
    leading.set()
    scheduler = build_scheduler(
        default_config(),
        parse_feature_gates(None),
        clock=FakeClock(),
        recorder=RecordingRecorder(),
        writer=writer,
        binder=binder,
        claim_writer=RecordingClaimWriter(),
        volume_writer=RecordingVolumeWriter(),
        leading=leading,
        pod_groups_served=False,
    )
    harness = Harness(scheduler, FakeClock(), writer, binder, RecordingRecorder(), leading)
    scheduler.events.mark_synced()
    task = asyncio.create_task(scheduler.loop.run())
    try:
        harness.nodes("n1")
        key = harness.pod(make_pod().name("a").group("train").obj())  # no PodGroup, minCount unknown
        await harness.until(lambda: binder.calls == [(key, "n1")], "the pod is bound on its own")
        assert "podGroup" not in explain(scheduler, key)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_topology_constrained_gang_lands_in_the_rack_that_fits_and_each_placement_is_timed(
    gangs: Gangs,
) -> None:
    for name, rack, cpu in (("n1", "a", "2"), ("n2", "b", "2"), ("n3", "b", "2")):
        node = make_node().name(name).label("rack", rack).capacity(cpu=cpu, memory="4Gi", pods=110).obj()
        gangs.scheduler.events.on_node("ADDED", node)
    gangs.pod_group("train", 2, schedulingConstraints={"topology": [{"key": "rack"}]})
    for name in ("a", "b"):
        gangs.member(name, cpu="2")

    await gangs.until(lambda: len(gangs.recorder.scheduled) == 2, "the gang is bound")

    assert sorted(node for _, node in gangs.binder.calls) == ["n2", "n3"], "rack b, the one that takes both"
    assert gangs.recorder.placements == [(2, 1)]
    assert sorted(gangs.recorder.placement_times) == ["feasible", "infeasible"]


async def test_explain_names_the_gangs_topology_and_disruption_mode(gangs: Gangs) -> None:
    gangs.pod_group("train", 3, schedulingConstraints={"topology": [{"key": "rack"}]}, disruptionMode={"all": {}})
    gangs.member("a")
    await gangs.idle()

    line = render(explain(gangs.scheduler, PodKey("default/a"))).splitlines()[2]
    assert line.startswith(
        "  pod group default/train (gang, minCount 3, all in one domain of rack, preempted as a whole): "
    )


async def test_explain_names_the_workload_a_pod_group_was_made_from_and_its_controller(gangs: Gangs) -> None:
    gangs.pod_group("train", 2, workloadRef={"workloadName": "job", "templateName": "workers"})
    workload = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "job", "namespace": "default", "resourceVersion": "1"},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train-job"},
            "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}],
        },
    }
    gangs.scheduler.events.on_workload("ADDED", workload)
    gangs.member("a")
    await gangs.idle()

    line = render(explain(gangs.scheduler, PodKey("default/a"))).splitlines()[2]
    assert "; Workload default/job template workers, controlled by batch/Job train-job" in line, line
    gangs.scheduler.events.on_workload("DELETED", workload)  # the controller is known only while it is there
    line = render(explain(gangs.scheduler, PodKey("default/a"))).splitlines()[2]
    assert "; Workload default/job template workers" in line and "controlled by" not in line, line


async def test_explain_shows_the_claims_a_pod_group_shares(gangs: Gangs) -> None:
    raw = gangs.pod_group(
        "train",
        3,
        resourceClaims=[
            {"name": "gpu", "resourceClaimName": "shared"},
            {"name": "nic", "resourceClaimTemplateName": "one-nic"},
        ],
    )
    claim = make_claim().name("shared").uid("cu").request("gpu", "gpu").obj()
    claim["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "n1", "device": "g0"}]}},
        "reservedFor": [
            {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": raw["metadata"]["uid"]}
        ],
    }
    gangs.scheduler.events.on_dra("resourceclaims", "ADDED", claim)
    gangs.member("a")
    await gangs.idle()

    lines = render(explain(gangs.scheduler, PodKey("default/a"))).splitlines()
    assert "    shared claim gpu -> shared: allocated (1 device(s)), reserved for the PodGroup" in lines
    assert "    shared claim nic: not created yet from template one-nic" in lines
