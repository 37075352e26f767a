"""The pod-group cycle's decisions (``core.groupcycle``): all of a gang on one snapshot, or none of it.

The real default framework (GangScheduling's PlacementFeasible included) over
the real cache: each case is a cluster, a group and its members, and what
the simulation placed, why it stopped, and that ``revert`` leaves the cache
as it found it.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pod_group
from tests.frameworks import FakeHandle
from usher.config import default_config
from usher.core.cache import Cache
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import Framework
from usher.core.groupcycle import GROUP_UNSCHEDULABLE, GroupSimulation, place_group, simulate_group, validate_group
from usher.core.plugins.registry import in_tree_registry
from usher.core.podgroups import Member, PodGroup
from usher.core.types import Code, NodeName, PodInfo, Status, unschedulable


def cluster(*cpus: str) -> tuple[Cache, Framework]:
    """Nodes n0, n1, ... with these CPUs, and the default framework over the same pod-group states."""
    cache = Cache()
    for i, cpu in enumerate(cpus):
        cache.add_or_update_node(make_node().name(f"n{i}").capacity(cpu=cpu, memory="8Gi", pods=110).obj())
    handle = FakeHandle(pod_groups=cache.pod_groups)
    return cache, build_framework(default_config().profiles[0], registry=in_tree_registry(), handle=handle)


def members(*cpus: str, group: str = "train", **spec: Any) -> list[PodInfo]:
    pods = []
    for i, cpu in enumerate(cpus):
        builder = make_pod().name(f"{group}-{i}").uid(f"uid-{group}-{i}").group(group).req(cpu=cpu)
        for key, value in spec.items():
            builder._pod["spec"][key] = value
        pods.append(PodInfo.from_api(builder.obj()))
    return pods


def simulate(cache: Cache, framework: Framework, min_count: int | None, pods: list[PodInfo]) -> GroupSimulation:
    _, group = cache.pod_groups.on_pod_group(False, make_pod_group(pods[0].pod_group, min_count))
    assert group is not None
    for pod in pods:
        cache.pod_groups.track(pod, Member.UNSCHEDULED)
    state = cache.pod_groups.get(group.key)
    assert state is not None
    return simulate_group(
        framework,
        group,
        pods,
        cache,
        scheduled=state.scheduled_count,
        new_state=CycleState,
        rng=random.Random(1),
    )


def requested_cpu(cache: Cache) -> int:
    return sum(node.requested.get("cpu", 0) for node in cache.node_infos())


@pytest.mark.parametrize(
    ("nodes", "pods", "min_count", "code", "message", "placed", "failed", "skipped"),
    [
        (("4",), ("1", "1", "1"), 3, Code.SUCCESS, "", 3, 0, 0),
        (
            ("2",),
            ("1", "1", "1"),
            3,
            Code.UNSCHEDULABLE,
            "minCount (3) cannot be satisfied: 2 scheduled, 0 remaining",
            2,
            1,
            0,
        ),
        (
            ("2",),
            ("3", "1", "1"),
            3,
            Code.UNSCHEDULABLE,
            "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining",
            0,
            1,
            2,
        ),
        (("2",), ("1", "1", "1"), 2, Code.SUCCESS, "", 2, 1, 0),
        (("2",), ("1", "1", "1"), None, Code.SUCCESS, "", 2, 1, 0),
        (
            ("1",),
            ("2", "2"),
            None,
            Code.UNSCHEDULABLE,
            "minCount (1) cannot be satisfied: 0 scheduled, 0 remaining",
            0,
            2,
            0,
        ),
        (
            ("4",),
            ("1", "1"),
            3,
            Code.UNSCHEDULABLE,
            "minCount (3) cannot be satisfied: 0 scheduled, 2 remaining",
            0,
            0,
            2,
        ),
        (("1", "1", "1"), ("1", "1", "1"), 3, Code.SUCCESS, "", 3, 0, 0),
    ],
    ids=[
        "a gang that fits is placed whole",
        "a gang one pod too big is not placed at all",
        "the first member does not fit: the others are not even tried",
        "a gang beyond its minCount leaves out what does not fit",
        "the basic policy places what fits",
        "the basic policy with nothing placeable is unschedulable",
        "fewer members than minCount: nobody is tried",
        "members spread over nodes, each seeing the ones before",
    ],
)
def test_a_group_is_placed_all_or_nothing(
    nodes: tuple[str, ...],
    pods: tuple[str, ...],
    min_count: int | None,
    code: Code,
    message: str,
    placed: int,
    failed: int,
    skipped: int,
) -> None:
    cache, framework = cluster(*nodes)
    simulation = simulate(cache, framework, min_count, members(*pods))

    assert (simulation.status.code, simulation.status.message) == (code, message)
    assert (len(simulation.placed), len(simulation.failed), len(simulation.skipped)) == (placed, failed, skipped)
    assert requested_cpu(cache) == sum(member.pod.requests["cpu"] for member in simulation.placed)
    simulation.revert()
    assert requested_cpu(cache) == 0
    assert all(cache.pod_groups.member(pod.key) is Member.UNSCHEDULED for pod in members(*pods))
    simulation.revert()  # twice is harmless
    assert requested_cpu(cache) == 0


def test_without_placement_feasible_plugins_a_group_that_placed_nobody_is_unschedulable() -> None:
    cache, framework = cluster("1")
    framework.plugins.placement_feasible.clear()
    simulation = simulate(cache, framework, 2, members("2", "2"))
    assert (simulation.status.code, simulation.status.message) == (Code.UNSCHEDULABLE, GROUP_UNSCHEDULABLE)


def test_the_members_placed_see_each_other_so_two_gangs_cannot_both_take_room_for_one() -> None:
    cache, framework = cluster("3")
    first = simulate(cache, framework, 3, members("1", "1", "1", group="a"))
    assert first.status.ok
    second = simulate(cache, framework, 3, members("1", "1", "1", group="b"))  # the first still assumed
    assert second.status.code is Code.UNSCHEDULABLE and not second.placed
    first.revert()
    assert requested_cpu(cache) == 0


def test_members_already_scheduled_count_towards_min_count() -> None:
    cache, framework = cluster("2")
    bound = PodInfo.from_api(make_pod().name("train-9").uid("uid-train-9").group("train").req(cpu="1").node("n0").obj())
    cache.add_or_update_pod(bound)
    simulation = simulate(cache, framework, 2, members("1"))
    assert simulation.status.ok and simulation.scheduled_before == 1 and len(simulation.placed) == 1
    assert simulation.short == 0
    simulation.revert()


def test_how_short_of_its_quorum_a_failed_gang_is() -> None:
    cache, framework = cluster("2")
    simulation = simulate(cache, framework, 4, members("1", "1", "1", "1"))
    assert simulation.status.code is Code.UNSCHEDULABLE and simulation.short == 2
    simulation.revert()


class Refuse:
    """A Reserve plugin that refuses the pods named ``*-1``."""

    name = "Refuse"

    def reserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        return unschedulable("no room in the books") if pod.name.endswith("-1") else Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> None:
        pass


def test_a_member_reserve_refuses_is_not_placed() -> None:
    cache, framework = cluster("4")
    framework.plugins.reserve.append(Refuse())
    simulation = simulate(cache, framework, 2, members("1", "1"))
    assert simulation.status.code is Code.UNSCHEDULABLE
    [refused] = simulation.failed
    assert refused.pod.name == "train-1" and refused.result.node == "n0" and refused.message == "no room in the books"
    simulation.revert()
    assert requested_cpu(cache) == 0


GROUP = PodGroup.from_api(make_pod_group("train", 2, priority=10))


@pytest.mark.parametrize(
    ("pods", "scheduled", "message"),
    [
        (members("1", "1", priority=10), [], ""),
        (
            members("1", priority=10),
            [PodInfo.from_api(make_pod().name("s").group("train").scheduler("other").priority(10).obj())],
            'all pods in a single pod group should have the same .spec.schedulerName set, got: "other" and "usher"',
        ),
        (
            members("1", "1", priority=5),
            [],
            "all pods in a single pod group should have the same priority as the pod group's priority, got 5 and 10",
        ),
        (
            [*members("1", priority=10), *members("1", group="train", priority=10, preemptionPolicy="Never")],
            [],
            "all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority",
        ),
    ],
    ids=[
        "members that agree",
        "a scheduled member of another scheduler",
        "another priority than the group's",
        "mixed preemption policies",
    ],
)
def test_members_must_agree_on_scheduler_priority_and_preemption_policy(
    pods: list[PodInfo], scheduled: list[PodInfo], message: str
) -> None:
    assert validate_group(GROUP, pods, scheduled) == message


def test_a_malformed_pod_group_is_refused_before_anything_else() -> None:
    raw = make_pod_group("train", 2)
    raw["spec"]["schedulingPolicy"] = {}
    group = PodGroup.from_api(raw)
    assert validate_group(group, members("1"), []).startswith("PodGroup default/train cannot be scheduled: ")


# -- TopologyAwareWorkloadScheduling: one domain of the topology key ---------------------------


def racks(*spec: tuple[str, str]) -> tuple[Cache, Framework]:
    """Nodes n0, n1, ... each (cpu, rack); a rack of "" leaves the node without the label."""
    cache = Cache()
    for i, (cpu, rack) in enumerate(spec):
        builder = make_node().name(f"n{i}").capacity(cpu=cpu, memory="8Gi", pods=110)
        cache.add_or_update_node((builder.label("rack", rack) if rack else builder).obj())
    handle = FakeHandle(pod_groups=cache.pod_groups)
    return cache, build_framework(default_config().profiles[0], registry=in_tree_registry(), handle=handle)


def place(cache: Cache, framework: Framework, min_count: int, pods: list[PodInfo], seed: int = 1) -> GroupSimulation:
    raw = make_pod_group(pods[0].pod_group, min_count, schedulingConstraints={"topology": [{"key": "rack"}]})
    _, group = cache.pod_groups.on_pod_group(False, raw)
    assert group is not None and group.topology_key == "rack"
    for pod in pods:
        cache.pod_groups.track(pod, Member.UNSCHEDULED)
    state = cache.pod_groups.get(group.key)
    assert state is not None
    before = requested_cpu(cache)
    simulation, still_assumed = place_group(
        framework, group, pods, cache, scheduled=state.scheduled_count, new_state=CycleState, rng=random.Random(seed)
    )
    assert not still_assumed and requested_cpu(cache) == before, "every placement's simulation is reverted"
    return simulation


def test_a_gang_with_a_topology_constraint_lands_in_one_domain_only() -> None:
    # Rack a has room for two members only; rack b for all four, across its two nodes.
    cache, framework = racks(("2", "a"), ("2", "b"), ("2", "b"), ("8", ""))
    simulation = place(cache, framework, 4, members("1", "1", "1", "1"))

    assert simulation.status.ok
    assert {m.result.node for m in simulation.placed} == {"n1", "n2"}, "rack b only, never the unlabeled n3"


def test_a_gang_that_fits_no_single_domain_is_unschedulable_though_the_cluster_has_room() -> None:
    cache, framework = racks(("2", "a"), ("2", "b"))
    simulation = place(cache, framework, 3, members("1", "1", "1"))

    assert simulation.status.code is Code.UNSCHEDULABLE
    assert simulation.status.message.startswith("0/2 placements are available, first placement status: minCount (3)")


def test_without_the_label_anywhere_there_is_no_placement() -> None:
    cache, framework = racks(("8", ""))
    simulation = place(cache, framework, 1, members("1"))

    assert simulation.status.code is Code.UNSCHEDULABLE
    assert simulation.status.message == "0/0 placements are available: no node has the topology key 'rack'"


def test_members_already_scheduled_pin_the_domain() -> None:
    cache, framework = racks(("1", "a"), ("8", "b"))
    first = members("1", "1", "1")
    cache.pod_groups.on_pod_group(
        False, make_pod_group("train", 2, schedulingConstraints={"topology": [{"key": "rack"}]})
    )
    cache.assume(first[0], NodeName("n0"))  # a member already in rack a, which has no room left
    simulation = place(cache, framework, 2, first[1:])

    assert simulation.status.code is Code.UNSCHEDULABLE, "rack b has room, but the gang is bound to rack a"
    cache.forget(first[0])


def test_of_the_domains_that_fit_the_choice_is_random_among_equals() -> None:
    chosen = set()
    for seed in range(8):
        cache, framework = racks(("2", "a"), ("2", "b"))
        simulation = place(cache, framework, 2, members("1", "1"), seed=seed)
        assert simulation.status.ok and len({m.result.node for m in simulation.placed}) == 1
        chosen |= {m.result.node for m in simulation.placed}
    assert chosen == {"n0", "n1"}


def test_of_the_domains_that_fit_the_fuller_one_wins_as_kube_scheduler_packs_gangs() -> None:
    """Both racks take the whole gang, so PodGroupPodsCount ties; rack b already holds another pod, so with
    the gang it is the more allocated domain and NodeResourcesFit's ScorePlacement prefers it, every time."""
    chosen = set()
    for seed in range(8):
        cache, framework = racks(("4", "a"), ("4", "b"))
        cache.add_or_update_pod(PodInfo.from_api(make_pod().name("other").uid("o").node("n1").req(cpu="2").obj()))
        simulation = place(cache, framework, 2, members("1", "1"), seed=seed)
        assert simulation.status.ok
        chosen |= {m.result.node for m in simulation.placed}
    assert chosen == {"n1"}


