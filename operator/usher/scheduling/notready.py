"""NotReadyForScheduling (KEP-5501): tell users why PreEnqueue holds their pod back.

When a PreEnqueue plugin rejects a pod with a new message, a *delayed*
status patch sets ``PodScheduled=False, reason=NotReadyForScheduling,
message=<the plugin's message>``, and when it lands an Event with the same
reason and message is written. When the pod later passes PreEnqueue, a
delayed patch removes that condition. The dispatcher merges the calls of one
pod without resetting the delay and drops those that became no-ops, so a
reason that resolves within the delay never reaches the API server, and the
pod never shows a stale reason for longer than the delay. The queue
de-duplicates messages (seeded from the pod's own condition, so a restart
repeats nothing, and a gated pod already carrying the API server's
SchedulingGated condition with the same message is never patched).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from usher.adapters.dispatching import NO_OP
from usher.adapters.kubeapi import ApiResult
from usher.adapters.reporting import condition_patch, condition_removal, pod_status_call
from usher.core.queue import QueuedPod
from usher.core.queue.queueing import NOT_READY_FOR_SCHEDULING
from usher.scheduling.podevents import PodEvents
from usher.scheduling.ports import ApiWriter

DEFAULT_DELAY = 5.0


class NotReadyReporter:
    """The queue's ``reporter``: delayed NotReadyForScheduling conditions and their Events."""

    def __init__(self, writer: ApiWriter, events: PodEvents, *, delay: float = DEFAULT_DELAY) -> None:
        self._writer = writer
        self._events = events
        self._delay = delay

    def rejected(self, queued: QueuedPod, message: str) -> None:
        pod = queued.pod

        def patch_for(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return condition_patch(
                current, kind="PodScheduled", status="False", reason=NOT_READY_FOR_SCHEDULING, message=message
            )

        def landed(result: ApiResult) -> None:
            if result.ok and result is not NO_OP:
                self._events.emit(
                    pod.raw, "Normal", NOT_READY_FOR_SCHEDULING, "Scheduling", message, pod.scheduler_name
                )

        self._writer.add(pod_status_call(pod.raw, patch_for, delay=self._delay, on_done=landed), current=pod.raw)

    def cleared(self, queued: QueuedPod) -> None:
        def patch_for(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return condition_removal(current, kind="PodScheduled", reason=NOT_READY_FOR_SCHEDULING)

        pod = queued.pod
        self._writer.add(pod_status_call(pod.raw, patch_for, delay=self._delay), current=pod.raw)
