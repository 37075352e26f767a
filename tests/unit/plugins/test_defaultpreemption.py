"""DefaultPreemption: victims, candidate nodes and messages as kube-scheduler chooses them.

Each test runs the real default framework: the cycle's Filter rejects every
node, then PostFilter dry-runs its Filter plugins on copies of the nodes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pod_group
from tests.frameworks import FakeHandle
from usher.config import default_config
from usher.core.cache import Cache, DisruptionBudget
from usher.core.cycle import schedule
from usher.core.framework.args import PluginArgsError
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import PostFilterResult
from usher.core.framework.runtime import Framework
from usher.core.plugins.defaultpreemption import DefaultPreemption, PreemptionArgs, parse_args
from usher.core.plugins.registry import in_tree_registry
from usher.core.podgroups import PodGroupStates
from usher.core.queue.nominator import Nominator
from usher.core.types import Code, PodInfo, PodKey


class Cluster:
    def __init__(self, *, groups: bool = True, **budgets: list[DisruptionBudget]) -> None:
        self.cache = Cache(pod_groups=PodGroupStates(enabled=groups))
        self.handle = FakeHandle(budgets=dict(budgets), pod_groups=self.cache.pod_groups, cache=self.cache)
        self.nominator = Nominator()
        self.framework: Framework = build_framework(
            default_config("usher").profiles[0],
            registry=in_tree_registry(),
            handle=self.handle,
            nominated=self.nominator,
        )

    def node(self, name: str, cpu: str = "4", **labels: str) -> None:
        builder = make_node().name(name).capacity(cpu=cpu, memory="8Gi", pods=110)
        for key, value in labels.items():
            builder = builder.label(key, value)
        self.cache.add_or_update_node(builder.obj())

    def pod_group(self, name: str, priority: int, mode: str) -> None:
        """A PodGroup of the basic policy whose ``disruptionMode`` is ``mode`` ("all" or "single")."""
        self.cache.pod_groups.on_pod_group(False, make_pod_group(name, priority=priority, disruptionMode={mode: {}}))

    def running(
        self, name: str, node: str, priority: int, cpu: str = "1", start: str = "", group: str = "", **labels: str
    ) -> PodInfo:
        builder = make_pod().name(name).node(node).priority(priority).req(cpu=cpu)
        raw = (builder.group(group) if group else builder).obj()
        raw["metadata"]["labels"] = labels
        if start:
            raw["status"]["startTime"] = start
        pod = PodInfo.from_api(raw)
        self.cache.add_or_update_pod(pod)
        return pod

    def preempt(self, pod: PodInfo, plugin: DefaultPreemption | None = None) -> PostFilterResult:
        """One failed cycle for ``pod``, then PostFilter (the profile's, or ``plugin`` with this framework)."""
        state = CycleState()
        nodes = self.cache.node_infos()
        result = schedule(self.framework, state, pod, nodes, rng=random.Random(0))
        assert result.node is None, "the pod must not fit anywhere before preemption"
        if plugin is None:
            return self.framework.run_post_filter(state, pod, result.node_statuses, nodes)
        return plugin.post_filter(state, pod, result.node_statuses, nodes, self.framework)


def preemptor(cpu: str = "2", priority: int = 100, **spec: Any) -> PodInfo:
    raw = make_pod().name("high").priority(priority).req(cpu=cpu).obj()
    raw["spec"].update(spec)
    return PodInfo.from_api(raw)


def victims(result: PostFilterResult) -> list[str]:
    return [v.name for v in result.victims]


def budget(name: str, allowed: int, disrupted: tuple[str, ...] = (), **match: str) -> DisruptionBudget:
    return DisruptionBudget("default", name, {"matchLabels": match}, allowed, frozenset(disrupted))


def test_the_fewest_least_important_pods_are_evicted_and_the_rest_reprieved() -> None:
    cluster = Cluster()
    cluster.node("n1")
    cluster.running("lowest", "n1", 1)
    cluster.running("low", "n1", 2)
    cluster.running("mid", "n1", 3, cpu="2")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.status.code is Code.SUCCESS and result.status.plugin == "DefaultPreemption"
    assert result.nominated_node == "n1"
    assert victims(result) == ["low", "lowest"]
    assert result.status.message == "preemption: found a potential placement for pod on node n1, preempting 2 victims"


def test_pods_of_equal_or_higher_priority_are_never_victims() -> None:
    cluster = Cluster()
    cluster.node("n1")
    cluster.running("peer", "n1", 100, cpu="2")
    cluster.running("low", "n1", 1, cpu="2")

    result = cluster.preempt(preemptor(cpu="2"))

    assert victims(result) == ["low"]


def test_the_node_whose_highest_victim_priority_is_lowest_wins() -> None:
    cluster = Cluster()
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("five", "n1", 5, cpu="2")
    cluster.running("one-a", "n2", 1)
    cluster.running("one-b", "n2", 1)

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n2" and sorted(victims(result)) == ["one-a", "one-b"]


def test_at_equal_priority_the_node_with_fewer_victims_wins() -> None:
    # Sums of priorities, offset by 2^31 per victim as kube-scheduler does, favour fewer victims.
    cluster = Cluster()
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("a", "n1", 1)
    cluster.running("b", "n1", 1)
    cluster.running("c", "n2", 1, cpu="2")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n2" and victims(result) == ["c"]


def test_at_equal_cost_the_node_whose_victims_started_last_wins() -> None:
    cluster = Cluster()
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("older", "n1", 1, cpu="2", start="2026-11-01T10:00:00Z")
    cluster.running("newer", "n2", 1, cpu="2", start="2026-11-20T10:00:00Z")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n2" and victims(result) == ["newer"]


def test_a_node_whose_eviction_breaks_no_budget_wins_over_a_cheaper_one_that_does() -> None:
    cluster = Cluster(default=[budget("guard", 0, app="guarded")])
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("guarded", "n1", 1, cpu="2", app="guarded")
    cluster.running("free", "n2", 50, cpu="2", app="other")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n2" and victims(result) == ["free"]


def test_when_every_choice_breaks_a_budget_the_result_counts_the_violations() -> None:
    cluster = Cluster(default=[budget("guard", 0, app="guarded")])
    cluster.node("n1", cpu="2")
    cluster.running("guarded", "n1", 1, cpu="2", app="guarded")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n1" and victims(result) == ["guarded"] and result.budget_violations == 1
    free = Cluster()
    free.node("n1", cpu="2")
    free.running("plain", "n1", 1, cpu="2")
    assert free.preempt(preemptor(cpu="2")).budget_violations == 0


def test_budget_protected_pods_are_reprieved_first_on_a_node() -> None:
    cluster = Cluster(default=[budget("guard", 0, app="guarded")])
    cluster.node("n1", cpu="2")
    cluster.running("guarded", "n1", 1, app="guarded")
    cluster.running("plain", "n1", 5)

    result = cluster.preempt(preemptor(cpu="1"))

    # Without the budget the less important pod would go; the budget keeps it and costs the other.
    assert result.nominated_node == "n1" and victims(result) == ["plain"]


@pytest.mark.parametrize(
    "guard",
    [budget("spare", 1, app="cheap"), budget("counted", 0, disrupted=("cheap",), app="cheap")],
    ids=["disruptions left", "pod already counted"],
)
def test_a_budget_with_disruptions_left_or_that_already_counted_the_pod_is_not_broken(
    guard: DisruptionBudget,
) -> None:
    cluster = Cluster(default=[guard])
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("cheap", "n1", 1, cpu="2", app="cheap")
    cluster.running("pricier", "n2", 50, cpu="2")

    result = cluster.preempt(preemptor(cpu="2"))

    # The budget does not break, so the priority-1 victim wins over the priority-50 one.
    assert result.nominated_node == "n1"


def test_a_pod_that_may_not_preempt_says_so() -> None:
    cluster = Cluster()
    cluster.node("n1")
    cluster.running("low", "n1", 1, cpu="4")

    result = cluster.preempt(preemptor(preemptionPolicy="Never"))

    assert result.status.code is Code.UNSCHEDULABLE and result.nominated_node is None
    assert result.status.message == "preemption: not eligible due to preemptionPolicy=Never."


def test_a_pod_waits_while_a_victim_on_its_nominated_node_terminates() -> None:
    cluster = Cluster()
    cluster.node("n1")
    raw = make_pod().name("leaving").node("n1").priority(1).req(cpu="4").obj()
    raw["metadata"]["deletionTimestamp"] = "2026-11-25T08:00:00Z"
    raw["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    cluster.cache.add_or_update_pod(PodInfo.from_api(raw))
    pod = PodInfo.from_api({**preemptor().raw, "status": {"nominatedNodeName": "n1"}})

    result = cluster.preempt(pod)

    assert result.status.message == "preemption: not eligible due to a terminating pod on the nominated node."


def test_without_lower_priority_pods_the_message_says_why_node_by_node() -> None:
    cluster = Cluster()
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.node("off", cpu="8")
    cluster.cache.add_or_update_node(
        make_node().name("off").capacity(cpu="8", memory="8Gi", pods=110).unschedulable().obj()
    )
    cluster.running("peer-1", "n1", 100, cpu="2")
    cluster.running("peer-2", "n2", 100, cpu="2")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.status.code is Code.UNSCHEDULABLE and result.victims == ()
    assert result.status.message == (
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling,"
        " 2 No preemption victims found for incoming pod."
    )


def test_a_node_where_even_evicting_every_candidate_victim_is_not_enough_is_no_candidate() -> None:
    cluster = Cluster()
    cluster.node("n1", cpu="2")
    cluster.running("low", "n1", 1)
    cluster.running("peer", "n1", 100)

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.status.message == "preemption: 0/1 nodes are available: 1 Insufficient cpu."


def test_room_held_for_a_nominated_pod_of_higher_priority_is_not_taken() -> None:
    cluster = Cluster()
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("low-1", "n1", 1, cpu="2")
    cluster.running("low-2", "n2", 1, cpu="2")
    waiting = PodInfo.from_api(make_pod().name("vip").priority(1000).req(cpu="2").obj())
    cluster.nominator.nominate(waiting, "n1")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n2" and victims(result) == ["low-2"]


def test_the_dry_run_stops_once_enough_candidates_are_found_from_a_random_offset() -> None:
    cluster = Cluster()
    for i in range(6):
        cluster.node(f"n{i}", cpu="2")
        cluster.running(f"low-{i}", f"n{i}", 1, cpu="2")
    one = PreemptionArgs(min_candidate_nodes_percentage=0, min_candidate_nodes_absolute=1)
    nodes = [n.name for n in cluster.cache.node_infos()]

    for seed in range(4):
        plugin = DefaultPreemption(one, cluster.handle, random.Random(seed))
        result = cluster.preempt(preemptor(cpu="2"), plugin)
        # Every node is as good as any other: the first one examined is the one chosen.
        assert result.nominated_node == nodes[random.Random(seed).randrange(len(nodes))]


@pytest.mark.parametrize(
    ("nodes", "percentage", "absolute", "wanted"),
    [(1000, 10, 100, 100), (5000, 10, 100, 500), (50, 10, 100, 50), (10, 50, 0, 5), (10, 0, 3, 3)],
)
def test_how_many_candidates_are_wanted(nodes: int, percentage: int, absolute: int, wanted: int) -> None:
    assert PreemptionArgs(percentage, absolute).candidates_wanted(nodes) == wanted


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ({"minCandidateNodesPercentage": 101}, "minCandidateNodesPercentage", "not in valid range [0, 100]"),
        ({"minCandidateNodesPercentage": -1}, "minCandidateNodesPercentage", "not in valid range [0, 100]"),
        ({"minCandidateNodesAbsolute": -1}, "minCandidateNodesAbsolute", "not in valid range [0, inf)"),
        ({"minCandidateNodesAbsolute": "1"}, "minCandidateNodesAbsolute", "not in valid range [0, inf)"),
        (
            {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
            "minCandidateNodesPercentage",
            "cannot be zero at the same time as minCandidateNodesAbsolute",
        ),
        ({"minCandidates": 1}, "minCandidates", "unknown field"),
    ],
)
def test_bad_args_name_the_field(args: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(PluginArgsError) as raised:
        parse_args(args)
    assert raised.value.field == field and message in raised.value.message


def test_args_default_as_kube_schedulers() -> None:
    assert parse_args({}) == PreemptionArgs(10, 100)
    assert parse_args({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 5}) == PreemptionArgs(0, 5)


def test_a_pod_whose_evictions_are_in_flight_waits_at_pre_enqueue() -> None:
    cluster = Cluster()
    plugin = DefaultPreemption(PreemptionArgs(), cluster.handle)
    pod = preemptor()
    assert plugin.pre_enqueue(pod).ok

    cluster.handle.preemptions.started(pod.uid, [PodKey("default/low")])
    waiting = plugin.pre_enqueue(pod)
    assert waiting.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert waiting.message == "waiting for the preemption for this pod to be finished"

    assert cluster.handle.preemptions.finished(pod.uid)
    assert plugin.pre_enqueue(pod).ok


def test_a_victim_usher_is_evicting_blocks_a_second_preemption_from_its_nominated_node() -> None:
    cluster = Cluster()
    cluster.node("n1")
    cluster.node("n2")
    victim = cluster.running("leaving", "n1", 1, cpu="4")
    cluster.running("other", "n2", 1, cpu="4")
    pod = PodInfo.from_api({**preemptor().raw, "status": {"nominatedNodeName": "n1"}})
    cluster.handle.preemptions.started("someone", [victim.key])

    result = cluster.preempt(pod)

    assert result.status.message == "preemption: not eligible due to a terminating pod on the nominated node."


def test_victims_that_a_spread_constraint_counts_are_counted_out_of_the_dry_run() -> None:
    # kube's e2e "PodTopologySpread Preemption": room for the pod needs one victim, the spread needs two.
    cluster = Cluster()
    for name in ("n1", "n2"):
        cluster.cache.add_or_update_node(
            make_node()
            .name(name)
            .capacity(cpu="10", memory="8Gi", pods=110)
            .label("kubernetes.io/hostname", name)
            .obj()
        )
    cluster.running("high", "n1", 1000, cpu="9", spread="")
    for i in range(3):
        cluster.running(f"low-{i}", "n2", 1, cpu="3", spread="", start=f"2026-11-2{i}T00:00:00Z")
    raw = preemptor(cpu="3", priority=500).raw
    raw["metadata"]["labels"] = {"spread": ""}
    raw["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchExpressions": [{"key": "spread", "operator": "Exists"}]},
        }
    ]

    result = cluster.preempt(PodInfo.from_api(raw))

    assert result.nominated_node == "n2"
    # The two started last go; the one started first (most important at equal priority) stays.
    assert sorted(victims(result)) == ["low-1", "low-2"]


