"""VolumeBinding: a pod's PersistentVolumeClaims bound, bindable or provisionable on the node. Pure.

kube-scheduler's plugin (pkg/scheduler/framework/plugins/volumebinding),
message for message:

- PreFilter: every claim the pod uses exists, is not lost or being deleted
  (a generic ephemeral volume's claim, made by kube-controller-manager, must
  exist and be the pod's); an unbound claim of an Immediate class makes the
  pod unschedulable until the PV controller binds it. Pods without claims skip
  the plugin.
- Filter: bound claims' PVs must exist and their node affinity admit the node;
  each unbound WaitForFirstConsumer claim needs an available PV of its class
  that fits the node (smallest first, one PV per claim) or a class that can
  provision there (a real provisioner, ``allowedTopologies``, and, when the
  CSIDriver asks for capacity tracking, a CSIStorageCapacity reachable from
  the node with room for the request). A claim already carrying another
  node's ``selected-node`` rules this node out.
- Score (StorageCapacityScoring, on as in kube-scheduler 1.37): the ``shape``
  of VolumeBindingArgs over the requested/capacity ratio of the static PVs
  chosen, or else of the CSIStorageCapacity of the provisioning classes.
- Reserve: the PVs chosen are assumed bound to their claims, the claims to
  provision assumed annotated with the node (core/volumes/state.py), so the
  next pod cannot take the same PV; Unreserve restores them.
- PreBind: the PVs' claimRefs and the claims' ``selected-node`` are written
  (through the dispatcher, resourceVersion preconditions), then the plugin
  waits, without blocking the loop, until kube-controller-manager's PV
  controller (and the provisioner) bound every claim, up to
  ``bindTimeoutSeconds``; a provisioner that gave up (the annotation removed)
  or a PV that does not fit the node fails the binding cycle, with
  kube-scheduler's errors.

Differences: PVs of in-tree plugins migrated to CSI are not translated (their
node affinity is checked as written); the volume scheduling metrics are not
kept.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.framework.interface import (
    FilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from usher.core.framework.names import VOLUME_BINDING
from usher.core.hints import ClusterEventWithHint
from usher.core.plugins.shapes import MAX_CUSTOM_PRIORITY_SCORE, Shape, parse_shape, shape_score
from usher.core.types import (
    SUCCESS,
    Code,
    NodeName,
    PodInfo,
    QueueingHint,
    Status,
    error,
    unschedulable,
    version_not_older,
)
from usher.core.volumes.model import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_MIGRATED_PLUGINS,
    ANN_SELECTED_NODE,
    NOT_SUPPORTED_PROVISIONER,
    Capacity,
    Claim,
    Volume,
    VolumeModelError,
    find_matching_volume,
    parse_capacity,
    parse_claim,
    parse_volume,
)
from usher.core.volumes.podvolumes import ephemeral_owner_error, pod_claim_refs
from usher.core.volumes.ports import VolumeWriter
from usher.core.volumes.state import VolumeState

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = VOLUME_BINDING
STATE_KEY = "VolumeBinding/state"
DEFAULT_BIND_TIMEOUT = 600
DEFAULT_SHAPE: Shape = ((0, MAX_CUSTOM_PRIORITY_SCORE), (100, 0))

REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
REASON_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


class VolumeHandle(Protocol):
    """What VolumeBinding needs from the framework handle."""

    @property
    def volumes(self) -> VolumeState: ...

    @property
    def volume_writer(self) -> VolumeWriter: ...

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        """The node's labels as cached (None when the node is gone)."""
        ...


@dataclass(frozen=True, slots=True)
class VolumeBindingArgs:
    """kube-scheduler's VolumeBindingArgs (seconds; shape points as (utilization, score))."""

    bind_timeout: float = DEFAULT_BIND_TIMEOUT
    shape: Shape = DEFAULT_SHAPE


def parse_args(args: Mapping[str, Any]) -> VolumeBindingArgs:
    """Validated as kube-scheduler's ValidateVolumeBindingArgs with StorageCapacityScoring on."""
    reject_unknown_args(args, {"bindTimeoutSeconds", "shape"})
    timeout = args.get("bindTimeoutSeconds", DEFAULT_BIND_TIMEOUT)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0:
        raise PluginArgsError(
            "bindTimeoutSeconds", f"invalid BindTimeoutSeconds {timeout!r}, should not be a negative value"
        )
    shape = parse_shape(args["shape"], "shape") if args.get("shape") else DEFAULT_SHAPE
    return VolumeBindingArgs(float(timeout), shape)


