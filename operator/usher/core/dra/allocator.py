"""The structured-parameters allocator: devices for all of a pod's unallocated claims on one node. Pure.

Theory of operation, as kube-scheduler's DynamicResources plugin does it
(``k8s.io/dynamic-resource-allocation/structured``, the stable variant):

1. Gather the pools the node can reach (:mod:`usher.core.dra.pools`).
2. Plan every request: look up its class, and for ``allocationMode: All``
   collect every matching device up front (refused while a reachable pool is
   incomplete or invalid). A claim needing more than 32 devices is an error.
3. Search depth-first over claims, then requests (a ``firstAvailable``
   request tries its sub-requests in order), then the devices each needs, and
   backtrack on failure. A device is taken if it is in use elsewhere or already
   picked in this search; adminAccess requests ignore both, except that one
   claim never gets the same device twice. Class selectors, then request
   selectors, must be true; ``matchAttribute`` constraints must hold within
   the claim. Meeting an invalid pool while looking for devices is an error.
   The first complete solution wins.
4. Build each claim's ``status.allocation`` (:mod:`usher.core.dra.results`):
   results, configs (FromClass first, then FromClaim) and the node selector
   the devices imply.

Outcomes mirror the plugin's Filter: no solution is "cannot allocate all
claims", a passed deadline is "timed out trying to allocate devices" (both
Unschedulable), and CEL errors, invalid pools or impossible requests are an
error that aborts the scheduling attempt. The search is iterative (an explicit
stack), so large claims cannot exhaust Python's recursion limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from usher.core.dra.model import (
    ALL,
    RESULTS_MAX_SIZE,
    Claim,
    Constraint,
    Device,
    DeviceClass,
    DeviceId,
    SubRequest,
)
from usher.core.dra.pools import Candidate, Inventory, VisiblePool
from usher.core.dra.results import Allocation, ChosenRequest, Pick, build_allocation
from usher.core.selectors import SelectorError

__all__ = [
    "REASON_CANNOT_ALLOCATE",
    "REASON_TIMED_OUT",
    "Allocation",
    "AllocationOutcome",
    "Evaluate",
    "Inventory",
    "allocate",
]

REASON_CANNOT_ALLOCATE: Final = "cannot allocate all claims"
REASON_TIMED_OUT: Final = "timed out trying to allocate devices"

Evaluate = Callable[[str, Device, str], bool]
"""``evaluate(expression, device, driver)``: a CEL selector's result; raises for a CEL error."""


@dataclass(frozen=True, slots=True)
class AllocationOutcome:
    ok: bool
    allocations: Mapping[str, Allocation] = field(default_factory=dict)
    """Claim uid -> allocation, for every claim, when ok."""
    reason: str = ""
    """Why not: REASON_CANNOT_ALLOCATE, REASON_TIMED_OUT, or the error text."""
    error: str | None = None
    """Set when the attempt must abort (Error status) rather than try other nodes."""


class _AbortError(Exception):
    """Allocation cannot continue anywhere: an Error outcome."""


class _TimedOutError(Exception):
    pass


class _MatchAttribute:
    """``matchAttribute``: every device of the listed requests shares the attribute's type and value."""

    __slots__ = ("count", "domain", "ident", "requests", "value")

    def __init__(self, constraint: Constraint) -> None:
        self.requests = frozenset(constraint.requests)
        self.domain, _, self.ident = constraint.match_attribute.partition("/")
        self.value: object = None
        self.count = 0

    def applies(self, base: str, sub: str) -> bool:
        if not self.requests:
            return True
        return base in self.requests or (bool(sub) and f"{base}/{sub}" in self.requests)

    def add(self, device: Device) -> bool:
        # Attributes are stored by domain, so the qualified name and the bare id of
        # the driver's domain are one lookup.
        value = device.attributes.get(self.domain, {}).get(self.ident)
        if value is None:
            return False
        if self.count == 0:
            self.value = value
        elif type(value) is not type(self.value) or value != self.value:
            return False
        self.count += 1
        return True

    def remove(self) -> None:
        self.count -= 1


