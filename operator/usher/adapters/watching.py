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
from collections.abc import Mapping
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
