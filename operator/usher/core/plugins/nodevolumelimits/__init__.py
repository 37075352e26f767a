"""NodeVolumeLimits: a node's CSI drivers can attach only so many volumes. Pure.

kube-scheduler's CSILimits plugin (pkg/scheduler/framework/plugins/nodevolumelimits),
message for message. Per CSI driver, the unique volumes (``driver/volumeHandle``)
of the pods on the node plus the incoming pod's new ones must not exceed the
node's CSINode ``spec.drivers[].allocatable.count``:

- a claim (``persistentVolumeClaim`` or a generic ephemeral volume's
  ``<pod>-<volume>`` claim, which must be the pod's) counts as its bound PV's
  ``spec.csi`` driver and handle; an unbound claim (or one whose PV is gone)
  as its StorageClass's provisioner with a handle unique to the claim; PVs
  and classes of in-tree plugins migrated to CSI (csi-translation-lib: AWS
  EBS, GCE PD, Azure Disk, Cinder, Portworx) as their CSI driver, and so do
  inline in-tree volumes of those plugins, when the node has a CSINode;
- the incoming pod's claim must exist (UnschedulableAndUnresolvable
  ``looking up PVC ns/name: persistentvolumeclaim "name" not found``); an
  existing pod's missing claim is not counted;
- VolumeLimitScaling (beta, on in kube-scheduler 1.37): a driver whose
  CSIDriver sets ``preventPodSchedulingIfMissing`` must be on the node's
  CSINode (Unschedulable ``<driver> CSI driver is not installed on the node``);
- a node without a CSINode, or whose drivers report no count, has no limit.

Over the limit: Unschedulable ``node(s) exceed max volume count`` (deleting or
preempting a pod frees attachments). PreFilter skips pods with no claim,
ephemeral or migratable inline volume.

What a node's pods have attached is kept per node for as long as the node's
generation and its CSINode are the same and no watch event changed a claim,
PV or StorageClass the count looked up (VolumeState's log of watch events
says which): a burst of pods with claims walks the pods of the node changed
since the previous cycle, not every pod of the cluster for every node
(kube-scheduler walks them, in parallel).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import EnqueueExtensions, FilterPlugin, PreFilterPlugin, PreFilterResult
from usher.core.framework.names import NODE_VOLUME_LIMITS
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, Code, PodInfo, QueueingHint, Status, error, unschedulable
from usher.core.volumes.csitranslation import (
    AWS_EBS_PLUGIN,
    AZURE_DISK_PLUGIN,
    CINDER_PLUGIN,
    GCE_PD_PLUGIN,
    PORTWORX_PLUGIN,
    TranslationError,
    inline_volume_handle,
    plugin_named,
    plugin_of,
    pv_volume_handle,
)
from usher.core.volumes.model import Claim, CsiNode
from usher.core.volumes.podvolumes import ephemeral_owner_error
from usher.core.volumes.state import VolumeState

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = NODE_VOLUME_LIMITS
REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

MIGRATION_ON = frozenset({AWS_EBS_PLUGIN, PORTWORX_PLUGIN, GCE_PD_PLUGIN, AZURE_DISK_PLUGIN, CINDER_PLUGIN})
"""The in-tree plugins whose CSI migration kube-scheduler 1.37 counts as on (nodevolumelimits' isCSIMigrationOn:
GA and locked on; Azure File and vSphere are not in its list)."""

_SKIP = Status(Code.SKIP)
WANTED_KEY = "Wanted" + NAME
"""Cycle state: the incoming pod's attachable volumes by whether the node has a CSINode (``_wanted``)."""


class VolumeHandle(Protocol):
    """What NodeVolumeLimits needs from the framework handle."""

    @property
    def volumes(self) -> VolumeState: ...


class _ClaimNotFoundError(Exception):
    """The incoming pod's claim does not exist (UnschedulableAndUnresolvable)."""


class _VolumesError(Exception):
    """Any other error looking at a pod's volumes (an Error status, as upstream's AsStatus)."""


def migration_on(csi_node: CsiNode | None, plugin: str) -> bool:
    """kube-scheduler's isCSIMigrationOn: a CSINode exists and the plugin's migration is on."""
    return csi_node is not None and plugin in MIGRATION_ON


def inline_migratable(volume: Mapping[str, Any]) -> bool:
    """csi-translation-lib's IsInlineMigratable: an inline volume of an in-tree plugin with migration logic."""
    return plugin_of(volume) is not None


def _volumes(pod_raw: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod_raw.get("spec") or {}).get("volumes") or ())


Read = tuple[str, str]
"""A storage object the count of a node's attachments looked up: (VolumeState kind, key)."""


