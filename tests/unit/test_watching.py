"""usher's watches deliver every event once and in order, mark the cache synced only after the listings, never stall,
and hand on at once, as deleted, what a new listing lacks.

These tests run usher's `Streams` over kopf's watch stream with the API's side
replaced by scripted streams (kopf's stream, which lists, watches and re-lists, is
what a script stands in for, at the seam `kopf_private.watch_stream`) and usher's
own LIST by a scripted lister. The re-listing tests hand the stream's items to
`Streams.handle` as the stream's task does; one of them over the scheduler core's
real cache and queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import kopf
import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import scheduling_queue
from usher.adapters import watching
from usher.adapters.watching import Vault, kopf_private
from usher.core.cache import Cache
from usher.core.clock import FakeClock
from usher.core.handling import EventHandlers
from usher.core.types import NodeName, PodInfo, pod_key

PODS = "pods"
NODES = "nodes"

Event = dict[str, Any] | kopf_private.Bookmark
LISTED = kopf_private.LISTED


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


async def run_until_delivered(streams: watching.Streams, sink: Sink, count: int) -> None:
    """Run the streams alone (no initial sync, unlike `run_streams` and `Sink.until`) until the sink holds ``count``
    deliveries (10 s at most), then stop them."""
    task = asyncio.create_task(streams.run(kopf.OperatorSettings(), Vault()))
    try:
        async with asyncio.timeout(10):
            while len(sink.delivered) < count:
                sink.changed.clear()
                await sink.changed.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


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

    def scripted(settings: kopf.OperatorSettings, resource: kopf_private.Resource) -> AsyncIterator[Event]:
        return streams.get(resource.plural) or script([])

    monkeypatch.setattr(kopf_private, "watch_stream", scripted)
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
    streamed: dict[str, kopf_private.Resource] = {}
    kinds = (*watching.KINDS, *watching.WORKLOAD_KINDS)
    all_streamed = asyncio.Event()

    def recording(settings: kopf.OperatorSettings, resource: kopf_private.Resource) -> AsyncIterator[Event]:
        streamed[resource.plural] = resource
        if len(streamed) == len(kinds):
            all_streamed.set()
        return script([])

    monkeypatch.setattr(kopf_private, "watch_stream", recording)
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

    async def failing_once(settings: kopf.OperatorSettings, resource: kopf_private.Resource) -> AsyncIterator[Event]:
        attempts.append(resource.plural)
        if resource.plural != "pods":
            await asyncio.Event().wait()
        if attempts.count("pods") == 1:
            yield {"type": None, "object": version(p1.obj(), 1)}
            raise RuntimeError("APIServerError: 503 after retries")
        async for event in script(listing(version(p1.obj(), 2), version(p2.obj(), 3))):
            yield event

    monkeypatch.setattr(kopf_private, "watch_stream", failing_once)
    sink = Sink()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    sync = watching.InitialSync(sink, [("", "pods")])
    holdings = watching.Holdings({"pods": sink.on_pod})
    streams = watching.Streams(sync, holdings, [("", "pods")], retry=0.5, sleep=sleep)
    await run_until_delivered(streams, sink, 3)

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


def test_the_seam_streams_each_kind_cluster_wide_with_kopf_s_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kopf_private.watch_stream` is the one call into kopf's stream; the other tests script it."""
    calls: list[dict[str, Any]] = []

    def infinite_watch(**kwargs: Any) -> AsyncIterator[Event]:
        calls.append(kwargs)
        return script([])

    monkeypatch.setattr(kopf_private.kopf_watching, "infinite_watch", infinite_watch)
    settings = kopf.OperatorSettings()
    resource = kopf_private.resource("", "v1", "pods", namespaced=True)

    kopf_private.watch_stream(settings, resource)

    assert calls == [{"settings": settings, "resource": resource, "namespace": None}]


# -- re-listing: what a new listing lacks is deleted at once -------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.missed: list[str] = []

    def missed_deletion(self, kind: str) -> None:
        self.missed.append(kind)


def pod(name: str, rv: int, *, uid: str | None = None) -> dict[str, Any]:
    obj = version(make_pod().name(name).obj(), rv)
    obj["metadata"]["uid"] = uid or f"uid-{name}"
    return obj


def watched(event_type: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "object": obj}


def feed(streams: watching.Streams, plural: str, events: Sequence[Event]) -> None:
    """Hand the items of kopf's stream of ``plural`` on, as the stream's task does."""
    for event in events:
        streams.handle(plural, event)


