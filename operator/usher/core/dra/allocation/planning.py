"""Planning a pod's claims for the allocator, once per scheduling cycle, and the memo of selector answers. Pure.

Nothing in a plan depends on the node: each request's class, the claim constraints that apply
to it and the first error met on the way (a missing class) are worked out once, and Filter
reuses them on every node. Each request also reads and adds to the selector answers per device
of a :class:`MatchMemo`, which outlives the cycle: pods asking alike share the answers, and a
device is judged once rather than once per pod and node. Beside the answers, the memo keeps
what earlier calls learned about each pool's free devices at its in-use version (free counts,
:class:`FirstFree`), from which :mod:`.descent` answers without walking the pool.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from usher.core.dra.allocation.pools import Candidate, VisiblePool
from usher.core.dra.consumable import Consumed
from usher.core.dra.model import ALL, RESULTS_MAX_SIZE, Claim, Constraint, DeviceClass, DeviceToleration, SubRequest

MemoKey = tuple[tuple[str, ...], tuple[str, ...], tuple[DeviceToleration, ...] | None]
"""(class selectors, request selectors, tolerations): what an answer depends on. Tolerations are None for
``allocationMode: All`` requests, whose answers are the selectors' alone (a tainted device they select is
not left out but makes the request fail, see :mod:`usher.core.dra.taints`)."""


def _constraint_applies(constraint: Constraint, base: str, sub: str) -> bool:
    if not constraint.requests:
        return True
    return base in constraint.requests or (bool(sub) and f"{base}/{sub}" in constraint.requests)


class MatchMemo:
    """Which devices each combination of class and request selectors (and tolerations) accepts, across cycles.

    An answer depends on the device and the expressions only, so pods asking alike share them
    and each node's device is judged once rather than once per pod. Answers are kept per
    :class:`Candidate`, so they hold for one :class:`Inventory` and one ``evaluate``: the owner
    clears the memo when it builds a new inventory. Beyond ``max_combinations`` combinations,
    all are forgotten when the next pod is planned; each holds at most one answer per device.

    Beside the answers, each combination keeps how many of a pool's devices it accepts that are
    free (see :func:`surely_unsatisfiable`), and which they are as far as a search looked for them
    (see :class:`FirstFree`), per pool and in-use version of the pool.

    A selector that fails (a CEL error, or one refused after running over its CPU limit) takes
    the answers that relied on it along: it must fail again wherever it would be evaluated.
    """

    __slots__ = ("_by_selectors", "_first_free", "_free", "_max")

    def __init__(self, *, max_combinations: int = 64) -> None:
        self._by_selectors: dict[MemoKey, dict[Candidate, bool]] = {}
        self._free: dict[MemoKey, dict[VisiblePool, tuple[int, int]]] = {}
        self._first_free: dict[MemoKey, dict[VisiblePool, FirstFree]] = {}
        self._max = max(1, max_combinations)

    def answers(self, key: MemoKey) -> dict[Candidate, bool]:
        """The answers for one combination, to read and add to (the same dict for every plan)."""
        found = self._by_selectors.get(key)
        if found is None:
            found = self._by_selectors[key] = {}
        return found

    def free_counts(self, key: MemoKey) -> dict[VisiblePool, tuple[int, int]]:
        """A pool as nodes see it -> (its in-use version, the free devices the combination accepts, or -1).

        -1 where an answer was not known; forgotten with the answers, and when over
        ``MAX_COUNTS`` pools (inventories with node selectors make a pool's view per call).
        """
        found = self._free.get(key)
        if found is None:
            found = self._free[key] = {}
        return found

    def first_free(self, key: MemoKey) -> dict[VisiblePool, FirstFree]:
        """A pool as nodes see it -> the free devices the combination accepts, as far as found.

        Forgotten with the answers, and when over ``MAX_COUNTS`` pools.
        """
        found = self._first_free.get(key)
        if found is None:
            found = self._first_free[key] = {}
        return found

    def forget(self, expression: str) -> None:
        """Drop every answer that relied on ``expression``, also from plans already made."""
        for kept in (self._by_selectors, self._free, self._first_free):
            for (class_selectors, request_selectors, _), answers in kept.items():
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


MAX_COUNTS: Final = 65536
"""Pools a combination's free counts or first free devices are kept for, before they are forgotten."""


class FirstFree:
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


class PlannedRequest:
    """A request without sub-requests, or one sub-request, ready for the search on any node.

    ``matches`` holds the selector results per device: they depend on the device and the
    expressions only, so one node's answers are good for every other node of the cycle
    (and, with a :class:`MatchMemo`, of later cycles).
    """

    __slots__ = (
        "admin",
        "all_mode",
        "base",
        "capacity",
        "class_",
        "constraints",
        "count",
        "first_free",
        "matches",
        "memo_key",
        "name",
        "plain",
        "selectors",
        "sub",
        "tolerations",
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
        self.tolerations = spec.tolerations
        """The device taints the request accepts: :class:`~.judging.Judge` leaves untolerated devices out of an
        ExactCount request's answers, the search refuses them to an All request."""
        self.capacity = spec.capacity
        """``capacity.requests`` (DRAConsumableCapacity): checked per device as the search goes, never memoized."""
        self.constraints = tuple(i for i, c in enumerate(constraints) if _constraint_applies(c, base, sub))
        """Indices of the claim constraints that apply to this request."""
        self.memo_key: MemoKey = (class_.selectors, spec.selectors, None if self.all_mode else spec.tolerations)
        self.matches = memo.answers(self.memo_key)
        self.first_free = memo.first_free(self.memo_key)
        self.plain = not self.all_mode and not self.admin and not self.constraints and self.capacity is None
        """ExactCount, no adminAccess, no constraint, no capacity asked: any free matching device will do."""


class ClaimPlan:
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

    def __init__(
        self, claim: Claim, classes: Mapping[str, DeviceClass], memo: MatchMemo, *, consumable: bool = True
    ) -> None:
        self.claim = claim
        self.requests: list[tuple[PlannedRequest, ...]] = []
        self.has_subs: list[bool] = []
        self.partial: tuple[PlannedRequest, ...] = ()
        self.error = ""
        for request in claim.requests:
            if not consumable and (asking := next((s for s in request.alternatives if s.capacity is not None), None)):
                what = f"request {request.name}" if request.exactly is not None else f"subrequest {asking.name}"
                self.error = (
                    f"claim {claim.key}, {what}: has capacity requests, but the DRAConsumableCapacity feature "
                    "is disabled"
                )
                break
            subs = (
                [("", request.exactly)]
                if request.exactly is not None
                else [(s.name, s) for s in request.first_available]
            )
            alternatives: list[PlannedRequest] = []
            for sub, spec in subs:
                class_ = classes.get(spec.class_name)
                if class_ is None:
                    name = f"{request.name}/{sub}" if sub else request.name
                    self.error = f"claim {claim.key}, request {name}: device class {spec.class_name} does not exist"
                    self.partial = tuple(alternatives)
                    break
                alternatives.append(PlannedRequest(request.name, sub, spec, class_, claim.constraints, memo))
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

    __slots__ = ("checkable", "claims", "demands", "fractional", "list_attributes", "memo", "plain")

    def __init__(
        self, claims: tuple[ClaimPlan, ...], memo: MatchMemo, *, fractional: bool = True, list_attributes: bool = False
    ) -> None:
        self.claims = claims
        self.memo = memo
        self.fractional = fractional
        """DRAFractionalCapacityRange: capacity ranges with fractional bounds round in thousandths."""
        self.list_attributes = list_attributes
        """DRAListTypeAttributes: constraints compare list-typed attributes as sets."""
        self.plain = bool(claims) and all(claim.plain for claim in claims)
        """There are claims, and every one is plain (see :func:`descend`)."""
        requests = [r for claim in claims for alternatives in claim.requests for r in alternatives]
        self.checkable = (
            bool(claims)
            and all(claim.fixed and claim.minimum <= RESULTS_MAX_SIZE for claim in claims)
            and not any(r.admin or r.capacity is not None for r in requests)
        )
        """Whether a node can fail only for want of devices: see :func:`surely_unsatisfiable`."""
        demands: dict[int, Demand] = {}
        for request in requests:
            demand = demands.get(id(request.matches))
            if demand is None:
                demand = demands[id(request.matches)] = Demand(request, memo)
        for claim in claims:
            for alternatives, has_subs in zip(claim.requests, claim.has_subs, strict=True):
                if not has_subs:
                    demands[id(alternatives[0].matches)].count += alternatives[0].count
        self.demands = tuple(demands.values())
        """Per combination of selectors: the devices that ExactCount requests without alternatives need."""


class Demand:
    """How many distinct devices some requests need, all accepted by one combination of selectors."""

    __slots__ = ("count", "free", "matches")

    def __init__(self, request: PlannedRequest, memo: MatchMemo) -> None:
        self.matches = request.matches
        self.free = memo.free_counts(request.memo_key)
        self.count = 0


def plan_claims(
    claims: Sequence[Claim],
    classes: Mapping[str, DeviceClass],
    *,
    memo: MatchMemo | None = None,
    consumable: bool = True,
    fractional: bool = True,
    list_attributes: bool = False,
) -> ClaimsPlan:
    """Plan the claims of one pod for :func:`allocate`; pure, and independent of any node.

    With a ``memo``, selector answers found for earlier pods are reused and new ones added;
    without, the answers are shared by the nodes of this plan only. ``consumable`` and ``fractional``
    are the gates DRAConsumableCapacity and DRAFractionalCapacityRange: without the first, a request
    asking for capacity is an error, as in kube; ``list_attributes`` is DRAListTypeAttributes.
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
    return ClaimsPlan(
        tuple(ClaimPlan(claim, classes, memo, consumable=consumable) for claim in claims),
        memo,
        fractional=fractional,
        list_attributes=list_attributes,
    )


Result = tuple["PlannedRequest", Candidate, Consumed | None]
"""One device picked: for which request, and, for a share of a device (``allowMultipleAllocations``), what it
takes of the device's capacities (None: the device is the claim's alone)."""

Solution = tuple["ClaimPlan", tuple[int, ...], tuple[Result, ...]]
"""One claim's solution: its plan, which sub-request each request chose, and the devices in pick order.

A plain tuple: Filter makes one per claim and feasible node, and a tuple is built in C.
"""
