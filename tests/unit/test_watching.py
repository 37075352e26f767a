"""usher's watches deliver every event once and in order, mark the cache synced only after the listings, never stall.

These tests run usher's `Streams` over kopf's watch stream with the API's side
replaced by scripted streams (kopf's ``infinite_watch``, which lists, watches and
re-lists, is what a script stands in for) and usher's own LIST by a scripted
lister.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import watching as kopf_watching
from kopf._cogs.structs import references
from kopf._cogs.structs.credentials import Vault

from tests.builders import make_node, make_pod
from usher.adapters import watching

PODS = "pods"
NODES = "nodes"

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
        self.fields: set[str] = set()
        """Every metadata field of every object delivered."""

    def _record(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        meta = raw["metadata"]
        self.delivered.append((kind, event_type, meta.get("name", ""), meta.get("resourceVersion", "")))
        self.fields.update(meta)
        self.changed.set()
        if meta.get("name") == "bad":
            raise RuntimeError("a bug on one object")

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("pod", event_type, raw)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("node", event_type, raw)

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("namespace", event_type, raw)

    def on_disruption_budget(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("poddisruptionbudget", event_type, raw)

    def on_service(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("service", event_type, raw)

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record(kind, event_type, raw)

    def on_volume(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record(kind, event_type, raw)

    def on_pod_group(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("podgroup", event_type, raw)

    def on_workload(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("workload", event_type, raw)

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


Listed = Mapping[str, Sequence[Collection[str]]]
"""Per plural, what usher's successive LISTs of that kind return (the last one repeats); unlisted kinds are empty."""


def lister(listed: Listed, calls: list[str] | None = None) -> watching.Lister:
    answered: dict[str, int] = {}

    async def list_keys(group: str, plural: str) -> Collection[str] | None:
        if calls is not None:
            calls.append(plural)
        lists = listed.get(plural) or [()]
        answered[plural] = answered.get(plural, -1) + 1
        return lists[min(answered[plural], len(lists) - 1)]

    return list_keys


def uids(*objs: dict[str, Any]) -> list[str]:
    return [obj["metadata"]["uid"] for obj in objs]


async def run_streams(
    sink: Sink,
    streams: Mapping[str, AsyncIterator[Event]],
    monkeypatch: pytest.MonkeyPatch,
    *,
    deliveries: int,
    listed: Listed | watching.Lister,
    recheck: float = 5.0,
) -> None:
    """Run usher's watch streams over scripted kopf streams (per plural), and the initial sync, until ``deliveries``."""
    watches = watching.register(sink, settings=watching.SyncSettings(recheck=recheck, max_recheck=recheck, retry=0.001))
    settings = kopf.OperatorSettings()
    watching.configure(settings)

    def scripted(*, resource: references.Resource, **_: Any) -> AsyncIterator[Event]:
        return streams.get(resource.plural) or script([])

    monkeypatch.setattr(kopf_watching, "infinite_watch", scripted)
    tasks = [
        asyncio.create_task(watches.streams.run(settings, Vault())),
        asyncio.create_task(watches.sync.run(listed if callable(listed) else lister(listed))),
    ]
    try:
        await sink.until(deliveries)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def script(events: Sequence[Event], *, after: asyncio.Event | None = None) -> AsyncIterator[Event]:
    """A watch stream: optionally wait, yield the events, then stay open."""
    if after is not None:
        await after.wait()
    for event in events:
        yield event
    await asyncio.Event().wait()


def listing(*objs: dict[str, Any]) -> list[Event]:
    return [*({"type": None, "object": obj} for obj in objs), LISTED]