class _Plan:
    """A request without sub-requests, or one sub-request, ready for the search."""

    __slots__ = (
        "admin",
        "all_mode",
        "base",
        "class_",
        "constraints",
        "count",
        "devices",
        "matches",
        "name",
        "selectors",
        "sub",
    )

    def __init__(self, base: str, sub: str, spec: SubRequest, class_: DeviceClass, claim: _ClaimPlan) -> None:
        self.base = base
        self.sub = sub
        self.name = f"{base}/{sub}" if sub else base
        self.class_ = class_
        self.selectors = spec.selectors
        self.all_mode = spec.mode == ALL
        self.admin = spec.admin_access
        self.count = spec.count
        self.devices: list[Candidate] = []
        """For All: the devices, collected up front."""
        self.matches: dict[Candidate, bool] = {}
        self.constraints = tuple(c for c in claim.constraints if c.applies(base, sub))

    def needed(self) -> int:
        return len(self.devices) if self.all_mode else self.count


class _ClaimPlan:
    __slots__ = ("claim", "constraints", "has_subs", "requests", "results", "selected")

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.constraints = [_MatchAttribute(c) for c in claim.constraints]
        self.requests: list[list[_Plan]] = []
        self.has_subs: list[bool] = []
        self.selected: list[int] = []
        self.results: list[tuple[_Plan, Candidate]] = []


_SUB, _EXACT, _ALL = 0, 1, 2


class _Frame:
    """A decision point of the search and the alternatives it has left."""

    __slots__ = ("choices", "claim", "device", "kind", "request", "sub", "undo")

    def __init__(self, kind: int, claim: int, request: int, sub: int, device: int, choices: Iterator[Any]) -> None:
        self.kind = kind
        self.claim = claim
        self.request = request
        self.sub = sub
        self.device = device
        self.choices = choices
        self.undo: Callable[[], None] | None = None


_DONE: Final = "done"
_FAIL: Final = "fail"


