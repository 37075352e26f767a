"""PodTopologySpread's soft constraints (``whenUnsatisfiable: ScheduleAnyway``): PreScore, Score, Normalize. Pure.

kube-scheduler's formula, reproduced exactly:

- PreScore seeds the topology domains of the feasible nodes (a feasible node
  missing a topology key is ignored: it scores 0) and weights each
  constraint by ``ln(number of those domains + 2)`` (for
  ``kubernetes.io/hostname``: the number of scored nodes + 2), so the counts
  of a topology with few domains are not watered down by one with many.
  It then counts matching pods over *all* nodes, for the seeded domains only
  (each node's counts kept across cycles for pods that ask alike: ``NodeShares``).
- Score sums, per constraint, ``count in the node's domain x weight +
  (maxSkew - 1)`` and rounds half away from zero; hostname constraints count
  the node's own pods (each node's count kept across cycles, with its
  generation, for pods that ask alike: ``HostCounts``).
- NormalizeScore reverses: ``100 x (max + min - score) / max`` (100 for every
  node when max is 0), so the least loaded domain scores highest.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from usher.core.framework.interface import MAX_NODE_SCORE
from usher.core.plugins.nodeshares import Entry, NodeShares, by_key, sum_entries
from usher.core.plugins.podtopologyspread.constraints import (
    LABEL_HOSTNAME,
    Constraint,
    Inclusion,
    count_matching,
    has_all_topology_keys,
    included,
)
from usher.core.plugins.podtopologyspread.filtering import signature as filter_signature
from usher.core.types import NodeName, PodInfo

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo


HostCounts = dict[NodeName, tuple[int, tuple[int, ...]]]
"""node -> (its generation, its matching pods per constraint, 0 for all but hostname ones), valid while the
generation holds."""


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
    hosts: HostCounts = field(default_factory=dict)
    """Kept across cycles for pods with this signature: each node's own matching pods per hostname constraint
    (Score fills it in as it meets nodes)."""
    host_constraints: tuple[int, ...] = ()
    """Indices of the hostname constraints (Score counts them on the node)."""


MAX_STALE_HOSTS = 1024
"""Entries of nodes no longer there that ``HostCounts`` may hold before it is emptied."""


def topology_normalizing_weight(size: int) -> float:
    return math.log(size + 2)


def compute_pre_score_state(
    pod: PodInfo,
    constraints: list[Constraint],
    feasible: Sequence[NodeInfo],
    all_nodes: Sequence[NodeInfo],
    *,
    require_all_topologies: bool,
    shares: NodeShares | None = None,
    hosts: HostCounts | None = None,
) -> PreScoreState:
    """``shares``: each node's counts for pods with this ``signature``, kept from earlier cycles; only nodes
    whose generation moved are counted again. ``hosts``: the same for hostname constraints (Score fills it)."""
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

    def entries_of(node: NodeInfo) -> list[Entry]:
        return _node_counts(pod, constraints, inclusion, node, require_all_topologies)

    if shares is None:
        by_constraint = by_key(sum_entries(all_nodes, entries_of))
    else:
        shares.refresh(all_nodes, {}, lambda node, _: entries_of(node))
        by_constraint = shares.by_key()
    for i, domain in enumerate(counts):
        kept = by_constraint.get(str(i))
        if kept:
            for value in domain:  # the domains of feasible nodes (none for hostname constraints)
                domain[value] = kept.get(value, 0)
    if hosts is None:
        hosts = {}
    elif len(hosts) > 2 * len(all_nodes) + MAX_STALE_HOSTS:  # nodes came and went: forget the gone ones
        hosts.clear()
    host_constraints = tuple(i for i, c in enumerate(constraints) if c.topology_key == LABEL_HOSTNAME)
    return PreScoreState(constraints, pod.namespace, ignored, counts, weights, hosts, host_constraints)


def _node_counts(
    pod: PodInfo, constraints: list[Constraint], inclusion: Inclusion, node: NodeInfo, require_all_topologies: bool
) -> list[Entry]:
    """(constraint index, the node's domain, matching pods on the node) for each non-hostname constraint the
    node counts for with at least one match (hostname constraints are counted by Score, per node)."""
    if not node.exists:
        return []
    labels = node.labels
    if require_all_topologies and not has_all_topology_keys(labels, constraints):
        return []
    affinity_ok, taints_ok = inclusion.for_node(node)
    out: list[Entry] = []
    for i, constraint in enumerate(constraints):
        if constraint.topology_key == LABEL_HOSTNAME or not included(constraint, affinity_ok, taints_ok):
            continue
        count = count_matching(node.pods.values(), constraint, pod.namespace)
        if count:
            out.append((str(i), labels.get(constraint.topology_key, ""), count))
    return out


def signature(pod: PodInfo, constraints: Sequence[Constraint], require_all_topologies: bool) -> Hashable:
    """What the counts depend on besides the nodes: PreFilter's signature, and whether nodes missing a
    topology key count."""
    return (require_all_topologies, filter_signature(pod, constraints))


def score_node(state: PreScoreState, node: NodeInfo) -> int:
    return score_nodes(state, (node,))[0]


def score_nodes(state: PreScoreState, nodes: Sequence[NodeInfo]) -> list[int]:
    """Each node's raw score: per constraint with the node in one of its domains, ``count x weight +
    (maxSkew - 1)``, summed and rounded half away from zero (Go's math.Round; scores are never negative)."""
    ignored, host_constraints = state.ignored, state.host_constraints
    terms = [
        (c.topology_key, c.topology_key == LABEL_HOSTNAME, i, state.counts[i], state.weights[i], c.max_skew - 1)
        for i, c in enumerate(state.constraints)
    ]
    floor = math.floor
    scores: list[int] = []
    for node in nodes:
        if node.name in ignored:
            scores.append(0)
            continue
        on_host = _host_counts(state, node) if host_constraints else ()
        labels = node.labels
        total = 0.0
        for key, on_hostname, i, counts, weight, skew in terms:
            value = labels.get(key)
            if value is not None:
                total += (on_host[i] if on_hostname else counts.get(value, 0)) * weight + skew
        scores.append(floor(total + 0.5))
    return scores


def _host_counts(state: PreScoreState, node: NodeInfo) -> tuple[int, ...]:
    """The node's own matching pods per constraint (0 for all but hostname ones), kept while the node's
    generation holds."""
    kept = state.hosts.get(node.name)
    if kept is not None and kept[0] == node.generation:
        return kept[1]
    counts = [0] * len(state.constraints)
    for i in state.host_constraints:
        counts[i] = count_matching(node.pods.values(), state.constraints[i], state.namespace)
    kept = state.hosts[node.name] = (node.generation, tuple(counts))
    return kept[1]


def normalize(state: PreScoreState, names: Sequence[NodeName], scores: list[int]) -> None:
    """kube-scheduler's NormalizeScore, in place (``names[i]`` scored ``scores[i]``): fewer matching pods
    score higher; the nodes PreScore left out (``ignored``) score 0."""
    ignored = state.ignored
    counted = [s for name, s in zip(names, scores, strict=True) if name not in ignored] if ignored else scores
    lowest = min(counted, default=0)
    highest = max([0, *counted])
    if highest == 0:
        scaled = [MAX_NODE_SCORE] * len(scores)
    else:
        top = highest + lowest
        scaled = [MAX_NODE_SCORE * (top - score) // highest for score in scores]
    scores[:] = [0 if name in ignored else v for name, v in zip(names, scaled, strict=True)] if ignored else scaled
