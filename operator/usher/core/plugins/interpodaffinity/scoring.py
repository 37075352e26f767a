"""InterPodAffinity's PreScore, Score and NormalizeScore: weights summed per topology domain. Pure.

PreScore walks the existing pods of the whole cluster (not only the feasible
nodes: a pod on an infeasible node still counts for its zone) and adds, per
``(topologyKey, value)`` of the existing pod's node:

- +weight / -weight for each preferred affinity / anti-affinity term of the
  incoming pod the existing pod matches;
- +hardPodAffinityWeight for each required affinity term of the existing pod
  the incoming pod matches (when the weight is above 0);
- +weight / -weight for each preferred affinity / anti-affinity term of the
  existing pod the incoming pod matches.

When the incoming pod has no preferred terms only pods with affinity are
visited, and with ``ignorePreferredTermsOfExistingPods`` the plugin skips
scoring altogether. A node scores the sum of the domains it is in;
NormalizeScore maps [min, max] over the scored nodes onto [0, 100]
(truncating, as kube-scheduler does), all 0 when they are equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from usher.core.cache import nodes_with_affinity_pods
from usher.core.framework.interface import MAX_NODE_SCORE
from usher.core.plugins.interpodaffinity.terms import NamespaceLabelsOf, PodTerms, TermsCache
from usher.core.types import NodeName, PodInfo

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo


@dataclass(slots=True)
class PreScoreState:
    """Per-topology-pair score contributions, computed once per cycle for Score."""

    topology_score: dict[str, dict[str, int]] = field(default_factory=dict)
    """topologyKey -> value -> summed weight."""


def _add(scores: dict[str, dict[str, int]], labels: Mapping[str, str], key: str, weight: int) -> bool:
    value = labels.get(key)
    if value is None:
        return False
    domain = scores.setdefault(key, {})
    domain[value] = domain.get(value, 0) + weight
    return True


def topology_scores(
    pod: PodInfo,
    terms: PodTerms,
    nodes: Sequence[NodeInfo],
    cache: TermsCache,
    ns_labels_of: NamespaceLabelsOf,
    *,
    hard_pod_affinity_weight: int,
) -> PreScoreState | None:
    """The per-domain sums, or None when no existing pod contributed anything (kube's Skip)."""
    has_constraints = terms.has_preferred
    pod_ns_labels = ns_labels_of(pod.namespace) or {}

    def incoming_ns_labels(_: str) -> Mapping[str, str]:
        return pod_ns_labels

    scores: dict[str, dict[str, int]] = {}
    contributed = False
    # Without preferred terms of its own, only nodes holding pods with terms can add anything.
    for node in nodes if has_constraints else nodes_with_affinity_pods(nodes):
        labels = node.labels
        if not labels:
            continue
        for existing in node.pods.values():
            if has_constraints:
                for weighted in terms.preferred_affinity:
                    if weighted.term.matches_pod(existing, ns_labels_of):
                        contributed |= _add(scores, labels, weighted.term.topology_key, weighted.weight)
                for weighted in terms.preferred_anti_affinity:
                    if weighted.term.matches_pod(existing, ns_labels_of):
                        contributed |= _add(scores, labels, weighted.term.topology_key, -weighted.weight)
            if not existing.has_pod_affinity:
                continue
            theirs = cache.get(existing)
            if hard_pod_affinity_weight > 0:
                for term in theirs.required_affinity:
                    if term.matches_pod(pod, incoming_ns_labels):
                        contributed |= _add(scores, labels, term.topology_key, hard_pod_affinity_weight)
            for weighted in theirs.preferred_affinity:
                if weighted.term.matches_pod(pod, incoming_ns_labels):
                    contributed |= _add(scores, labels, weighted.term.topology_key, weighted.weight)
            for weighted in theirs.preferred_anti_affinity:
                if weighted.term.matches_pod(pod, incoming_ns_labels):
                    contributed |= _add(scores, labels, weighted.term.topology_key, -weighted.weight)
    return PreScoreState(scores) if contributed else None


def score_node(state: PreScoreState, node: NodeInfo) -> int:
    """The sum over the node's domains: positive for affinity, negative for anti-affinity."""
    labels = node.labels
    total = 0
    for key, values in state.topology_score.items():
        value = labels.get(key)
        if value is not None:
            total += values.get(value, 0)
    return total


def normalize(state: PreScoreState, scores: dict[NodeName, int]) -> None:
    """[min, max] -> [0, 100] in place, truncating; all 0 when min == max."""
    if not state.topology_score or not scores:
        return
    low = min(scores.values())
    high = max(scores.values())
    spread = high - low
    for name, value in scores.items():
        scores[name] = int(float(MAX_NODE_SCORE) * (float(value - low) / float(spread))) if spread > 0 else 0
