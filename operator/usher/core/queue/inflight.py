"""In-flight pods and the cluster events that arrived while they were being scheduled. Pure.

When a popped pod fails, the events recorded after it was popped are replayed
through its QueueingHints: one of them may already have made it schedulable,
and must not be lost just because it arrived mid-attempt.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from usher.core.events import ClusterEvent
from usher.core.types import PodKey


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """One cluster event seen while a pod was in flight, numbered on the same sequence as the pops."""

    seq: int
    event: ClusterEvent
    old: Any
    new: Any


class InFlight:
    """The pods being scheduled and the events since the oldest of them was popped (kube's inFlightEvents).

    Events are kept only while some pod in flight was popped before them.
    """

    def __init__(self) -> None:
        self._pods: dict[PodKey, int] = {}  # pod -> sequence number when popped
        self._events: deque[RecordedEvent] = deque()
        self._seq = 0

    def start(self, key: PodKey) -> None:
        self._seq += 1
        self._pods[key] = self._seq

    def __contains__(self, key: object) -> bool:
        return key in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    def record(self, event: ClusterEvent, old: Any, new: Any) -> bool:
        """Remember an event if any pod is in flight. Returns whether it was kept."""
        if not self._pods:
            return False
        self._seq += 1
        self._events.append(RecordedEvent(self._seq, event, old, new))
        return True

    def events_since_popped(self, key: PodKey) -> list[RecordedEvent]:
        start = self._pods.get(key)
        if start is None:
            return []
        return [e for e in self._events if e.seq > start]

    def done(self, key: PodKey) -> None:
        """The pod's attempt is over: drop events no in-flight pod still needs."""
        self._pods.pop(key, None)
        oldest = min(self._pods.values(), default=None)
        while self._events and (oldest is None or self._events[0].seq < oldest):
            self._events.popleft()

    def event_counts(self) -> Counter[str]:
        return Counter(e.event.label for e in self._events)
