"""The structured-parameters allocator: devices for all of a pod's unallocated claims on one node. Pure.

Theory of operation, as kube-scheduler's DynamicResources plugin does it
(``k8s.io/dynamic-resource-allocation/structured``, the stable variant):

1. Plan every request, once per scheduling cycle (:func:`plan_claims`): look
   up its class and the claim constraints that apply to it. Nothing here
   depends on the node, so Filter reuses the plan on every node, and with it
   each request's selector results per device (which a :class:`MatchMemo`
   can carry over to the next cycles).
2. Gather the pools the node can reach (:mod:`usher.core.dra.pools`).
3. For ``allocationMode: All`` collect every matching device up front
   (refused while a reachable pool is incomplete or invalid). A claim needing
   more than 32 devices is an error.
4. Search depth-first over claims, then requests (a ``firstAvailable``
   request tries its sub-requests in order), then the devices each needs, and
   backtrack on failure. A device is taken if it is in use elsewhere or already
   picked in this search; adminAccess requests ignore both, except that one
   claim never gets the same device twice. Class selectors, then request
   selectors, must be true; ``matchAttribute`` constraints must hold within
   the claim. Meeting an invalid pool while looking for devices is an error.
   The first complete solution wins. For claims of plain requests (ExactCount,
   no adminAccess, no constraint, no alternatives) the first descent starts
   from the first free devices an earlier descent found in each pool, while
   the pool's in-use version holds (:class:`_FirstFree`): a pool nothing was
   taken from or freed in since costs a lookup, not a walk.
5. Build each claim's ``status.allocation`` (:mod:`usher.core.dra.results`),
   when it is first read: results, configs (FromClass first, then FromClaim)
   and the node selector the devices imply. Filter finds a solution on every
   node, Reserve reads only the chosen node's.

Errors are raised where kube raises them while walking the claims in order
(a missing class, then an ``All`` request's pools, then the claim's device
count), so a plan keeps the error it met and each node replays the walk up to
it. Outcomes mirror the plugin's Filter: no solution is "cannot allocate all
claims", a passed deadline is "timed out trying to allocate devices" (both
Unschedulable), and CEL errors, invalid pools or impossible requests are an
error that aborts the scheduling attempt. The search is iterative (an explicit
stack), so large claims cannot exhaust Python's recursion limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, NamedTuple

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
    "ClaimsPlan",
    "Evaluate",
    "Inventory",
    "MatchMemo",
    "allocate",
    "plan_claims",
    "remembered_outcome",
    "surely_unsatisfiable",
]

REASON_CANNOT_ALLOCATE: Final = "cannot allocate all claims"
REASON_TIMED_OUT: Final = "timed out trying to allocate devices"

Evaluate = Callable[[str, Device, str], bool]
"""``evaluate(expression, device, driver)``: a CEL selector's result; raises for a CEL error."""


class AllocationOutcome(NamedTuple):
    """What :func:`allocate` found on one node.

    A named tuple rather than a frozen dataclass: Filter makes one per feasible node, and a
    tuple is built in C (a frozen dataclass sets each field through ``object.__setattr__``).
    """

    ok: bool
    allocations: Mapping[str, Allocation] = MappingProxyType({})
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

    __slots__ = ("count", "domain", "ident", "value")

    def __init__(self, constraint: Constraint) -> None:
        self.domain, _, self.ident = constraint.match_attribute.partition("/")
        self.value: object = None
        self.count = 0

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


def _constraint_applies(constraint: Constraint, base: str, sub: str) -> bool:
    if not constraint.requests:
        return True
    return base in constraint.requests or (bool(sub) and f"{base}/{sub}" in constraint.requests)


# ---------------------------------------------------------------- the plan (once per cycle)


