"""NodeResourcesBalancedAllocation: prefer nodes whose resources stay evenly used. Pure.

Score = (1 - standard deviation of the requested/allocatable fractions) * 100
over the configured resources (cpu and memory by default), with the pod
placed on the node, as kube-scheduler computes it: a node left with all its
cpu taken but its memory free is a poor fit for the next pod of either kind.
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
from usher.core.plugins.noderesources.fit import Scores
from usher.core.plugins.nodeshares import PerNodeByKind
from usher.core.resources import CPU, MEMORY
from usher.core.types import SUCCESS, PodInfo, Status

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
    """Scores nodes whose resource use stays balanced across resources with the pod on them."""

    name = NAME

    def __init__(self, args: BalancedArgs) -> None:
        self.args = args
        self._scores_for: Scores = PerNodeByKind()
        """The default path's scores per node, for recent (cpu, memory) requests of incoming pods."""

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        return _node_score(node, self._amounts(pod)), SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        """``score`` per node; the default resources (cpu and memory) read NodeInfo's scalar copies."""
        amounts = self._amounts(pod)
        if sorted(self.args.resources) != [CPU, MEMORY]:
            return [_node_score(node, amounts) for node in nodes], SUCCESS
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
                score = _node_score(node, amounts)
            else:
                used_first = (node.requested_cpu + want_cpu) / capacity_cpu
                used_second = (node.requested_memory + want_memory) / capacity_memory
                # Plain comparisons, not min(): this loop runs for every node of every cycle.
                if used_first > 1.0:  # noqa: PLR1730
                    used_first = 1.0
                if used_second > 1.0:  # noqa: PLR1730
                    used_second = 1.0
                score = int((1 - abs(used_first - used_second) / 2) * MAX_NODE_SCORE)
            memo[node.name] = (node.generation, score)
            scores.append(score)
        return scores, SUCCESS

    def _amounts(self, pod: PodInfo) -> list[tuple[str, int]]:
        return [(resource, pod.requests.get(resource, 0)) for resource in self.args.resources]

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        # A score plugin never rejects a pod; registering keeps kube-scheduler's behaviour for
        # pods it is asked about (none in practice).
        return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE))]


def _node_score(node: NodeInfo, amounts: list[tuple[str, int]]) -> int:
    """(1 - standard deviation of the used fractions) x 100, over resources the node has."""
    fractions: list[float] = []
    for resource, amount in amounts:
        capacity = node.allocatable.get(resource, 0)
        if capacity > 0:
            fractions.append(min((node.requested.get(resource, 0) + amount) / capacity, 1.0))
    if len(fractions) < 2:
        return MAX_NODE_SCORE
    if len(fractions) == 2:
        deviation = abs(fractions[0] - fractions[1]) / 2
    else:
        mean = sum(fractions) / len(fractions)
        deviation = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - deviation) * MAX_NODE_SCORE)


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesBalancedAllocation:
    return NodeResourcesBalancedAllocation(parse_args(args))


_check: type[BatchScorePlugin] = NodeResourcesBalancedAllocation
