"""The pod-group cycle of a popped group (kube-scheduler's schedule_one_podgroup.go): all of it or nothing.

The queue pops a pod group's waiting members together (``pop_group``); this
places them in one synchronous step against the cache (no watch event can
come in between, so the cache is one snapshot for the whole group):

1. validate: the PodGroup exists and is readable, its members agree on
   scheduler name, priority and preemption policy; else every member fails
   with an error (backoff) and the PodGroup says ``SchedulerError``;
2. simulate (``core.groupcycle``): each member through PreFilter, Filter and
   Score and, when it fits, assumed and reserved where the next ones see it;
   GangScheduling's PlacementFeasible ends it once ``minCount`` is met or out
   of reach;
3. PostFilter (preemption), before the simulation is reverted so its dry
   runs see the members placed: for each member that did not fit when the
   outcome hangs on single pods (the basic policy, a gang whose quorum is
   met, or a gang one pod short of it: that pod's room is all it needs).
   A gang short of two or more pods gets workload-aware preemption after the
   simulation is reverted (kube-scheduler's PodGroupPostFilter,
   ``core.groupcycle.preempt_for_group``): lower-priority victims leave the
   cache, the group is simulated again, victims it can live with are given
   back; each member it placed is nominated to its node and the rest evicted;
4. revert the simulation, then commit a group that succeeded: each placed
   member assumed, reserved and through Permit again, one by one, so
   GangScheduling's Permit holds the first ones (WaitingPods) until the one
   that completes the quorum allows them all; their binding cycles meet at a
   ``GangCommit`` before Bind. The PodGroup says ``PodGroupInitiallyScheduled``.
   Members that did not fit in a group that succeeded fail on their own.
   A group that did not succeed places nobody: every member fails with one
   message for the group (``pod group ns/name: <why>; pod ns/p: <its fit
   error>``), waits for the events that can help the members that did not
   fit (or for GangScheduling's), and the PodGroup says ``Unschedulable``.

Nothing here waits for the API server; reports go through the dispatcher.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from usher.core.cache import Cache
from usher.core.cycle import NodeSampler
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import RECORD_PLUGIN_METRICS, Framework
from usher.core.groupcycle import GroupSimulation, MemberOutcome, place_group, validate_group
from usher.core.podgroups import PodGroup
from usher.core.queue import QueuedPod, SchedulingQueue
from usher.core.types import Code, PodInfo, PodKey
from usher.scheduling.failures import SchedulingFailures
from usher.scheduling.gang_binding import GangCommits
from usher.scheduling.podgroup_conditions import PodGroupConditions
from usher.scheduling.ports import SchedulingRecorder
from usher.scheduling.preemption import PostFilterOutcome, Preemptor
from usher.scheduling.scheduling_cycle import PLUGIN_METRICS_SAMPLE, Assumed, PermitWait
from usher.scheduling.waiting_pods import WaitingPods

logger = logging.getLogger(__name__)


class PodGroupCycle:
    """Runs the pod-group cycle of popped groups against the cache, one group at a time."""

    def __init__(
        self,
        *,
        frameworks: Mapping[str, Framework],
        cache: Cache,
        queue: SchedulingQueue,
        waiting_pods: WaitingPods,
        failures: SchedulingFailures,
        preemptor: Preemptor,
        conditions: PodGroupConditions,
        gangs: GangCommits,
        recorder: SchedulingRecorder,
        sampler: NodeSampler,
        rng: random.Random,
        timer: Callable[[], float] = time.perf_counter,
        topology: bool = True,
    ) -> None:
        self._frameworks = frameworks
        self._cache = cache
        self._queue = queue
        self._waiting_pods = waiting_pods
        self._failures = failures
        self._preemptor = preemptor
        self._conditions = conditions
        self._gangs = gangs
        self._recorder = recorder
        self._sampler = sampler
        self._rng = rng
        self._timer = timer
        self._topology = topology

    def run(self, members: Sequence[QueuedPod]) -> list[Assumed]:
        """Schedule a popped group (its first member the pod popped): the members committed, for their
        binding cycles; empty when the group failed (already reported)."""
        started = self._timer()
        first = members[0]
        key = first.pod.group_key
        framework = self._frameworks.get(first.pod.scheduler_name)
        if key is None or framework is None:  # its profile vanished (cannot happen while the config is fixed)
            for queued in members:
                self._queue.done(queued)
            return []
        state = self._cache.pod_groups.get(key)
        group = state.pod_group if state is not None else None
        if state is None or group is None:
            self._error(members, framework, started, f"PodGroup {key} not found", None)
            return []
        pods = [queued.pod for queued in members]
        scheduled = [pod for k in state.scheduled_keys() if (pod := self._cache.pod(k)) is not None]
        problem = validate_group(group, pods, scheduled)
        if problem:
            self._error(members, framework, started, problem, group)
            return []
        place = partial(
            place_group, framework, group, pods, self._cache, scheduled=state.scheduled_count,
            new_state=self._new_state, rng=self._rng, sampler=self._sampler, topology=self._topology,
            timer=self._timer,
        )  # fmt: skip
        simulation, still_assumed = place(
            nominated=lambda pod: self._queue.nominator.node_of(pod.key) or pod.nominated_node_name or None
        )
        elapsed = self._timer() - started
        self._recorder.algorithm_finished(elapsed)
        self._recorder.pod_group_algorithm_finished(elapsed)
        if simulation.placements[0]:
            self._recorder.placements_evaluated(framework.scheduler_name, *simulation.placements)
        for feasible, seconds in simulation.placement_seconds:
            self._recorder.placement_timed("feasible" if feasible else "infeasible", framework.scheduler_name, seconds)
        if simulation.status.code is Code.ERROR:
            simulation.revert()
            self._error(members, framework, started, simulation.status.message, group)
            return []
        # One-pod PostFilter needs the simulation's placements still assumed (a placement's are not).
        outcomes = self._post_filter(framework, simulation) if still_assumed else {}
        simulation.revert()
        if simulation.status.code is Code.UNSCHEDULABLE and (
            not still_assumed or (group.gang and simulation.short > 1)
        ):
            outcomes = self._preempt_group(framework, simulation, pods, lambda: place()[0])
        by_key = {queued.key: queued for queued in members}
        if not simulation.status.ok:
            # kube-scheduler runs DynamicResources' PodGroupPostFilter before preemption's; both only ask for
            # writes here, so their order changes nothing.
            released = framework.run_pod_group_post_filter(group, [(m.pod, m.state) for m in simulation.members])
            if released.message:
                logger.info("pod group %s: %s", key, released.message)
            self._unschedulable(framework, simulation, by_key, outcomes, started)
            self._recorder.pod_group_attempt_finished(
                "unschedulable", framework.scheduler_name, self._timer() - started
            )
            return []
        assumed = self._commit(framework, simulation, by_key, started)
        if assumed:  # else _commit failed and _error recorded it
            self._recorder.pod_group_attempt_finished("scheduled", framework.scheduler_name, self._timer() - started)
            for member in simulation.failed:
                self._member_failed(framework, by_key[member.pod.key], member, outcomes.get(member.pod.key), started)
            for pod in simulation.skipped:  # none: only a failing group stops early; but none may stay in flight
                self._queue.add_unschedulable(by_key[pod.key])
            self._conditions.scheduled(group)
            logger.info("pod group %s scheduled: %d pod(s) committed", key, len(assumed))
        return assumed

    def _new_state(self) -> CycleState:
        state = CycleState()
        state.write(RECORD_PLUGIN_METRICS, self._rng.random() < PLUGIN_METRICS_SAMPLE)
        return state

    def _post_filter(self, framework: Framework, simulation: GroupSimulation) -> dict[PodKey, PostFilterOutcome]:
        """Preempt for the members that did not fit, where single pods decide (step 3 of the module
        docstring); the simulation's placements are still assumed, so the dry runs see them."""
        short = simulation.short
        if simulation.group.gang and short > 1:
            return {}  # workload-aware preemption's job: not implemented
        nodes = self._cache.node_infos()
        outcomes: dict[PodKey, PostFilterOutcome] = {}
        for member in simulation.failed:
            if member.result.node is not None or member.status.code is Code.ERROR:
                continue  # Reserve said no, or an error: nothing preemption can help
            outcome = self._preemptor.post_filter(framework, member.state, member.pod, member.result, nodes)
            outcomes[member.pod.key] = outcome
            if simulation.group.gang and short == 1 and outcome.nominated:
                break  # the one pod the gang lacks has its room
        return outcomes

    def _preempt_group(
        self,
        framework: Framework,
        simulation: GroupSimulation,
        pods: Sequence[PodInfo],
        simulate: Callable[[], GroupSimulation],
    ) -> dict[PodKey, PostFilterOutcome]:
        """Workload-aware preemption for a gang short of two or more pods (step 3b of the module docstring),
        once its simulation is reverted: each member's message gains preemption's, each placed member its
        nominated node."""
        outcome = self._preemptor.group_post_filter(framework, simulation.group, pods, self._cache, simulate)
        if outcome is None:
            return {}
        suffix = f"preemption: {outcome.status.message}" if outcome.status.message else ""
        fit_errors = {member.pod.key: member.message for member in simulation.members}
        outcomes: dict[PodKey, PostFilterOutcome] = {}
        for pod in pods:
            message = f"{fit_errors.get(pod.key, '')} {suffix}".strip()
            node = outcome.nominations.get(pod.key) if outcome.status.ok else None
            outcomes[pod.key] = PostFilterOutcome(message, node)
        return outcomes

    def _commit(
        self, framework: Framework, simulation: GroupSimulation, by_key: Mapping[PodKey, QueuedPod], started: float
    ) -> list[Assumed]:
        """Assume, reserve and permit the placed members again, one by one; all of them or none."""
        group = simulation.group
        placed = simulation.placed
        gang = self._gangs.start(group.key, [m.pod.key for m in placed]) if group.gang and len(placed) > 1 else None
        committed: list[Assumed] = []
        for member in placed:
            pod, state, node = member.pod, member.state, member.result.node
            assert node is not None
            self._cache.assume(pod, node)
            status = framework.run_reserve(state, pod, node)
            permit = framework.run_permit(state, pod, node) if status.ok else None
            if permit is not None:
                status = permit.status
            wait = None
            if permit is not None and status.code is Code.WAIT:
                wait = PermitWait(self._waiting_pods.hold(pod.key, permit.waiting), permit.timeout)
            elif not status.ok:
                framework.run_unreserve(state, pod, node)
                self._cache.forget(pod)
                self._roll_back(framework, committed)
                if gang is not None:
                    gang.fail(pod.key, status.message)
                message = f"pod group {group.key}: committing pod {pod.key} failed: {status.message}"
                self._error(list(by_key.values()), framework, started, message, group)
                return []
            committed.append(Assumed(by_key[pod.key], framework, state, node, started, wait, gang))
        return committed

    def _roll_back(self, framework: Framework, committed: Sequence[Assumed]) -> None:
        for assumed in reversed(committed):
            pod = assumed.queued.pod
            if assumed.permit is not None:
                self._waiting_pods.release(pod.key, assumed.permit.future)
            framework.run_unreserve(assumed.state, pod, assumed.node)
            self._cache.forget(pod)

    def _unschedulable(
        self,
        framework: Framework,
        simulation: GroupSimulation,
        by_key: Mapping[PodKey, QueuedPod],
        outcomes: Mapping[PodKey, PostFilterOutcome],
        started: float,
    ) -> None:
        """The group places nobody: one message for all its members; they wait for what can help."""
        group = simulation.group
        detail = simulation.status.message
        culprits = [m for m in simulation.failed if m.status.code is not Code.ERROR]
        if culprits:
            first = culprits[0]
            outcome = outcomes.get(first.pod.key)
            detail = f"{detail}; pod {first.pod.key}: {outcome.message if outcome else first.message}"
        message = f"pod group {group.key}: {detail}"
        unschedulable: set[str] = set()
        pending: set[str] = set()
        for member in culprits:
            unschedulable |= member.result.unschedulable_plugins
            pending |= member.result.pending_plugins
            if member.result.node is not None and member.status.plugin:  # refused at Reserve
                unschedulable.add(member.status.plugin)
        if simulation.status.plugin:
            unschedulable.add(simulation.status.plugin)
        node_statuses = culprits[0].result.node_statuses if culprits else None
        logger.info("pod group %s is unschedulable: %s", group.key, detail)
        profile = framework.scheduler_name
        for key, queued in by_key.items():
            outcome = outcomes.get(key)
            self._failures.failed(
                queued,
                profile,
                started,
                "unschedulable",
                message,
                unschedulable_plugins=unschedulable,
                pending_plugins=pending,
                node_statuses=node_statuses,
                nominated_node=outcome.nominated if outcome is not None else None,
            )
        self._conditions.unschedulable(group, detail)

    def _member_failed(
        self,
        framework: Framework,
        queued: QueuedPod,
        member: MemberOutcome,
        outcome: PostFilterOutcome | None,
        started: float,
    ) -> None:
        """A member that did not fit in a group that succeeded without it: it fails on its own."""
        profile = framework.scheduler_name
        if member.status.code is Code.ERROR:
            self._failures.failed(queued, profile, started, "error", member.status.message)
            return
        if member.result.node is not None:  # refused at Reserve
            self._failures.rejected(queued, profile, started, member.status)
            return
        self._failures.failed(
            queued,
            profile,
            started,
            "unschedulable",
            outcome.message if outcome is not None else member.message,
            unschedulable_plugins=member.result.unschedulable_plugins,
            pending_plugins=member.result.pending_plugins,
            node_statuses=member.result.node_statuses,
            nominated_node=outcome.nominated if outcome is not None else None,
        )

    def _error(
        self,
        members: Sequence[QueuedPod],
        framework: Framework,
        started: float,
        message: str,
        group: PodGroup | None,
    ) -> None:
        """The group could not be tried: every member is retried after its backoff, the PodGroup says why."""
        logger.error("scheduling pod group %s failed: %s", members[0].pod.group_key, message)
        self._recorder.pod_group_attempt_finished("error", framework.scheduler_name, self._timer() - started)
        for queued in members:
            self._failures.failed(queued, framework.scheduler_name, started, "error", message)
        if group is not None:
            self._conditions.error(group, message)
