"""InterPodAffinity's PreFilter and Filter: counts per topology pair, computed once per cycle. Pure.

PreFilter walks the cluster once and counts, per ``(topologyKey, value)``:

- existing pods whose required anti-affinity terms match the incoming pod
  (only nodes and pods flagged as having required anti-affinity are visited);
- existing pods matching *all* of the incoming pod's required affinity terms
  (counted once per term's topology pair of the pod's node);
- existing pods matching each of the incoming pod's required anti-affinity terms.

Filter then answers per node in O(terms) with dictionary lookups, in
kube-scheduler's order and with its reasons and codes:

1. affinity: every term's topology key must be on the node and its domain
   must hold a matching pod, unless no pod anywhere matches and the pod
   matches its own terms (the first pod of a group) ->
   UnschedulableAndUnresolvable "node(s) didn't match pod affinity rules";
2. the incoming pod's anti-affinity -> Unschedulable
   "node(s) didn't match pod anti-affinity rules";
3. existing pods' anti-affinity (symmetry) -> Unschedulable
   "node(s) didn't satisfy existing pods anti-affinity rules".
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from usher.core.cache import nodes_with_required_anti_affinity_pods
from usher.core.plugins.interpodaffinity.terms import (
    AffinityTerm,
    NamespaceLabelsOf,
    PodTerms,
    TermsCache,
    matches_all,
    terms_signature,
)
from usher.core.plugins.nodeshares import Entry, NodeShares, sum_entries
from usher.core.types import SUCCESS, PodInfo, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo

AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"

TopologyPair = tuple[str, str]


@dataclass(slots=True)
class PreFilterState:
    """Per-topology-pair counts of matching pods, computed once per cycle for Filter."""

    terms: PodTerms
    affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    """Pods matching all the incoming pod's required affinity terms, per topology pair."""
    anti_affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    """Pods matching one of the incoming pod's required anti-affinity terms, per topology pair."""
    existing_anti_affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    """Existing pods' required anti-affinity terms matching the incoming pod, per topology pair."""
    existing_anti_affinity_keys: frozenset[str] = frozenset()
    matches_own_affinity: bool = False
    """The incoming pod matches all its own required affinity terms (first pod of a group)."""

    @property
    def has_work(self) -> bool:
        return self.terms.has_required or bool(self.existing_anti_affinity_counts)

    def clone(self) -> PreFilterState:
        """For a dry run (preemption, nominated pods): the counts copied, the terms shared."""
        return PreFilterState(
            terms=self.terms,
            affinity_counts=dict(self.affinity_counts),
            anti_affinity_counts=dict(self.anti_affinity_counts),
            existing_anti_affinity_counts=dict(self.existing_anti_affinity_counts),
            existing_anti_affinity_keys=self.existing_anti_affinity_keys,
            matches_own_affinity=self.matches_own_affinity,
        )

    def update(
        self,
        pod: PodInfo,
        other: PodInfo,
        node: NodeInfo,
        delta: int,
        cache: TermsCache,
        ns_labels_of: NamespaceLabelsOf,
    ) -> None:
        """``other`` is added (+1) or removed (-1) on ``node`` (kube-scheduler's updateWithPod)."""
        labels = node.labels
        if other.has_required_anti_affinity:
            pod_ns_labels = ns_labels_of(pod.namespace) or {}
            for term in cache.get(other).required_anti_affinity:
                if term.matches_pod(pod, lambda _: pod_ns_labels):
                    _add(self.existing_anti_affinity_counts, labels, term.topology_key, delta)
                    if delta > 0 and term.topology_key not in self.existing_anti_affinity_keys:
                        self.existing_anti_affinity_keys = self.existing_anti_affinity_keys | {term.topology_key}
        affinity = self.terms.required_affinity
        if affinity and all(t.matches(other.namespace, other.labels, ns_labels_of) for t in affinity):
            for term in affinity:
                _add(self.affinity_counts, labels, term.topology_key, delta)
        for term in self.terms.required_anti_affinity:
            if term.matches(other.namespace, other.labels, ns_labels_of):
                _add(self.anti_affinity_counts, labels, term.topology_key, delta)


def _add(counts: dict[TopologyPair, int], labels: Mapping[str, str], key: str, delta: int) -> None:
    """Change a pair's count; a pair at zero is dropped (an empty dict means "no pod matches anywhere")."""
    value = labels.get(key)
    if value is None:
        return
    pair = (key, value)
    left = counts.get(pair, 0) + delta
    if left > 0:
        counts[pair] = left
    else:
        counts.pop(pair, None)


def _count(counts: dict[TopologyPair, int], labels: Mapping[str, str], key: str) -> None:
    value = labels.get(key)
    if value is not None:
        pair = (key, value)
        counts[pair] = counts.get(pair, 0) + 1


