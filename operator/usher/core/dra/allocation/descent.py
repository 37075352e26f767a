"""The search's first descent without frames, and what memory alone tells about a node. Pure.

In a plain plan (ExactCount requests without alternatives, adminAccess or constraints) each
slot's first choice is the first free matching device in pool order, so :func:`descend` walks
the devices as :mod:`.search` would, without a stack, and leaves the search only the
backtracking. :func:`descend_remembered` starts each pool from what an earlier descent found at
the pool's in-use version, so a pool nothing was taken from or freed in since costs a lookup,
not a walk past its in-use devices; :func:`surely_unsatisfiable` rejects a node from the memo's
free-device counts, without a search, when nothing can go wrong. These are shortcuts, never
other answers: they pick, judge and fail as the search would.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence

from usher.core.dra.allocation.judging import Evaluate, Judge, TimedOutError
from usher.core.dra.allocation.planning import (
    MAX_COUNTS,
    ClaimPlan,
    ClaimsPlan,
    FirstFree,
    PlannedRequest,
    Result,
    Solution,
)
from usher.core.dra.allocation.pools import Candidate, VisiblePool
from usher.core.dra.model import DeviceId


def descend(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    in_use: Container[DeviceId],
    evaluate: Evaluate,
    deadline: float | None,
    now: Callable[[], float],
) -> list[Solution] | bool:
    """The depth-first search's first descent, for plain plans: each slot takes the first free device.

    Without alternatives or constraints every slot's first choice is the first free matching
    device in pool order, so the descent needs no frames and no search state: it walks the
    devices as :class:`Search` would, in the same order (the same selectors run, the same errors
    are met). The solutions when every slot got a device (the search's first solution), False
    when the first slot got none (the search finds none either), True when a later slot got
    none: the search must backtrack (the answers stay, so nothing is evaluated twice).
    """
    picked: set[Candidate] = set()
    solutions: list[Solution] = []
    judge: Judge | None = None  # only once a selector must run
    for claim in plan.claims:
        results: list[Result] = []
        for request in claim.slots:
            if deadline is not None and now() > deadline:
                raise TimedOutError
            matches = request.matches
            found = None
            for visible in pools:
                if visible.closed:
                    continue
                for candidate in visible.candidates:
                    if candidate in picked or candidate.id in in_use:
                        continue
                    selectable = matches.get(candidate)
                    if selectable is None:
                        if judge is None:
                            judge = Judge(evaluate, plan.memo, deadline, now)
                        selectable = judge.selectable(claim, request, candidate)
                    if selectable and not candidate.device.consumes_counters:
                        found = candidate
                        break
                if found is not None:
                    break
            else:
                return bool(picked)
            picked.add(found)
            results.append((request, found, None))
        solutions.append((claim, claim.unselected, tuple(results)))
    return solutions


class _UnrememberedError(Exception):
    """Walking on would judge a device the descent skips (picked, answer unknown)."""


def descend_remembered(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    in_use: Container[DeviceId],
    use_versions: Mapping[tuple[str, str], int],
    evaluate: Evaluate | None,
    deadline: float | None,
    now: Callable[[], float],
) -> list[Solution] | bool | None:
    """:func:`descend`, from each pool's :class:`FirstFree` at its current in-use version.

    Picks the same devices, judges the same devices in the same order and meets the same errors,
    but a pool unchanged since an earlier descent with the same selectors costs a lookup, not a
    walk past its in-use devices. None rather than judge a device :func:`descend` skips (one
    picked for an earlier slot, whose answer for this slot's selectors is not known), and
    without ``evaluate`` (recall only) rather than walk at all.
    """
    # Tuples: a plan has a few slots at most, candidates compare by identity, and () is never built.
    picked: tuple[Candidate, ...] = ()
    solutions: list[Solution] = []
    for claim in plan.claims:
        results: tuple[Result, ...] = ()
        for request in claim.slots:
            if deadline is not None and now() > deadline:
                raise TimedOutError
            kept = request.first_free
            found = None
            for visible in pools:
                if visible.closed:
                    continue
                walk = kept.get(visible)
                if walk is None or walk.version != use_versions.get(visible.pool.key, 0):
                    if len(kept) >= MAX_COUNTS:
                        kept.clear()
                    walk = kept[visible] = FirstFree(use_versions.get(visible.pool.key, 0))
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
                    judge = Judge(evaluate, plan.memo, deadline, now)
                    try:
                        found = _walk_on(walk, visible, claim, request, in_use, picked, judge)
                    except _UnrememberedError:
                        return None  # what it judged is remembered: descend judges nothing twice
                if found is not None:
                    break
            else:
                return bool(picked)
            picked += (found,)
            results += ((request, found, None),)
        solutions.append((claim, claim.unselected, results))
    return solutions


def _walk_on(
    walk: FirstFree,
    visible: VisiblePool,
    claim: ClaimPlan,
    request: PlannedRequest,
    in_use: Container[DeviceId],
    picked: Container[Candidate],
    judge: Judge,
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


def surely_unsatisfiable(
    plan: ClaimsPlan,
    pools: Sequence[VisiblePool],
    in_use: Container[DeviceId],
    use_versions: Mapping[tuple[str, str], int],
    shared_pools: Container[tuple[str, str]] = (),
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
        pool = visible.pool
        if visible.invalid or pool.counted or pool.capacity_checked or pool.key in shared_pools:
            return False  # the outcome names the invalid pools; counters and capacity need the search
    short = False
    for demand in plan.demands:
        free = 0
        for visible in pools:
            if visible.closed:
                continue  # nothing is allocated from it
            version = use_versions.get(visible.pool.key, 0)
            known = demand.free.get(visible)
            if known is None or known[0] != version:
                if len(demand.free) >= MAX_COUNTS:
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
