"""PodTopologySpread's hard constraints (``whenUnsatisfiable: DoNotSchedule``): PreFilter and Filter. Pure.

PreFilter walks every node once (O(pods on the nodes) x constraints) and
counts, per constraint and topology domain, the pods of the incoming pod's
namespace that the constraint's selector matches, skipping terminating pods.
A node counts only if it carries every constraint's topology key and passes
the constraint's inclusion policies (nodeAffinityPolicy, nodeTaintsPolicy).
Filter is then O(constraints) per node:

    skew = pods in the node's domain + (1 if the pod matches its own selector) - global minimum
    reject when skew > maxSkew

where the global minimum is the smallest domain count, or 0 while fewer
domains than ``minDomains`` are eligible.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from usher.core.plugins.nodeshares import Entry, NodeShares, by_key, sum_entries
from usher.core.plugins.podtopologyspread.constraints import (
    Constraint,
    Inclusion,
    has_all_topology_keys,
    included,
)
from usher.core.types import SUCCESS, PodInfo, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
_NO_DOMAIN = 2**31 - 1  # kube-scheduler's math.MaxInt32 "no eligible domain yet"
# One Status each for every node that fails alike (Status is immutable; the runtime names it once).
_LABEL_MISSING = unschedulable(ERR_REASON_NODE_LABEL_NOT_MATCH, resolvable=False)
_SKEWED = unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)


@dataclass(slots=True)
class PreFilterState:
    """Matching-pod counts per constraint and domain, computed once per cycle for Filter."""

    constraints: list[Constraint]
    counts: list[dict[str, int]]
    """Per constraint: topology value -> matching pods in that domain (eligible domains only)."""
    min_match: list[int]
    self_match: list[int]
    """Per constraint: 1 if the incoming pod matches its selector (it counts in the domain it lands in)."""

    def clone(self) -> PreFilterState:
        """For a dry run: the counts copied (the constraints are immutable)."""
        return PreFilterState(self.constraints, [dict(c) for c in self.counts], list(self.min_match), self.self_match)

    def update(self, preemptor: PodInfo, other: PodInfo, node: NodeInfo, delta: int) -> None:
        """``other`` is added (+1) or removed (-1) on ``node`` (kube-scheduler's updateWithPod)."""
        if other.namespace != preemptor.namespace or not has_all_topology_keys(node.labels, self.constraints):
            return
        affinity_ok, taints_ok = Inclusion(preemptor, self.constraints).for_node(node)
        for i, constraint in enumerate(self.constraints):
            if not included(constraint, affinity_ok, taints_ok) or not constraint.matches(other.labels):
                continue
            value = node.labels[constraint.topology_key]
            self.counts[i][value] = self.counts[i].get(value, 0) + delta
            self.min_match[i] = min(self.counts[i].values(), default=_NO_DOMAIN)

    def global_min(self, index: int) -> int:
        """The smallest domain count, or 0 while fewer than ``minDomains`` domains are eligible."""
        if len(self.counts[index]) < self.constraints[index].min_domains:
            return 0
        return self.min_match[index]


def compute_pre_filter_state(
    pod: PodInfo, constraints: list[Constraint], nodes: Sequence[NodeInfo], shares: NodeShares | None = None
) -> PreFilterState:
    """``shares``: each node's counts for pods with this ``signature``, kept from earlier cycles; only nodes
    whose generation moved are counted again."""
    inclusion = Inclusion(pod, constraints)
    if shares is None:
        by_constraint = by_key(sum_entries(nodes, lambda node: _node_counts(pod, constraints, inclusion, node)))
    else:
        shares.refresh(nodes, {}, lambda node, _: _node_counts(pod, constraints, inclusion, node))
        by_constraint = shares.by_key()
    counts = [by_constraint.get(str(i), {}) for i in range(len(constraints))]
    min_match = [min(domain.values(), default=_NO_DOMAIN) for domain in counts]
    self_match = [1 if constraint.matches(pod.labels) else 0 for constraint in constraints]
    return PreFilterState(constraints, counts, min_match, self_match)


def _node_counts(pod: PodInfo, constraints: list[Constraint], inclusion: Inclusion, node: NodeInfo) -> list[Entry]:
    """(constraint index, the node's domain, matching pods on the node) for each constraint the node counts
    for (with 0 matches too: the domain is eligible)."""
    if not node.exists:
        return []
    labels = node.labels
    if not has_all_topology_keys(labels, constraints):
        return []
    affinity_ok, taints_ok = inclusion.for_node(node)
    active = [i for i, c in enumerate(constraints) if included(c, affinity_ok, taints_ok)]
    if not active:
        return []
    matched = dict.fromkeys(active, 0)
    wanted = [i for i in active if constraints[i].counts_pods]
    if wanted:
        namespace = pod.namespace
        for other in node.pods.values():
            if other.deleting or other.namespace != namespace:
                continue
            for i in wanted:
                if constraints[i].matches(other.labels):
                    matched[i] += 1
    return [(str(i), labels[constraints[i].topology_key], count) for i, count in matched.items()]


def signature(pod: PodInfo, constraints: Sequence[Constraint]) -> Hashable:
    """What the counts depend on besides the nodes: the namespace, the constraints (matchLabelKeys merged
    into their selectors) and, for the inclusion policies, the pod's required node affinity and tolerations.
    The pod's own labels play no part."""
    spec = pod.raw.get("spec") or {}
    node_affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    inclusion = json.dumps([spec.get("nodeSelector"), node_affinity, spec.get("tolerations")], sort_keys=True)
    parts = tuple(
        (c.topology_key, json.dumps(c.selector, sort_keys=True), c.node_affinity_policy, c.node_taints_policy)
        for c in constraints
    )
    return (pod.namespace, parts, inclusion)


def filter_node(state: PreFilterState, pod: PodInfo, node: NodeInfo) -> Status:
    return filter_nodes(state, (node,))[0] or SUCCESS


def filter_nodes(state: PreFilterState, nodes: Sequence[NodeInfo]) -> list[Status | None]:
    """Per node, None where every constraint's skew stays within maxSkew, else the rejection:

    skew = pods in the node's domain + (1 if the pod matches its own selector) - global minimum
    """
    terms = [
        (c.topology_key, state.counts[i], state.self_match[i] - state.global_min(i), c.max_skew)
        for i, c in enumerate(state.constraints)
    ]
    results: list[Status | None] = []
    for node in nodes:
        labels = node.labels
        result: Status | None = None
        for key, counts, offset, max_skew in terms:
            value = labels.get(key)
            if value is None:
                result = _LABEL_MISSING
                break
            if counts.get(value, 0) + offset > max_skew:
                result = _SKEWED
                break
        results.append(result)
    return results
