"""VolumeRestrictions: volumes two pods cannot share. Pure.

kube-scheduler's plugin (pkg/scheduler/framework/plugins/volumerestrictions),
message for message:

- in-tree disks on one node: the same GCE PD (unless every pod mounts it
  read-only), the same AWS EBS volume, the same ISCSI IQN or RBD image
  (overlapping Ceph monitors, same pool and image) unless all mounts are
  read-only: ``node(s) had no available disk``;
- ReadWriteOncePod claims anywhere in the cluster: PreFilter looks up the
  pod's ``persistentVolumeClaim`` volumes (each must exist) and counts those
  of its ReadWriteOncePod claims some pod already uses (the cache keeps how
  many pods use each claim, as kube-scheduler's snapshot); Filter rejects every
  node while that count is above zero. Both rejections are Unschedulable:
  preemption can evict the pod holding the disk or the claim, and
  PreFilterExtensions keep the count right in its dry runs.

PreFilter skips the plugin for a pod with neither in-tree disks nor a
ReadWriteOncePod claim in use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from usher.core.cache import claims_in_use
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import (
    EnqueueExtensions,
    FilterPlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreFilterResult,
)
from usher.core.framework.names import VOLUME_RESTRICTIONS
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, Code, PodInfo, QueueingHint, Status, error, unschedulable
from usher.core.volumes.model import READ_WRITE_ONCE_POD
from usher.core.volumes.state import VolumeState

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = VOLUME_RESTRICTIONS
PRE_FILTER_STATE_KEY = "PreFilter" + NAME

REASON_DISK_CONFLICT = "node(s) had no available disk"
REASON_READ_WRITE_ONCE_POD_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)

_SKIP = Status(Code.SKIP)
_RESTRICTED_SOURCES = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi")


class VolumeHandle(Protocol):
    """What VolumeRestrictions needs from the framework handle."""

    @property
    def volumes(self) -> VolumeState: ...


@dataclass(slots=True)
class PreFilterState:
    """The pod's ReadWriteOncePod claims and how many of them pods already use (kube's preFilterState)."""

    read_write_once_pod_claims: frozenset[str]
    """Claim names (in the pod's namespace) with the ReadWriteOncePod access mode."""
    conflicting_claim_refs: int

    def clone(self) -> PreFilterState:
        return PreFilterState(self.read_write_once_pod_claims, self.conflicting_claim_refs)

    def update_with_pod(self, other: PodInfo, multiplier: int) -> None:
        """kube's updateWithPod: count ``other``'s claim volumes named like one of ours (by name only, as
        upstream: the other pod's namespace is not compared)."""
        names = self.read_write_once_pod_claims
        if names:
            self.conflicting_claim_refs += multiplier * sum(1 for claim in _claim_names(other.raw) if claim in names)


def _volumes(pod_raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod_raw.get("spec") or {}).get("volumes") or ())


def _claim_names(pod_raw: Mapping[str, Any]) -> list[str]:
    """The claimName of each ``persistentVolumeClaim`` volume (generic ephemeral volumes are not counted,
    as kube-scheduler's PodPVCKeys)."""
    names = []
    for volume in _volumes(pod_raw):
        pvc = volume.get("persistentVolumeClaim")
        if pvc is not None:
            names.append(str(pvc.get("claimName") or ""))
    return names


def needs_restrictions_check(volume: Mapping[str, Any]) -> bool:
    """A GCE PD, AWS EBS, RBD or ISCSI volume: one that may conflict with another pod's on the node."""
    return any(volume.get(source) is not None for source in _RESTRICTED_SOURCES)


def _overlap(first: Sequence[Any], second: Sequence[Any]) -> bool:
    return not set(first).isdisjoint(second)


def is_volume_conflict(volume: Mapping[str, Any], other_pod: Mapping[str, Any]) -> bool:
    """kube-scheduler's isVolumeConflict: does ``volume`` clash with one of ``other_pod``'s volumes?"""
    for existing in _volumes(other_pod):
        disk, other = volume.get("gcePersistentDisk"), existing.get("gcePersistentDisk")
        if disk is not None and other is not None:
            both_read_only = bool(disk.get("readOnly")) and bool(other.get("readOnly"))
            if disk.get("pdName", "") == other.get("pdName", "") and not both_read_only:
                return True
        ebs, other = volume.get("awsElasticBlockStore"), existing.get("awsElasticBlockStore")
        if ebs is not None and other is not None and ebs.get("volumeID", "") == other.get("volumeID", ""):
            return True
        iscsi, other = volume.get("iscsi"), existing.get("iscsi")
        if iscsi is not None and other is not None:
            both_read_only = bool(iscsi.get("readOnly")) and bool(other.get("readOnly"))
            if iscsi.get("iqn", "") == other.get("iqn", "") and not both_read_only:
                return True
        rbd, other = volume.get("rbd"), existing.get("rbd")
        if rbd is not None and other is not None:
            both_read_only = bool(rbd.get("readOnly")) and bool(other.get("readOnly"))
            if (
                _overlap(rbd.get("monitors") or (), other.get("monitors") or ())
                and rbd.get("pool", "") == other.get("pool", "")
                and rbd.get("image", "") == other.get("image", "")
                and not both_read_only
            ):
                return True
    return False


