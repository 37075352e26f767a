"""PodTopologySpread: spread a pod's matching pods evenly over topology domains (zones, nodes ...). Pure.

kube-scheduler's plugin, behaviour for behaviour (1.37):

- Hard constraints (``whenUnsatisfiable: DoNotSchedule``) are PreFilter +
  Filter (``filtering``): a node without a topology key is
  UnschedulableAndUnresolvable ("... (missing required label)"), a node
  whose domain would exceed ``maxSkew`` is Unschedulable. A pod without hard
  constraints makes PreFilter answer Skip, so Filter is never called.
- Soft constraints (``ScheduleAnyway``) are PreScore + Score +
  NormalizeScore (``scoring``): the less loaded the domain, the higher the
  score. A pod without soft constraints makes PreScore answer Skip.
- Only pods of the incoming pod's namespace count, terminating pods never;
  ``nodeAffinityPolicy`` (Honor by default) and ``nodeTaintsPolicy``
  (Ignore by default) decide which nodes' domains count.
- A pod without constraints of its own gets the default constraints
  (``constraints``): kube-scheduler's system defaults (hostname maxSkew 3,
  zone maxSkew 5, ScheduleAnyway) with ``defaultingType: System`` (the
  default), the configured ones with ``List``; spread against the pods its
  Services select and its ReplicaSet, ReplicationController or StatefulSet
  controls (see ``constraints`` for how usher deduces the latter).

PreScore needs every node, but usher hands it the feasible ones only, so
PreFilter keeps the full node list in the cycle state.

Queueing hints (kube's ``isSchedulableAfterPodChange`` /
``isSchedulableAfterNodeChange``) look at the pod's hard constraints only,
because only those reject it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
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
from usher.core.framework.names import POD_TOPOLOGY_SPREAD
from usher.core.framework.scoring import normalize_mapping
from usher.core.hints import ClusterEventWithHint
from usher.core.plugins.nodeshares import ByKind, NodeShares
from usher.core.plugins.podtopologyspread.args import (
    LIST_DEFAULTING,
    SYSTEM_DEFAULTING,
    SpreadArgs,
    parse_args,
)
from usher.core.plugins.podtopologyspread.constraints import (
    DO_NOT_SCHEDULE,
    HONOR,
    SCHEDULE_ANYWAY,
    SYSTEM_DEFAULT_CONSTRAINTS,
    Constraint,
    ConstraintSource,
    ServiceSelectors,
    has_all_topology_keys,
)
from usher.core.plugins.podtopologyspread.filtering import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PreFilterState,
    compute_pre_filter_state,
    filter_node,
    filter_nodes,
)
from usher.core.plugins.podtopologyspread.filtering import signature as filter_signature
from usher.core.plugins.podtopologyspread.scoring import (
    HostCounts,
    PreScoreState,
    compute_pre_score_state,
    normalize,
    score_node,
    score_nodes,
)
from usher.core.plugins.podtopologyspread.scoring import signature as score_signature
from usher.core.selectors import SelectorError
from usher.core.types import SUCCESS, Code, NodeName, PodInfo, QueueingHint, Status, error

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = POD_TOPOLOGY_SPREAD
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
PRE_SCORE_STATE_KEY = "PreScore" + NAME
ALL_NODES_KEY = NAME + "/allNodes"
SKIP = Status(Code.SKIP)

__all__ = [
    "ERR_REASON_CONSTRAINTS_NOT_MATCH",
    "ERR_REASON_NODE_LABEL_NOT_MATCH",
    "LIST_DEFAULTING",
    "NAME",
    "SYSTEM_DEFAULTING",
    "PodTopologySpread",
    "SpreadArgs",
    "new",
    "parse_args",
]


class PodTopologySpread:
    """topologySpreadConstraints: maxSkew filters (DoNotSchedule) and scores (ScheduleAnyway)."""

    name = NAME

    def __init__(self, args: SpreadArgs | None = None, *, services: ServiceSelectors = lambda namespace: ()) -> None:
        self.args = args or SpreadArgs()
        system = self.args.defaulting_type == SYSTEM_DEFAULTING
        defaults = SYSTEM_DEFAULT_CONSTRAINTS if system else self.args.default_constraints
        self.source = ConstraintSource(defaults, system_defaulted=system, services=services)
        self._shares_for = ByKind(NodeShares)
        """Per-node PreFilter counts of recent kinds of incoming pods (``filtering.signature``)."""
        self._score_shares_for = ByKind(NodeShares)
        """Per-node PreScore counts of recent kinds of incoming pods (``scoring.signature``)."""
        self._host_counts_for: ByKind[HostCounts] = ByKind(dict)
        """Per-node Score counts (hostname constraints) of recent kinds of incoming pods (``scoring.signature``)."""

    # -- PreFilter / Filter ---------------------------------------------------

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        state.write(ALL_NODES_KEY, nodes)
        try:
            constraints = self.source.for_pod(pod, DO_NOT_SCHEDULE)
        except SelectorError as exc:
            return None, error(f"get constraints from pod: {exc}")
        if not constraints:
            return None, SKIP
        shares = self._shares_for(filter_signature(pod, constraints))
        state.write(PRE_FILTER_STATE_KEY, compute_pre_filter_state(pod, constraints, nodes, shares))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        pre: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            return error(f"reading {PRE_FILTER_STATE_KEY!r} from cycleState: not found")
        return filter_node(pre, pod, node)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        pre: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if pre is None:
            return [error(f"reading {PRE_FILTER_STATE_KEY!r} from cycleState: not found")] * len(nodes)
        return filter_nodes(pre, nodes)

    # -- PreFilter extensions (preemption's dry runs, nominated pods) ------------

    def add_pod(self, state: CycleState, pod: PodInfo, added: PodInfo, node: NodeInfo) -> None:
        pre: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if pre is not None:
            pre.update(pod, added, node, +1)

    def remove_pod(self, state: CycleState, pod: PodInfo, removed: PodInfo, node: NodeInfo) -> None:
        pre: PreFilterState | None = state.get(PRE_FILTER_STATE_KEY)
        if pre is not None:
            pre.update(pod, removed, node, -1)

    # -- PreScore / Score / NormalizeScore --------------------------------------

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        all_nodes: Sequence[NodeInfo] | None = state.get(ALL_NODES_KEY)
        if all_nodes is None:  # PreFilter disabled for this plugin: the feasible nodes are all we know
            all_nodes = nodes
        if not all_nodes:
            return SKIP
        try:
            constraints = self.source.for_pod(pod, SCHEDULE_ANYWAY)
        except SelectorError as exc:
            return error(f"calculating preScoreState: {exc}")
        if not constraints:
            return SKIP
        # Only system-default spreading lets nodes without a zone label still spread by hostname.
        require_all = self.source.has_own(pod) or not self.source.system_defaulted
        kind = score_signature(pod, constraints, require_all)
        shares, hosts = self._score_shares_for(kind), self._host_counts_for(kind)
        state.write(
            PRE_SCORE_STATE_KEY,
            compute_pre_score_state(
                pod, constraints, nodes, all_nodes, require_all_topologies=require_all, shares=shares, hosts=hosts
            ),
        )
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        pre: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if pre is None:
            return 0, error(f"reading {PRE_SCORE_STATE_KEY!r} from cycleState: not found")
        return score_node(pre, node), SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        pre: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if pre is None:
            return [], error(f"reading {PRE_SCORE_STATE_KEY!r} from cycleState: not found")
        return score_nodes(pre, nodes), SUCCESS

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]) -> Status:
        return normalize_mapping(self, state, pod, scores)

    def normalize_score_list(
        self, state: CycleState, pod: PodInfo, names: Sequence[NodeName], scores: list[int]
    ) -> Status:
        pre: PreScoreState | None = state.get(PRE_SCORE_STATE_KEY)
        if pre is None:
            return error(f"reading {PRE_SCORE_STATE_KEY!r} from cycleState: not found")
        normalize(pre, names, scores)
        return SUCCESS

    # -- queueing hints ---------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        pod_actions = (
            ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_POD_LABEL | ActionType.UPDATE_POD_TOLERATION
        )
        node_actions = ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT
        return [
            ClusterEventWithHint(ClusterEvent(Resource.POD, pod_actions), hint=self.pod_change_hint),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, node_actions), hint=self.node_change_hint),
        ]

    def _hard_constraints(self, pod: PodInfo) -> list[Constraint]:
        return self.source.for_pod(pod, DO_NOT_SCHEDULE)

    def pod_change_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when an assigned pod of the same namespace that a hard constraint selects comes, goes or
        changes whether it is selected, or when this pod gets new tolerations and a constraint honors taints."""
        for changed in (new, old):
            if changed is not None and not _involved(changed, pod):
                return QueueingHint.QUEUE_SKIP
        constraints = self._hard_constraints(pod)
        if old is not None and new is not None:
            if (
                _meta(new).get("uid") == pod.uid
                and (_spec(old).get("tolerations") or []) != (_spec(new).get("tolerations") or [])
                and any(c.node_taints_policy == HONOR for c in constraints)
            ):
                return QueueingHint.QUEUE
            old_labels, new_labels = _labels(old), _labels(new)
            if old_labels == new_labels:
                return QueueingHint.QUEUE_SKIP
            changed_match = any(c.matches(old_labels) != c.matches(new_labels) for c in constraints)
            return QueueingHint.QUEUE if changed_match else QueueingHint.QUEUE_SKIP
        labels = _labels(new if new is not None else old)
        return QueueingHint.QUEUE if any(c.matches(labels) for c in constraints) else QueueingHint.QUEUE_SKIP

    def node_change_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when a node carrying every topology key comes or goes, gains or loses one of those keys,
        changes a topology value, or (still carrying them all) changes its taints."""
        constraints = self._hard_constraints(pod)
        old_match = old is not None and has_all_topology_keys(_labels(old), constraints)
        new_match = new is not None and has_all_topology_keys(_labels(new), constraints)
        if old is not None and new is not None:
            if old_match != new_match:
                return QueueingHint.QUEUE
            if new_match and (
                _topology_values_changed(_labels(old), _labels(new), constraints)
                or (_spec(old).get("taints") or []) != (_spec(new).get("taints") or [])
            ):
                return QueueingHint.QUEUE
            return QueueingHint.QUEUE_SKIP
        matching = new_match if new is not None else old_match
        return QueueingHint.QUEUE if matching else QueueingHint.QUEUE_SKIP


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _involved(changed: Mapping[str, Any], pod: PodInfo) -> bool:
    """kube's ``involvedInTopologySpreading``: the pod itself, or an assigned pod of its namespace."""
    if _meta(changed).get("uid") == pod.uid:
        return True
    return bool(_spec(changed).get("nodeName")) and (_meta(changed).get("namespace") or "default") == pod.namespace


def _topology_values_changed(old: Mapping[str, str], new: Mapping[str, str], constraints: list[Constraint]) -> bool:
    return any(old.get(c.topology_key) != new.get(c.topology_key) for c in constraints)


def new(args: Mapping[str, Any], handle: Handle) -> PodTopologySpread:
    return PodTopologySpread(parse_args(args), services=handle.service_selectors)


_check_pre_filter: type[PreFilterPlugin] = PodTopologySpread
_check_filter: type[BatchFilterPlugin] = PodTopologySpread
_check_pre_score: type[PreScorePlugin] = PodTopologySpread
_check_score: type[BatchScorePlugin] = PodTopologySpread
_check_normalizer: type[BatchScoreNormalizer] = PodTopologySpread
_check_events: type[EnqueueExtensions] = PodTopologySpread
