"""The allocator's entry points and their outcomes: :func:`allocate` and :func:`remembered_outcome`. Pure.

Each runs the first descent (:mod:`.descent`) when the plan allows, then the search
(:mod:`.search`), and turns what they raise (:mod:`.judging`) into an
:class:`AllocationOutcome`. Each claim's ``status.allocation`` is built from the solution only
when it is first read. The theory of operation is in the package's docstring.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple

from usher.core.dra.allocation.descent import descend, descend_remembered
from usher.core.dra.allocation.judging import AbortError, Evaluate, Judge, TimedOutError
from usher.core.dra.allocation.planning import ClaimsPlan, Solution
from usher.core.dra.allocation.pools import Inventory, VisiblePool
from usher.core.dra.allocation.results import Allocation, ChosenRequest, Pick, build_allocation
from usher.core.dra.allocation.search import Search, SharedUse
from usher.core.dra.model import DeviceId
from usher.core.selectors import SelectorError

__all__ = [
    "REASON_CANNOT_ALLOCATE",
    "REASON_INVALID_POOLS",
    "REASON_TIMED_OUT",
    "AllocationOutcome",
    "allocate",
    "remembered_outcome",
]

REASON_CANNOT_ALLOCATE: Final = "cannot allocate all claims"
REASON_TIMED_OUT: Final = "timed out trying to allocate devices"
REASON_INVALID_POOLS: Final = "invalid resource pools were encountered"
"""No solution on a node where some pool was invalid (kube: ErrFailedAllocationOnNode, Unschedulable)."""


class AllocationOutcome(NamedTuple):
    """What :func:`allocate` found on one node.

    A named tuple rather than a frozen dataclass: Filter makes one per feasible node, and a
    tuple is built in C (a frozen dataclass sets each field through ``object.__setattr__``).
    """

    ok: bool
    allocations: Mapping[str, Allocation] = MappingProxyType({})
    """Claim uid -> allocation, for every claim, when ok."""
    reason: str = ""
    """Why not: REASON_CANNOT_ALLOCATE, REASON_INVALID_POOLS, REASON_TIMED_OUT, or the error text."""
    error: str | None = None
    """Set when the attempt must abort (Error status) rather than try other nodes."""


# ---------------------------------------------------------------- results, built when read


def _allocation(solution: Solution, node_name: str) -> Allocation:
    plan, selected, results = solution
    chosen: list[ChosenRequest] = []
    for index, alternatives in enumerate(plan.requests):
        request = alternatives[selected[index] if plan.has_subs[index] else 0]
        chosen.append(ChosenRequest(request.base, request.name, plan.has_subs[index], request.class_))
    picks = [
        Pick(request.name, request.admin, candidate, request.tolerations, consumed)
        for request, candidate, consumed in results
    ]
    return build_allocation(plan.claim, chosen, picks, node_name)


class _Allocations(Mapping[str, Allocation]):
    """Claim uid -> allocation, built on first read.

    Filter finds a solution on every feasible node but Reserve reads only the chosen one, so
    building ``status.allocation`` (dicts, configs, node selectors) for the others is waste.
    """

    __slots__ = ("_built", "_node_name", "_solutions")

    def __init__(self, solutions: list[Solution], node_name: str) -> None:
        self._solutions = solutions
        self._node_name = node_name
        self._built: dict[str, Allocation] | None = None

    def _allocations(self) -> dict[str, Allocation]:
        if self._built is None:
            self._built = {s[0].claim.uid: _allocation(s, self._node_name) for s in self._solutions}
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


_new_tuple: Final = tuple.__new__
"""``_new_tuple(AllocationOutcome, (True, allocations, "", None))``: an outcome built in C, once per feasible node."""


_NO_SOLUTION: Final = AllocationOutcome(ok=False, reason=REASON_CANNOT_ALLOCATE)
_INVALID_POOLS: Final = AllocationOutcome(ok=False, reason=REASON_INVALID_POOLS)
_NO_TIME: Final = AllocationOutcome(ok=False, reason=REASON_TIMED_OUT)


def _no_solution(pools: Sequence[VisiblePool]) -> AllocationOutcome:
    """No solution: kube's allocator skips invalid pools while it searches and names them only now."""
    for visible in pools:
        if visible.invalid:
            return _INVALID_POOLS
    return _NO_SOLUTION


def _searched_only(pools: Sequence[VisiblePool], shared_pools: Container[tuple[str, str]]) -> bool:
    """Whether a pool's devices consume shared counters, or have capacity to check, or are shared: only the search
    counts and checks them, so no shortcut applies."""
    for visible in pools:
        pool = visible.pool
        if pool.counted or pool.capacity_checked or pool.key in shared_pools:
            return True
    return False


_NO_SHARES: SharedUse = {}


def remembered_outcome(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    use_versions: Mapping[tuple[str, str], int],
    shared_pools: Container[tuple[str, str]] = (),
    *,
    node_name: str,
) -> AllocationOutcome | None:
    """What :func:`allocate` with ``use_versions`` answers on a node that sees ``pools``, if memory alone tells.

    For plain plans whose every device (or, for the first, the lack of any) is known from the
    first free devices earlier calls found in the pools at their current in-use versions: no
    selector runs, no clock is read, no error can occur. None says nothing: allocate. Pure,
    apart from noting which pools must be walked next.
    """
    if not plan.plain or _searched_only(pools, shared_pools):
        return None
    descent = descend_remembered(plan, pools, (), use_versions, None, None, time.monotonic)
    if descent is False:
        return _no_solution(pools)
    if descent is None or descent is True:
        return None
    return _new_tuple(AllocationOutcome, (True, _Allocations(descent, node_name), "", None))


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
    shared: SharedUse = _NO_SHARES,
    shared_pools: Container[tuple[str, str]] = (),
) -> AllocationOutcome:
    """Allocate devices for all of one pod's unallocated claims (see :func:`plan_claims`) together, on one node.

    ``in_use`` holds the devices other claims hold (allocated or in flight, adminAccess results
    and shares excluded); ``shared`` the devices other claims share (results with a ``shareID``)
    and what they take of each, ``shared_pools`` the (driver, pool) of each; ``deadline`` is a
    time on ``now``'s clock; ``pools``, if the caller has them, are
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
                recalled = remembered_outcome(plan, pools, use_versions, shared_pools, node_name=node_name)
                if recalled is not None:
                    return recalled
            deadline = now() + timeout  # work ahead: a walk or the search
        if plan.plain and not _searched_only(pools, shared_pools):
            descent = None
            if use_versions is not None:
                descent = descend_remembered(plan, pools, in_use, use_versions, evaluate, deadline, now)
            if descent is None:
                descent = descend(plan, pools, in_use, evaluate, deadline, now)
            if descent is False:
                return _no_solution(pools)
            if descent is not True:
                return _new_tuple(AllocationOutcome, (True, _Allocations(descent, node_name), "", None))
        search = Search(plan, pools, in_use, Judge(evaluate, plan.memo, deadline, now), shared)
        found = search.run()
    except TimedOutError:
        return _NO_TIME
    except SelectorError as exc:
        message = f"failed to perform node selection: {exc}"
        return AllocationOutcome(ok=False, reason=message, error=message)
    except AbortError as exc:
        return AllocationOutcome(ok=False, reason=str(exc), error=str(exc))
    if not found:
        return _no_solution(pools)
    return AllocationOutcome(
        ok=True,
        allocations=_Allocations([(c.plan, tuple(c.selected), tuple(c.results)) for c in search.claims], node_name),
    )
