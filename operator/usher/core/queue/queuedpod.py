"""QueuedPod: a pod's scheduling history while it waits. Pure.

Only the queue (queueing.py) changes ``where`` and the counters; plugins
and the cycle read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from usher.core.types import PodInfo, PodKey


class Where(Enum):
    """Which sub-queue holds a pod; exactly one at any time outside a transition."""

    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"  # includes gated pods (see QueuedPod.gated)
    IN_FLIGHT = "in_flight"
    NOWHERE = "nowhere"  # new, gone, or between two sub-queues inside one transition


@dataclass(slots=True, eq=False)
class QueuedPod:
    """One unscheduled pod while the queue holds it: where it is, its attempts, and who rejected or gates it."""

    pod: PodInfo
    timestamp: float
    """Queue timestamp: set on add, reset each time the pod comes back after a failed attempt."""
    initial_attempt_timestamp: float | None = None
    attempts: int = 0
    unschedulable_count: int = 0
    consecutive_errors: int = 0
    unschedulable_plugins: set[str] = field(default_factory=set)
    """Set only through ``rejected_by`` (with ``pending_plugins``), which keeps ``holders`` in step."""
    pending_plugins: set[str] = field(default_factory=set)
    holders: tuple[str, ...] = ()
    """The rejecting plugins, sorted: what the queue asks about every event while the pod waits."""
    pending_holders: tuple[str, ...] = ()
    """``pending_plugins``, sorted."""
    gating_plugin: str = ""
    """The PreEnqueue plugin that holds the pod back; empty when not gated."""
    gating_message: str = ""
    flushed: bool = False
    """Moved by the 5-minute flush rather than by an event (scheduler_pod_scheduled_after_flush_total)."""
    pool_since: float = 0.0
    """When the pod entered (or was last flushed within) the unschedulable pool: drives the flush."""
    where: Where = Where.NOWHERE
    last_event: str = ""
    """Label of the event that last moved the pod (for `usher explain`)."""
    backoff_expiry: float = 0.0
    entry: int = 0
    """Heap entry id: stale heap entries (moved or deleted pods) are skipped by comparing it."""
    last_rejection_message: str = ""
    """The PreEnqueue rejection last reported on the pod (KEP-5501); empty when none is."""
    popped_cycle: int = 0
    """The scheduling cycle of the last pop (moveRequestCycle when hints are off)."""

    @property
    def key(self) -> PodKey:
        return self.pod.key

    @property
    def gated(self) -> bool:
        return bool(self.gating_plugin)

    @property
    def rejectors(self) -> set[str]:
        return self.unschedulable_plugins | self.pending_plugins

    def rejected_by(self, unschedulable: Iterable[str], pending: Iterable[str]) -> None:
        """The plugins that rejected the last attempt (Unschedulable, and Pending: retried at once when helped)."""
        self.unschedulable_plugins = set(unschedulable)
        self.pending_plugins = set(pending)
        self.holders = tuple(sorted(self.unschedulable_plugins | self.pending_plugins))
        self.pending_holders = tuple(sorted(self.pending_plugins))
