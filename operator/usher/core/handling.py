"""Watch events -> cache and queue updates. Pure.

Every pod goes to the cache or the queue, never both:
- assigned (``spec.nodeName`` set) pods, whoever scheduled them, are counted
  in the cache on their node, and may make room or fill it for others;
- unscheduled pods of our scheduler names are queued;
- everything else is ignored.

A pod the API server served but usher cannot parse (say, a request quantity
it does not understand) is recorded in ``malformed`` for the runtime to
report on that pod; it never raises out of here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.cache import Cache
from usher.core.queue import SchedulingQueue
from usher.core.types import PodInfo, PodKey, pod_key

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


@dataclass(frozen=True, slots=True)
class Malformed:
    pod: Mapping[str, Any]
    message: str


@dataclass
class EventHandlers:
    cache: Cache
    queue: SchedulingQueue
    scheduler_names: Collection[str]
    malformed: list[Malformed] = field(default_factory=list)
    _seen_versions: dict[PodKey, str] = field(default_factory=dict)

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        key = pod_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        if event_type == DELETED:
            self._seen_versions.pop(key, None)
            self.cache.remove_pod(key)
            self.queue.delete(key)
            self.queue.move_all("AssignedPodDelete")
            return
        version = str(meta.get("resourceVersion") or "")
        if version and self._seen_versions.get(key) == version:
            return  # a re-delivery of what we already reflect (kopf re-lists, resyncs)
        self._seen_versions[key] = version
        try:
            pod = PodInfo.from_api(raw)
        except ValueError as exc:
            self.queue.delete(key)
            if (raw.get("spec") or {}).get("schedulerName") in self.scheduler_names:
                self.malformed.append(Malformed(pod=raw, message=str(exc)))
            return
        if pod.assigned:
            self.queue.delete(key)
            was_counted = self.cache.node_of(key) is not None
            self.cache.add_or_update_pod(pod)
            if pod.terminal and was_counted:
                self.queue.move_all("AssignedPodUpdate")
            return
        self.cache.remove_pod(key)  # e.g. an assumed pod whose binding was undone
        if pod.scheduler_name in self.scheduler_names and not pod.terminal and not pod.deleting:
            self.queue.update(pod) if self.queue.get(key) else self.queue.add(pod)
        else:
            self.queue.delete(key)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        name = str((raw.get("metadata") or {}).get("name") or "")
        if event_type == DELETED:
            self.cache.remove_node(name)
            return
        old = self.cache.node(name)
        old_raw = old.raw if old is not None else None
        self.cache.add_or_update_node(raw)
        if old_raw is None:
            self.queue.move_all("NodeAdd")
        elif _placement_relevant(old_raw) != _placement_relevant(raw):
            # Heartbeats only touch conditions and timestamps: they must not requeue anything.
            self.queue.move_all("NodeUpdate")


def _placement_relevant(node: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return (status.get("allocatable"), spec.get("unschedulable"), meta.get("labels"), spec.get("taints"))
