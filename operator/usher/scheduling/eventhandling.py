"""Watch events in (kube-scheduler's eventhandlers.go): the ``WatchSink`` the kopf handlers feed.

Each event updates the pure cache and queue synchronously (``core.handling``),
keeps the dispatcher's view of the pod (or PodGroup) fresh (so a queued
status patch is built against the newest version, and dropped once the
object is gone), reports pods usher cannot parse, rolls back the gang of a
member deleted on its way to Bind, records how long the event took, and
wakes the scheduling loop. Nothing here waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from usher.adapters.podgroup_status import pod_group_object_key
from usher.core.cache import Cache
from usher.core.handling import EventHandlers
from usher.core.types import PodKey
from usher.scheduling.failures import SchedulingFailures
from usher.scheduling.gang_binding import GangCommits
from usher.scheduling.ports import ApiWriter, SchedulingRecorder
from usher.scheduling.preemption import Evictions

logger = logging.getLogger(__name__)


class ClusterEvents:
    """Applies watch events of pods, nodes, namespaces, DRA, storage and pod-group objects; marks the cache synced."""

    def __init__(
        self,
        *,
        handlers: EventHandlers,
        cache: Cache,
        writer: ApiWriter,
        failures: SchedulingFailures,
        evictions: Evictions,
        gangs: GangCommits,
        recorder: SchedulingRecorder,
        synced: asyncio.Event,
        wake: Callable[[], None],
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._handlers = handlers
        self._cache = cache
        self._writer = writer
        self._failures = failures
        self._evictions = evictions
        self._gangs = gangs
        self._recorder = recorder
        self._synced = synced
        self._wake = wake
        self._timer = timer

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        if self._handlers.is_stale(raw):
            # An earlier pod of this name: its successor owns the key, its reports and its last object.
            return
        started = self._timer()
        label = self._handlers.on_pod(event_type, raw)
        meta = raw.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if event_type == "DELETED":
            self._failures.forget(PodKey(key))
            self._evictions.gone(PodKey(key))
            self._gangs.gone(PodKey(key))
            self._writer.forget_object(key)
        else:
            self._writer.sync_object(key, raw)
        self._after_event(label, started)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        started = self._timer()
        label = self._handlers.on_node(event_type, raw)
        self._after_event(label, started)

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        started = self._timer()
        label = self._handlers.on_dra(kind, event_type, raw)
        self._after_event(label, started)

    def on_volume(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        started = self._timer()
        label = self._handlers.on_volume(kind, event_type, raw)
        self._after_event(label, started)

    def on_pod_group(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A scheduling.k8s.io/v1beta1 PodGroup."""
        started = self._timer()
        label = self._handlers.on_pod_group(event_type, raw)
        meta = raw.get("metadata") or {}
        key = pod_group_object_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        if event_type == "DELETED":
            self._writer.forget_object(key)
        else:
            self._writer.sync_object(key, raw)
        self._after_event(label, started)

    def on_workload(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A scheduling.k8s.io/v1beta1 Workload (kept for ``usher explain``)."""
        self._handlers.on_workload(event_type, raw)

    def on_disruption_budget(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._handlers.on_disruption_budget(event_type, raw)

    def on_service(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._handlers.on_service(event_type, raw)

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        metadata = raw.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if event_type == "DELETED":
            self._cache.remove_namespace(name)
        else:
            self._cache.set_namespace(name, metadata.get("labels") or {})

    def mark_synced(self) -> None:
        """The cache holds everything the initial LIST saw: scheduling may start."""
        if not self._synced.is_set():
            logger.info("cache synced: %d nodes", self._cache.node_count)
            self._synced.set()
            self._wake()

    def _after_event(self, label: str, started: float) -> None:
        if label:
            self._recorder.event_handled(label, self._timer() - started)
        for bad in self._handlers.malformed:
            self._failures.malformed(bad.pod, bad.message)
        self._handlers.malformed.clear()
        self._wake()
