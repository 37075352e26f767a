"""The unschedulable pool: pods rejected by plugins, and gated pods. Pure data structure.

Whether a pod counts as gated, and which plugins hold it, are captured when
it enters, so the gauges stay right however its fields change while it
waits. The pods are also indexed by the plugins that hold them: a cluster
event only has to look at the pods held by plugins that registered for it
(5,000 gated pods cost nothing when a node is added), not at the whole pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from usher.core.queue.queuedpod import QueuedPod, Where
from usher.core.types import PodKey


def holders(queued: QueuedPod) -> frozenset[str]:
    """The plugins whose events can release this pod: its gate, or the plugins that rejected it."""
    return frozenset({queued.gating_plugin}) if queued.gated else frozenset(queued.rejectors)


class UnschedulablePool:
    """The pods waiting for a cluster event (rejected) or for their PreEnqueue gate (gated), by key and by holder.

    ``gated_count`` and the holder index reflect each pod as it was when it entered.
    """

    def __init__(self) -> None:
        self._pods: dict[PodKey, tuple[QueuedPod, bool, frozenset[str]]] = {}
        self._by_plugin: dict[str, dict[PodKey, QueuedPod]] = {}
        self.gated_count = 0

    def add(self, queued: QueuedPod) -> None:
        self.remove(queued)
        queued.where = Where.UNSCHEDULABLE
        plugins = holders(queued)
        self._pods[queued.key] = (queued, queued.gated, plugins)
        for plugin in plugins:
            self._by_plugin.setdefault(plugin, {})[queued.key] = queued
        self.gated_count += queued.gated

    def remove(self, queued: QueuedPod) -> None:
        held = self._pods.get(queued.key)
        if held is None or held[0] is not queued:
            return
        del self._pods[queued.key]
        for plugin in held[2]:
            pods = self._by_plugin.get(plugin)
            if pods is not None:
                pods.pop(queued.key, None)
                if not pods:
                    del self._by_plugin[plugin]
        self.gated_count -= held[1]
        queued.where = Where.NOWHERE

    def held_by(self, plugins: Iterable[str]) -> list[QueuedPod]:
        """The pods held by any of ``plugins`` (each once)."""
        found: dict[PodKey, QueuedPod] = {}
        for plugin in plugins:
            found.update(self._by_plugin.get(plugin, {}))
        return list(found.values())

    def __iter__(self) -> Iterator[QueuedPod]:
        return iter([entry[0] for entry in self._pods.values()])

    def __len__(self) -> int:
        return len(self._pods)