class MatchMemo:
    """Which devices each combination of class and request selectors accepts, across cycles.

    An answer depends on the device and the expressions only, so pods asking alike share them
    and each node's device is judged once rather than once per pod. Answers are kept per
    :class:`Candidate`, so they hold for one :class:`Inventory` and one ``evaluate``: the owner
    clears the memo when it builds a new inventory. Beyond ``max_combinations`` combinations,
    all are forgotten when the next pod is planned; each holds at most one answer per device.

    Beside the answers, each combination keeps how many of a pool's devices it accepts that are
    free (see :func:`surely_unsatisfiable`), and which they are as far as a search looked for them
    (see :class:`_FirstFree`), per pool and in-use version of the pool.

    A selector that fails (a CEL error, or one refused after running over its CPU limit) takes
    the answers that relied on it along: it must fail again wherever it would be evaluated.
    """

    __slots__ = ("_by_selectors", "_first_free", "_free", "_max")

    def __init__(self, *, max_combinations: int = 64) -> None:
        self._by_selectors: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[Candidate, bool]] = {}
        self._free: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[VisiblePool, tuple[int, int]]] = {}
        self._first_free: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[VisiblePool, _FirstFree]] = {}
        self._max = max(1, max_combinations)

    def answers(self, class_selectors: tuple[str, ...], request_selectors: tuple[str, ...]) -> dict[Candidate, bool]:
        """The answers for one combination, to read and add to (the same dict for every plan)."""
        key = (class_selectors, request_selectors)
        found = self._by_selectors.get(key)
        if found is None:
            found = self._by_selectors[key] = {}
        return found

    def free_counts(
        self, class_selectors: tuple[str, ...], request_selectors: tuple[str, ...]
    ) -> dict[VisiblePool, tuple[int, int]]:
        """A pool as nodes see it -> (its in-use version, the free devices the combination accepts, or -1).

        -1 where an answer was not known; forgotten with the answers, and when over
        ``_MAX_COUNTS`` pools (inventories with node selectors make a pool's view per call).
        """
        key = (class_selectors, request_selectors)
        found = self._free.get(key)
        if found is None:
            found = self._free[key] = {}
        return found

    def first_free(
        self, class_selectors: tuple[str, ...], request_selectors: tuple[str, ...]
    ) -> dict[VisiblePool, _FirstFree]:
        """A pool as nodes see it -> the free devices the combination accepts, as far as found.

        Forgotten with the answers, and when over ``_MAX_COUNTS`` pools.
        """
        key = (class_selectors, request_selectors)
        found = self._first_free.get(key)
        if found is None:
            found = self._first_free[key] = {}
        return found

    def forget(self, expression: str) -> None:
        """Drop every answer that relied on ``expression``, also from plans already made."""
        for kept in (self._by_selectors, self._free, self._first_free):
            for (class_selectors, request_selectors), answers in kept.items():
                if expression in class_selectors or expression in request_selectors:
                    answers.clear()

    def clear(self) -> None:
        self._by_selectors.clear()
        self._free.clear()
        self._first_free.clear()

    def make_room(self) -> None:
        """Forget everything if over the limit; only between plans, so a plan in use stays reachable by forget()."""
        if len(self._by_selectors) >= self._max:
            self.clear()


class _Request:
    """A request without sub-requests, or one sub-request, ready for the search on any node.

    ``matches`` holds the selector results per device: they depend on the device and the
    expressions only, so one node's answers are good for every other node of the cycle
    (and, with a :class:`MatchMemo`, of later cycles).
    """

    __slots__ = (
        "admin",
        "all_mode",
        "base",
        "class_",
        "constraints",
        "count",
        "first_free",
        "matches",
        "name",
        "plain",
        "selectors",
        "sub",
    )

    def __init__(
        self,
        base: str,
        sub: str,
        spec: SubRequest,
        class_: DeviceClass,
        constraints: Sequence[Constraint],
        memo: MatchMemo,
    ) -> None:
        self.base = base
        self.sub = sub
        self.name = f"{base}/{sub}" if sub else base
        self.class_ = class_
        self.selectors = spec.selectors
        self.all_mode = spec.mode == ALL
        self.admin = spec.admin_access
        self.count = spec.count
        self.constraints = tuple(i for i, c in enumerate(constraints) if _constraint_applies(c, base, sub))
        """Indices of the claim constraints that apply to this request."""
        self.matches = memo.answers(class_.selectors, spec.selectors)
        self.first_free = memo.first_free(class_.selectors, spec.selectors)
        self.plain = not self.all_mode and not self.admin and not self.constraints
        """ExactCount, no adminAccess, no constraint: any free matching device will do."""