@dataclass(slots=True)
class PodVolumes:
    """What one node needs done for the pod: PVs to bind to claims, claims to provision there."""

    static: list[tuple[Claim, Volume]] = field(default_factory=list)
    provisions: list[tuple[Claim, Capacity | None]] = field(default_factory=list)


@dataclass(slots=True)
class _CycleData:
    bound: list[Claim]
    delayed: list[Claim]
    """Unbound claims of WaitForFirstConsumer classes."""
    by_node: dict[str, PodVolumes] = field(default_factory=dict)
    all_bound: bool = False
    assumed_claims: list[str] = field(default_factory=list)
    assumed_volumes: list[str] = field(default_factory=list)

    def clone(self) -> _CycleData:
        return self  # as kube-scheduler's: shared by preemption's dry runs, which only add entries


class VolumeBinding:
    """Binds a pod's claims: checks in Filter, assumes in Reserve, writes and waits in PreBind."""

    name = NAME

    def __init__(self, handle: VolumeHandle, args: VolumeBindingArgs, timer: Callable[[], float]) -> None:
        self._handle = handle
        self._volumes = handle.volumes
        self.args = args
        self._timer = timer

    # ------------------------------------------------------------------ PreFilter / Filter

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        refs = pod_claim_refs(pod.raw)
        if not refs:
            state.write(STATE_KEY, _CycleData([], [], all_bound=True))
            return None, Status(Code.SKIP)
        bound: list[Claim] = []
        delayed: list[Claim] = []
        immediate = False
        for ref in refs:
            claim = self._volumes.claim(f"{pod.namespace}/{ref.claim}")
            if claim is None:
                broken = self._volumes.broken.get(f"persistentvolumeclaims/{pod.namespace}/{ref.claim}")
                if broken:
                    message = f'persistentvolumeclaim "{ref.claim}": {broken}'
                elif ref.ephemeral:
                    message = (
                        f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{ref.claim}"'
                    )
                else:
                    message = f'persistentvolumeclaim "{ref.claim}" not found'
                return None, unschedulable(message, resolvable=False)
            if claim.phase == "Lost":
                message = (
                    f'persistentvolumeclaim "{claim.name}" bound to non-existent persistentvolume "{claim.volume_name}"'
                )
                return None, unschedulable(message, resolvable=False)
            if claim.deleting:
                return None, unschedulable(f'persistentvolumeclaim "{claim.name}" is being deleted', resolvable=False)
            if ref.ephemeral and (why := ephemeral_owner_error(pod.raw, claim)):
                return None, unschedulable(why, resolvable=False)
            if claim.fully_bound:
                bound.append(claim)
                continue
            storage_class = self._volumes.classes.get(claim.class_name) if claim.class_name else None
            if storage_class is not None and storage_class.delays_binding and not claim.volume_name:
                delayed.append(claim)
            else:
                immediate = True
        if immediate:
            return None, unschedulable(UNBOUND_IMMEDIATE, resolvable=False)
        state.write(STATE_KEY, _CycleData(bound, delayed))
        return None, SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return error("VolumeBinding: no PreFilter state")
        labels = node.labels
        reasons: list[str] = []
        volumes = PodVolumes()
        for claim in data.bound:
            volume = self._volumes.volume(claim.volume_name)
            if volume is None:
                reasons.append(REASON_PV_NOT_EXIST)
                break
            if not volume.fits_node(labels):
                reasons.append(REASON_NODE_CONFLICT)
                break
        if data.delayed:
            status = self._find_for_delayed(data.delayed, node, volumes, reasons)
            if status is not None:
                return status
        if reasons:
            return unschedulable(*_ordered(reasons), resolvable=False)
        data.by_node[node.name] = volumes
        return SUCCESS

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """``filter`` for many nodes. A pod whose claims are all bound (the common case) has its PVs looked
        up once, only the PVs with node affinity are checked per node, and the nodes that pass share one
        empty PodVolumes: nothing to bind, so nothing ever changes it (Reserve puts a new one in place)."""
        data: _CycleData | None = state.get(STATE_KEY)
        volumes = [self._volumes.volume(claim.volume_name) for claim in data.bound] if data is not None else []
        if data is None or data.delayed or None in volumes:
            return [_passed(self.filter(state, pod, node)) for node in nodes]
        pinned = [volume for volume in volumes if volume is not None and volume.node_affinity is not None]
        nothing = PodVolumes()
        by_node = data.by_node
        conflict: Status | None = None
        results: list[Status | None] = []
        for node in nodes:
            if pinned and not all(volume.fits_node(node.labels) for volume in pinned):
                conflict = conflict or unschedulable(REASON_NODE_CONFLICT, resolvable=False)
                results.append(conflict)
                continue
            by_node[node.name] = nothing
            results.append(None)
        return results

    def _find_for_delayed(
        self, delayed: Sequence[Claim], node: NodeInfo, volumes: PodVolumes, reasons: list[str]
    ) -> Status | None:
        to_match: list[Claim] = []
        to_provision: list[Claim] = []
        for claim in delayed:
            selected = claim.selected_node
            if selected is not None:
                if selected != node.name:
                    reasons.append(REASON_BIND_CONFLICT)
                    return None
                to_provision.append(claim)
            else:
                to_match.append(claim)
        chosen: set[str] = set()
        for claim in sorted(to_match, key=lambda c: c.request):
            volume = find_matching_volume(claim, self._volumes.volumes_of_class(claim.class_name), node.labels, chosen)
            if volume is None:
                to_provision.append(claim)  # provisioning decides whether this node will do
                continue
            chosen.add(volume.name)
            volumes.static.append((claim, volume))
        for claim in to_provision:
            if not claim.class_name:
                return error(f'no class for claim "{claim.key}"')
            storage_class = self._volumes.classes.get(claim.class_name)
            if storage_class is None:
                return error(f'failed to find storage class "{claim.class_name}"')
            provisioner = storage_class.provisioner
            if not provisioner or provisioner == NOT_SUPPORTED_PROVISIONER or not storage_class.allows(node.labels):
                reasons.append(REASON_BIND_CONFLICT)
                return None
            enough, capacity = self._capacity_for(claim, storage_class.name, provisioner, node.labels)
            if not enough:
                reasons.append(REASON_NOT_ENOUGH_SPACE)
                return None
            volumes.provisions.append((claim, capacity))
        return None

    def _capacity_for(
        self, claim: Claim, class_name: str, provisioner: str, labels: Mapping[str, str]
    ) -> tuple[bool, Capacity | None]:
        """kube-scheduler's hasEnoughCapacity: only when the claim asks for storage and its CSIDriver
        tracks capacity must a reachable CSIStorageCapacity of the class have room for it."""
        if "storage" not in ((claim.raw.get("spec") or {}).get("resources") or {}).get("requests", {}):
            return True, None
        driver = self._volumes.csi_drivers.get(provisioner)
        if driver is None or not driver.storage_capacity:
            return True, None
        for capacity in self._volumes.capacities.values():
            if (
                capacity.class_name == class_name
                and capacity.limit is not None
                and capacity.limit >= claim.request
                and capacity.reachable_from(labels)
            ):
                return True, capacity
        return False, None

    # ------------------------------------------------------------------ Score

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None or not data.by_node or not data.delayed:
            # Only a delayed claim gives a node something to score (a PV chosen for it, or room to provision):
            # with none, every node would score 0.
            return Status(Code.SKIP)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        data: _CycleData | None = state.get(STATE_KEY)
        volumes = data.by_node.get(node.name) if data is not None else None
        if volumes is None:
            return 0, SUCCESS
        by_class: dict[str, list[Decimal]] = {}
        if volumes.static:
            for claim, volume in volumes.static:
                totals = by_class.setdefault(volume.class_name, [Decimal(0), Decimal(0)])
                totals[0] += claim.request
                totals[1] += volume.capacity
        else:
            for claim, capacity in volumes.provisions:
                if capacity is None:
                    continue
                totals = by_class.setdefault(claim.class_name, [Decimal(0), Decimal(0)])
                totals[1] = capacity.capacity or Decimal(0)
                totals[0] += claim.request
        if not by_class:
            return 0, SUCCESS
        total = 0
        for requested, room in by_class.values():
            full = room == 0 or requested > room
            total += shape_score(self.args.shape, 100 if full else int(requested * 100 // room))
        return math.floor(total / len(by_class) + 0.5), SUCCESS

    # ------------------------------------------------------------------ Reserve / Unreserve

    def reserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return SUCCESS
        volumes = data.by_node.get(node)
        if volumes is None or self._all_bound(pod):
            data.all_bound = True
            return SUCCESS
        try:
            static: list[tuple[Claim, Volume]] = []
            for claim, chosen in volumes.static:
                raw = _bound_volume(chosen, claim)
                if raw is not None:
                    chosen = self._volumes.assume_volume(raw)  # noqa: PLW2901 - the assumed copy is what PreBind writes
                    data.assumed_volumes.append(chosen.name)
                static.append((claim, chosen))
            provisions: list[tuple[Claim, Capacity | None]] = []
            for claim, capacity in volumes.provisions:
                raw = copy.deepcopy(dict(claim.raw))
                raw.setdefault("metadata", {}).setdefault("annotations", {})[ANN_SELECTED_NODE] = node
                provisions.append((self._volumes.assume_claim(raw), capacity))
                data.assumed_claims.append(claim.key)
        except VolumeModelError as exc:
            self._restore(data)
            return error(str(exc))
        data.by_node[node] = PodVolumes(static, provisions)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> None:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is not None:
            self._restore(data)

    def _restore(self, data: _CycleData) -> None:
        for name in data.assumed_volumes:
            self._volumes.restore_volume(name)
        for key in data.assumed_claims:
            self._volumes.restore_claim(key)
        data.assumed_volumes.clear()
        data.assumed_claims.clear()

    def _all_bound(self, pod: PodInfo) -> bool:
        """kube-scheduler's arePodVolumesBound, on the claims as they are now (assumed included)."""
        for ref in pod_claim_refs(pod.raw):
            claim = self._volumes.claim(f"{pod.namespace}/{ref.claim}")
            if claim is None or not claim.fully_bound:
                return False
        return True

    # ------------------------------------------------------------------ PreBind

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None or data.all_bound:
            return SUCCESS
        volumes = data.by_node.get(node)
        if volumes is None:
            return error(f'no pod volume found for node "{node}"')
        writer = self._handle.volume_writer
        written_volumes: list[tuple[Claim, Volume]] = []
        written_claims: list[Claim] = []
        try:
            for claim, volume in volumes.static:
                result = await writer.update_volume(volume.raw)
                if not result.ok:
                    self._restore(data)
                    return error(f"binding volumes: persistentvolume {volume.name}: {result.message}")
                written_volumes.append((claim, parse_volume(result.body)))
            for claim, _ in volumes.provisions:
                result = await writer.update_claim(claim.raw)
                if not result.ok:
                    self._restore(data)
                    return error(f"binding volumes: persistentvolumeclaim {claim.key}: {result.message}")
                written_claims.append(parse_claim(result.body))
        except VolumeModelError as exc:
            return error(f"binding volumes: {exc}")
        deadline = self._timer() + self.args.bind_timeout
        while True:
            done, failure = self._check_bindings(node, written_volumes, written_claims)
            if failure:
                return error(f"binding volumes: {failure}")
            if done:
                return SUCCESS
            left = deadline - self._timer()
            if left <= 0 or not await writer.changed(left):
                return error("binding volumes: context deadline exceeded")

    def _check_bindings(
        self, node: str, volumes: Sequence[tuple[Claim, Volume]], claims: Sequence[Claim]
    ) -> tuple[bool, str]:
        """kube-scheduler's checkBindings on the watched objects: (all bound, why it failed)."""
        labels = self._handle.node_labels(node)
        if labels is None:
            return False, f'failed to get node "{node}": not found'
        for bound_claim, written in volumes:
            volume = self._volumes.watched_volume(written.name)
            if volume is None:
                return False, f'failed to check binding: persistentvolume "{written.name}" not found'
            claim = self._volumes.watched_claim(bound_claim.key)
            if claim is None:
                return False, f'failed to check binding: persistentvolumeclaim "{bound_claim.key}" not found'
            if not version_not_older(volume.version, written.version):
                return False, ""
            if not volume.fits_node(labels):
                return False, f'pv "{volume.name}" node affinity doesn\'t match node "{node}"'
            if not volume.claim_ref or not volume.claim_ref.get("uid"):
                return False, f'ClaimRef got reset for pv "{volume.name}"'
            if not claim.fully_bound:
                return False, ""
        for written_claim in claims:
            claim = self._volumes.watched_claim(written_claim.key)
            if claim is None:
                return False, f'failed to check provisioning pvc: persistentvolumeclaim "{written_claim.key}" not found'
            if not version_not_older(claim.version, written_claim.version):
                return False, ""
            if claim.selected_node != node:
                return False, f'provisioning failed for PVC "{claim.name}"'
            if claim.volume_name:
                volume = self._volumes.watched_volume(claim.volume_name)
                if volume is None:
                    return False, ""
                if not volume.fits_node(labels):
                    return False, f'pv "{volume.name}" node affinity doesn\'t match node "{node}"'
            if not claim.fully_bound:
                return False, ""
        return True, ""

    # ------------------------------------------------------------------ events

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        add_update = ActionType.ADD | ActionType.UPDATE
        return [
            ClusterEventWithHint(ClusterEvent(Resource.STORAGE_CLASS, add_update), hint=_class_hint),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update), hint=_claim_hint),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME, add_update)),
            ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, add_update), hint=_csi_node_hint),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_DRIVER, ActionType.UPDATE), hint=_csi_driver_hint),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_STORAGE_CAPACITY, add_update), hint=_capacity_hint),
        ]


