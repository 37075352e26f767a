"""The binding cycle of one assumed pod (the second half of kube-scheduler's schedule_one.go).

Runs as its own asyncio task, so the scheduling loop never waits for the
API server: wait at Permit (if a plugin asked to), PreBind, Bind, then
PostBind. Success confirms the assumption in the cache and counts the pod
scheduled. Failure unreserves, forgets the assumption and hands the pod to
``SchedulingFailures``, except when the API server says the pod is bound
already or gone (a typed ``Cause``): then the watch says where it went and
the pod is never bound twice.

A member of a gang waits for the others between PreBind and Bind
(``gang_binding``); when one of them fails before Bind, every other one is
rolled back the same way and retried after its backoff (``Cause.GANG_ROLLED_BACK``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from usher.core.cache import Cache
from usher.core.clock import Clock
from usher.core.events import ASSIGNED_POD_DELETE
from usher.core.framework.runtime import status_label
from usher.core.queue import SchedulingQueue
from usher.core.types import Cause, Code, Status
from usher.scheduling.failures import SchedulingFailures
from usher.scheduling.gang_binding import GangCommits
from usher.scheduling.podevents import PodEvents
from usher.scheduling.ports import SchedulingRecorder
from usher.scheduling.scheduling_cycle import Assumed
from usher.scheduling.waiting_pods import WaitingPods

logger = logging.getLogger(__name__)

NOT_RETRIED = frozenset({Cause.POD_NOT_FOUND})
"""Binding failures after which the pod is not queued again: the watch delivers its fate."""


@dataclass(slots=True)
class _Progress:
    binding: bool = False
    """Bind has started: the binding call is the dispatcher's now."""


class BindingCycle:
    """Binds assumed pods; one ``run`` per pod, each in a task of its own."""

    def __init__(
        self,
        *,
        cache: Cache,
        queue: SchedulingQueue,
        waiting_pods: WaitingPods,
        failures: SchedulingFailures,
        gangs: GangCommits,
        events: PodEvents,
        recorder: SchedulingRecorder,
        clock: Clock,
        wake: Callable[[], None],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._cache = cache
        self._queue = queue
        self._waiting_pods = waiting_pods
        self._failures = failures
        self._gangs = gangs
        self._events = events
        self._recorder = recorder
        self._clock = clock
        self._wake = wake
        self._timer = timer

    async def run(self, assumed: Assumed) -> None:
        """The binding cycle of one assumed pod. Cancelled (usher stopping) before Bind, it rolls back as a failed
        one does (Unreserve: confirmed claim reservations removed, in-flight allocations released) and forgets the
        assumption; cancelled during Bind, it leaves the binding to the dispatcher, which sends it or not: a
        rollback racing a binding that still lands would leave a bound pod without its claims."""
        progress = _Progress()
        try:
            await self._run(assumed, progress)
        except asyncio.CancelledError:
            if not progress.binding:
                pod = assumed.queued.pod
                assumed.framework.run_unreserve(assumed.state, pod, assumed.node)
                self._cache.forget(pod)
            raise

    async def _run(self, assumed: Assumed, progress: _Progress) -> None:
        pod = assumed.queued.pod
        framework, state, node = assumed.framework, assumed.state, assumed.node
        status = Status()
        if assumed.permit is not None:
            waited_from = self._timer()
            try:
                async with asyncio.timeout(assumed.permit.timeout):
                    status = await assumed.permit.future
            except TimeoutError:
                status = Status(
                    Code.UNSCHEDULABLE,
                    (f"rejected due to timeout after waiting {assumed.permit.timeout:g}s at permit",),
                )
            finally:
                self._waiting_pods.release(pod.key, assumed.permit.future)
            self._recorder.permit_waited(status_label(status), self._timer() - waited_from)
        if status.ok:
            status = await framework.run_pre_bind(state, pod, node)
        gang = assumed.gang
        if gang is not None:
            if status.ok:
                status = await gang.ready(pod.key)  # every member ready, or the gang rolled back
            else:
                self._gangs.fail(gang, pod.key, status.message)
                if gang.failed_member != pod.key and gang.outcome is not None:
                    status = gang.outcome  # rejected at Permit because another member failed
        if status.ok:
            progress.binding = True
            status = await framework.run_bind(state, pod, node)
        if status.ok:
            self._queue.done(assumed.queued, node)
            framework.run_post_bind(state, pod, node)
            self._scheduled(assumed)
        else:
            framework.run_unreserve(state, pod, node)
            self._cache.forget(pod)
            if gang is not None and self._queue.get(pod.key) is not assumed.queued:
                logger.info("pod %s (of pod group %s) not bound: deleted meanwhile", pod.key, gang.group)
            elif status.cause is Cause.GANG_ROLLED_BACK:
                logger.info("pod %s not bound to %s: %s", pod.key, node, status.message)
                self._failures.failed(
                    assumed.queued, framework.scheduler_name, assumed.started, "unschedulable", status.message
                )
            elif status.cause in NOT_RETRIED:
                logger.info("pod %s not bound to %s: %s", pod.key, node, status.message)
                self._queue.done(assumed.queued)
            elif status.cause is Cause.POD_CONFLICT:
                # Usually bound already (the watch will say so and drop it from the queue), but a 409 is
                # no proof: an API server losing etcd mid-request answers 409 too. As kube-scheduler,
                # retry after the backoff; the API server never binds a pod twice. Nothing is reported.
                logger.info("pod %s not bound to %s (retried unless the watch shows it bound): %s",
                            pod.key, node, status.message)  # fmt: skip
                self._queue.add_unschedulable(assumed.queued)
            else:
                logger.warning("binding pod %s to %s failed: %s", pod.key, node, status.message)
                self._failures.rejected(assumed.queued, framework.scheduler_name, assumed.started, status)
            # Forgetting an assumed pod frees what it held on the node: as kube-scheduler's
            # handleBindingCycleError, an AssignedPodDelete for every other pod (after the pod itself is back
            # in the queue, so the event does not count as one that came while it was in flight).
            freed = {**pod.raw, "spec": {**(pod.raw.get("spec") or {}), "nodeName": node}}
            self._queue.move_all(ASSIGNED_POD_DELETE, freed, None, pre_check=lambda queued: queued.pod.uid != pod.uid)
        self._wake()

    def _scheduled(self, assumed: Assumed) -> None:
        queued, node = assumed.queued, assumed.node
        pod = queued.pod
        profile = assumed.framework.scheduler_name
        self._failures.forget(pod.key)
        self._recorder.attempt_finished("scheduled", profile, self._timer() - assumed.started)
        first = queued.initial_attempt_timestamp
        self._recorder.pod_scheduled(
            attempts=queued.attempts,
            sli_seconds=None if first is None else self._clock.now() - first,
            flushed=queued.flushed,
        )
        # DEBUG (-v), as kube-scheduler logs a binding only from verbosity 2: the Scheduled Event says it, and a
        # line per pod cost about 4% of usher's CPU at scheduler_perf's rates.
        logger.debug("pod %s bound to %s", pod.key, node)
        self._events.emit(
            pod.raw, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.key} to {node}", profile
        )
