"""Preemption's yes-or-no Filter pass (``Framework.fits_again``) answers as the full pass does.

Giving a victim back in a dry run asks only the Filter plugins that look at the node's pods, for a
yes or no (NodeResourcesFit without its reasons); the plugins marked node-only are not asked again.
Each shortcut is checked against the full answer on random pods and nodes.
"""

from __future__ import annotations

import random

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.config import default_config, parse_config
from usher.core.cache import Cache
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import NODE_ONLY
from usher.core.plugins.noderesources.fit import FitArgs, NodeResourcesFit
from usher.core.plugins.registry import in_tree_registry
from usher.core.types import PodInfo

RESOURCES = ("cpu", "memory", "example.com/gpu")


def random_pod(rnd: random.Random, name: str) -> PodInfo:
    requests: dict[str, str] = {}
    if rnd.random() < 0.9:
        requests["cpu"] = f"{rnd.randint(100, 3000)}m"
    if rnd.random() < 0.7:
        requests["memory"] = f"{rnd.randint(1, 6)}Gi"
    if rnd.random() < 0.2:
        requests["example.com/gpu"] = str(rnd.randint(1, 2))
    builder = make_pod().name(name).uid(f"uid-{name}").req(**requests)
    if rnd.random() < 0.2:
        builder._pod["spec"]["nodeSelector"] = {"zone": rnd.choice(("a", "b"))}
    return PodInfo.from_api(builder.obj())


def random_cache(rnd: random.Random) -> Cache:
    cache = Cache()
    for i in range(6):
        node = make_node().name(f"n{i}").label("zone", rnd.choice(("a", "b")))
        node = node.capacity(cpu=rnd.choice(("2", "4")), memory="8Gi", pods=rnd.choice((3, 110)))
        if rnd.random() < 0.3:
            node._node["status"]["allocatable"]["example.com/gpu"] = "2"
        if rnd.random() < 0.2:
            node = node.unschedulable()
        cache.add_or_update_node(node.obj())
        for j in range(rnd.randint(0, 4)):
            placed = random_pod(rnd, f"on-n{i}-{j}")
            cache.add_or_update_pod(
                PodInfo.from_api({**placed.raw, "spec": {**placed.raw["spec"], "nodeName": f"n{i}"}})
            )
    return cache


@pytest.mark.parametrize("seed", range(40))
def test_node_resources_fit_answers_yes_or_no_as_its_filter_does(seed: int) -> None:
    rnd = random.Random(seed)
    cache = random_cache(rnd)
    ignored = rnd.choice(((), ("example.com/gpu",), ("memory",)))
    fit = NodeResourcesFit(FitArgs(ignored_resources=frozenset(ignored)))
    for i in range(20):
        pod = random_pod(rnd, f"p{i}")
        for node in cache.node_infos():
            assert fit.fits(CycleState(), pod, node) == fit.filter(CycleState(), pod, node).ok


@pytest.mark.parametrize("seed", range(40))
def test_giving_pods_back_asks_only_what_can_change_and_answers_as_the_full_pass(seed: int) -> None:
    rnd = random.Random(seed)
    cache = random_cache(rnd)
    fw = build_framework(default_config().profiles[0], registry=in_tree_registry(), handle=FakeHandle(cache=cache))
    for i in range(10):
        pod = random_pod(rnd, f"p{i}")
        state = CycleState()
        fw.run_pre_filter(state, pod, cache.node_infos())
        for node in cache.node_infos():
            trial = node.clone()
            removed = list(trial.pods.values())
            for victim in removed:
                trial.remove_pod(victim.key)
            if fw.filter_node(state, pod, trial) is not None:
                continue  # fitsAgain is only asked of a node the pod fitted with fewer pods
            for victim in removed:
                trial.add_pod(victim)
                assert fw.fits_again(state, pod, trial) == (fw.filter_node(state, pod, trial) is None)


def test_the_plugins_marked_node_only_answer_alike_whatever_the_pods_on_the_node() -> None:
    registry = in_tree_registry()
    profile = parse_config(
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}, registry=registry
    ).profiles[0]
    fw = build_framework(profile, registry=registry, handle=FakeHandle())
    node_only = [p for p in fw.plugins.filter if not getattr(p, NODE_ONLY, True)]
    assert sorted(p.name for p in node_only) == ["NodeAffinity", "NodeName", "NodeUnschedulable", "TaintToleration"]
    rnd = random.Random(7)
    for seed in range(20):
        cache = random_cache(random.Random(seed))
        for node in cache.node_infos():
            empty = node.clone()
            for key in list(empty.pods):
                empty.remove_pod(key)
            pod = random_pod(rnd, f"q{seed}")
            state = CycleState()
            fw.run_pre_filter(state, pod, [node])
            for plugin in node_only:
                assert plugin.filter(state, pod, node).ok == plugin.filter(state, pod, empty).ok
