"""Batch Filter/Score (``filter_nodes``/``score_nodes``) agree with the per-node calls, node for node.

The batch forms are the cycle's fast path; the per-node forms are what
kube-scheduler's semantics were written against. Random clusters and pods
check that every plugin that has both gives the same answers both ways.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod
from tests.frameworks import framework
from usher.core.cache import Cache, NodeInfo
from usher.core.cycle import NodeSampler, schedule
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import BatchFilterPlugin, BatchScorePlugin
from usher.core.framework.runtime import Framework
from usher.core.types import Code, PodInfo, Status

EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
HOSTNAME, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"

PROFILES: dict[str, Any] = {
    "default": None,
    "most-allocated": """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: usher
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 3}, {name: memory, weight: 1}, {name: example.com/gpu, weight: 2}]
  - name: NodeResourcesBalancedAllocation
    args:
      resources: [{name: cpu}, {name: memory}, {name: example.com/gpu}]
""",
    "ratio-ignored": """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: usher
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: [example.com/gpu]
      scoringStrategy:
        type: RequestedToCapacityRatio
        requestedToCapacityRatio:
          shape: [{utilization: 0, score: 0}, {utilization: 60, score: 10}, {utilization: 100, score: 2}]
""",
}


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeInfo], PodInfo]:
    seed = draw(st.integers(0, 2**32 - 1))
    rnd = random.Random(seed)
    cache = Cache()
    for i in range(draw(st.integers(1, 25))):
        builder = make_node().name(f"n{i:02d}")
        capacity: dict[str, Any] = {"cpu": rnd.choice(["0", "1", "2", "4"]), "memory": rnd.choice(["0", "1Gi", "4Gi"])}
        capacity["pods"] = rnd.choice(["0", "1", "3", "110"])
        if rnd.random() < 0.4:
            capacity["example.com/gpu"] = str(rnd.randint(0, 3))
        builder.capacity(**capacity)
        if rnd.random() < 0.9:
            builder.label(HOSTNAME, f"n{i:02d}")
        if rnd.random() < 0.6:
            builder.label(ZONE, rnd.choice(["a", "b", "c"]))
        node = builder.obj()
        if rnd.random() < 0.3:
            node["spec"]["unschedulable"] = True
        if rnd.random() < 0.4:
            node["spec"]["taints"] = [
                {"key": rnd.choice(["a", "b"]), "value": rnd.choice(["", "x"]), "effect": rnd.choice(EFFECTS)}
                for _ in range(rnd.randint(1, 2))
            ]
        cache.add_or_update_node(node)
    names = [info.name for info in cache.node_infos()]
    for j in range(rnd.randint(0, 30)):
        requests = {"cpu": rnd.choice(["0", "100m", "900m"]), "memory": rnd.choice(["0", "300Mi", "2Gi"])}
        if rnd.random() < 0.3:
            requests["example.com/gpu"] = "1"
        existing = make_pod().name(f"e{j}").req(**requests).node(rnd.choice(names)).obj()
        _with_affinity(existing, rnd, chance=0.3)
        cache.add_or_update_pod(PodInfo.from_api(existing))
    pod = make_pod().name("incoming").req(cpu=rnd.choice(["0", "200m", "1500m"]), memory=rnd.choice(["0", "3Gi"])).obj()
    if rnd.random() < 0.3:
        pod["spec"]["containers"][0]["resources"]["requests"]["example.com/gpu"] = "1"
    if rnd.random() < 0.4:
        pod["spec"]["tolerations"] = [
            {"key": rnd.choice(["a", "b", "node.kubernetes.io/unschedulable"]), "operator": "Exists"}
            | ({"effect": rnd.choice(EFFECTS)} if rnd.random() < 0.5 else {})
        ]
    if rnd.random() < 0.2:
        pod["spec"]["nodeName"] = rnd.choice(names)
    _with_affinity(pod, rnd, chance=0.5)
    return cache.node_infos(), PodInfo.from_api(pod)


def _with_affinity(pod: dict[str, Any], rnd: random.Random, *, chance: float) -> None:
    """An ``app`` label, and with ``chance`` preferred pod (anti-)affinity terms by hostname or zone (InterPodAffinity
    scores with them: one topology key or two)."""
    pod["metadata"]["labels"] = {"app": rnd.choice(["x", "y"])}
    if rnd.random() >= chance:
        return
    affinity: dict[str, Any] = {}
    for kind in rnd.sample(["podAffinity", "podAntiAffinity"], rnd.randint(1, 2)):
        terms = [
            {
                "weight": rnd.randint(1, 100),
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": rnd.choice(["x", "y"])}},
                    "topologyKey": rnd.choice([HOSTNAME, ZONE]),
                },
            }
            for _ in range(rnd.randint(1, 2))
        ]
        affinity[kind] = {"preferredDuringSchedulingIgnoredDuringExecution": terms}
    pod["spec"]["affinity"] = affinity


def _plugins(fw: Framework) -> tuple[list[BatchFilterPlugin], list[BatchScorePlugin]]:
    filters = [p for p in fw.plugins.filter if isinstance(p, BatchFilterPlugin)]
    scorers = [p for p, _ in fw.plugins.score if isinstance(p, BatchScorePlugin)]
    return filters, scorers


def test_the_default_profile_filters_and_scores_in_batches() -> None:
    filters, scorers = _plugins(framework())
    assert {p.name for p in filters} >= {
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeResourcesFit",
        "DynamicResources",  # with claims: tests/unit/dra/test_batch_filter.py
        "PodTopologySpread",  # with constraints: tests/unit/plugins/test_podtopologyspread.py
        "VolumeBinding",  # with claims: tests/unit/plugins/test_volumebinding.py
        "NodeVolumeLimits",  # with claims: tests/unit/plugins/test_nodevolumelimits.py
        "InterPodAffinity",  # with terms: tests/unit/plugins/test_interpodaffinity.py
    }
    assert {p.name for p in scorers} >= {
        "TaintToleration",
        "NodeResourcesFit",
        "NodeResourcesBalancedAllocation",
        "PodTopologySpread",  # its constraints: tests/unit/plugins/test_podtopologyspread.py
        "InterPodAffinity",
    }


@settings(max_examples=150, deadline=None)
@given(cluster=clusters(), profile=st.sampled_from(sorted(PROFILES)))
def test_batch_answers_equal_per_node_answers(cluster: tuple[list[NodeInfo], PodInfo], profile: str) -> None:
    nodes, pod = cluster
    fw = framework(PROFILES[profile])
    filters, scorers = _plugins(fw)
    for plugin in filters:
        state = CycleState()
        one_by_one = [plugin.filter(state, pod, node) for node in nodes]
        expected = [None if status.ok else status for status in one_by_one]
        assert plugin.filter_nodes(state, pod, nodes) == expected, plugin.name
    for scorer in scorers:
        state = CycleState()
        if hasattr(scorer, "pre_score"):
            pre = scorer.pre_score(state, pod, nodes)
            if pre.code is Code.SKIP:  # nothing to score this pod by (PodTopologySpread without constraints)
                continue
            assert pre.ok
        single = [scorer.score(state, pod, node) for node in nodes]
        assert all(status.ok for _, status in single)
        scores, status = scorer.score_nodes(state, pod, nodes)
        assert status.ok
        assert scores == [value for value, _ in single], scorer.name


class _RaisesInBatch:
    """A batch that fails as a whole while one node's own filter is what raises."""

    name = "Fragile"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if node.name == "n02":
            raise RuntimeError("broken node")
        return Status()

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[Status | None]:
        return [None if self.filter(state, pod, n).ok else Status() for n in nodes]


