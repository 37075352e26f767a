"""NodeShares over the cache's journal: what it keeps equals a fresh walk of the nodes it is given. Pure."""

from __future__ import annotations

import random
from typing import Any

from tests.builders import make_node, make_pod
from usher.core.cache import Cache, NodeInfo, nodes_with_required_anti_affinity_pods
from usher.core.plugins.nodeshares import NODES_KEPT, Entry, NodeShares, PerNodeByKind, by_key, sum_entries
from usher.core.types import PodInfo, PodKey

ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def pod(name: str, node: str, *, anti: bool) -> PodInfo:
    raw: dict[str, Any] = make_pod().name(name).uid(name).node(node).obj()
    if anti:
        raw["spec"]["affinity"] = ANTI
    return PodInfo.from_api(raw)


def entries(node: NodeInfo, _: set[str]) -> list[Entry]:
    """One entry per pod on the node: what a plugin would count there."""
    return [("hostname", node.name, len(node.pods))] if node.pods else []


def test_a_subset_then_the_whole_list_counts_every_node_of_the_whole_list() -> None:
    cache = Cache()
    for name in ("a", "b", "c"):
        cache.add_or_update_node(make_node().name(name).obj())
    cache.add_or_update_pod(pod("p1", "a", anti=True))
    cache.add_or_update_pod(pod("p2", "b", anti=False))
    nodes = cache.node_infos()
    shares = NodeShares()
    subset = nodes_with_required_anti_affinity_pods(nodes)
    shares.refresh(subset, {}, entries)
    assert shares.by_pair() == {("hostname", "a"): 1}
    shares.refresh(nodes, {}, entries)  # the same cache list, but all of it now: b counts too
    assert shares.by_pair() == sum_entries(nodes, lambda n: entries(n, set()))


def test_a_node_leaving_the_subset_is_forgotten_without_a_walk_of_the_others() -> None:
    cache = Cache()
    for name in ("a", "b"):
        cache.add_or_update_node(make_node().name(name).obj())
    cache.add_or_update_pod(pod("p1", "a", anti=True))
    cache.add_or_update_pod(pod("p2", "b", anti=True))
    shares = NodeShares()
    walked: list[str] = []

    def counting(node: NodeInfo, read: set[str]) -> list[Entry]:
        walked.append(node.name)
        return entries(node, read)

    shares.refresh(nodes_with_required_anti_affinity_pods(cache.node_infos()), {}, counting)
    assert sorted(walked) == ["a", "b"]
    walked.clear()
    cache.remove_pod(PodKey("default/p1"))  # a holds no pod with anti-affinity any more
    shares.refresh(nodes_with_required_anti_affinity_pods(cache.node_infos()), {}, counting)
    assert walked == [], "b did not change; a left the subset"
    assert shares.by_pair() == {("hostname", "b"): 1}


def test_the_running_sums_equal_a_fresh_sum_while_pods_come_and_go() -> None:
    """Entries of several keys appear, change weight and vanish; after each refresh both views equal a fresh
    sum of every node's entries, and a caller changing what it was handed changes nothing kept."""
    rnd = random.Random(7)
    cache = Cache()
    for i in range(6):
        cache.add_or_update_node(make_node().name(f"n{i}").label("zone", f"z{i % 3}").obj())
    shares = NodeShares()

    def spread(node: NodeInfo, _: set[str]) -> list[Entry]:
        weights: dict[tuple[str, str], int] = {}
        for other in node.pods.values():
            app = other.labels.get("app", "")
            for key, value in (("zone", node.labels["zone"]), ("hostname", node.name), (f"app-{app}", app)):
                weights[key, value] = weights.get((key, value), 0) + (2 if app == "b" else 1)
        return [(key, value, weight) for (key, value), weight in weights.items()]

    placed: list[str] = []
    for step in range(300):
        if placed and rnd.random() < 0.45:
            cache.remove_pod(PodKey(f"default/{placed.pop(rnd.randrange(len(placed)))}"))
        else:
            name = f"p{step}"
            raw = make_pod().name(name).uid(name).node(f"n{rnd.randrange(6)}").obj()
            raw["metadata"]["labels"] = {"app": rnd.choice("ab")}
            cache.add_or_update_pod(PodInfo.from_api(raw))
            placed.append(name)
        nodes = cache.node_infos()
        shares.refresh(nodes, {}, spread)
        fresh = sum_entries(nodes, lambda n: spread(n, set()))
        assert shares.by_pair() == fresh, f"step {step}"
        assert shares.by_key() == by_key(fresh), f"step {step}"
        handed = shares.by_key()
        for values in handed.values():
            values.clear()
        shares.by_pair().clear()
        assert shares.by_key() == by_key(fresh), "what a caller was handed is its own copy"


def test_per_node_answers_are_kept_per_kind_and_cleared_once_too_many_node_names_piled_up() -> None:
    kept: PerNodeByKind[int] = PerNodeByKind(limit=2)
    kept("a")["n1"] = 1
    assert kept("a") == {"n1": 1} and kept("b") == {}
    kept("c")  # a third kind: the least recently used ("a") goes
    assert kept("a") == {}
    churned = kept("b")
    churned.update((f"gone-{i}", i) for i in range(NODES_KEPT))
    assert len(kept("b")) == NODES_KEPT, "kept up to the bound"
    churned["one-more"] = 0
    assert kept("b") == {}, "cleared wholesale past it"