def _passed(status: Status) -> Status | None:
    return None if status.code is Code.SUCCESS else status


def _ordered(reasons: list[str]) -> list[str]:
    """kube-scheduler's order of FindPodVolumes reasons."""
    order = (REASON_NODE_CONFLICT, REASON_BIND_CONFLICT, REASON_NOT_ENOUGH_SPACE, REASON_PV_NOT_EXIST)
    return [r for r in order if r in reasons]


def _bound_volume(volume: Volume, claim: Claim) -> dict[str, Any] | None:
    """component-helpers' GetBindVolumeToClaim: the PV with a claimRef to the claim (and the
    bound-by-controller annotation when the scheduler made the binding); None when nothing changes."""
    raw = copy.deepcopy(dict(volume.raw))
    dirty = False
    ref = volume.claim_ref or {}
    if ref.get("name") != claim.name or ref.get("namespace") != claim.namespace or ref.get("uid") != claim.uid:
        raw.setdefault("spec", {})["claimRef"] = {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
            "resourceVersion": claim.version,
        }
        dirty = True
    annotations = raw.setdefault("metadata", {}).setdefault("annotations", {})
    if not volume.bound_to(claim) and ANN_BOUND_BY_CONTROLLER not in annotations:
        annotations[ANN_BOUND_BY_CONTROLLER] = "yes"
        dirty = True
    return raw if dirty else None


