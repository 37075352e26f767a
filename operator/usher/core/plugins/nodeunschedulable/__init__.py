"""NodeUnschedulable: a cordoned node (``spec.unschedulable``) takes only pods that tolerate it. Pure."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import BatchFilterPlugin, Handle
from usher.core.framework.names import NODE_UNSCHEDULABLE
from usher.core.hints import ClusterEventWithHint
from usher.core.selectors import tolerates
from usher.core.types import SUCCESS, PodInfo, QueueingHint, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = NODE_UNSCHEDULABLE
REASON = "node(s) were unschedulable"
TAINT_KEY = "node.kubernetes.io/unschedulable"


_UNSCHEDULABLE = operator.attrgetter("unschedulable")
_UNSCHEDULABLE_TAINT = {"key": TAINT_KEY, "effect": "NoSchedule"}


def tolerates_unschedulable(pod: PodInfo) -> bool:
    tolerations = (pod.raw.get("spec") or {}).get("tolerations") or []
    return any(tolerates(t, _UNSCHEDULABLE_TAINT) for t in tolerations)


class NodeUnschedulable:
    """Cordoned nodes (``spec.unschedulable``) fit only pods that tolerate it."""

    name = NAME
    filter_reads_node_pods = False
    """Its Filter answer depends on the pod and the node object only (never on the node's pods)."""

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.unschedulable and not tolerates_unschedulable(pod):
            return unschedulable(REASON, resolvable=False)
        return SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        if not any(map(_UNSCHEDULABLE, nodes)):  # C-level scan: this runs for every cycle
            return [None] * len(nodes)
        tolerated = tolerates_unschedulable(pod)
        rejection = unschedulable(REASON, resolvable=False)
        return [rejection if node.unschedulable and not tolerated else None for node in nodes]

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT), hint=node_schedulable
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.POD, ActionType.UPDATE_POD_TOLERATION), hint=own_toleration_added
            ),
        ]


def node_schedulable(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    unschedulable_now = bool(((new or {}).get("spec") or {}).get("unschedulable"))
    return QueueingHint.QUEUE if not unschedulable_now or tolerates_unschedulable(pod) else QueueingHint.QUEUE_SKIP


def own_toleration_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    if not pod.is_same_pod(new):
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE if tolerates_unschedulable(PodInfo.from_api(new)) else QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: Handle) -> NodeUnschedulable:
    reject_unknown_args(args, set())
    return NodeUnschedulable()


_check: type[BatchFilterPlugin] = NodeUnschedulable
