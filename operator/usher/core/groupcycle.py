"""The pod-group cycle's algorithm: the members of a group placed together against one snapshot. Pure.

kube-scheduler's podGroupSchedulingDefaultAlgorithm (schedule_one_podgroup.go):
PlacementFeasible first (a group that cannot meet ``minCount`` whatever
happens tries nobody), then each member in turn through the one-pod
algorithm (``core.cycle.schedule``: PreFilter, Filter, Score), and when it
fits, assumed on its node and reserved, so the next member sees it there.
PlacementFeasible after each member ends the cycle as soon as the outcome is
known. A Wait left at the end is Unschedulable, and so is a Success that
placed nobody.

Nothing is committed here. ``simulate_group`` returns a ``GroupSimulation``
whose ``revert`` unreserves and forgets every member it placed, last first
(kube's revertFns); the caller reverts in every case, then commits the
placed members of a group that succeeded one by one (assume, Reserve,
Permit). That split is the seam for placement algorithms
(TopologyAwareWorkloadScheduling simulates one candidate domain after
another, reverting each, and commits the best) and for workload-aware
preemption (which needs the failed simulation before it is reverted).

Since the cycle runs synchronously on the event loop, no watch event changes
the cache while a group is simulated: the cache is the cycle's snapshot.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from usher.core.cache import Cache, NodeInfo, NodeList, SetAside
from usher.core.cycle import NodeSampler, ScheduleResult, schedule
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import MAX_NODE_SCORE, PlacementProgress
from usher.core.framework.runtime import Framework
from usher.core.plugins.defaultpreemption.victims import (
    GROUP_RANK,
    Budgets,
    Units,
    Victim,
    importance,
    split_by_budgets,
)
from usher.core.podgroups import PodGroup
from usher.core.types import Code, NodeName, PodInfo, PodKey, Status, error

GROUP_UNSCHEDULABLE = "pod group is unschedulable"
"""kube-scheduler's errPodGroupUnschedulable: the status of a group that placed nobody."""


@dataclass(slots=True)
class MemberOutcome:
    """One member's turn in the simulation: the one-pod algorithm's answer, and whether it was placed."""

    pod: PodInfo
    state: CycleState
    result: ScheduleResult
    status: Status
    """Success when placed; else the rejection (no node fits, Reserve said no) or the error."""

    @property
    def placed(self) -> bool:
        return self.status.ok and self.result.node is not None

    @property
    def message(self) -> str:
        """Why it was not placed, as its FailedScheduling message would say it."""
        return self.result.message if self.result.node is None else self.status.message


@dataclass(slots=True)
class GroupSimulation:
    """The outcome of placing a group's members one after another; ``revert`` undoes the placements."""

    group: PodGroup
    status: Status
    """Success (the group's constraints are met), Unschedulable (the reasons say why) or an error."""
    members: list[MemberOutcome]
    """The members evaluated, in order."""
    skipped: list[PodInfo]
    """Members never evaluated: the outcome was known before their turn."""
    scheduled_before: int
    """Members assumed or bound before the cycle."""
    _reverts: list[Callable[[], None]] = field(default_factory=list)
    placements: tuple[int, int] = (0, 0)
    """(placements generated, of which feasible) when a topology constraint made them; else (0, 0)."""
    placement_seconds: list[tuple[bool, float]] = field(default_factory=list)
    """(feasible, seconds) of each placement evaluated (scheduler_placement_evaluation_duration_seconds)."""

    @property
    def placed(self) -> list[MemberOutcome]:
        return [member for member in self.members if member.placed]

    @property
    def failed(self) -> list[MemberOutcome]:
        return [member for member in self.members if not member.placed]

    @property
    def short(self) -> int:
        """Members still missing for the quorum (0 once it is met)."""
        return max(0, self.group.quorum - self.scheduled_before - len(self.placed))

    def revert(self) -> None:
        """Unreserve and forget every placed member, last first; safe to call twice."""
        while self._reverts:
            self._reverts.pop()()


