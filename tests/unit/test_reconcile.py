"""The reconciler, the safety net for deletions that slip past the watch and its re-listing, finds them, only them.

A held object is declared gone only when two LISTs lack it and nothing about it
was delivered since the first was sent. The LISTs are scripted; a script step can
deliver a watch event while a LIST is in flight, as kopf would. Deliveries go
through `Holdings.deliver`, the function the watch streams call. The reconciler's
sleeps are injected: they record how long it meant to wait and return at once
(a scripted step can deliver an event meanwhile), so no test waits for time.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from usher.adapters import watching
from usher.adapters.metrics import Metrics


class Sleeps:
    """The reconciler's sleep: records each wait, runs what the watch delivers meanwhile, and returns at once."""

    def __init__(self) -> None:
        self.slept: list[float] = []
        self.meanwhile: list[Callable[[], None]] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.meanwhile:
            self.meanwhile.pop(0)()
        await asyncio.sleep(0)  # yield, as a real sleep would: run() must never starve the loop


class Sink:
    """Records every delivery as (kind, event type, object); the objects are kept by identity."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str | None, Mapping[str, Any]]] = []
        self.deleted = asyncio.Event()

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append(("pods", event_type, raw))
        if event_type == "DELETED":
            self.deleted.set()

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append(("nodes", event_type, raw))

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append(("namespaces", event_type, raw))

    def on_disruption_budget(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append(("poddisruptionbudgets", event_type, raw))

    def on_service(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append(("services", event_type, raw))

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append((kind, event_type, raw))

    def on_volume(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self.delivered.append((kind, event_type, raw))

    def mark_synced(self) -> None:
        pass

    def deletions(self) -> list[tuple[str, str]]:
        return [(kind, raw["metadata"]["name"]) for kind, event_type, raw in self.delivered if event_type == "DELETED"]


class Recorder:
    def __init__(self) -> None:
        self.missed: list[str] = []

    def missed_deletion(self, kind: str) -> None:
        self.missed.append(kind)


Step = Collection[str] | Exception | None
"""One scripted LIST answer: the keys, a failure to raise, or None (the kind is not served)."""


class ScriptedLister:
    """Answers each kind's successive LISTs from a script (the last answer repeats; unscripted kinds are empty).

    ``during`` runs while a LIST is in flight (after it was sent, before it answers): ``during[(plural, n)]``
    for the n-th LIST (from 0) of that kind.
    """

    def __init__(
        self,
        script: Mapping[str, list[Step]],
        during: Mapping[tuple[str, int], Callable[[], None]] | None = None,
    ) -> None:
        self.script = script
        self.during = during or {}
        self.calls: list[str] = []

    async def __call__(self, group: str, plural: str) -> Collection[str] | None:
        n = self.calls.count(plural)
        self.calls.append(plural)
        await asyncio.sleep(0)  # the request is out: the watch may deliver meanwhile
        if (plural, n) in self.during:
            self.during[(plural, n)]()
        answers = self.script.get(plural) or [()]
        answer = answers[min(n, len(answers) - 1)]
        if isinstance(answer, Exception):
            raise answer
        return answer


DEFAULTS = watching.ReconcileSettings()
"""The shipped settings: the injected sleeps make their 300 s and 10 s cost nothing."""


def setup(
    settings: watching.ReconcileSettings = DEFAULTS,
    sleeps: Sleeps | None = None,
) -> tuple[Sink, watching.Reconciler, Recorder]:
    sink, recorder = Sink(), Recorder()
    watches = watching.register(sink, reconcile=settings, recorder=recorder, sleep=sleeps or Sleeps())
    return sink, watches.reconciler, recorder


def uid(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


# -- what is declared gone, and what never is -------------------------------------


async def test_an_object_absent_from_two_lists_with_nothing_delivered_between_is_deleted_once() -> None:
    sink, reconciler, recorder = setup()
    kept, gone = make_pod().name("kept").obj(), make_pod().name("gone").obj()
    reconciler.holdings.deliver("pods", "MODIFIED", kept)
    reconciler.holdings.deliver("pods", "MODIFIED", gone)
    lister = ScriptedLister({"pods": [[uid(kept)]]})

    assert await reconciler.round(lister) == 1
    assert await reconciler.round(lister) == 0, "a deletion is delivered once"

    assert sink.deletions() == [("pods", "gone")]
    assert sink.delivered[-1][2] is gone, "the deletion carries the last known object, as kopf's would"
    assert recorder.missed == ["pods"]
    assert lister.calls == ["pods", "pods", "pods"], "the second round found no suspect: one LIST only"


def redeliver(
    reconciler: watching.Reconciler, obj: dict[str, Any], *, event_type: str = "MODIFIED"
) -> Callable[[], None]:
    return lambda: reconciler.holdings.deliver("pods", event_type, obj)


@pytest.mark.parametrize(
    "during_list",
    [
        pytest.param(0, id="updated by the watch while the first LIST is in flight"),
        pytest.param(1, id="updated by the watch while the second LIST is in flight"),
    ],
)
async def test_an_object_the_watch_delivers_after_the_first_list_was_sent_is_never_deleted(during_list: int) -> None:
    sink, reconciler, recorder = setup()
    pod = make_pod().name("p")
    reconciler.holdings.deliver("pods", "MODIFIED", pod.obj())
    # Neither LIST has it (created or updated after their snapshots, say): only the delivery's order counts.
    lister = ScriptedLister({"pods": [()]}, during={("pods", during_list): redeliver(reconciler, pod.obj())})

    assert await reconciler.round(lister) == 0

    assert sink.deletions() == [] and recorder.missed == []


async def test_an_object_the_watch_creates_after_the_first_list_was_sent_is_never_deleted() -> None:
    sink, reconciler, _ = setup()
    new = make_pod().name("new").obj()
    lister = ScriptedLister({"pods": [()]}, during={("pods", 0): redeliver(reconciler, new)})
    reconciler.holdings.deliver("pods", "MODIFIED", make_pod().name("old").obj())  # so that pods are listed

    await reconciler.round(lister)

    assert sink.deletions() == [("pods", "old")]


async def test_a_pod_re_created_under_its_name_while_kopf_was_away_is_kept_once_kopf_delivers_it() -> None:
    """The sink knows pods by name: a deletion of the old uid would delete the new pod from the cache."""
    sink, reconciler, _ = setup()
    old, new = make_pod().name("p").obj(), make_pod().name("p").obj()
    reconciler.holdings.deliver("pods", "MODIFIED", old)
    lister = ScriptedLister({"pods": [[uid(new)]]}, during={("pods", 0): redeliver(reconciler, new)})

    assert await reconciler.round(lister) == 0
    assert await reconciler.round(lister) == 0

    assert sink.deletions() == []


async def test_an_object_back_in_the_second_list_is_kept() -> None:
    sink, reconciler, _ = setup()
    pod = make_pod().name("p").obj()
    reconciler.holdings.deliver("pods", "MODIFIED", pod)
    lister = ScriptedLister({"pods": [(), [uid(pod)]]})

    assert await reconciler.round(lister) == 0

    assert sink.deletions() == []
    assert lister.calls == ["pods", "pods"]


async def test_a_deletion_the_watch_is_only_late_with_is_delivered_once_and_not_counted_as_missed() -> None:
    sink, reconciler, recorder = setup()
    pod = make_pod().name("p").obj()
    reconciler.holdings.deliver("pods", "MODIFIED", pod)
    lister = ScriptedLister({"pods": [()]}, during={("pods", 1): redeliver(reconciler, pod, event_type="DELETED")})

    assert await reconciler.round(lister) == 0

    assert sink.deletions() == [("pods", "p")]
    assert recorder.missed == []


async def test_the_second_list_waits_confirm_after_seconds_for_the_watch_to_catch_up() -> None:
    sleeps = Sleeps()
    sink, reconciler, recorder = setup(watching.ReconcileSettings(confirm_after=7.0), sleeps)
    pod = make_pod().name("p").obj()
    reconciler.holdings.deliver("pods", "MODIFIED", pod)
    sleeps.meanwhile.append(redeliver(reconciler, pod, event_type="DELETED"))  # the watch is only late

    assert await reconciler.round(ScriptedLister({"pods": [()]})) == 0

    assert sleeps.slept == [7.0], "between the two LISTs, and only there"
    assert sink.deletions() == [("pods", "p")], "the watch's deletion, once"
    assert recorder.missed == []


# -- every kind, through the watch stream's handler ----------------------------------


@pytest.mark.parametrize(
    ("group", "plural", "obj"),
    [
        pytest.param("", "pods", make_pod().name("x").obj(), id="a pod"),
        pytest.param("", "nodes", make_node().name("x").obj(), id="a node"),
        pytest.param("", "namespaces", {"metadata": {"name": "x", "uid": "ns-x"}}, id="a namespace"),
        *(
            pytest.param(
                "resource.k8s.io", plural, {"metadata": {"name": "x", "uid": f"{plural}-x"}}, id=f"a {plural[:-1]}"
            )
            for plural in watching.DRA_RESOURCES
        ),
    ],
)
async def test_what_the_watch_stream_delivered_and_then_vanished_reaches_the_sink_as_deleted(
    group: str, plural: str, obj: dict[str, Any]
) -> None:
    sink, recorder = Sink(), Recorder()
    watches = watching.register(sink, recorder=recorder, sleep=Sleeps())
    watches.streams.handle(plural, {"type": "ADDED", "object": obj})  # as the kind's stream hands it on
    lister = ScriptedLister({})

    assert await watches.reconciler.round(lister) == 1

    assert sink.delivered == [(plural, "MODIFIED", obj), (plural, "DELETED", obj)]
    assert recorder.missed == [plural]
    assert [call for call in lister.calls if call == plural] == [plural, plural]
    assert set(lister.calls) == {plural}, "kinds holding nothing are not listed"


# -- failures ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answers",
    [
        pytest.param([RuntimeError("connection reset"), (), ()], id="the first LIST fails"),
        pytest.param([(), RuntimeError("410 Gone: continue token expired"), (), ()], id="the second LIST fails"),
    ],
)
async def test_a_failed_list_is_logged_and_the_kind_looked_at_again_next_round(
    answers: list[Step], caplog: pytest.LogCaptureFixture
) -> None:
    sink, reconciler, _ = setup()
    reconciler.holdings.deliver("pods", "MODIFIED", make_pod().name("gone").obj())
    reconciler.holdings.deliver("nodes", "MODIFIED", make_node().name("gone-node").obj())
    lister = ScriptedLister({"pods": answers})

    with caplog.at_level(logging.WARNING):
        assert await reconciler.round(lister) == 1, "the other kinds are still looked at"
    assert sink.deletions() == [("nodes", "gone-node")]
    assert "looking for missed deletions of pods failed" in caplog.text

    assert await reconciler.round(lister) == 1
    assert sink.deletions() == [("nodes", "gone-node"), ("pods", "gone")]


async def test_run_keeps_going_round_after_round_past_a_failure() -> None:
    sleeps = Sleeps()
    settings = watching.ReconcileSettings(interval=300.0, jitter=0.2, confirm_after=10.0)
    sink, reconciler, _ = setup(settings, sleeps)
    reconciler.holdings.deliver("pods", "MODIFIED", make_pod().name("gone").obj())
    lister = ScriptedLister({"pods": [RuntimeError("apiserver unavailable"), ()]})

    task = asyncio.create_task(reconciler.run(lister))
    try:
        await asyncio.wait_for(sink.deleted.wait(), timeout=5)  # a guard against a hang, not a time window
    finally:
        task.cancel()

    assert sink.deletions() == [("pods", "gone")]
    before_first, before_second, confirm = sleeps.slept[:3]
    assert 240.0 <= before_first <= 360.0 and 240.0 <= before_second <= 360.0, "each round after a jittered interval"
    assert confirm == 10.0, "the second round found the suspect and waited confirm_after"
    assert lister.calls[:3] == ["pods", "pods", "pods"]


async def test_a_kind_the_api_server_does_not_serve_deletes_nothing() -> None:
    sink, reconciler, _ = setup()
    reconciler.holdings.deliver("resourceslices", "MODIFIED", {"metadata": {"name": "s", "uid": "s"}})

    assert await reconciler.round(ScriptedLister({"resourceslices": [None]})) == 0

    assert sink.deletions() == []


def test_rounds_are_spread_by_the_jitter() -> None:
    settings = watching.ReconcileSettings(interval=300.0, jitter=0.2)
    reconciler = watching.Reconciler(watching.Holdings({}), (), settings=settings, rng=random.Random(7))

    waits = [reconciler.next_wait() for _ in range(100)]

    assert all(240.0 <= wait <= 360.0 for wait in waits)
    assert max(waits) - min(waits) > 60.0


def test_missed_deletions_are_counted_by_kind_in_prometheus() -> None:
    metrics = Metrics()
    metrics.missed_deletion("nodes")
    metrics.missed_deletion("nodes")

    assert 'usher_missed_deletions_total{kind="nodes"} 2.0' in metrics.exposition().decode()
