"""The in-tree plugins of this stage against kube-scheduler's documented semantics."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.noderesources import NodeResourcesFit, parse_args
from usher.core.plugins.nodeunschedulable import NodeUnschedulable, node_schedulable
from usher.core.plugins.schedulinggates import MESSAGE, SchedulingGates, gates_removed_from_this_pod
from usher.core.types import Code, PodInfo, QueueingHint


def info(pod: dict[str, Any]) -> PodInfo:
    return PodInfo.from_api(pod)


def node_info(node: dict[str, Any], *pods: dict[str, Any]) -> Any:
    cache = Cache()
    cache.add_or_update_node(node)
    for pod in pods:
        cache.add_or_update_pod(info(pod))
    return cache.node_infos()[0]


# -- SchedulingGates ------------------------------------------------------------


def test_scheduling_gates_reject_with_the_api_servers_message() -> None:
    status = SchedulingGates().pre_enqueue(info(make_pod().gates("a", "b").obj()))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == MESSAGE == "Scheduling is blocked due to non-empty scheduling gates"
    assert SchedulingGates().pre_enqueue(info(make_pod().obj())).ok


@pytest.mark.parametrize(
    ("new_gates", "same_pod", "hint"),
    [
        ([], True, QueueingHint.QUEUE),
        (["b"], True, QueueingHint.QUEUE_SKIP),
        ([], False, QueueingHint.QUEUE_SKIP),
    ],
    ids=["all gates of this pod removed", "a gate left", "another pod's gates removed"],
)
def test_scheduling_gates_hint(new_gates: list[str], same_pod: bool, hint: QueueingHint) -> None:
    pod = info(make_pod().uid("u1").gates("a", "b").obj())
    new = make_pod().uid("u1" if same_pod else "u2").gates(*new_gates).obj()
    assert gates_removed_from_this_pod(pod, None, new) is hint


# -- NodeUnschedulable ----------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "fits"),
    [
        (None, False),
        ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
    ids=["no toleration", "exact toleration", "tolerate everything", "wrong effect", "other key"],
)
def test_node_unschedulable_filter(toleration: dict[str, str] | None, fits: bool) -> None:
    pod = make_pod().obj()
    if toleration:
        pod["spec"]["tolerations"] = [toleration]
    node = node_info(make_node().unschedulable().obj())
    status = NodeUnschedulable().filter(CycleState(), info(pod), node)
    assert status.ok is fits
    if not fits:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.message == "node(s) were unschedulable"


def test_node_unschedulable_hint_queues_on_an_uncordoned_node_only() -> None:
    pod = info(make_pod().obj())
    assert node_schedulable(pod, None, make_node().obj()) is QueueingHint.QUEUE
    assert node_schedulable(pod, None, make_node().unschedulable().obj()) is QueueingHint.QUEUE_SKIP


# -- NodeResourcesFit -------------------------------------------------------------


def test_fit_counts_existing_pods_init_containers_and_overhead() -> None:
    fit = NodeResourcesFit(parse_args({}))
    node = node_info(
        make_node().name("node").capacity(cpu="2", memory="4Gi", pods=10).obj(),
        make_pod().node("node").req(cpu="1").obj(),
    )
    assert fit.filter(CycleState(), info(make_pod().req(cpu="1").obj()), node).ok
    init_heavy = make_pod().req(cpu="100m").init_container(cpu="1500m").obj()
    assert fit.filter(CycleState(), info(init_heavy), node).message == "Insufficient cpu"
    with_overhead = make_pod().req(cpu="900m").overhead(cpu="200m").obj()
    assert fit.filter(CycleState(), info(with_overhead), node).message == "Insufficient cpu"


def test_fit_reports_every_missing_resource() -> None:
    fit = NodeResourcesFit(parse_args({}))
    node = node_info(make_node().capacity(cpu="1", memory="1Gi", pods=0).obj())
    status = fit.filter(CycleState(), info(make_pod().req(cpu="2", memory="2Gi").obj()), node)
    assert status.reasons == ("Too many pods", "Insufficient cpu", "Insufficient memory")


def test_a_request_beyond_the_node_s_allocatable_is_unresolvable_one_beyond_its_free_room_is_not() -> None:
    """kube-scheduler v1.37's fitsRequest marks a shortfall Unresolvable when the request exceeds allocatable:
    no eviction can make room, so DefaultPreemption leaves the node out. "Too many pods" never is."""
    fit = NodeResourcesFit(parse_args({}))
    busy = make_pod().req(cpu="1500m", memory="1Gi", **{"a.com/x": "1"}).node("n").obj()
    node = node_info(make_node().name("n").capacity(cpu="2", memory="2Gi", pods=1, **{"a.com/x": "2"}).obj(), busy)
    cases = {
        "room after evictions": (make_pod().req(cpu="1"), Code.UNSCHEDULABLE, ("Too many pods", "Insufficient cpu")),
        "more cpu than the node has": (make_pod().req(cpu="3"), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None),
        "more memory than the node has": (make_pod().req(memory="3Gi"), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None),
        "an extended resource within": (make_pod().req(**{"a.com/x": "2"}), Code.UNSCHEDULABLE, None),
        "an extended resource beyond": (make_pod().req(**{"a.com/x": "3"}), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None),
        "one the node lacks": (make_pod().req(**{"b.com/y": "1"}), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None),
        "one of two beyond": (make_pod().req(cpu="1", memory="3Gi"), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, None),
    }
    for name, (pod, code, reasons) in cases.items():
        status = fit.filter(CycleState(), info(pod.obj()), node)
        assert status.code is code, name
        assert reasons is None or status.reasons == reasons, name
        # The batch filter answers as the per-node one, also with nodes failing alike in both ways.
        roomy = node_info(make_node().name("m").capacity(cpu="8", memory="8Gi", pods=0, **{"a.com/x": "8"}).obj())
        batch = fit.filter_nodes(CycleState(), info(pod.obj()), [node, roomy, node])
        assert [b.code if b else None for b in batch] == [
            code,
            fit.filter(CycleState(), info(pod.obj()), roomy).code,
            code,
        ], name
        assert batch[0] is not None and batch[0].reasons == status.reasons, name


def test_fit_reasons_come_in_kube_schedulers_order() -> None:
    """Pods, cpu, memory, ephemeral-storage (fitsRequest's order), then the others by name: not alphabetical."""
    fit = NodeResourcesFit(parse_args({}))
    node = node_info(make_node().capacity(cpu="1", memory="1Gi", pods=0).obj())
    pod = make_pod().req(cpu="2", memory="2Gi", ephemeral_storage="1Gi").obj()
    pod["spec"]["containers"][0]["resources"]["requests"].update({"a.com/x": "1", "hugepages-2Mi": "2Mi"})
    status = fit.filter(CycleState(), info(pod), node)
    assert status.reasons == (
        "Too many pods",
        "Insufficient cpu",
        "Insufficient memory",
        "Insufficient ephemeral-storage",
        "Insufficient a.com/x",
        "Insufficient hugepages-2Mi",
    )


def test_a_resource_a_device_class_serves_is_left_to_dra_where_the_node_has_none_of_it() -> None:
    """kube-scheduler's shouldDelegateResourceToDRA (DRAExtendedResource)."""
    handle = FakeHandle()
    handle.dra.on_class(False, {"metadata": {"name": "gpu"}, "spec": {"extendedResourceName": "example.com/gpu"}})
    fit = NodeResourcesFit(parse_args({}), handle)
    none = node_info(make_node().name("n").obj())
    some = node_info(make_node().name("m").capacity(cpu="4", memory="8Gi", pods=10, **{"example.com/gpu": "1"}).obj())
    for pod in (
        make_pod().req(**{"example.com/gpu": "2"}).obj(),
        make_pod().req(**{"deviceclass.resource.kubernetes.io/gpu": "2"}).obj(),  # the class's implicit name
    ):
        assert fit.filter(CycleState(), info(pod), none).ok
        assert fit.filter_nodes(CycleState(), info(pod), [none]) == [None]
        assert fit.fits(CycleState(), info(pod), none)
    gpu = make_pod().req(**{"example.com/gpu": "2"}).obj()
    assert fit.filter(CycleState(), info(gpu), some).reasons == ("Insufficient example.com/gpu",)
    # A resource no class serves is the node's to give.
    other = make_pod().req(**{"example.com/fpga": "1"}).obj()
    assert fit.filter(CycleState(), info(other), none).reasons == ("Insufficient example.com/fpga",)
    # Without the class (or the handle), the node's allocatable decides alone.
    assert not NodeResourcesFit(parse_args({})).filter(CycleState(), info(gpu), none).ok


def test_a_device_class_retries_the_pods_asking_for_what_it_serves() -> None:
    """kube-scheduler's isSchedulableAfterDeviceClassEvent."""
    fit = NodeResourcesFit(parse_args({}))
    [event] = [e for e in fit.events_to_register() if e.event.resource.name == "DEVICE_CLASS"]
    assert event.hint is not None
    pod = info(make_pod().req(**{"example.com/gpu": "1", "deviceclass.resource.kubernetes.io/tpu": "1"}).obj())

    def cls(name: str, serves: str | None = None) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"extendedResourceName": serves} if serves else {}}

    assert event.hint(pod, None, cls("gpu", "example.com/gpu")) is QueueingHint.QUEUE
    assert event.hint(pod, None, cls("tpu")) is QueueingHint.QUEUE, "added: serves its implicit name"
    assert event.hint(pod, None, cls("fpga", "example.com/fpga")) is QueueingHint.QUEUE_SKIP
    assert event.hint(pod, cls("gpu"), cls("gpu", "example.com/gpu")) is QueueingHint.QUEUE, "now serves it"
    assert event.hint(pod, cls("gpu", "example.com/gpu"), cls("gpu", "example.com/gpu")) is QueueingHint.QUEUE_SKIP
    assert event.hint(pod, cls("tpu"), cls("tpu")) is QueueingHint.QUEUE_SKIP, "an update keeps the implicit name"