def satisfies_volume_conflicts(pod_raw: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> bool:
    """kube-scheduler's satisfyVolumeConflicts: none of the pod's in-tree disks clashes with ``pods``'."""
    for volume in _volumes(pod_raw):
        if needs_restrictions_check(volume) and any(is_volume_conflict(volume, other) for other in pods):
            return False
    return True


class VolumeRestrictions:
    """In-tree disks shared on a node, and ReadWriteOncePod claims shared anywhere."""

    name = NAME

    def __init__(self, handle: VolumeHandle) -> None:
        self._volumes = handle.volumes

    # ------------------------------------------------------------------ PreFilter

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        volumes = _volumes(pod.raw)
        needs_check = any(needs_restrictions_check(volume) for volume in volumes)
        claims: set[str] = set()
        for name in _claim_names(pod.raw):
            key = f"{pod.namespace}/{name}"
            claim = self._volumes.watched_claim(key)
            if claim is None:
                broken = self._volumes.broken.get(f"persistentvolumeclaims/{key}")
                message = f'persistentvolumeclaim "{name}"' + (f": {broken}" if broken else " not found")
                return None, unschedulable(message, resolvable=False)
            if READ_WRITE_ONCE_POD in claim.access_modes:
                claims.add(claim.name)
        conflicting = 0
        if claims:
            # kube-scheduler's snapshot-wide IsPVCUsedByPods: the cache keeps the count (O(1) per claim).
            in_use = claims_in_use(nodes)
            conflicting = sum(1 for name in claims if in_use.get(f"{pod.namespace}/{name}", 0) > 0)
        if not needs_check and conflicting == 0:
            return None, _SKIP
        state.write(PRE_FILTER_STATE_KEY, PreFilterState(frozenset(claims), conflicting))
        return None, SUCCESS

    # ------------------------------------------------------------------ PreFilterExtensions

    def add_pod(self, state: CycleState, pod: PodInfo, added: PodInfo, node: NodeInfo) -> None:
        computed = state.get(PRE_FILTER_STATE_KEY)
        if isinstance(computed, PreFilterState):
            computed.update_with_pod(added, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, removed: PodInfo, node: NodeInfo) -> None:
        computed = state.get(PRE_FILTER_STATE_KEY)
        if isinstance(computed, PreFilterState):
            computed.update_with_pod(removed, -1)

    # ------------------------------------------------------------------ Filter

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if any(needs_restrictions_check(volume) for volume in _volumes(pod.raw)) and not satisfies_volume_conflicts(
            pod.raw, [other.raw for other in node.pods.values()]
        ):
            return unschedulable(REASON_DISK_CONFLICT)
        computed = state.get(PRE_FILTER_STATE_KEY)
        if not isinstance(computed, PreFilterState):
            return error(f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState')
        if computed.conflicting_claim_refs > 0:
            return unschedulable(REASON_READ_WRITE_ONCE_POD_CONFLICT)
        return SUCCESS

    # ------------------------------------------------------------------ events

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            # spec.volumes is immutable: only deleting a pod frees a disk or a claim.
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), hint=assigned_pod_deleted),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), hint=claim_added),
        ]


def claim_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when the added claim is one of the pod's ``persistentVolumeClaim`` volumes (PreFilter needs it)."""
    meta = (new or {}).get("metadata") or {}
    if meta.get("namespace") != pod.namespace:
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE if meta.get("name") in _claim_names(pod.raw) else QueueingHint.QUEUE_SKIP


def assigned_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when the deleted pod (same namespace) held a disk this pod's clashes with, or used one of the
    same claims (a ReadWriteOncePod claim may be free now; the claim's mode is not looked up, as upstream)."""
    deleted = old or {}
    if ((deleted.get("metadata") or {}).get("namespace") or "default") != pod.namespace:
        return QueueingHint.QUEUE_SKIP
    if not satisfies_volume_conflicts(pod.raw, [deleted]):
        return QueueingHint.QUEUE
    mine = set(_claim_names(pod.raw))
    if any(name in mine for name in _claim_names(deleted)):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: VolumeHandle) -> VolumeRestrictions:
    reject_unknown_args(args, set())
    return VolumeRestrictions(handle)


_check_pre_filter: type[PreFilterPlugin] = VolumeRestrictions
_check_extensions: type[PreFilterExtensions] = VolumeRestrictions
_check_filter: type[FilterPlugin] = VolumeRestrictions
_check_events: type[EnqueueExtensions] = VolumeRestrictions