class _ClaimPlan:
    """One claim's requests and their alternatives, as far as planning got.

    ``error`` is the first node-independent error (a missing class): each node walks
    ``requests``, then ``partial`` (the sub-requests before the missing one), then raises it,
    so a node-dependent error met earlier in the walk still wins, as in kube.
    """

    __slots__ = (
        "claim",
        "error",
        "fixed",
        "has_all",
        "has_subs",
        "minimum",
        "partial",
        "plain",
        "requests",
        "slots",
        "unselected",
    )

    def __init__(self, claim: Claim, classes: Mapping[str, DeviceClass], memo: MatchMemo) -> None:
        self.claim = claim
        self.requests: list[tuple[_Request, ...]] = []
        self.has_subs: list[bool] = []
        self.partial: tuple[_Request, ...] = ()
        self.error = ""
        for request in claim.requests:
            subs = (
                [("", request.exactly)]
                if request.exactly is not None
                else [(s.name, s) for s in request.first_available]
            )
            alternatives: list[_Request] = []
            for sub, spec in subs:
                class_ = classes.get(spec.class_name)
                if class_ is None:
                    name = f"{request.name}/{sub}" if sub else request.name
                    self.error = f"claim {claim.key}, request {name}: device class {spec.class_name} does not exist"
                    self.partial = tuple(alternatives)
                    break
                alternatives.append(_Request(request.name, sub, spec, class_, claim.constraints, memo))
            if self.error:
                break
            self.requests.append(tuple(alternatives))
            self.has_subs.append(request.exactly is None)
        self.has_all = any(r.all_mode for alternatives in self.requests for r in alternatives) or any(
            r.all_mode for r in self.partial
        )
        self.minimum = sum(min(r.count for r in alternatives) for alternatives in self.requests)
        """Devices the claim needs at least, when it has no All request (else counted per node)."""
        self.fixed = not self.has_all and not self.error
        """Whether nodes can skip the planning walk: nothing in it depends on the node."""
        self.plain = (
            self.fixed
            and self.minimum <= RESULTS_MAX_SIZE
            and not any(self.has_subs)
            and all(alternatives[0].plain for alternatives in self.requests)
        )
        """Only plain requests without alternatives: the search's first descent needs no stack."""
        self.unselected = (0,) * len(self.requests)
        self.slots = tuple(r for (r, *_) in self.requests for _ in range(r.count)) if self.plain else ()
        """For plain claims: each device's request, in the order the descent picks them."""


class ClaimsPlan:
    """All of a pod's unallocated claims, planned once for every node of a scheduling cycle."""

    __slots__ = ("checkable", "claims", "demands", "memo", "plain")

    def __init__(self, claims: tuple[_ClaimPlan, ...], memo: MatchMemo) -> None:
        self.claims = claims
        self.memo = memo
        self.plain = bool(claims) and all(claim.plain for claim in claims)
        """There are claims, and every one is plain (see :func:`_descend`)."""
        requests = [r for claim in claims for alternatives in claim.requests for r in alternatives]
        self.checkable = (
            bool(claims)
            and all(claim.fixed and claim.minimum <= RESULTS_MAX_SIZE for claim in claims)
            and not any(r.admin for r in requests)
        )
        """Whether a node can fail only for want of devices: see :func:`surely_unsatisfiable`."""
        demands: dict[int, _Demand] = {}
        for request in requests:
            demand = demands.get(id(request.matches))
            if demand is None:
                demand = demands[id(request.matches)] = _Demand(request, memo)
        for claim in claims:
            for alternatives, has_subs in zip(claim.requests, claim.has_subs, strict=True):
                if not has_subs:
                    demands[id(alternatives[0].matches)].count += alternatives[0].count
        self.demands = tuple(demands.values())
        """Per combination of selectors: the devices that ExactCount requests without alternatives need."""


class _Demand:
    """How many distinct devices some requests need, all accepted by one combination of selectors."""

    __slots__ = ("count", "free", "matches")

    def __init__(self, request: _Request, memo: MatchMemo) -> None:
        self.matches = request.matches
        self.free = memo.free_counts(request.class_.selectors, request.selectors)
        self.count = 0


