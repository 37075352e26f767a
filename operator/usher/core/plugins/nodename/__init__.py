"""NodeName: a pod that names its node (``spec.nodeName``) fits only that node. Pure.

A pod created with ``spec.nodeName`` is normally bound already and never
reaches the scheduling queue; the filter still guards the case (as
kube-scheduler's does), so every other node reports the same reason instead of
the pod landing somewhere it did not ask for. The rejection cannot be resolved
by preemption; only a node with that name appearing can help.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import BatchFilterPlugin, EnqueueExtensions, Handle
from usher.core.framework.names import NODE_NAME
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, PodInfo, QueueingHint, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = NODE_NAME
REASON = "node(s) didn't match the requested node name"


def fits(pod: PodInfo, node_name: str) -> bool:
    return not pod.node_name or pod.node_name == node_name


class NodeName:
    """A pod with ``spec.nodeName`` fits only that node."""

    name = NAME
    filter_reads_node_pods = False
    """Its Filter answer depends on the pod and the node object only (never on the node's pods)."""

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return SUCCESS if fits(pod, node.name) else unschedulable(REASON, resolvable=False)

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        if not pod.node_name:
            return [None] * len(nodes)
        rejection = unschedulable(REASON, resolvable=False)
        return [None if node.name == pod.node_name else rejection for node in nodes]

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        # Only a new node can carry the requested name; updates never rename a node.
        return [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD), hint=added_node_is_the_requested_one)]


def added_node_is_the_requested_one(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    name = str(((new or {}).get("metadata") or {}).get("name") or "")
    return QueueingHint.QUEUE if fits(pod, name) else QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: Handle) -> NodeName:
    reject_unknown_args(args, set())
    return NodeName()


_check_filter: type[BatchFilterPlugin] = NodeName
_check_events: type[EnqueueExtensions] = NodeName
