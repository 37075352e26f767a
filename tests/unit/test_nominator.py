"""Nominated pods: held room on a node (Filter's second pass) and the queue keeping nominations current."""

from __future__ import annotations

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle, scheduling_queue
from usher.config import default_config
from usher.core.cache import Cache, NodeList
from usher.core.clock import FakeClock
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import Framework
from usher.core.plugins.registry import in_tree_registry
from usher.core.queue import Nominator, SchedulingQueue, Where
from usher.core.types import PodInfo


def pod(name: str, *, priority: int = 0, cpu: str = "1", nominated: str = "") -> PodInfo:
    raw = make_pod().name(name).priority(priority).req(cpu=cpu).obj()
    if nominated:
        raw["status"]["nominatedNodeName"] = nominated
    return PodInfo.from_api(raw)


def fit_framework(nominator: Nominator) -> Framework:
    profile = default_config("usher").profiles[0]
    return build_framework(profile, registry=in_tree_registry(), handle=FakeHandle(), nominated=nominator)


def prefiltered(fw: Framework, p: PodInfo, nodes: NodeList) -> CycleState:
    state = CycleState()
    assert fw.run_pre_filter(state, p, nodes).status.ok
    return state


def one_node(cpu: str = "2") -> Cache:
    cache = Cache()
    cache.add_or_update_node(make_node().name("n1").capacity(cpu=cpu, memory="4Gi", pods=110).obj())
    return cache


def test_a_nominated_pod_of_higher_priority_holds_its_room_against_a_lower_one() -> None:
    nominator = Nominator()
    nominator.nominate(pod("preemptor", priority=100, cpu="1500m"), "n1")
    fw = fit_framework(nominator)
    nodes = one_node().node_infos()
    lower = pod("lower", priority=10, cpu="1")
    [status] = fw.run_filter_nodes(prefiltered(fw, lower, nodes), lower, nodes)
    assert status is not None and status.reasons == ("Insufficient cpu",)
    assert fw.filter_node(prefiltered(fw, lower, nodes), lower, nodes[0]) is not None
    assert nodes[0].requested_cpu == 0, "the nominated pod is counted on a copy, never on the cache's node"


def test_a_pod_of_equal_or_higher_priority_and_the_nominated_pod_itself_are_not_held_back_by_it() -> None:
    nominator = Nominator()
    preemptor = pod("preemptor", priority=100, cpu="1500m")
    nominator.nominate(preemptor, "n1")
    fw = fit_framework(nominator)
    nodes = one_node().node_infos()
    assert fw.run_filter_nodes(prefiltered(fw, preemptor, nodes), preemptor, nodes) == [None]
    # Equal priority still counts the nominated pod (kube-scheduler: priority >= the pod's).
    peer, higher = pod("peer", priority=100, cpu="1"), pod("higher", priority=200, cpu="1")
    assert fw.run_filter_nodes(prefiltered(fw, peer, nodes), peer, nodes)[0] is not None
    assert fw.run_filter_nodes(prefiltered(fw, higher, nodes), higher, nodes) == [None]


def rejecting(fw: Framework, p: PodInfo, nodes: NodeList) -> list[str]:
    statuses = fw.run_filter_nodes(prefiltered(fw, p, nodes), p, nodes)
    return [node.name for node, status in zip(nodes, statuses, strict=True) if status is not None]


def test_only_the_nodes_holding_nominations_take_the_second_pass_and_the_view_follows_the_nominator() -> None:
    nominator = Nominator()
    preemptor = pod("preemptor", priority=100, cpu="1500m")
    nominator.nominate(preemptor, "n2")
    fw = fit_framework(nominator)
    cache = Cache()
    for name in ("n1", "n2", "n3"):
        cache.add_or_update_node(make_node().name(name).capacity(cpu="2", memory="4Gi", pods=110).obj())
    nodes = cache.node_infos()
    lower = pod("lower", priority=10, cpu="1")
    assert rejecting(fw, lower, nodes) == ["n2"]
    nominator.nominate(preemptor, "n3")  # moved: the same framework sees the nominator as it is now
    assert rejecting(fw, lower, nodes) == ["n3"]


def test_without_nominations_filter_is_a_single_pass() -> None:
    fw = fit_framework(Nominator())
    p, nodes = pod("p", cpu="2"), one_node().node_infos()
    assert fw.run_filter_nodes(prefiltered(fw, p, nodes), p, nodes) == [None]


def test_the_nominator_moves_and_forgets_nominations() -> None:
    nominator = Nominator()
    p = pod("p")
    assert not nominator.any()
    nominator.nominate(p, "n1")
    nominator.nominate(p, "n2")
    assert nominator.nominated_pods("n1") == [] and nominator.nominated_pods("n2") == [p]
    assert set(nominator.nodes()) == {"n2"}
    nominator.forget(p.key)
    assert not nominator.any() and nominator.node_of(p.key) is None and not nominator.nodes()