def plan_claims(
    claims: Sequence[Claim], classes: Mapping[str, DeviceClass], *, memo: MatchMemo | None = None
) -> ClaimsPlan:
    """Plan the claims of one pod for :func:`allocate`; pure, and independent of any node.

    With a ``memo``, selector answers found for earlier pods are reused and new ones added;
    without, the answers are shared by the nodes of this plan only.
    Raises ValueError for a claim already allocated or passed twice (a caller's mistake);
    errors of the claims themselves come out of :func:`allocate`, where kube reports them.
    """
    for claim in claims:
        if claim.allocation is not None:
            raise ValueError(f"claim {claim.key} is already allocated")
    if len({c.uid for c in claims}) != len(claims):
        raise ValueError("the same claim is passed twice")
    if memo is None:
        memo = MatchMemo()
    else:
        memo.make_room()
    return ClaimsPlan(tuple(_ClaimPlan(claim, classes, memo) for claim in claims), memo)


# ---------------------------------------------------------------- the search (once per node)


class _ClaimSearch:
    """One claim's state during one node's search."""

    __slots__ = ("devices", "plan", "results", "selected", "trackers")

    def __init__(self, plan: _ClaimPlan) -> None:
        self.plan = plan
        self.trackers = [_MatchAttribute(c) for c in plan.claim.constraints] if plan.claim.constraints else []
        self.selected = [0] * len(plan.requests)
        self.results: list[tuple[_Request, Candidate]] = []
        self.devices: dict[_Request, list[Candidate]] = {}
        """For All requests: the devices, collected up front."""

    def needed(self, request: _Request) -> int:
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


_DONE: Final = "done"
_FAIL: Final = "fail"


class _Judge:
    """Runs a request's selectors on a device the request has no answer for yet."""

    __slots__ = ("deadline", "evaluate", "memo", "now")

    def __init__(self, evaluate: Evaluate, memo: MatchMemo, deadline: float | None, now: Callable[[], float]) -> None:
        self.evaluate = evaluate
        self.memo = memo
        self.deadline = deadline
        self.now = now

    def check_deadline(self) -> None:
        if self.deadline is not None and self.now() > self.deadline:
            raise _TimedOutError

    def selectable(self, claim: _ClaimPlan, request: _Request, candidate: Candidate) -> bool:
        """Class selectors, then request selectors (cached per device for the request, as kube does)."""
        cached = request.matches.get(candidate)
        if cached is not None:
            return cached
        device = candidate.device
        matches = not device.has_binding_conditions
        if matches:
            self.check_deadline()
        driver = candidate.id.driver
        for i, expression in enumerate(request.class_.selectors if matches else ()):
            try:
                if not self.evaluate(expression, device, driver):
                    matches = False
                    break
            except Exception as exc:
                self.memo.forget(expression)
                raise _AbortError(
                    f"class {request.class_.name}: selector #{i} {expression!r} on device {candidate.id}: "
                    f"CEL runtime error: {exc}"
                ) from exc
        for i, expression in enumerate(request.selectors if matches else ()):
            try:
                if not self.evaluate(expression, device, driver):
                    matches = False
                    break
            except Exception as exc:
                self.memo.forget(expression)
                raise _AbortError(
                    f"claim {claim.claim.key}, request {request.name}: selector #{i} {expression!r} "
                    f"on device {candidate.id}: CEL runtime error: {exc}"
                ) from exc
        request.matches[candidate] = matches
        return matches


def _descend(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    in_use: Container[DeviceId],
    evaluate: Evaluate,
    deadline: float | None,
    now: Callable[[], float],
) -> list[_Solution] | bool:
    """The depth-first search's first descent, for plain plans: each slot takes the first free device.

    Without alternatives or constraints every slot's first choice is the first free matching
    device in pool order, so the descent needs no frames and no search state: it walks the
    devices as :class:`_Search` would, in the same order (the same selectors run, the same errors
    are met). The solutions when every slot got a device (the search's first solution), False
    when the first slot got none (the search finds none either), True when a later slot got
    none: the search must backtrack (the answers stay, so nothing is evaluated twice).
    """
    picked: set[Candidate] = set()
    solutions: list[_Solution] = []
    judge: _Judge | None = None  # only once a selector must run
    for claim in plan.claims:
        results: list[tuple[_Request, Candidate]] = []
        for request in claim.slots:
            if deadline is not None and now() > deadline:
                raise _TimedOutError
            matches = request.matches
            found = None
            for visible in pools:
                if visible.invalid:
                    raise _AbortError(f"pool {visible.pool} is invalid: {visible.invalid}")
                for candidate in visible.candidates:
                    if candidate in picked or candidate.id in in_use:
                        continue
                    selectable = matches.get(candidate)
                    if selectable is None:
                        if judge is None:
                            judge = _Judge(evaluate, plan.memo, deadline, now)
                        selectable = judge.selectable(claim, request, candidate)
                    if selectable and not candidate.device.consumes_counters:
                        found = candidate
                        break
                if found is not None:
                    break
            else:
                return bool(picked)
            picked.add(found)
            results.append((request, found))
        solutions.append((claim, claim.unselected, tuple(results)))
    return solutions