async def test_the_cache_is_synced_only_after_every_listed_object_of_every_kind_is_delivered(
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
    p1, p2 = make_pod().name("p1").obj(), make_pod().name("p2").obj()
    n1, n2 = make_node().name("n1").obj(), make_node().name("n2").obj()
    # The nodes' listing arrives only once both pods are delivered: the sync must wait for it.
    streams = {PODS: script(listing(p1, p2)), NODES: script(listing(n1, n2), after=pods_delivered)}

    await run_streams(
        sink, streams, monkeypatch, deliveries=4, listed={"pods": [uids(p1, p2)], "nodes": [uids(n1, n2)]}
    )

    assert sink.delivered_when_synced is not None
    assert sorted(name for _, _, name, _ in sink.delivered_when_synced) == ["n1", "n2", "p1", "p2"]
    assert len(sink.delivered) == 4, "a listed object was delivered twice"


async def test_objects_kopf_delivers_before_usher_s_list_is_in_count_as_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = Sink()
    p1, p2 = make_pod().name("p1").obj(), make_pod().name("p2").obj()

    async def slow_list(group: str, plural: str) -> Collection[str]:
        if plural != "pods":
            return ()
        while len(sink.delivered) < 2:
            await sink.changed.wait()
            sink.changed.clear()
        return uids(p1, p2)

    await run_streams(sink, {PODS: script(listing(p1, p2))}, monkeypatch, deliveries=2, listed=slow_list)

    assert sink.delivered_when_synced is not None
    assert sorted(name for _, _, name, _ in sink.delivered_when_synced) == ["p1", "p2"]


async def test_an_empty_cluster_is_synced_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = Sink()

    await run_streams(sink, {PODS: script(listing())}, monkeypatch, deliveries=0, listed={})

    assert sink.delivered_when_synced == []


async def test_an_object_usher_listed_but_deleted_before_kopf_listed_is_dropped_by_a_later_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf never mentions an object deleted before its own listing: only a new LIST can tell it is gone."""
    sink = Sink()
    kept, gone = make_pod().name("kept").obj(), make_pod().name("gone").obj()
    calls: list[str] = []
    listed = lister({"pods": [uids(kept, gone), uids(kept)]}, calls)

    await run_streams(sink, {PODS: script(listing(kept))}, monkeypatch, deliveries=1, listed=listed, recheck=0.01)

    assert sink.delivered_when_synced is not None
    assert [name for _, _, name, _ in sink.delivered_when_synced] == ["kept"]
    assert calls.count("pods") == 2, "only the stalled kind is listed again"
    assert calls.count("nodes") == 1


@pytest.mark.parametrize(
    "answers",
    [
        pytest.param([RuntimeError("connection reset"), ()], id="a failed LIST is retried"),
        pytest.param([None], id="a kind the API server does not serve awaits nothing"),
    ],
)
async def test_usher_s_list_is_retried_until_it_answers(monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> None:
    sink = Sink()
    pod = make_pod().name("p").obj()
    remaining = list(answers)

    async def flaky(group: str, plural: str) -> Collection[str] | None:
        if plural != "resourceslices":
            return uids(pod) if plural == "pods" else ()
        answer = remaining.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    await run_streams(sink, {PODS: script(listing(pod))}, monkeypatch, deliveries=1, listed=flaky)

    assert sink.delivered_when_synced is not None
    assert not remaining


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

    await run_streams(sink, {PODS: script(pods)}, monkeypatch, deliveries=6, listed={"pods": [uids(p1.obj())]})

    assert sink.of("p1") == [("MODIFIED", "1"), ("MODIFIED", "2"), ("DELETED", "4")]
    assert sink.of("p2") == [("MODIFIED", "3"), ("MODIFIED", "5"), ("DELETED", "6")]


async def test_objects_arrive_without_managed_fields_as_kube_scheduler_trims_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = Sink()
    managed = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:nodeName": {}}}}]
    pod = version(make_pod().name("p").obj(), 1)
    pod["metadata"]["managedFields"] = managed
    node = version(make_node().name("n").obj(), 2)
    node["metadata"]["managedFields"] = managed
    updated = version(make_pod().name("p").obj(), 3)
    updated["metadata"]["managedFields"] = managed

    await run_streams(
        sink,
        {PODS: script([*listing(pod), {"type": "MODIFIED", "object": updated}]), NODES: script(listing(node))},
        monkeypatch,
        deliveries=3,
        listed={},
    )

    assert sink.of("p") == [("MODIFIED", "1"), ("MODIFIED", "3")]
    assert {"name", "resourceVersion"} <= sink.fields
    assert "managedFields" not in sink.fields


async def test_a_failure_on_one_object_stops_neither_it_nor_the_others_nor_the_sync(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = Sink()
    bad, good = make_pod().name("bad"), make_pod().name("good")
    pods = [
        *listing(version(bad.obj(), 1), version(good.obj(), 2)),
        {"type": "MODIFIED", "object": version(bad.obj(), 3)},
        {"type": "MODIFIED", "object": version(good.obj(), 4)},
        {"type": "DELETED", "object": version(bad.obj(), 5)},
    ]

    await run_streams(
        sink, {PODS: script(pods)}, monkeypatch, deliveries=5, listed={"pods": [uids(bad.obj(), good.obj())]}
    )

    assert sink.of("bad") == [("MODIFIED", "1"), ("MODIFIED", "3"), ("DELETED", "5")]
    assert sink.of("good") == [("MODIFIED", "2"), ("MODIFIED", "4")]
    assert sink.delivered_when_synced is not None


async def test_bookmarks_kopf_s_and_the_api_server_s_are_not_delivered(monkeypatch: pytest.MonkeyPatch) -> None:
    sink = Sink()
    p1 = make_pod().name("p1")
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}}}
    pods = [*listing(version(p1.obj(), 1)), bookmark, {"type": "MODIFIED", "object": version(p1.obj(), 8)}]

    await run_streams(sink, {PODS: script(pods)}, monkeypatch, deliveries=2, listed={"pods": [uids(p1.obj())]})

    assert sink.delivered == [("pod", "MODIFIED", "p1", "1"), ("pod", "MODIFIED", "p1", "8")]


async def test_every_kind_is_streamed_with_its_group_version_and_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    streamed: dict[str, references.Resource] = {}
    kinds = (*watching.KINDS, *watching.WORKLOAD_KINDS)
    all_streamed = asyncio.Event()

    def recording(*, resource: references.Resource, namespace: Any, **_: Any) -> AsyncIterator[Event]:
        assert namespace is None, "usher watches cluster-wide"
        streamed[resource.plural] = resource
        if len(streamed) == len(kinds):
            all_streamed.set()
        return script([])

    monkeypatch.setattr(kopf_watching, "infinite_watch", recording)
    watches = watching.register(Sink(), optional=watching.WORKLOAD_KINDS)
    task = asyncio.create_task(watches.streams.run(kopf.OperatorSettings(), Vault()))
    try:
        await asyncio.wait_for(all_streamed.wait(), timeout=10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert {(r.group, r.version, r.plural) for r in streamed.values()} == {
        (group, watching.version(group, plural), plural) for group, plural in kinds
    }
    assert streamed["pods"].get_url(namespace=None) == "/api/v1/pods"
    assert streamed["podgroups"].get_url(namespace=None) == "/apis/scheduling.k8s.io/v1beta1/podgroups"
    assert {plural for plural, r in streamed.items() if not r.namespaced} == {
        "nodes", "namespaces", "persistentvolumes", "storageclasses", "csinodes", "csidrivers", "resourceslices",
        "deviceclasses",
    }  # fmt: skip


async def test_a_failed_stream_is_started_again_after_a_backoff_and_its_new_listing_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf's stream gives up on some API errors (a 5xx after its retries): the kind must not stay unwatched."""
    p1, p2 = make_pod().name("p1"), make_pod().name("p2")
    attempts: list[str] = []

    async def failing_once(*, resource: references.Resource, **_: Any) -> AsyncIterator[Event]:
        attempts.append(resource.plural)
        if resource.plural != "pods":
            await asyncio.Event().wait()
        if attempts.count("pods") == 1:
            yield {"type": None, "object": version(p1.obj(), 1)}
            raise RuntimeError("APIServerError: 503 after retries")
        async for event in script(listing(version(p1.obj(), 2), version(p2.obj(), 3))):
            yield event

    monkeypatch.setattr(kopf_watching, "infinite_watch", failing_once)
    sink = Sink()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    sync = watching.InitialSync(sink, [("", "pods")])
    holdings = watching.Holdings({"pods": sink.on_pod})
    streams = watching.Streams(sync, holdings, [("", "pods")], retry=0.5, sleep=sleep)
    task = asyncio.create_task(streams.run(kopf.OperatorSettings(), Vault()))
    try:
        async with asyncio.timeout(10):
            while len(sink.delivered) < 3:
                sink.changed.clear()
                await sink.changed.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    assert attempts == ["pods", "pods"]
    assert waits == [0.5]
    assert sink.of("p1") == [("MODIFIED", "1"), ("MODIFIED", "2")]
    assert sink.of("p2") == [("MODIFIED", "3")]
    assert holdings.objects["pods"].keys() == {("default", "p1"), ("default", "p2")}


async def test_a_burst_of_events_yields_the_event_loop_every_few_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chunk of buffered events is read without awaiting anything: the scheduling loop must still get turns."""
    turns = 0
    turns_at_delivery: list[int] = []

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    sink = Sink()
    original = sink.on_pod

    def on_pod(event_type: str | None, raw: Mapping[str, Any]) -> None:
        turns_at_delivery.append(turns)
        original(event_type, raw)

    sink.on_pod = on_pod  # type: ignore[method-assign]
    count = 5 * watching.EVENTS_PER_TURN
    pods = [make_pod().name(f"p{i}").obj() for i in range(count)]
    ticker = asyncio.create_task(other_task())
    try:
        await run_streams(sink, {PODS: script(listing(*pods))}, monkeypatch, deliveries=count, listed={})
    finally:
        ticker.cancel()

    back_to_back = [len(list(run)) for _, run in itertools.groupby(turns_at_delivery)]
    assert max(back_to_back) <= watching.EVENTS_PER_TURN, back_to_back
    assert len(back_to_back) >= 5, "the other task ran between the batches"


async def _event_loop_callbacks_until_synced(monkeypatch: pytest.MonkeyPatch, count: int) -> int:
    """How many callbacks (task steps, wake-ups) asyncio runs until ``count`` listed pods are synced."""
    callbacks = 0
    original = asyncio.events.Handle._run

    def counting(handle: asyncio.events.Handle) -> None:
        nonlocal callbacks
        callbacks += 1
        original(handle)

    pods = [make_pod().name(f"p{i}").obj() for i in range(count)]
    with monkeypatch.context() as patched:
        patched.setattr(asyncio.events.Handle, "_run", counting)
        await run_streams(
            Sink(), {PODS: script(listing(*pods))}, monkeypatch, deliveries=count, listed={"pods": [uids(*pods)]}
        )
    return callbacks


async def test_the_work_until_synced_grows_linearly_with_the_listed_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's index barrier woke every waiting object on each finished one: quadratic (x16 for x4 objects).

    Counting event-loop callbacks measures that work without a clock.
    """
    small = await _event_loop_callbacks_until_synced(monkeypatch, 500)
    large = await _event_loop_callbacks_until_synced(monkeypatch, 2000)

    assert large <= 4.5 * small, f"{small} callbacks for 500 objects, {large} for 2000"
