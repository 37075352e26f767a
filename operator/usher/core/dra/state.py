"""What usher knows about DRA objects: claims (as watched or as just written), slices, classes,
in-flight allocations, and which devices are taken. Pure.

Claims come from the watch, but a claim usher has just written (allocation,
reservedFor) is *assumed* until the watch returns that resourceVersion or a
newer one, so the next pod never sees its devices as free; the cluster event
of such a write is raised then (``on_assumed``), and the watch's copy of a
version already known raises none, as with kube-scheduler's assume cache. Allocations chosen
in Reserve but not yet written are *in flight*: their devices are taken too,
and a second pod sharing the claim waits for them.

Devices are taken by every claim's non-adminAccess results, whoever
allocated it (kube-scheduler included), plus in-flight allocations; the count
per device is kept incrementally so the in-use set costs nothing per cycle.
A result with a ``shareID`` (DRAConsumableCapacity) does not take its device
but a part of its capacity: shares are kept apart, with what they take in total
per device, so the next allocation gets what is left (across a restart too: the
claims say it). Without the gate a share takes its device whole, as in kube.
Every change bumps a version, kept per pool too, so what is derived from the
in-use devices of a pool can be kept until one of them changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from usher.core.dra.allocation import Allocation, Inventory
from usher.core.dra.extended import classes_by_resource
from usher.core.dra.matching import SelectorResults
from usher.core.dra.model import (
    Claim,
    DeviceClass,
    DeviceId,
    ModelError,
    Share,
    Slice,
    allocated_devices,
    allocated_shares,
    parse_claim,
    parse_class,
    parse_slice,
)
from usher.core.dra.podclaims import ClaimIndex
from usher.core.dra.taints import TaintRule, apply_rules, parse_taint_rule
from usher.core.types import PodGroupKey, PodKey, version_not_older


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class InFlight:
    """An allocation chosen in Reserve and not yet written: its devices are taken until PreBind or Unreserve."""

    pod: PodKey
    claim_uid: str
    allocation: Allocation
    devices: frozenset[DeviceId]
    group: PodGroupKey | None = None
    """The allocating pod's PodGroup: the group's other pods may share the allocation before it is written."""
    shares: tuple[Share, ...] = ()
    """The devices the allocation shares with others, and what it takes of each (DRAConsumableCapacity)."""


class DraState:
    """Claims, slices and classes as watched (and as usher wrote them), in-flight allocations, devices in use.

    Fed by watch events and by the DynamicResources plugin; see the module docstring for the rules.
    """

    def __init__(
        self,
        *,
        workload_claims: bool = True,
        partitionable: bool = True,
        device_taints: bool = True,
        taint_rules: bool = True,
        consumable: bool = True,
        fractional: bool = True,
        binding_conditions: bool = True,
        compatibility_groups: bool = False,
        list_attributes: bool = False,
    ) -> None:
        self.workload_claims = workload_claims
        """DRAWorkloadResourceClaims: a PodGroup's claims are reserved for the group, not for each pod."""
        self.partitionable = partitionable
        """DRAPartitionableDevices: devices that consume a pool's shared counters are allocated while they last."""
        self.device_taints = device_taints
        """DRADeviceTaints: a NoSchedule or NoExecute taint keeps a device from requests that do not tolerate it;
        off: taints are dropped as slices are read, so the allocator never sees one."""
        self.taint_rules_enabled = device_taints and taint_rules
        self.consumable = consumable
        """DRAConsumableCapacity: devices with ``allowMultipleAllocations`` are shared while their capacity lasts;
        off: they are allocated whole, and a request asking for capacity is an error."""
        self.fractional = fractional
        """DRAFractionalCapacityRange: capacity ranges with fractional bounds round in thousandths."""
        self.binding_conditions = binding_conditions
        """DRADeviceBindingConditions (with DRAResourceClaimDeviceStatus): devices with ``bindingConditions`` are
        allocated and PreBind waits for the conditions; off: such devices are never allocated."""
        self.compatibility_groups = partitionable and compatibility_groups
        """DRADeviceCompatibilityGroups (alpha, off; needs DRAPartitionableDevices): devices on one counter set are
        co-allocated only while their compatibilityGroups intersect; off: slices naming groups are left out."""
        self.list_attributes = list_attributes
        """DRAListTypeAttributes (alpha, off): matchAttribute wants the devices' values (lists or scalars) to share an
        element and distinctAttribute wants them disjoint; off: a list value matches nothing after the first device,
        as kube's scalar comparison. Selectors see lists either way, as kube's CEL conversion gives them."""
        self.claim_listeners: list[Callable[[], None]] = []
        """Called after every change of a watched claim (a PreBind waiting for binding conditions wakes up)."""
        """DRADeviceTaintRules (needs DRADeviceTaints): DeviceTaintRules add their taint to the devices they
        select."""
        self._watched: dict[str, Claim] = {}
        self._assumed: dict[str, Claim] = {}
        self._published: dict[str, Slice] = {}
        """Slices as their drivers published them; ``slices`` holds them with the taint rules applied."""
        self.slices: dict[str, Slice] = {}
        """Slices as the allocator sees them: with every DeviceTaintRule's taints (kube's patched slices)."""
        self.taint_rules: dict[str, TaintRule] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.class_of_resource: dict[str, str] = {}
        """Extended resource name -> the DeviceClass serving it (`usher.core.dra.extended`)."""
        self._extended_claims: dict[str, str] = {}
        """Pod UID -> the key of the claim the scheduler made for its extended resources."""
        self.slices_version = 0
        """Bumped on every slice change, so the inventory is rebuilt only when needed."""
        self._inventory: Inventory | None = None
        self._inventory_version = -1
        self.selectors = SelectorResults()
        """Selector answers per device of the current inventory, forgotten when it is rebuilt."""
        self.in_flight: dict[str, InFlight] = {}
        self._sharers: dict[str, set[PodKey]] = {}
        """claim key -> the pods that reserved its in-flight allocation (the allocating pod first)."""
        self._deallocating: dict[str, str] = {}
        """claim key -> the resourceVersion usher asked to deallocate: until the watch shows another version
        (or the write fails) the claim is neither used nor allocated by anyone."""
        self.index = ClaimIndex()
        self.broken: dict[str, str] = {}
        """Objects the API served that usher cannot parse: key -> why (reported on the pods they block)."""
        self._use: Counter[DeviceId] = Counter()
        self._shared: dict[DeviceId, Mapping[str, Decimal]] = {}
        """Devices shares take part of -> what they take in total per capacity (each total a new mapping)."""
        self._share_counts: Counter[DeviceId] = Counter()
        self._shared_pools: Counter[tuple[str, str]] = Counter()
        self.use_version = 0
        """Bumped whenever a device may have been taken or freed."""
        self.pool_use_versions: dict[tuple[str, str], int] = {}
        """(driver, pool) -> ``use_version`` when a device of the pool was last taken or freed (absent: never)."""
        self.on_assumed: Callable[[Claim | None, Claim], None] | None = None
        """Told ``(old, new)`` when a claim usher wrote becomes the one it knows: the cluster event
        kube-scheduler's assume cache raises on Assume (the watch event of that version then raises none)."""

    # ------------------------------------------------------------------ claims

    def claim(self, key: str) -> Claim | None:
        """The newest version usher knows: the one it wrote, until the watch catches up."""
        return self._assumed.get(key) or self._watched.get(key)

    def on_claim(self, deleted: bool, raw: Mapping[str, Any]) -> tuple[Claim | None, Claim | None]:
        """Apply a watch event; returns (old, new) effective claims for the cluster event ((None, None): no
        event, as for a version usher already assumed or a re-delivery, which kube-scheduler's assume cache
        drops as not newer). The claim listeners hear of every change."""
        old, new = self._apply_claim(deleted, raw)
        if old is not None or new is not None:
            for listener in self.claim_listeners:
                listener()
        return old, new

    def _apply_claim(self, deleted: bool, raw: Mapping[str, Any]) -> tuple[Claim | None, Claim | None]:
        meta = raw.get("metadata") or {}
        key = claim_key(str(meta.get("namespace")), str(meta.get("name")))
        if self._deallocating.get(key, None) not in (None, meta.get("resourceVersion")) or deleted:
            self._deallocating.pop(key, None)
        old = self.claim(key)
        if deleted:
            self._watched.pop(key, None)
            self._assumed.pop(key, None)
            self.broken.pop(key, None)
            self._recount(old, None)
            return old, None
        try:
            claim = parse_claim(raw)
        except ModelError as exc:
            self.broken[key] = f"ResourceClaim {key}: {exc}"
            self._watched.pop(key, None)
            self._recount(old, self.claim(key))
            return old, self.claim(key)
        self.broken.pop(key, None)
        self._watched[key] = claim
        assumed = self._assumed.get(key)
        if assumed is not None and (
            assumed.uid != claim.uid or version_not_older(claim.resource_version, assumed.resource_version)
        ):
            del self._assumed[key]
        new = self.claim(key)
        self._recount(old, new)
        if old is not None and new is not None and (old.uid, old.resource_version) == (new.uid, new.resource_version):
            return None, None
        return old, new

    def assume(self, raw: Mapping[str, Any]) -> Claim:
        """A claim as the API server returned it after usher's write."""
        claim = parse_claim(raw)
        key = claim_key(claim.namespace, claim.name)
        old = self.claim(key)
        watched = self._watched.get(key)
        if watched is None or not version_not_older(watched.resource_version, claim.resource_version):
            self._assumed[key] = claim
        self._recount(old, self.claim(key))
        if self.on_assumed is not None and self.claim(key) is claim:
            self.on_assumed(old, claim)
        return claim

    # ------------------------------------------------------------------ deallocation

    def deallocating(self, key: str) -> bool:
        """Whether usher asked to deallocate the claim and has not seen the outcome yet."""
        return key in self._deallocating

    def start_deallocating(self, claim: Claim) -> None:
        self._deallocating[claim.key] = claim.resource_version

    def deallocation_failed(self, key: str, resource_version: str) -> None:
        """The deallocation write was refused or given up: the claim is as it was."""
        if self._deallocating.get(key) == resource_version:
            del self._deallocating[key]

    # ------------------------------------------------------------------ in flight

    def add_in_flight(self, key: str, entry: InFlight) -> None:
        self.remove_in_flight(key)
        self.in_flight[key] = entry
        self._sharers[key] = {entry.pod}
        self._use.update(entry.devices)
        self._add_shares(entry.shares, 1)
        self._changed((*entry.devices, *(device for device, _ in entry.shares)))

    def share_in_flight(self, key: str, pod: PodKey) -> bool:
        """Another pod of the allocating pod's group reserves the same in-flight allocation (False: none)."""
        sharers = self._sharers.get(key)
        if sharers is None:
            return False
        sharers.add(pod)
        return True

    def holds(self, key: str, pod: PodKey) -> bool:
        """Whether the pod reserved the claim's in-flight allocation (made it, or shares it)."""
        return pod in self._sharers.get(key, ())

    def release_in_flight(self, key: str, pod: PodKey) -> None:
        """The pod no longer needs the in-flight allocation; it is dropped once no pod does."""
        sharers = self._sharers.get(key)
        if sharers is None or pod not in sharers:
            return
        sharers.discard(pod)
        if not sharers:
            self.remove_in_flight(key)

    def move_in_flight(self, key: str, to: str) -> None:
        """The claim held in flight under ``key`` was created as ``to`` (a pod's extended-resource claim)."""
        entry = self.in_flight.pop(key, None)
        if entry is not None:
            self.in_flight[to] = entry
            self._sharers[to] = self._sharers.pop(key, {entry.pod})

    def remove_in_flight(self, key: str) -> InFlight | None:
        """Drop the in-flight allocation, whoever shares it (it was written, or is void)."""
        self._sharers.pop(key, None)
        entry = self.in_flight.pop(key, None)
        if entry is not None:
            self._use.subtract(entry.devices)
            self._drop_zeros(entry.devices)
            self._add_shares(entry.shares, -1)
            self._changed((*entry.devices, *(device for device, _ in entry.shares)))
        return entry

    # ------------------------------------------------------------------ slices and classes

    def inventory(self) -> Inventory:
        """The allocator's inventory of the slices, rebuilt after a slice changed: one build per change for every
        reader (DynamicResources, and scoring's DRA-backed extended resources)."""
        if self._inventory is None or self._inventory_version != self.slices_version:
            self._inventory = Inventory.build(
                self.slices.values(),
                partitionable=self.partitionable,
                compatibility_groups=self.compatibility_groups,
            )
            self._inventory_version = self.slices_version
            self.selectors.forget_devices()
        return self._inventory

    def on_slice(self, deleted: bool, raw: Mapping[str, Any]) -> None:
        name = str((raw.get("metadata") or {}).get("name"))
        self.slices_version += 1
        if deleted:
            self._published.pop(name, None)
            self.slices.pop(name, None)
            self.broken.pop(f"slice/{name}", None)
            return
        try:
            published = parse_slice(raw)
        except ModelError as exc:
            self._published.pop(name, None)
            self.slices.pop(name, None)
            self.broken[f"slice/{name}"] = f"ResourceSlice {name}: {exc}"
            return
        if not self.device_taints and any(d.taints for d in published.devices):
            published = replace(published, devices=tuple(replace(d, taints=()) for d in published.devices))
        if not self.binding_conditions and any(d.binding_conditions for d in published.devices):
            published = replace(
                published,
                devices=tuple(replace(d, unselectable=bool(d.binding_conditions)) for d in published.devices),
            )
        if not self.consumable and any(d.allow_multiple or d.capacity_checked for d in published.devices):
            published = replace(
                published,
                devices=tuple(replace(d, allow_multiple=False, capacity_checked=False) for d in published.devices),
            )
        self._published[name] = published
        self.slices[name] = apply_rules(published, self.taint_rules.values())
        self.broken.pop(f"slice/{name}", None)

    def on_taint_rule(self, deleted: bool, raw: Mapping[str, Any]) -> list[Slice]:
        """Apply a DeviceTaintRule event; returns the slices whose devices' taints it changed (each a ResourceSlice
        update, as kube's slice tracker reports it). Ignored without DRADeviceTaintRules."""
        if not self.taint_rules_enabled:
            return []
        name = str((raw.get("metadata") or {}).get("name"))
        key = f"devicetaintrule/{name}"
        old = self.taint_rules.pop(name, None)
        self.broken.pop(key, None)
        if not deleted:
            try:
                self.taint_rules[name] = parse_taint_rule(raw)
            except ModelError as exc:
                self.broken[key] = f"DeviceTaintRule {name}: {exc}"
        new = self.taint_rules.get(name)
        changed: list[Slice] = []
        for slice_name, published in self._published.items():
            if not any(rule is not None and rule.applies_to(published) for rule in (old, new)):
                continue
            patched = apply_rules(published, self.taint_rules.values())
            if [d.taints for d in patched.devices] != [d.taints for d in self.slices[slice_name].devices]:
                self.slices[slice_name] = patched
                changed.append(patched)
        if changed:
            self.slices_version += 1
        return changed

    def on_class(self, deleted: bool, raw: Mapping[str, Any]) -> None:
        name = str((raw.get("metadata") or {}).get("name"))
        if deleted:
            self.classes.pop(name, None)
            self.broken.pop(f"class/{name}", None)
        else:
            try:
                self.classes[name] = parse_class(raw)
                self.broken.pop(f"class/{name}", None)
            except ModelError as exc:
                self.classes.pop(name, None)
                self.broken[f"class/{name}"] = f"DeviceClass {name}: {exc}"
        self.class_of_resource = classes_by_resource(self.classes.values())

    def extended_claim(self, pod_uid: str) -> Claim | None:
        """The claim the scheduler made for the pod's extended resources, if it exists."""
        key = self._extended_claims.get(pod_uid)
        return self.claim(key) if key is not None else None

    # ------------------------------------------------------------------ devices

    def in_use(self) -> Mapping[DeviceId, int]:
        """Devices taken by any claim's allocation (non-adminAccess) or by an in-flight allocation."""
        return self._use

    def shared_use(self) -> Mapping[DeviceId, Mapping[str, Decimal]]:
        """Devices allocations share (claims' and in-flight), and what they take in total of each capacity.

        Each device's totals are replaced, never changed, so a shallow copy is a snapshot."""
        return self._shared

    def shared_pools(self) -> Mapping[tuple[str, str], int]:
        """The (driver, pool) of every shared device -> how many shares its devices have."""
        return self._shared_pools

    def _add_shares(self, shares: Iterable[Share], sign: int) -> None:
        for device, consumed in shares:
            totals = dict(self._shared.get(device, {}))
            for name, amount in consumed.items():
                totals[name] = totals.get(name, Decimal(0)) + sign * amount
            self._share_counts[device] += sign
            self._shared_pools[(device.driver, device.pool)] += sign
            if self._share_counts[device] > 0:
                self._shared[device] = totals
            else:
                self._shared.pop(device, None)
                del self._share_counts[device]
            if self._shared_pools[(device.driver, device.pool)] <= 0:
                del self._shared_pools[(device.driver, device.pool)]

    def _recount(self, old: Claim | None, new: Claim | None) -> None:
        if old is not None and old.extended_for and self._extended_claims.get(old.extended_for) == old.key:
            del self._extended_claims[old.extended_for]
        if new is not None and new.extended_for:
            self._extended_claims[new.extended_for] = new.key
        shares = self.consumable
        before = allocated_devices(old, shares=shares) if old is not None else set()
        after = allocated_devices(new, shares=shares) if new is not None else set()
        if shares:
            shared_before = allocated_shares(old) if old is not None else ()
            shared_after = allocated_shares(new) if new is not None else ()
            if shared_before != shared_after:
                self._add_shares(shared_before, -1)
                self._add_shares(shared_after, 1)
                self._changed(device for device, _ in (*shared_before, *shared_after))
        if before == after:
            return
        self._use.subtract(before - after)
        self._drop_zeros(before - after)
        self._use.update(after - before)
        self._changed(before ^ after)

    def _changed(self, devices: Iterable[DeviceId]) -> None:
        self.use_version += 1
        version = self.use_version
        versions = self.pool_use_versions
        for device in devices:
            versions[(device.driver, device.pool)] = version

    def _drop_zeros(self, devices: Any) -> None:
        for device in devices:
            if self._use.get(device, 0) <= 0:
                self._use.pop(device, None)