class _Search:
    def __init__(
        self,
        claims: Sequence[Claim],
        pools: list[VisiblePool],
        classes: Mapping[str, DeviceClass],
        in_use: Container[DeviceId],
        evaluate: Evaluate,
        deadline: float | None,
        now: Callable[[], float],
    ) -> None:
        self.pools = pools
        self.in_use = in_use
        self.evaluate = evaluate
        self.deadline = deadline
        self.now = now
        self.picked: dict[DeviceId, list[int]] = {}
        """Devices picked so far in this search -> the claims (indices) they were picked for."""
        self.claims = [self._plan_claim(claim, classes) for claim in claims]

    # ------------------------------------------------------------ planning

    def _plan_claim(self, claim: Claim, classes: Mapping[str, DeviceClass]) -> _ClaimPlan:
        plan = _ClaimPlan(claim)
        minimum = 0
        for request in claim.requests:
            if request.exactly is not None:
                alternatives = [self._plan_request(plan, request.name, "", request.exactly, classes)]
            else:
                alternatives = [
                    self._plan_request(plan, request.name, s.name, s, classes) for s in request.first_available
                ]
            plan.requests.append(alternatives)
            plan.has_subs.append(request.exactly is None)
            plan.selected.append(0)
            minimum += min(p.needed() for p in alternatives)
        if minimum > RESULTS_MAX_SIZE:
            raise _AbortError(
                f"claim {claim.key}: number of requested devices {minimum} "
                f"exceeds the claim limit of {RESULTS_MAX_SIZE}"
            )
        return plan

    def _plan_request(
        self, claim: _ClaimPlan, base: str, sub: str, spec: SubRequest, classes: Mapping[str, DeviceClass]
    ) -> _Plan:
        name = f"{base}/{sub}" if sub else base
        class_ = classes.get(spec.class_name)
        if class_ is None:
            raise _AbortError(f"claim {claim.claim.key}, request {name}: device class {spec.class_name} does not exist")
        plan = _Plan(base, sub, spec, class_, claim)
        if plan.all_mode:
            for visible in self.pools:
                if visible.pool.incomplete:
                    raise _AbortError(
                        f"claim {claim.claim.key}, request {name}: asks for all devices, "
                        f"but resource pool {visible.pool} is currently being updated"
                    )
                if visible.invalid:
                    raise _AbortError(
                        f"claim {claim.claim.key}, request {name}: asks for all devices, "
                        f"but resource pool {visible.pool} is currently invalid"
                    )
                plan.devices.extend(c for c in visible.candidates if self._selectable(claim, plan, c))
        return plan

    # ------------------------------------------------------------ selectors

    def _selectable(self, claim: _ClaimPlan, plan: _Plan, candidate: Candidate) -> bool:
        """Class selectors, then request selectors (cached per device for the request, as kube does)."""
        cached = plan.matches.get(candidate)
        if cached is not None:
            return cached
        device = candidate.device
        matches = not device.has_binding_conditions
        if matches and self.deadline is not None and self.now() > self.deadline:
            raise _TimedOutError
        driver = candidate.id.driver
        for i, expression in enumerate(plan.class_.selectors if matches else ()):
            try:
                if not self.evaluate(expression, device, driver):
                    matches = False
                    break
            except Exception as exc:
                raise _AbortError(
                    f"class {plan.class_.name}: selector #{i} {expression!r} on device {candidate.id}: "
                    f"CEL runtime error: {exc}"
                ) from exc
        for i, expression in enumerate(plan.selectors if matches else ()):
            try:
                if not self.evaluate(expression, device, driver):
                    matches = False
                    break
            except Exception as exc:
                raise _AbortError(
                    f"claim {claim.claim.key}, request {plan.name}: selector #{i} {expression!r} "
                    f"on device {candidate.id}: CEL runtime error: {exc}"
                ) from exc
        plan.matches[candidate] = matches
        return matches

    # ------------------------------------------------------------ search

    def run(self) -> bool:
        first = self._frame_at(0, 0, 0, 0, in_sub=False)
        if not isinstance(first, _Frame):
            return first is _DONE
        stack = [first]
        while stack:
            if self.deadline is not None and self.now() > self.deadline:
                raise _TimedOutError
            frame = stack[-1]
            if frame.undo is not None:
                frame.undo()
                frame.undo = None
            child = self._advance(frame)
            if child is None:
                stack.pop()
            elif child is _DONE:
                return True
            elif isinstance(child, _Frame):
                stack.append(child)
            # _FAIL: the next round undoes the frame's choice and tries its next one.
        return False

    def _frame_at(self, ci: int, ri: int, si: int, di: int, *, in_sub: bool) -> _Frame | str:
        """The next decision point from a position, skipping over finished requests and claims."""
        while True:
            if ci >= len(self.claims):
                return _DONE
            claim = self.claims[ci]
            if ri >= len(claim.requests):
                ci, ri, si, di, in_sub = ci + 1, 0, 0, 0, False
                continue
            alternatives = claim.requests[ri]
            if claim.has_subs[ri] and not in_sub:
                return _Frame(_SUB, ci, ri, 0, 0, iter(range(len(alternatives))))
            plan = alternatives[si]
            if plan.all_mode and not plan.devices:
                return _FAIL
            needed = plan.needed()
            if di >= needed:
                ri, si, di, in_sub = ri + 1, 0, 0, False
                continue
            if len(claim.results) + needed - di > RESULTS_MAX_SIZE:
                return _FAIL
            if plan.all_mode:
                return _Frame(_ALL, ci, ri, si, di, iter((None,)))
            return _Frame(_EXACT, ci, ri, si, di, self._candidates(ci, plan))

    def _advance(self, frame: _Frame) -> _Frame | str | None:
        """Apply the frame's next alternative; None when it has none left."""
        claim = self.claims[frame.claim]
        in_sub = claim.has_subs[frame.request]
        if frame.kind == _SUB:
            for sub in frame.choices:
                claim.selected[frame.request] = sub
                return self._frame_at(frame.claim, frame.request, sub, 0, in_sub=True)
            return None
        plan = claim.requests[frame.request][frame.sub]
        if frame.kind == _EXACT:
            for candidate in frame.choices:
                undo = self._take(frame.claim, plan, candidate, must=False)
                if undo is not None:
                    frame.undo = undo
                    return self._frame_at(frame.claim, frame.request, frame.sub, frame.device + 1, in_sub=in_sub)
            return None
        for _ in frame.choices:
            undos: list[Callable[[], None]] = []
            for candidate in plan.devices[frame.device :]:
                undo = self._take(frame.claim, plan, candidate, must=True)
                if undo is None:
                    for taken in reversed(undos):
                        taken()
                    return None
                undos.append(undo)

            def undo_all(undos: list[Callable[[], None]] = undos) -> None:
                for taken in reversed(undos):
                    taken()

            frame.undo = undo_all
            return self._frame_at(frame.claim, frame.request, frame.sub, len(plan.devices), in_sub=in_sub)
        return None

    def _candidates(self, ci: int, plan: _Plan) -> Iterator[Candidate]:
        """Devices for one slot of an ExactCount request, checked lazily against the search's state."""
        claim = self.claims[ci]
        for visible in self.pools:
            if visible.invalid:
                raise _AbortError(f"pool {visible.pool} is invalid: {visible.invalid}")
            for candidate in visible.candidates:
                picked = self.picked.get(candidate.id)
                if plan.admin:
                    if picked and ci in picked:
                        continue
                elif picked or candidate.id in self.in_use:
                    continue
                if self._selectable(claim, plan, candidate):
                    yield candidate

    def _take(self, ci: int, plan: _Plan, candidate: Candidate, *, must: bool) -> Callable[[], None] | None:
        """Pick a device for the plan if it is free and the claim's constraints allow; returns the undo."""
        picked = self.picked.get(candidate.id)
        if plan.admin:
            if picked and ci in picked:
                return None
        elif picked or candidate.id in self.in_use:
            return None
        if candidate.device.consumes_counters:
            return None
        claim = self.claims[ci]
        for i, constraint in enumerate(plan.constraints):
            if not constraint.add(candidate.device):
                if must:
                    raise _AbortError(
                        f"claim {claim.claim.key}, request {plan.name}: cannot add device {candidate.id} "
                        "because a claim constraint would not be satisfied"
                    )
                for added in plan.constraints[:i]:
                    added.remove()
                return None
        self.picked.setdefault(candidate.id, []).append(ci)
        claim.results.append((plan, candidate))

        def undo() -> None:
            for constraint in plan.constraints:
                constraint.remove()
            claims = self.picked[candidate.id]
            claims.pop()
            if not claims:
                del self.picked[candidate.id]
            claim.results.pop()

        return undo


