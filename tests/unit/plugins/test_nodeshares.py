"""NodeShares over the cache's journal: what it keeps equals a fresh walk of the nodes it is given. Pure."""

from __future__ import annotations

from typing import Any

from tests.builders import make_node, make_pod
from usher.core.cache import Cache, NodeInfo, nodes_with_required_anti_affinity_pods
from usher.core.plugins.nodeshares import Entry, NodeShares, sum_entries
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
