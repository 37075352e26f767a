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
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from usher.adapters.kubeapi import ApiResult
from usher.adapters.preempting import disruption_condition_call, victim_delete_call
from usher.adapters.reporting import pod_status_call
from usher.core.cache import Cache, NodeInfo
from usher.core.cycle import ScheduleResult
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import PostFilterResult
from usher.core.framework.names import DEFAULT_PREEMPTION
from usher.core.framework.runtime import Framework, status_label
from usher.core.groupcycle import GroupPreemption, GroupSimulation, preempt_for_group
from usher.core.plugins.defaultpreemption.victims import group_units
from usher.core.podgroups import PodGroup
from usher.core.queue import SchedulingQueue
from usher.core.types import PodInfo, PodKey
from usher.scheduling.podevents import PodEvents
from usher.scheduling.ports import ApiWriter, SchedulingRecorder
from usher.scheduling.waiting_pods import WaitingPods

logger = logging.getLogger(__name__)


class Evictions:
    """Preemptions in flight (``PreemptionsInFlight``): preemptor UID -> its victim calls still running,
    and the victims asked to go whose deletion has not been watched yet (victim -> its preemptors)."""

    def __init__(self) -> None:
        self._calls: dict[str, int] = {}
        self._preemptors_of: dict[PodKey, set[str]] = {}
        self._by_preemptor: dict[str, tuple[PodKey, ...]] = {}

    def running(self, uid: str) -> bool:
        return self._calls.get(uid, 0) > 0

    def evicting(self, key: PodKey) -> bool:
        return key in self._preemptors_of

    def victims_of(self, uid: str) -> list[PodKey]:
        """The victims of this preemptor's last preemption not seen gone yet (``usher explain``)."""
        return [key for key in self._by_preemptor.get(uid, ()) if key in self._preemptors_of]

    def started(self, uid: str, victims: Iterable[PodKey]) -> None:
        keys = tuple(victims)
        self._calls[uid] = self._calls.get(uid, 0) + len(keys)
        for key in keys:
            self._preemptors_of.setdefault(key, set()).add(uid)
        if keys:
            self._by_preemptor[uid] = keys

    def finished(self, uid: str) -> bool:
        """One victim of ``uid`` is done with; True when it was the last one."""
        left = self._calls.get(uid, 0) - 1
        if left > 0:
            self._calls[uid] = left
            return False
        self._calls.pop(uid, None)
        return True

    def gone(self, key: PodKey) -> None:
        """The pod was deleted (or its eviction failed): it is nobody's victim any more. Called for every
        pod deletion, so it touches only this pod's preemptors."""
        for uid in self._preemptors_of.pop(key, ()):
            if not any(k in self._preemptors_of for k in self._by_preemptor.get(uid, ())):
                self._by_preemptor.pop(uid, None)


@dataclass(frozen=True, slots=True)
class PostFilterOutcome:
    """What PostFilter made of a pod no node fits: its FailedScheduling message and its nomination."""

    message: str
    """The fit error, with preemption's own message after it (kube-scheduler's FitError)."""
    nominated: str | None
    """The node preemption nominated it to; "" when its nomination is cleared; None: left as it is."""


