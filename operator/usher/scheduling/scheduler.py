"""A running scheduler's parts, as the composition root built them: what `usher explain` and the
health checks read. It has no behaviour of its own."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from usher.core.cache import Cache
from usher.core.clock import Clock
from usher.core.dra.state import DraState
from usher.core.framework.runtime import Framework
from usher.core.queue import SchedulingQueue
from usher.core.volumes.state import VolumeState
from usher.scheduling.attempts import Attempts
from usher.scheduling.eventhandling import ClusterEvents
from usher.scheduling.loop import SchedulingLoop
from usher.scheduling.preemption import Evictions


@dataclass(frozen=True, slots=True)
class Scheduler:
    """The cache, the queue, the profiles' frameworks, the loop and the watch sink of one usher."""

    clock: Clock
    cache: Cache
    queue: SchedulingQueue
    frameworks: Mapping[str, Framework]
    attempts: Attempts
    events: ClusterEvents
    """The ``WatchSink`` the kopf handlers feed."""
    loop: SchedulingLoop
    evictions: Evictions
    """Preemptions in flight: whose victims are still being removed."""
    volumes: VolumeState
    """PVCs, PVs and storage classes as watched (``usher explain`` shows a pod's claims)."""
    dra: DraState
    """ResourceClaims as watched and in flight (``usher explain`` shows a PodGroup's shared claims)."""
    synced: asyncio.Event
    """Set once the cache holds everything the initial LIST saw."""