class _FirstFree:
    """The free devices one combination of selectors accepts in one pool view, in pool order, as far as found.

    Holds while the pool's in-use version is ``version``: ``found`` lists the devices of
    ``candidates[:position]`` that are free and accepted (selectors true, no consumesCounters);
    every other device before ``position`` is in use or has its answer in the combination's
    answers (both are forgotten together). So the next descent at that version starts at
    ``found`` instead of walking past in-use devices again, and walks on from ``position`` only
    when every device found is picked. An error stops the walk before its device.
    """

    __slots__ = ("found", "position", "version")

    def __init__(self, version: int) -> None:
        self.version = version
        self.found: list[Candidate] = []
        self.position = 0


class _UnrememberedError(Exception):
    """Walking on would judge a device the descent skips (picked, answer unknown)."""


def _descend_remembered(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    in_use: Container[DeviceId],
    use_versions: Mapping[tuple[str, str], int],
    evaluate: Evaluate | None,
    deadline: float | None,
    now: Callable[[], float],
) -> list[_Solution] | bool | None:
    """:func:`_descend`, from each pool's :class:`_FirstFree` at its current in-use version.

    Picks the same devices, judges the same devices in the same order and meets the same errors,
    but a pool unchanged since an earlier descent with the same selectors costs a lookup, not a
    walk past its in-use devices. None rather than judge a device :func:`_descend` skips (one
    picked for an earlier slot, whose answer for this slot's selectors is not known), and
    without ``evaluate`` (recall only) rather than walk at all.
    """
    # Tuples: a plan has a few slots at most, candidates compare by identity, and () is never built.
    picked: tuple[Candidate, ...] = ()
    solutions: list[_Solution] = []
    for claim in plan.claims:
        results: tuple[tuple[_Request, Candidate], ...] = ()
        for request in claim.slots:
            if deadline is not None and now() > deadline:
                raise _TimedOutError
            kept = request.first_free
            found = None
            for visible in pools:
                walk = kept.get(visible)
                if walk is None or walk.version != use_versions.get(visible.pool.key, 0):
                    # Invalid pools get no walk: a walk found says the pool is valid.
                    if visible.invalid:
                        raise _AbortError(f"pool {visible.pool} is invalid: {visible.invalid}")
                    if len(kept) >= _MAX_COUNTS:
                        kept.clear()
                    walk = kept[visible] = _FirstFree(use_versions.get(visible.pool.key, 0))
                if not picked:
                    if walk.found:
                        found = walk.found[0]
                else:
                    for candidate in walk.found:
                        if candidate not in picked:
                            found = candidate
                            break
                if found is None and walk.position < len(visible.candidates):
                    if evaluate is None:
                        return None
                    judge = _Judge(evaluate, plan.memo, deadline, now)
                    try:
                        found = _walk_on(walk, visible, claim, request, in_use, picked, judge)
                    except _UnrememberedError:
                        return None  # what it judged is remembered: _descend judges nothing twice
                if found is not None:
                    break
            else:
                return bool(picked)
            picked += (found,)
            results += ((request, found),)
        solutions.append((claim, claim.unselected, results))
    return solutions


def _walk_on(
    walk: _FirstFree,
    visible: VisiblePool,
    claim: _ClaimPlan,
    request: _Request,
    in_use: Container[DeviceId],
    picked: Container[Candidate],
    judge: _Judge,
) -> Candidate | None:
    """Walk the pool on from where ``walk`` stopped, to the next free accepted device not picked (or None)."""
    candidates = visible.candidates
    matches = request.matches
    while walk.position < len(candidates):
        candidate = candidates[walk.position]
        if candidate.id in in_use:
            walk.position += 1
            continue
        selectable = matches.get(candidate)
        if selectable is None:
            if candidate in picked:
                raise _UnrememberedError
            selectable = judge.selectable(claim, request, candidate)
        walk.position += 1
        if selectable and not candidate.device.consumes_counters:
            walk.found.append(candidate)
            if candidate not in picked:
                return candidate
    return None