def test_ignored_resources_and_groups_are_not_checked() -> None:
    fit = NodeResourcesFit(parse_args({"ignoredResources": ["a.com/x"], "ignoredResourceGroups": ["b.com"]}))
    node = node_info(make_node().capacity(cpu="1", memory="1Gi", pods=10).obj())
    pod = make_pod().req(**{"a.com/x": "1", "b.com/y": "1"}).obj()
    assert fit.filter(CycleState(), info(pod), node).ok


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("LeastAllocated", 75), ("MostAllocated", 25)],
)
def test_scoring_strategies(strategy: str, expected: int) -> None:
    fit = NodeResourcesFit(parse_args({"scoringStrategy": {"type": strategy}}))
    node = node_info(make_node().capacity(cpu="4", memory="4Gi", pods=10).obj())
    score, status = fit.score(CycleState(), info(make_pod().req(cpu="1", memory="1Gi").obj()), node)
    assert status.ok and score == expected


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_a_placement_scores_as_kube_schedulers_score_placement_most_allocated_over_its_nodes(strategy: str) -> None:
    """Fit.ScorePlacement: the members' (non-zero) requests plus what the domain's nodes hold, over what they
    offer, MostAllocated per resource whatever the node strategy; extended resources nobody asks for and
    ``pods`` are left out."""
    args = {"scoringStrategy": {"type": strategy, "resources": [
        {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "example.com/gpu", "weight": 5},
        {"name": "pods", "weight": 5},
    ]}}  # fmt: skip
    fit = NodeResourcesFit(parse_args(args))
    full = node_info(
        make_node().name("n0").capacity(cpu="4", memory="8Gi", pods=10).obj(),
        make_pod().name("other").node("n0").req(cpu="1", memory="1Gi").obj(),
    )
    empty = node_info(make_node().name("n1").capacity(cpu="4", memory="8Gi", pods=10).obj())
    members = [info(make_pod().name(f"m{i}").req(cpu="500m", memory="512Mi").obj()) for i in range(2)]
    # cpu: (1000 + 1000) / 8000 -> 25; memory: (1Gi + 1Gi) / 16Gi -> 12; gpu and pods left out.
    assert fit.score_placement(None, members, [full, empty]) == (25 + 12) // 2  # type: ignore[arg-type]
    # The members alone on the empty node: cpu 1000/4000 -> 25, memory 1Gi/8Gi -> 12; an empty pod counts
    # as 100m and 200Mi.
    assert fit.score_placement(None, members, [empty]) == (25 + 12) // 2  # type: ignore[arg-type]
    assert fit.score_placement(None, [info(make_pod().obj())], [empty]) == (2 + 2) // 2  # type: ignore[arg-type]
    assert fit.score_placement(None, members, [full]) == (50 + 25) // 2  # type: ignore[arg-type]


