"""InterPodAffinity: place pods near, or away from, pods they name by labels. Pure.

What: a filter for required pod affinity and anti-affinity (the incoming
pod's, and existing pods' anti-affinity against it), and a score for
preferred terms (the incoming pod's and existing pods') plus existing pods'
required affinity weighted by ``hardPodAffinityWeight``, per topology domain
(``topologyKey``: a node, a zone ...). Why: kube-scheduler's default plugin of
the same name, with its semantics, reasons, codes and QueueingHints, so
workloads written for it place the same way. See ``filtering`` and
``scoring`` for the algorithms, ``hints`` for requeueing, README.md for the
differences from kube-scheduler.

PreFilter counts matching pods per topology pair once per cycle (O(pods in
the cluster), O(pods on nodes with anti-affinity pods) when the incoming pod
has no required terms of its own); Filter is then O(terms) per node. It
skips itself when neither side has anything to enforce.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.framework.interface import (
    BatchFilterPlugin,
    BatchScoreNormalizer,
    BatchScorePlugin,
    EnqueueExtensions,
    Handle,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
)
from usher.core.framework.names import INTER_POD_AFFINITY
from usher.core.framework.scoring import normalize_mapping
from usher.core.hints import ClusterEventWithHint
from usher.core.plugins.interpodaffinity.filtering import (
    AFFINITY_RULES_NOT_MATCH,
    ANTI_AFFINITY_RULES_NOT_MATCH,
    EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    PreFilterState,
    compute_state,
    existing_signature,
    filter_node,
    filter_nodes,
)
from usher.core.plugins.interpodaffinity.filtering import signature as filter_signature
from usher.core.plugins.interpodaffinity.hints import assigned_pod_changed, node_changed, own_labels_changed
from usher.core.plugins.interpodaffinity.scoring import (
    PreScoreState,
    normalize,
    score_node,
    score_nodes,
    topology_scores,
)
from usher.core.plugins.interpodaffinity.scoring import signature as score_signature
from usher.core.plugins.interpodaffinity.terms import NamespaceLabelsCache, TermsCache
from usher.core.plugins.nodeshares import ByKind, NodeShares
from usher.core.selectors import SelectorError
from usher.core.types import SUCCESS, Code, NodeName, PodInfo, Status, error, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = INTER_POD_AFFINITY
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
ALL_NODES_KEY = NAME + "/allNodes"
"""PreFilter's view of every node, kept for PreScore (which is handed only the feasible ones)."""

DEFAULT_HARD_POD_AFFINITY_WEIGHT = 1
MIN_HARD_POD_AFFINITY_WEIGHT = 0
MAX_HARD_POD_AFFINITY_WEIGHT = 100

__all__ = [
    "AFFINITY_RULES_NOT_MATCH",
    "ANTI_AFFINITY_RULES_NOT_MATCH",
    "EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH",
    "NAME",
    "InterPodAffinity",
    "InterPodAffinityArgs",
    "new",
    "parse_args",
]


@dataclass(frozen=True, slots=True)
class InterPodAffinityArgs:
    """InterPodAffinityArgs of kubescheduler.config.k8s.io/v1."""

    hard_pod_affinity_weight: int = DEFAULT_HARD_POD_AFFINITY_WEIGHT
    ignore_preferred_terms_of_existing_pods: bool = False


def parse_args(args: Mapping[str, Any]) -> InterPodAffinityArgs:
    reject_unknown_args(args, {"hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"})
    weight = args.get("hardPodAffinityWeight")
    if weight is None:
        weight = DEFAULT_HARD_POD_AFFINITY_WEIGHT
    if (
        not isinstance(weight, int)
        or isinstance(weight, bool)
        or not MIN_HARD_POD_AFFINITY_WEIGHT <= weight <= MAX_HARD_POD_AFFINITY_WEIGHT
    ):
        raise PluginArgsError(
            "hardPodAffinityWeight",
            f"{weight!r}: not in valid range [{MIN_HARD_POD_AFFINITY_WEIGHT}-{MAX_HARD_POD_AFFINITY_WEIGHT}]",
        )
    ignore = args.get("ignorePreferredTermsOfExistingPods", False)
    if ignore is None:
        ignore = False
    if not isinstance(ignore, bool):
        raise PluginArgsError("ignorePreferredTermsOfExistingPods", f"must be a boolean, got {ignore!r}")
    return InterPodAffinityArgs(weight, ignore)


