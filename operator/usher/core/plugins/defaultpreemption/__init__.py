"""DefaultPreemption: when no node fits, find the node where evicting lower-priority pods makes room. Pure.

kube-scheduler's PostFilter plugin. It decides only: the scheduler nominates
the pod to the chosen node and evicts the victims (``usher.scheduling.preemption``).

- A pod with ``preemptionPolicy: Never`` never preempts; nor does a pod whose
  nominated node still has a lower-priority pod terminating by preemption
  (or one usher asked to evict and has not seen go), unless that node
  became unusable for it. While its victims' eviction calls are in flight,
  PreEnqueue keeps the pod out of activeQ (kube-scheduler's asynchronous
  preemption).
- Only nodes whose Filter rejection may be resolved (Unschedulable, not
  UnschedulableAndUnresolvable) are dry-run, starting at a random offset,
  until ``max(minCandidateNodesPercentage % of them,
  minCandidateNodesAbsolute)`` candidates are found, at least one of them
  breaking no PodDisruptionBudget.
- The victims on a node and the best candidate are chosen as in ``victims``.
  With pod groups known (GenericWorkload), a pod of a PodGroup whose
  ``disruptionMode`` is All is evicted with every scheduled pod of its group,
  on whatever node (kube's getCrossNodesVictims), and a pod of a group
  counts at its group's priority.

Every message is prefixed ``preemption: `` and appended to the pod's
FailedScheduling message, as kube-scheduler does.

Each dry run works on a copy of the node and a clone of the cycle state,
which the PreFilter extensions (PodTopologySpread's and InterPodAffinity's)
keep in step as victims are removed and given back.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.framework.interface import FilterRunner, Handle, PostFilterResult
from usher.core.framework.names import DEFAULT_PREEMPTION
from usher.core.plugins.defaultpreemption.victims import Candidate, group_units, pick_one, select_victims, single_pods
from usher.core.types import SUCCESS, Code, PodInfo, PodKey, Status, reason_histogram

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = DEFAULT_PREEMPTION
PREFIX = "preemption: "
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NEVER = "Never"
WAITING = "waiting for the preemption for this pod to be finished"


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """DefaultPreemptionArgs of kubescheduler.config.k8s.io/v1."""

    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100

    def candidates_wanted(self, nodes: int) -> int:
        """How many candidate nodes to find among ``nodes`` potential ones (kube's calculateNumCandidates)."""
        wanted = max(nodes * self.min_candidate_nodes_percentage // 100, self.min_candidate_nodes_absolute)
        return min(wanted, nodes)


def parse_args(args: Mapping[str, Any]) -> PreemptionArgs:
    """Validated as kube-scheduler's ValidateDefaultPreemptionArgs does."""
    reject_unknown_args(args, {"minCandidateNodesPercentage", "minCandidateNodesAbsolute"})
    defaults = PreemptionArgs()
    percentage = args.get("minCandidateNodesPercentage", defaults.min_candidate_nodes_percentage)
    absolute = args.get("minCandidateNodesAbsolute", defaults.min_candidate_nodes_absolute)
    if not _is_int(percentage) or not 0 <= percentage <= 100:
        raise PluginArgsError("minCandidateNodesPercentage", f"{percentage!r} not in valid range [0, 100]")
    if not _is_int(absolute) or absolute < 0:
        raise PluginArgsError("minCandidateNodesAbsolute", f"{absolute!r} not in valid range [0, inf)")
    if percentage == 0 and absolute == 0:
        raise PluginArgsError(
            "minCandidateNodesPercentage", "cannot be zero at the same time as minCandidateNodesAbsolute"
        )
    return PreemptionArgs(percentage, absolute)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class DefaultPreemption:
    """Picks a node and the victims whose eviction lets the pod fit there."""

    name = NAME

    def __init__(self, args: PreemptionArgs, handle: Handle, rng: random.Random | None = None) -> None:
        self.args = args
        self._handle = handle
        self._rng = rng or random.Random()

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """kube-scheduler's asynchronous preemption: a pod whose victims are still being evicted waits."""
        if self._handle.preemptions.running(pod.uid):
            return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (WAITING,))
        return SUCCESS

    def post_filter(
        self,
        state: CycleState,
        pod: PodInfo,
        statuses: Mapping[str, Status],
        nodes: Sequence[NodeInfo],
        filters: FilterRunner,
    ) -> PostFilterResult:
        result = self._preempt(state, pod, statuses, nodes, filters)
        status = result.status
        if status.message:
            status = Status(status.code, (PREFIX + status.message,), status.plugin, status.cause)
        return PostFilterResult(
            status, result.nominated_node, result.victims, result.clear_nomination, result.budget_violations
        )

    def _preempt(
        self,
        state: CycleState,
        pod: PodInfo,
        statuses: Mapping[str, Status],
        nodes: Sequence[NodeInfo],
        filters: FilterRunner,
    ) -> PostFilterResult:
        refusal = self._ineligible(pod, statuses, nodes)
        if refusal:
            return PostFilterResult(Status(Code.UNSCHEDULABLE, (refusal,)))
        if not nodes:
            return PostFilterResult(Status(Code.ERROR, ("no nodes available",)))
        # A node absent from ``statuses`` was never evaluated (a PreFilter narrowed the nodes): as in
        # kube-scheduler, its status is UnschedulableAndUnresolvable and preemption skips it.
        potential = [n for n in nodes if (s := statuses.get(n.name)) is not None and s.code is Code.UNSCHEDULABLE]
        candidates, failed = self._dry_run(state, pod, potential, filters) if potential else ([], {})
        if not candidates:
            errors = [s for s in failed.values() if s.code is Code.ERROR]
            if errors:
                return PostFilterResult(Status(Code.ERROR, errors[0].reasons))
            return PostFilterResult(
                Status(Code.UNSCHEDULABLE, (_fit_error(len(nodes), failed),)), clear_nomination=True
            )
        best = pick_one(candidates)
        message = f"found a potential placement for pod on node {best.node}, preempting {len(best.victims)} victims"
        return PostFilterResult(
            Status(Code.SUCCESS, (message,)), best.node, best.victims, budget_violations=best.budget_violations
        )

    def _ineligible(self, pod: PodInfo, statuses: Mapping[str, Status], nodes: Sequence[NodeInfo]) -> str:
        """Why ``pod`` may not preempt now ("" if it may): kube's PodEligibleToPreemptOthers."""
        if pod.preemption_policy == NEVER:
            return "not eligible due to preemptionPolicy=Never."
        nominated = pod.nominated_node_name
        if not nominated:
            return ""
        status = statuses.get(nominated)
        if status is None or status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            return ""  # the nominated node cannot take it any more: preempt elsewhere
        for node in nodes:
            if node.name == nominated:
                evicting = self._handle.preemptions.evicting
                for other in node.pods.values():
                    if other.priority < pod.priority and (other.terminating_by_preemption or evicting(other.key)):
                        return "not eligible due to a terminating pod on the nominated node."
        return ""

    def _dry_run(
        self, state: CycleState, pod: PodInfo, potential: Sequence[NodeInfo], filters: FilterRunner
    ) -> tuple[list[Candidate], dict[str, Status]]:
        """Candidates (those breaking no budget first) and why each other node examined is none."""
        wanted = self.args.candidates_wanted(len(potential))
        offset = self._rng.randrange(len(potential))
        clean: list[Candidate] = []
        violating: list[Candidate] = []
        failed: dict[str, Status] = {}
        budgets = self._handle.disruption_budgets
        groups = self._handle.pod_groups
        units = group_units(groups, self._handle.node_of_pod) if groups.enabled else single_pods
        for i in range(len(potential)):
            node = potential[(offset + i) % len(potential)]
            trial = partial(_Trial, state, pod, node, filters, self._handle.node_of_pod)
            candidate, status = select_victims(pod, node, trial, budgets, units)
            if candidate is None:
                assert status is not None
                failed[node.name] = status
                continue
            found = violating if candidate.budget_violations else clean
            if len(found) < wanted:
                found.append(candidate)
            if clean and len(clean) + len(violating) >= wanted:
                break
        return clean + violating, failed


class _Trial:
    """One node's dry run: a copy of it and of the cycle state, kept in step by the PreFilter extensions.

    A victim's pod on another node (a PodGroup evicted as one) changes only the cycle state, told with
    that node as cached; its Filter is never run (kube-scheduler's SelectVictimsOnNode)."""

    def __init__(
        self,
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        filters: FilterRunner,
        node_of_pod: Callable[[PodKey], NodeInfo | None],
    ) -> None:
        self._state = state.clone()
        self._pod = pod
        self._origin = node
        self._node = node.clone()
        self._filters = filters
        self._node_of_pod = node_of_pod

    def _where(self, victim: PodInfo) -> NodeInfo | None:
        if victim.key in self._origin.pods:
            return self._node
        return self._node_of_pod(victim.key)

    def remove(self, victim: PodInfo) -> None:
        node = self._where(victim)
        if node is self._node:
            self._node.remove_pod(victim.key)
        if node is not None:
            self._filters.remove_pod(self._state, self._pod, victim, node)

    def add(self, victim: PodInfo) -> None:
        node = self._where(victim)
        if node is self._node:
            self._node.add_pod(victim)
        if node is not None:
            self._filters.add_pod(self._state, self._pod, victim, node)

    def fits(self) -> Status | None:
        return self._filters.filter_node(self._state, self._pod, self._node)

    def fits_again(self) -> bool:
        return self._filters.fits_again(self._state, self._pod, self._node)


def _fit_error(node_count: int, failed: Mapping[str, Status]) -> str:
    """kube-scheduler's FitError text: why each examined node is no candidate, the rest not helpful."""
    detail = reason_histogram(failed.values(), node_count - len(failed), NOT_HELPFUL)
    return f"0/{node_count} nodes are available: {detail}."


def new(args: Mapping[str, Any], handle: Handle) -> DefaultPreemption:
    return DefaultPreemption(parse_args(args), handle)
