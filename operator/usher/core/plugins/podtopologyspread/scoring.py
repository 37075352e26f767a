"""PodTopologySpread's soft constraints (``whenUnsatisfiable: ScheduleAnyway``): PreScore, Score, Normalize. Pure.

kube-scheduler's formula, reproduced exactly:

- PreScore seeds the topology domains of the feasible nodes (a feasible node
  missing a topology key is ignored: it scores 0) and weights each
  constraint by ``ln(number of those domains + 2)`` (for
  ``kubernetes.io/hostname``: the number of scored nodes + 2), so the counts
  of a topology with few domains are not watered down by one with many.
  It then counts matching pods over *all* nodes, for the seeded domains only.
- Score sums, per constraint, ``count in the node's domain x weight +
  (maxSkew - 1)`` and rounds half away from zero; hostname constraints count
  the node's own pods.
- NormalizeScore reverses: ``100 x (max + min - score) / max`` (100 for every
  node when max is 0), so the least loaded domain scores highest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from usher.core.framework.interface import MAX_NODE_SCORE
from usher.core.plugins.podtopologyspread.constraints import (
    LABEL_HOSTNAME,
    Constraint,
    Inclusion,
    count_matching,
    has_all_topology_keys,
    included,
)
from usher.core.types import NodeName, PodInfo

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo


@dataclass(slots=True)
class PreScoreState:
    """Matching-pod counts per constraint and domain, computed once per cycle for Score."""

    constraints: list[Constraint]
    namespace: str
    ignored: set[NodeName]
    """Feasible nodes that miss a topology key: scored 0."""
    counts: list[dict[str, int]]
    """Per constraint: topology value (of a feasible node) -> matching pods; empty for hostname constraints."""
    weights: list[float]


def topology_normalizing_weight(size: int) -> float:
    return math.log(size + 2)


def score_for_count(count: int, max_skew: int, weight: float) -> float:
    return count * weight + (max_skew - 1)


def compute_pre_score_state(
    pod: PodInfo,
    constraints: list[Constraint],
    feasible: Sequence[NodeInfo],
    all_nodes: Sequence[NodeInfo],
    *,
    require_all_topologies: bool,
) -> PreScoreState:
    ignored: set[NodeName] = set()
    counts: list[dict[str, int]] = [{} for _ in constraints]
    for node in feasible:
        if require_all_topologies and not has_all_topology_keys(node.labels, constraints):
            ignored.add(node.name)
            continue
        for i, constraint in enumerate(constraints):
            if constraint.topology_key != LABEL_HOSTNAME:
                counts[i].setdefault(node.labels.get(constraint.topology_key, ""), 0)
    weights = [
        topology_normalizing_weight(
            len(feasible) - len(ignored) if c.topology_key == LABEL_HOSTNAME else len(counts[i])
        )
        for i, c in enumerate(constraints)
    ]
    inclusion = Inclusion(pod, constraints)
    for node in all_nodes:
        if not node.exists:
            continue
        if require_all_topologies and not has_all_topology_keys(node.labels, constraints):
            continue
        affinity_ok, taints_ok = inclusion.for_node(node)
        for i, constraint in enumerate(constraints):
            if not included(constraint, affinity_ok, taints_ok):
                continue
            value = node.labels.get(constraint.topology_key, "")
            if value in counts[i]:  # a domain of some feasible node (never true for hostname constraints)
                counts[i][value] += count_matching(node.pods.values(), constraint, pod.namespace)
    return PreScoreState(constraints, pod.namespace, ignored, counts, weights)


def score_node(state: PreScoreState, node: NodeInfo) -> int:
    if node.name in state.ignored:
        return 0
    total = 0.0
    for i, constraint in enumerate(state.constraints):
        value = node.labels.get(constraint.topology_key)
        if value is None:
            continue
        if constraint.topology_key == LABEL_HOSTNAME:
            count = count_matching(node.pods.values(), constraint, state.namespace)
        else:
            count = state.counts[i].get(value, 0)
        total += score_for_count(count, constraint.max_skew, state.weights[i])
    return math.floor(total + 0.5)  # Go's math.Round: half away from zero (scores are never negative)


def normalize(state: PreScoreState, scores: dict[NodeName, int]) -> None:
    counted = [score for name, score in scores.items() if name not in state.ignored]
    lowest = min(counted, default=0)
    highest = max([0, *counted])
    for name, score in scores.items():
        if name in state.ignored:
            scores[name] = 0
        elif highest == 0:
            scores[name] = MAX_NODE_SCORE
        else:
            scores[name] = MAX_NODE_SCORE * (highest + lowest - score) // highest
