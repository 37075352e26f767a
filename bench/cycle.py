"""Micro-benchmark of usher's scheduling cycle alone: no API server, no watch, no binding.

The default profile schedules pods shaped like scheduler_perf's onto a cache of
nodes shaped like scheduler_perf's, in one process, and reports the cycle's
cost per pod. It isolates what ``make bench`` cannot: how much of a pod's
time is PreFilter/Filter/Score/assume, so a change to a plugin's hot path can
be measured in seconds. Not a claim about throughput (those come from
``python -m bench.runner``, side by side with kube-scheduler).

    python -m bench.cycle --nodes 5000 --init 1000 --pods 1000
    python -m bench.cycle --nodes 5000 --profile      # cProfile's top entries
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import time
from typing import Any

from bench import workloads
from usher.config import default_config
from usher.core.cache import Cache
from usher.core.cycle import NodeSampler, schedule
from usher.core.dra.state import DraState
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.registry import in_tree_registry
from usher.core.types import PodInfo
from usher.core.volumes.state import VolumeState
from usher.scheduling.preemption import Evictions


class _Handle:
    """The framework handle's read side; binding, permits and claim writes are never reached here."""

    binder: Any = None
    waiting_pods: Any = None
    claims: Any = None

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self.dra = DraState()
        self.preemptions = Evictions()
        self.volumes = VolumeState()
        self.volume_writer: Any = None
        self.pod_groups = cache.pod_groups

    def node_labels(self, node: str) -> Any:
        info = self._cache.node(node)
        return info.labels if info is not None else None

    def node_info(self, node: str) -> Any:
        return self._cache.node(node)

    def nominated_pods(self, node: str) -> Any:
        return []

    def image(self, name: str) -> tuple[int, int] | None:
        return self._cache.image(name)

    def node_count(self) -> int:
        return len(self._cache.node_infos())

    def node_of_pod(self, key: Any) -> Any:
        return self._cache.node_of_pod(key)

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        labels = self._cache.namespace_labels(namespace)
        return dict(labels) if labels is not None else None

    def namespace_generation(self) -> int:
        return self._cache.namespace_generation()

    def service_selectors(self, namespace: str) -> Any:
        return self._cache.service_selectors(namespace)

    def disruption_budgets(self, namespace: str) -> Any:
        return self._cache.disruption_budgets(namespace)


def run(nodes: int, init: int, pods: int, *, profile: bool) -> Cache:
    """Schedule ``init`` then ``pods`` pods (each assumed on its node); the cache they end up in."""
    cache = Cache()
    for i in range(nodes):
        cache.add_or_update_node(workloads.node(i))
    framework = build_framework(default_config("usher").profiles[0], registry=in_tree_registry(), handle=_Handle(cache))
    rng = random.Random(1)
    sampler = NodeSampler()

    def one(name: str) -> None:
        raw = workloads.pod(name, "usher", "measured")
        raw["metadata"].update(namespace="bench", uid=name)
        pod = PodInfo.from_api(raw)
        result = schedule(framework, CycleState(), pod, cache.node_infos(), rng=rng, sampler=sampler)
        assert result.node is not None, result.message
        cache.assume(pod, result.node)

    for i in range(init):
        one(f"init-{i:05d}")
    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    for i in range(pods):
        one(f"measured-{i:05d}")
    if profiler:
        profiler.disable()
    elapsed = time.perf_counter() - started
    print(f"{nodes} nodes, {init} init pods: {pods} pods in {elapsed:.3f} s = {elapsed / pods * 1e6:.0f} us/pod")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--init", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries by own time")
    args = parser.parse_args()
    run(args.nodes, args.init, args.pods, profile=args.profile)


if __name__ == "__main__":
    main()
