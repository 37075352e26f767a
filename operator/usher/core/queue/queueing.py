"""Theory of operation: the scheduling queue, the one owner of every pod transition.

Pure and sans-I/O: callers feed it watch events and ask it for the next pod;
it never waits. ``next_wakeup()`` says when timed work is due and
``flush()`` does it. Nothing else changes ``QueuedPod.where``.

Every unscheduled pod of our profiles is in exactly one place:

    activeQ        ready to be tried, in QueueSort order (priority, then queue time)
    backoffQ       failed recently, waits 1 s, 2 s, 4 s ... up to 10 s (per-pod)
    unschedulable  rejected by plugins, waits for a cluster event that may help;
                   or *gated*: a PreEnqueue plugin (scheduling gates, a missing
                   ResourceClaim ...) holds it back and it was never tried
    in flight      popped, being scheduled right now

          add / update                pop                 done (bound)
    ---> [PreEnqueue] --> activeQ ----------> in flight -------------> gone
              |  rejected    ^  ^                  | failed
              v              |  | backoff over     v
           gated (pool)      |  +--- backoffQ <-- hints over the events that
              ^   event that |        ^            arrived in flight: Queue?
              |   matches    |        | Queue          | Skip
              +--- its gate -+--------+---- unschedulable pool <-+
                                     (events + QueueingHints; flush after 5 min)

Every move into activeQ or backoffQ runs PreEnqueue first (backoffQ as in
kube-scheduler with SchedulerPopFromBackoffQ), and so does every way out of
backoffQ (the expiry flush, an early pop): its answer may change while the
pod waits. A pod can only be popped if every PreEnqueue plugin accepts it
at that moment; one rejected on any of these paths is parked as gated.

Events: a cluster event is offered to the pods in the pool. Only the
QueueingHints of the plugins that rejected a pod are asked about it, and
only for registrations that match the event; an erroring hint counts as
Queue. Queue from a plugin that answered Pending requeues at once (no
backoff). A PreQueueingHint, asked once per event, may narrow the pods whose
hints are asked at all (KEP-6132); the 5-minute flush is the safety net.

In flight: while any pod is being scheduled, every event of interest is
recorded; when a pod fails, the events recorded since it was popped are
replayed through its hints, so an event that arrived mid-attempt is not lost.

Pod groups (with ``QueueOptions.pod_groups``): kube-scheduler queues a pod
group as one entity; here each member keeps its own place, and the group
moves as one when it is popped: ``pop_group`` takes every member waiting in
activeQ, backoffQ or the pool (not gated ones) into flight with the pod just
popped, so the group is placed in one cycle. A member moved by an event,
its backoff over or newly added is enough to bring the whole group back.

With the SchedulerQueueingHints gate off, hints are not asked (any matching
registration of a rejecting plugin counts as Queue) and a failed pod goes to
backoffQ if any move happened while it was in flight (moveRequestCycle).
"""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from usher.core.clock import Clock
from usher.core.events import (
    ASSIGNED_POD_DELETE,
    BACKOFF_COMPLETE,
    FORCE_ACTIVATE,
    POD_ADD,
    POP_FROM_BACKOFF_Q,
    SCHEDULE_ATTEMPT_FAILURE,
    UNSCHEDULABLE_TIMEOUT,
    ActionType,
    ClusterEvent,
    Resource,
)
from usher.core.hints import ClusterEventWithHint, PreQueueingHintResult
from usher.core.queue.activeq import ActiveQueue, SortKey
from usher.core.queue.backoffq import BackoffQueue
from usher.core.queue.inflight import InFlight
from usher.core.queue.nominator import Nominator
from usher.core.queue.queuedpod import QueuedPod, Where
from usher.core.queue.unschedulable import UnschedulablePool
from usher.core.types import Code, PodGroupKey, PodInfo, PodKey, QueueingHint, Status

logger = logging.getLogger(__name__)

DEFAULT_INITIAL_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 10.0
DEFAULT_MAX_IN_UNSCHEDULABLE = 300.0
UNSCHEDULABLE_FLUSH_INTERVAL = 30.0


class Strategy(enum.IntEnum):
    """What an event means for one pod, in increasing urgency."""

    SKIP = 0
    AFTER_BACKOFF = 1
    IMMEDIATELY = 2


