"""kopf handlers that feed watch events of Pods, Nodes and Namespaces into the scheduler.

Namespaces are watched only for their labels (InterPodAffinity's namespaceSelector).

Only watch-level handlers are used, so kopf writes nothing to pods or nodes
(no finalizers, no annotations). Adds and updates arrive through
``@kopf.index`` handlers: kopf runs every index handler for every object of
the initial listing before it starts any other handler, so the first
``@kopf.on.event`` call proves the cache holds the whole cluster. Deletions
arrive through ``@kopf.on.event`` (index handlers never see them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
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


def configure(settings: kopf.OperatorSettings) -> None:
    """Make kopf a read-only watch layer, and drop the per-event work only state handlers need.

    usher registers only index and event handlers (see `register`): kopf then never
    writes to the watched objects, and its diff-base and progress storages are never
    written either. kopf still builds a diff-base essence and clears it of progress
    fields on every event (two deep copies of the whole object, the largest share of
    its per-event cost), so both storages are replaced by ones that keep nothing.
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

    def deliver(kind: str, event_type: str | None, body: kopf.Body) -> None:
        raw = dict(body)  # a shallow copy of kopf's view: nested values are the raw JSON dicts
        try:
            if kind == "pod":
                sink.on_pod(event_type, raw)
            elif kind == "node":
                sink.on_node(event_type, raw)
            elif kind == "namespace":
                sink.on_namespace(event_type, raw)
            else:
                sink.on_dra(kind, event_type, raw)
        except Exception:
            # A bug on one object must not stop the watch of all the others.
            meta = body.metadata
            logger.exception("handling %s %s of %s/%s failed", event_type, kind, meta.namespace, meta.name)

    @kopf.index("", "v1", "pods", registry=registry)
    async def pods_feed(body: kopf.Body, **_: Any) -> None:
        deliver("pod", "MODIFIED", body)

    @kopf.index("", "v1", "nodes", registry=registry)
    async def nodes_feed(body: kopf.Body, **_: Any) -> None:
        deliver("node", "MODIFIED", body)

    @kopf.index("", "v1", "namespaces", registry=registry)
    async def namespaces_feed(body: kopf.Body, **_: Any) -> None:
        deliver("namespace", "MODIFIED", body)

    @kopf.on.event("", "v1", "namespaces", registry=registry)
    async def namespaces_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            deliver("namespace", "DELETED", body)

    for plural in DRA_RESOURCES:
        _register_dra(registry, plural, deliver)

    @kopf.on.event("", "v1", "pods", registry=registry)
    async def pods_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        sink.mark_synced()
        if type == "DELETED":
            deliver("pod", "DELETED", body)

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def nodes_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        sink.mark_synced()
        if type == "DELETED":
            deliver("node", "DELETED", body)


DRA_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses")


def _register_dra(registry: kopf.OperatorRegistry, plural: str, deliver: Any) -> None:
    """Watch one resource.k8s.io/v1 kind: adds/updates through an index, deletions through on.event."""

    @kopf.index("resource.k8s.io", "v1", plural, registry=registry, id=f"{plural}_feed")
    async def feed(body: kopf.Body, **_: Any) -> None:
        deliver(plural, "MODIFIED", body)

    @kopf.on.event("resource.k8s.io", "v1", plural, registry=registry, id=f"{plural}_event")
    async def event(type: str | None, body: kopf.Body, **_: Any) -> None:
        if type == "DELETED":
            deliver(plural, "DELETED", body)
