"""One scheduling attempt: fit, least-allocated choice, and the failure message."""

from __future__ import annotations

import random

from tests.builders import make_node, make_pod
from usher.core.cache import Cache
from usher.core.cycle import schedule
from usher.core.types import PodInfo


def cache_with(*nodes: dict[str, object]) -> Cache:
    cache = Cache()
    for node in nodes:
        cache.add_or_update_node(node)
    return cache


def test_the_pod_goes_to_the_node_with_most_room() -> None:
    cache = cache_with(make_node().name("busy").obj(), make_node().name("idle").obj())
    cache.add_or_update_pod(PodInfo.from_api(make_pod().node("busy").req(cpu="3").obj()))
    pod = PodInfo.from_api(make_pod().req(cpu="500m").obj())
    assert schedule(pod, cache.node_infos(), random.Random(1)).node == "idle"


def test_pods_already_on_a_node_count_whoever_placed_them() -> None:
    cache = cache_with(make_node().name("n").capacity(cpu="2", memory="1Gi", pods=10).obj())
    cache.add_or_update_pod(
        PodInfo.from_api(make_pod().scheduler("default-scheduler").node("n").req(cpu="1500m").obj())
    )
    placement = schedule(PodInfo.from_api(make_pod().req(cpu="1").obj()), cache.node_infos(), random.Random(1))
    assert placement.node is None
    assert placement.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_the_failure_message_is_a_sorted_histogram_of_reasons() -> None:
    cache = cache_with(
        make_node().name("small").capacity(cpu="1", memory="1Gi", pods=10).obj(),
        make_node().name("full").capacity(cpu="8", memory="8Gi", pods=0).obj(),
        make_node().name("cordoned").unschedulable().obj(),
    )
    pod = PodInfo.from_api(make_pod().req(cpu="2", memory="2Gi").obj())
    placement = schedule(pod, cache.node_infos(), random.Random(1))
    assert placement.message == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 Too many pods, 1 node(s) were unschedulable."
    )


def test_extended_resources_must_fit_too() -> None:
    cache = cache_with(make_node().name("n").capacity(cpu="4", memory="4Gi", pods=10, **{"example.com/gpu": 1}).obj())
    fits = PodInfo.from_api(make_pod().req(**{"example.com/gpu": "1"}).obj())
    too_many = PodInfo.from_api(make_pod().req(**{"example.com/gpu": "2"}).obj())
    assert schedule(fits, cache.node_infos(), random.Random(1)).node == "n"
    assert schedule(too_many, cache.node_infos(), random.Random(1)).node is None


def test_ties_are_broken_by_the_seeded_random_choice() -> None:
    nodes = [make_node().name(f"n{i}").obj() for i in range(5)]
    pod = PodInfo.from_api(make_pod().obj())
    picks = {schedule(pod, cache_with(*nodes).node_infos(), random.Random(seed)).node for seed in range(20)}
    assert len(picks) > 1  # equal nodes share the load
    again = schedule(pod, cache_with(*nodes).node_infos(), random.Random(7)).node
    assert again == schedule(pod, cache_with(*nodes).node_infos(), random.Random(7)).node


def test_no_nodes_at_all() -> None:
    placement = schedule(PodInfo.from_api(make_pod().obj()), [], random.Random(1))
    assert placement.node is None
    assert placement.message == "0/0 nodes are available."
