"""SchedulingGates: a pod with ``spec.schedulingGates`` waits until every gate is removed (KEP-3521). Pure.

The message equals the API server's own for the ``PodScheduled=False,
reason=SchedulingGated`` condition, so reporting it changes nothing on a pod
that already carries that condition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import EnqueueExtensions, Handle, PreEnqueuePlugin
from usher.core.framework.names import SCHEDULING_GATES
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, PodInfo, QueueingHint, Status, unschedulable

NAME = SCHEDULING_GATES
MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


class SchedulingGates:
    """PreEnqueue: a pod with ``spec.schedulingGates`` waits outside activeQ."""

    name = NAME

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not pod.scheduling_gates:
            return SUCCESS
        return unschedulable(MESSAGE, resolvable=False)

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.POD, ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED),
                hint=gates_removed_from_this_pod,
            )
        ]


def gates_removed_from_this_pod(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Only the gated pod's own update can ungate it."""
    if not pod.is_same_pod(new):
        return QueueingHint.QUEUE_SKIP
    gates = ((new or {}).get("spec") or {}).get("schedulingGates")
    return QueueingHint.QUEUE_SKIP if gates else QueueingHint.QUEUE


def new(args: Mapping[str, Any], handle: Handle) -> SchedulingGates:
    reject_unknown_args(args, set())
    return SchedulingGates()


_check_pre_enqueue: type[PreEnqueuePlugin] = SchedulingGates
_check_extensions: type[EnqueueExtensions] = SchedulingGates
