"""VolumeZone: a pod's bound PersistentVolumes' zone and region labels must match the node's. Pure.

kube-scheduler's plugin (pkg/scheduler/framework/plugins/volumezone),
message for message:

- PreFilter looks up each ``persistentVolumeClaim`` volume's claim and the
  PV it is bound to, and keeps the PV's topology labels
  (``failure-domain.beta.kubernetes.io/zone|region``,
  ``topology.kubernetes.io/zone|region``; a value may list zones separated by
  ``__``). An unbound claim of a WaitForFirstConsumer class is skipped
  (VolumeBinding picks its PV); any other unbound claim, a missing claim, PV or
  class is UnschedulableAndUnresolvable with kube-scheduler's message. Pods
  without such labels to check skip the plugin.
- Filter: a node with none of the four labels fits (single-zone clusters);
  otherwise each kept label must be on the node (a beta key also matches the
  node's GA key) with one of the PV's values, else UnschedulableAndUnresolvable
  ``node(s) had no available volume zone``.

Claims and PVs are read as watched (kube-scheduler's listers), not as
VolumeBinding assumed them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import EnqueueExtensions, FilterPlugin, PreFilterPlugin, PreFilterResult
from usher.core.framework.names import VOLUME_ZONE
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, Code, PodInfo, QueueingHint, Status, unschedulable
from usher.core.volumes.model import WAIT_FOR_FIRST_CONSUMER
from usher.core.volumes.state import VolumeState

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = VOLUME_ZONE
PRE_FILTER_STATE_KEY = "PreFilter" + NAME
REASON_CONFLICT = "node(s) had no available volume zone"

LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_REGION = "topology.kubernetes.io/region"
LABEL_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
LABEL_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
TOPOLOGY_LABELS = (LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION)
"""In kube-scheduler's order (the order PV labels are checked in)."""
_GA = {LABEL_BETA_ZONE: LABEL_ZONE, LABEL_BETA_REGION: LABEL_REGION}
_SKIP = Status(Code.SKIP)


class VolumeHandle(Protocol):
    """What VolumeZone needs from the framework handle."""

    @property
    def volumes(self) -> VolumeState: ...


@dataclass(frozen=True, slots=True)
class PVTopology:
    """One topology label of a bound PV: the label and the zones (or regions) its value names."""

    volume: str
    key: str
    values: frozenset[str]


def label_zones(value: str) -> frozenset[str] | None:
    """cloud-provider's LabelZonesToSet: ``a__b`` -> {a, b}, each trimmed; None if one is empty."""
    zones = [zone.strip() for zone in value.split("__")]
    return None if any(not zone for zone in zones) else frozenset(zones)


def pv_topologies(raw: Mapping[str, Any]) -> list[PVTopology]:
    """kube-scheduler's getPVTopologies: the PV's topology labels with parseable values, in label order."""
    meta = raw.get("metadata") or {}
    labels = meta.get("labels") or {}
    found = []
    for key in TOPOLOGY_LABELS:
        value = labels.get(key)
        if value is None:
            continue
        zones = label_zones(str(value))
        if zones is not None:  # an unparseable value is ignored, as upstream
            found.append(PVTopology(str(meta.get("name") or ""), key, zones))
    return found


def _claim_names(pod_raw: Mapping[str, Any]) -> list[str]:
    names = []
    for volume in (pod_raw.get("spec") or {}).get("volumes") or ():
        pvc = volume.get("persistentVolumeClaim")
        if pvc is not None:
            names.append(str(pvc.get("claimName") or ""))
    return names


