"""The scheduling cycle's algorithm: PreFilter, Filter (all nodes or a sample), Score, pick one. Pure.

The caller owns the cache, the queue and the API: it assumes the pod on the
chosen node, runs Reserve/Permit and hands the binding cycle to the event
loop. Node sampling follows kube-scheduler (numFeasibleNodesToFind): under 100
nodes every node is filtered; above, filtering stops once enough feasible
nodes were found, starting where the previous cycle stopped. Ties are broken
by a seeded random choice, so a run can be replayed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from usher.core.cache import NodeInfo
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.names import NO_NODES_AVAILABLE
from usher.core.framework.runtime import Framework
from usher.core.types import Code, NodeName, PodInfo, Status, reason_histogram

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


@dataclass(slots=True)
class ScheduleResult:
    """A node, or why every node was rejected (and by which plugins)."""

    node: NodeName | None
    evaluated: int = 0
    feasible: int = 0
    node_count: int = 0
    status: Status = field(default_factory=Status)
    node_statuses: dict[str, Status] = field(default_factory=dict)
    unschedulable_plugins: set[str] = field(default_factory=set)
    pending_plugins: set[str] = field(default_factory=set)
    pre_filter_message: str = ""

    @property
    def message(self) -> str:
        """kube-scheduler's FailedScheduling shape: ``0/3 nodes are available: 2 Insufficient cpu, ...``."""
        if self.node is not None:
            return ""
        if self.status.code is Code.ERROR:
            return self.status.message
        head = f"0/{self.node_count} nodes are available"
        if self.pre_filter_message:
            # As kube-scheduler's FitError: every node carries the PreFilter rejection, so listing the nodes'
            # reasons as well would say it twice.
            return f"{head}: {self.pre_filter_message}."
        detail = reason_histogram(self.node_statuses.values())
        return f"{head}: {detail}." if detail else f"{head}."


class NodeSampler:
    """How many feasible nodes to look for, and where to start (rotating)."""

    def __init__(self, percentage: int = 0) -> None:
        self.percentage = percentage
        self.next_start = 0

    def num_to_find(self, total: int, profile_percentage: int | None) -> int:
        if total < MIN_FEASIBLE_NODES_TO_FIND:
            return total
        percentage = profile_percentage if profile_percentage is not None else self.percentage
        if percentage == 0:
            percentage = max(50 - total // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
        if percentage >= 100:
            return total
        return max(total * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def schedule(
    framework: Framework,
    state: CycleState,
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    *,
    rng: random.Random,
    sampler: NodeSampler | None = None,
    nominated: str | None = None,
) -> ScheduleResult:
    """Place ``pod`` on one of ``nodes``. A pod ``nominated`` to a node (preemption made room there) tries
    that node first and takes it if it fits, without looking at the others (kube-scheduler's
    evaluateNominatedNode: that node is likely the only one that will fit)."""
    sampler = sampler or NodeSampler()
    result = ScheduleResult(node=None, node_count=len(nodes))
    if not nodes:
        result.status = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("0/0 nodes are available.",))
        result.unschedulable_plugins.add(NO_NODES_AVAILABLE)
        return result
    pre = framework.run_pre_filter(state, pod, nodes)
    if not pre.status.ok:
        result.status = pre.status
        if pre.status.code is Code.PENDING:
            result.pending_plugins |= pre.rejectors
        else:
            result.unschedulable_plugins |= pre.rejectors
        result.pre_filter_message = pre.status.message
        for node in nodes:
            result.node_statuses[node.name] = pre.status
        return result
    candidates: Sequence[NodeInfo] = nodes
    if pre.result is not None and pre.result.node_names is not None:
        allowed = pre.result.node_names
        candidates = [n for n in nodes if n.name in allowed]
        result.unschedulable_plugins |= pre.rejectors
        if not candidates:
            result.pre_filter_message = "node(s) didn't satisfy plugin(s) " + str(sorted(pre.rejectors))
            return result
    if nominated:
        held = next((n for n in candidates if n.name == nominated), None)
        if held is not None and framework.run_filter_nodes(state, pod, [held]) == [None]:
            result.evaluated = result.feasible = 1
            result.node = held.name
            return result
    feasible: list[NodeInfo] = []
    total = len(candidates)
    want = sampler.num_to_find(total, framework.percentage_of_nodes_to_score)
    start = sampler.next_start % total if total else 0
    evaluated = 0
    # Filter in chunks of exactly the feasible nodes still wanted: a chunk cannot
    # overshoot, so the nodes evaluated (and where the next cycle starts) are the
    # same as filtering one node at a time, at a fraction of the calls.
    while evaluated < total and len(feasible) < want:
        size = min(want - len(feasible), total - evaluated)
        first = (start + evaluated) % total
        chunk = list(candidates[first : first + size])
        if len(chunk) < size:  # wrapped past the last node
            chunk += candidates[: size - len(chunk)]
        statuses = framework.run_filter_nodes(state, pod, chunk)
        node_statuses = result.node_statuses
        last: Status | None = None  # nodes failing alike share one Status: look at each once
        for index, (node, status) in enumerate(zip(chunk, statuses, strict=True)):
            if status is None:
                feasible.append(node)
                continue
            if status is not last:
                if status.code is Code.ERROR:
                    # kube-scheduler's RunFilterPlugins: a Filter must only reject, so an error is wrapped and ends
                    # the attempt whatever the other nodes would say.
                    message = f'running "{status.plugin}" filter plugin: {status.message}'
                    result.status = Status(Code.ERROR, (message,), status.plugin, status.cause)
                    result.evaluated = evaluated + index + 1
                    return result
                if status.code is Code.PENDING:
                    result.pending_plugins.add(status.plugin)
                else:
                    result.unschedulable_plugins.add(status.plugin)
                last = status
            node_statuses[node.name] = status
        evaluated += len(chunk)
    if total:
        sampler.next_start = (start + evaluated) % total
    result.evaluated = evaluated
    result.feasible = len(feasible)
    if not feasible:
        result.status = Status(Code.UNSCHEDULABLE, (result.message,))
        return result
    if len(feasible) == 1:
        result.node = feasible[0].name
        return result
    scores, status = framework.run_score(state, pod, feasible)
    if not status.ok:
        result.status = status
        return result
    best = max(scores.values())
    result.node = rng.choice([name for name, score in scores.items() if score == best])
    return result
