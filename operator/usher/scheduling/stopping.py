"""How a leader stops writing: the order of a shutdown, and why it fences every write.

A follower may take the Lease as soon as the leader releases it (a clean
shutdown) or once its record has expired (a lost Lease; usher.adapters.leading
argues that part). Every API write usher makes leaves through the dispatcher,
bindings and claim, volume and status writes alike, and binding cycles make
them (PreBind writes claims and volumes, Bind the binding, a failure the
rollback). So no write of any kind reaches the API server after a follower
could take over when, in this order:

1. the scheduling loop has stopped (no new binding cycle starts);
2. the binding cycles in flight have finished, or, after ``binding_grace``,
   been cancelled: a cancelled cycle runs its Unreserve, whose rollback writes
   (a claim's reservation, its allocation) go to the dispatcher like any other;
3. the dispatcher has *drained*: every due call has been answered (a call in
   flight is one whose answer has not come back yet, so the API server may
   still store it: draining waits for that answer);
4. the dispatcher is halted: from here nothing more is sent (calls still
   delayed, such as a NotReadyForScheduling patch due in a few seconds, are
   dropped; the next leader reports on its own);
5. only then is the Lease released.

If the dispatcher does not drain within ``drain_timeout`` (an API server that
stopped answering), some write may still be in flight and land at any time:
the Lease is *not* released, and a follower takes over only once it has
expired (a lease duration), as after a crash. A lost Lease skips straight to
4: the renew deadline has passed, nothing more may leave, and the cancelled
binding cycles' rollbacks are not sent (the next leader finds each claim as
its last write left it, reserved for a pod that is not bound, which it
honours or the claim controller clears).

Waiting is injected (``sleep``), so tests decide when a grace period ends
without waiting for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Protocol

logger = logging.getLogger(__name__)

BINDING_GRACE = 5.0
"""Seconds the binding cycles in flight get to finish at shutdown before they are cancelled."""
DRAIN_TIMEOUT = 5.0
"""Seconds the dispatcher gets to send what is due at shutdown; after that the Lease is left to expire."""


class Writes(Protocol):
    """The dispatcher, as far as stopping goes."""

    async def drained(self) -> None: ...

    def halt(self) -> None: ...


class Lease(Protocol):
    """The elector, as far as stopping goes."""

    async def release(self) -> None: ...


async def _within(awaitable: Awaitable[object], seconds: float, sleep: Callable[[float], Awaitable[None]]) -> bool:
    """Whether ``awaitable`` finished before ``sleep(seconds)`` did (it is cancelled if not)."""
    work = asyncio.ensure_future(awaitable)
    timer = asyncio.ensure_future(sleep(seconds))
    try:
        await asyncio.wait({work, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
    if work.done():
        return True
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    return False


async def settle_bindings(
    tasks: Collection[asyncio.Task[None]], grace: float, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> bool:
    """Wait up to ``grace`` for the binding cycles ``tasks`` to finish, then cancel the rest and wait for their
    rollbacks; True when all finished on their own."""
    pending = [task for task in tasks if not task.done()]
    if not pending:
        return True
    finished = await _within(asyncio.wait(pending), grace, sleep)
    left = [task for task in pending if not task.done()]
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    if left:
        logger.info("stopping: cancelled %d binding cycle(s) still in flight after %gs", len(left), grace)
    return finished and not left


async def stop_writing(
    *,
    bindings: Collection[asyncio.Task[None]],
    writes: Writes,
    lease: Lease | None,
    lost: bool,
    binding_grace: float = BINDING_GRACE,
    drain_timeout: float = DRAIN_TIMEOUT,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bool:
    """Steps 2-5 of the module docstring (the caller has stopped the loop); True when the Lease was released."""
    if lost:
        writes.halt()
        for task in bindings:
            task.cancel()
        await asyncio.gather(*bindings, return_exceptions=True)
        return False
    await settle_bindings(bindings, binding_grace, sleep)
    drained = await _within(writes.drained(), drain_timeout, sleep)
    writes.halt()
    if lease is None:
        return False
    if not drained:
        logger.warning(
            "stopping: API writes still unanswered after %gs; leaving the Lease to expire instead of releasing it",
            drain_timeout,
        )
        return False
    await lease.release()
    return True