@dataclass(slots=True)
class _Attached:
    """What the pods of one node have attached (``driver/handle`` -> driver), or why that cannot be told, and
    what it was computed from."""

    generation: int
    csi_node: CsiNode | None
    reads: set[Read]
    attached: dict[str, str]
    problem: str = ""
    per_driver: dict[str, int] = field(default_factory=dict)
    """``attached`` counted per driver."""


class NodeVolumeLimits:
    """Per CSI driver, the node's attach limit (CSINode allocatable count)."""

    name = NAME

    def __init__(self, handle: VolumeHandle, volume_id_prefix: str) -> None:
        self._volumes = handle.volumes
        self._prefix = volume_id_prefix
        """Prefix of the handles of unbound claims (random, as upstream, so no real handle collides)."""
        self._kept: dict[str, _Attached] = {}
        """Node name -> its pods' attachments as last counted."""
        self._readers: dict[Read, set[str]] = {}
        """Storage object -> the nodes whose kept count looked it up."""
        self._synced = self._volumes.version
        """The storage version whose watch events ``_kept`` has taken in."""

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        if len(self._kept) > len(nodes):  # nodes deleted since they were counted
            present = {node.name for node in nodes}
            for name in [name for name in self._kept if name not in present]:
                self._forget(name)
        for volume in _volumes(pod.raw):
            if (
                volume.get("persistentVolumeClaim") is not None
                or volume.get("ephemeral") is not None
                or inline_migratable(volume)
            ):
                state.write(WANTED_KEY, {})
                return None, SUCCESS
        return None, _SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not _volumes(pod.raw):
            return SUCCESS
        # No CSINode yet: no limits, no migration (as upstream).
        return self._filter(state, pod, node, self._volumes.csi_nodes.get(node.name))

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """``filter`` for many nodes. A node without a CSINode has no limits and no migration, so ``filter``'s
        answer there depends on the pod alone: worked out for the first such node, it serves the others."""
        if not _volumes(pod.raw):
            return [None] * len(nodes)
        csi_nodes = self._volumes.csi_nodes
        results: list[Status | None] = []
        bare: list[Status | None] = []  # the answer for nodes without a CSINode, once known
        for node in nodes:
            csi_node = csi_nodes.get(node.name)
            if csi_node is not None:
                status = self._filter(state, pod, node, csi_node)
                results.append(None if status is SUCCESS else status)
                continue
            if not bare:
                status = self._filter(state, pod, node, None)
                bare.append(None if status is SUCCESS else status)
            results.append(bare[0])
        return results

    def _filter(self, state: CycleState, pod: PodInfo, node: NodeInfo, csi_node: CsiNode | None) -> Status:
        wanted = self._wanted(state, pod, csi_node)
        if isinstance(wanted, Status):
            return wanted
        if not wanted:
            return SUCCESS
        for driver in wanted.values():
            if not self._driver_on_node(driver, csi_node):
                return unschedulable(f"{driver} CSI driver is not installed on the node")
        limits = csi_node.counts if csi_node is not None else None
        if not limits:
            return SUCCESS
        if self._synced != self._volumes.version:
            self._sync()
        kept = self._kept.get(node.name)
        if kept is None or kept.generation != node.generation or kept.csi_node is not csi_node:
            kept = self._count_attached(node, csi_node)
        if kept.problem:
            return error(kept.problem)
        attached = kept.attached
        new_count: dict[str, int] = {}
        for unique, driver in wanted.items():
            if unique not in attached:  # a volume already attached for another pod is not attached again
                new_count[driver] = new_count.get(driver, 0) + 1
        for driver, count in new_count.items():
            limit = limits.get(driver)
            if limit is not None and kept.per_driver.get(driver, 0) + count > limit:
                return unschedulable(REASON_MAX_VOLUME_COUNT_EXCEEDED)
        return SUCCESS

    def _wanted(self, state: CycleState, pod: PodInfo, csi_node: CsiNode | None) -> Mapping[str, str] | Status:
        """The incoming pod's attachable volumes (``driver/handle`` -> driver; not to be changed), or why they
        cannot be told. They depend on the node only through whether it has a CSINode (migration), so each
        cycle works them out at most twice."""
        memo: dict[bool, dict[str, str] | Status] | None = state.get(WANTED_KEY)
        found = memo.get(csi_node is not None) if memo is not None else None
        if found is None:
            wanted: dict[str, str] = {}
            try:
                self._attachable(pod.raw, csi_node, new_pod=True, result=wanted)
                found = wanted
            except _ClaimNotFoundError as exc:
                found = unschedulable(str(exc), resolvable=False)
            except _VolumesError as exc:
                found = error(str(exc))
            if memo is not None:
                memo[csi_node is not None] = found
        return found

    def _count_attached(self, node: NodeInfo, csi_node: CsiNode | None) -> _Attached:
        """Count the node's pods' attachments afresh, and keep the count until the node, its CSINode or a
        storage object it looked up changes."""
        self._forget(node.name)
        kept = self._kept[node.name] = _Attached(node.generation, csi_node, set(), {})
        try:
            for other in node.pods.values():
                self._attachable(other.raw, csi_node, new_pod=False, result=kept.attached, reads=kept.reads)
        except (_ClaimNotFoundError, _VolumesError) as exc:
            kept.problem = str(exc)
        for driver in kept.attached.values():
            kept.per_driver[driver] = kept.per_driver.get(driver, 0) + 1
        for read in kept.reads:
            self._readers.setdefault(read, set()).add(node.name)
        return kept

    def _sync(self) -> None:
        """Forget the counts that looked up a storage object a watch event changed since the last sync."""
        changes = self._volumes.watched_changes_since(self._synced)
        self._synced = self._volumes.version
        if changes is None:  # too far behind to tell what changed
            self._kept.clear()
            self._readers.clear()
            return
        for change in changes:
            for name in self._readers.get(change, set()).copy():
                self._forget(name)

    def _forget(self, name: str) -> None:
        kept = self._kept.pop(name, None)
        if kept is None:
            return
        for read in kept.reads:
            readers = self._readers.get(read)
            if readers is not None:
                readers.discard(name)
                if not readers:
                    del self._readers[read]

    def _driver_on_node(self, driver: str, csi_node: CsiNode | None) -> bool:
        """kube-scheduler's checkCSIDriverOnNode (VolumeLimitScaling): only a CSIDriver that opts in with
        ``preventPodSchedulingIfMissing`` must be registered on the node's CSINode."""
        known = self._volumes.csi_drivers.get(driver)
        if known is None or not (known.raw.get("spec") or {}).get("preventPodSchedulingIfMissing"):
            return True
        return csi_node is not None and driver in csi_node.limits

    def _attachable(
        self,
        pod_raw: Mapping[str, Any],
        csi_node: CsiNode | None,
        *,
        new_pod: bool,
        result: dict[str, str],
        reads: set[Read] | None = None,
    ) -> None:
        """kube-scheduler's filterAttachableVolumes: add the pod's CSI volumes to ``result``
        (``driver/handle`` -> driver); every claim, PV and StorageClass looked up is added to ``reads``."""
        meta = pod_raw.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        for volume in _volumes(pod_raw):
            ephemeral = False
            pvc = volume.get("persistentVolumeClaim")
            if pvc is not None:
                claim_name = str(pvc.get("claimName") or "")
            elif volume.get("ephemeral") is not None:
                claim_name, ephemeral = f"{meta.get('name') or ''}-{volume.get('name') or ''}", True
            else:
                self._inline(volume, csi_node, namespace, result)
                continue
            if not claim_name:
                raise _VolumesError("PersistentVolumeClaim had no name")
            claim = _read(reads, CLAIMS, self._volumes.watched_claim, f"{namespace}/{claim_name}")
            if claim is None:
                if not new_pod:
                    continue  # not counted: nothing says the claim belongs to the running pod
                broken = self._volumes.broken.get(f"persistentvolumeclaims/{namespace}/{claim_name}")
                reason = f": {broken}" if broken else " not found"
                what = f'looking up PVC {namespace}/{claim_name}: persistentvolumeclaim "{claim_name}"'
                raise _ClaimNotFoundError(what + reason)
            if ephemeral and (why := ephemeral_owner_error(pod_raw, claim)):
                raise _VolumesError(why)
            driver, handle = self._driver_info(csi_node, claim, reads)
            if driver and handle:
                result[f"{driver}/{handle}"] = driver

    @staticmethod
    def _inline(volume: Mapping[str, Any], csi_node: CsiNode | None, namespace: str, result: dict[str, str]) -> None:
        """kube-scheduler's checkAttachableInlineVolume: an inline in-tree volume counts as its CSI
        driver's when its migration is on."""
        plugin = plugin_of(volume)
        if plugin is None or not migration_on(csi_node, plugin.name):
            return
        try:
            _, handle = inline_volume_handle(volume, namespace)
        except TranslationError as exc:
            raise _VolumesError(f"converting volume({volume.get('name') or ''}) from inline to csi: {exc}") from exc
        result[f"{plugin.driver}/{handle}"] = plugin.driver

    def _driver_info(self, csi_node: CsiNode | None, claim: Claim, reads: set[Read] | None) -> tuple[str, str]:
        """kube-scheduler's getCSIDriverInfo: the bound PV's CSI driver and handle (translated for a
        migrated in-tree PV); ("", "") when it does not count."""
        if not claim.volume_name:
            return self._driver_info_from_class(csi_node, claim, reads)
        volume = _read(reads, VOLUMES, self._volumes.watched_volume, claim.volume_name)
        if volume is None:  # deleted, or the claim is pre-bound to a PV not created yet
            return self._driver_info_from_class(csi_node, claim, reads)
        csi = (volume.raw.get("spec") or {}).get("csi")
        if csi is not None:
            return str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")
        plugin = plugin_of(volume.raw.get("spec") or {})
        if plugin is None or not migration_on(csi_node, plugin.name):
            return "", ""
        try:
            _, handle = pv_volume_handle(volume.raw)
        except TranslationError:
            return "", ""
        return plugin.driver, handle

    def _driver_info_from_class(
        self, csi_node: CsiNode | None, claim: Claim, reads: set[Read] | None
    ) -> tuple[str, str]:
        """kube-scheduler's getCSIDriverInfoFromSC: the class's provisioner (its CSI driver for a migrated
        in-tree one) and a handle unique to the claim. A claim without a (known) class binds immediately,
        so is bound before it is scheduled: not counted."""
        if not claim.class_name:
            return "", ""
        storage_class = _read(reads, CLASSES, self._volumes.classes.get, claim.class_name)
        if storage_class is None:
            return "", ""
        handle = f"{self._prefix}-{claim.namespace}/{claim.name}"
        plugin = plugin_named(storage_class.provisioner)
        if plugin is not None:
            return (plugin.driver, handle) if migration_on(csi_node, plugin.name) else ("", "")
        return storage_class.provisioner, handle

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            # Any new CSINode may make a pod rejected for its volumes schedulable: no hint, as upstream.
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, ActionType.ADD)),
            ClusterEventWithHint(ClusterEvent(Resource.CSI_NODE, ActionType.UPDATE), hint=csi_node_updated),
            ClusterEventWithHint(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE), hint=assigned_pod_deleted),
            ClusterEventWithHint(ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD), hint=claim_added),
        ]


