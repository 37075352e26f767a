"""Resource pools as one node sees them: the allocator's first step ("gather pools"). Pure.

An :class:`Inventory` is built once per scheduling cycle from every
ResourceSlice. It groups slices by (driver, pool), keeps only each pool's
newest generation, and records whether a pool is *incomplete* (fewer or more
slices than ``resourceSliceCount`` at that generation) or has duplicate device
names. It indexes slices by how a node reaches them (node-local by node name,
node selectors, all nodes, per-device) so that :meth:`Inventory.visible_pools`
costs only the slices that can matter to one node.

Kube-scheduler gathers pools per node from the slices the node can see; the
generation and slice count are taken over the whole pool here, as newer
kube-scheduler releases do, so a pool spread over many nodes is not
"incomplete" from each of them. Nothing is allocated from an incomplete pool,
and an incomplete pool is never judged invalid (kube-scheduler v1.37 builds no
devices for it).

Partitionable devices (DRAPartitionableDevices): a pool's ``sharedCounters``
come from all its current slices, wherever they are visible, and every device
of the pool that consumes counters is recorded with what it consumes, so the
search can tell what the devices in use leave (:class:`Pool`). A pool whose
counter sets repeat a name, or whose devices consume a counter set or counter
it does not offer, is invalid. kube-scheduler also adds a slice of counter
sets to every node's pools; here it is visible where its own node access
reaches. It has no devices, so the only difference is which pools an ``All``
request finds incomplete or invalid on other nodes. Without the gate, slices
with counter sets or per-device node selection are left out (as in
kube-scheduler) and devices that consume counters are never allocated.

Compatibility groups (DRADeviceCompatibilityGroups, alpha and off): with the gate, a pool any
of whose devices names a group is *grouped*, and the search checks the groups of the devices
on each counter set (:mod:`.search`); without it, a slice whose devices name groups is left
out entirely, which leaves its pool incomplete, as kube-scheduler does (it cannot check them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from usher.core.dra.model import CounterUse, Device, DeviceId, Slice
from usher.core.selectors import SelectorError, node_selector_matches


class Candidate:
    """One device of a pool's current generation, with what the search needs precomputed."""

    __slots__ = ("device", "id", "pool", "slice")

    def __init__(self, device: Device, slice_: Slice, pool: Pool) -> None:
        self.device = device
        self.slice = slice_
        self.pool = pool
        self.id = DeviceId(slice_.driver, slice_.pool, device.name)

    def __repr__(self) -> str:
        return f"Candidate({self.id})"


class Pool:
    """All slices of one (driver, pool) at its newest generation."""

    __slots__ = (
        "capacity_checked",
        "consumers",
        "counted",
        "counter_sets",
        "driver",
        "duplicates",
        "grouped",
        "groups_of",
        "incomplete",
        "invalid",
        "key",
        "name",
    )

    def __init__(self, driver: str, name: str, *, incomplete: bool) -> None:
        self.driver = driver
        self.name = name
        self.key = (driver, name)
        """(driver, pool), as the in-use versions name a pool."""
        self.incomplete = incomplete
        self.duplicates = False
        """Some device name occurs twice among all its slices (then checked again per node)."""
        self.counter_sets: dict[str, dict[str, int]] = {}
        """``sharedCounters`` of all its slices: counter set -> counter -> amount (nano units)."""
        self.consumers: list[tuple[DeviceId, tuple[CounterUse, ...]]] = []
        """Every device of the pool that consumes counters, visible from a node or not, and what it consumes."""
        self.counted = False
        """Some device consumes counters and DRAPartitionableDevices is on: the search must count them."""
        self.grouped = False
        """Some device names a compatibility group and DRADeviceCompatibilityGroups is on: the search checks the
        groups of the devices sharing each counter set."""
        self.groups_of: dict[DeviceId, tuple[tuple[str, frozenset[str]], ...]] = {}
        """For a grouped pool: every device that consumes counters -> (counter set, its groups) per entry."""
        self.capacity_checked = False
        """Some device is shared or polices requests for its capacity (DRAConsumableCapacity): only the search
        checks capacity, so no shortcut applies."""
        self.invalid = ""
        """Why the whole pool must not be allocated from (its counter sets), or ""; never set when incomplete."""

    def record_counters(self, slices: Sequence[Slice], *, grouping: bool = False) -> None:
        """Record the counter sets and their consumers; the first problem makes the pool invalid, in kube's order."""
        for slice_ in slices:
            for set_name, counters in slice_.shared_counters:
                if set_name in self.counter_sets and not self.invalid:
                    self.invalid = f"duplicate counter set name {set_name}"
                self.counter_sets.setdefault(set_name, dict(counters))
        for slice_ in slices:
            for device in slice_.devices:
                if not device.consumes_counters:
                    continue
                self.counted = True
                if device.counters:
                    self.consumers.append((DeviceId(self.driver, self.name, device.name), device.counters))
                if grouping:
                    self.groups_of[DeviceId(self.driver, self.name, device.name)] = device.compatibility_groups
                    self.grouped |= device.declares_groups
                self.invalid = self.invalid or self._unknown_counter(device)
        if not self.grouped:
            self.groups_of = {}
        if self.incomplete:
            self.invalid = ""  # kube-scheduler does not look into an incomplete pool

    def _unknown_counter(self, device: Device) -> str:
        """What ``device`` consumes that the pool's counter sets do not offer, or ""."""
        for set_name in device.counter_sets:
            if set_name not in self.counter_sets:
                return f"counter set {set_name} not found"
        for (set_name, counter), _ in device.counters:
            if counter not in self.counter_sets[set_name]:
                return f"counter {counter} not found in counter set {set_name}"
        return ""

    def __str__(self) -> str:
        return f"{self.driver}/{self.name}"


