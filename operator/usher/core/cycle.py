"""Schedule one pod: filter every node, score the feasible ones, pick the best.

Pure. The caller owns the cache and the API: it assumes the pod on the chosen
node and binds it. Ties are broken by a seeded random choice, so a run can be
replayed.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from usher.core.cache import NodeInfo
from usher.core.fit import fit_reasons, least_allocated_score
from usher.core.types import NodeName, PodInfo


@dataclass(frozen=True, slots=True)
class Placement:
    """The outcome of one attempt: a node, or why every node was rejected."""

    node: NodeName | None
    node_count: int
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def message(self) -> str:
        """kube-scheduler's shape: ``0/3 nodes are available: 2 Insufficient cpu, 1 Too many pods.``"""
        if self.node is not None:
            return ""
        histogram = sorted(f"{count} {reason}" for reason, count in self.reasons.items())
        if not histogram:
            return f"0/{self.node_count} nodes are available."
        return f"0/{self.node_count} nodes are available: {', '.join(histogram)}."


def schedule(pod: PodInfo, nodes: Sequence[NodeInfo], rng: random.Random) -> Placement:
    reasons: Counter[str] = Counter()
    best: list[NodeName] = []
    best_score = -1
    for node in nodes:
        rejected = fit_reasons(pod, node)
        if rejected:
            reasons.update(rejected)
            continue
        score = least_allocated_score(pod, node)
        if score > best_score:
            best, best_score = [node.name], score
        elif score == best_score:
            best.append(node.name)
    if not best:
        return Placement(node=None, node_count=len(nodes), reasons=reasons)
    return Placement(node=rng.choice(best), node_count=len(nodes))