def test_with_pod_group_pods_count_disabled_a_domain_placing_fewer_members_may_win() -> None:
    """Rack a (one roomy node) takes all 3 members, rack b (a fuller node) 2; the gang needs 2. With
    PodGroupPodsCount rack a wins (100 + Fit's 28 against 66 + 53); without it only NodeResourcesFit's packing
    counts, and rack b is fuller."""
    chosen = set()
    for counted in (True, False):
        cache, framework = racks(("6", "a"), ("4", "b"))
        other = make_pod().name("other").uid("o").node("n1").req(cpu="2").obj()
        cache.add_or_update_pod(PodInfo.from_api(other))
        framework.plugins.pod_group_pods_count = counted
        simulation = place(cache, framework, 2, members("1", "1", "1"))
        assert simulation.status.ok
        chosen.add((counted, frozenset(m.result.node for m in simulation.placed)))
    assert chosen == {(True, frozenset({"n0"})), (False, frozenset({"n1"}))}


def test_a_placement_score_plugin_that_fails_fails_the_groups_attempt() -> None:
    cache, framework = racks(("2", "a"), ("2", "b"))

    class Broken:
        name = "Broken"

        def score_placement(self, group: Any, pods: Any, nodes: Any) -> int:
            raise RuntimeError("boom")

    framework.plugins.placement_score.append((Broken(), 1))  # type: ignore[arg-type]
    simulation = place(cache, framework, 2, members("1", "1"))
    assert simulation.status.code is Code.ERROR and "boom" in simulation.status.message
    assert simulation.status.plugin == "Broken"


def test_without_the_gate_the_constraint_is_ignored() -> None:
    cache, framework = racks(("2", "a"), ("2", "b"))
    pods = members("1", "1", "1")
    _, group = cache.pod_groups.on_pod_group(
        False, make_pod_group("train", 3, schedulingConstraints={"topology": [{"key": "rack"}]})
    )
    assert group is not None
    for pod in pods:
        cache.pod_groups.track(pod, Member.UNSCHEDULED)
    simulation, still_assumed = place_group(
        framework, group, pods, cache, scheduled=0, new_state=CycleState, rng=random.Random(1), topology=False
    )
    assert simulation.status.ok and still_assumed
    simulation.revert()