class QueueProfile(Protocol):
    """What the queue needs from a profile's framework."""

    def run_pre_enqueue(self, pod: PodInfo) -> Status: ...

    @property
    def queueing_hints(self) -> Mapping[str, Sequence[ClusterEventWithHint]]: ...


class QueueRecorder(Protocol):
    """Where the queue reports what it did (the metrics adapter implements it)."""

    def incoming(self, queue: str, event: str) -> None: ...

    def hint_evaluated(self, plugin: str, event: str, hint: str, seconds: float) -> None: ...

    def pre_hint_evaluated(self, plugin: str, result: str) -> None: ...


class PreEnqueueReporter(Protocol):
    """Where PreEnqueue rejections are reported on the pod (KEP-5501), already de-duplicated."""

    def rejected(self, queued: QueuedPod, message: str) -> None:
        """The pod is held back with a new message: report it (delayed)."""
        ...

    def cleared(self, queued: QueuedPod) -> None:
        """The pod passed PreEnqueue after a reported rejection: clear the report (delayed)."""
        ...


NOT_READY_FOR_SCHEDULING = "NotReadyForScheduling"
SCHEDULING_GATED = "SchedulingGated"


def reported_message(pod: Mapping[str, Any]) -> str:
    """The PreEnqueue-style message the pod already carries (ours, or the API server's gate condition)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") in (NOT_READY_FOR_SCHEDULING, SCHEDULING_GATED)
        ):
            return str(condition.get("message") or "")
    return ""


class _Silent:
    def incoming(self, queue: str, event: str) -> None:
        pass

    def hint_evaluated(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        pass

    def pre_hint_evaluated(self, plugin: str, result: str) -> None:
        pass


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """The queue's tunables, with kube-scheduler's defaults (seconds) and feature gates."""

    initial_backoff: float = DEFAULT_INITIAL_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    max_in_unschedulable: float = DEFAULT_MAX_IN_UNSCHEDULABLE
    queueing_hints: bool = True
    """Feature gate SchedulerQueueingHints."""
    pre_queueing_hints: bool = True
    """Feature gate SchedulerPreQueueingHints."""
    pop_from_backoff_q: bool = True
    pod_groups: bool = False
    """Pods of a pod group are popped together (``pop_group``): gang support is on."""


@dataclass(slots=True)
class _Interest:
    """For one event: the registrations of each plugin that match it, across profiles."""

    by_plugin: dict[str, list[ClusterEventWithHint]] = field(default_factory=dict)


_Plan = tuple[tuple[str, ClusterEventWithHint, bool], ...]
"""For one event and pods rejected alike: (plugin, its registration matching the event, the pod Pending on it)."""
_ANY = ClusterEventWithHint(ClusterEvent(Resource.WILDCARD, ActionType.ALL))
_NO_REJECTORS: _Plan = (("(no rejectors)", _ANY, False),)
"""Sentinel plan: nothing rejected the pod (an error): retried after its backoff, whatever the event."""
_NO_PROFILE: _Plan = (("(no profile)", _ANY, False),)
"""Sentinel plan: no profile of that scheduler name: retried after its backoff."""


@dataclass(slots=True)
class _EventMemo:
    """What one ``move_all`` learns once for all its candidates."""

    plans: dict[tuple[str, str, tuple[str, ...], tuple[str, ...]], _Plan] = field(default_factory=dict)
    """(scheduler name, gating plugin, holders, pending holders) -> the pods' plan."""
    keys: dict[int, Callable[[PodInfo], Hashable]] = field(default_factory=dict)
    """id of a registration -> its ``alike`` key function for the event."""
    answers: dict[tuple[int, Hashable], QueueingHint] = field(default_factory=dict)
    """(id of a registration, its ``alike`` key) -> the hint's answer."""


