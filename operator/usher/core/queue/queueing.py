"""Theory of operation: the scheduling queue, the one owner of every pod transition.

Pure, sans-I/O: callers feed it events and ask it for the next pod; it never
waits or sleeps. ``next_wakeup()`` tells the caller when timed work
(backoff expiry, the unschedulable flush) is due, and ``flush()`` does it.

Every unscheduled pod of our profiles is in exactly one place:

    activeQ        ready to be tried, highest priority first, then oldest
    backoffQ       failed recently; waits 1 s, 2 s, 4 s ... up to 10 s
    unschedulable  failed and waits for a cluster event that may help it
                   (or for the flush after 5 minutes)
    in flight      popped and being scheduled right now

    add ----------> activeQ --pop--> in flight --done--> (gone: bound)
                       ^                 |
                       |                 +-- failed --> unschedulable
                       |                 |                  |
                       +--- backoffQ <---+ (moved while in  | move_all / flush
                       |    (expiry)       flight, or error)|
                       +------------------------------------+

A pod that fails while a cluster event arrived during its attempt goes to
backoffQ rather than the pool, so the event that might have helped it is not
lost (kube-scheduler's moveRequestCycle).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from enum import Enum

from usher.core.clock import Clock
from usher.core.types import PodInfo, PodKey

DEFAULT_INITIAL_BACKOFF = 1.0
DEFAULT_MAX_BACKOFF = 10.0
DEFAULT_MAX_UNSCHEDULABLE_DURATION = 300.0
UNSCHEDULABLE_FLUSH_INTERVAL = 30.0


class Where(Enum):
    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in_flight"


@dataclass(slots=True)
class QueuedPod:
    """A pod's scheduling history while it waits to be placed."""

    pod: PodInfo
    timestamp: float
    initial_attempt_timestamp: float | None = None
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    where: Where = Where.ACTIVE
    popped_at_cycle: int = 0
    _entry: int = field(default=0, repr=False)

    @property
    def key(self) -> PodKey:
        return self.pod.key