def hostname_nodes(cluster: Cluster, *names: str, cpu: str = "2") -> None:
    for name in names:
        cluster.cache.add_or_update_node(
            make_node().name(name).capacity(cpu=cpu, memory="8Gi", pods=110).label("kubernetes.io/hostname", name).obj()
        )


def with_pod_affinity(pod: PodInfo, kind: str, **match: str) -> PodInfo:
    raw = dict(pod.raw)
    term = {"labelSelector": {"matchLabels": match}, "topologyKey": "kubernetes.io/hostname"}
    raw["spec"] = {**raw["spec"], "affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    return PodInfo.from_api(raw)


def test_a_victim_the_pod_has_anti_affinity_to_is_evicted_to_make_room() -> None:
    cluster = Cluster()
    hostname_nodes(cluster, "n1")
    cluster.running("web", "n1", 1, app="web")

    result = cluster.preempt(with_pod_affinity(preemptor(cpu="1"), "podAntiAffinity", app="web"))

    assert result.nominated_node == "n1" and victims(result) == ["web"]


def test_a_pod_is_not_placed_by_evicting_the_pod_its_affinity_needs() -> None:
    # As kube-scheduler: all lower-priority pods are removed first, and without "db" the affinity fails.
    cluster = Cluster()
    hostname_nodes(cluster, "n1", "n2")
    cluster.running("db", "n1", 1, app="db")
    cluster.running("filler", "n1", 1)
    cluster.running("other", "n2", 1, cpu="2")

    result = cluster.preempt(with_pod_affinity(preemptor(cpu="1"), "podAffinity", app="db"))

    assert result.nominated_node is None
    # n2 failed on cpu first (NodeResourcesFit runs before InterPodAffinity), so it is tried too.
    assert result.status.message == "preemption: 0/2 nodes are available: 2 node(s) didn't match pod affinity rules."


def test_a_victim_whose_anti_affinity_rejects_the_pod_is_evicted_to_make_room() -> None:
    cluster = Cluster()
    hostname_nodes(cluster, "n1")
    loner = with_pod_affinity(preemptor(cpu="1"), "podAntiAffinity", app="high")
    raw = dict(loner.raw)
    raw["metadata"] = {**raw["metadata"], "name": "loner", "uid": "loner-uid"}
    raw["spec"] = {**raw["spec"], "nodeName": "n1", "priority": 1}
    cluster.cache.add_or_update_pod(PodInfo.from_api(raw))
    pod = preemptor(cpu="1")
    pod = PodInfo.from_api({**pod.raw, "metadata": {**pod.raw["metadata"], "labels": {"app": "high"}}})

    result = cluster.preempt(pod)

    assert result.nominated_node == "n1" and victims(result) == ["loner"]


def test_an_extended_resource_held_by_a_lower_priority_pod_is_freed_by_preemption() -> None:
    cluster = Cluster()
    cluster.cache.add_or_update_node(
        make_node().name("n1").capacity(cpu="8", memory="8Gi", pods=110, **{"example.com/gpu": 1}).obj()
    )
    cluster.cache.add_or_update_pod(
        PodInfo.from_api(make_pod().name("holder").node("n1").priority(1).req(**{"example.com/gpu": "1"}).obj())
    )
    cluster.running("bystander", "n1", 1)
    pod = PodInfo.from_api(make_pod().name("high").priority(100).req(**{"example.com/gpu": "1"}).obj())

    result = cluster.preempt(pod)

    assert result.nominated_node == "n1" and victims(result) == ["holder"]


# -- victims of pod groups (kube's getCrossNodesVictims, GenericWorkload on) ---------------------


def test_a_pod_group_disrupted_together_is_evicted_whole_from_every_node() -> None:
    cluster = Cluster()
    cluster.pod_group("train", 1, "all")
    for node in ("n1", "n2"):
        cluster.node(node, cpu="2")
    cluster.running("a", "n1", 1, cpu="2", group="train")
    cluster.running("b", "n2", 1, cpu="1", group="train")
    cluster.running("c", "n2", 1, cpu="1", group="train")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.status.code is Code.SUCCESS
    assert sorted(victims(result)) == ["a", "b", "c"], "the room on one node costs the whole group"
    assert result.status.message.endswith("preempting 3 victims")


def test_the_same_group_under_single_disruption_loses_only_the_pods_in_the_way() -> None:
    cluster = Cluster()
    cluster.pod_group("train", 1, "single")
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("a", "n1", 1, cpu="2", group="train")
    cluster.running("b", "n2", 1, cpu="1", group="train", start="2026-01-01T00:00:00Z")
    cluster.running("c", "n2", 1, cpu="1", group="train", start="2026-01-02T00:00:00Z")

    result = cluster.preempt(preemptor(cpu="1"))

    assert len(victims(result)) == 1
    assert victims(result) in (["a"], ["c"]), "one pod, never the group"


def test_a_lone_pod_is_cheaper_to_evict_than_a_whole_group() -> None:
    cluster = Cluster()
    cluster.pod_group("train", 1, "all")
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.node("n3", cpu="2")
    cluster.running("a", "n1", 1, cpu="2", group="train")
    cluster.running("b", "n2", 1, cpu="2", group="train")
    cluster.running("lone", "n3", 1, cpu="2")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.nominated_node == "n3" and victims(result) == ["lone"]


def test_a_group_victim_is_reprieved_before_a_lone_pod_of_the_same_priority() -> None:
    cluster = Cluster()
    cluster.pod_group("train", 1, "single")
    cluster.node("n1", cpu="2")
    # The lone pod started first: by start time alone it would be the one kept.
    cluster.running("lone", "n1", 1, cpu="1", start="2026-01-01T00:00:00Z")
    cluster.running("member", "n1", 1, cpu="1", group="train", start="2026-01-02T00:00:00Z")

    result = cluster.preempt(preemptor(cpu="1"))

    assert victims(result) == ["lone"]


def test_a_group_member_counts_at_its_groups_priority() -> None:
    cluster = Cluster()
    cluster.pod_group("critical", 1000, "single")
    cluster.node("n1", cpu="2")
    cluster.running("member", "n1", 1, cpu="2", group="critical")

    result = cluster.preempt(preemptor(cpu="2"))

    assert result.status.code is Code.UNSCHEDULABLE and not victims(result)
    assert "No preemption victims found for incoming pod" in result.status.message


def test_without_pod_groups_every_pod_is_its_own_victim() -> None:
    cluster = Cluster(groups=False)
    cluster.pod_group("train", 1, "all")
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("a", "n1", 1, cpu="2", group="train", start="2026-01-01T00:00:00Z")
    cluster.running("b", "n2", 1, cpu="2", group="train", start="2026-01-02T00:00:00Z")

    result = cluster.preempt(preemptor(cpu="2"))

    assert victims(result) == ["b"], "one pod, the one started last"


def test_a_group_whose_budget_would_break_is_kept_while_another_choice_exists() -> None:
    cluster = Cluster(default=[budget("pdb", 0, app="guarded")])
    cluster.pod_group("train", 1, "all")
    cluster.node("n1", cpu="2")
    cluster.node("n2", cpu="2")
    cluster.running("a", "n1", 1, cpu="1", group="train")
    cluster.running("guarded", "n2", 1, cpu="1", group="train", app="guarded")
    cluster.running("other", "n1", 1, cpu="1")
    cluster.running("peer", "n2", 100, cpu="1")

    result = cluster.preempt(preemptor(cpu="1"))

    assert victims(result) == ["other"], "evicting the group would break its budget through one member"