@pytest.mark.parametrize(
    ("events", "deleted"),
    [
        pytest.param([*listing(pod("a", 1))], [], id="the first listing deletes nothing"),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), *listing(pod("a", 1))],
            [("b", "2")],
            id="a pod the new listing lacks is deleted with its last known state",
        ),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), *listing()],
            [("a", "1"), ("b", "2")],
            id="an empty new listing deletes every pod held",
        ),
        pytest.param(
            [*listing(pod("a", 1)), watched("ADDED", pod("c", 5)), *listing(pod("a", 1))],
            [("c", "5")],
            id="a pod the watch added and nobody saw deleted is deleted",
        ),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), watched("MODIFIED", pod("b", 7)), *listing(pod("a", 1))],
            [("b", "7")],
            id="a pod the watch updated before it was deleted unseen is deleted with its update",
        ),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), watched("DELETED", pod("b", 6)), *listing(pod("a", 1))],
            [],
            id="a pod the watch reported deleted is not deleted twice",
        ),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), *listing(pod("a", 1), pod("b", 9, uid="uid-b2"))],
            [],
            id="a pod re-created under its name is replaced not deleted",
        ),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), *listing(pod("a", 1), pod("b", 2))],
            [],
            id="a pod the new listing holds is kept",
        ),
        pytest.param(
            [*listing(pod("a", 1), pod("b", 2)), {"type": None, "object": pod("b", 2)}, *listing(pod("a", 1))],
            [],
            id="a listing cut short counts with the next one: what either delivered is kept",
        ),
    ],
)
def test_the_end_of_a_new_listing_deletes_at_once_what_it_lacked(
    events: list[Event], deleted: list[tuple[str, str]]
) -> None:
    sink, recorder = Sink(), Recorder()
    streams = watching.register(sink, recorder=recorder).streams
    reported = [e["object"]["metadata"]["name"] for e in events if isinstance(e, dict) and e["type"] == "DELETED"]

    feed(streams, PODS, events)

    if deleted:
        assert sink.delivered[-len(deleted) :] == [("pod", "DELETED", name, rv) for name, rv in deleted], (
            "handed on right after the listing, as a watched deletion"
        )
    assert len([d for d in sink.delivered if d[1] == "DELETED"]) == len(deleted) + len(reported), "nothing else"
    assert recorder.missed == ["pods"] * len(deleted)


def test_a_new_listing_of_one_kind_deletes_nothing_of_another() -> None:
    sink, recorder = Sink(), Recorder()
    streams = watching.register(sink, recorder=recorder).streams
    feed(streams, NODES, listing(version(make_node().name("n").obj(), 1)))
    feed(streams, PODS, [*listing(pod("a", 2)), *listing()])

    assert [(kind, name) for kind, event_type, name, _ in sink.delivered if event_type == "DELETED"] == [("pod", "a")]
    assert recorder.missed == ["pods"]


async def test_a_stream_started_again_after_a_failure_deletes_what_its_new_listing_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    attempts = 0

    async def failing_once(settings: kopf.OperatorSettings, resource: kopf_private.Resource) -> AsyncIterator[Event]:
        nonlocal attempts
        attempts += 1
        if resource.plural != "pods":
            await asyncio.Event().wait()
        if attempts == 1:
            for event in listing(pod("kept", 1), pod("gone", 2)):
                yield event
            raise RuntimeError("APIServerError: 503 after retries")
        async for event in script(listing(pod("kept", 1))):
            yield event

    monkeypatch.setattr(kopf_private, "watch_stream", failing_once)
    sink, recorder = Sink(), Recorder()

    async def sleep(seconds: float) -> None:
        pass

    holdings = watching.Holdings({"pods": sink.on_pod})
    streams = watching.Streams(
        watching.InitialSync(sink, [("", "pods")]), holdings, [("", "pods")], recorder=recorder, sleep=sleep
    )
    await run_until_delivered(streams, sink, 4)

    assert sink.delivered == [
        ("pod", "MODIFIED", "kept", "1"),
        ("pod", "MODIFIED", "gone", "2"),
        ("pod", "MODIFIED", "kept", "1"),
        ("pod", "DELETED", "gone", "2"),
    ]
    assert recorder.missed == ["pods"]
    assert holdings.objects["pods"].keys() == {("default", "kept")}


class CoreSink:
    """The scheduler core's event handlers (cache and queue) as the watches' sink."""

    def __init__(self, handlers: EventHandlers) -> None:
        self.handlers = handlers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handlers, name)

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        pass

    def mark_synced(self) -> None:
        pass


def test_pods_a_new_listing_lacks_leave_the_cache_and_the_queue_and_an_assumed_pod_it_holds_stays() -> None:
    """What a deleted pod leaves behind goes as for a watched deletion; the binding usher has in flight
    for a pod the listing shows unbound yet is not undone (the pod exists: it is listed)."""
    handlers = EventHandlers(Cache(), scheduling_queue(FakeClock()), {"usher"})
    streams = watching.register(CoreSink(handlers)).streams  # type: ignore[arg-type]
    feed(streams, NODES, listing(version(make_node().name("n").obj(), 1)))
    bound = version(make_pod().name("bound").node("n").req(cpu="1").obj(), 2)
    pending, assumed = pod("pending", 3), pod("assumed", 4)
    feed(streams, PODS, listing(bound, pending, assumed))
    handlers.cache.assume(PodInfo.from_api(assumed), NodeName("n"))  # usher's binding cycle, under way
    assert handlers.cache.sizes() == {"assumed_pods": 1, "pods": 2, "nodes": 1}
    assert pod_key("default", "pending") in handlers.queue

    feed(streams, PODS, listing(pod("assumed", 4)))  # kopf's listing after a 410: the binding not in yet

    assert handlers.cache.pod(pod_key("default", "bound")) is None
    assert pod_key("default", "pending") not in handlers.queue
    assert handlers.cache.is_assumed(pod_key("default", "assumed"))
    assert handlers.cache.sizes() == {"assumed_pods": 1, "pods": 1, "nodes": 1}
    assert handlers.cache.node("n").requested.get("cpu", 0) == 0  # type: ignore[union-attr]


def test_the_facade_exports_exactly_its_public_names() -> None:
    public = {
        name for name, value in vars(watching).items() if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert sorted(watching.__all__) == sorted(public)
