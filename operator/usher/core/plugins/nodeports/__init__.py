"""NodePorts: a pod's host ports must be free on the node. Pure.

A ``hostPort`` binds a port on the node itself, so two pods asking for the
same protocol and port cannot share a node unless they bind different,
specific host IPs (``0.0.0.0`` or an empty IP overlaps every IP). PreFilter
collects the pod's host ports once per cycle and skips the filter for the
common pod that asks for none; Filter checks them against the ports the pods
already counted on the node hold (``NodeInfo.used_ports``). The rejection is
resolvable: deleting a pod that holds the port, or preempting it, frees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import EnqueueExtensions, FilterPlugin, Handle, PreFilterPlugin, PreFilterResult
from usher.core.framework.names import NODE_PORTS
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, Code, HostPort, PodInfo, QueueingHint, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = NODE_PORTS
REASON = "node(s) didn't have free ports for the requested pod ports"
PRE_FILTER_KEY = "PreFilter" + NAME
_SKIP = Status(Code.SKIP)


def ports_conflict(wanted: Iterable[HostPort], in_use: Iterable[HostPort]) -> bool:
    """Does any wanted port collide with one in use (same protocol and port, overlapping IPs)?"""
    used = tuple(in_use)
    return any(want.conflicts(taken) for want in wanted for taken in used)


class NodePorts:
    """A pod's host ports must be free on the node."""

    name = NAME

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        if not pod.host_ports:
            return None, _SKIP
        state.write(PRE_FILTER_KEY, pod.host_ports)
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        # PodInfo already holds the ports, so a profile without this PreFilter still works.
        wanted: tuple[HostPort, ...] = state.get(PRE_FILTER_KEY, pod.host_ports)
        if wanted and ports_conflict(wanted, node.used_ports):
            return unschedulable(REASON)
        return SUCCESS

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        # Ports are immutable in a pod spec, so pod updates never free one: only deletions do.
        # A new node has every port free; node updates never free a port.
        return [
            ClusterEventWithHint(ClusterEvent(Resource.POD, ActionType.DELETE), hint=deleted_pod_freed_a_port),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD)),
        ]


def deleted_pod_freed_a_port(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue only if the deleted pod held (or was nominated to hold) a port this pod wants."""
    deleted = old or {}
    placed = (deleted.get("spec") or {}).get("nodeName") or (deleted.get("status") or {}).get("nominatedNodeName")
    if not placed:
        return QueueingHint.QUEUE_SKIP
    freed = PodInfo.from_api(deleted).host_ports
    return QueueingHint.QUEUE if ports_conflict(pod.host_ports, freed) else QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: Handle) -> NodePorts:
    reject_unknown_args(args, set())
    return NodePorts()


_check_pre_filter: type[PreFilterPlugin] = NodePorts
_check_filter: type[FilterPlugin] = NodePorts
_check_events: type[EnqueueExtensions] = NodePorts