def test_a_batch_that_raises_is_redone_node_by_node_so_the_error_lands_on_its_node() -> None:
    from usher.core.framework.runtime import PluginSet
    from usher.core.plugins.queuesort import PrioritySort

    cache = Cache()
    for i in range(4):
        cache.add_or_update_node(make_node().name(f"n{i:02d}").obj())
    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), filter=[_RaisesInBatch()]))  # type: ignore[list-item]
    results = fw.run_filter_nodes(CycleState(), PodInfo.from_api(make_pod().obj()), cache.node_infos())
    assert [r is None for r in results] == [True, True, False, True]
    broken = results[2]
    assert broken is not None and broken.plugin == "Fragile" and "broken node" in broken.message


def _sequential_evaluated(feasible: list[bool], start: int, want: int) -> int:
    """How many nodes a one-node-at-a-time filter looks at before it has ``want`` feasible ones."""
    found = 0
    for i in range(len(feasible)):
        found += feasible[(start + i) % len(feasible)]
        if found >= want:
            return i + 1
    return len(feasible)


@settings(max_examples=40, deadline=None)
@given(full=st.lists(st.booleans(), min_size=100, max_size=260), rounds=st.integers(1, 3))
def test_chunked_filtering_evaluates_exactly_the_nodes_a_sequential_filter_would(full: list[bool], rounds: int) -> None:
    cache = Cache()
    for i, is_full in enumerate(full):
        capacity = {"cpu": "4", "memory": "8Gi", "pods": "0" if is_full else "110"}
        cache.add_or_update_node(make_node().name(f"n{i:03d}").capacity(**capacity).obj())
    nodes = cache.node_infos()
    feasible = [info.allocatable.get("pods", 0) > 0 for info in nodes]
    sampler = NodeSampler(percentage=30)
    fw = framework()
    want = sampler.num_to_find(len(nodes), None)
    pod = PodInfo.from_api(make_pod().obj())
    for _ in range(rounds):
        start = sampler.next_start
        result = schedule(fw, CycleState(), pod, nodes, rng=random.Random(1), sampler=sampler)
        expected = _sequential_evaluated(feasible, start, want)
        assert result.evaluated == expected
        assert result.feasible == min(want, sum(feasible))
        assert sampler.next_start == (start + expected) % len(nodes)
        assert len(result.node_statuses) == expected - result.feasible


