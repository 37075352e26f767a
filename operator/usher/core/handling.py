"""Watch events -> cache updates, queue updates and cluster events. Pure.

Every pod goes to the cache or the queue, never both:
- assigned (``spec.nodeName`` set), non-terminal pods, whoever scheduled
  them, are counted in the cache; their add/update/delete is a cluster event
  (AssignedPodAdd ...) offered to the unschedulable pods;
- unscheduled pods of our scheduler names are queued (Add/Update/Delete);
- nodes update the cache and raise NodeAdd, NodeDelete or one event per
  detected change (heartbeats raise none);
- PodDisruptionBudgets are kept in the cache for preemption, Service
  selectors for PodTopologySpread's default constraints;
- PodGroups (scheduling.k8s.io/v1beta1) are kept in the cache's pod-group
  states and raise PodGroupAdd/Update/Delete; the members of each group are
  tracked there as they are queued, assumed, bound and gone, and a new
  unscheduled member raises UnscheduledPodAdd (it may complete its gang);
  Workloads are kept for ``usher explain`` only;
- everything else is ignored.

Pods are keyed by namespace/name, but kopf serializes events per object
(UID), not per name: when a pod is deleted and another is created with the
same name, the new pod's ADDED may arrive before the old pod's last events.
Each key remembers the UID and resourceVersion it reflects; an event of
another UID with an older resourceVersion is stale and ignored, one with a
newer (or incomparable) resourceVersion ends the old pod first (uncounted,
out of the queue) and then starts the new one.

A pod the API server served but usher cannot parse (a request quantity it
does not understand, or one beyond int64) is recorded in ``malformed`` for
the runtime to report on that pod; a node's allocatable entry usher cannot
count is left out (the node offers none of it) and logged. Nothing here
raises on bad input.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.cache import Cache, DisruptionBudget
from usher.core.dra.model import Claim
from usher.core.dra.state import DraState
from usher.core.events import (
    ASSIGNED_POD_ADD,
    ASSIGNED_POD_DELETE,
    NODE_ADD,
    NODE_DELETE,
    POD_ADD,
    POD_GROUP_ADD,
    POD_GROUP_DELETE,
    POD_GROUP_UPDATE,
    UNSCHEDULED_POD_ADD,
    UNSCHEDULED_POD_DELETE,
    UNSCHEDULED_POD_UPDATE,
    ActionType,
    ClusterEvent,
    Resource,
    node_update_events,
    pod_update_events,
)
from usher.core.podgroups import Member
from usher.core.queue import SchedulingQueue
from usher.core.resources import QuantityError, to_amount
from usher.core.types import PodInfo, PodKey, pod_key
from usher.core.volumes.state import VolumeState

logger = logging.getLogger(__name__)

#: The cluster event each watched storage kind raises (kube-scheduler's resources of the same names).
VOLUME_KINDS: dict[str, Resource] = {
    "persistentvolumeclaims": Resource.PERSISTENT_VOLUME_CLAIM,
    "persistentvolumes": Resource.PERSISTENT_VOLUME,
    "storageclasses": Resource.STORAGE_CLASS,
    "csinodes": Resource.CSI_NODE,
    "csidrivers": Resource.CSI_DRIVER,
    "csistoragecapacities": Resource.CSI_STORAGE_CAPACITY,
}

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Incarnation:
    """Which pod of a name an event describes: its UID and resourceVersion."""

    uid: str
    version: str

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> Incarnation:
        return cls(str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""))

    def superseded_by(self, other: Incarnation) -> bool | None:
        """None: the same pod. True: ``other`` is a later pod of the name. False: an earlier one.

        resourceVersions are etcd revisions in every API server usher runs against; when
        either one is not a number the later event wins, as a single ordered watch would have it.
        """
        if not self.uid or not other.uid or self.uid == other.uid:
            return None
        if self.version.isdigit() and other.version.isdigit():
            return int(other.version) > int(self.version)
        return True


@dataclass(frozen=True, slots=True)
class Malformed:
    """A pod of ours the API server served but usher cannot parse, and why: for the runtime to report."""

    pod: Mapping[str, Any]
    message: str


@dataclass
class EventHandlers:
    """Turns each watch event into cache updates, queue updates and cluster events (see the module docstring)."""

    cache: Cache
    queue: SchedulingQueue
    scheduler_names: Collection[str]
    dra: DraState = field(default_factory=DraState)
    volumes: VolumeState = field(default_factory=VolumeState)
    malformed: list[Malformed] = field(default_factory=list)
    _reflected: dict[PodKey, Incarnation] = field(default_factory=dict)
    _uncountable: dict[str, str] = field(default_factory=dict)
    """Node name -> why some of its allocatable is left out (logged when it changes)."""

    def __post_init__(self) -> None:
        self.dra.on_assumed = self._claim_assumed

    def _claim_assumed(self, old: Claim | None, new: Claim) -> None:
        """A claim usher wrote (allocation, reservation): its cluster event now, as kube-scheduler's assume
        cache raises it on Assume, so pods waiting for it need not wait for the watch."""
        action = ActionType.ADD if old is None else ActionType.UPDATE
        self.queue.move_all(ClusterEvent(Resource.RESOURCE_CLAIM, action), old.raw if old else None, new.raw)

    def is_stale(self, raw: Mapping[str, Any]) -> bool:
        """Whether this pod event belongs to an earlier pod of the same name than the one reflected."""
        meta = raw.get("metadata") or {}
        key = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        known = self._reflected.get(key)
        return known is not None and known.superseded_by(Incarnation.of(meta)) is False

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> str:
        """Apply one pod watch event; returns the event label (for event_handling_duration_seconds)."""
        meta = raw.get("metadata") or {}
        key = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        incoming = Incarnation.of(meta)
        known = self._reflected.get(key)
        replaced = known.superseded_by(incoming) if known is not None else None
        if replaced is False:
            return ""  # an earlier pod of this name, after its successor's events
        if replaced:
            # The pod we reflect was deleted and its successor's event came first: end the old one now.
            self.dra.index.update_pod(key, key.split("/", 1)[0], None)
            self._pod_gone(key)
        if event_type == DELETED:
            self._reflected.pop(key, None)
            self.dra.index.update_pod(key, key.split("/", 1)[0], None)
            return self._pod_gone(key)
        if incoming.version and known is not None and replaced is None and known.version == incoming.version:
            return ""  # a re-delivery of what we already reflect
        self._reflected[key] = incoming
        try:
            pod = PodInfo.from_api(raw)
        except ValueError as exc:
            self._pod_gone(key)
            if (raw.get("spec") or {}).get("schedulerName") in self.scheduler_names:
                self.malformed.append(Malformed(pod=raw, message=str(exc)))
            return "PodMalformed"
        self.dra.index.update_pod(key, pod.namespace, None if pod.assigned else raw)
        if pod.assigned and not pod.terminal:
            return self._assigned(pod)
        if pod.assigned:  # terminal: its resources are free again
            return self._pod_gone(key)
        return self._unscheduled(pod)

    def _assigned(self, pod: PodInfo) -> str:
        self.queue.delete(pod.key, bound_to=pod.node_name)
        old = self.cache.pod(pod.key)
        was_assumed = self.cache.is_assumed(pod.key)
        self.cache.add_or_update_pod(pod)
        if old is None or was_assumed:
            self.queue.move_all(ASSIGNED_POD_ADD, None, pod.raw)
            return ASSIGNED_POD_ADD.label
        for event in pod_update_events(old.raw, pod.raw, assigned=True, requests=(old.requests, pod.requests)):
            self.queue.move_all(event, old.raw, pod.raw)
        return "AssignedPodUpdate"

    def _unscheduled(self, pod: PodInfo) -> str:
        if self.cache.is_assumed(pod.key):
            # Placed by us, its binding on the way or done: the watch has not caught up yet.
            # Queueing it again would place it twice.
            return ""
        ours = pod.scheduler_name in self.scheduler_names and not pod.deleting
        queued = self.queue.get(pod.key)
        if not ours:
            self.queue.delete(pod.key)
            self.cache.pod_groups.drop(pod.key)
            return ""
        # Counted in its group before PreEnqueue runs: it may be the member that completes the quorum.
        self.cache.pod_groups.track(pod, Member.UNSCHEDULED)
        if queued is None:
            self.queue.add(pod)
            if pod.group_key is not None and self.cache.pod_groups.enabled:
                self.queue.move_all(UNSCHEDULED_POD_ADD, None, pod.raw)
            return POD_ADD.label
        events = pod_update_events(queued.pod.raw, pod.raw, assigned=False)
        self.queue.update(queued.pod, pod, events)
        return UNSCHEDULED_POD_UPDATE.label

    def _pod_gone(self, key: PodKey) -> str:
        """Deleted, or terminal: uncount it (assumed or not) and forget it in the queue."""
        old = self.cache.pod(key)
        queued = self.queue.delete(key)
        self.cache.pod_groups.drop(key)
        if old is not None:
            self.cache.remove_pod(key)
            self.queue.move_all(ASSIGNED_POD_DELETE, old.raw, None)
            return ASSIGNED_POD_DELETE.label
        return UNSCHEDULED_POD_DELETE.label if queued is not None else ""

    def on_disruption_budget(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """PodDisruptionBudgets only inform preemption's choice of victims: no pod is moved by one."""
        budget = DisruptionBudget.from_api(raw)
        if event_type == DELETED:
            self.cache.remove_disruption_budget(budget.namespace, budget.name)
        else:
            self.cache.set_disruption_budget(budget)

    def on_service(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """Service selectors only shape PodTopologySpread's default constraints: no pod is moved by one."""
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        if event_type == DELETED:
            self.cache.remove_service(namespace, name)
        else:
            self.cache.set_service(namespace, name, (raw.get("spec") or {}).get("selector"))

    def on_pod_group(self, event_type: str | None, raw: Mapping[str, Any]) -> str:
        """A PodGroup: update the pod-group states, raise PodGroupAdd, PodGroupUpdate or PodGroupDelete."""
        old, new = self.cache.pod_groups.on_pod_group(event_type == DELETED, raw)
        if old is None and new is None:
            return ""
        event = POD_GROUP_ADD if old is None else POD_GROUP_DELETE if new is None else POD_GROUP_UPDATE
        self.queue.move_all(event, old.raw if old is not None else None, new.raw if new is not None else None)
        return event.label

    def on_workload(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """Workloads only inform ``usher explain``: no pod is moved by one."""
        self.cache.pod_groups.on_workload(event_type == DELETED, raw)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> str:
        name = str((raw.get("metadata") or {}).get("name") or "")
        if event_type == DELETED:
            # Offered as kube-scheduler does (old = the node, new = None): a node leaving a topology
            # domain can lower its skew (PodTopologySpread), so waiting for the 5-minute flush is wrong.
            cached = self.cache.node(name)
            gone = cached.raw if cached is not None else raw
            self._uncountable.pop(name, None)
            self.cache.remove_node(name)
            self.queue.move_all(NODE_DELETE, gone, None)
            return NODE_DELETE.label
        old = self.cache.node(name)
        old_raw = old.raw if old is not None else None
        raw = self._countable(name, raw)
        self.cache.add_or_update_node(raw)
        if old_raw is None:
            self.queue.move_all(NODE_ADD, None, raw)
            return NODE_ADD.label
        for event in node_update_events(old_raw, raw):
            self.queue.move_all(event, old_raw, raw)
        return "NodeUpdate"

    def _countable(self, name: str, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        """The node as the cache counts it: without the allocatable entries usher cannot count (a quantity beyond
        int64, which the API server stores but kube-scheduler's arithmetic overflows on), as if it offered none."""
        status = raw.get("status") or {}
        allocatable = status.get("allocatable") or {}
        uncountable: dict[str, str] = {}
        for resource, value in allocatable.items():
            try:
                to_amount(resource, value)
            except QuantityError as exc:
                uncountable[resource] = str(exc)
        why = "; ".join(f"{resource}: {message}" for resource, message in sorted(uncountable.items()))
        if self._uncountable.get(name, "") != why:
            if why:
                logger.warning("node %s: allocatable left out: %s", name, why)
                self._uncountable[name] = why
            else:
                del self._uncountable[name]
        if not uncountable:
            return raw
        kept = {resource: value for resource, value in allocatable.items() if resource not in uncountable}
        return {**raw, "status": {**status, "allocatable": kept}}

    def on_volume(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> str:
        """PVCs, PVs, storage classes and CSI objects: update the volume state, raise the cluster event."""
        old, new = self.volumes.on_event(kind, event_type == DELETED, raw)
        if old is None and new is None:
            return ""
        action = ActionType.ADD if old is None else ActionType.DELETE if new is None else ActionType.UPDATE
        event = ClusterEvent(VOLUME_KINDS[kind], action)
        self.queue.move_all(event, old.raw if old is not None else None, new.raw if new is not None else None)
        return event.label

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> str:
        """ResourceClaims, ResourceSlices, DeviceClasses: update the DRA state, raise the cluster event."""
        deleted = event_type == DELETED
        if kind == "resourceclaims":
            old, new = self.dra.on_claim(deleted, raw)
            if old is None and new is None:
                return ""
            action = ActionType.ADD if old is None else ActionType.DELETE if new is None else ActionType.UPDATE
            event = ClusterEvent(Resource.RESOURCE_CLAIM, action)
            self.queue.move_all(event, old.raw if old else None, new.raw if new else None)
            return event.label
        name = str((raw.get("metadata") or {}).get("name"))
        if kind == "devicetaintrules":
            # As kube's slice tracker: a rule is seen as an update of each slice whose devices' taints it changed.
            event = ClusterEvent(Resource.RESOURCE_SLICE, ActionType.UPDATE)
            for patched in self.dra.on_taint_rule(deleted, raw):
                self.queue.move_all(event, patched.raw, patched.raw)
            return "DeviceTaintRuleChange"
        if kind == "resourceslices":
            old_slice = self.dra.slices.get(name)
            self.dra.on_slice(deleted, raw)
            resource = Resource.RESOURCE_SLICE
            old_raw = old_slice.raw if old_slice is not None else None
        else:
            old_class = self.dra.classes.get(name)
            self.dra.on_class(deleted, raw)
            resource = Resource.DEVICE_CLASS
            old_raw = old_class.raw if old_class is not None else None
        action = ActionType.DELETE if deleted else ActionType.ADD if old_raw is None else ActionType.UPDATE
        event = ClusterEvent(resource, action)
        self.queue.move_all(event, old_raw, None if deleted else raw)
        return event.label