CLAIMS, VOLUMES, CLASSES = "persistentvolumeclaims", "persistentvolumes", "storageclasses"
"""The VolumeState kinds a node's count looks up (as its watch events name them)."""


def _read(reads: set[Read] | None, kind: str, lookup: Callable[[str], Any], key: str) -> Any:
    """``lookup(key)``, noted in ``reads`` (when counting for a node) so the count is redone once a watch event
    changes that object (or makes it)."""
    if reads is not None:
        reads.add((kind, key))
    return lookup(key)


def _limits(raw: Any) -> dict[str, int]:
    """A CSINode's drivers -> allocatable count (0 when unset), as the hint reads them."""
    limits: dict[str, int] = {}
    for driver in ((raw or {}).get("spec") or {}).get("drivers") or ():
        count = (driver.get("allocatable") or {}).get("count")
        limits[str(driver.get("name") or "")] = int(count) if count is not None else 0
    return limits


def csi_node_updated(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when a driver's limit went up (a driver new to the CSINode counts as up from 0)."""
    before = _limits(old)
    for driver, limit in _limits(new).items():
        if limit > before.get(driver, 0):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def assigned_pod_deleted(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when the deleted pod was placed (or nominated) and had a claim, an ephemeral or a migratable
    inline volume: its attachments may be gone."""
    deleted = old or {}
    volumes = _volumes(deleted)
    if not volumes:
        return QueueingHint.QUEUE_SKIP
    if not (deleted.get("spec") or {}).get("nodeName") and not (deleted.get("status") or {}).get("nominatedNodeName"):
        return QueueingHint.QUEUE_SKIP
    for volume in volumes:
        if (
            volume.get("persistentVolumeClaim") is not None
            or volume.get("ephemeral") is not None
            or inline_migratable(volume)
        ):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def claim_added(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """Queue when the added claim is one of the pod's (``persistentVolumeClaim`` or ephemeral ``<pod>-<volume>``)."""
    meta = (new or {}).get("metadata") or {}
    if meta.get("namespace") != pod.namespace:
        return QueueingHint.QUEUE_SKIP
    for volume in _volumes(pod.raw):
        pvc = volume.get("persistentVolumeClaim")
        if pvc is not None:
            claim_name = pvc.get("claimName")
        elif volume.get("ephemeral") is not None:
            claim_name = f"{pod.name}-{volume.get('name') or ''}"
        else:
            continue
        if claim_name == meta.get("name"):
            return QueueingHint.QUEUE
    return QueueingHint.QUEUE_SKIP


def new(args: Mapping[str, Any], handle: VolumeHandle) -> NodeVolumeLimits:
    reject_unknown_args(args, set())
    return NodeVolumeLimits(handle, secrets.token_hex(16))


_check_pre_filter: type[PreFilterPlugin] = NodeVolumeLimits
_check_filter: type[FilterPlugin] = NodeVolumeLimits
_check_events: type[EnqueueExtensions] = NodeVolumeLimits
