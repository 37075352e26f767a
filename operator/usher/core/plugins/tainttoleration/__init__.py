"""TaintToleration: keep pods off nodes whose taints they do not tolerate; prefer fewer soft taints. Pure.

Filter: the first ``NoSchedule`` or ``NoExecute`` taint of the node that no
toleration of the pod tolerates rejects the node, naming the taint; taints
are an administrator's decision, so preemption cannot resolve it. Score:
``PreferNoSchedule`` taints are soft; PreScore keeps the pod's tolerations
that can tolerate them (effect ``PreferNoSchedule`` or empty), Score counts the
node's ``PreferNoSchedule`` taints none of them tolerates, and NormalizeScore
turns counts around (kube-scheduler's DefaultNormalizeScore with reverse):
the node with the most such taints scores 0, untainted nodes 100.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import (
    BatchFilterPlugin,
    BatchScoreNormalizer,
    BatchScorePlugin,
    EnqueueExtensions,
    Handle,
    PreScorePlugin,
)
from usher.core.framework.names import TAINT_TOLERATION
from usher.core.framework.scoring import DefaultNormalized
from usher.core.hints import ClusterEventWithHint, this_pod_changed
from usher.core.selectors import tolerates, untolerated_taint
from usher.core.types import SUCCESS, PodInfo, QueueingHint, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = TAINT_TOLERATION
PRE_SCORE_KEY = "PreScore" + NAME
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
DO_NOT_SCHEDULE = (NO_SCHEDULE, NO_EXECUTE)
_TAINTS = operator.attrgetter("taints")


def untolerated_reason(taint: Mapping[str, Any]) -> str:
    """kube-scheduler's reason, naming the taint: ``node(s) had untolerated taint {key: value}``."""
    return f"node(s) had untolerated taint {{{taint.get('key') or ''}: {taint.get('value') or ''}}}"


def pod_tolerations(pod: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((pod or {}).get("spec") or {}).get("tolerations") or [])


def node_taints(node: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list(((node or {}).get("spec") or {}).get("taints") or [])


def prefer_no_schedule_tolerations(tolerations: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """Tolerations that can tolerate a PreferNoSchedule taint (an empty effect means every effect)."""
    return tuple(t for t in tolerations if (t.get("effect") or "") in ("", PREFER_NO_SCHEDULE))


def count_intolerable_prefer_no_schedule(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> int:
    return sum(
        1
        for taint in taints
        if taint.get("effect") == PREFER_NO_SCHEDULE and not any(tolerates(t, taint) for t in tolerations)
    )


class TaintToleration(DefaultNormalized):
    """NoSchedule/NoExecute taints filter pods that do not tolerate them; PreferNoSchedule taints score."""

    name = NAME
    reverse_scores = True
    """The more intolerable PreferNoSchedule taints a node has, the lower it scores."""
    filter_reads_node_pods = False
    """Its Filter answer depends on the pod and the node object only (never on the node's pods)."""

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        taint = untolerated_taint(node.taints, pod_tolerations(pod.raw), DO_NOT_SCHEDULE)
        if taint is None:
            return SUCCESS
        return unschedulable(untolerated_reason(taint), resolvable=False)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        if not any(map(_TAINTS, nodes)):  # C-level scan: this runs for every cycle
            return [None] * len(nodes)
        tolerations = pod_tolerations(pod.raw)
        rejections: dict[str, Status] = {}  # one Status per reason: many nodes carry the same taint
        # Per taint shape: nodes tainted alike (a node pool) get the same answer, worked out once.
        answers: dict[tuple[tuple[Any, Any, Any], ...], Status | None] = {}
        results: list[Status | None] = []
        for node in nodes:
            if not node.taints:
                results.append(None)
                continue
            shape = node.taint_shape
            if shape in answers:
                results.append(answers[shape])
                continue
            taint = untolerated_taint(node.taints, tolerations, DO_NOT_SCHEDULE)
            status = None
            if taint is not None:
                reason = untolerated_reason(taint)
                status = rejections.get(reason)
                if status is None:
                    status = rejections[reason] = unschedulable(reason, resolvable=False)
            answers[shape] = status
            results.append(status)
        return results

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        state.write(PRE_SCORE_KEY, prefer_no_schedule_tolerations(pod_tolerations(pod.raw)))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        tolerations = state.get(PRE_SCORE_KEY)
        if tolerations is None:  # PreScore disabled in this profile
            tolerations = prefer_no_schedule_tolerations(pod_tolerations(pod.raw))
        return count_intolerable_prefer_no_schedule(node.taints, tolerations), SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        if not any(map(_TAINTS, nodes)):  # C-level scan: this runs for every cycle
            return [0] * len(nodes), SUCCESS
        counts: dict[tuple[tuple[Any, Any, Any], ...], int] = {}  # per taint shape, as in filter_nodes
        scores: list[int] = []
        for node in nodes:
            if not node.taints:
                scores.append(0)
                continue
            count = counts.get(node.taint_shape)
            if count is None:
                count = counts[node.taint_shape] = self.score(state, pod, node)[0]
            scores.append(count)
        return scores, SUCCESS

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
                hint=node_taints_now_tolerated,
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.POD, ActionType.UPDATE_POD_TOLERATION), hint=own_tolerations_changed
            ),
        ]


def node_taints_now_tolerated(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when the node went from having an untolerated NoSchedule/NoExecute taint to having none.

    An added node counts as having been untolerated before.
    """
    tolerations = pod_tolerations(pod.raw)
    was_untolerated = old is None or untolerated_taint(node_taints(old), tolerations, DO_NOT_SCHEDULE) is not None
    is_untolerated = untolerated_taint(node_taints(new), tolerations, DO_NOT_SCHEDULE) is not None
    return QueueingHint.QUEUE if was_untolerated and not is_untolerated else QueueingHint.QUEUE_SKIP


# A toleration added to this very pod may let it onto a node it was kept off.
own_tolerations_changed = this_pod_changed


def new(args: Mapping[str, Any], handle: Handle) -> TaintToleration:
    reject_unknown_args(args, set())
    return TaintToleration()


_check_filter: type[BatchFilterPlugin] = TaintToleration
_check_pre_score: type[PreScorePlugin] = TaintToleration
_check_score: type[BatchScorePlugin] = TaintToleration
_check_normalizer: type[BatchScoreNormalizer] = TaintToleration
_check_events: type[EnqueueExtensions] = TaintToleration