class _SliceEntry:
    """One slice in the inventory, its devices made candidates once, and its position in the pool order."""

    __slots__ = ("alone", "candidates", "order", "pool", "slice")

    def __init__(self, slice_: Slice, pool: Pool, order: int) -> None:
        self.slice = slice_
        self.pool = pool
        self.order = order
        self.candidates = tuple(Candidate(d, slice_, pool) for d in slice_.devices)
        self.alone = VisiblePool(pool, self.candidates, _invalid(pool, [self]))
        """The pool as seen by a node that reaches only this slice of it (the common case)."""


@dataclass(frozen=True, slots=True, eq=False)
class VisiblePool:
    """A pool as one node sees it: the devices reachable from the node, in a stable order.

    Compared and hashed by identity: the allocator keeps counts per pool view, and an
    inventory hands out one view per slice (or per node name) for as long as it lives.
    """

    pool: Pool
    candidates: tuple[Candidate, ...]
    invalid: str
    """Why the pool must not be allocated from ("duplicate device name X", its counter sets), or "".

    Never set for an incomplete pool, from which nothing is allocated either."""

    @property
    def closed(self) -> bool:
        """Nothing is allocated from it: it is invalid or incomplete (kube v1.37 passes over both)."""
        return bool(self.invalid) or self.pool.incomplete


def _device_reachable(device: Device, node_name: str, node_labels: Mapping[str, str]) -> bool:
    if device.node_name is not None:
        return device.node_name == node_name
    if device.all_nodes:
        return True
    if device.node_selector is not None:
        return node_selector_matches(device.node_selector, node_labels, node_name)
    return False


