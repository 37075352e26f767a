"""Cluster events: what changed in the cluster, as the queue and QueueingHints see it.

Pure. Mirrors kube-scheduler's ``framework.ClusterEvent``: a resource kind and
ActionType bit flags. Updates are split into one event per detected change
(a node's labels changed, a pod's scheduling gates were all removed ...), so a
plugin can register for exactly the change that may help the pods it rejected.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntFlag, StrEnum
from typing import Any


class ActionType(IntFlag):
    """What happened to an object, as kube-scheduler's bit flags: one bit per kind of change."""

    ADD = 1
    DELETE = 2
    UPDATE_NODE_ALLOCATABLE = 4
    UPDATE_NODE_LABEL = 8
    UPDATE_NODE_TAINT = 16
    UPDATE_NODE_CONDITION = 32
    UPDATE_NODE_ANNOTATION = 64
    UPDATE_NODE_DECLARED_FEATURE = 128
    UPDATE_POD_LABEL = 256
    UPDATE_POD_SCALE_DOWN = 512
    UPDATE_POD_TOLERATION = 1024
    UPDATE_POD_SCHEDULING_GATES_ELIMINATED = 2048
    UPDATE_POD_GENERATED_RESOURCE_CLAIM = 4096
    UPDATE = 8188  # every Update* bit
    ALL = 8191

    @property
    def label(self) -> str:
        """kube-scheduler's spelling: ``Add``, ``Update``, ``UpdateNodeLabel`` ..."""
        return _action_label(int(self))


@functools.cache
def _action_label(bits: int) -> str:
    """Labels are asked for on every event (metrics): computed once per combination of bits."""
    if bits == ActionType.UPDATE:
        return "Update"
    if bits == ActionType.ALL:
        return "All"
    return "|".join(_LABELS[bit] for bit in ActionType if bit in _LABELS and bit & bits)


_LABELS = {
    ActionType.ADD: "Add",
    ActionType.DELETE: "Delete",
    ActionType.UPDATE_NODE_ALLOCATABLE: "UpdateNodeAllocatable",
    ActionType.UPDATE_NODE_LABEL: "UpdateNodeLabel",
    ActionType.UPDATE_NODE_TAINT: "UpdateNodeTaint",
    ActionType.UPDATE_NODE_CONDITION: "UpdateNodeCondition",
    ActionType.UPDATE_NODE_ANNOTATION: "UpdateNodeAnnotation",
    ActionType.UPDATE_NODE_DECLARED_FEATURE: "UpdateNodeDeclaredFeature",
    ActionType.UPDATE_POD_LABEL: "UpdatePodLabel",
    ActionType.UPDATE_POD_SCALE_DOWN: "UpdatePodScaleDown",
    ActionType.UPDATE_POD_TOLERATION: "UpdatePodToleration",
    ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED: "UpdatePodSchedulingGatesEliminated",
    ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM: "UpdatePodGeneratedResourceClaim",
}


class Resource(StrEnum):
    """The kind an event is about; pods split into assigned and unscheduled, ``*`` is the wildcard."""

    POD = "Pod"
    ASSIGNED_POD = "AssignedPod"
    UNSCHEDULED_POD = "UnscheduledPod"
    NODE = "Node"
    RESOURCE_CLAIM = "ResourceClaim"
    RESOURCE_SLICE = "ResourceSlice"
    DEVICE_CLASS = "DeviceClass"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    PERSISTENT_VOLUME = "PersistentVolume"
    STORAGE_CLASS = "StorageClass"
    CSI_NODE = "CSINode"
    CSI_DRIVER = "CSIDriver"
    CSI_STORAGE_CAPACITY = "CSIStorageCapacity"
    POD_GROUP = "PodGroup"
    WILDCARD = "*"

    def matches(self, incoming: Resource) -> bool:
        """A registration for ``Pod`` covers both pod sub-kinds."""
        if self in (Resource.WILDCARD, incoming):
            return True
        return self is Resource.POD and incoming in (Resource.ASSIGNED_POD, Resource.UNSCHEDULED_POD)


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """A change in the cluster (resource + action bits), as registered by plugins and as raised by handlers."""

    resource: Resource
    action: ActionType
    custom_label: str = ""
    # Derived once at construction: matching runs for every (event, registration) pair in the
    # queue's hot paths, where enum.Flag arithmetic and property calls are measurably slow.
    label: str = field(init=False, compare=False, repr=False)
    is_wildcard: bool = field(init=False, compare=False, repr=False)
    _bits: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        bits = int(self.action)
        object.__setattr__(self, "_bits", bits)
        object.__setattr__(self, "label", self.custom_label or f"{self.resource.value}{_action_label(bits)}")
        object.__setattr__(self, "is_wildcard", self.resource is Resource.WILDCARD and bits == ActionType.ALL)

    def matches(self, incoming: ClusterEvent) -> bool:
        """Does this registered event cover ``incoming``?

        A specific update matches a broad Update registration; a broad
        incoming Update does not match a narrow registration; an incoming
        wildcard matches only a wildcard registration.
        """
        if self.is_wildcard:
            return True
        if incoming.is_wildcard:
            return False
        theirs = incoming._bits
        return (
            (self.resource is incoming.resource or self.resource.matches(incoming.resource))
            and (self._bits & theirs) != 0
            and theirs <= self._bits
        )