def test_an_empty_pod_scores_as_100m_and_200mi() -> None:
    fit = NodeResourcesFit(parse_args({}))
    node = node_info(make_node().capacity(cpu="1", memory="2000Mi", pods=10).obj())
    score, _ = fit.score(CycleState(), info(make_pod().obj()), node)
    assert score == (90 + 90) // 2


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"scoringStrategy": {"type": "X"}}, "scoringStrategy.type"),
        ({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}}, "scoringStrategy.resources[0].weight"),
        ({"scoringStrategy": {"resources": [{"weight": 1}]}}, "scoringStrategy.resources[0].name"),
        ({"ignoredResources": "cpu"}, "ignoredResources"),
        ({"other": 1}, "other"),
    ],
)
def test_bad_fit_args_name_their_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginArgsError) as raised:
        parse_args(args)
    assert raised.value.field == field


def test_the_fit_hint_queues_only_for_a_node_that_could_hold_the_pod() -> None:
    fit = NodeResourcesFit(parse_args({}))
    pod = info(make_pod().req(cpu="3").obj())
    small = make_node().capacity(cpu="2", memory="4Gi", pods=10).obj()
    big = make_node().capacity(cpu="4", memory="4Gi", pods=10).obj()
    assert fit._node_fits(pod, None, small) is QueueingHint.QUEUE_SKIP
    assert fit._node_fits(pod, None, big) is QueueingHint.QUEUE


