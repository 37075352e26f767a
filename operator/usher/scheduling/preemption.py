"""Carrying out a preemption decision (kube-scheduler's preemption executor, asynchronous).

DefaultPreemption (a PostFilter plugin, pure) picks a node and the victims
whose removal lets the pod fit there. This module does what follows, without
waiting for the API server: the pod is nominated to the node in the queue at
once (so Filter keeps the room for it from lower-priority pods; its
``status.nominatedNodeName`` goes out with its Unschedulable condition, see
``failures``), and each victim is evicted: a victim held at Permit is
rejected in memory; any other gets the ``DisruptionTarget`` condition and is
then deleted gracefully (``usher.adapters.preempting``), through the
dispatcher. A victim already gone is not an error. Each victim gets a
``Preempted`` Event. The pod is retried when the victims' deletions arrive
(AssignedPodDelete), as any unschedulable pod is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from usher.adapters.kubeapi import ApiResult
from usher.adapters.preempting import disruption_condition_call, victim_delete_call
from usher.core.framework.interface import PostFilterResult
from usher.core.queue import SchedulingQueue
from usher.core.types import PodInfo
from usher.scheduling.podevents import PodEvents
from usher.scheduling.ports import ApiWriter, SchedulingRecorder
from usher.scheduling.waiting_pods import WaitingPods

logger = logging.getLogger(__name__)


class Preemptor:
    """Nominates a preemptor and evicts its victims."""

    def __init__(
        self,
        *,
        writer: ApiWriter,
        events: PodEvents,
        queue: SchedulingQueue,
        waiting_pods: WaitingPods,
        recorder: SchedulingRecorder,
    ) -> None:
        self._writer = writer
        self._events = events
        self._queue = queue
        self._waiting_pods = waiting_pods
        self._recorder = recorder

    def preempt(self, pod: PodInfo, result: PostFilterResult, profile: str) -> None:
        """``result`` nominated a node: hold it for ``pod`` and evict the victims."""
        node = result.nominated_node
        assert node is not None
        self._queue.nominate(pod, node)
        self._recorder.preemption_victims_chosen(len(result.victims))
        logger.info(
            "pod %s nominated to %s; preempting %s", pod.key, node, ", ".join(v.key for v in result.victims) or "none"
        )
        for victim in result.victims:
            note = f"Preempted by pod {pod.uid} on node {node}"
            if victim.key in self._waiting_pods:
                self._waiting_pods.reject(victim.key, result.status.plugin or "DefaultPreemption", "preempted")
                self._events.emit(
                    victim.raw, "Normal", "Preempted", "Preempting", note + " (in usher memory).", profile
                )
                continue
            self._writer.add(
                disruption_condition_call(victim, profile, self._after_condition(victim, note, profile)),
                current=victim.raw,
            )

    def _after_condition(self, victim: PodInfo, note: str, profile: str) -> Callable[[ApiResult], None]:
        def done(result: ApiResult) -> None:
            if result.status == 404:
                logger.info("victim %s is already gone", victim.key)
                return
            if not result.ok:
                logger.warning("could not mark victim %s as a disruption target: %s", victim.key, result.message)
                return
            self._writer.add(victim_delete_call(victim, self._after_delete(victim, note, profile)))

        return done

    def _after_delete(self, victim: PodInfo, note: str, profile: str) -> Callable[[ApiResult], None]:
        def done(result: ApiResult) -> None:
            if result.ok:
                self._events.emit(victim.raw, "Normal", "Preempted", "Preempting", note, profile)
            elif result.status in (404, 409):  # gone, or replaced by a pod of the same name: not ours to delete
                logger.info("victim %s is already gone", victim.key)
            else:
                logger.warning("could not delete victim %s: %s", victim.key, result.message)

        return done