# Events the queue itself raises (labels as in kube-scheduler's metrics).
SCHEDULE_ATTEMPT_FAILURE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "ScheduleAttemptFailure")
BACKOFF_COMPLETE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "BackoffComplete")
POP_FROM_BACKOFF_Q = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "PopFromBackoffQ")
FORCE_ACTIVATE = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "ForceActivate")
UNSCHEDULABLE_TIMEOUT = ClusterEvent(Resource.WILDCARD, ActionType.ALL, "UnschedulableTimeout")
POD_ADD = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD, "PodAdd")
NODE_ADD = ClusterEvent(Resource.NODE, ActionType.ADD)
NODE_DELETE = ClusterEvent(Resource.NODE, ActionType.DELETE)
ASSIGNED_POD_ADD = ClusterEvent(Resource.ASSIGNED_POD, ActionType.ADD)
ASSIGNED_POD_DELETE = ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE)
UNSCHEDULED_POD_UPDATE = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.UPDATE)
UNSCHEDULED_POD_DELETE = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.DELETE)
UNSCHEDULED_POD_ADD = ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.ADD)
"""A new unscheduled pod of a pod group, offered to the waiting pods: it may complete their gang."""
POD_GROUP_ADD = ClusterEvent(Resource.POD_GROUP, ActionType.ADD)
POD_GROUP_UPDATE = ClusterEvent(Resource.POD_GROUP, ActionType.UPDATE)
POD_GROUP_DELETE = ClusterEvent(Resource.POD_GROUP, ActionType.DELETE)


def _get(obj: Mapping[str, Any] | None, *path: str) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def node_update_events(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[ClusterEvent]:
    """One event per change that may matter for scheduling; heartbeats yield none."""
    actions = ActionType(0)
    if _get(old, "status", "allocatable") != _get(new, "status", "allocatable"):
        actions |= ActionType.UPDATE_NODE_ALLOCATABLE
    if _get(old, "metadata", "labels") != _get(new, "metadata", "labels"):
        actions |= ActionType.UPDATE_NODE_LABEL
    uncordoned = bool(_get(old, "spec", "unschedulable")) and not _get(new, "spec", "unschedulable")
    if uncordoned or _get(old, "spec", "taints") != _get(new, "spec", "taints"):
        # Uncordoning counts as a taint change, as in kube-scheduler; cordoning helps no pod.
        actions |= ActionType.UPDATE_NODE_TAINT
    if _conditions(old) != _conditions(new):
        actions |= ActionType.UPDATE_NODE_CONDITION
    if _get(old, "metadata", "annotations") != _get(new, "metadata", "annotations"):
        actions |= ActionType.UPDATE_NODE_ANNOTATION
    if _get(old, "status", "declaredFeatures") != _get(new, "status", "declaredFeatures"):
        actions |= ActionType.UPDATE_NODE_DECLARED_FEATURE
    return [ClusterEvent(Resource.NODE, bit) for bit in ActionType if bit in _LABELS and bit & actions]


def _conditions(node: Mapping[str, Any]) -> dict[str, Any]:
    """Condition statuses only: heartbeat timestamps change every few seconds and mean nothing."""
    return {c.get("type"): c.get("status") for c in _get(node, "status", "conditions") or []}


def pod_update_events(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    assigned: bool,
    requests: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
) -> list[ClusterEvent]:
    """One event per change of a pod; a change of nothing we track yields a generic Update.

    ``requests``: the old and new pod's requests when the caller has them parsed (``PodInfo.requests``).
    """
    from usher.core.resources import pod_requests

    resource = Resource.ASSIGNED_POD if assigned else Resource.UNSCHEDULED_POD
    actions = ActionType(0)
    if _get(old, "metadata", "labels") != _get(new, "metadata", "labels"):
        actions |= ActionType.UPDATE_POD_LABEL
    if assigned:
        old_requests, new_requests = requests if requests is not None else (pod_requests(old), pod_requests(new))
        if any(new_requests.get(k, 0) < v for k, v in old_requests.items()):
            actions |= ActionType.UPDATE_POD_SCALE_DOWN
    if _get(old, "spec", "tolerations") != _get(new, "spec", "tolerations"):
        actions |= ActionType.UPDATE_POD_TOLERATION
    if _get(old, "spec", "schedulingGates") and not _get(new, "spec", "schedulingGates"):
        actions |= ActionType.UPDATE_POD_SCHEDULING_GATES_ELIMINATED
    if _get(old, "status", "resourceClaimStatuses") != _get(new, "status", "resourceClaimStatuses"):
        actions |= ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM
    if not actions:
        return [ClusterEvent(resource, ActionType.UPDATE)]
    return [ClusterEvent(resource, bit) for bit in ActionType if bit in _LABELS and bit & actions]