def test_the_queue_takes_the_api_nomination_keeps_its_own_until_the_patch_shows_and_forgets_on_delete_or_bind() -> None:
    queue = scheduling_queue(FakeClock())
    queue.add(pod("from-api", nominated="n1"))
    assert [p.name for p in queue.nominator.nominated_pods("n1")] == ["from-api"]
    builder = make_pod().name("ours")
    ours = PodInfo.from_api(builder.obj())
    queue.add(ours)
    queue.nominate(ours, "n2")
    queue.update(ours, PodInfo.from_api(builder.version().obj()))  # newer, without the nominatedNodeName patch yet
    assert queue.nominator.node_of(ours.key) == "n2"
    queue.delete(ours.key)
    assert queue.nominator.node_of(ours.key) is None
    popped = queue.pop()
    assert popped is not None and popped.key == pod("from-api").key
    queue.done(popped)
    assert not queue.nominator.any()


def test_the_queue_nominates_only_pods_it_holds() -> None:
    queue = scheduling_queue(FakeClock())
    queue.nominate(pod("gone"), "n1")
    assert not queue.nominator.any()


def test_a_nomination_the_api_removed_is_dropped_and_one_not_yet_written_is_kept() -> None:
    nominator = Nominator()
    nominator.update(pod("a", nominated="n1"))
    assert nominator.node_of(pod("a").key) == "n1"
    # The API's nomination removed (old had it, new has none): kube-scheduler drops it too.
    nominator.update(pod("a"), pod("a", nominated="n1"))
    assert nominator.node_of(pod("a").key) is None

    nominator.nominate(pod("b"), "n2")  # preemption's, its status patch not written yet
    nominator.update(pod("b"), pod("b"))
    assert nominator.node_of(pod("b").key) == "n2"


def _queue_with_waiting(clock: FakeClock, *waiting: tuple[str, int]) -> SchedulingQueue:
    """A queue whose pool holds ``waiting`` (name, priority) pods, each rejected for room (NodeResourcesFit),
    and a nominated preemptor "nominee" (priority 100, nominated to n1) in activeQ."""
    queue = scheduling_queue(clock)
    for name, priority in waiting:
        queue.add(pod(name, priority=priority))
        queued = queue.pop()
        assert queued is not None and queued.pod.name == name
        queue.add_unschedulable(queued, unschedulable_plugins=["NodeResourcesFit"])
        assert queued.where is Where.UNSCHEDULABLE
    queue.add(pod("nominee", priority=100, nominated="n1"))
    return queue


def _where(queue: SchedulingQueue, name: str) -> Where | None:
    queued = queue.get(pod(name).key)
    return queued.where if queued is not None else None


def test_a_nominee_bound_elsewhere_frees_its_room_for_the_waiting_pods_of_lower_or_equal_priority() -> None:
    # The failure this guards: kube-scheduler's e2e "async preemption" spec left one of 20 pods pending
    # because a nominee bound to another node freed its nominated room silently (kubernetes#134859).
    clock = FakeClock()
    queue = _queue_with_waiting(clock, ("lower", 10), ("equal", 100), ("higher", 200))
    nominee = queue.pop()
    assert nominee is not None and nominee.pod.name == "nominee"
    queue.done(nominee, "n2")
    assert _where(queue, "lower") in (Where.ACTIVE, Where.BACKOFF)
    assert _where(queue, "equal") in (Where.ACTIVE, Where.BACKOFF)
    assert _where(queue, "higher") is Where.UNSCHEDULABLE, "the nomination never kept a higher-priority pod out"


def test_a_nominee_bound_on_its_nominated_node_frees_nothing() -> None:
    clock = FakeClock()
    queue = _queue_with_waiting(clock, ("lower", 10))
    nominee = queue.pop()
    assert nominee is not None
    queue.done(nominee, "n1")
    assert _where(queue, "lower") is Where.UNSCHEDULABLE
    # Nor does the watch's later view of it bound there.
    queue.delete(pod("nominee").key, bound_to="n1")
    assert _where(queue, "lower") is Where.UNSCHEDULABLE


def test_a_deleted_moved_or_cleared_nomination_frees_its_room() -> None:
    clock = FakeClock()
    for end in ("deleted", "moved", "cleared"):
        queue = _queue_with_waiting(clock, ("lower", 10))
        key = pod("nominee").key
        if end == "deleted":
            queue.delete(key)
        elif end == "moved":
            queue.nominator.nominate(pod("nominee", priority=100), "n2")
        else:
            queue.update(pod("nominee", priority=100, nominated="n1"), pod("nominee", priority=100))
        assert _where(queue, "lower") in (Where.ACTIVE, Where.BACKOFF), end