def existing_anti_affinity_counts(
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    cache: TermsCache,
    pod_ns_labels: Mapping[str, str],
    shares: NodeShares | None = None,
) -> dict[TopologyPair, int]:
    """Topology pairs where an existing pod's required anti-affinity rejects ``pod``.

    ``shares``: each node's pairs for pods in this namespace (with these namespace labels), kept from earlier
    cycles (``existing_signature``); only nodes whose generation moved are walked again, and all of them when
    the pod's labels differ on a key those terms read."""
    visited = nodes_with_required_anti_affinity_pods(nodes)
    if shares is None:
        return sum_entries(visited, lambda node: _existing_entries(pod, node, cache, pod_ns_labels))
    shares.refresh(visited, pod.labels, lambda node, read: _existing_entries(pod, node, cache, pod_ns_labels, read))
    return shares.by_pair()


def _existing_entries(
    pod: PodInfo, node: NodeInfo, cache: TermsCache, pod_ns_labels: Mapping[str, str], read: set[str] | None = None
) -> list[Entry]:
    """(topologyKey, the node's value, 1) per required anti-affinity term of a pod on ``node`` that matches
    ``pod``; ``read`` collects the label keys of ``pod`` those terms looked at."""

    def ns_labels_of(_: str) -> Mapping[str, str]:
        return pod_ns_labels

    labels = node.labels
    entries: list[Entry] = []
    for existing in node.pods.values():
        if not existing.has_required_anti_affinity:
            continue
        theirs = cache.get(existing)
        if read is not None:
            read.update(theirs.selector_keys)
        for term in theirs.required_anti_affinity:
            if term.matches_pod(pod, ns_labels_of):
                value = labels.get(term.topology_key)
                if value is not None:
                    entries.append((term.topology_key, value, 1))
    return entries


def existing_signature(pod: PodInfo, pod_ns_labels: Mapping[str, str]) -> Hashable:
    """What the existing pods' anti-affinity counts depend on besides the nodes and the pod's labels (which
    ``NodeShares`` handles): the pod's namespace and that namespace's labels."""
    return ("existing-anti", pod.namespace, tuple(sorted(pod_ns_labels.items())))


def incoming_counts(
    affinity: tuple[AffinityTerm, ...],
    anti_affinity: tuple[AffinityTerm, ...],
    nodes: Sequence[NodeInfo],
    ns_labels_of: NamespaceLabelsOf,
) -> tuple[dict[TopologyPair, int], dict[TopologyPair, int]]:
    """(affinity counts, anti-affinity counts) of existing pods against the incoming pod's required terms."""
    affinity_counts: dict[TopologyPair, int] = {}
    anti_counts: dict[TopologyPair, int] = {}
    if not affinity and not anti_affinity:
        return affinity_counts, anti_counts
    for node in nodes:
        labels = node.labels
        for existing in node.pods.values():
            namespace, pod_labels = existing.namespace, existing.labels
            if affinity:
                for term in affinity:
                    if not term.matches(namespace, pod_labels, ns_labels_of):
                        break
                else:  # one pod matching every term counts in each term's domain
                    for term in affinity:
                        _count(affinity_counts, labels, term.topology_key)
            for term in anti_affinity:
                if term.matches(namespace, pod_labels, ns_labels_of):
                    _count(anti_counts, labels, term.topology_key)
    return affinity_counts, anti_counts


def compute_state(
    pod: PodInfo,
    terms: PodTerms,
    nodes: Sequence[NodeInfo],
    cache: TermsCache,
    ns_labels_of: NamespaceLabelsOf,
    shares: tuple[NodeShares, NodeShares] | None = None,
    existing_shares: NodeShares | None = None,
) -> PreFilterState:
    """Everything Filter needs, in one walk over the cluster's pods (O(total pods)).

    ``shares`` (affinity, anti-affinity): each node's counts for pods with these required terms, kept from
    earlier cycles (``signature``); only nodes whose generation moved are walked again. ``existing_shares``:
    the same for existing pods' anti-affinity (``existing_signature``)."""
    pod_ns_labels = ns_labels_of(pod.namespace) or {}
    existing = existing_anti_affinity_counts(pod, nodes, cache, pod_ns_labels, existing_shares)
    required, required_anti = terms.required_affinity, terms.required_anti_affinity
    if shares is None or not (required or required_anti):
        affinity, anti = incoming_counts(required, required_anti, nodes, ns_labels_of)
    else:
        kept_affinity, kept_anti = shares

        def affinity_entries(node: NodeInfo, _: set[str]) -> list[Entry]:
            counts, _anti = incoming_counts(required, (), [node], ns_labels_of)
            return [(key, value, n) for (key, value), n in counts.items()]

        def anti_entries(node: NodeInfo, _: set[str]) -> list[Entry]:
            _affinity, counts = incoming_counts((), required_anti, [node], ns_labels_of)
            return [(key, value, n) for (key, value), n in counts.items()]

        # The incoming pod's own labels play no part in these counts (only its terms, in the signature).
        kept_affinity.refresh(nodes, {}, affinity_entries)
        kept_anti.refresh(nodes, {}, anti_entries)
        affinity, anti = kept_affinity.by_pair(), kept_anti.by_pair()
    return PreFilterState(
        terms=terms,
        affinity_counts=affinity,
        anti_affinity_counts=anti,
        existing_anti_affinity_counts=existing,
        existing_anti_affinity_keys=frozenset(key for key, _ in existing),
        matches_own_affinity=matches_all(terms.required_affinity, pod, ns_labels_of),
    )


