"""The cache counts every assigned pod once, and assumed pods until they confirm or fail."""

from __future__ import annotations

import pytest

from tests.builders import make_node, make_pod
from usher.core.cache import Cache, NodeInfo
from usher.core.types import NodeName, PodInfo, PodKey


def pod(**kw: str) -> PodInfo:
    builder = make_pod()
    for key, value in kw.items():
        getattr(builder, key)(value)
    return PodInfo.from_api(builder.req(cpu="1", memory="1Gi").obj())


@pytest.fixture
def cache() -> Cache:
    c = Cache()
    c.add_or_update_node(make_node().name("n1").obj())
    return c


def test_an_assigned_pod_is_counted_on_its_node(cache: Cache) -> None:
    cache.add_or_update_pod(pod(name="a", node="n1"))
    info = cache.node("n1")
    assert info is not None
    assert info.requested == {"cpu": 1000, "memory": 2**30, "pods": 1}


def test_an_update_of_the_same_pod_is_not_counted_twice(cache: Cache) -> None:
    cache.add_or_update_pod(pod(name="a", node="n1"))
    cache.add_or_update_pod(pod(name="a", node="n1"))
    assert cache.node("n1").requested["pods"] == 1  # type: ignore[union-attr]


def test_a_terminal_pod_frees_its_resources(cache: Cache) -> None:
    cache.add_or_update_pod(pod(name="a", node="n1"))
    cache.add_or_update_pod(pod(name="a", node="n1", phase="Succeeded"))
    assert cache.node("n1").requested == {"cpu": 0, "memory": 0, "pods": 0}  # type: ignore[union-attr]


def test_a_pod_on_an_unknown_node_counts_once_the_node_appears() -> None:
    cache = Cache()
    cache.add_or_update_pod(pod(name="a", node="later"))
    assert cache.node_infos() == []
    cache.add_or_update_node(make_node().name("later").obj())
    assert cache.node("later").requested["pods"] == 1  # type: ignore[union-attr]


def test_assumed_pods_count_until_forgotten(cache: Cache) -> None:
    p = pod(name="a")
    cache.assume(p, NodeName("n1"))
    assert cache.is_assumed(p.key)
    assert cache.node("n1").requested["cpu"] == 1000  # type: ignore[union-attr]
    cache.forget(p)
    assert cache.node("n1").requested["cpu"] == 0  # type: ignore[union-attr]


def test_the_watch_confirms_an_assumed_pod(cache: Cache) -> None:
    p = pod(name="a")
    cache.assume(p, NodeName("n1"))
    cache.add_or_update_pod(pod(name="a", node="n1"))
    assert not cache.is_assumed(p.key)
    cache.forget(p)  # a late failure report must not uncount a confirmed pod
    assert cache.node("n1").requested["pods"] == 1  # type: ignore[union-attr]


def test_a_failed_binding_of_an_earlier_pod_does_not_uncount_its_successor(cache: Cache) -> None:
    earlier = pod(name="a")
    cache.assume(earlier, NodeName("n1"))
    cache.remove_pod(earlier.key)  # deleted while its binding was in flight
    later = pod(name="a")  # recreated under the same name, and placed
    assert later.uid != earlier.uid
    cache.assume(later, NodeName("n2"))
    cache.forget(earlier)  # the earlier pod's binding answers 409 only now
    assert cache.is_assumed(later.key)
    assert cache.node("n2").requested["pods"] == 1  # type: ignore[union-attr]


def test_assuming_a_pod_twice_is_refused(cache: Cache) -> None:
    p = pod(name="a")
    cache.assume(p, NodeName("n1"))
    with pytest.raises(ValueError, match="already counted"):
        cache.assume(p, NodeName("n1"))


def test_an_assumed_pod_has_no_expiry_only_the_watch_or_a_failed_binding_uncounts_it(cache: Cache) -> None:
    bound, deleted, failed = pod(name="a"), pod(name="b"), pod(name="c")
    for p in (bound, deleted, failed):
        cache.assume(p, NodeName("n1"))
    cache.add_or_update_pod(pod(name="a", node="n1"))
    cache.remove_pod(deleted.key)
    cache.forget(failed)
    assert [cache.is_assumed(p.key) for p in (bound, deleted, failed)] == [False, False, False]
    assert cache.node("n1").requested["pods"] == 1  # type: ignore[union-attr]


