"""NodeResourcesBalancedAllocation: prefer nodes whose resources the pod leaves more evenly used. Pure.

As kube-scheduler v1.37 scores it: a node's balance is (1 - standard deviation
of the requested/allocatable fractions) x 100 over the configured resources
(cpu and memory by default), and the score is how much the pod changes it,
``50 + (50 + balance with the pod - balance without it) / 2``: 75 when the pod
leaves the balance as it was, towards 100 when it evens the node out, towards
50 when it tips it. Requests count as given (no 100m/200Mi defaults), so a pod
asking for none of the resources is skipped at PreScore, as kube skips it. An
extended resource the pod does not ask for is left out, and so is a resource
the node has none of; one a DeviceClass serves counts the class's devices on a
node without it in allocatable (`usher.core.dra.capacity`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.framework.interface import MAX_NODE_SCORE, BatchScorePlugin, Handle
from usher.core.framework.names import NODE_RESOURCES_BALANCED_ALLOCATION
from usher.core.hints import ClusterEventWithHint
from usher.core.plugins.noderesources.allocatable import allocatable_and_requested
from usher.core.plugins.noderesources.fit import Scores
from usher.core.plugins.nodeshares import PerNodeByKind
from usher.core.resources import CPU, MEMORY
from usher.core.types import SUCCESS, Code, PodInfo, Status

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = NODE_RESOURCES_BALANCED_ALLOCATION


@dataclass(frozen=True, slots=True)
class BalancedArgs:
    """NodeResourcesBalancedAllocationArgs of kubescheduler.config.k8s.io/v1."""

    resources: tuple[str, ...] = (CPU, MEMORY)


def parse_args(args: Mapping[str, Any]) -> BalancedArgs:
    reject_unknown_args(args, {"resources"})
    raw = args.get("resources")
    if raw is None:
        return BalancedArgs()
    if not isinstance(raw, list) or not raw:
        raise PluginArgsError("resources", "must be a non-empty list of {name, weight}")
    names: list[str] = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not item.get("name"):
            raise PluginArgsError(f"resources[{i}].name", "required")
        weight = item.get("weight", 1)
        if weight != 1:
            raise PluginArgsError(f"resources[{i}].weight", f"must be 1 for balanced allocation, got {weight!r}")
        names.append(str(item["name"]))
    return BalancedArgs(tuple(names))


class NodeResourcesBalancedAllocation:
    """Scores nodes by how evenly used the pod leaves their resources, against how they were."""

    name = NAME

    def __init__(self, args: BalancedArgs, handle: Handle | None = None) -> None:
        self.args = args
        self._dra = handle.dra if handle is not None else None
        """For resources a DeviceClass serves (DRAExtendedResource)."""
        self._scores_for: Scores = PerNodeByKind()
        """The default path's scores per node, for recent (cpu, memory) requests of incoming pods."""

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Skip (kube's Skip status) for a pod asking for none of the resources: it would go to the same node."""
        if not any(want for _, want in self._amounts(pod)):
            return Status(Code.SKIP)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        amounts = self._amounts(pod)
        if not any(want for _, want in amounts):
            return 0, SUCCESS  # scored without PreScore: kube's Score answers 0 for such a pod
        return self._node_score(node, amounts), SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        """``score`` per node; the default resources (cpu and memory) read NodeInfo's scalar copies."""
        amounts = self._amounts(pod)
        if sorted(self.args.resources) != [CPU, MEMORY] or not any(want for _, want in amounts):
            return [self.score(state, pod, node)[0] for node in nodes], SUCCESS
        want_cpu, want_memory = pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)
        memo = self._scores_for((want_cpu, want_memory))
        scores: list[int] = []
        for node in nodes:
            kept = memo.get(node.name)
            if kept is not None and kept[0] == node.generation:
                scores.append(kept[1])
                continue
            capacity_cpu = node.allocatable_cpu
            capacity_memory = node.allocatable_memory
            if capacity_cpu <= 0 or capacity_memory <= 0:
                score = self._node_score(node, amounts)
            else:
                used_cpu, used_memory = node.requested_cpu, node.requested_memory
                score = _improvement(
                    _even_pair((used_cpu + want_cpu) / capacity_cpu, (used_memory + want_memory) / capacity_memory),
                    _even_pair(used_cpu / capacity_cpu, used_memory / capacity_memory),
                )
            memo[node.name] = (node.generation, score)
            scores.append(score)
        return scores, SUCCESS

    def _amounts(self, pod: PodInfo) -> list[tuple[str, int]]:
        return [(resource, pod.requests.get(resource, 0)) for resource in self.args.resources]

    def _node_score(self, node: NodeInfo, amounts: list[tuple[str, int]]) -> int:
        """kube's calculateNodeAllocatableRequest, then balancedResourceScorer."""
        with_pod: list[float] = []
        without: list[float] = []
        for resource, want in amounts:
            capacity, used = allocatable_and_requested(node, resource, want, node.requested, self._dra)
            if capacity <= 0:
                continue
            with_pod.append(min((used + want) / capacity, 1.0))
            without.append(min(used / capacity, 1.0))
        return _improvement(_evenness(with_pod), _evenness(without))

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        # A score plugin never rejects a pod; registering keeps kube-scheduler's behaviour for
        # pods it is asked about (none in practice).
        return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE))]


def _even_pair(first: float, second: float) -> int:
    """`_evenness` of two fractions, unrolled for the default resources (cpu and memory)."""
    # Plain comparisons, not min(): this runs for every node of every cycle.
    if first > 1.0:  # noqa: PLR1730
        first = 1.0
    if second > 1.0:  # noqa: PLR1730
        second = 1.0
    return int((1 - abs(first - second) / 2) * MAX_NODE_SCORE)


def _evenness(fractions: list[float]) -> int:
    """kube's balancedResourceScore: (1 - the standard deviation of the used fractions) x 100, truncated."""
    if len(fractions) < 2:
        return MAX_NODE_SCORE
    if len(fractions) == 2:
        deviation = abs(fractions[0] - fractions[1]) / 2
    else:
        mean = sum(fractions) / len(fractions)
        deviation = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    return int((1 - deviation) * MAX_NODE_SCORE)


def _improvement(with_pod: int, without: int) -> int:
    """kube's balancedResourceScorer: 50 + (50 + with - without) / 2. Each balance is 50-100 (a deviation of
    fractions in 0..1 is at most 0.5), so the dividend is never negative and // truncates as Go's / does."""
    half = MAX_NODE_SCORE // 2
    return half + (half + with_pod - without) // 2


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation(parse_args(args), handle)


_check: type[BatchScorePlugin] = NodeResourcesBalancedAllocation
