"""GangScheduling: the pods of a gang PodGroup are scheduled all together or not at all. Pure.

kube-scheduler's plugin of the same name (framework/plugins/gangscheduling),
with its messages:

- PreEnqueue holds a pod whose PodGroup is not known yet, and a gang's pods
  until at least ``minCount`` of them are known (unscheduled, assumed or bound);
- PlacementFeasible tells the pod-group cycle whether ``minCount`` can still be
  met as it places the members one by one (``core.groupcycle``);
- Permit holds each assumed member until ``minCount`` members are assumed or
  bound, then lets all of them go;
- QueueingHints: a pod of the same group added (unscheduled or bound), its
  PodGroup added, or the PodGroup's ``minCount`` lowered. PreQueueingHints
  narrow each such event to the members of that one group.

Composite pod groups (CompositePodGroup hierarchies) are not supported.
With gang support off (``PodGroupStates.enabled`` False) the plugin passes
every pod, as if it were not enabled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import (
    EnqueueExtensions,
    Handle,
    PermitPlugin,
    PlacementFeasiblePlugin,
    PlacementProgress,
    PreEnqueuePlugin,
)
from usher.core.framework.names import GANG_SCHEDULING
from usher.core.hints import ClusterEventWithHint, PreQueueingHintResult, only
from usher.core.podgroups import Member, PodGroup
from usher.core.types import (
    SUCCESS,
    Code,
    NodeName,
    PodGroupKey,
    PodInfo,
    QueueingHint,
    Status,
    error,
    pod_group_key,
    unschedulable,
)

if TYPE_CHECKING:
    from usher.core.framework.cycle_state import CycleState

NAME = GANG_SCHEDULING
PERMIT_TIMEOUT = 300.0
"""Seconds a gang's assumed pods wait at Permit for the rest (kube-scheduler's permitTimeoutDuration)."""
WAITING_FOR_QUORUM = "waiting for minCount pods from a gang to appear in scheduling queue"
WAITING_AT_PERMIT = "waiting for minCount pods from a gang to be scheduled"


def waiting_for_pod_group(name: str) -> str:
    """PreEnqueue's message for a pod whose PodGroup usher has not seen (kube-scheduler's, typo included)."""
    return f'waiting for pods\'s pod group "{name}" to appear in scheduling queue'


class GangScheduling:
    """PreEnqueue, PlacementFeasible and Permit of gang PodGroups (see the module docstring)."""

    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    # -- PreEnqueue --------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        groups = self._handle.pod_groups
        key = pod.group_key
        if key is None or not groups.enabled:
            return SUCCESS
        state = groups.get(key)
        group = state.pod_group if state is not None else None
        if state is None or group is None:
            return unschedulable(waiting_for_pod_group(pod.pod_group), resolvable=False)
        if group.problem:
            return unschedulable(group.problem, resolvable=False)
        if group.min_count is not None and state.all_count < group.min_count:
            return unschedulable(WAITING_FOR_QUORUM, resolvable=False)
        return SUCCESS

    # -- the pod-group cycle -------------------------------------------------------

    def placement_feasible(self, group: PodGroup, progress: PlacementProgress) -> Status:
        quorum = group.quorum
        scheduled, remaining = progress.scheduled, progress.remaining
        if remaining + scheduled < quorum:
            return unschedulable(
                f"minCount ({quorum}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
            )
        if scheduled < quorum:
            return Status(
                Code.WAIT, (f"minCount ({quorum}) is not yet satisfied: {scheduled} scheduled, {remaining} remaining",)
            )
        return SUCCESS

    # -- Permit ------------------------------------------------------------------

    def permit(self, state: CycleState, pod: PodInfo, node: NodeName) -> tuple[Status, float]:
        groups = self._handle.pod_groups
        key = pod.group_key
        if key is None or not groups.enabled:
            return SUCCESS, 0.0
        members = groups.get(key)
        group = members.pod_group if members is not None else None
        if members is None or group is None:
            return error(f"failed to get podGroup {key}: not found"), 0.0
        if group.min_count is None:
            return SUCCESS, 0.0
        if members.scheduled_count < group.min_count:
            return Status(Code.WAIT, (WAITING_AT_PERMIT,)), PERMIT_TIMEOUT
        # The quorum is met: this pod goes, and so does every member waiting for it.
        waiting = self._handle.waiting_pods
        for member in members.keys(Member.ASSUMED):
            waiting.allow(member, NAME)
        return SUCCESS, 0.0

    # -- queueing hints ----------------------------------------------------------

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        member_added = self._members_of_added_pod
        return [
            # schedulingGroup is immutable: a pod's update never changes its group, only its arrival counts.
            ClusterEventWithHint(
                ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD), pod_of_same_group_added, member_added
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD), pod_of_same_group_added, member_added
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.POD_GROUP, ActionType.ADD), its_pod_group_added, self._members_of_pod_group
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE),
                its_min_count_lowered,
                self._members_of_pod_group,
            ),
        ]

    def _members_of_added_pod(self, old: Any, new: Any) -> PreQueueingHintResult:
        return self._members(_group_of_pod(new))

    def _members_of_pod_group(self, old: Any, new: Any) -> PreQueueingHintResult:
        return self._members(_key_of(new))

    def _members(self, key: PodGroupKey | None) -> PreQueueingHintResult:
        """The event concerns the members of one group only (none when the object names no group)."""
        state = self._handle.pod_groups.get(key) if key is not None else None
        return only(*state.members) if state is not None else only()


def pod_of_same_group_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """A pod of the same group arrived (kube's isSchedulableAfterPodAdded): it may complete the quorum."""
    key = pod.group_key
    return QueueingHint.QUEUE if key is not None and _group_of_pod(new) == key else QueueingHint.QUEUE_SKIP


def its_pod_group_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The pod's PodGroup appeared (kube's isSchedulableAfterPodGroupAdded)."""
    key = pod.group_key
    return QueueingHint.QUEUE if key is not None and _key_of(new) == key else QueueingHint.QUEUE_SKIP


def its_min_count_lowered(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The pod's gang needs fewer pods now (kube's isSchedulableAfterPodGroupUpdated), or its PodGroup became
    readable (usher: a malformed PodGroup fixed)."""
    key = pod.group_key
    if key is None or _key_of(new) != key or old is None or new is None:
        return QueueingHint.QUEUE_SKIP
    before, after = PodGroup.from_api(old), PodGroup.from_api(new)
    if before.error and not after.error:
        return QueueingHint.QUEUE
    if before.min_count is None or after.min_count is None or after.error:
        return QueueingHint.QUEUE_SKIP  # updates of a basic policy make no waiting pod schedulable
    return QueueingHint.QUEUE if after.min_count < before.min_count else QueueingHint.QUEUE_SKIP


def _key_of(obj: Any) -> PodGroupKey | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    return pod_group_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _group_of_pod(obj: Any) -> PodGroupKey | None:
    if not isinstance(obj, Mapping):
        return None
    name = ((obj.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if not name:
        return None
    return pod_group_key(str((obj.get("metadata") or {}).get("namespace") or "default"), str(name))


def new(args: Mapping[str, Any], handle: Handle) -> GangScheduling:
    reject_unknown_args(args, set())
    return GangScheduling(handle)


_check_pre_enqueue: type[PreEnqueuePlugin] = GangScheduling
_check_placement: type[PlacementFeasiblePlugin] = GangScheduling
_check_permit: type[PermitPlugin] = GangScheduling
_check_extensions: type[EnqueueExtensions] = GangScheduling
