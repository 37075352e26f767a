"""activeQ: pods ready to be tried, in QueueSort order. Pure data structure, no transitions."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from usher.core.queue.queuedpod import QueuedPod, Where

SortKey = Callable[[QueuedPod], tuple[Any, ...]]


class ActiveQueue:
    """activeQ's heap in QueueSort order, ties broken by entry order; stale entries are skipped lazily."""

    def __init__(self, sort_key: SortKey) -> None:
        self._sort_key = sort_key
        self._heap: list[tuple[tuple[Any, ...], int, QueuedPod]] = []
        self._size = 0

    def push(self, queued: QueuedPod, entry: int) -> None:
        queued.where = Where.ACTIVE
        queued.entry = entry
        heapq.heappush(self._heap, (self._sort_key(queued), entry, queued))
        self._size += 1

    def pop(self) -> QueuedPod | None:
        while self._heap:
            _, entry, queued = heapq.heappop(self._heap)
            if queued.where is Where.ACTIVE and queued.entry == entry:
                self._size -= 1
                queued.where = Where.NOWHERE
                return queued
        return None

    def discard(self, queued: QueuedPod) -> None:
        """Forget a pod that left activeQ (its heap entry becomes stale)."""
        if queued.where is Where.ACTIVE:
            self._size -= 1
            queued.entry = 0
            queued.where = Where.NOWHERE

    def __len__(self) -> int:
        return self._size
