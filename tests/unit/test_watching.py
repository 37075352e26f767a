"""The kopf layer delivers every watch event once, marks the cache synced only after the listings, writes nothing.

These tests drive kopf's own watcher, workers and event processing in-process,
with the API's watch streams replaced by scripted ones: the listing barrier and
the handler selection are kopf's, so they are tested as kopf runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits import aiotoggles
from kopf._cogs.clients import patching
from kopf._cogs.clients import watching as kopf_watching
from kopf._cogs.structs import references
from kopf._core.actions import execution, lifecycles
from kopf._core.engines import indexing
from kopf._core.reactor import inventory, processing, queueing

from tests.builders import make_node, make_pod
from usher.adapters import watching

PODS = references.Resource(group="", version="v1", plural="pods", namespaced=True, kind="Pod")
NODES = references.Resource(group="", version="v1", plural="nodes", namespaced=False, kind="Node")

Event = dict[str, Any] | kopf_watching.Bookmark
LISTED = kopf_watching.Bookmark.LISTED


def version(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = str(rv)
    return obj


class Sink:
    """Records deliveries as (kind, event type, name, resourceVersion); fails on objects named ``bad``."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str | None, str, str]] = []
        self.delivered_when_synced: list[tuple[str, str | None, str, str]] | None = None
        self.changed = asyncio.Event()

    def _record(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw["metadata"]
        self.delivered.append((kind, event_type, meta["name"], meta.get("resourceVersion", "")))
        self.changed.set()
        if meta["name"] == "bad":
            raise RuntimeError("a bug on one object")

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("pod", event_type, raw)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("node", event_type, raw)

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("namespace", event_type, raw)

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record(kind, event_type, raw)

    def mark_synced(self) -> None:
        if self.delivered_when_synced is None:
            self.delivered_when_synced = list(self.delivered)
            self.changed.set()

    async def until(self, count: int) -> None:
        """Wait until ``count`` deliveries and the sync happened (bounded: a hang is a failure)."""

        async def reached() -> None:
            while len(self.delivered) < count or self.delivered_when_synced is None:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(reached(), timeout=10)

    def of(self, name: str) -> list[tuple[str | None, str]]:
        return [(event_type, rv) for _, event_type, n, rv in self.delivered if n == name]


@pytest.fixture(autouse=True)
def no_patching(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf must never write to a watched object: any PATCH fails the test."""

    async def refuse(**kwargs: Any) -> None:
        raise AssertionError(f"kopf patched an object: {kwargs.get('patch')!r}")

    monkeypatch.setattr(patching, "patch_obj", refuse)


async def run_kopf(
    sink: Sink,
    streams: Mapping[references.Resource, AsyncIterator[Event]],
    monkeypatch: pytest.MonkeyPatch,
    *,
    deliveries: int,
) -> None:
    """Run kopf's watchers over scripted streams, as ``kopf.operator`` wires them, until ``deliveries``."""
    registry = kopf.OperatorRegistry()
    watching.register(registry, sink)
    settings = kopf.OperatorSettings()
    watching.configure(settings)
    settings.queueing.exit_timeout = 0.1

    def scripted(*, resource: references.Resource, **_: Any) -> AsyncIterator[Event]:
        return streams[resource]

    monkeypatch.setattr(kopf_watching, "infinite_watch", scripted)
    indexers = indexing.OperatorIndexers()
    indexers.ensure(registry._indexing.get_all_handlers())
    event_queue: asyncio.Queue[Any] = asyncio.Queue()
    processor = functools.partial(
        processing.process_resource_event,
        lifecycle=lifecycles.get_default_lifecycle(),
        registry=registry,
        settings=settings,
        indexers=indexers,
        memories=inventory.ResourceMemories(),
        memobase=kopf.Memo(),
        event_queue=event_queue,
    )
    operator_indexed = aiotoggles.ToggleSet(all)
    blocker = await operator_indexed.make_toggle(name="orchestration blocker")
    watchers = [
        asyncio.create_task(
            queueing.watcher(
                namespace=None,
                settings=settings,
                resource=resource,
                processor=functools.partial(processor, resource=resource),
                operator_indexed=operator_indexed,
                resource_indexed=await operator_indexed.make_toggle(name=resource.plural),
            )
        )
        for resource in streams
    ]
    await operator_indexed.drop_toggle(blocker)
    try:
        await sink.until(deliveries)
    finally:
        for task in watchers:
            task.cancel()
        for task in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert event_queue.empty(), "kopf posted k8s Events"


async def script(events: Sequence[Event], *, after: asyncio.Event | None = None) -> AsyncIterator[Event]:
    """A watch stream: optionally wait, yield the events, then stay open."""
    if after is not None:
        await after.wait()
    for event in events:
        yield event
    await asyncio.Event().wait()


def listing(*objs: dict[str, Any]) -> list[Event]:
    return [*({"type": None, "object": obj} for obj in objs), LISTED]


async def test_the_cache_is_synced_only_after_every_kind_s_listing_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = Sink()
    pods_delivered = asyncio.Event()
    original = sink.on_pod

    def on_pod(event_type: str | None, raw: Mapping[str, Any]) -> None:
        original(event_type, raw)
        if len(sink.of("p1") + sink.of("p2")) == 2:
            pods_delivered.set()

    sink.on_pod = on_pod  # type: ignore[method-assign]
    pods = listing(make_pod().name("p1").obj(), make_pod().name("p2").obj())
    nodes = listing(make_node().name("n1").obj(), make_node().name("n2").obj())
    # The nodes' listing arrives only once both pods are delivered: the pods must wait for it.
    streams = {PODS: script(pods), NODES: script(nodes, after=pods_delivered)}

    await run_kopf(sink, streams, monkeypatch, deliveries=4)

    assert sink.delivered_when_synced is not None
    assert sorted(name for _, _, name, _ in sink.delivered_when_synced) == ["n1", "n2", "p1", "p2"]
    assert len(sink.delivered) == 4, "a listed object was delivered twice"


async def test_every_event_is_delivered_once_in_order_deletions_included(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = Sink()
    p1, p2 = make_pod().name("p1"), make_pod().name("p2")
    pods = [
        *listing(version(p1.obj(), 1)),
        {"type": "MODIFIED", "object": version(p1.obj(), 2)},
        {"type": "ADDED", "object": version(p2.obj(), 3)},
        {"type": "DELETED", "object": version(p1.obj(), 4)},
        {"type": None, "object": version(p2.obj(), 5)},  # a re-listing after a lost watch
        {"type": "DELETED", "object": version(p2.obj(), 6)},
    ]

    await run_kopf(sink, {PODS: script(pods)}, monkeypatch, deliveries=6)

    assert sink.of("p1") == [("MODIFIED", "1"), ("MODIFIED", "2"), ("DELETED", "4")]
    assert sink.of("p2") == [("MODIFIED", "3"), ("MODIFIED", "5"), ("DELETED", "6")]


async def test_a_failure_on_one_object_stops_neither_it_nor_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = Sink()
    bad, good = make_pod().name("bad"), make_pod().name("good")
    pods = [
        *listing(version(bad.obj(), 1), version(good.obj(), 2)),
        {"type": "MODIFIED", "object": version(bad.obj(), 3)},
        {"type": "MODIFIED", "object": version(good.obj(), 4)},
        {"type": "DELETED", "object": version(bad.obj(), 5)},
    ]

    await run_kopf(sink, {PODS: script(pods)}, monkeypatch, deliveries=5)

    assert sink.of("bad") == [("MODIFIED", "1"), ("MODIFIED", "3"), ("DELETED", "5")]
    assert sink.of("good") == [("MODIFIED", "2"), ("MODIFIED", "4")]


async def test_once_synced_kopf_invokes_one_handler_per_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's per-handler machinery is most of its per-event cost: the index handlers serve only the sync."""
    invoked: list[str] = []
    original = execution.invoke_handler

    async def counting(*, handler: Any, **kwargs: Any) -> Any:
        invoked.append(handler.id)
        return await original(handler=handler, **kwargs)

    monkeypatch.setattr(execution, "invoke_handler", counting)
    sink = Sink()
    p1 = make_pod().name("p1")
    pods = [*listing(version(p1.obj(), 1)), *({"type": "MODIFIED", "object": version(p1.obj(), rv)} for rv in (2, 3))]

    await run_kopf(sink, {PODS: script(pods)}, monkeypatch, deliveries=3)

    assert invoked == ["pods_feed", "pods_event", "pods_event", "pods_event"]
    assert sink.of("p1") == [("MODIFIED", "1"), ("MODIFIED", "2"), ("MODIFIED", "3")]


def test_usher_registers_no_state_handlers_so_kopf_needs_no_diff_base_nor_progress() -> None:
    """`configure` drops kopf's diff base and progress storage: only state handlers would need them."""
    registry = kopf.OperatorRegistry()
    watching.register(registry, Sink())

    assert not registry._changing.get_all_handlers()
    assert not registry._spawning.get_all_handlers()
    assert not registry._webhooks.get_all_handlers()
    assert len(registry._indexing.get_all_handlers()) == len(registry._watching.get_all_handlers()) == 6
