"""The scheduling loop (kube-scheduler's scheduler.go ``Run``/``ScheduleOne``): pop, schedule, hand off.

One coroutine on the one event loop. It starts once the cache is synced and
pops pods only while this instance leads. For each pod it runs the
scheduling cycle (bounded CPU work) and starts the binding cycle as a task,
then moves on without waiting for the API server. A pod of a pod group
(with gang support on) brings the rest of its group out of the queue
(``pop_group``) and the group goes through the pod-group cycle instead, each
committed member then to a binding cycle of its own. It yields to the watch
handlers and API results every few pods (or every 10 ms), and sleeps until woken (an event,
a finished binding) or until the queue's next backoff or flush is due.

    synced? -> leading? -> queue.pop() -> SchedulingCycle.run -> Assumed
                                                  -> task: BindingCycle.run
                                  or: queue.pop_group() -> PodGroupCycle.run -> [Assumed]
                                                           -> a task per member: BindingCycle.run
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from usher.core.clock import Clock
from usher.core.queue import SchedulingQueue
from usher.scheduling.binding_cycle import BindingCycle
from usher.scheduling.group_cycle import PodGroupCycle
from usher.scheduling.scheduling_cycle import Assumed, SchedulingCycle

logger = logging.getLogger(__name__)

YIELD_EVERY = 16
"""Pods scheduled back to back before the loop lets watch handlers and API results run."""
YIELD_AFTER = 0.01
"""Seconds of back-to-back cycles after which the loop yields anyway: pods that each take long (a failing
pod filters every node) must not starve the dispatcher's writes, such as preemption's evictions."""


class Wakeup:
    """Wakes the loop: something may have made a pod poppable (or the lease came back)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.event.set()


class SchedulingLoop:
    """Pops pods while leading, runs their scheduling cycles and starts their binding cycles."""

    def __init__(
        self,
        *,
        queue: SchedulingQueue,
        scheduling: SchedulingCycle,
        binding: BindingCycle,
        clock: Clock,
        synced: asyncio.Event,
        leading: asyncio.Event,
        wakeup: Wakeup,
        groups: PodGroupCycle | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        """``groups``: the pod-group cycle (None: gang support is off, every pod is scheduled on its own)."""
        self._queue = queue
        self._groups = groups
        self._timer = timer
        self._scheduling = scheduling
        self._binding = binding
        self._clock = clock
        self._synced = synced
        self._leading = leading
        self._wakeup = wakeup
        self._binding_tasks: set[asyncio.Task[None]] = set()

    @property
    def binding_tasks(self) -> int:
        """Binding cycles still running."""
        return len(self._binding_tasks)

    def bindings_in_flight(self) -> list[asyncio.Task[None]]:
        """The binding cycles still running (usher.scheduling.stopping waits for them at shutdown)."""
        return list(self._binding_tasks)

    async def run(self) -> None:
        """Schedule pods until cancelled."""
        await self._synced.wait()
        await self._leading.wait()
        logger.info("scheduling pods")
        streak = 0
        since = self._timer()
        while True:
            self._queue.flush()
            if not self._leading.is_set():  # lease lost: not one more pod
                await self._leading.wait()
                continue
            queued = self._queue.pop()
            if queued is None:
                streak = 0
                self._wakeup.event.clear()
                timeout = max(0.0, self._queue.next_wakeup() - self._clock.now())
                # asyncio.timeout, not wait_for: no helper task that kopf's shutdown would cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wakeup.event.wait()
                continue
            members = [queued]
            committed: list[Assumed] = []
            try:
                if self._groups is not None and queued.pod.group_key is not None:
                    members = self._queue.pop_group(queued)
                    committed = self._groups.run(members)
                else:
                    assumed = self._scheduling.run(queued)
                    committed = [assumed] if assumed is not None else []
            except Exception:
                # A bug must cost one attempt of one pod (or group), never the scheduler: back off and retry.
                logger.exception("scheduling pod %s failed unexpectedly", queued.key)
                for member in members:
                    self._scheduling.abandon(member)
                committed = []
            for assumed in committed:
                task = asyncio.get_running_loop().create_task(
                    self._binding.run(assumed), name=f"binding-cycle {assumed.queued.key}"
                )
                self._binding_tasks.add(task)
                task.add_done_callback(self._binding_tasks.discard)
            streak += 1
            if streak % YIELD_EVERY == 0 or self._timer() - since >= YIELD_AFTER:
                await asyncio.sleep(0)
                since = self._timer()
