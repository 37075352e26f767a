"""kopf handlers that feed watch events of Pods, Nodes, Namespaces and DRA objects into the scheduler.

Namespaces are watched only for their labels (InterPodAffinity's namespaceSelector).

Only watch-level handlers are used, so kopf writes nothing to the watched
objects (no finalizers, no annotations, no status). Each kind has two:

- an ``@kopf.index`` handler, which delivers adds and updates until the cache
  is synced. kopf runs every index handler for every object of the initial
  listings of all kinds before it starts any other handler: the first
  ``@kopf.on.event`` call therefore proves the cache holds the whole cluster,
  and marks it synced.
- an ``@kopf.on.event`` handler, which delivers deletions (index handlers never
  see them) and, once synced, adds and updates too.

Once synced, the index handler is filtered out, so each event costs kopf one
handler invocation instead of two (kopf's per-handler machinery is a large
share of its per-event CPU). An event delivered by the index handler before
the sync reaches the on.event handler after it; the object's kopf memo
remembers the delivered resourceVersion so that it is delivered only once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import kopf

logger = logging.getLogger(__name__)


class WatchSink(Protocol):
    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None: ...

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None: ...

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None: ...

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """``kind`` is resourceclaims, resourceslices or deviceclasses (resource.k8s.io/v1)."""
        ...

    def mark_synced(self) -> None: ...


DRA_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses")

Deliver = Callable[[str, Mapping[str, Any]], None]
"""Hands one object to the sink: ``("MODIFIED" | "DELETED", raw object)``."""


def configure(settings: kopf.OperatorSettings) -> None:
    """Make kopf a read-only watch layer, and drop the per-event work only state handlers need.

    usher registers only index and event handlers (see `register`): kopf then never
    writes to the watched objects, and its diff-base and progress storages are never
    written either. kopf still builds a diff-base essence and clears it of progress
    fields on every event (a deep copy of the whole object, then one of its essence per
    default progress storage: the largest share of its per-event cost), so both
    storages are replaced by ones that keep nothing.
    """
    settings.posting.enabled = False  # kopf must write nothing, not even Events of its own
    settings.scanning.disabled = True  # no CRD/namespace discovery: the kinds are fixed
    settings.watching.server_timeout = 300
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.persistence.progress_storage = _NoProgress()


class _NoDiffBase(kopf.DiffBaseStorage):
    """A diff base for operators without state handlers (on.create/update/delete/resume).

    Only those handlers read the diff or store the base; for the others kopf computes
    it and throws it away. An empty essence makes that computation free.
    """

    def build(self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


class _NoProgress(kopf.ProgressStorage):
    """Handler progress for operators whose handlers are never retried across events.

    Index and event handlers keep no progress in the object; kopf only asks this
    storage to clear progress fields from the diff-base essence, which it copies deeply.
    """

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        return None

    def store(self, *, key: kopf.HandlerId, record: kopf.ProgressRecord, body: kopf.Body, patch: kopf.Patch) -> None:
        pass

    def purge(self, *, key: kopf.HandlerId, body: kopf.Body, patch: kopf.Patch) -> None:
        pass

    def touch(self, *, body: kopf.Body, patch: kopf.Patch, value: str | None) -> None:
        pass

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return essence


def register(registry: kopf.OperatorRegistry, sink: WatchSink) -> None:
    """Register the handlers of one scheduler into a kopf registry."""
    sync = _Sync(sink)

    def dra(plural: str) -> Deliver:
        return lambda event_type, raw: sink.on_dra(plural, event_type, raw)

    sync.watch(registry, "", "pods", sink.on_pod)
    sync.watch(registry, "", "nodes", sink.on_node)
    sync.watch(registry, "", "namespaces", sink.on_namespace)
    for plural in DRA_RESOURCES:
        sync.watch(registry, "resource.k8s.io", plural, dra(plural))


_DELIVERED = "usher_delivered_version"
"""kopf memo key: the resourceVersion the index handler delivered, awaiting its on.event call."""

_NOT_DELIVERED = object()


class _Sync:
    """Whether the initial listings are delivered; which handler delivers an event depends on it."""

    def __init__(self, sink: WatchSink) -> None:
        self.sink = sink
        self.synced = False

    def unsynced(self, **_: Any) -> bool:
        """The index handlers' filter: they deliver only the events that kopf processes before the sync."""
        return not self.synced

    def watch(self, registry: kopf.OperatorRegistry, group: str, plural: str, deliver: Deliver) -> None:
        """Register the index and the on.event handler of one kind."""

        @kopf.index(group, "v1", plural, registry=registry, id=f"{plural}_feed", when=self.unsynced)
        async def feed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
            raw = dict(body)  # a shallow copy of kopf's view: nested values are the raw JSON dicts
            memo[_DELIVERED] = raw["metadata"].get("resourceVersion")
            _deliver(deliver, plural, "MODIFIED", raw)

        @kopf.on.event(group, "v1", plural, registry=registry, id=f"{plural}_event")
        async def on_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
            if not self.synced:
                self.synced = True
                self.sink.mark_synced()
            raw = event["object"]  # the parsed JSON itself: no copy, no view
            if event["type"] == "DELETED":
                _deliver(deliver, plural, "DELETED", raw)
            elif memo.pop(_DELIVERED, _NOT_DELIVERED) != raw["metadata"].get("resourceVersion"):
                _deliver(deliver, plural, "MODIFIED", raw)


def _deliver(deliver: Deliver, plural: str, event_type: str, raw: Mapping[str, Any]) -> None:
    try:
        deliver(event_type, raw)
    except Exception:
        # A bug on one object must not stop the watch of all the others.
        meta = raw.get("metadata") or {}
        logger.exception("handling %s %s of %s/%s failed", event_type, plural, meta.get("namespace"), meta.get("name"))