class Preemptor:
    """Runs PostFilter for pods no node fits; nominates a preemptor and evicts its victims."""

    def __init__(
        self,
        *,
        writer: ApiWriter,
        events: PodEvents,
        queue: SchedulingQueue,
        waiting_pods: WaitingPods,
        recorder: SchedulingRecorder,
        evictions: Evictions,
        wake: Callable[[], None],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._writer = writer
        self._events = events
        self._queue = queue
        self._waiting_pods = waiting_pods
        self._recorder = recorder
        self._evictions = evictions
        self._wake = wake
        self._timer = timer
        self._failed: set[str] = set()
        self._started: dict[str, tuple[float, str]] = {}
        """Per preemptor's uid: when its evictions were sent, and whether it is a pod or a podgroup."""

    def post_filter(
        self, framework: Framework, state: CycleState, pod: PodInfo, result: ScheduleResult, nodes: Sequence[NodeInfo]
    ) -> PostFilterOutcome:
        """kube-scheduler's PostFilter step for a pod no node fits (``result``): preempt if a plugin finds
        room, and say so in the message. kube-scheduler clears a nomination when no PostFilter runs or
        preemption finds no node; a cluster without nodes is no FitError (nothing to preempt)."""
        message, nominated = result.message, "" if not framework.plugins.post_filter else None
        if framework.plugins.post_filter and nodes:
            # The nomination in memory is newer than the pod's status.nominatedNodeName (its patch may
            # still be in flight); kube-scheduler re-reads the pod from its informer for the same reason.
            held = self._queue.nominator.node_of(pod.key)
            preemptor = replace(pod, nominated_node_name=held) if held else pod
            started = self._timer()
            post = framework.run_post_filter(state, preemptor, result.node_statuses, nodes)
            self._recorder.preemption_evaluated("pod", status_label(post.status), self._timer() - started)
            self._recorder.preemption_attempted()
            if post.status.ok and post.nominated_node is not None:
                self.preempt(pod, post, framework.scheduler_name)
                nominated = post.nominated_node
            elif post.clear_nomination:
                nominated = ""
            if post.status.message:  # kube-scheduler's FitError: "0/N nodes ... preemption: ..."
                message = f"{message} {post.status.message}"
        if nominated == "":
            self._queue.nominator.forget(pod.key)
        return PostFilterOutcome(message, nominated)

    def preempt(self, pod: PodInfo, result: PostFilterResult, profile: str) -> None:
        """``result`` nominated a node: hold it for ``pod`` and evict the victims."""
        node = result.nominated_node
        assert node is not None
        self._clear_lower_nominations(pod, node)
        self._queue.nominate(pod, node)
        self._recorder.preemption_victims_chosen(len(result.victims))
        self._recorder.preemption_disruptions("pod", result.budget_violations, 0)
        self._evict(pod, node, result.victims, profile, result.status.plugin or DEFAULT_PREEMPTION, "pod")

    def group_post_filter(
        self,
        framework: Framework,
        group: PodGroup,
        pods: Sequence[PodInfo],
        cache: Cache,
        simulate: Callable[[], GroupSimulation],
    ) -> GroupPreemption | None:
        """Workload-aware preemption for a group that did not fit (DefaultPreemption's PodGroupPostFilter);
        None when the profile has no DefaultPreemption. On success each placed member is nominated to
        its node and the victims are evicted, attributed to the first member (whose PreEnqueue holds it
        while the calls run)."""
        if not any(p.name == DEFAULT_PREEMPTION for p in framework.plugins.post_filter):
            return None
        groups = cache.pod_groups
        started = self._timer()
        outcome = preempt_for_group(
            framework, group, pods, cache, simulate=simulate, units=group_units(groups, cache.node_of_pod),
            budgets=cache.disruption_budgets,
            terminating=lambda p: p.terminating_by_preemption or self._evictions.evicting(p.key),
            nominated=lambda p: self._queue.nominator.node_of(p.key) or p.nominated_node_name,
        )  # fmt: skip
        self._recorder.preemption_evaluated("podgroup", status_label(outcome.status), self._timer() - started)
        evicting = outcome.status.ok and not outcome.ongoing and bool(outcome.nominations)
        self._recorder.workload_preemption_attempted(
            status_label(outcome.status), len(outcome.victims) if evicting else 0
        )
        if not evicting:
            return outcome
        self._recorder.preemption_disruptions("podgroup", outcome.budget_violations, outcome.group_disruptions)
        by_key = {pod.key: pod for pod in pods}
        members = [(by_key[key], node) for key, node in outcome.nominations.items() if key in by_key]
        for pod, node in members:
            self._clear_lower_nominations(pod, node)
            self._queue.nominate(pod, node)
        first, node = members[0]
        self._evict(first, node, outcome.victims, framework.scheduler_name, DEFAULT_PREEMPTION, "podgroup")
        return outcome

    def _evict(
        self, pod: PodInfo, node: str, victims: Sequence[PodInfo], profile: str, plugin: str, preemptor: str
    ) -> None:
        """``preemptor``: pod or podgroup (the metrics' label)."""
        logger.info("pod %s nominated to %s; preempting %s", pod.key, node, ", ".join(v.key for v in victims) or "none")
        to_delete = []
        for victim in victims:
            note = f"Preempted by pod {pod.uid} on node {node}"
            if victim.key in self._waiting_pods:
                self._waiting_pods.reject(victim.key, plugin, "preempted")
                self._events.emit(
                    victim.raw, "Normal", "Preempted", "Preempting", note + " (in usher memory).", profile
                )
            elif victim.deleting:
                logger.info("victim %s is already being deleted", victim.key)
            else:
                to_delete.append((victim, note))
        # Until every eviction call has returned, DefaultPreemption's PreEnqueue keeps the pod out of
        # activeQ (kube-scheduler's asynchronous preemption), so it cannot preempt twice.
        self._evictions.started(pod.uid, [victim.key for victim, _ in to_delete])
        if to_delete:
            self._started.setdefault(pod.uid, (self._timer(), preemptor))
        for victim, note in to_delete:
            self._writer.add(
                disruption_condition_call(victim, profile, self._after_condition(pod, victim, note, profile, plugin))
            )

    def _clear_lower_nominations(self, pod: PodInfo, node: str) -> None:
        """Pods of lower priority nominated to ``node`` may no longer fit there: their nomination goes (in
        memory and in ``status.nominatedNodeName``) and they are retried, to find room elsewhere sooner
        (kube-scheduler's clearNominatedNodeName)."""
        lower = [p for p in self._queue.nominator.nominated_pods(node) if p.priority < pod.priority]
        for other in lower:
            self._queue.nominator.forget(other.key)
            self._writer.add(pod_status_call(other.raw, _clear_nomination), current=other.raw)
        if lower:
            self._queue.activate([other.key for other in lower])

    def _after_condition(
        self, pod: PodInfo, victim: PodInfo, note: str, profile: str, plugin: str
    ) -> Callable[[ApiResult], None]:
        def done(result: ApiResult) -> None:
            if result.status == 404:
                logger.info("victim %s is already gone", victim.key)
                self._finished(pod, victim, plugin, ok=True)
                return
            if not result.ok:
                logger.warning("could not mark victim %s as a disruption target: %s", victim.key, result.message)
                self._finished(pod, victim, plugin, ok=False)
                return
            self._writer.add(victim_delete_call(victim, self._after_delete(pod, victim, note, profile, plugin)))

        return done

    def _after_delete(
        self, pod: PodInfo, victim: PodInfo, note: str, profile: str, plugin: str
    ) -> Callable[[ApiResult], None]:
        def done(result: ApiResult) -> None:
            if result.ok:
                self._events.emit(victim.raw, "Normal", "Preempted", "Preempting", note, profile)
            elif result.status in (404, 409):  # gone, or replaced by a pod of the same name: not ours to delete
                logger.info("victim %s is already gone", victim.key)
            else:
                logger.warning("could not delete victim %s: %s", victim.key, result.message)
            self._finished(pod, victim, plugin, ok=result.ok or result.status in (404, 409))

        return done

    def _finished(self, pod: PodInfo, victim: PodInfo, plugin: str, *, ok: bool) -> None:
        """One victim is dealt with. After the last, the pod is retried (after its backoff) if an eviction
        failed or an event came while it was held (it would otherwise wait for an event that already passed)."""
        if not ok:
            self._evictions.gone(victim.key)
            self._failed.add(pod.uid)
        if not self._evictions.finished(pod.uid):
            return
        failed = pod.uid in self._failed
        self._failed.discard(pod.uid)
        started = self._started.pop(pod.uid, None)
        if started is not None:
            since, preemptor = started
            self._recorder.preemption_finished(preemptor, "error" if failed else "success", self._timer() - since)
        queued = self._queue.get(pod.key)
        if queued is not None and queued.pod.uid == pod.uid and (failed or queued.gating_plugin == plugin):
            # After its backoff. A failed eviction's is an error's, which PopFromBackoffQ does not cut short:
            # kube-scheduler activates the preemptor at once, so an eviction that keeps failing (403, a
            # webhook) is tried each round trip (about 100 in 0.1 s in the chart's RBAC e2e test, before).
            self._queue.retry([pod.key], after_error=failed)
            self._wake()


def _clear_nomination(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not ((current or {}).get("status") or {}).get("nominatedNodeName"):
        return None
    return {"status": {"nominatedNodeName": None}}