def _fit_with_node(*pods: dict[str, Any]) -> tuple[NodeResourcesFit, FakeHandle]:
    """NodeResourcesFit whose handle knows node "n" (4 CPU, 10 pods) with ``pods`` on it."""
    handle = FakeHandle(cache=Cache())
    assert handle.cache is not None
    handle.cache.add_or_update_node(make_node().name("n").capacity(cpu="4", memory="8Gi", pods=10).obj())
    for pod in pods:
        handle.cache.add_or_update_pod(info(pod))
    return NodeResourcesFit(parse_args({}), handle), handle


@pytest.mark.parametrize(
    ("left_on_node", "nominated", "hint"),
    [
        ([], [], QueueingHint.QUEUE),
        (["2"], [], QueueingHint.QUEUE_SKIP),
        ([], [("2", 20)], QueueingHint.QUEUE_SKIP),
        ([], [("2", 10)], QueueingHint.QUEUE_SKIP),
        ([], [("2", 5)], QueueingHint.QUEUE),
    ],
    ids=[
        "the node now has room: queue",
        "the node still lacks room: skip",
        "the room is held for a nominated pod of higher priority: skip",
        "the room is held for a nominated pod of equal priority: skip",
        "a nominated pod of lower priority does not hold the room: queue",
    ],
)
def test_the_fit_hint_on_a_deleted_pod_looks_at_the_node_it_left(
    left_on_node: list[str], nominated: list[tuple[str, int]], hint: QueueingHint
) -> None:
    others = [make_pod().node("n").req(cpu=cpu).obj() for cpu in left_on_node]
    fit, handle = _fit_with_node(*others)
    for i, (cpu, priority) in enumerate(nominated):
        handle.nominator.nominate(info(make_pod().name(f"nominee-{i}").priority(priority).req(cpu=cpu).obj()), "n")
    waiting = info(make_pod().priority(10).req(cpu="3").obj())
    deleted = make_pod().node("n").req(cpu="1").obj()
    assert fit._room_freed(waiting, deleted, None) is hint