class Inventory:
    """Every pool's current slices, indexed by how nodes reach them. Its contents never change once built.

    When no slice reaches nodes by selector or per device, what a node sees depends on its
    name only, so each node's answer is kept: Filter asks for every node in every cycle.
    """

    __slots__ = ("_all_nodes", "_by_node", "_by_selector", "_per_device", "_seen_by_name")

    def __init__(self) -> None:
        self._by_node: dict[str, list[_SliceEntry]] = {}
        self._all_nodes: list[_SliceEntry] = []
        self._by_selector: list[_SliceEntry] = []
        self._per_device: list[_SliceEntry] = []
        self._seen_by_name: dict[str, tuple[VisiblePool, ...]] = {}

    @classmethod
    def build(
        cls, slices: Iterable[Slice], *, partitionable: bool = True, compatibility_groups: bool = False
    ) -> Inventory:
        """``partitionable``: DRAPartitionableDevices, on by default as in kube-scheduler v1.37;
        ``compatibility_groups``: DRADeviceCompatibilityGroups, off by default."""
        grouped: dict[tuple[str, str], list[Slice]] = defaultdict(list)
        for slice_ in slices:
            if not partitionable and (slice_.per_device or slice_.shared_counters):
                continue
            if not compatibility_groups and any(d.declares_groups for d in slice_.devices):
                continue
            grouped[(slice_.driver, slice_.pool)].append(slice_)
        inventory = cls()
        order = 0
        for (driver, name), members in sorted(grouped.items()):
            generation = max(s.generation for s in members)
            current = sorted((s for s in members if s.generation == generation), key=lambda s: s.name)
            pool = Pool(driver, name, incomplete=len(current) != current[0].slice_count)
            names: set[str] = set()
            for slice_ in current:
                for device in slice_.devices:
                    pool.duplicates |= device.name in names
                    pool.capacity_checked |= device.capacity_checked
                    names.add(device.name)
            if partitionable:
                pool.record_counters(current, grouping=compatibility_groups)
            for slice_ in current:
                entry = _SliceEntry(slice_, pool, order)
                order += 1
                if slice_.node_name is not None:
                    inventory._by_node.setdefault(slice_.node_name, []).append(entry)
                elif slice_.all_nodes:
                    inventory._all_nodes.append(entry)
                elif slice_.node_selector is not None:
                    inventory._by_selector.append(entry)
                elif slice_.per_device:
                    inventory._per_device.append(entry)
                # Else some future way of reaching nodes: visible nowhere, as in kube.
        return inventory

    def visible_pools(self, node_name: str, node_labels: Mapping[str, str]) -> Sequence[VisiblePool]:
        """The pools with at least one slice reachable from the node, ordered by (driver, pool).

        Raises SelectorError for a slice node selector the API would have rejected.
        """
        if self._by_selector or self._per_device:
            return self._gather(node_name, node_labels)
        seen = self._seen_by_name.get(node_name)
        if seen is None:
            seen = self._seen_by_name[node_name] = tuple(self._gather(node_name, node_labels))
        return seen

    def _gather(self, node_name: str, node_labels: Mapping[str, str]) -> list[VisiblePool]:
        entries = list(self._by_node.get(node_name, ()))
        entries.extend(self._all_nodes)
        for entry in self._by_selector:
            try:
                if node_selector_matches(entry.slice.node_selector, node_labels, node_name):
                    entries.append(entry)
            except SelectorError as exc:
                raise SelectorError(f"node selector of ResourceSlice {entry.slice.name}: {exc}") from exc
        per_device: dict[int, tuple[Candidate, ...]] = {}
        for entry in self._per_device:
            try:
                reachable = tuple(c for c in entry.candidates if _device_reachable(c.device, node_name, node_labels))
            except SelectorError as exc:
                raise SelectorError(f"device node selector in ResourceSlice {entry.slice.name}: {exc}") from exc
            if reachable:
                per_device[entry.order] = reachable
                entries.append(entry)
        if len(entries) > 1:
            entries.sort(key=lambda e: e.order)
        visible: list[VisiblePool] = []
        start = 0
        while start < len(entries):
            pool = entries[start].pool
            end = start + 1
            while end < len(entries) and entries[end].pool is pool:
                end += 1
            if end - start == 1 and entries[start].order not in per_device:
                visible.append(entries[start].alone)
                start = end
                continue
            group = entries[start:end]
            candidates: list[Candidate] = []
            for entry in group:
                candidates.extend(per_device.get(entry.order, entry.candidates))
            visible.append(VisiblePool(pool, tuple(candidates), _invalid(pool, group)))
            start = end
        return visible


def _invalid(pool: Pool, entries: list[_SliceEntry]) -> str:
    """Why a node that sees ``entries`` of the pool must not allocate from it: device names first, as kube."""
    if pool.incomplete:
        return ""
    return (_duplicate(entries) if pool.duplicates else "") or pool.invalid


def _duplicate(entries: list[_SliceEntry]) -> str:
    """Kube checks device names among the slices a node sees (all devices of each, even per-device ones)."""
    names: set[str] = set()
    for entry in entries:
        for device in entry.slice.devices:
            if device.name in names:
                return f"duplicate device name {device.name}"
            names.add(device.name)
    return ""
