"""The structured-parameters allocator: devices for all of a pod's unallocated claims on one node. Pure.

This module is the package's only public face: everything outside it imports from here, never
from the modules beside it (an import-linter contract in ``pyproject.toml`` holds that).

Theory of operation, as kube-scheduler's DynamicResources plugin does it
(``k8s.io/dynamic-resource-allocation/structured``, the stable variant):

1. Plan every request, once per scheduling cycle (:func:`plan_claims`): look
   up its class and the claim constraints that apply to it. Nothing here
   depends on the node, so Filter reuses the plan on every node, and with it
   each request's selector results per device (which a :class:`MatchMemo`
   can carry over to the next cycles).
2. Gather the pools the node can reach (:meth:`Inventory.visible_pools`).
3. For ``allocationMode: All`` collect every matching device up front
   (refused while a reachable pool is incomplete or invalid). A claim needing
   more than 32 devices is an error.
4. Search depth-first over claims, then requests (a ``firstAvailable``
   request tries its sub-requests in order), then the devices each needs, and
   backtrack on failure. A device is taken if it is in use elsewhere or already
   picked in this search; adminAccess requests ignore both, except that one
   claim never gets the same device twice. Class selectors, then request
   selectors, must be true; ``matchAttribute`` constraints must hold within
   the claim; a device that consumes shared counters must leave no counter of
   its pool below zero (DRAPartitionableDevices). Incomplete and invalid pools
   give no devices; a node without a solution where a pool was invalid says
   so (:data:`REASON_INVALID_POOLS`). The first complete solution wins. For claims of plain requests (ExactCount,
   no adminAccess, no constraint, no alternatives) the first descent needs no
   stack, and starts from the first free devices an earlier descent found in
   each pool while the pool's in-use version holds: a pool nothing was taken
   from or freed in since costs a lookup, not a walk. From the same memory,
   :func:`remembered_outcome` answers a node without a selector or a clock,
   and :func:`surely_unsatisfiable` rejects a node whose pools hold too few
   free matching devices, without a search. None of these shortcuts applies
   where a visible pool's devices consume counters: the search counts them.
5. Build each claim's ``status.allocation`` (:class:`Allocation`), when it is
   first read: results, configs (FromClass first, then FromClaim) and the node
   selector the devices imply. Filter finds a solution on every node, Reserve
   reads only the chosen node's.

Errors are raised where kube raises them while walking the claims in order
(a missing class, then an ``All`` request's pools, then the claim's device
count), so a plan keeps the error it met and each node replays the walk up to
it. Outcomes mirror the plugin's Filter: no solution is "cannot allocate all
claims" (or "invalid resource pools were encountered"), a passed deadline is
"timed out trying to allocate devices" (both Unschedulable), and CEL errors,
an ``All`` request meeting an invalid or incomplete pool, or impossible
requests are an error that aborts the scheduling attempt. The search is
iterative (an explicit stack), so large claims cannot exhaust Python's
recursion limit.

The modules, in the order of the steps:

- ``planning``: 1, the plan (:class:`ClaimsPlan`) and the memo of selector
  answers, free counts and first free devices (:class:`MatchMemo`);
- ``pools``: 2, the :class:`Inventory` of every pool and the
  :class:`VisiblePool` views one node gets;
- ``judging``: selectors on a device, the deadline, and the two errors that
  stop an allocation early;
- ``search``: 3 and 4, the general case with backtracking;
- ``descent``: 4's first descent without frames, and what memory alone tells;
- ``results``: 5, a claim's :class:`Allocation` in API shape;
- ``allocating``: the entry points, which tie the others together into an
  :class:`AllocationOutcome`.
"""

from usher.core.dra.allocation.allocating import (
    REASON_CANNOT_ALLOCATE,
    REASON_INVALID_POOLS,
    REASON_TIMED_OUT,
    AllocationOutcome,
    allocate,
    remembered_outcome,
)
from usher.core.dra.allocation.descent import surely_unsatisfiable
from usher.core.dra.allocation.judging import Evaluate
from usher.core.dra.allocation.planning import ClaimsPlan, MatchMemo, plan_claims
from usher.core.dra.allocation.pools import Inventory, VisiblePool
from usher.core.dra.allocation.results import Allocation

__all__ = [
    "REASON_CANNOT_ALLOCATE",
    "REASON_INVALID_POOLS",
    "REASON_TIMED_OUT",
    "Allocation",
    "AllocationOutcome",
    "ClaimsPlan",
    "Evaluate",
    "Inventory",
    "MatchMemo",
    "VisiblePool",
    "allocate",
    "plan_claims",
    "remembered_outcome",
    "surely_unsatisfiable",
]