def test_the_fit_hint_counts_a_nominee_already_assumed_on_the_node_once() -> None:
    # Found by the upstream async-preemption spec: nominees in their binding cycle are both assumed on the
    # node and still nominated there; counted twice, the node looked full and a waiting pod was skipped.
    nominee = make_pod().name("nominee").priority(10).node("n").req(cpu="1").obj()
    fit, handle = _fit_with_node(nominee)
    handle.nominator.nominate(info(nominee), "n")
    waiting = info(make_pod().priority(10).req(cpu="3").obj())
    assert fit._room_freed(waiting, make_pod().node("n").req(cpu="1").obj(), None) is QueueingHint.QUEUE


def test_the_fit_hint_on_a_deleted_pod_without_a_node_or_one_it_does_not_know() -> None:
    fit, _ = _fit_with_node()
    waiting = info(make_pod().req(cpu="3").obj())
    assert fit._room_freed(waiting, make_pod().obj(), None) is QueueingHint.QUEUE_SKIP, "held no room anywhere"
    released = make_pod().obj()
    released["status"]["nominatedNodeName"] = "n"
    assert fit._room_freed(waiting, released, None) is QueueingHint.QUEUE, "a released nomination on n"
    elsewhere = make_pod().node("unknown").obj()
    assert fit._room_freed(waiting, elsewhere, None) is QueueingHint.QUEUE, "a node usher has not seen: retry"
    waiting_self = info(make_pod().name("self").priority(10).req(cpu="3").obj())
    fit2, handle = _fit_with_node()
    handle.nominator.nominate(waiting_self, "n")
    assert fit2._room_freed(waiting_self, make_pod().node("n").obj(), None) is QueueingHint.QUEUE, (
        "a pod's own nomination does not keep it out"
    )


def test_requested_to_capacity_ratio_follows_the_shape() -> None:
    args = parse_args(
        {
            "scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "cpu", "weight": 1}],
                "requestedToCapacityRatio": {
                    "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
                },
            }
        }
    )
    fit = NodeResourcesFit(args)
    node = node_info(make_node().capacity(cpu="4", memory="4Gi", pods=10).obj())
    score, _ = fit.score(CycleState(), info(make_pod().req(cpu="1").obj()), node)
    assert score == 25, "25 % utilisation on a 0->0, 100->10 shape scores 25 of 100"


@pytest.mark.parametrize(
    ("shape", "field"),
    [
        ([], "scoringStrategy.requestedToCapacityRatio.shape"),
        ([{"utilization": 50, "score": 11}], "scoringStrategy.requestedToCapacityRatio.shape[0].score"),
        (
            [{"utilization": 50, "score": 1}, {"utilization": 40, "score": 2}],
            "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
        ),
    ],
    ids=["empty shape", "score above 10", "utilisation not increasing"],
)
def test_bad_shapes_name_their_field(shape: list[dict[str, int]], field: str) -> None:
    with pytest.raises(PluginArgsError) as raised:
        parse_args(
            {"scoringStrategy": {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {"shape": shape}}}
        )
    assert raised.value.field == field