def simulate_group(
    framework: Framework,
    group: PodGroup,
    pods: Sequence[PodInfo],
    cache: Cache,
    *,
    scheduled: int,
    new_state: Callable[[], CycleState],
    rng: random.Random,
    sampler: NodeSampler | None = None,
    nominated: Callable[[PodInfo], str | None] = lambda pod: None,
    nodes: Sequence[NodeInfo] | None = None,
) -> GroupSimulation:
    """Place ``pods`` (the group's unscheduled members, in order) on the cache's nodes, all or none.

    ``scheduled``: the group's members already assumed or bound. ``nominated``: the node preemption
    made room on for a member, tried first as in the one-pod cycle. Every pod placed stays assumed and
    reserved until ``revert`` (see the module docstring). ``nodes``: the nodes to place on (a placement's
    domain), else every node of the cache.
    """
    listed = nodes if nodes is not None else cache.node_infos()
    simulation = GroupSimulation(group, Status(), [], [], scheduled)
    progress = PlacementProgress(remaining=len(pods), scheduled=scheduled)
    status = framework.run_placement_feasible(group, progress)
    if status.code is Code.ERROR:
        simulation.status = error(f"failed to evaluate placement feasibility: {status.message}")
        simulation.skipped = list(pods)
        return simulation
    if status.code is Code.UNSCHEDULABLE:
        simulation.status = status
        simulation.skipped = list(pods)
        return simulation
    for index, pod in enumerate(pods):
        member = _place(framework, pod, cache, listed, new_state(), rng, sampler, nominated(pod), simulation)
        simulation.members.append(member)
        if member.status.code is Code.ERROR:
            status = error(f"failed to schedule other pod from a pod group: {member.status.message}")
            simulation.skipped = list(pods[index + 1 :])
            break
        progress = PlacementProgress(
            remaining=progress.remaining - 1, scheduled=progress.scheduled + (1 if member.placed else 0)
        )
        status = framework.run_placement_feasible(group, progress)
        if status.code is Code.ERROR:
            status = error(f"failed to evaluate placement feasibility: {status.message}")
        if status.code in (Code.ERROR, Code.UNSCHEDULABLE):
            simulation.skipped = list(pods[index + 1 :])
            break
    if status.code is Code.WAIT:
        status = Status(Code.UNSCHEDULABLE, status.reasons, status.plugin)
    elif status.ok and not simulation.placed:
        status = Status(Code.UNSCHEDULABLE, (GROUP_UNSCHEDULABLE,))
    simulation.status = status
    return simulation


def _place(
    framework: Framework,
    pod: PodInfo,
    cache: Cache,
    nodes: Sequence[NodeInfo],
    state: CycleState,
    rng: random.Random,
    sampler: NodeSampler | None,
    nominated: str | None,
    simulation: GroupSimulation,
) -> MemberOutcome:
    result = schedule(framework, state, pod, nodes, rng=rng, sampler=sampler, nominated=nominated)
    node = result.node
    if node is None:
        status = result.status if result.status.code is Code.ERROR else Status(Code.UNSCHEDULABLE, (result.message,))
        return MemberOutcome(pod, state, result, status)
    cache.assume(pod, node)
    status = framework.run_reserve(state, pod, node)
    if not status.ok:
        framework.run_unreserve(state, pod, node)
        cache.forget(pod)
        return MemberOutcome(pod, state, result, status)

    def revert() -> None:
        framework.run_unreserve(state, pod, node)
        cache.forget(pod)

    simulation._reverts.append(revert)
    return MemberOutcome(pod, state, result, Status())


