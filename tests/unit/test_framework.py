"""The framework runtime: extension point order, first rejection wins, weighted normalised scores,
plugin bugs contained."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from tests.builders import make_node, make_pod
from usher.core.cache import Cache, NodeInfo
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import RECORD_PLUGIN_METRICS, Framework, PluginSet
from usher.core.plugins.queuesort import PrioritySort
from usher.core.types import Code, NodeName, PodInfo, Status, unschedulable


@dataclass
class Calls:
    log: list[str] = field(default_factory=list)


@dataclass
class FilterBy:
    name: str
    reject: set[str]
    calls: Calls

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.calls.log.append(f"{self.name}:{node.name}")
        return unschedulable(f"{self.name} says no") if node.name in self.reject else Status()


@dataclass
class ScoreBy:
    name: str
    scores: dict[str, int]

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        return self.scores[node.name], Status()


@dataclass
class NormalizedScoreBy(ScoreBy):
    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]) -> Status:
        top = max(scores.values()) or 1
        for name, value in scores.items():
            scores[name] = value * 100 // top
        return Status()


@dataclass
class Recorder:
    points: list[tuple[str, str]] = field(default_factory=list)
    plugins: list[tuple[str, str, str]] = field(default_factory=list)

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        self.points.append((point, status))

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        self.plugins.append((plugin, point, status))


def nodes(*names: str) -> list[NodeInfo]:
    cache = Cache()
    for name in names:
        cache.add_or_update_node(make_node().name(name).obj())
    return cache.node_infos()


POD = PodInfo.from_api(make_pod().obj())


def test_filters_run_in_order_and_the_first_rejection_wins() -> None:
    calls = Calls()
    fw = Framework(
        "usher",
        PluginSet(queue_sort=PrioritySort(), filter=[FilterBy("A", {"n1"}, calls), FilterBy("B", {"n1", "n2"}, calls)]),
    )  # type: ignore[list-item]
    n1, n2 = nodes("n1", "n2")
    assert fw.run_filter(CycleState(), POD, n1) == Status(Code.UNSCHEDULABLE, ("A says no",), "A")
    assert fw.run_filter(CycleState(), POD, n2).plugin == "B"
    assert calls.log == ["A:n1", "A:n2", "B:n2"]


def test_scores_are_normalised_per_plugin_then_weighted_and_summed() -> None:
    raw = ScoreBy("Raw", {"n1": 10, "n2": 20})
    norm = NormalizedScoreBy("Norm", {"n1": 5, "n2": 1})
    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), score=[(raw, 1), (norm, 3)]))  # type: ignore[list-item]
    totals, status = fw.run_score(CycleState(), POD, nodes("n1", "n2"))
    assert status.ok
    assert totals == {"n1": 10 + 3 * 100, "n2": 20 + 3 * 20}


@dataclass
class KeptListNormalizedScoreBy(ScoreBy):
    """Scores all nodes from a list it keeps between cycles, and normalises lists in place."""

    kept: list[int] = field(default_factory=list)

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        self.kept = [self.scores[node.name] for node in nodes] if not self.kept else self.kept
        return self.kept, Status()

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]) -> Status:
        raise AssertionError("the runtime rescales the list")

    def normalize_score_list(
        self, state: CycleState, pod: PodInfo, names: Sequence[NodeName], scores: list[int]
    ) -> Status:
        top = max(scores) or 1
        scores[:] = [value * 100 // top for value in scores]
        return Status()


def test_a_list_normaliser_rescales_the_scores_but_not_the_list_a_batch_keeps() -> None:
    norm = KeptListNormalizedScoreBy("Norm", {"n1": 5, "n2": 1})
    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), score=[(norm, 3)]))  # type: ignore[list-item]
    for _ in range(2):
        totals, status = fw.run_score(CycleState(), POD, nodes("n1", "n2"))
        assert status.ok
        assert totals == {"n1": 3 * 100, "n2": 3 * 20}
        assert norm.kept == [5, 1]


def test_a_score_outside_0_to_100_is_an_error() -> None:
    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), score=[(ScoreBy("Wild", {"n1": 500}), 1)]))  # type: ignore[list-item]
    _, status = fw.run_score(CycleState(), POD, nodes("n1"))
    assert status.code is Code.ERROR and "outside 0-100" in status.message


def test_a_plugin_that_raises_fails_the_attempt_not_the_scheduler() -> None:
    @dataclass
    class Buggy:
        name: str = "Buggy"

        def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
            raise ZeroDivisionError("oops")

    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), filter=[Buggy()]))  # type: ignore[list-item]
    status = fw.run_filter(CycleState(), POD, nodes("n1")[0])
    assert status.code is Code.ERROR and status.plugin == "Buggy" and "ZeroDivisionError: oops" in status.message


def test_pre_enqueue_stops_at_the_first_rejection_and_is_timed() -> None:
    recorder = Recorder()

    @dataclass
    class Gate:
        name: str
        ok: bool

        def pre_enqueue(self, pod: PodInfo) -> Status:
            return Status() if self.ok else unschedulable(f"{self.name} waits")

    fw = Framework(
        "usher",
        PluginSet(queue_sort=PrioritySort(), pre_enqueue=[Gate("A", True), Gate("B", False), Gate("C", False)]),
        recorder=recorder,
    )  # type: ignore[list-item]
    status = fw.run_pre_enqueue(POD)
    assert (status.plugin, status.message) == ("B", "B waits")
    assert recorder.points == [("PreEnqueue", "Unschedulable")]
    assert [p[0] for p in recorder.plugins] == ["A", "B"]


def test_plugin_timings_are_recorded_only_on_sampled_cycles() -> None:
    recorder = Recorder()
    fw = Framework(
        "usher", PluginSet(queue_sort=PrioritySort(), filter=[FilterBy("A", set(), Calls())]), recorder=recorder
    )  # type: ignore[list-item]
    n1 = nodes("n1")[0]
    fw.run_filter(CycleState(), POD, n1)
    assert recorder.plugins == []
    sampled = CycleState()
    sampled.write(RECORD_PLUGIN_METRICS, True)
    fw.run_filter(sampled, POD, n1)
    assert recorder.plugins == [("A", "Filter", "Success")]


def test_bind_plugins_skip_to_the_next_and_unreserve_runs_in_reverse() -> None:
    log: list[str] = []

    @dataclass
    class Binder:
        name: str
        skip: bool

        async def bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
            log.append(f"bind:{self.name}")
            return Status(Code.SKIP) if self.skip else Status()

    @dataclass
    class Reserver:
        name: str

        def reserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
            log.append(f"reserve:{self.name}")
            return Status()

        def unreserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> None:
            log.append(f"unreserve:{self.name}")

    fw = Framework(
        "usher",
        PluginSet(
            queue_sort=PrioritySort(),
            bind=[Binder("X", True), Binder("Y", False)],
            reserve=[Reserver("R1"), Reserver("R2")],
        ),  # type: ignore[list-item]
    )
    node = NodeName("n1")
    assert fw.run_reserve(CycleState(), POD, node).ok
    fw.run_unreserve(CycleState(), POD, node)
    assert asyncio.run(fw.run_bind(CycleState(), POD, node)).plugin == "Y"
    assert log == ["reserve:R1", "reserve:R2", "unreserve:R2", "unreserve:R1", "bind:X", "bind:Y"]


def test_permit_wait_collects_the_waiting_plugins_and_the_shortest_timeout() -> None:
    @dataclass
    class Waiter:
        name: str
        timeout: float

        def permit(self, state: CycleState, pod: PodInfo, node: NodeName) -> tuple[Status, float]:
            return Status(Code.WAIT), self.timeout

    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), permit=[Waiter("A", 10), Waiter("B", 3)]))  # type: ignore[list-item]
    outcome = fw.run_permit(CycleState(), POD, NodeName("n1"))
    assert (outcome.status.code, outcome.timeout, outcome.waiting) == (Code.WAIT, 3, {"A", "B"})


def test_a_bind_plugin_that_raises_fails_the_binding_cycle_cleanly() -> None:
    @dataclass
    class Exploding:
        name: str = "Exploding"

        async def bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
            raise ConnectionResetError("peer went away")

    recorder = Recorder()
    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), bind=[Exploding()]), recorder=recorder)  # type: ignore[list-item]
    status = asyncio.run(fw.run_bind(CycleState(), POD, NodeName("n1")))
    assert status.code is Code.ERROR and status.plugin == "Exploding" and "peer went away" in status.message
    assert recorder.points == [("Bind", "Error")]