def _meta(obj: Any) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _class_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    if old is None or (old.get("allowedTopologies") != (new or {}).get("allowedTopologies")):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _claim_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    meta = _meta(new)
    if meta.get("namespace") != pod.namespace:
        return QueueingHint.QUEUE_SKIP
    names = {ref.claim for ref in pod_claim_refs(pod.raw)}
    return QueueingHint.QUEUE if meta.get("name") in names else QueueingHint.QUEUE_SKIP


def _csi_node_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    if old is None:
        return QueueingHint.QUEUE
    before = (_meta(old).get("annotations") or {}).get(ANN_MIGRATED_PLUGINS)
    after = (_meta(new).get("annotations") or {}).get(ANN_MIGRATED_PLUGINS)
    return QueueingHint.QUEUE if before != after else QueueingHint.QUEUE_SKIP


def _csi_driver_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    name = _meta(new).get("name")
    was = bool(((old or {}).get("spec") or {}).get("storageCapacity"))
    now = bool(((new or {}).get("spec") or {}).get("storageCapacity"))
    for volume in (pod.raw.get("spec") or {}).get("volumes") or ():
        csi = volume.get("csi")
        if csi is not None and csi.get("driver") == name and was and not now:
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def _capacity_hint(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    if old is None:
        return QueueingHint.QUEUE

    def limit(obj: Any) -> Decimal | None:
        try:
            return parse_capacity(obj).limit
        except (ValueError, TypeError):
            return None

    before, after = limit(old), limit(new)
    if after is not None and (before is None or after > before):
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: Any) -> VolumeBinding:
    return VolumeBinding(handle, parse_args(args), time.monotonic)


_check_pre_filter: type[PreFilterPlugin] = VolumeBinding
_check_filter: type[FilterPlugin] = VolumeBinding
_check_pre_score: type[PreScorePlugin] = VolumeBinding
_check_score: type[ScorePlugin] = VolumeBinding
_check_reserve: type[ReservePlugin] = VolumeBinding
_check_pre_bind: type[PreBindPlugin] = VolumeBinding