class _Search:
    def __init__(
        self,
        plan: ClaimsPlan,
        pools: Sequence[VisiblePool],
        in_use: Container[DeviceId],
        judge: _Judge,
    ) -> None:
        self.pools = pools
        self.in_use = in_use
        self.judge = judge
        self.picked: dict[Candidate, list[int]] = {}
        """Devices picked so far in this search -> the claims (indices) they were picked for.

        Keyed by candidate identity: two candidates with one id are a duplicate device name,
        which makes the pool invalid (an error) before either can be picked.
        """
        self.claims = [self._prepare(claim) for claim in plan.claims]

    # ------------------------------------------------------------ the node's part of planning

    def _prepare(self, plan: _ClaimPlan) -> _ClaimSearch:
        claim = _ClaimSearch(plan)
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
                raise _AbortError(plan.error)
        if minimum > RESULTS_MAX_SIZE:
            raise _AbortError(
                f"claim {plan.claim.key}: number of requested devices {minimum} "
                f"exceeds the claim limit of {RESULTS_MAX_SIZE}"
            )
        return claim

    def _all_devices(self, claim: _ClaimSearch, request: _Request) -> list[Candidate]:
        devices: list[Candidate] = []
        for visible in self.pools:
            if visible.pool.incomplete:
                raise _AbortError(
                    f"claim {claim.plan.claim.key}, request {request.name}: asks for all devices, "
                    f"but resource pool {visible.pool} is currently being updated"
                )
            if visible.invalid:
                raise _AbortError(
                    f"claim {claim.plan.claim.key}, request {request.name}: asks for all devices, "
                    f"but resource pool {visible.pool} is currently invalid"
                )
            devices.extend(c for c in visible.candidates if self.judge.selectable(claim.plan, request, c))
        return devices

    # ------------------------------------------------------------ search

    def run(self) -> bool:
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

    def _frame_at(self, ci: int, ri: int, si: int, di: int, *, in_sub: bool) -> _Frame | str:
        """The next decision point from a position, skipping over finished requests and claims."""
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
            return _Frame(_EXACT, ci, ri, si, di, self._candidates(ci, request))

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
            for candidate in frame.choices:
                if self._take(claim, frame.claim, request, candidate, must=False):
                    frame.taken.append(candidate)
                    return self._frame_at(frame.claim, frame.request, frame.sub, frame.device + 1, in_sub=in_sub)
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

    def _candidates(self, ci: int, request: _Request) -> Iterator[Candidate]:
        """Free devices for one slot of an ExactCount request, checked lazily against the search's state.

        Each is checked just before it is yielded, and the search takes or skips it before asking
        for the next, so what is yielded is free (``_take`` only checks the constraints).
        """
        claim = self.claims[ci]
        picked_by = self.picked
        in_use = self.in_use
        matches = request.matches
        admin = request.admin
        for visible in self.pools:
            if visible.invalid:
                raise _AbortError(f"pool {visible.pool} is invalid: {visible.invalid}")
            for candidate in visible.candidates:
                picked = picked_by.get(candidate)
                if admin:
                    if picked and ci in picked:
                        continue
                elif picked or candidate.id in in_use:
                    continue
                selectable = matches.get(candidate)
                if selectable is None:
                    selectable = self.judge.selectable(claim.plan, request, candidate)
                if selectable and not candidate.device.consumes_counters:
                    yield candidate

    def _usable(self, ci: int, request: _Request, candidate: Candidate) -> bool:
        """Whether an All request's device is free for it (ExactCount's are checked as they are found)."""
        picked = self.picked.get(candidate)
        if request.admin:
            if picked and ci in picked:
                return False
        elif picked or candidate.id in self.in_use:
            return False
        return not candidate.device.consumes_counters

    def _take(self, claim: _ClaimSearch, ci: int, request: _Request, candidate: Candidate, *, must: bool) -> bool:
        """Pick a free device for the request if the claim's constraints allow; undone by :meth:`_give_back`."""
        if request.constraints:
            trackers = claim.trackers
            for n, i in enumerate(request.constraints):
                if not trackers[i].add(candidate.device):
                    if must:
                        raise _AbortError(
                            f"claim {claim.plan.claim.key}, request {request.name}: cannot add device "
                            f"{candidate.id} because a claim constraint would not be satisfied"
                        )
                    for added in request.constraints[:n]:
                        trackers[added].remove()
                    return False
        picked = self.picked.get(candidate)
        if picked is None:
            self.picked[candidate] = [ci]
        else:
            picked.append(ci)
        claim.results.append((request, candidate))
        return True

    def _give_back(self, frame: _Frame) -> None:
        """Undo what the frame's current alternative took, newest first."""
        claim = self.claims[frame.claim]
        request = claim.plan.requests[frame.request][frame.sub]
        taken = frame.taken
        while taken:
            candidate = taken.pop()
            for i in request.constraints:
                claim.trackers[i].remove()
            claims = self.picked[candidate]
            claims.pop()
            if not claims:
                del self.picked[candidate]
            claim.results.pop()