def test_a_deleted_node_keeps_counting_its_pods_until_they_go(cache: Cache) -> None:
    cache.add_or_update_pod(pod(name="a", node="n1"))
    cache.remove_node("n1")
    assert cache.node_infos() == []
    cache.add_or_update_node(make_node().name("n1").obj())
    assert cache.node("n1").requested["pods"] == 1  # type: ignore[union-attr]


def test_the_node_list_follows_adds_and_removes() -> None:
    cache = Cache()
    cache.add_or_update_node(make_node().name("b").obj())
    assert [n.name for n in cache.node_infos()] == ["b"]
    cache.add_or_update_node(make_node().name("a").obj())
    assert [n.name for n in cache.node_infos()] == ["a", "b"]
    cache.add_or_update_node(make_node().name("a").label("x", "y").obj())  # an update keeps the list
    assert cache.node_infos()[0].labels == {"x": "y"}
    cache.remove_node("b")
    assert [n.name for n in cache.node_infos()] == ["a"]


def _with_terms(name: str, node: str, *, anti: bool) -> PodInfo:
    raw = make_pod().name(name).node(node).obj()
    term = {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
    kind = "podAntiAffinity" if anti else "podAffinity"
    raw["spec"]["affinity"] = {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return PodInfo.from_api(raw)


def test_the_node_list_knows_which_nodes_hold_pods_with_affinity_terms(cache: Cache) -> None:
    from usher.core.cache import nodes_with_affinity_pods, nodes_with_required_anti_affinity_pods

    cache.add_or_update_node(make_node().name("n2").obj())
    cache.add_or_update_node(make_node().name("n3").obj())
    nodes = cache.node_infos()

    def names() -> tuple[list[str], list[str]]:
        return (
            sorted(n.name for n in nodes_with_affinity_pods(nodes)),
            sorted(n.name for n in nodes_with_required_anti_affinity_pods(nodes)),
        )

    assert names() == ([], [])
    cache.add_or_update_pod(pod(name="plain", node="n1"))
    cache.add_or_update_pod(_with_terms("near", "n2", anti=False))
    apart = _with_terms("apart", NodeName("n3"), anti=True)
    cache.assume(apart, NodeName("n3"))
    assert names() == (["n2", "n3"], ["n3"])
    # The same pod moved (an update naming another node) leaves its old node's entry.
    cache.add_or_update_pod(_with_terms("near", "n1", anti=False))
    assert names() == (["n1", "n3"], ["n3"])
    cache.forget(apart)
    cache.remove_pod(PodInfo.from_api(make_pod().name("near").obj()).key)
    assert names() == ([], [])
    # The mappings are live: a list taken earlier sees later pods, and a removed node drops out.
    cache.add_or_update_pod(_with_terms("late", "n3", anti=True))
    assert names() == (["n3"], ["n3"])
    cache.remove_node("n3")
    assert names() == ([], [])


def _using(name: str, node: str, *claims: str, namespace: str = "default") -> PodInfo:
    builder = make_pod().name(name).namespace(namespace).node(node).ephemeral("scratch")
    for claim in claims:
        builder.pvc(claim)
    return PodInfo.from_api(builder.obj())


def test_the_node_list_counts_the_pods_using_each_claim_as_pods_come_and_go(cache: Cache) -> None:
    from usher.core.cache import claims_in_use

    cache.add_or_update_node(make_node().name("n2").obj())
    nodes = cache.node_infos()
    cache.add_or_update_pod(_using("a", "n1", "data", "logs"))
    cache.add_or_update_pod(_using("b", "n2", "data", namespace="other"))
    assumed = _using("c", "n2", "data")
    cache.assume(assumed, NodeName("n2"))
    cache.add_or_update_pod(_using("d", "gone", "logs"))  # on a node the watch has not listed: counted
    # Generic ephemeral volumes are not counted (kube-scheduler's PodPVCKeys).
    assert dict(claims_in_use(nodes)) == {"default/data": 2, "default/logs": 2, "other/data": 1}
    cache.forget(assumed)
    assert dict(claims_in_use(nodes)) == {"default/data": 1, "default/logs": 2, "other/data": 1}
    # An update on the same node replaces the pod's claims; a move to another node counts it once.
    cache.add_or_update_pod(_using("a", "n1", "data"))
    cache.add_or_update_pod(_using("a", "n2", "data"))
    assert dict(claims_in_use(nodes)) == {"default/data": 1, "default/logs": 1, "other/data": 1}
    cache.remove_pod(_using("d", "gone").key)
    finished = _using("b", "n2", "data", namespace="other").raw
    cache.add_or_update_pod(PodInfo.from_api({**finished, "status": {"phase": "Succeeded"}}))
    assert dict(claims_in_use(nodes)) == {"default/data": 1}
    # Without the cache's NodeList (a plain list of nodes), the pods on them are counted.
    assert dict(claims_in_use(list(nodes))) == {"default/data": 1}


def test_a_node_info_gets_a_new_generation_on_every_change_and_a_clone_keeps_it_until_it_changes() -> None:
    cache = Cache()
    info = cache.add_or_update_node(make_node().name("n").obj())
    seen = {info.generation}
    pod = PodInfo.from_api(make_pod().name("p").uid("p").node("n").obj())
    info.add_pod(pod)
    seen.add(info.generation)
    clone = info.clone()
    assert clone.generation == info.generation, "the same contents"
    clone.remove_pod(pod.key)
    assert clone.generation not in seen | {info.generation}
    seen.add(clone.generation)
    info.set_node(make_node().name("n").label("zone", "b").obj())
    assert info.generation not in seen
    seen.add(info.generation)
    info.node_gone()
    assert info.generation not in seen and not info.exists


def test_the_journal_names_the_nodes_changed_since_a_generation_newest_first() -> None:
    cache = Cache()
    for name in ("a", "b", "c"):
        cache.add_or_update_node(make_node().name(name).obj())
    nodes = cache.node_infos()
    journal = nodes.journal
    assert journal is not None
    mark = journal.latest
    assert journal.changed_since(mark) == []
    cache.add_or_update_pod(PodInfo.from_api(make_pod().name("p").uid("p").node("b").obj()))
    cache.add_or_update_node(make_node().name("a").label("zone", "z").obj())
    assert [n.name for n in journal.changed_since(mark)] == ["a", "b"]
    assert journal.latest == max(n.generation for n in nodes)
    clone = nodes[2].clone()
    clone.remove_pod(PodKey("default/none"))
    clone.add_pod(PodInfo.from_api(make_pod().name("q").uid("q").node("c").obj()))
    assert [n.name for n in journal.changed_since(mark)] == ["a", "b"], "a clone's changes are not the cache's"
    assert cache.node_infos() is nodes, "the same nodes: the same list"
    cache.remove_node("c")
    assert cache.node_infos() is not nodes
    assert "c" not in [n.name for n in journal.changed_since(0)]


def test_a_node_infos_free_room_follows_its_pods_its_allocatable_and_its_clones() -> None:
    """free_cpu/free_memory/free_pods (Fit's Filter reads only these) equal allocatable - requested after every
    kind of change, on the node and on a clone changed apart from it."""
    cache = Cache()
    info = cache.add_or_update_node(make_node().name("n").capacity(cpu="4", memory="8Gi", pods="10").obj())

    def room(node: NodeInfo) -> tuple[int, int, int]:
        return node.free_cpu, node.free_memory, node.free_pods

    def expected(node: NodeInfo) -> tuple[int, int, int]:
        free = {r: node.allocatable.get(r, 0) - node.requested.get(r, 0) for r in ("cpu", "memory", "pods")}
        return free["cpu"], free["memory"], free["pods"]

    assert room(info) == (4000, 8 << 30, 10)
    first = PodInfo.from_api(make_pod().name("a").uid("a").node("n").req(cpu="1", memory="1Gi").obj())
    info.add_pod(first)
    assert room(info) == expected(info) == (3000, 7 << 30, 9)
    clone = info.clone()
    clone.remove_pod(first.key)
    assert room(clone) == expected(clone) == (4000, 8 << 30, 10)
    assert room(info) == (3000, 7 << 30, 9), "the clone's change is its own"
    info.set_node(make_node().name("n").capacity(cpu="2", memory="8Gi", pods="10").obj())
    assert room(info) == expected(info) == (1000, 7 << 30, 9)
    info.add_pod(PodInfo.from_api(make_pod().name("b").uid("b").node("n").req(cpu="1500m").obj()))
    assert room(info) == expected(info) == (-500, 7 << 30, 8), "overcommitted: no room, not a clamp at 0"
