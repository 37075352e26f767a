"""The scheduling cycle of one pod (the first half of kube-scheduler's schedule_one.go).

Synchronous and CPU-bound, so its work per pod is bounded: find a node
(PreFilter, Filter over all nodes or a sample, Score, pick), run PostFilter
when none fits, then assume the pod on the chosen node in the cache and run
Reserve and Permit. The result is an ``Assumed`` pod for the binding cycle,
or nothing when the attempt failed (already handed to ``SchedulingFailures``).
Nothing here talks to the API server.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from usher.core.cache import Cache
from usher.core.cycle import NodeSampler, schedule
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import RECORD_PLUGIN_METRICS, Framework
from usher.core.queue import QueuedPod, SchedulingQueue
from usher.core.types import Code, NodeName, Status
from usher.scheduling.failures import SchedulingFailures
from usher.scheduling.gang_binding import GangCommit
from usher.scheduling.ports import SchedulingRecorder
from usher.scheduling.preemption import Preemptor
from usher.scheduling.waiting_pods import WaitingPods

logger = logging.getLogger(__name__)

PLUGIN_METRICS_SAMPLE = 0.1
"""Share of scheduling cycles whose per-plugin timings are recorded (as kube-scheduler's 10 %)."""


@dataclass(frozen=True, slots=True)
class PermitWait:
    """Permit answered Wait: the binding cycle awaits ``future`` for at most ``timeout`` seconds."""

    future: asyncio.Future[Status]
    timeout: float


@dataclass(frozen=True, slots=True)
class Assumed:
    """A pod assumed on a node and reserved there: what its binding cycle needs."""

    queued: QueuedPod
    framework: Framework
    state: CycleState
    node: NodeName
    started: float
    """The attempt's timer reading when its scheduling cycle began."""
    permit: PermitWait | None = None
    gang: GangCommit | None = None
    """The pod's gang, when it was committed with one: its binding waits for theirs before Bind."""


class SchedulingCycle:
    """Runs the scheduling cycle of popped pods against the cache, one at a time."""

    def __init__(
        self,
        *,
        frameworks: Mapping[str, Framework],
        cache: Cache,
        queue: SchedulingQueue,
        waiting_pods: WaitingPods,
        failures: SchedulingFailures,
        preemptor: Preemptor,
        recorder: SchedulingRecorder,
        sampler: NodeSampler,
        rng: random.Random,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._frameworks = frameworks
        self._cache = cache
        self._queue = queue
        self._waiting_pods = waiting_pods
        self._failures = failures
        self._preemptor = preemptor
        self._recorder = recorder
        self._sampler = sampler
        self._rng = rng
        self._timer = timer

    def run(self, queued: QueuedPod) -> Assumed | None:
        """Schedule one popped pod: an assumed pod for its binding cycle, or None when it failed."""
        started = self._timer()
        pod = queued.pod
        framework = self._frameworks.get(pod.scheduler_name)
        if framework is None:  # its profile vanished (cannot happen while the config is fixed)
            self._queue.done(queued)
            return None
        profile = framework.scheduler_name
        state = CycleState()
        state.write(RECORD_PLUGIN_METRICS, self._rng.random() < PLUGIN_METRICS_SAMPLE)
        nodes = self._cache.node_infos()
        nominated = self._queue.nominator.node_of(pod.key) or pod.nominated_node_name or None
        result = schedule(framework, state, pod, nodes, rng=self._rng, sampler=self._sampler, nominated=nominated)
        self._recorder.algorithm_finished(self._timer() - started)
        if result.node is None:
            if result.status.code is Code.ERROR:
                logger.error("scheduling pod %s failed: %s", pod.key, result.status.message)
                self._failures.failed(queued, profile, started, "error", result.status.message)
                return None
            outcome = self._preemptor.post_filter(framework, state, pod, result, nodes)
            logger.info("pod %s is unschedulable: %s", pod.key, outcome.message)
            self._failures.failed(
                queued,
                profile,
                started,
                "unschedulable",
                outcome.message,
                unschedulable_plugins=result.unschedulable_plugins,
                pending_plugins=result.pending_plugins,
                node_statuses=result.node_statuses,
                nominated_node=outcome.nominated,
            )
            return None
        node = result.node
        self._cache.assume(pod, node)
        status = framework.run_reserve(state, pod, node)
        permit = framework.run_permit(state, pod, node) if status.ok else None
        if permit is not None:
            status = permit.status
        if not status.ok and status.code is not Code.WAIT:
            framework.run_unreserve(state, pod, node)
            self._cache.forget(pod)
            self._failures.rejected(queued, profile, started, status)
            return None
        wait = None
        if permit is not None and status.code is Code.WAIT:
            wait = PermitWait(self._waiting_pods.hold(pod.key, permit.waiting), permit.timeout)
        return Assumed(queued, framework, state, node, started, wait)

    def abandon(self, queued: QueuedPod) -> None:
        """``run`` raised (a bug): drop any assumption and retry the pod after its backoff."""
        self._cache.forget(queued.pod)
        self._queue.add_unschedulable(queued)