# ---------------------------------------------------------------- results, built when read


_Solution = tuple["_ClaimPlan", tuple[int, ...], tuple[tuple["_Request", Candidate], ...]]
"""One claim's solution: its plan, which sub-request each request chose, and the devices in pick order.

A plain tuple: Filter makes one per claim and feasible node, and a tuple is built in C.
"""


def _allocation(solution: _Solution) -> Allocation:
    plan, selected, results = solution
    chosen: list[ChosenRequest] = []
    for index, alternatives in enumerate(plan.requests):
        request = alternatives[selected[index] if plan.has_subs[index] else 0]
        chosen.append(ChosenRequest(request.base, request.name, plan.has_subs[index], request.class_))
    picks = [Pick(request.name, request.admin, candidate) for request, candidate in results]
    return build_allocation(plan.claim, chosen, picks)


class _Allocations(Mapping[str, Allocation]):
    """Claim uid -> allocation, built on first read.

    Filter finds a solution on every feasible node but Reserve reads only the chosen one, so
    building ``status.allocation`` (dicts, configs, node selectors) for the others is waste.
    """

    __slots__ = ("_built", "_solutions")

    def __init__(self, solutions: list[_Solution]) -> None:
        self._solutions = solutions
        self._built: dict[str, Allocation] | None = None

    def _allocations(self) -> dict[str, Allocation]:
        if self._built is None:
            self._built = {s[0].claim.uid: _allocation(s) for s in self._solutions}
        return self._built

    def __getitem__(self, uid: str) -> Allocation:
        return self._allocations()[uid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._allocations())

    def __len__(self) -> int:
        return len(self._solutions)

    def __repr__(self) -> str:
        return repr(self._allocations())


# ---------------------------------------------------------------- entry points


def surely_unsatisfiable(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    in_use: Container[DeviceId],
    use_versions: Mapping[tuple[str, str], int],
) -> bool:
    """Whether :func:`allocate` would find no solution on a node that sees ``pools``, meeting no error on the way.

    True only when nothing can go wrong (no error while planning, no adminAccess request, no
    invalid pool, and every request's answer known for every free device, so no selector runs)
    and some combination of selectors accepts fewer free devices than the ExactCount requests
    using it need. False says nothing: search. Pure, apart from the counts it keeps in the plan's
    memo, per pool and in-use version.

    ``in_use`` must be the devices in use at the versions in ``use_versions`` ((driver, pool) ->
    version of its last change, 0 if none), so a count made at a version holds while it lasts.
    """
    if not plan.checkable:
        return False
    for visible in pools:
        if visible.invalid:
            return False
    short = False
    for demand in plan.demands:
        free = 0
        for visible in pools:
            version = use_versions.get(visible.pool.key, 0)
            known = demand.free.get(visible)
            if known is None or known[0] != version:
                if len(demand.free) >= _MAX_COUNTS:
                    demand.free.clear()
                # Not knowing (-1) is remembered too, until the version changes: searching is always right.
                known = demand.free[visible] = (
                    version,
                    _free_accepted(visible.candidates, demand.matches, in_use),
                )
            if known[1] < 0:
                return False
            free += known[1]
        short = short or free < demand.count
    return short


def _free_accepted(
    candidates: Sequence[Candidate], matches: Mapping[Candidate, bool], in_use: Container[DeviceId]
) -> int:
    """The free devices the selectors accept and the search could take; -1 if an answer is not known yet."""
    count = 0
    for candidate in candidates:
        if candidate.id in in_use:
            continue
        accepted = matches.get(candidate)
        if accepted is None:
            return -1
        if accepted and not candidate.device.consumes_counters:
            count += 1
    return count