class SchedulingQueue:
    """kube-scheduler's PriorityQueue: the one owner of every pod transition (theory of operation above). Pure."""

    def __init__(
        self,
        clock: Clock,
        *,
        profiles: Mapping[str, QueueProfile],
        sort_key: SortKey,
        options: QueueOptions | None = None,
        recorder: QueueRecorder | None = None,
        reporter: PreEnqueueReporter | None = None,
        timer: Callable[[], float] = time.perf_counter,
        nominator: Nominator | None = None,
    ) -> None:
        self._clock = clock
        self.nominator = nominator or Nominator()
        """Pods preemption nominated to a node (kube-scheduler's queue embeds its nominator too)."""
        self.nominator.on_release = self._nomination_released
        self._profiles = profiles
        self._options = options or QueueOptions()
        self._recorder: QueueRecorder = recorder or _Silent()
        self._reporter = reporter
        self._timer = timer
        self._pods: dict[PodKey, QueuedPod] = {}
        self._groups: dict[PodGroupKey, set[PodKey]] = {}
        """Pod group -> its members held here (only with ``QueueOptions.pod_groups``)."""
        self._active = ActiveQueue(sort_key)
        self._backoff = BackoffQueue()
        self._pool = UnschedulablePool()
        self._in_flight = InFlight()
        self._entries = 0
        self._cycle = 0
        self._move_request_cycle = -1
        self._last_pool_flush = clock.now()
        self._interest_cache: dict[ClusterEvent, _Interest] = {}
        self._hint_failures_logged: set[tuple[str, str, str]] = set()
        """(kind, plugin, event) already logged: a buggy hint raises for every pod, every event."""

    # ------------------------------------------------------------------ pods

    def add(self, pod: PodInfo) -> None:
        """A new unscheduled pod of one of our profiles."""
        if pod.key in self._pods:
            self.update(None, pod)
            return
        queued = QueuedPod(pod=pod, timestamp=self._clock.now())
        self._pods[pod.key] = queued
        self._index_group(pod)
        self.nominator.update(pod)
        self._to_active_or_gated(queued, POD_ADD.label)

    def update(self, old: PodInfo | None, new: PodInfo, events: Sequence[ClusterEvent] = ()) -> None:
        """A newer version of an unscheduled pod; ``events`` are its split update events."""
        queued = self._pods.get(new.key)
        if queued is None:
            self.add(new)
            return
        if queued.pod.uid != new.uid:
            self.delete(new.key)
            self.add(new)
            return
        previous = queued.pod
        queued.pod = new
        if previous.group_key != new.group_key:  # immutable in the API; kept right all the same
            self._unindex_group(previous)
            self._index_group(new)
        self.nominator.update(new, previous)
        if queued.where is Where.IN_FLIGHT:
            for event in events:
                if self._event_of_interest(event):
                    self._in_flight.record(event, previous.raw, new.raw)
            return
        if queued.where is Where.ACTIVE:
            if previous.priority != new.priority:
                self._active.discard(queued)
                self._push_active(queued)
            return
        if queued.where is Where.BACKOFF:
            return
        # In the pool (rejected or gated): does this change of the pod itself help it?
        strategy = Strategy.SKIP
        label = events[0].label if events else "UnscheduledPodUpdate"
        for event in events:
            decided = self._strategy(queued, event, previous.raw, new.raw, None)
            if decided > strategy:
                strategy, label = decided, event.label
        if strategy is not Strategy.SKIP:
            self._requeue(queued, strategy, label)

    def delete(self, key: PodKey, *, bound_to: str | None = None) -> QueuedPod | None:
        """The pod is gone, or no longer ours to place (bound to ``bound_to``, or another scheduler's)."""
        self.nominator.forget(key, kept_on=bound_to)
        queued = self._pods.pop(key, None)
        if queued is None:
            return None
        self._unindex_group(queued.pod)
        if queued.where is Where.IN_FLIGHT:
            self._in_flight.done(key)  # its binding cycle's outcome will find it gone
        self._leave(queued)
        return queued

    def activate(self, keys: Iterable[PodKey]) -> None:
        """Force pods out of the pool or backoffQ into activeQ (kube-scheduler's Activate)."""
        for key in keys:
            queued = self._pods.get(key)
            if queued is not None and queued.where in (Where.UNSCHEDULABLE, Where.BACKOFF):
                self._to_active_or_gated(queued, FORCE_ACTIVATE.label)

    def retry(self, keys: Iterable[PodKey], *, after_error: bool = False) -> None:
        """Move pods out of the pool to be retried after their backoff (activeQ at once if it is over).

        ``after_error``: the backoff is an error's, which PopFromBackoffQ does not cut short."""
        for key in keys:
            queued = self._pods.get(key)
            if queued is not None and queued.where is Where.UNSCHEDULABLE:
                self._requeue(queued, Strategy.AFTER_BACKOFF, FORCE_ACTIVATE.label, error=after_error)

    # ------------------------------------------------------------------ scheduling loop

    def pop(self) -> QueuedPod | None:
        """The next pod to schedule; None when nothing is ready."""
        queued = self._active.pop()
        while queued is None and self._options.pop_from_backoff_q:
            head = self._backoff.pop_normal_head()
            if head is None:
                break
            # PreEnqueue's answer may have changed while the pod waited (a claim deleted ...):
            # a pod it now rejects is parked as gated and the next head is tried.
            if self._admitted(head, POP_FROM_BACKOFF_Q.label):
                queued = head
                self._recorder.incoming(Where.ACTIVE.value, POP_FROM_BACKOFF_Q.label)
        if queued is None:
            return None
        self._cycle += 1
        self._start_attempt(queued)
        return queued

    def pop_group(self, queued: QueuedPod) -> list[QueuedPod]:
        """``queued`` (just popped) and the other members of its pod group, popped with it.

        Members waiting in activeQ, backoffQ or the pool come along whatever their
        backoff, as kube-scheduler's queued pod group does (one entity, one backoff),
        once PreEnqueue has passed them again; gated members stay held by their
        PreEnqueue plugin, and members in flight (binding) stay there. ``queued``
        comes first, then the others by key.
        """
        key = queued.pod.group_key
        if not self._options.pod_groups or key is None or queued.where is not Where.IN_FLIGHT:
            return [queued]
        members = [queued]
        for member_key in sorted(self._groups.get(key, ())):
            member = self._pods.get(member_key)
            if member is None or member is queued:
                continue
            waiting = member.where in (Where.ACTIVE, Where.BACKOFF)
            # PreEnqueue's answer may have changed while it waited, as for a pop from backoffQ.
            if (waiting or (member.where is Where.UNSCHEDULABLE and not member.gated)) and self._admitted(
                member, FORCE_ACTIVATE.label
            ):
                self._leave(member)
                self._start_attempt(member)
                members.append(member)
        return members

    def _start_attempt(self, queued: QueuedPod) -> None:
        queued.where = Where.IN_FLIGHT
        queued.attempts += 1
        if queued.pending_plugins:
            queued.rejected_by(queued.unschedulable_plugins, ())
        if queued.initial_attempt_timestamp is None:
            queued.initial_attempt_timestamp = self._clock.now()
        if self._options.queueing_hints:
            self._in_flight.start(queued.key)
        queued.popped_cycle = self._cycle

    def done(self, queued: QueuedPod, node: str | None = None) -> None:
        """The pod's attempt is over and it was placed (on ``node``; None: it is not ours to place any
        more): it leaves the queue for good.

        A pod deleted while in flight has left already; a later pod of the same name
        that took its key is not touched.
        """
        if self._pods.get(queued.key) is not queued:
            return
        self._in_flight.done(queued.key)
        self.nominator.forget(queued.key, kept_on=node)
        if queued.where is Where.IN_FLIGHT:
            del self._pods[queued.key]
            self._unindex_group(queued.pod)

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Preemption made room for ``pod`` on ``node``: Filter holds it for the pod from now on."""
        if pod.key in self._pods:
            self.nominator.nominate(pod, node)

    def add_unschedulable(
        self,
        queued: QueuedPod,
        *,
        unschedulable_plugins: Iterable[str] = (),
        pending_plugins: Iterable[str] = (),
    ) -> None:
        """An attempt failed. No rejecting plugin means an error: back off and retry regardless."""
        if self._pods.get(queued.key) is not queued or queued.where is not Where.IN_FLIGHT:
            return  # deleted or replaced while in flight (delete ended its in-flight record)
        replay = self._in_flight.events_since_popped(queued.key) if self._options.queueing_hints else []
        popped_cycle = queued.popped_cycle
        self._in_flight.done(queued.key)
        queued.rejected_by(unschedulable_plugins, pending_plugins)
        if queued.rejectors:
            queued.unschedulable_count += 1
            queued.consecutive_errors = 0
        else:
            queued.consecutive_errors += 1
        queued.timestamp = self._clock.now()
        queued.flushed = False
        label = SCHEDULE_ATTEMPT_FAILURE.label
        if not queued.rejectors:
            self._requeue(queued, Strategy.AFTER_BACKOFF, label)
            return
        if not self._options.queueing_hints:
            if self._move_request_cycle >= popped_cycle:
                self._requeue(queued, Strategy.AFTER_BACKOFF, label)
            else:
                self._to_pool(queued, label)
            return
        strategy = Strategy.SKIP
        for recorded in replay:
            strategy = max(strategy, self._strategy(queued, recorded.event, recorded.old, recorded.new, None))
            if strategy is Strategy.IMMEDIATELY:
                break
        if strategy is Strategy.SKIP:
            self._to_pool(queued, label)
        else:
            self._requeue(queued, strategy, label)

    # ------------------------------------------------------------------ cluster events

    def move_all(
        self,
        event: ClusterEvent,
        old: Any = None,
        new: Any = None,
        *,
        pre_check: Callable[[QueuedPod], bool] | None = None,
    ) -> int:
        """A cluster event: requeue the pods it may help. Returns how many moved."""
        interest = self._interest(event)
        if not interest.by_plugin and not event.is_wildcard:
            return 0  # no plugin of any profile cares: not even worth recording
        self._move_request_cycle = self._cycle
        if self._options.queueing_hints:
            self._in_flight.record(event, old, new)
        narrowed = self._pre_queueing_hints(interest, event, old, new) if not event.is_wildcard else None
        if narrowed is not None and narrowed.complete:
            candidates = [self._pods[k] for k in narrowed.union if k in self._pods]
            candidates = [q for q in candidates if q.where is Where.UNSCHEDULABLE]
        elif event.is_wildcard:
            candidates = list(self._pool)
        else:
            # Only pods held by a plugin that registered for this event can be helped by it.
            candidates = self._pool.held_by(interest.by_plugin)
        moved = 0
        memo = _EventMemo()
        for queued in candidates:
            if pre_check is not None and not pre_check(queued):
                continue
            strategy = self._strategy(queued, event, old, new, narrowed, memo)
            if strategy is not Strategy.SKIP:
                self._requeue(queued, strategy, event.label)
                moved += 1
        return moved

    def _nomination_released(self, pod: PodInfo, node: str) -> None:
        """Room held on ``node`` for ``pod`` is free again: as kube-scheduler does when a nominated pod is
        deleted or its nominatedNodeName changes, an AssignedPodDelete of the pod as nominated there, for
        the pods of lower or equal priority (only those were kept out by the nomination)."""
        status = {**(pod.raw.get("status") or {}), "nominatedNodeName": node}
        old = {**pod.raw, "status": status}
        self.move_all(
            ASSIGNED_POD_DELETE,
            old,
            None,
            pre_check=lambda queued: queued.key != pod.key and queued.pod.priority <= pod.priority,
        )

    # ------------------------------------------------------------------ timed work

    def flush(self) -> None:
        """Move pods whose backoff is over; every 30 s, pods stuck in the pool for too long."""
        now = self._clock.now()
        for queued in self._backoff.pop_expired(now):
            self._to_active_or_gated(queued, BACKOFF_COMPLETE.label)
        if now - self._last_pool_flush >= UNSCHEDULABLE_FLUSH_INTERVAL:
            self._last_pool_flush = now
            for queued in list(self._pool):
                if now - queued.pool_since > self._options.max_in_unschedulable:
                    queued.flushed = True
                    queued.pool_since = now  # a pod still gated is re-checked only 5 min later
                    self._requeue(queued, Strategy.AFTER_BACKOFF, UNSCHEDULABLE_TIMEOUT.label)

    def next_wakeup(self) -> float:
        """When ``flush()`` next has work to do, on the clock's scale."""
        wakeup = self._last_pool_flush + UNSCHEDULABLE_FLUSH_INTERVAL
        expiry = self._backoff.next_expiry()
        return wakeup if expiry is None else min(wakeup, expiry)

    # ------------------------------------------------------------------ reading

    def get(self, key: PodKey) -> QueuedPod | None:
        return self._pods.get(key)

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def pending(self) -> dict[str, int]:
        """Pods per queue, as ``scheduler_pending_pods`` reports them."""
        gated = self._pool.gated_count
        return {
            "active": len(self._active),
            "backoff": len(self._backoff),
            "unschedulable": len(self._pool) - gated,
            "gated": gated,
        }

    def unschedulable_by_plugin(self) -> Counter[tuple[str, str]]:
        """(plugin, profile) -> pods in the pool that plugin rejected."""
        counts: Counter[tuple[str, str]] = Counter()
        for queued in self._pool:
            for plugin in queued.rejectors:
                counts[(plugin, queued.pod.scheduler_name)] += 1
        return counts

    def in_flight_event_counts(self) -> Counter[str]:
        return self._in_flight.event_counts()

    def pods(self) -> list[QueuedPod]:
        return list(self._pods.values())

    def backoff_duration(self, queued: QueuedPod) -> float:
        count = queued.consecutive_errors or queued.unschedulable_count
        if count <= 0 or self._options.max_backoff <= 0:
            return 0.0
        # A float power: 2 ** 1024 as an int no longer converts to a float, and a pod may fail that often.
        return float(min(self._options.initial_backoff * 2.0 ** min(count - 1, 1000), self._options.max_backoff))

    def is_backing_off(self, queued: QueuedPod) -> bool:
        return queued.timestamp + self.backoff_duration(queued) > self._clock.now()

    def queueing_events_for(self, queued: QueuedPod) -> list[str]:
        """Labels of the events that could requeue this pod (for `usher explain`)."""
        profile = self._profiles.get(queued.pod.scheduler_name)
        if profile is None:
            return []
        rejectors = {queued.gating_plugin} if queued.gated else queued.rejectors
        labels = {reg.event.label for plugin in rejectors for reg in profile.queueing_hints.get(plugin, ())}
        return sorted(labels)

    # ------------------------------------------------------------------ decisions (pure)

    def _event_of_interest(self, event: ClusterEvent) -> bool:
        return bool(self._interest(event).by_plugin)

    def _interest(self, event: ClusterEvent) -> _Interest:
        cached = self._interest_cache.get(event)
        if cached is not None:
            return cached
        interest = _Interest()
        for profile in self._profiles.values():
            for plugin, registrations in profile.queueing_hints.items():
                for reg in registrations:
                    if reg.event.matches(event):
                        interest.by_plugin.setdefault(plugin, []).append(reg)
        self._interest_cache[event] = interest
        return interest

    def _pre_queueing_hints(self, interest: _Interest, event: ClusterEvent, old: Any, new: Any) -> _Narrowed | None:
        """Ask each interested plugin's PreQueueingHint once. None: every pod must be checked."""
        if not self._options.pre_queueing_hints:
            return None
        narrowed = _Narrowed()
        for plugin, registrations in interest.by_plugin.items():
            pods: set[PodKey] = set()
            all_pods = False
            for reg in registrations:
                if reg.pre_hint is None:
                    all_pods = True
                    break
                try:
                    result = reg.pre_hint(old, new)
                except Exception as exc:
                    self._log_hint_failure("PreQueueingHint", plugin, event, exc, "checking every pod it rejected")
                    result = PreQueueingHintResult(all_pods=True)
                if result.all_pods:
                    all_pods = True
                    break
                pods.update(result.pods)
            if any(reg.pre_hint is not None for reg in registrations):
                self._recorder.pre_hint_evaluated(plugin, "all_pods" if all_pods else "narrowed")
            if all_pods:
                narrowed.complete = False
            else:
                narrowed.by_plugin[plugin] = frozenset(pods)
                narrowed.union.update(pods)
                logger.debug("PreQueueingHint narrowed pod set: plugin=%s pods=%d", plugin, len(pods))
        return narrowed

    def _strategy(
        self,
        queued: QueuedPod,
        event: ClusterEvent,
        old: Any,
        new: Any,
        narrowed: _Narrowed | None,
        memo: _EventMemo | None = None,
    ) -> Strategy:
        """Could ``event`` make ``queued`` schedulable, according to the plugins that rejected it?

        ``memo`` (one ``move_all``'s, in which the cluster does not change): what pods rejected alike need
        asked (their ``_Plan``), and the hints' answers by each registration's ``alike`` key. Without it,
        every hint is asked for this pod."""
        share = memo is not None
        if memo is None:
            memo = _EventMemo()
        signature = (queued.pod.scheduler_name, queued.gating_plugin, queued.holders, queued.pending_holders)
        plan = memo.plans.get(signature)
        if plan is None:
            plan = memo.plans[signature] = self._plan(queued, event)
        if plan is _NO_REJECTORS or event.is_wildcard:
            return Strategy.AFTER_BACKOFF
        if (
            event.resource is Resource.UNSCHEDULED_POD
            and event.action != ActionType.ADD
            and not _concerns(event, queued, new, old)
        ):
            # An update of another unscheduled pod never helps this one; its arrival may (it can complete a gang).
            return Strategy.SKIP
        if plan is _NO_PROFILE:
            return Strategy.AFTER_BACKOFF
        strategy = Strategy.SKIP
        for plugin, reg, pending in plan:
            if narrowed is not None and plugin in narrowed.by_plugin and queued.key not in narrowed.by_plugin[plugin]:
                continue
            if share and reg.alike is not None:
                key_of = memo.keys.get(id(reg))
                if key_of is None:
                    key_of = memo.keys[id(reg)] = reg.alike(old, new)
                alike = (id(reg), key_of(queued.pod))
                hint = memo.answers.get(alike)
                if hint is None:
                    hint = memo.answers[alike] = self._run_hint(plugin, reg, queued, event, old, new)
            else:
                hint = self._run_hint(plugin, reg, queued, event, old, new)
            if hint is QueueingHint.QUEUE_SKIP:
                continue
            if pending:
                return Strategy.IMMEDIATELY
            strategy = Strategy.AFTER_BACKOFF
        return strategy

    def _plan(self, queued: QueuedPod, event: ClusterEvent) -> _Plan:
        """The registrations matching ``event`` of the plugins holding ``queued`` (sorted by plugin), each with
        whether that plugin left the pod Pending (then a Queue answer retries it at once)."""
        rejectors = (queued.gating_plugin,) if queued.gating_plugin else queued.holders
        if not rejectors:
            return _NO_REJECTORS
        profile = self._profiles.get(queued.pod.scheduler_name)
        if profile is None:
            return _NO_PROFILE
        pending = set(queued.pending_holders)
        return tuple(
            (plugin, reg, plugin in pending)
            for plugin in rejectors
            for reg in profile.queueing_hints.get(plugin, ())
            if reg.event.matches(event)
        )

    def _run_hint(
        self, plugin: str, reg: ClusterEventWithHint, queued: QueuedPod, event: ClusterEvent, old: Any, new: Any
    ) -> QueueingHint:
        if not self._options.queueing_hints or reg.hint is None:
            return QueueingHint.QUEUE
        started = self._timer()
        try:
            hint = reg.hint(queued.pod, old, new)
        except Exception as exc:
            self._log_hint_failure("QueueingHint", plugin, event, exc, f"counting it as Queue for pod {queued.key}")
            hint, label = QueueingHint.QUEUE, "Error"
        else:
            label = "Queue" if hint is QueueingHint.QUEUE else "QueueSkip"
        self._recorder.hint_evaluated(plugin, event.label, label, self._timer() - started)
        return hint

    def _log_hint_failure(
        self, kind: str, plugin: str, event: ClusterEvent, error: Exception, consequence: str
    ) -> None:
        """Log a raising (Pre)QueueingHint with its traceback, once per (plugin, event): it is a plugin bug."""
        seen = (kind, plugin, event.label)
        if seen in self._hint_failures_logged:
            return
        self._hint_failures_logged.add(seen)
        logger.warning(
            "%s of plugin %s raised on event %s: %r; %s (logged once per plugin and event)",
            kind,
            plugin,
            event.label,
            error,
            consequence,
            exc_info=error,
        )

    # ------------------------------------------------------------------ transitions

    def _index_group(self, pod: PodInfo) -> None:
        key = pod.group_key
        if key is not None and self._options.pod_groups:
            self._groups.setdefault(key, set()).add(pod.key)

    def _unindex_group(self, pod: PodInfo) -> None:
        key = pod.group_key
        members = self._groups.get(key) if key is not None else None
        if members is not None and key is not None:
            members.discard(pod.key)
            if not members:
                del self._groups[key]

    def _next_entry(self) -> int:
        self._entries += 1
        return self._entries

    def _leave(self, queued: QueuedPod) -> None:
        """Take the pod out of whichever sub-queue holds it; it is then nowhere."""
        if queued.where is Where.ACTIVE:
            self._active.discard(queued)
        elif queued.where is Where.BACKOFF:
            self._backoff.discard(queued)
        elif queued.where is Where.UNSCHEDULABLE:
            self._pool.remove(queued)
        queued.where = Where.NOWHERE

    def _requeue(self, queued: QueuedPod, strategy: Strategy, label: str, *, error: bool = False) -> None:
        if strategy is Strategy.AFTER_BACKOFF and self.is_backing_off(queued):
            if not self._admitted(queued, label):
                return  # as kube-scheduler with SchedulerPopFromBackoffQ: gated, not backing off
            self._leave(queued)
            queued.backoff_expiry = queued.timestamp + self.backoff_duration(queued)
            queued.last_event = label
            self._backoff.push(queued, self._next_entry(), error=error or not queued.rejectors)
            self._recorder.incoming(Where.BACKOFF.value, label)
            return
        self._to_active_or_gated(queued, label)

    def _to_active_or_gated(self, queued: QueuedPod, label: str) -> None:
        """Every way into activeQ passes PreEnqueue; a rejection parks the pod as gated."""
        if not self._admitted(queued, label):
            return
        self._leave(queued)
        self._push_active(queued)
        self._recorder.incoming(Where.ACTIVE.value, label)

    def _admitted(self, queued: QueuedPod, label: str) -> bool:
        """Run PreEnqueue before a move into activeQ or backoffQ (or a pop from backoffQ).

        A rejection parks the pod in the pool as gated (where it already is, if the same
        plugin still holds it) and returns False; a pass clears its gate, leaves it where
        it is for the caller to move, and returns True.
        """
        profile = self._profiles.get(queued.pod.scheduler_name)
        status = profile.run_pre_enqueue(queued.pod) if profile is not None else Status()
        queued.last_event = label
        if status.code is not Code.SUCCESS:
            gate = status.plugin or "PreEnqueue"
            unchanged = queued.where is Where.UNSCHEDULABLE and queued.gating_plugin == gate
            queued.gating_message = status.message
            self._report_rejection(queued, status.message)
            if not unchanged:
                self._leave(queued)
                queued.gating_plugin = gate
                self._to_pool(queued, label)
            return False
        queued.gating_plugin = ""
        queued.gating_message = ""
        if self._reporter is not None and queued.last_rejection_message:
            queued.last_rejection_message = ""
            self._reporter.cleared(queued)
        return True

    def _report_rejection(self, queued: QueuedPod, message: str) -> None:
        """KEP-5501: report a new rejection message once; seeded from the pod so a restart repeats nothing."""
        if self._reporter is None:
            return
        if not queued.last_rejection_message:
            queued.last_rejection_message = reported_message(queued.pod.raw)
        if queued.last_rejection_message == message:
            return
        queued.last_rejection_message = message
        self._reporter.rejected(queued, message)

    def _push_active(self, queued: QueuedPod) -> None:
        self._active.push(queued, self._next_entry())

    def _to_pool(self, queued: QueuedPod, label: str) -> None:
        self._leave(queued)
        queued.pool_since = self._clock.now()
        queued.last_event = label
        self._pool.add(queued)
        self._recorder.incoming("gated" if queued.gated else Where.UNSCHEDULABLE.value, label)


@dataclass(slots=True)
class _Narrowed:
    """Per-plugin pod sets from PreQueueingHints; ``complete`` when every interested plugin narrowed."""

    by_plugin: dict[str, frozenset[PodKey]] = field(default_factory=dict)
    union: set[PodKey] = field(default_factory=set)
    complete: bool = True


def _concerns(event: ClusterEvent, queued: QueuedPod, new: Any, old: Any) -> bool:
    """Is this unscheduled-pod event about ``queued`` itself?"""
    obj = new if new is not None else old
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return True
    return bool(meta.get("uid") == queued.pod.uid)