class VolumeZone:
    """Bound PVs' zone and region labels must match the node's."""

    name = NAME

    def __init__(self, handle: VolumeHandle) -> None:
        self._volumes = handle.volumes

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        topologies, status = self._topologies(pod)
        if not status.ok:
            return None, status
        if not topologies:
            return None, _SKIP
        state.write(PRE_FILTER_STATE_KEY, tuple(topologies))
        return None, SUCCESS

    def _topologies(self, pod: PodInfo) -> tuple[list[PVTopology], Status]:
        """kube-scheduler's getPVbyPod."""
        found: list[PVTopology] = []
        for name in _claim_names(pod.raw):
            if not name:
                return [], unschedulable("PersistentVolumeClaim had no name", resolvable=False)
            key = f"{pod.namespace}/{name}"
            claim = self._volumes.watched_claim(key)
            if claim is None:
                return [], self._missing("persistentvolumeclaims", key, f'persistentvolumeclaim "{name}"')
            if not claim.volume_name:
                if not claim.class_name:
                    message = "PersistentVolumeClaim had no pv name and storageClass name"
                    return [], unschedulable(message, resolvable=False)
                storage_class = self._volumes.classes.get(claim.class_name)
                if storage_class is None:
                    what = f'storageclass.storage.k8s.io "{claim.class_name}"'
                    return [], self._missing("storageclasses", claim.class_name, what)
                mode = storage_class.raw.get("volumeBindingMode")
                if mode is None:
                    message = f'VolumeBindingMode not set for StorageClass "{claim.class_name}"'
                    return [], unschedulable(message, resolvable=False)
                if mode == WAIT_FOR_FIRST_CONSUMER:
                    continue  # unbound: VolumeBinding decides where its PV goes
                return [], unschedulable("PersistentVolume had no name", resolvable=False)
            volume = self._volumes.watched_volume(claim.volume_name)
            if volume is None:
                what = f'persistentvolume "{claim.volume_name}"'
                return [], self._missing("persistentvolumes", claim.volume_name, what)
            found.extend(pv_topologies(volume.raw))
        return found, SUCCESS

    def _missing(self, kind: str, key: str, what: str) -> Status:
        """The lister's NotFound (or why usher could not read the object)."""
        broken = self._volumes.broken.get(f"{kind}/{key}")
        return unschedulable(f"{what}: {broken}" if broken else f"{what} not found", resolvable=False)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not (pod.raw.get("spec") or {}).get("volumes"):
            return SUCCESS
        topologies: tuple[PVTopology, ...] | None = state.get(PRE_FILTER_STATE_KEY)
        if topologies is None:  # PreFilter disabled in the profile: work it out here, as upstream
            found, status = self._topologies(pod)
            if not status.ok:
                return status
            topologies = tuple(found)
        labels = node.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return SUCCESS  # a node without topology labels: single-zone cluster
        for topology in topologies:
            value = labels.get(topology.key)
            if value is None:
                value = labels.get(_GA.get(topology.key, topology.key))
            if value is None or value not in topology.values:
                return unschedulable(REASON_CONFLICT, resolvable=False)
        return SUCCESS

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            # volumeBindingMode is immutable: only an added WaitForFirstConsumer class can help.
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, ActionType.ADD), hint=class_added),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update), hint=claim_changed),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME, add_update), hint=volume_changed),
        ]


def class_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue for an added WaitForFirstConsumer class (its unbound claims no longer block the pod)."""
    mode = (new or {}).get("volumeBindingMode")
    return QueueingHint.QUEUE if mode == WAIT_FOR_FIRST_CONSUMER else QueueingHint.QUEUE_SKIP


def claim_changed(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when the claim added or updated is one of the pod's ``persistentVolumeClaim`` volumes."""
    meta = (new or {}).get("metadata") or {}
    if new is None or meta.get("namespace") != pod.namespace:
        return QueueingHint.QUEUE_SKIP
    return QueueingHint.QUEUE if meta.get("name") in _claim_names(pod.raw) else QueueingHint.QUEUE_SKIP


def volume_changed(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue for a new PV, or one whose topology labels changed."""
    if old is None:
        return QueueingHint.QUEUE
    changed = pv_topologies(old) != pv_topologies(new or {})
    return QueueingHint.QUEUE if changed else QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: VolumeHandle) -> VolumeZone:
    reject_unknown_args(args, set())
    return VolumeZone(handle)


_check_pre_filter: type[PreFilterPlugin] = VolumeZone
_check_filter: type[FilterPlugin] = VolumeZone
_check_events: type[EnqueueExtensions] = VolumeZone
