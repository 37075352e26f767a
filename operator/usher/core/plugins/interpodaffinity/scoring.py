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

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from usher.core.cache import nodes_with_affinity_pods
from usher.core.framework.interface import MAX_NODE_SCORE
from usher.core.plugins.interpodaffinity.terms import NamespaceLabelsOf, PodTerms, TermsCache, terms_signature
from usher.core.plugins.nodeshares import Entry, NodeShares, by_key, sum_entries
from usher.core.types import PodInfo

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo


@dataclass(slots=True)
class PreScoreState:
    """Per-topology-pair score contributions, computed once per cycle for Score."""

    topology_score: dict[str, dict[str, int]] = field(default_factory=dict)
    """topologyKey -> value -> summed weight."""


def topology_scores(
    pod: PodInfo,
    terms: PodTerms,
    nodes: Sequence[NodeInfo],
    cache: TermsCache,
    ns_labels_of: NamespaceLabelsOf,
    *,
    hard_pod_affinity_weight: int,
    shares: NodeShares | None = None,
) -> PreScoreState | None:
    """The per-domain sums, or None when no existing pod contributed anything (kube's Skip).

    ``shares``: what each node added for pods asking as this one does, kept from earlier cycles; only the
    nodes that changed since (another generation) are walked again."""
    has_constraints = terms.has_preferred
    pod_ns_labels = ns_labels_of(pod.namespace) or {}

    def entries_of(node: NodeInfo, read: set[str] | None = None) -> list[Entry]:
        return _node_entries(pod, terms, node, cache, ns_labels_of, pod_ns_labels, hard_pod_affinity_weight, read)

    # Without preferred terms of its own, only nodes holding pods with terms can add anything.
    visited = nodes if has_constraints else nodes_with_affinity_pods(nodes)
    if shares is None:
        sums = by_key(sum_entries(visited, entries_of))
    else:
        shares.refresh(visited, pod.labels, entries_of)
        sums = shares.by_key()
    return PreScoreState(sums) if sums else None


def _node_entries(
    pod: PodInfo,
    terms: PodTerms,
    node: NodeInfo,
    cache: TermsCache,
    ns_labels_of: NamespaceLabelsOf,
    pod_ns_labels: Mapping[str, str],
    hard_pod_affinity_weight: int,
    read: set[str] | None = None,
) -> list[Entry]:
    """What ``node``'s pods add to the incoming pod's domains (none for a node without labels).

    ``read`` collects the label keys of the incoming pod that the existing pods' terms looked at."""
    labels = node.labels
    if not labels:
        return []
    has_constraints = terms.has_preferred

    def incoming_ns_labels(_: str) -> Mapping[str, str]:
        return pod_ns_labels

    entries: list[Entry] = []

    def add(key: str, weight: int) -> None:
        value = labels.get(key)
        if value is not None:
            entries.append((key, value, weight))

    for existing in node.pods.values():
        if has_constraints:
            for sign, group in ((1, terms.preferred_affinity), (-1, terms.preferred_anti_affinity)):
                for weighted in group:
                    if weighted.term.matches_pod(existing, ns_labels_of):
                        add(weighted.term.topology_key, sign * weighted.weight)
        if not existing.has_pod_affinity:
            continue
        theirs = cache.get(existing)
        if read is not None:
            read.update(theirs.selector_keys)
        if hard_pod_affinity_weight > 0:
            for term in theirs.required_affinity:
                if term.matches_pod(pod, incoming_ns_labels):
                    add(term.topology_key, hard_pod_affinity_weight)
        for sign, group in ((1, theirs.preferred_affinity), (-1, theirs.preferred_anti_affinity)):
            for weighted in group:
                if weighted.term.matches_pod(pod, incoming_ns_labels):
                    add(weighted.term.topology_key, sign * weighted.weight)
    return entries


def signature(
    pod: PodInfo, terms: PodTerms, pod_ns_labels: Mapping[str, str], namespaces: int | None = None
) -> Hashable | None:
    """What ``topology_scores`` depends on besides the nodes and the pod's labels: pods with equal signatures
    share ``NodeShares`` (which handles the labels, see there). None when one of the pod's preferred terms
    selects namespaces by their labels and no namespace generation (``namespaces``) is given (see
    ``terms_signature``)."""
    preferred = terms_signature(
        (*(w.term for w in terms.preferred_affinity), *(w.term for w in terms.preferred_anti_affinity)), namespaces
    )
    if preferred is None:
        return None
    weights = tuple(w.weight for w in terms.preferred_affinity), tuple(w.weight for w in terms.preferred_anti_affinity)
    return ("score", pod.namespace, tuple(sorted(pod_ns_labels.items())), weights, preferred)


def score_node(state: PreScoreState, node: NodeInfo) -> int:
    """The sum over the node's domains: positive for affinity, negative for anti-affinity."""
    labels = node.labels
    total = 0
    for key, values in state.topology_score.items():
        value = labels.get(key)
        if value is not None:
            total += values.get(value, 0)
    return total


def score_nodes(state: PreScoreState, nodes: Sequence[NodeInfo]) -> list[int]:
    """``score_node`` for each of ``nodes``, in order. Most pods' terms name one topology key (scheduler_perf's
    all do): then each node's score is one lookup of its label's value, in a comprehension."""
    if len(state.topology_score) != 1:
        return [score_node(state, node) for node in nodes]
    [(key, values)] = state.topology_score.items()
    get = values.get
    return [get(node.labels.get(key), 0) for node in nodes]  # type: ignore[arg-type]  # None is no value: 0


def normalize(state: PreScoreState, scores: list[int]) -> None:
    """[min, max] -> [0, 100] in place, truncating; all 0 when min == max."""
    if not state.topology_score or not scores:
        return
    low = min(scores)
    spread = max(scores) - low
    if spread > 0:
        scores[:] = [int(float(MAX_NODE_SCORE) * (float(value - low) / float(spread))) for value in scores]
    else:
        scores[:] = [0] * len(scores)