def validate_group(group: PodGroup, pods: Sequence[PodInfo], scheduled: Sequence[PodInfo]) -> str:
    """Why the group's pods cannot be scheduled together as they are ("" when they can), with
    kube-scheduler's messages (validatePodGroup): one scheduler name, the PodGroup's priority, one
    preemption policy, for the unscheduled and the scheduled members alike."""
    if group.problem:
        return group.problem
    if not pods:
        return ""
    scheduler, policy = pods[0].scheduler_name, pods[0].preemption_policy
    for pod in (*pods, *scheduled):
        if pod.scheduler_name != scheduler:
            return (
                "all pods in a single pod group should have the same .spec.schedulerName set, "
                f'got: "{pod.scheduler_name}" and "{scheduler}"'
            )
        if pod.priority != group.priority:
            return (
                "all pods in a single pod group should have the same priority as the pod group's priority, "
                f"got {pod.priority} and {group.priority}"
            )
        if pod.preemption_policy != policy:
            return (
                "all pods in a single pod group should have the same preemption policy, "
                f"got {pod.preemption_policy} and {policy}"
            )
    return ""


NO_GROUP_VICTIMS = "No preemption victims found for incoming preemptor"
NEVER = "Never"


@dataclass(slots=True)
class GroupPreemption:
    """Workload-aware preemption's answer for a group: where each member goes and whom to evict."""

    status: Status
    nominations: dict[PodKey, NodeName] = field(default_factory=dict)
    """Each member placed in the dry run, and its node (kube's ModeOverride nominations)."""
    victims: tuple[PodInfo, ...] = ()
    budget_violations: int = 0
    group_disruptions: int = 0
    """Victims that are pod groups' (kube's NumPodGroupDisruptions: scheduler_preemption_workload_disruptions)."""
    ongoing: bool = False
    """The members' nominated nodes still have victims terminating: nothing new is evicted."""


def preempt_for_group(
    framework: Framework,
    group: PodGroup,
    pods: Sequence[PodInfo],
    cache: Cache,
    *,
    simulate: Callable[[], GroupSimulation],
    units: Units,
    budgets: Budgets,
    terminating: Callable[[PodInfo], bool],
    nominated: Callable[[PodInfo], str] = lambda pod: pod.nominated_node_name,
) -> GroupPreemption:
    """kube-scheduler's PodGroupEvaluator.Preempt for a group that did not fit: the whole cluster is
    the domain. Every victim of lower priority than the group leaves the cache, the group is
    simulated again (all or nothing); if it fits, victims are given back one by one, most important
    first (budget-breaking ones first), while every placed member still passes Filter on its node
    with the members before it assumed and reserved. The cache is as it was on return.

    ``simulate`` places the group (as the cycle does: `simulate_group`, or `place_group` with its
    placements); ``units`` builds the victims a node's pods belong to; ``terminating`` tells a pod
    being evicted; ``nominated`` a member's nominated node (the scheduler's own record first: the
    pod's ``status.nominatedNodeName`` lags behind the nomination it just made).
    """
    if pods and pods[0].preemption_policy == NEVER:
        return GroupPreemption(Status(Code.UNSCHEDULABLE, ("not eligible due to preemptionPolicy=Never.",)))
    if _ongoing(group, pods, cache, terminating, nominated):
        nominations = {p.key: NodeName(nominated(p)) for p in pods if nominated(p)}
        return GroupPreemption(
            Status(Code.SUCCESS, ("ongoing preemption on nominated nodes",)), nominations, ongoing=True
        )
    seen: set[tuple[PodKey, ...]] = set()
    potential: list[Victim] = []
    for node in cache.node_infos():
        for victim in units(node):
            identity = tuple(sorted(p.key for p in victim.pods))
            if identity not in seen:
                seen.add(identity)
                if victim.priority < group.priority:
                    potential.append(victim)
    if not potential:
        return GroupPreemption(Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_GROUP_VICTIMS,)))
    aside: dict[PodKey, SetAside] = {}
    try:
        for victim in potential:
            for pod in victim.pods:
                if (lifted := cache.set_aside(pod.key)) is not None:
                    aside[pod.key] = lifted
        simulation = simulate()
        simulation.revert()
        if not simulation.status.ok:
            return GroupPreemption(simulation.status)
        placed = simulation.placed
        evicted, violations = _reprieve(framework, cache, placed, potential, aside, budgets)
    finally:
        for lifted in aside.values():
            cache.put_back(lifted)
    nominations = {m.pod.key: m.result.node for m in placed if m.result.node is not None}
    victims = tuple(pod for victim in evicted for pod in victim.pods)
    message = f"found a placement for podgroup, preempting {len(victims)} victims"
    groups = sum(1 for victim in evicted if victim.rank == GROUP_RANK)
    return GroupPreemption(Status(Code.SUCCESS, (message,)), nominations, victims, violations, groups)