def signature(pod: PodInfo, terms: PodTerms, namespaces: int | None = None) -> Hashable | None:
    """What the incoming pod's required-term counts depend on besides the nodes: pods with equal signatures
    share their ``NodeShares`` (None: not kept; ``namespaces``: the namespace generation, see
    ``terms_signature``)."""
    affinity = terms_signature(terms.required_affinity, namespaces)
    anti = terms_signature(terms.required_anti_affinity, namespaces)
    if affinity is None or anti is None:
        return None
    return ("filter", pod.namespace, affinity, anti)


def satisfies_affinity(state: PreFilterState, labels: Mapping[str, str]) -> bool:
    terms = state.terms.required_affinity
    if not terms:
        return True
    pods_exist = True
    for term in terms:
        value = labels.get(term.topology_key)
        if value is None:
            return False  # every topology key must be on the node, also for the first pod of a group
        if state.affinity_counts.get((term.topology_key, value), 0) <= 0:
            pods_exist = False
    if pods_exist:
        return True
    # The first pod of a group with affinity to itself: no pod anywhere matches yet.
    return not state.affinity_counts and state.matches_own_affinity


def violates_anti_affinity(state: PreFilterState, labels: Mapping[str, str]) -> bool:
    counts = state.anti_affinity_counts
    if not counts:
        return False
    for term in state.terms.required_anti_affinity:
        value = labels.get(term.topology_key)
        if value is not None and counts.get((term.topology_key, value), 0) > 0:
            return True
    return False


def violates_existing_anti_affinity(state: PreFilterState, labels: Mapping[str, str]) -> bool:
    counts = state.existing_anti_affinity_counts
    if not counts:
        return False
    for key in state.existing_anti_affinity_keys:
        value = labels.get(key)
        if value is not None and counts.get((key, value), 0) > 0:
            return True
    return False


# One Status each for every node that fails alike (Status is immutable; the runtime names it once).
_AFFINITY_REJECTION = unschedulable(AFFINITY_RULES_NOT_MATCH, resolvable=False)
_ANTI_AFFINITY_REJECTION = unschedulable(ANTI_AFFINITY_RULES_NOT_MATCH)
_EXISTING_ANTI_AFFINITY_REJECTION = unschedulable(EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH)


def filter_nodes(state: PreFilterState, nodes: Sequence[NodeInfo]) -> list[Status | None]:
    """``filter_node`` over ``nodes``, None for a node that passes. Without required affinity terms (the
    common case: anti-affinity, of the pod or of the pods already placed) each node costs a label and a
    count lookup per topology key, not three calls. Nothing is prepared per call: the runtime filters a
    cycle's nodes in chunks."""
    if state.terms.required_affinity:
        return [None if status is SUCCESS else status for status in map(partial(filter_node, state), nodes)]
    checks = [
        (
            state.anti_affinity_counts,
            [term.topology_key for term in state.terms.required_anti_affinity],
            _ANTI_AFFINITY_REJECTION,
        ),
        (state.existing_anti_affinity_counts, state.existing_anti_affinity_keys, _EXISTING_ANTI_AFFINITY_REJECTION),
    ]
    checks = [(counts, keys, rejection) for counts, keys, rejection in checks if counts and keys]
    results: list[Status | None] = []
    for node in nodes:
        labels = node.labels
        verdict: Status | None = None
        for counts, keys, rejection in checks:
            for key in keys:
                value = labels.get(key)
                if value is not None and counts.get((key, value), 0) > 0:
                    verdict = rejection
                    break
            if verdict is not None:
                break
        results.append(verdict)
    return results


def filter_node(state: PreFilterState, node: NodeInfo) -> Status:
    labels = node.labels
    if not satisfies_affinity(state, labels):
        return _AFFINITY_REJECTION
    if violates_anti_affinity(state, labels):
        return _ANTI_AFFINITY_REJECTION
    if violates_existing_anti_affinity(state, labels):
        return _EXISTING_ANTI_AFFINITY_REJECTION
    return SUCCESS
