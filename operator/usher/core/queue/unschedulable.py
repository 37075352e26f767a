"""The unschedulable pool: pods rejected by plugins, and gated pods. Pure data structure.

Whether a pod counts as gated is captured when it enters, so the gauges stay
right however its fields change while it waits.
"""

from __future__ import annotations

from collections.abc import Iterator

from usher.core.queue.queuedpod import QueuedPod, Where
from usher.core.types import PodKey


class UnschedulablePool:
    def __init__(self) -> None:
        self._pods: dict[PodKey, tuple[QueuedPod, bool]] = {}
        self.gated_count = 0

    def add(self, queued: QueuedPod) -> None:
        self.remove(queued)
        queued.where = Where.UNSCHEDULABLE
        self._pods[queued.key] = (queued, queued.gated)
        self.gated_count += queued.gated

    def remove(self, queued: QueuedPod) -> None:
        held = self._pods.get(queued.key)
        if held is None or held[0] is not queued:
            return
        del self._pods[queued.key]
        self.gated_count -= held[1]
        queued.where = Where.NOWHERE

    def __iter__(self) -> Iterator[QueuedPod]:
        return iter([queued for queued, _ in self._pods.values()])

    def __len__(self) -> int:
        return len(self._pods)