def _ongoing(
    group: PodGroup,
    pods: Sequence[PodInfo],
    cache: Cache,
    terminating: Callable[[PodInfo], bool],
    nominated: Callable[[PodInfo], str],
) -> bool:
    """kube's isOngoingPreemption: a member's nominated node holds a lower-priority pod being evicted."""
    for node_name in {nominated(p) for p in pods if nominated(p)}:
        node = cache.node(node_name)
        if node is not None and any(o.priority < group.priority and terminating(o) for o in node.pods.values()):
            return True
    return False


def _unassume(framework: Framework, cache: Cache, member: MemberOutcome, node: NodeName) -> None:
    framework.run_unreserve(member.state, member.pod, node)
    cache.forget(member.pod)


def _reprieve(
    framework: Framework,
    cache: Cache,
    placed: Sequence[MemberOutcome],
    potential: list[Victim],
    aside: dict[PodKey, SetAside],
    budgets: Budgets,
) -> tuple[list[Victim], int]:
    """Give back what the placed members can live with; (the victims evicted, budget violations)."""
    potential.sort(key=importance)
    violating, rest = split_by_budgets(potential, budgets)
    evicted: list[Victim] = []

    def tell(victim: Victim, added: bool) -> None:
        for pod in victim.pods:
            node = cache.node(aside[pod.key].node) if pod.key in aside else None
            if node is None:
                continue
            for member in placed:
                if added:
                    framework.add_pod(member.state, member.pod, pod, node)
                else:
                    framework.remove_pod(member.state, member.pod, pod, node)

    def fits_with(victim: Victim) -> bool:
        for pod in victim.pods:
            if pod.key in aside:
                cache.put_back(aside[pod.key])
        tell(victim, added=True)
        undo: list[Callable[[], None]] = []
        fits = True
        for member in placed:
            node_name = member.result.node
            node = cache.node(node_name) if node_name is not None else None
            if node_name is None or node is None or framework.filter_node(member.state, member.pod, node) is not None:
                fits = False
                break
            cache.assume(member.pod, node_name)
            framework.run_reserve(member.state, member.pod, node_name)
            undo.append(partial(_unassume, framework, cache, member, node_name))
        for revert in reversed(undo):
            revert()
        if not fits:
            for pod in victim.pods:
                if pod.key in aside:
                    cache.set_aside(pod.key)
            tell(victim, added=False)
        return fits

    violations = 0
    for victim, count in violating:
        if not fits_with(victim):
            evicted.append(victim)
            violations += count
    for victim in rest:
        if not fits_with(victim):
            evicted.append(victim)
    evicted.sort(key=importance)
    return evicted, violations


def placements(group: PodGroup, cache: Cache) -> tuple[list[tuple[str, NodeList]], str]:
    """kube-scheduler's TopologyPlacementGenerator: one placement per value of the group's topology key
    among the nodes that carry it, only the domain of its already scheduled members if it has any;
    ([(domain, nodes)], "") or ([], why none can be made)."""
    key = group.topology_key
    every = cache.node_infos()
    required: str | None = None
    state = cache.pod_groups.get(group.key)
    for member in state.scheduled_keys() if state is not None else ():
        node = cache.node_of_pod(member)
        domain = node.labels.get(key) if node is not None else None
        if domain is None:
            return [], f"cannot determine domain for already scheduled pods: no topology domain found for pod {member}"
        if required is not None and domain != required:
            return [], (
                f"cannot determine domain for already scheduled pods: more than 1 domain found for pod group: "
                f"{required}, {domain}"
            )
        required = domain
    domains: dict[str, list[NodeInfo]] = {}
    for node in every:
        domain = node.labels.get(key)
        if domain is not None and (required is None or domain == required):
            domains.setdefault(domain, []).append(node)
    out: list[tuple[str, NodeList]] = []
    for domain in sorted(domains):
        listed = NodeList(domains[domain])
        listed.with_affinity = every.with_affinity
        listed.with_required_anti_affinity = every.with_required_anti_affinity
        listed.claim_refs = every.claim_refs
        out.append((domain, listed))
    return out, ""


