"""Why each waiting pod's last attempt failed, kept for `usher explain`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from usher.core.types import PodKey, Status

MAX_NODES_EXPLAINED = 50
"""Per-node reasons kept for one attempt; the rest are counted."""


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


class Attempts:
    """The last failed attempt of each waiting pod; dropped once the pod is placed or deleted."""

    def __init__(self) -> None:
        self._last: dict[PodKey, AttemptRecord] = {}

    def failed(self, key: PodKey, record: AttemptRecord) -> None:
        self._last[key] = record

    def forget(self, key: PodKey) -> None:
        self._last.pop(key, None)

    def last(self, key: PodKey) -> AttemptRecord | None:
        return self._last.get(key)
