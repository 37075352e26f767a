"""One scheduling cycle through the default profile: filter, score, pick, and the failure message."""

from __future__ import annotations

import random

from tests.builders import make_node, make_pod
from tests.frameworks import framework
from usher.core.cache import Cache
from usher.core.cycle import NodeSampler, ScheduleResult, schedule
from usher.core.framework.cycle_state import CycleState
from usher.core.types import PodInfo


def cache_with(*nodes: dict[str, object]) -> Cache:
    cache = Cache()
    for node in nodes:
        cache.add_or_update_node(node)
    return cache


def run(pod: PodInfo, cache: Cache, seed: int = 1, sampler: NodeSampler | None = None) -> ScheduleResult:
    return schedule(framework(), CycleState(), pod, cache.node_infos(), rng=random.Random(seed), sampler=sampler)


def test_the_pod_goes_to_the_node_with_most_room() -> None:
    cache = cache_with(make_node().name("busy").obj(), make_node().name("idle").obj())
    cache.add_or_update_pod(PodInfo.from_api(make_pod().node("busy").req(cpu="3").obj()))
    assert run(PodInfo.from_api(make_pod().req(cpu="500m").obj()), cache).node == "idle"


def test_pods_already_on_a_node_count_whoever_placed_them() -> None:
    cache = cache_with(make_node().name("n").capacity(cpu="2", memory="1Gi", pods=10).obj())
    cache.add_or_update_pod(
        PodInfo.from_api(make_pod().scheduler("default-scheduler").node("n").req(cpu="1500m").obj())
    )
    result = run(PodInfo.from_api(make_pod().req(cpu="1").obj()), cache)
    assert result.node is None
    assert result.message == "0/1 nodes are available: 1 Insufficient cpu."
    assert result.unschedulable_plugins == {"NodeResourcesFit"}


def test_the_failure_message_is_a_sorted_histogram_of_reasons() -> None:
    cache = cache_with(
        make_node().name("small").capacity(cpu="1", memory="1Gi", pods=10).obj(),
        make_node().name("full").capacity(cpu="8", memory="8Gi", pods=0).obj(),
        make_node().name("cordoned").unschedulable().obj(),
    )
    result = run(PodInfo.from_api(make_pod().req(cpu="2", memory="2Gi").obj()), cache)
    assert result.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 Too many pods, 1 node(s) were unschedulable."
    )
    assert result.unschedulable_plugins == {"NodeResourcesFit", "NodeUnschedulable"}


def test_extended_resources_must_fit_too() -> None:
    cache = cache_with(make_node().name("n").capacity(cpu="4", memory="4Gi", pods=10, **{"example.com/gpu": 1}).obj())
    assert run(PodInfo.from_api(make_pod().req(**{"example.com/gpu": "1"}).obj()), cache).node == "n"
    assert run(PodInfo.from_api(make_pod().req(**{"example.com/gpu": "2"}).obj()), cache).node is None


def test_ties_are_broken_by_the_seeded_random_choice() -> None:
    nodes = [make_node().name(f"n{i}").obj() for i in range(5)]
    pod = PodInfo.from_api(make_pod().obj())
    picks = {run(pod, cache_with(*nodes), seed).node for seed in range(20)}
    assert len(picks) > 1  # equal nodes share the load
    assert run(pod, cache_with(*nodes), 7).node == run(pod, cache_with(*nodes), 7).node


def test_no_nodes_at_all() -> None:
    result = run(PodInfo.from_api(make_pod().obj()), Cache())
    assert result.node is None
    assert result.message == "0/0 nodes are available."
    assert result.unschedulable_plugins == {"NoNodesAvailable"}, "parked until a NodeAdd, not retried every 10 s"


def test_a_toleration_lets_a_pod_onto_a_cordoned_node() -> None:
    cache = cache_with(make_node().name("cordoned").unschedulable().obj())
    pod = make_pod().obj()
    pod["spec"]["tolerations"] = [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert run(PodInfo.from_api(pod), cache).node == "cordoned"


def test_large_clusters_are_sampled_and_the_start_rotates() -> None:
    nodes = [make_node().name(f"n{i:03d}").obj() for i in range(500)]
    cache = cache_with(*nodes)
    sampler = NodeSampler(percentage=0)
    pod = PodInfo.from_api(make_pod().obj())
    first = run(pod, cache, sampler=sampler)
    # 500 nodes: 50 - 500/125 = 46 % -> 230 nodes are enough; the next cycle starts after them.
    assert first.evaluated == 230
    assert sampler.next_start == 230
    second = run(pod, cache, sampler=sampler)
    assert second.evaluated == 230
    assert sampler.next_start == 460


def test_sampling_never_looks_for_fewer_than_100_nodes() -> None:
    sampler = NodeSampler(percentage=1)
    assert sampler.num_to_find(99, None) == 99
    assert sampler.num_to_find(1000, None) == 100
    assert sampler.num_to_find(1000, 50) == 500  # a profile's own percentage wins
    assert NodeSampler(percentage=0).num_to_find(10_000, None) == 500  # adaptive 50 - 80 % floors at 5 %


def test_a_prefilter_rejection_is_said_once_not_again_per_node() -> None:
    # kube-scheduler's FitError: with a PreFilter message, the nodes' statuses (all the same rejection)
    # are not listed again.
    cache = cache_with(make_node().name("a").obj(), make_node().name("b").obj())
    pod = PodInfo.from_api(make_pod().pvc("missing").obj())
    result = run(pod, cache)
    assert result.message == '0/2 nodes are available: persistentvolumeclaim "missing" not found.'


def test_a_nominated_pod_takes_its_nominated_node_first_when_it_fits() -> None:
    # kube-scheduler's evaluateNominatedNode: no other node is looked at, whatever the scores say.
    nodes = [make_node().name(n).capacity(cpu="4", memory="8Gi", pods=10).obj() for n in ("roomy", "nominated")]
    cache = cache_with(*nodes)
    cache.add_or_update_pod(PodInfo.from_api(make_pod().node("nominated").req(cpu="3").obj()))
    pod = PodInfo.from_api(make_pod().req(cpu="1").obj())
    for seed in range(5):
        result = schedule(
            framework(), CycleState(), pod, cache.node_infos(), rng=random.Random(seed), nominated="nominated"
        )
        assert (result.node, result.evaluated) == ("nominated", 1)


def test_a_nominated_node_that_no_longer_fits_falls_back_to_every_node() -> None:
    nodes = [make_node().name(n).capacity(cpu="4", memory="8Gi", pods=10).obj() for n in ("other", "nominated")]
    cache = cache_with(*nodes)
    cache.add_or_update_pod(PodInfo.from_api(make_pod().node("nominated").req(cpu="4").obj()))
    pod = PodInfo.from_api(make_pod().req(cpu="1").obj())
    result = schedule(framework(), CycleState(), pod, cache.node_infos(), rng=random.Random(1), nominated="nominated")
    assert result.node == "other"