class InterPodAffinity:
    """Pod affinity and anti-affinity: required terms filter, preferred terms (and existing pods' terms) score."""

    name = NAME

    def __init__(self, args: InterPodAffinityArgs, handle: Handle) -> None:
        self.args = args
        self._handle = handle
        self._terms = TermsCache()
        self._incoming_terms = TermsCache(strict=True)
        """The terms of pods being scheduled or waiting: every cycle and every hint reads them."""
        self._shares_for = ByKind(NodeShares)
        """Per-node shares of recent kinds of incoming pods (``scoring.signature``, ``filtering.signature``)."""

    # -- filtering -------------------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        state.write(ALL_NODES_KEY, nodes)
        try:
            terms = self._incoming_terms.get(pod)
        except SelectorError as exc:
            return None, unschedulable(f"parsing pod: {exc}", resolvable=False)
        namespace_labels = NamespaceLabelsCache(self._handle.namespace_labels)
        key = filter_signature(pod, terms, self._handle.namespace_generation())
        shares = None if key is None else (self._shares_for((key, "affinity")), self._shares_for((key, "anti")))
        existing = self._shares_for(existing_signature(pod, namespace_labels(pod.namespace) or {}))
        computed = compute_state(pod, terms, nodes, self._terms, namespace_labels, shares, existing)
        if not computed.has_work:
            return None, Status(Code.SKIP)
        state.write(PRE_FILTER_STATE_KEY, computed)
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        computed = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(computed, PreFilterState):
            return error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState')
        return filter_node(computed, node)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        computed = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(computed, PreFilterState):
            return [error(f'error reading "{PRE_FILTER_STATE_KEY}" from cycleState')] * len(nodes)
        return filter_nodes(computed, nodes)

    # -- PreFilter extensions (preemption's dry runs, nominated pods) ------------

    def add_pod(self, state: CycleState, pod: PodInfo, added: PodInfo, node: NodeInfo) -> None:
        self._update(state, pod, added, node, +1)

    def remove_pod(self, state: CycleState, pod: PodInfo, removed: PodInfo, node: NodeInfo) -> None:
        self._update(state, pod, removed, node, -1)

    def _update(self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, delta: int) -> None:
        computed = state.get(PRE_FILTER_STATE_KEY)
        if isinstance(computed, PreFilterState):
            computed.update(pod, other, node, delta, self._terms, NamespaceLabelsCache(self._handle.namespace_labels))

    # -- scoring ---------------------------------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        try:
            terms = self._incoming_terms.get(pod)
        except SelectorError as exc:
            return error(f"failed to parse pod: {exc}")
        if self.args.ignore_preferred_terms_of_existing_pods and not terms.has_preferred:
            return Status(Code.SKIP)
        all_nodes = state.get(ALL_NODES_KEY)
        namespace_labels = NamespaceLabelsCache(self._handle.namespace_labels)
        # Sums kept across cycles need the same nodes every time: all of them, as PreFilter saw them.
        key = (
            score_signature(pod, terms, namespace_labels(pod.namespace) or {}, self._handle.namespace_generation())
            if all_nodes is not None
            else None
        )
        shares = self._shares_for(key) if key is not None else None
        computed = topology_scores(
            pod,
            terms,
            nodes if all_nodes is None else all_nodes,
            self._terms,
            namespace_labels,
            hard_pod_affinity_weight=self.args.hard_pod_affinity_weight,
            shares=shares,
        )
        if computed is None:
            return Status(Code.SKIP)
        state.write(PRE_SCORE_STATE_KEY, computed)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        computed = state.get(PRE_SCORE_STATE_KEY)
        if not isinstance(computed, PreScoreState):
            return 0, error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState')
        return score_node(computed, node), SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        computed = state.get(PRE_SCORE_STATE_KEY)
        if not isinstance(computed, PreScoreState):
            return [], error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState')
        return score_nodes(computed, nodes), SUCCESS

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]) -> Status:
        return normalize_mapping(self, state, pod, scores)

    def normalize_score_list(
        self, state: CycleState, pod: PodInfo, names: Sequence[NodeName], scores: list[int]
    ) -> Status:
        computed = state.get(PRE_SCORE_STATE_KEY)
        if not isinstance(computed, PreScoreState):
            return error(f'failed to read "{PRE_SCORE_STATE_KEY}" from cycleState')
        normalize(computed, scores)
        return SUCCESS

    # -- requeueing ------------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD | ActionType.UPDATE_POD_LABEL | ActionType.DELETE),
                hint=partial(assigned_pod_changed, terms_of=self._incoming_terms.get),
            ),
            # kube's TargetPod/UpdatePodLabel: the rejected pod's own labels changed.
            ClusterEventWithHint(
                ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.UPDATE_POD_LABEL), hint=own_labels_changed
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL),
                hint=partial(node_changed, terms_of=self._incoming_terms.get),
            ),
        ]


def new(args: Mapping[str, Any], handle: Handle) -> InterPodAffinity:
    return InterPodAffinity(parse_args(args), handle)


_check_pre_filter: type[PreFilterPlugin] = InterPodAffinity
_check_filter: type[BatchFilterPlugin] = InterPodAffinity
_check_pre_score: type[PreScorePlugin] = InterPodAffinity
_check_score: type[BatchScorePlugin] = InterPodAffinity
_check_normalizer: type[BatchScoreNormalizer] = InterPodAffinity
_check_events: type[EnqueueExtensions] = InterPodAffinity
