"""backoffQ: pods that failed recently and wait out their backoff. Pure data structure.

Two heaps ordered by expiry: pods that failed because of an error (no plugin
rejected them) and pods that plugins rejected. Only the second may be popped
early when activeQ is empty (PopFromBackoffQ).
"""

from __future__ import annotations

import heapq

from usher.core.queue.queuedpod import QueuedPod, Where


class BackoffQueue:
    """backoffQ's two heaps, ordered by (backoff expiry, entry); pure storage, the queue decides the moves.

    Entries are removed lazily: a pod that left (moved or deleted) keeps a stale heap
    entry, recognised because its ``where``/``entry`` no longer match, and skipped.
    """

    def __init__(self) -> None:
        self._normal: list[tuple[float, int, QueuedPod]] = []
        self._errors: list[tuple[float, int, QueuedPod]] = []
        self._size = 0

    def push(self, queued: QueuedPod, entry: int, *, error: bool) -> None:
        queued.where = Where.BACKOFF
        queued.entry = entry
        heapq.heappush(self._errors if error else self._normal, (queued.backoff_expiry, entry, queued))
        self._size += 1

    def discard(self, queued: QueuedPod) -> None:
        if queued.where is Where.BACKOFF:
            self._size -= 1
            queued.entry = 0
            queued.where = Where.NOWHERE

    def pop_expired(self, now: float) -> list[QueuedPod]:
        done: list[QueuedPod] = []
        for heap in (self._normal, self._errors):
            while heap:
                expiry, entry, queued = heap[0]
                if not self._live(queued, entry):
                    heapq.heappop(heap)
                    continue
                if expiry > now:
                    break
                heapq.heappop(heap)
                self._size -= 1
                queued.where = Where.NOWHERE
                done.append(queued)
        return done

    def pop_normal_head(self) -> QueuedPod | None:
        """The rejected pod closest to the end of its backoff, taken early."""
        while self._normal:
            _, entry, queued = heapq.heappop(self._normal)
            if self._live(queued, entry):
                self._size -= 1
                queued.where = Where.NOWHERE
                return queued
        return None

    def next_expiry(self) -> float | None:
        best: float | None = None
        for heap in (self._normal, self._errors):
            while heap and not self._live(heap[0][2], heap[0][1]):
                heapq.heappop(heap)
            if heap and (best is None or heap[0][0] < best):
                best = heap[0][0]
        return best

    @staticmethod
    def _live(queued: QueuedPod, entry: int) -> bool:
        return queued.where is Where.BACKOFF and queued.entry == entry

    def __len__(self) -> int:
        return self._size