def _allocation(claim: _ClaimPlan) -> Allocation:
    chosen: list[ChosenRequest] = []
    for index, alternatives in enumerate(claim.requests):
        plan = alternatives[claim.selected[index] if claim.has_subs[index] else 0]
        chosen.append(ChosenRequest(plan.base, plan.name, claim.has_subs[index], plan.class_))
    picks = [Pick(plan.name, plan.admin, candidate) for plan, candidate in claim.results]
    return build_allocation(claim.claim, chosen, picks)


# ---------------------------------------------------------------- entry point


def allocate(
    claims: Sequence[Claim],
    *,
    node_name: str,
    node_labels: Mapping[str, str],
    inventory: Inventory,
    classes: Mapping[str, DeviceClass],
    in_use: Container[DeviceId],
    evaluate: Evaluate,
    deadline: float | None = None,
    now: Callable[[], float] = time.monotonic,
) -> AllocationOutcome:
    """Allocate devices for all of one pod's unallocated claims together, on one node.

    ``in_use`` holds the devices other claims hold (allocated or in flight, adminAccess results
    excluded); ``deadline`` is a time on ``now``'s clock. Nothing is mutated: the caller records
    the chosen allocations as in flight.
    """
    for claim in claims:
        if claim.allocation is not None:
            raise ValueError(f"claim {claim.key} is already allocated")
    if len({c.uid for c in claims}) != len(claims):
        raise ValueError("the same claim is passed twice")
    try:
        pools = inventory.visible_pools(node_name, node_labels)
        search = _Search(claims, pools, classes, in_use, evaluate, deadline, now)
        found = search.run()
    except _TimedOutError:
        return AllocationOutcome(ok=False, reason=REASON_TIMED_OUT)
    except SelectorError as exc:
        message = f"failed to perform node selection: {exc}"
        return AllocationOutcome(ok=False, reason=message, error=message)
    except _AbortError as exc:
        return AllocationOutcome(ok=False, reason=str(exc), error=str(exc))
    if not found:
        return AllocationOutcome(ok=False, reason=REASON_CANNOT_ALLOCATE)
    return AllocationOutcome(ok=True, allocations={c.claim.uid: _allocation(c) for c in search.claims})