class SchedulingQueue:
    def __init__(
        self,
        clock: Clock,
        *,
        initial_backoff: float = DEFAULT_INITIAL_BACKOFF,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        max_unschedulable_duration: float = DEFAULT_MAX_UNSCHEDULABLE_DURATION,
    ) -> None:
        self._clock = clock
        self._initial_backoff = initial_backoff
        self._max_backoff = max_backoff
        self._max_unschedulable = max_unschedulable_duration
        self._pods: dict[PodKey, QueuedPod] = {}
        self._active: list[tuple[int, float, int, PodKey]] = []
        self._backoff: list[tuple[float, int, PodKey]] = []
        self._counter = itertools.count(1)
        self._cycle = 0
        self._move_cycle = -1
        self._last_unschedulable_flush = clock.now()
        self.incoming: list[tuple[str, str]] = []
        """(queue, event) pairs of every move since the last drain: for metrics."""

    # -- events from the watch ----------------------------------------------

    def add(self, pod: PodInfo) -> None:
        """A new unscheduled pod (or one seen again after a restart)."""
        if pod.key in self._pods:
            self.update(pod)
            return
        queued = QueuedPod(pod=pod, timestamp=self._clock.now())
        self._pods[pod.key] = queued
        self._to_active(queued, "PodAdd")

    def update(self, pod: PodInfo) -> None:
        queued = self._pods.get(pod.key)
        if queued is None:
            self.add(pod)
            return
        if queued.pod.uid != pod.uid:
            # Same name, new object: the old pod was deleted and recreated.
            self.delete(pod.key)
            self.add(pod)
            return
        queued.pod = pod
        if queued.where is Where.UNSCHEDULABLE:
            self._to_backoff_or_active(queued, "UnscheduledPodUpdate")

    def delete(self, key: PodKey) -> None:
        """The pod is gone, or no longer ours to place (bound, or another scheduler's)."""
        # Heap entries left behind are skipped on pop: their key is gone or re-added anew.
        self._pods.pop(key, None)

    def move_all(self, event: str) -> int:
        """A cluster event that may make unschedulable pods schedulable. Returns how many moved."""
        self._move_cycle = self._cycle
        moved = 0
        for queued in list(self._pods.values()):
            if queued.where is Where.UNSCHEDULABLE:
                self._to_backoff_or_active(queued, event)
                moved += 1
        return moved

    # -- the scheduling loop -------------------------------------------------

    def pop(self) -> QueuedPod | None:
        """The next pod to schedule, or None when activeQ is empty."""
        while self._active:
            _, _, entry, key = heapq.heappop(self._active)
            queued = self._pods.get(key)
            if queued is None or queued.where is not Where.ACTIVE or queued._entry != entry:
                continue
            self._cycle += 1
            queued.where = Where.IN_FLIGHT
            queued.attempts += 1
            queued.popped_at_cycle = self._cycle
            if queued.initial_attempt_timestamp is None:
                queued.initial_attempt_timestamp = self._clock.now()
            return queued
        return None

    def done(self, key: PodKey) -> None:
        """The pod was placed: it leaves the queue for good."""
        queued = self._pods.get(key)
        if queued is not None and queued.where is Where.IN_FLIGHT:
            del self._pods[key]

    def add_unschedulable(self, queued: QueuedPod, *, error: bool = False) -> None:
        """An attempt failed: park the pod (or back it off) until something may help it."""
        if self._pods.get(queued.key) is not queued or queued.where is not Where.IN_FLIGHT:
            return  # deleted or replaced while in flight
        if error:
            queued.consecutive_errors += 1
        else:
            queued.unschedulable_count += 1
            queued.consecutive_errors = 0
        queued.timestamp = self._clock.now()
        if error or self._move_cycle >= queued.popped_at_cycle:
            self._to_backoff_or_active(queued, "ScheduleAttemptFailure")
        else:
            queued.where = Where.UNSCHEDULABLE
            self.incoming.append((Where.UNSCHEDULABLE.value, "ScheduleAttemptFailure"))

    # -- timed work ----------------------------------------------------------

    def flush(self) -> None:
        """Move pods whose backoff completed, and pods unschedulable for too long."""
        now = self._clock.now()
        while self._backoff and self._backoff[0][0] <= now:
            _, entry, key = heapq.heappop(self._backoff)
            queued = self._pods.get(key)
            if queued is not None and queued.where is Where.BACKOFF and queued._entry == entry:
                self._to_active(queued, "BackoffComplete")
        if now - self._last_unschedulable_flush >= UNSCHEDULABLE_FLUSH_INTERVAL:
            self._last_unschedulable_flush = now
            for queued in list(self._pods.values()):
                if queued.where is Where.UNSCHEDULABLE and now - queued.timestamp > self._max_unschedulable:
                    self._to_backoff_or_active(queued, "UnschedulableTimeout")

    def next_wakeup(self) -> float | None:
        """When ``flush()`` next has work to do, on the clock's scale."""
        candidates = [self._last_unschedulable_flush + UNSCHEDULABLE_FLUSH_INTERVAL]
        while self._backoff:
            expiry, entry, key = self._backoff[0]
            queued = self._pods.get(key)
            if queued is not None and queued.where is Where.BACKOFF and queued._entry == entry:
                candidates.append(expiry)
                break
            heapq.heappop(self._backoff)
        return min(candidates)

    # -- reading -------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        counts = {w.value: 0 for w in (Where.ACTIVE, Where.BACKOFF, Where.UNSCHEDULABLE)}
        for queued in self._pods.values():
            if queued.where is not Where.IN_FLIGHT:
                counts[queued.where.value] += 1
        return counts

    def get(self, key: PodKey) -> QueuedPod | None:
        return self._pods.get(key)

    def __len__(self) -> int:
        return len(self._pods)

    def backoff_duration(self, queued: QueuedPod) -> float:
        count = queued.consecutive_errors or queued.unschedulable_count
        if count == 0 or self._max_backoff == 0:
            return 0.0
        return float(min(self._initial_backoff * 2 ** (count - 1), self._max_backoff))

    # -- transitions (the only places ``where`` changes) ---------------------

    def _to_active(self, queued: QueuedPod, event: str) -> None:
        queued.where = Where.ACTIVE
        queued._entry = next(self._counter)
        heapq.heappush(self._active, (-queued.pod.priority, queued.timestamp, queued._entry, queued.key))
        self.incoming.append((Where.ACTIVE.value, event))

    def _to_backoff_or_active(self, queued: QueuedPod, event: str) -> None:
        expiry = queued.timestamp + self.backoff_duration(queued)
        if expiry <= self._clock.now():
            self._to_active(queued, event)
            return
        queued.where = Where.BACKOFF
        queued._entry = next(self._counter)
        heapq.heappush(self._backoff, (expiry, queued._entry, queued.key))
        self.incoming.append((Where.BACKOFF.value, event))