class _ForgetsToAnswer:
    name = "Forgetful"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return None  # type: ignore[return-value]  # the plugin bug under test


def test_a_per_node_filter_that_returns_nothing_rejects_with_an_error_instead_of_passing() -> None:
    from usher.core.framework.runtime import PluginSet
    from usher.core.plugins.queuesort import PrioritySort
    from usher.core.types import Code

    cache = Cache()
    cache.add_or_update_node(make_node().name("n1").obj())
    fw = Framework("usher", PluginSet(queue_sort=PrioritySort(), filter=[_ForgetsToAnswer()]))  # type: ignore[list-item]
    [result] = fw.run_filter_nodes(CycleState(), PodInfo.from_api(make_pod().obj()), cache.node_infos())
    assert result is not None and result.code is Code.ERROR and result.plugin == "Forgetful"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), profile=st.sampled_from(sorted(PROFILES)))
def test_scores_kept_across_cycles_equal_fresh_ones_while_the_nodes_change(seed: int, profile: str) -> None:
    """Fit and BalancedAllocation keep each node's score per pod shape while its generation holds: after
    every change (pods added and removed, a node's capacity changed, a node replaced by a dry run's clone)
    the batch equals the per-node score."""
    rnd = random.Random(seed)
    cache = Cache()
    for i in range(rnd.randint(1, 12)):
        cache.add_or_update_node(make_node().name(f"n{i:02d}").capacity(cpu="4", memory="8Gi", pods="110").obj())
    names = [info.name for info in cache.node_infos()]
    _, scorers = _plugins(framework(PROFILES[profile]))
    shapes = [("100m", "500Mi"), ("0", "0"), ("1500m", "3Gi")]
    placed: list[PodInfo] = []
    for step in range(40):
        action = rnd.random()
        if action < 0.45:
            cpu, memory = rnd.choice(shapes)
            existing = PodInfo.from_api(
                make_pod().name(f"e{step}").req(cpu=cpu, memory=memory).node(rnd.choice(names)).obj()
            )
            cache.add_or_update_pod(existing)
            placed.append(existing)
        elif action < 0.65 and placed:
            cache.remove_pod(placed.pop(rnd.randrange(len(placed))).key)
        elif action < 0.8:
            cpu = rnd.choice(["2", "4", "8"])
            cache.add_or_update_node(
                make_node().name(rnd.choice(names)).capacity(cpu=cpu, memory="8Gi", pods="110").obj()
            )
        nodes = list(cache.node_infos())
        if rnd.random() < 0.3:  # preemption's dry run: a clone with a pod more, in its node's place
            i = rnd.randrange(len(nodes))
            clone = nodes[i].clone()
            cpu, memory = rnd.choice(shapes)
            clone.add_pod(
                PodInfo.from_api(make_pod().name(f"d{step}").req(cpu=cpu, memory=memory).node(clone.name).obj())
            )
            nodes[i] = clone
        cpu, memory = rnd.choice(shapes)
        pod = PodInfo.from_api(make_pod().name(f"p{step}").req(cpu=cpu, memory=memory).obj())
        for scorer in scorers:
            state = CycleState()
            if hasattr(scorer, "pre_score") and scorer.pre_score(state, pod, nodes).code is Code.SKIP:
                continue
            scores, status = scorer.score_nodes(state, pod, nodes)
            assert status.ok
            assert scores == [scorer.score(state, pod, node)[0] for node in nodes], (scorer.name, step)
