"""The scheduler at run time: watch events in, one scheduling loop, bindings out.

Everything runs on one asyncio event loop. Watch handlers update the pure
cache and queue synchronously and wake the loop; the loop pops a pod,
computes its placement (bounded CPU work), assumes it in the cache and hands
the binding to the dispatcher, then moves on without waiting for the API.
Binding results come back as callbacks that confirm, forget or requeue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from usher.adapters.dispatching import ApiCall, Dispatcher
from usher.adapters.kubeapi import ApiResult
from usher.adapters.metrics import Metrics
from usher.adapters.reporting import binding_call_body, binding_path, event_path, pod_event_body
from usher.core.cache import Cache
from usher.core.clock import Clock
from usher.core.cycle import schedule
from usher.core.handling import EventHandlers
from usher.core.queue import QueuedPod, SchedulingQueue
from usher.core.types import NodeName

logger = logging.getLogger(__name__)

YIELD_EVERY = 16
"""Pods scheduled back to back before the loop lets watch handlers and API results run."""

FAILED_SCHEDULING_REPEAT = 60.0
"""Seconds before an identical FailedScheduling Event for the same pod is written again."""


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    scheduler_name: str = "usher"
    seed: int | None = None


class Scheduler:
    def __init__(self, options: SchedulerOptions, *, clock: Clock, metrics: Metrics, dispatcher: Dispatcher) -> None:
        self.options = options
        self.clock = clock
        self.metrics = metrics
        self.cache = Cache()
        self.queue = SchedulingQueue(clock)
        self.handlers = EventHandlers(self.cache, self.queue, {options.scheduler_name})
        self.synced = asyncio.Event()
        self._wake = asyncio.Event()
        self._rng = random.Random(options.seed)
        self._dispatcher = dispatcher
        self._failure_reports: dict[str, tuple[str, float]] = {}

    # -- watch side (WatchSink) ---------------------------------------------

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.handlers.on_pod(event_type, raw)
        if event_type == "DELETED":
            meta = raw.get("metadata") or {}
            self._failure_reports.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)
        self._after_event()

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.handlers.on_node(event_type, raw)
        self._after_event()

    def mark_synced(self) -> None:
        if not self.synced.is_set():
            logger.info("cache synced: %d nodes, %d pods queued", self.cache.node_count, len(self.queue))
            self.synced.set()
            self._wake.set()

    def _after_event(self) -> None:
        self._record_queue()
        for bad in self.handlers.malformed:
            self._report_failure(bad.pod, f"pod cannot be scheduled: {bad.message}")
        self.handlers.malformed.clear()
        self._wake.set()

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        """Schedule pods until cancelled. Starts once the cache is synced."""
        await self.synced.wait()
        logger.info("scheduling pods with schedulerName=%s", self.options.scheduler_name)
        streak = 0
        while True:
            now = self.clock.now()
            self.queue.flush()
            if self.cache.cleanup_expired(now):
                self.queue.move_all("AssumedPodExpired")
            queued = self.queue.pop()
            self._record_queue()
            if queued is None:
                streak = 0
                self._wake.clear()
                wakeup = self.queue.next_wakeup()
                timeout = None if wakeup is None else max(0.0, wakeup - self.clock.now())
                # asyncio.timeout, not wait_for: no helper task that kopf's shutdown would cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                continue
            self._schedule_one(queued)
            streak += 1
            if streak % YIELD_EVERY == 0:
                await asyncio.sleep(0)

    def _schedule_one(self, queued: QueuedPod) -> None:
        started = time.perf_counter()
        pod = queued.pod
        placement = schedule(pod, self.cache.node_infos(), self._rng)
        profile = self.options.scheduler_name
        if placement.node is None:
            self.queue.add_unschedulable(queued)
            self._observe_attempt("unschedulable", started)
            logger.info("pod %s is unschedulable: %s", pod.key, placement.message)
            self._report_failure(pod.raw, placement.message)
            return
        node = placement.node
        self.cache.assume(pod, node)
        self._dispatcher.add(
            ApiCall(
                call_type="pod_binding",
                object_key=pod.key,
                method="POST",
                path=binding_path(pod.namespace, pod.name),
                body=binding_call_body(pod.namespace, pod.name, pod.uid, node),
                on_done=lambda result: self._binding_done(queued, node, result, started),
            )
        )
        logger.debug("pod %s assumed on %s (profile %s)", pod.key, node, profile)

    def _binding_done(self, queued: QueuedPod, node: NodeName, result: ApiResult, started: float) -> None:
        pod = queued.pod
        if result.ok:
            self.cache.finish_binding(pod.key, self.clock.now())
            self.queue.done(pod.key)
            self._failure_reports.pop(pod.key, None)
            self._observe_attempt("scheduled", started)
            logger.info("pod %s bound to %s", pod.key, node)
            self._emit_event(pod.raw, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.key} to {node}")
        elif result.status in (404, 409):
            # Gone, or bound already (by an earlier life of ours, or someone else): the watch
            # tells us where it went; never bind twice.
            logger.info("pod %s not bound to %s: %s", pod.key, node, result.message)
            self.cache.forget(pod.key)
            self.queue.done(pod.key)
        else:
            logger.warning("binding pod %s to %s failed: %s", pod.key, node, result.message)
            self.cache.forget(pod.key)
            self.queue.add_unschedulable(queued, error=True)
            self._observe_attempt("error", started)
            self._report_failure(pod.raw, f"Binding rejected: {result.message}")
        self._record_queue()
        self._wake.set()

    # -- reporting -------------------------------------------------------------

    def _observe_attempt(self, result: str, started: float) -> None:
        profile = self.options.scheduler_name
        self.metrics.schedule_attempts.labels(result=result, profile=profile).inc()
        self.metrics.scheduling_attempt_duration.labels(result=result, profile=profile).observe(
            time.perf_counter() - started
        )

    def _record_queue(self) -> None:
        for queue_name, event in self.queue.incoming:
            self.metrics.queue_incoming_pods.labels(queue=queue_name, event=event).inc()
        self.queue.incoming.clear()
        for queue_name, count in self.queue.pending().items():
            self.metrics.pending_pods.labels(queue=queue_name).set(count)

    def _report_failure(self, pod: Mapping[str, Any], message: str) -> None:
        """A FailedScheduling Event, at most once a minute per pod while the message stays the same."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        now = self.clock.now()
        last = self._failure_reports.get(key)
        if last is not None and last[0] == message and now - last[1] < FAILED_SCHEDULING_REPEAT:
            return
        self._failure_reports[key] = (message, now)
        self._emit_event(pod, "Warning", "FailedScheduling", "Scheduling", message)

    def _emit_event(self, pod: Mapping[str, Any], event_type: str, reason: str, action: str, note: str) -> None:
        meta = pod.get("metadata") or {}
        self._dispatcher.add(
            ApiCall(
                call_type="event",
                object_key=f"{meta.get('namespace')}/{meta.get('name')}",
                method="POST",
                path=event_path(str(meta.get("namespace"))),
                body=pod_event_body(
                    pod,
                    controller=self.options.scheduler_name,
                    event_type=event_type,
                    reason=reason,
                    action=action,
                    note=note,
                ),
            )
        )
