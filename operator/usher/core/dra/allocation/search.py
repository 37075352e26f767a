"""The depth-first search over one node's devices, with backtracking: the allocator's general case. Pure.

Claims, then requests (a ``firstAvailable`` request tries its sub-requests in order), then the
devices each needs, in pool order, each after the request's previous one (combinations, as kube's
v1.37 allocator); a dead end gives back what its choice took and tries the next. Decision points
are frames on an explicit stack, so large claims cannot exhaust Python's recursion limit. Before
it searches, each claim does the node's part of planning: ``allocationMode: All`` requests collect
their devices and the claim's device count is checked, raising errors in kube's order. Plain plans
mostly never get here: :mod:`.descent` finds their first solution without frames.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, NamedTuple

from usher.core.dra.allocation.judging import AbortError, Judge
from usher.core.dra.allocation.planning import ClaimPlan, ClaimsPlan, PlannedRequest, Result
from usher.core.dra.allocation.pools import Candidate, Pool, VisiblePool
from usher.core.dra.consumable import CapacityError, Consumed, fits
from usher.core.dra.model import (
    RESULTS_MAX_SIZE,
    AttributeList,
    AttributeValue,
    Constraint,
    Device,
    DeviceId,
    Version,
)
from usher.core.dra.taints import untolerated

SharedUse = Mapping[DeviceId, Mapping[str, Decimal]]
"""Devices shared by allocations (results with a ``shareID``) -> what those allocations take of each capacity."""


_UNKNOWN: Final = "unknown"


def _elements(value: AttributeValue, lists: bool) -> tuple[str, frozenset[object]]:
    """An attribute value as (type, set of elements): a scalar is a list of one (kube's attributeAsSet). Without
    DRAListTypeAttributes a list is of a type the scalar comparison does not know: it shares nothing."""
    if isinstance(value, AttributeList):
        return (value.kind, value.elements) if lists else (_UNKNOWN, frozenset())
    if isinstance(value, Version):
        return "version", frozenset((value.text,))
    return "string" if isinstance(value, str) else type(value).__name__, frozenset((value,))


class _MatchAttribute:
    """``matchAttribute``: the devices of the listed requests all have the attribute, with one value in common (for
    scalars: the same type and value)."""

    __slots__ = ("common", "domain", "ident", "lists")

    def __init__(self, constraint: Constraint, lists: bool) -> None:
        self.domain, _, self.ident = constraint.attribute.partition("/")
        self.lists = lists
        self.common: list[tuple[str, frozenset[object]]] = []
        """What the devices added so far have in common, after each (popped by :meth:`remove`)."""

    def add(self, device: Device) -> bool:
        # Attributes are stored by domain, so the qualified name and the bare id of
        # the driver's domain are one lookup.
        value = device.attributes.get(self.domain, {}).get(self.ident)
        if value is None:
            return False
        kind, elements = _elements(value, self.lists)
        if self.common:  # the first device is always taken, whatever its value (as kube)
            common_kind, common = self.common[-1]
            elements = common & elements
            if kind != common_kind or not elements:
                return False
        self.common.append((kind, elements))
        return True

    def remove(self) -> None:
        self.common.pop()


class _DistinctAttribute:
    """``distinctAttribute``: the devices of the listed requests all have the attribute, and no two share a value
    (lists pairwise disjoint; values of another type never collide)."""

    __slots__ = ("domain", "ident", "lists", "values")

    def __init__(self, constraint: Constraint, lists: bool) -> None:
        self.domain, _, self.ident = constraint.attribute.partition("/")
        self.lists = lists
        self.values: list[tuple[str, frozenset[object]]] = []

    def add(self, device: Device) -> bool:
        value = device.attributes.get(self.domain, {}).get(self.ident)
        if value is None:
            return False
        kind, elements = _elements(value, self.lists)
        if kind == _UNKNOWN and self.values:
            return False  # kube's scalar comparison meets a type it does not know
        if any(seen_kind == kind and seen & elements for seen_kind, seen in self.values):
            return False
        self.values.append((kind, elements))
        return True

    def remove(self) -> None:
        self.values.pop()


class _Counters:
    """A pool's shared counters during one node's search: what its devices in use leave, less what the search took.

    kube's checkAvailableCounters: a device that consumes counters is taken only if afterwards no counter of
    the pool is below zero. Only the device's own counters can go below zero, unless the devices in use
    already overdraw one: then the pool gives no such device at all.
    """

    __slots__ = ("left", "overdrawn")

    def __init__(self, pool: Pool, in_use: Container[DeviceId], shared: SharedUse) -> None:
        self.left: dict[tuple[str, str], int] = {
            (set_name, counter): amount
            for set_name, counters in pool.counter_sets.items()
            for counter, amount in counters.items()
        }
        for device, uses in pool.consumers:
            if device in in_use or device in shared:
                for key, amount in uses:
                    self.left[key] -= amount
        self.overdrawn = any(value < 0 for value in self.left.values())

    def take(self, device: Device) -> bool:
        if self.overdrawn:
            return False
        left = self.left
        counters = device.counters
        for key, amount in counters:
            left[key] -= amount
        for key, _ in counters:
            if left[key] < 0:
                self.give(device)
                return False
        return True

    def give(self, device: Device) -> None:
        left = self.left
        for key, amount in device.counters:
            left[key] += amount


class _Intersection(NamedTuple):
    """The compatibility groups every device placed on one counter set shares (kube's
    compatibilityGroupIntersection); immutable, so a saved value is a snapshot."""

    members: bool
    all_empty: bool
    """Every device placed so far named no group: only such devices may join."""
    groups: frozenset[str]

    def admits(self, groups: frozenset[str]) -> bool:
        if not self.members:
            return True
        if not groups:
            return self.all_empty
        return not self.all_empty and bool(self.groups & groups)

    def add(self, groups: frozenset[str]) -> _Intersection:
        if not self.members:
            return _Intersection(True, not groups, groups)
        if self.all_empty or not groups:
            return self
        return _Intersection(True, False, self.groups & groups)


_NOBODY = _Intersection(False, False, frozenset())

GroupUndo = list[tuple[str, _Intersection]]


class _Groups:
    """A grouped pool's counter sets during one node's search: what the devices in use and the search's own
    picks leave admissible (DRADeviceCompatibilityGroups; kube's baseline plus consumedCompatibilityGroups)."""

    __slots__ = ("running",)

    def __init__(self, pool: Pool, in_use: Container[DeviceId], shared: SharedUse) -> None:
        self.running: dict[str, _Intersection] = {}
        for device, entries in pool.groups_of.items():
            if device in in_use or device in shared:
                for set_name, groups in entries:
                    self.running[set_name] = self.running.get(set_name, _NOBODY).add(groups)

    def take(self, device: Device) -> GroupUndo | None:
        """Fold the device's groups into every counter set it uses, or None (nothing changed) if one refuses."""
        saved: GroupUndo = []
        for set_name, groups in device.compatibility_groups:
            current = self.running.get(set_name, _NOBODY)
            if not current.admits(groups):
                self.restore(saved)
                return None
            saved.append((set_name, current))
            self.running[set_name] = current.add(groups)
        return saved

    def restore(self, saved: GroupUndo) -> None:
        for set_name, previous in reversed(saved):
            self.running[set_name] = previous


class _ClaimSearch:
    """One claim's state during one node's search."""

    __slots__ = ("devices", "plan", "results", "selected", "trackers")

    def __init__(self, plan: ClaimPlan, lists: bool) -> None:
        self.plan = plan
        self.trackers: list[_MatchAttribute | _DistinctAttribute] = [
            _DistinctAttribute(c, lists) if c.distinct else _MatchAttribute(c, lists) for c in plan.claim.constraints
        ]
        self.selected = [0] * len(plan.requests)
        self.results: list[Result] = []
        self.devices: dict[PlannedRequest, list[Candidate]] = {}
        """For All requests: the devices, collected up front."""

    def needed(self, request: PlannedRequest) -> int:
        return len(self.devices[request]) if request.all_mode else request.count


_SUB, _EXACT, _ALL = 0, 1, 2


class _Frame:
    """A decision point of the search, the alternatives it has left and what its current one took."""

    __slots__ = ("choices", "claim", "device", "kind", "request", "sub", "taken")

    def __init__(self, kind: int, claim: int, request: int, sub: int, device: int, choices: Iterator[Any]) -> None:
        self.kind = kind
        self.claim = claim
        self.request = request
        self.sub = sub
        self.device = device
        self.choices = choices
        self.taken: list[Candidate] = []
        """The devices the current alternative took, given back before the next one is tried."""


_NO_SHARES: SharedUse = {}
_ZERO = Decimal(0)
_NOTHING: Mapping[str, Decimal] = {}
_WHOLE: Consumed = {}
"""What a device that needs no capacity check leaves: everything (a dedicated device takes no capacity)."""

_DONE: Final = "done"
_FAIL: Final = "fail"


class Search:
    """One node's depth-first search over a plan's claims, requests and devices; :meth:`run` it once.

    Built per node: it prepares each claim (the node's part of planning, which may raise
    :class:`AbortError`), and after a successful run ``claims`` holds each claim's choices and devices.
    """

    def __init__(
        self,
        plan: ClaimsPlan,
        pools: Sequence[VisiblePool],
        in_use: Container[DeviceId],
        judge: Judge,
        shared: SharedUse = _NO_SHARES,
    ) -> None:
        self.pools = pools
        self.in_use = in_use
        self.shared = shared
        """Devices other claims share, and what they take (DRAConsumableCapacity)."""
        self.fractional = plan.fractional
        self.judge = judge
        self.allocating: dict[DeviceId, dict[str, Decimal]] = {}
        """What this search's shares take of each shared device, per capacity (kube's allocatingCapacity)."""
        self.sharing: Counter[DeviceId] = Counter()
        """How many shares of each device this search took: one already there, its counters are not taken again."""
        self.picked: dict[Candidate, list[int]] = {}
        """Devices picked so far in this search -> the claims (indices) they were picked for.

        Keyed by candidate identity: two candidates with one id are a duplicate device name,
        which makes the pool invalid before either can be picked.
        """
        self.counters: dict[Pool, _Counters] = {}
        """The shared counters of the pools the search took a counting device from (built on first use)."""
        self.groups: dict[Pool, _Groups] = {}
        """The compatibility groups of the grouped pools the search took a counting device from."""
        self.group_undo: list[GroupUndo] = []
        """What each counting device of a grouped pool the search holds changed, newest last."""
        self._after = [0] * (len(pools) + 1)
        """Devices in ``pools[p:]``, for every p: how many a request could still take from a position on."""
        for index in range(len(pools) - 1, -1, -1):
            self._after[index] = self._after[index + 1] + len(pools[index].candidates)
        self._lists = plan.list_attributes
        self.claims = [self._prepare(claim) for claim in plan.claims]

    # ------------------------------------------------------------ the node's part of planning

    def _prepare(self, plan: ClaimPlan) -> _ClaimSearch:
        claim = _ClaimSearch(plan, self._lists)
        minimum = plan.minimum
        if not plan.fixed:
            minimum = 0
            for alternatives in plan.requests:
                for request in alternatives:
                    if request.all_mode:
                        claim.devices[request] = self._all_devices(claim, request)
                minimum += min(claim.needed(r) for r in alternatives)
            for request in plan.partial:
                if request.all_mode:
                    self._all_devices(claim, request)
            if plan.error:
                raise AbortError(plan.error)
        if minimum > RESULTS_MAX_SIZE:
            raise AbortError(
                f"claim {plan.claim.key}: number of requested devices {minimum} "
                f"exceeds the claim limit of {RESULTS_MAX_SIZE}"
            )
        return claim

    def _all_devices(self, claim: _ClaimSearch, request: PlannedRequest) -> list[Candidate]:
        devices: list[Candidate] = []
        for visible in self.pools:
            if visible.pool.incomplete:
                raise AbortError(
                    f"claim {claim.plan.claim.key}, request {request.name}: asks for all devices, "
                    f"but resource pool {visible.pool} is currently being updated"
                )
            if visible.invalid:
                raise AbortError(
                    f"claim {claim.plan.claim.key}, request {request.name}: asks for all devices, "
                    f"but resource pool {visible.pool} is currently invalid"
                )
            for candidate in visible.candidates:
                if self.judge.selectable(claim.plan, request, candidate) and (
                    self._fits(claim, request, candidate, static=True) is not None
                ):
                    devices.append(candidate)
        return devices

    # ------------------------------------------------------------ consumable capacity

    def _fits(
        self, claim: _ClaimSearch, request: PlannedRequest, candidate: Candidate, *, static: bool = False
    ) -> Consumed | None:
        """What the request takes of the device's capacities if it fits beside what others and this search took
        (``static``: beside nothing, as an All request collects its devices); None if not. kube checks every
        device; one with nothing to check (no capacity asked, no policy, not shared) always fits."""
        device = candidate.device
        if request.capacity is None and not device.capacity_checked and candidate.id not in self.shared:
            return _WHOLE
        try:
            return fits(
                request.capacity,
                device.capacities,
                allocated=_NOTHING if static else self.shared.get(candidate.id, _NOTHING),
                allocating=_NOTHING if static else self.allocating.get(candidate.id, _NOTHING),
                fractional=self.fractional,
            )
        except CapacityError as exc:
            raise AbortError(
                f"claim {claim.plan.claim.key}, request {request.name}: checking capacity for device {candidate.id}: "
                f"{exc}"
            ) from None

    # ------------------------------------------------------------ search

    def run(self) -> bool:
        """Search until the first complete solution (True) or none is left (False); raises as :class:`Judge` does."""
        first = self._frame_at(0, 0, 0, 0, in_sub=False)
        if not isinstance(first, _Frame):
            return first is _DONE
        stack = [first]
        while stack:
            self.judge.check_deadline()
            frame = stack[-1]
            if frame.taken:
                self._give_back(frame)
            child = self._advance(frame)
            if child is None:
                stack.pop()
            elif child is _DONE:
                return True
            elif isinstance(child, _Frame):
                stack.append(child)
            # _FAIL: the next round gives back the frame's devices and tries its next choice.
        return False

    def _frame_at(
        self, ci: int, ri: int, si: int, di: int, *, in_sub: bool, after: tuple[int, int] = (0, 0)
    ) -> _Frame | str:
        """The next decision point from a position, skipping over finished requests and claims.

        ``after``: where the request's previous device was found (pool, device index + 1); its next device is
        looked for from there on, as kube's allocator does (v1.37, ``startLocation``): the devices of one request
        are tried as combinations, not as orderings of the same devices, which a failing search would all walk.
        """
        while True:
            if ci >= len(self.claims):
                return _DONE
            claim = self.claims[ci]
            requests = claim.plan.requests
            if ri >= len(requests):
                ci, ri, si, di, in_sub = ci + 1, 0, 0, 0, False
                continue
            alternatives = requests[ri]
            if claim.plan.has_subs[ri] and not in_sub:
                return _Frame(_SUB, ci, ri, 0, 0, iter(range(len(alternatives))))
            request = alternatives[si]
            if request.all_mode and not claim.devices[request]:
                return _FAIL
            needed = claim.needed(request)
            if di >= needed:
                ri, si, di, in_sub = ri + 1, 0, 0, False
                continue
            if len(claim.results) + needed - di > RESULTS_MAX_SIZE:
                return _FAIL
            if request.all_mode:
                return _Frame(_ALL, ci, ri, si, di, iter((None,)))
            if di and self._short(request, after, needed - di):
                return _FAIL
            return _Frame(_EXACT, ci, ri, si, di, self._candidates(ci, request, after if di else (0, 0)))

    def _advance(self, frame: _Frame) -> _Frame | str | None:
        """Apply the frame's next alternative; None when it has none left."""
        claim = self.claims[frame.claim]
        in_sub = claim.plan.has_subs[frame.request]
        if frame.kind == _SUB:
            for sub in frame.choices:
                claim.selected[frame.request] = sub
                return self._frame_at(frame.claim, frame.request, sub, 0, in_sub=True)
            return None
        request = claim.plan.requests[frame.request][frame.sub]
        if frame.kind == _EXACT:
            for pool_index, index, candidate in frame.choices:
                if self._take(claim, frame.claim, request, candidate, must=False):
                    frame.taken.append(candidate)
                    after = (pool_index, index)
                    return self._frame_at(
                        frame.claim, frame.request, frame.sub, frame.device + 1, in_sub=in_sub, after=after
                    )
            return None
        devices = claim.devices[request]
        for _ in frame.choices:
            for candidate in devices[frame.device :]:
                if not self._usable(frame.claim, request, candidate) or not self._take(
                    claim, frame.claim, request, candidate, must=True
                ):
                    self._give_back(frame)
                    return None
                frame.taken.append(candidate)
            return self._frame_at(frame.claim, frame.request, frame.sub, len(devices), in_sub=in_sub)
        return None

    def _short(self, request: PlannedRequest, after: tuple[int, int], still: int) -> bool:
        """Whether fewer than ``still`` devices are left from ``after`` on, all of them judged for the request
        already: no branch below can finish the request, and cutting it skips no selector kube would run (a
        CEL error it would meet) — only walks that must fail. Partitions make such walks many: seven of eight
        devices whose counters admit only one choice."""
        pool_index, index = after
        if self._after[pool_index] - index >= still:
            return False
        matches = request.matches
        pools = self.pools
        for p in range(pool_index, len(pools)):
            visible = pools[p]
            if visible.closed:
                continue  # never judged: the search passes over it
            candidates = visible.candidates
            for i in range(index if p == pool_index else 0, len(candidates)):
                if candidates[i] not in matches:
                    return False
        return True

    def _candidates(
        self, ci: int, request: PlannedRequest, after: tuple[int, int]
    ) -> Iterator[tuple[int, int, Candidate]]:
        """Free devices for one slot of an ExactCount request from ``after`` on (pool, device index), checked
        lazily against the search's state, each with the position the request's next slot starts after.

        Each is checked just before it is yielded, and the search takes or skips it before asking
        for the next, so what is yielded is free (``_take`` only checks counters and constraints).
        """
        claim = self.claims[ci]
        picked_by = self.picked
        in_use = self.in_use
        matches = request.matches
        admin = request.admin
        first_pool, first_device = after
        pools = self.pools
        for pool_index in range(first_pool, len(pools)):
            visible = pools[pool_index]
            if visible.closed:
                continue  # as kube: no devices from it; no solution then says invalid pools were met
            counted = visible.pool.counted
            candidates = visible.candidates
            for index in range(first_device if pool_index == first_pool else 0, len(candidates)):
                candidate = candidates[index]
                picked = picked_by.get(candidate)
                if admin:
                    if picked and ci in picked:
                        continue
                elif picked or candidate.id in in_use:
                    continue
                selectable = matches.get(candidate)
                if selectable is None:
                    selectable = self.judge.selectable(claim.plan, request, candidate)
                if (
                    selectable
                    and (counted or not candidate.device.consumes_counters)
                    and self._fits(claim, request, candidate) is not None
                ):
                    yield pool_index, index + 1, candidate

    def _usable(self, ci: int, request: PlannedRequest, candidate: Candidate) -> bool:
        """Whether an All request's device is free for it and its taints tolerated (ExactCount's are checked as
        they are found). A device the request selected but may not have fails the request on this node, as in
        kube's allocateDevice; the taint is checked after the counters there, which only decides the log line."""
        picked = self.picked.get(candidate)
        if request.admin:
            if picked and ci in picked:
                return False
        elif picked or candidate.id in self.in_use:
            return False
        device = candidate.device
        if device.taints and untolerated(device.taints, request.tolerations):
            return False
        return candidate.pool.counted or not device.consumes_counters

    def _take(self, claim: _ClaimSearch, ci: int, request: PlannedRequest, candidate: Candidate, *, must: bool) -> bool:
        """Pick a free device for the request if the pool's counters, the claim's constraints and the device's
        capacity allow, in kube's order (short of counters or capacity, even an All request's device just fails);
        undone by :meth:`_give_back`. A shared device's counters are taken by its first share only."""
        device = candidate.device
        shared = device.allow_multiple
        counters = None
        if device.consumes_counters and not (shared and self._shared_already(candidate.id)):
            pool = candidate.pool
            if pool.grouped:
                groups = self.groups.get(pool)
                if groups is None:
                    groups = self.groups[pool] = _Groups(pool, self.in_use, self.shared)
                undo = groups.take(device)
                if undo is None:
                    return False
                self.group_undo.append(undo)
            counters = self.counters.get(pool)
            if counters is None:
                counters = self.counters[pool] = _Counters(pool, self.in_use, self.shared)
            if not counters.take(device):
                self._ungroup(candidate)
                return False
        added = 0
        trackers = claim.trackers
        for i in request.constraints:
            if not trackers[i].add(device):
                self._undo(claim, request, candidate, counters, added)
                if must:
                    raise AbortError(
                        f"claim {claim.plan.claim.key}, request {request.name}: cannot add device "
                        f"{candidate.id} because a claim constraint would not be satisfied"
                    )
                return False
            added += 1
        consumed = None
        if shared or request.capacity is not None or device.capacity_checked or candidate.id in self.shared:
            try:
                consumed = self._fits(claim, request, candidate)
            finally:
                if consumed is None:
                    self._undo(claim, request, candidate, counters, added)
            if consumed is None:
                return False
        if shared:
            assert consumed is not None
            self.sharing[candidate.id] += 1
            taking = self.allocating.get(candidate.id)
            if taking is None:
                taking = self.allocating[candidate.id] = {}
            for name, amount in consumed.items():
                taking[name] = taking.get(name, _ZERO) + amount.value
            claim.results.append((request, candidate, consumed))
            return True
        picked = self.picked.get(candidate)
        if picked is None:
            self.picked[candidate] = [ci]
        else:
            picked.append(ci)
        claim.results.append((request, candidate, None))
        return True

    def _shared_already(self, device: DeviceId) -> bool:
        """Whether another allocation or this search already shares the device (kube's deviceCapacityInUse)."""
        return device in self.shared or self.sharing[device] > 0

    def _undo(
        self,
        claim: _ClaimSearch,
        request: PlannedRequest,
        candidate: Candidate,
        counters: _Counters | None,
        constraints: int,
    ) -> None:
        """Give back what a refused :meth:`_take` took: its first ``constraints`` constraints, then the counters."""
        for i in request.constraints[:constraints]:
            claim.trackers[i].remove()
        if counters is not None:
            counters.give(candidate.device)
            self._ungroup(candidate)

    def _ungroup(self, candidate: Candidate) -> None:
        """Give back what the device's compatibility groups changed (it took counters of a grouped pool)."""
        if candidate.pool.grouped:
            self.groups[candidate.pool].restore(self.group_undo.pop())

    def _give_back(self, frame: _Frame) -> None:
        """Undo what the frame's current alternative took, newest first."""
        claim = self.claims[frame.claim]
        request = claim.plan.requests[frame.request][frame.sub]
        taken = frame.taken
        while taken:
            candidate = taken.pop()
            for i in request.constraints:
                claim.trackers[i].remove()
            _, _, consumed = claim.results.pop()
            if consumed is not None:  # a share
                self.sharing[candidate.id] -= 1
                taking = self.allocating[candidate.id]
                for name, amount in consumed.items():
                    taking[name] -= amount.value
                if not self.sharing[candidate.id]:
                    del self.sharing[candidate.id], self.allocating[candidate.id]
                if candidate.device.consumes_counters and self._shared_already(candidate.id):
                    continue  # an earlier share holds the counters
            if candidate.device.consumes_counters:
                self.counters[candidate.pool].give(candidate.device)
                self._ungroup(candidate)
            if consumed is not None:
                continue
            claims = self.picked[candidate]
            claims.pop()
            if not claims:
                del self.picked[candidate]
