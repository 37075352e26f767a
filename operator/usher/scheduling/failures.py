"""What happens when a scheduling attempt fails (kube-scheduler's handleSchedulingFailure).

Every failed attempt, whichever cycle it failed in, ends here: it is
counted (``scheduler_schedule_attempts_total{result=unschedulable|error}``),
remembered for `usher explain`, handed back to the queue with the plugins
that rejected it (so only their QueueingHints can move it), and reported on
the pod: ``PodScheduled=False`` with reason ``Unschedulable``, or
``SchedulerError`` when the attempt ended in an error (patched only when the
message changes), and a ``FailedScheduling`` Event, written again for the
same message at most once a minute. A pod usher cannot parse is reported
the same way without being queued. Reports go through the dispatcher; none
of this waits for the API server.

NotReadyForScheduling (PreEnqueue rejections, KEP-5501) is reported by
``usher.scheduling.notready``, driven by the queue.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from usher.adapters.reporting import condition_patch, pod_status_call
from usher.core.clock import Clock
from usher.core.queue import QueuedPod, SchedulingQueue
from usher.core.types import PodKey, Status
from usher.scheduling.attempts import AttemptRecord, Attempts
from usher.scheduling.podevents import PodEvents
from usher.scheduling.ports import ApiWriter, SchedulingRecorder

FAILED_SCHEDULING_REPEAT = 60.0
"""Seconds before an identical FailedScheduling Event for the same pod is written again."""

UNSCHEDULABLE = "Unschedulable"
"""The PodScheduled condition's reason for a pod no node fits (v1.PodReasonUnschedulable)."""
SCHEDULER_ERROR = "SchedulerError"
"""Its reason when the attempt ended in an error (v1.PodReasonSchedulerError)."""


class FailureReporter:
    """The Unschedulable condition and the FailedScheduling Event of one pod, de-duplicated."""

    def __init__(self, writer: ApiWriter, events: PodEvents, clock: Clock) -> None:
        self._writer = writer
        self._events = events
        self._clock = clock
        self._last: dict[str, tuple[str, float]] = {}

    def report(
        self,
        pod: Mapping[str, Any],
        message: str,
        profile: str | None = None,
        nominated_node: str | None = None,
        *,
        reason: str = UNSCHEDULABLE,
    ) -> None:
        """``reason``: the condition's, :data:`UNSCHEDULABLE` or :data:`SCHEDULER_ERROR`; ``nominated_node``:
        preemption's nomination, written with the condition (kube-scheduler's updatePod):
        None leaves ``status.nominatedNodeName`` as it is, "" clears it, a name sets it."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"

        def patch_for(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
            patch = condition_patch(current, kind="PodScheduled", status="False", reason=reason, message=message)
            held = ((current or {}).get("status") or {}).get("nominatedNodeName") or ""
            if nominated_node is not None and held != nominated_node:
                patch = patch or {"status": {}}
                patch["status"]["nominatedNodeName"] = nominated_node or None
            return patch

        self._writer.add(pod_status_call(pod, patch_for), current=pod)
        now = self._clock.now()
        last = self._last.get(key)
        if last is not None and last[0] == message and now - last[1] < FAILED_SCHEDULING_REPEAT:
            return
        self._last[key] = (message, now)
        controller = profile or str((pod.get("spec") or {}).get("schedulerName") or "usher")
        self._events.emit(pod, "Warning", "FailedScheduling", "Scheduling", message, controller)

    def forget(self, key: str) -> None:
        """The pod was scheduled or deleted: a later failure is news again."""
        self._last.pop(key, None)


class SchedulingFailures:
    """Handles a failed attempt: metrics, the explain record, back to the queue, the report."""

    def __init__(
        self,
        *,
        queue: SchedulingQueue,
        reporter: FailureReporter,
        attempts: Attempts,
        recorder: SchedulingRecorder,
        clock: Clock,
        wake: Callable[[], None],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._queue = queue
        self._reporter = reporter
        self._attempts = attempts
        self._recorder = recorder
        self._clock = clock
        self._wake = wake
        self._timer = timer

    def failed(
        self,
        queued: QueuedPod,
        profile: str,
        started: float,
        result: str,
        message: str,
        *,
        unschedulable_plugins: set[str] | frozenset[str] = frozenset(),
        pending_plugins: set[str] | frozenset[str] = frozenset(),
        node_statuses: Mapping[str, Status] | None = None,
        nominated_node: str | None = None,
    ) -> None:
        """``result`` is ``unschedulable`` or ``error``; ``started`` is the attempt's timer reading;
        ``nominated_node``: where preemption made room for the pod ("" when it found none: the nomination
        is cleared; None: left as it is)."""
        self._attempts.failed(
            queued.key,
            AttemptRecord.of(
                self._clock.now(), result, message, node_statuses or {}, unschedulable_plugins | pending_plugins
            ),
        )
        self._recorder.attempt_finished(result, profile, self._timer() - started)
        self._queue.add_unschedulable(
            queued, unschedulable_plugins=unschedulable_plugins, pending_plugins=pending_plugins
        )
        reason = SCHEDULER_ERROR if result == "error" else UNSCHEDULABLE
        self._reporter.report(queued.pod.raw, message, profile, nominated_node, reason=reason)
        self._wake()

    def rejected(self, queued: QueuedPod, profile: str, started: float, status: Status) -> None:
        """Reserve, Permit, PreBind or Bind said no: back to the queue with the plugin that said it."""
        if status.is_rejection and status.plugin:
            self.failed(
                queued, profile, started, "unschedulable", status.message, unschedulable_plugins={status.plugin}
            )
        else:
            self.failed(queued, profile, started, "error", status.message)

    def malformed(self, pod: Mapping[str, Any], message: str) -> None:
        """A pod usher cannot parse: reported on the pod, never queued, never fatal."""
        self._reporter.report(pod, f"pod cannot be scheduled: {message}")

    def forget(self, key: PodKey) -> None:
        self._reporter.forget(key)
        self._attempts.forget(key)