_MAX_COUNTS: Final = 65536
_new_tuple: Final = tuple.__new__
"""``_new_tuple(AllocationOutcome, (True, allocations, "", None))``: an outcome built in C, once per feasible node."""


_NO_SOLUTION: Final = AllocationOutcome(ok=False, reason=REASON_CANNOT_ALLOCATE)
_NO_TIME: Final = AllocationOutcome(ok=False, reason=REASON_TIMED_OUT)


def remembered_outcome(
    plan: ClaimsPlan, pools: Sequence[VisiblePool], use_versions: Mapping[tuple[str, str], int]
) -> AllocationOutcome | None:
    """What :func:`allocate` with ``use_versions`` answers on a node that sees ``pools``, if memory alone tells.

    For plain plans whose every device (or, for the first, the lack of any) is known from the
    first free devices earlier calls found in the pools at their current in-use versions: no
    selector runs, no clock is read, no error can occur. None says nothing: allocate. Pure,
    apart from noting which pools must be walked next.
    """
    if not plan.plain:
        return None
    try:
        descent = _descend_remembered(plan, pools, (), use_versions, None, None, time.monotonic)
    except _AbortError:
        return None  # an invalid pool: allocate reports it
    if descent is False:
        return _NO_SOLUTION
    if descent is None or descent is True:
        return None
    return _new_tuple(AllocationOutcome, (True, _Allocations(descent), "", None))


def allocate(
    plan: ClaimsPlan,
    *,
    node_name: str,
    node_labels: Mapping[str, str],
    inventory: Inventory,
    in_use: Container[DeviceId],
    evaluate: Evaluate,
    deadline: float | None = None,
    now: Callable[[], float] = time.monotonic,
    pools: Sequence[VisiblePool] | None = None,
    use_versions: Mapping[tuple[str, str], int] | None = None,
    timeout: float | None = None,
) -> AllocationOutcome:
    """Allocate devices for all of one pod's unallocated claims (see :func:`plan_claims`) together, on one node.

    ``in_use`` holds the devices other claims hold (allocated or in flight, adminAccess results
    excluded); ``deadline`` is a time on ``now``'s clock; ``pools``, if the caller has them, are
    ``inventory.visible_pools(node_name, node_labels)``.
    With ``use_versions`` ((driver, pool) -> version of its in-use devices' last change, 0 if
    none; ``in_use`` must be the devices in use at those versions), plain plans start from what
    earlier calls with the plan's memo found in pools unchanged since: the outcome is the same.
    A ``timeout`` instead of a ``deadline`` sets the deadline that many seconds after the search
    first needs one: a node whose devices all come from memory reads no clock.
    Nothing the caller passed is mutated, except that the plan remembers selector results for
    the next node: the caller records the chosen allocations as in flight.
    """
    try:
        if pools is None:
            pools = inventory.visible_pools(node_name, node_labels)
        if timeout is not None and deadline is None:
            if use_versions is not None:
                recalled = remembered_outcome(plan, pools, use_versions)
                if recalled is not None:
                    return recalled
            deadline = now() + timeout  # work ahead: a walk or the search
        if plan.plain:
            descent = None
            if use_versions is not None:
                descent = _descend_remembered(plan, pools, in_use, use_versions, evaluate, deadline, now)
            if descent is None:
                descent = _descend(plan, pools, in_use, evaluate, deadline, now)
            if descent is False:
                return _NO_SOLUTION
            if descent is not True:
                return _new_tuple(AllocationOutcome, (True, _Allocations(descent), "", None))
        search = _Search(plan, pools, in_use, _Judge(evaluate, plan.memo, deadline, now))
        found = search.run()
    except _TimedOutError:
        return _NO_TIME
    except SelectorError as exc:
        message = f"failed to perform node selection: {exc}"
        return AllocationOutcome(ok=False, reason=message, error=message)
    except _AbortError as exc:
        return AllocationOutcome(ok=False, reason=str(exc), error=str(exc))
    if not found:
        return _NO_SOLUTION
    return AllocationOutcome(
        ok=True,
        allocations=_Allocations([(c.plan, tuple(c.selected), tuple(c.results)) for c in search.claims]),
    )