def place_group(
    framework: Framework,
    group: PodGroup,
    pods: Sequence[PodInfo],
    cache: Cache,
    *,
    scheduled: int,
    new_state: Callable[[], CycleState],
    rng: random.Random,
    sampler: NodeSampler | None = None,
    nominated: Callable[[PodInfo], str | None] = lambda pod: None,
    topology: bool = True,
    timer: Callable[[], float] | None = None,
) -> tuple[GroupSimulation, bool]:
    """The group's placement algorithm: `simulate_group` on every node, or, for a group with a topology
    constraint (``topology``: TopologyAwareWorkloadScheduling on), once per domain, each reverted, and the
    best domain's simulation (kube-scheduler's podGroupSchedulingPlacementAlgorithm and findBestPlacement:
    the domains that fit are scored by PodGroupPodsCount, members scheduled and placed scaled to 0-100 by
    the most any domain places, plus the profile's PlacementScore plugins (NodeResourcesFit: MostAllocated
    over the domain's nodes with the members placed there), each times its weight; equal totals drawn at
    random).

    Returns (simulation, still assumed): a plain simulation keeps its members assumed until reverted; a
    placement's is already reverted (the caller commits it from its outcome)."""
    run = partial(
        simulate_group, framework, group, pods, cache, scheduled=scheduled, new_state=new_state, rng=rng,
        sampler=sampler, nominated=nominated,
    )  # fmt: skip
    if not topology or not group.topology_key:
        return run(), True
    domains, problem = placements(group, cache)
    if problem:
        return GroupSimulation(group, Status(Code.UNSCHEDULABLE, (problem,)), [], list(pods), scheduled), False
    if not domains:
        why = f"0/0 placements are available: no node has the topology key {group.topology_key!r}"
        return GroupSimulation(group, Status(Code.UNSCHEDULABLE, (why,)), [], list(pods), scheduled), False
    first: GroupSimulation | None = None
    fitting: list[tuple[GroupSimulation, NodeList]] = []
    timed: list[tuple[bool, float]] = []
    for _, nodes in domains:
        started = timer() if timer is not None else 0.0
        simulation = run(nodes=nodes)
        simulation.revert()
        if timer is not None and simulation.status.code is not Code.ERROR:  # upstream times no errored one
            timed.append((simulation.status.ok, timer() - started))
        if simulation.status.code is Code.ERROR:
            simulation.placement_seconds = timed
            return simulation, False
        first = first or simulation
        if simulation.status.ok:
            fitting.append((simulation, nodes))
    assert first is not None
    if not fitting:
        why = f"0/{len(domains)} placements are available, first placement status: {first.status.message}"
        first.status = Status(Code.UNSCHEDULABLE, (why,), first.status.plugin)
        first.placements = (len(domains), 0)
        first.placement_seconds = timed
        return first, False
    if len(fitting) == 1:
        chosen = fitting[0][0]
    else:
        totals, status = framework.run_placement_score(
            group, [([m.pod for m in s.placed], nodes) for s, nodes in fitting]
        )
        if not status.ok:
            simulation = fitting[0][0]
            simulation.status = status
            simulation.placement_seconds = timed
            return simulation, False
        counts = [s.scheduled_before + len(s.placed) for s, _ in fitting]
        most = max(counts)
        if framework.plugins.pod_group_pods_count:
            for i, count in enumerate(counts):
                totals[i] += count * MAX_NODE_SCORE // most if most else 0  # weight 1
        best = max(totals)
        chosen = rng.choice([s for (s, _), total in zip(fitting, totals, strict=True) if total == best])
    chosen.placements = (len(domains), len(fitting))
    chosen.placement_seconds = timed
    return chosen, False
