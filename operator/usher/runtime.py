"""The scheduler at run time: watch events in, one scheduling loop, binding cycles out.

Everything runs on one asyncio event loop. Watch handlers update the pure
cache and queue synchronously and wake the loop. The loop pops a pod, runs
the scheduling cycle (bounded CPU work: filter, score, assume, reserve,
permit) and starts its binding cycle as a task, then moves on without
waiting for the API. A binding cycle that fails unreserves, forgets the
assumption and hands the pod back to the queue with the plugins that
rejected it.
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

from usher.adapters.binding import ALREADY_BOUND, POD_GONE, DispatcherBinder
from usher.adapters.dispatching import ApiCall, Dispatcher, Request
from usher.adapters.metrics import Metrics
from usher.adapters.reporting import condition_patch, event_path, pod_event_body, pod_status_call
from usher.config import SchedulerConfig
from usher.core.cache import Cache
from usher.core.clock import Clock
from usher.core.cycle import NodeSampler, schedule
from usher.core.dra.ports import ClaimWriter
from usher.core.dra.state import DraState
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import Binder
from usher.core.framework.runtime import RECORD_PLUGIN_METRICS, Framework
from usher.core.handling import EventHandlers
from usher.core.plugins.registry import Registry, in_tree_registry
from usher.core.queue import QueuedPod, QueueOptions, SchedulingQueue
from usher.core.types import Code, NodeName, PodKey, Status
from usher.features import FeatureGates, parse_feature_gates
from usher.notready import DEFAULT_DELAY, NotReadyReporter

logger = logging.getLogger(__name__)

YIELD_EVERY = 16
"""Pods scheduled back to back before the loop lets watch handlers and API results run."""

FAILED_SCHEDULING_REPEAT = 60.0
"""Seconds before an identical FailedScheduling Event for the same pod is written again."""

PLUGIN_METRICS_SAMPLE = 0.1
"""Share of scheduling cycles whose per-plugin timings are recorded (as kube-scheduler's 10 %)."""


MAX_NODES_EXPLAINED = 50


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """Why a pod's last attempt failed: per plugin and, for the first nodes, per node."""

    at: float
    result: str
    message: str
    plugins: dict[str, list[str]]
    nodes: dict[str, str]
    nodes_left_out: int

    @classmethod
    def of(
        cls, at: float, result: str, message: str, statuses: Mapping[str, Status], rejectors: frozenset[str] | set[str]
    ) -> AttemptRecord:
        plugins: dict[str, set[str]] = {name: set() for name in rejectors}
        for status in statuses.values():
            plugins.setdefault(status.plugin or "?", set()).update(status.reasons)
        names = sorted(statuses)
        nodes = {name: statuses[name].message for name in names[:MAX_NODES_EXPLAINED]}
        return cls(
            at,
            result,
            message,
            {p: sorted(r) for p, r in sorted(plugins.items())},
            nodes,
            max(0, len(names) - len(nodes)),
        )


class WaitingPods:
    """Pods held at Permit until every plugin that answered Wait allows them, one rejects, or time runs out."""

    def __init__(self) -> None:
        self._pods: dict[PodKey, tuple[asyncio.Future[Status], set[str]]] = {}

    def hold(self, key: PodKey, plugins: set[str]) -> asyncio.Future[Status]:
        future: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        self._pods[key] = (future, set(plugins))
        return future

    def release(self, key: PodKey) -> None:
        self._pods.pop(key, None)

    def allow(self, key: PodKey, plugin: str) -> None:
        held = self._pods.get(key)
        if held is None or held[0].done():
            return
        held[1].discard(plugin)
        if not held[1]:
            held[0].set_result(Status())

    def reject(self, key: PodKey, plugin: str, message: str) -> None:
        held = self._pods.get(key)
        if held is not None and not held[0].done():
            held[0].set_result(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def __contains__(self, key: object) -> bool:
        return key in self._pods


@dataclass(frozen=True, slots=True)
class _Handle:
    binder: Binder
    waiting_pods: WaitingPods
    cache: Cache
    dra: DraState
    claims: ClaimWriter

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.cache.namespace_labels(namespace)


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        *,
        clock: Clock,
        metrics: Metrics,
        dispatcher: Dispatcher,
        claim_writer: ClaimWriter,
        gates: FeatureGates | None = None,
        registry: Registry | None = None,
        seed: int | None = None,
        status_delay: float = DEFAULT_DELAY,
    ) -> None:
        self.config = config
        self.gates = gates or parse_feature_gates(None)
        self.clock = clock
        self.metrics = metrics
        self._dispatcher = dispatcher
        registry = registry or in_tree_registry()
        self.waiting_pods = WaitingPods()
        self.cache = Cache()
        self.dra = DraState()
        handle = _Handle(
            binder=DispatcherBinder(dispatcher),
            waiting_pods=self.waiting_pods,
            cache=self.cache,
            dra=self.dra,
            claims=claim_writer,
        )
        self.frameworks: dict[str, Framework] = {
            profile.scheduler_name: build_framework(profile, registry=registry, handle=handle, recorder=metrics)
            for profile in config.profiles
        }
        first = self.frameworks[config.profiles[0].scheduler_name]
        assert first.plugins.queue_sort is not None
        self.queue = SchedulingQueue(
            clock,
            profiles=self.frameworks,
            sort_key=first.plugins.queue_sort.sort_key,
            options=QueueOptions(
                initial_backoff=config.pod_initial_backoff_seconds,
                max_backoff=config.pod_max_backoff_seconds,
                queueing_hints=self.gates.queueing_hints,
                pre_queueing_hints=self.gates.pre_queueing_hints,
                pop_from_backoff_q=self.gates.pop_from_backoff_q,
            ),
            recorder=metrics,
            reporter=(
                NotReadyReporter(dispatcher, self._emit_event, delay=status_delay)
                if self.gates.pre_enqueue_pod_status
                else None
            ),
        )
        self.handlers = EventHandlers(self.cache, self.queue, set(self.frameworks), dra=self.dra)
        metrics.watch_queue(self.queue)
        self.synced = asyncio.Event()
        self.leading = asyncio.Event()
        """Set while this instance may schedule (always, without leader election)."""
        self._wake = asyncio.Event()
        self._rng = random.Random(seed)
        self._sampler = NodeSampler(config.percentage_of_nodes_to_score)
        self._failure_reports: dict[str, tuple[str, float]] = {}
        self.last_attempts: dict[PodKey, AttemptRecord] = {}
        """The last failed attempt of each waiting pod, for `usher explain` (dropped once it is placed)."""
        self._binding_tasks: set[asyncio.Task[None]] = set()

    # -- watch side (WatchSink) ---------------------------------------------

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        started = time.perf_counter()
        label = self.handlers.on_pod(event_type, raw)
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if event_type == "DELETED":
            self._failure_reports.pop(key, None)
            self.last_attempts.pop(PodKey(key), None)
            self._dispatcher.forget_object(key)
        else:
            self._dispatcher.sync_object(key, raw)
        self._after_event(label, started)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        started = time.perf_counter()
        label = self.handlers.on_node(event_type, raw)
        self._after_event(label, started)

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        started = time.perf_counter()
        label = self.handlers.on_dra(kind, event_type, raw)
        self._after_event(label, started)

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = str((raw.get("metadata") or {}).get("name") or "")
        if event_type == "DELETED":
            self.cache.remove_namespace(name)
        else:
            self.cache.set_namespace(name, (raw.get("metadata") or {}).get("labels") or {})

    def mark_synced(self) -> None:
        if not self.synced.is_set():
            logger.info("cache synced: %d nodes, %d pods queued", self.cache.node_count, len(self.queue))
            self.synced.set()
            self._wake.set()

    def _after_event(self, label: str, started: float) -> None:
        if label:
            self.metrics.child(self.metrics.event_handling_duration, label).observe(time.perf_counter() - started)
        for bad in self.handlers.malformed:
            self._report_failure(bad.pod, f"pod cannot be scheduled: {bad.message}")
        self.handlers.malformed.clear()
        self._wake.set()

    # -- the loop ------------------------------------------------------------

    async def run(self) -> None:
        """Schedule pods until cancelled. Starts once the cache is synced."""
        await self.synced.wait()
        await self.leading.wait()
        logger.info("scheduling pods for profiles %s", ", ".join(self.frameworks))
        streak = 0
        while True:
            now = self.clock.now()
            self.queue.flush()
            for key in self.cache.cleanup_expired(now):
                logger.warning("assumed pod %s never showed up bound; forgetting it", key)
            if not self.leading.is_set():  # lease lost: not one more pod
                await self.leading.wait()
                continue
            queued = self.queue.pop()
            if queued is None:
                streak = 0
                self._wake.clear()
                timeout = max(0.0, self.queue.next_wakeup() - self.clock.now())
                # asyncio.timeout, not wait_for: no helper task that kopf's shutdown would cancel.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                continue
            try:
                self.schedule_one(queued)
            except Exception:
                # A bug must cost one attempt of one pod, never the scheduler: back off and retry.
                logger.exception("scheduling pod %s failed unexpectedly", queued.key)
                self.cache.forget(queued.key)
                self.queue.add_unschedulable(queued)
            streak += 1
            if streak % YIELD_EVERY == 0:
                await asyncio.sleep(0)

    def schedule_one(self, queued: QueuedPod) -> None:
        """The scheduling cycle of one pod; starts its binding cycle as a task on success."""
        started = time.perf_counter()
        pod = queued.pod
        framework = self.frameworks.get(pod.scheduler_name)
        if framework is None:  # its profile vanished (cannot happen while the config is fixed)
            self.queue.done(pod.key)
            return
        state = CycleState()
        state.write(RECORD_PLUGIN_METRICS, self._rng.random() < PLUGIN_METRICS_SAMPLE)
        result = schedule(framework, state, pod, self.cache.node_infos(), rng=self._rng, sampler=self._sampler)
        self.metrics.scheduling_algorithm_duration.observe(time.perf_counter() - started)
        if result.node is None:
            if result.status.code is Code.ERROR:
                logger.error("scheduling pod %s failed: %s", pod.key, result.status.message)
                self._failed(queued, framework, started, "error", result.status.message)
                return
            framework.run_post_filter(state, pod, result.node_statuses)
            logger.info("pod %s is unschedulable: %s", pod.key, result.message)
            self._failed(
                queued,
                framework,
                started,
                "unschedulable",
                result.message,
                unschedulable_plugins=result.unschedulable_plugins,
                pending_plugins=result.pending_plugins,
                node_statuses=result.node_statuses,
            )
            return
        node = result.node
        self.cache.assume(pod, node)
        status = framework.run_reserve(state, pod, node)
        permit = framework.run_permit(state, pod, node) if status.ok else None
        if permit is not None:
            status = permit.status
        if not status.ok and status.code is not Code.WAIT:
            framework.run_unreserve(state, pod, node)
            self.cache.forget(pod.key)
            self._rejected(queued, framework, started, status)
            return
        held = None
        if permit is not None and status.code is Code.WAIT:
            held = (self.waiting_pods.hold(pod.key, permit.waiting), permit.timeout)
        task = asyncio.get_running_loop().create_task(
            self._binding_cycle(queued, framework, state, node, started, held),
            name=f"binding-cycle {pod.key}",
        )
        self._binding_tasks.add(task)
        task.add_done_callback(self._binding_tasks.discard)

    async def _binding_cycle(
        self,
        queued: QueuedPod,
        framework: Framework,
        state: CycleState,
        node: NodeName,
        started: float,
        held: tuple[asyncio.Future[Status], float] | None,
    ) -> None:
        pod = queued.pod
        status = Status()
        if held is not None:
            future, timeout = held
            try:
                async with asyncio.timeout(timeout):
                    status = await future
            except TimeoutError:
                status = Status(Code.UNSCHEDULABLE, (f"rejected due to timeout after waiting {timeout:g}s at permit",))
            finally:
                self.waiting_pods.release(pod.key)
        if status.ok:
            status = await framework.run_pre_bind(state, pod, node)
        if status.ok:
            status = await framework.run_bind(state, pod, node)
        if status.ok:
            self.cache.finish_binding(pod.key, self.clock.now())
            self.queue.done(pod.key)
            framework.run_post_bind(state, pod, node)
            self._scheduled(queued, framework, node, started)
        else:
            framework.run_unreserve(state, pod, node)
            self.cache.forget(pod.key)
            if status.reasons and status.reasons[0] in (ALREADY_BOUND, POD_GONE):
                # Bound already (by an earlier life of ours, or someone else) or deleted: the
                # watch tells us where it went. Never bind twice.
                logger.info("pod %s not bound to %s: %s", pod.key, node, status.message)
                self.queue.done(pod.key)
            else:
                logger.warning("binding pod %s to %s failed: %s", pod.key, node, status.message)
                self._rejected(queued, framework, started, status)
        self._wake.set()

    # -- outcomes ------------------------------------------------------------

    def _scheduled(self, queued: QueuedPod, framework: Framework, node: NodeName, started: float) -> None:
        pod = queued.pod
        profile = framework.scheduler_name
        self._failure_reports.pop(pod.key, None)
        self.last_attempts.pop(pod.key, None)
        self.metrics.child(self.metrics.schedule_attempts, "scheduled", profile).inc()
        self.metrics.child(self.metrics.scheduling_attempt_duration, "scheduled", profile).observe(
            time.perf_counter() - started
        )
        if queued.initial_attempt_timestamp is not None:
            self.metrics.child(self.metrics.pod_scheduling_sli_duration, str(queued.attempts)).observe(
                self.clock.now() - queued.initial_attempt_timestamp
            )
        self.metrics.pod_scheduling_attempts.observe(queued.attempts)
        if queued.flushed:
            self.metrics.pod_scheduled_after_flush.inc()
        logger.info("pod %s bound to %s", pod.key, node)
        self._emit_event(
            pod.raw, "Normal", "Scheduled", "Binding", f"Successfully assigned {pod.key} to {node}", profile
        )

    def _rejected(self, queued: QueuedPod, framework: Framework, started: float, status: Status) -> None:
        """Reserve, Permit, PreBind or Bind said no: back to the queue with the plugin that said it."""
        if status.is_rejection and status.plugin:
            self._failed(
                queued, framework, started, "unschedulable", status.message, unschedulable_plugins={status.plugin}
            )
        else:
            self._failed(queued, framework, started, "error", status.message)

    def _failed(
        self,
        queued: QueuedPod,
        framework: Framework,
        started: float,
        result: str,
        message: str,
        *,
        unschedulable_plugins: set[str] | frozenset[str] = frozenset(),
        pending_plugins: set[str] | frozenset[str] = frozenset(),
        node_statuses: Mapping[str, Status] | None = None,
    ) -> None:
        profile = framework.scheduler_name
        self.last_attempts[queued.key] = AttemptRecord.of(
            self.clock.now(), result, message, node_statuses or {}, unschedulable_plugins | pending_plugins
        )
        self.metrics.child(self.metrics.schedule_attempts, result, profile).inc()
        self.metrics.child(self.metrics.scheduling_attempt_duration, result, profile).observe(
            time.perf_counter() - started
        )
        self.queue.add_unschedulable(
            queued, unschedulable_plugins=unschedulable_plugins, pending_plugins=pending_plugins
        )
        self._report_failure(queued.pod.raw, message, profile)
        self._wake.set()

    # -- reporting -------------------------------------------------------------

    def _report_failure(self, pod: Mapping[str, Any], message: str, profile: str | None = None) -> None:
        """``PodScheduled=False, reason=Unschedulable`` on the pod (patched only when it changes) and a
        FailedScheduling Event, at most once a minute per pod while the message stays the same."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        self._patch_condition(pod, "Unschedulable", message)
        now = self.clock.now()
        last = self._failure_reports.get(key)
        if last is not None and last[0] == message and now - last[1] < FAILED_SCHEDULING_REPEAT:
            return
        self._failure_reports[key] = (message, now)
        controller = profile or str((pod.get("spec") or {}).get("schedulerName") or "usher")
        self._emit_event(pod, "Warning", "FailedScheduling", "Scheduling", message, controller)

    def _patch_condition(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        def patch_for(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return condition_patch(current, kind="PodScheduled", status="False", reason=reason, message=message)

        self._dispatcher.add(pod_status_call(pod, patch_for), current=pod)

    def _emit_event(
        self, pod: Mapping[str, Any], event_type: str, reason: str, action: str, note: str, controller: str
    ) -> None:
        meta = pod.get("metadata") or {}
        body = pod_event_body(
            pod, controller=controller, event_type=event_type, reason=reason, action=action, note=note
        )
        self._dispatcher.add(
            ApiCall.fixed("event", None, Request("POST", event_path(str(meta.get("namespace"))), body))
        )
