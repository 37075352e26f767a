"""DynamicResources' batch Filter (``filter_nodes``) answers as ``filter`` does, node for node.

The batch rejects nodes short of free devices from counts it keeps per pool and in-use
version, without searching; ``filter`` always searches. Random inventories, in-use devices
and claims, over pods that follow one another (so answers and counts are remembered, and the
devices in use change between pods), check that both give the same statuses and allocations.
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice, node_selector, sub_request
from usher.core.cache import Cache, NodeInfo
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.dynamicresources import STATE_KEY, DynamicResources
from usher.core.types import PodInfo, Status

MODEL = f'device.attributes["{DRIVER}"].model'
CLASSES = {
    "gpu": (),
    "a100": (f'{MODEL} == "a100"',),  # a CEL error on devices without a model
    "odd": (f'device.attributes["{DRIVER}"].numa == 1',),
}


def _device(rnd: random.Random, name: str, counted: bool = False) -> dict[str, Any]:
    """``counted``: the pool offers counter set "cs" (a partition then consumes it half the time; elsewhere a device
    that consumes it, now and then, makes its pool invalid)."""
    entry: dict[str, Any] = {"name": name, "attributes": {"numa": {"int": rnd.randint(0, 1)}}}
    if rnd.random() < 0.9:
        entry["attributes"]["model"] = {"string": rnd.choice(["a100", "h100"])}
    if rnd.random() < (0.5 if counted else 0.05):
        amount = str(rnd.randint(1, 2))
        entry["consumesCounters"] = [{"counterSet": "cs", "counters": {"mem": {"value": amount}}}]
    return entry


def _cluster(rnd: random.Random, handle: FakeHandle) -> tuple[list[NodeInfo], list[tuple[str, str, str]]]:
    """Nodes and their slices; returns the nodes and every device as (pool, device, node or "")."""
    cache = Cache()
    devices: list[tuple[str, str, str]] = []
    nodes = [f"n{i}" for i in range(rnd.randint(1, 6))]
    for node in nodes:
        cache.add_or_update_node(make_node().name(node).label("zone", rnd.choice(["a", "b"])).obj())
        slices = rnd.choice([1, 1, 1, 2])
        counted = rnd.random() < 0.3  # a slice of shared counters too (partitionable devices)
        count = slices + counted + (rnd.random() < 0.05)  # now and then a slice still missing: incomplete
        for s in range(slices):
            builder = make_slice().name(f"{node}-s{s}").driver(DRIVER).pool(node, count=count).node(node)
            names = [f"d{s}-{d}" for d in range(rnd.randint(0, 5))]
            if rnd.random() < 0.05 and names:
                names.append(names[0])  # a duplicate device name: the pool is invalid
            for name in names:
                builder.raw_device(_device(rnd, name, counted))
                devices.append((node, name, node))
            handle.dra.on_slice(False, builder.obj())
        if counted:
            counters = make_slice().name(f"{node}-c").driver(DRIVER).pool(node, count=count).node(node)
            handle.dra.on_slice(False, counters.counters("cs", mem=str(rnd.randint(0, 4))).obj())
    if rnd.random() < 0.3:
        builder = make_slice().name("shared").driver(DRIVER).pool("shared").all_nodes()
        for d in range(rnd.randint(1, 3)):
            builder.raw_device(_device(rnd, f"s{d}"))
            devices.append(("shared", f"s{d}", ""))
        handle.dra.on_slice(False, builder.obj())
    if rnd.random() < 0.3:
        builder = make_slice().name("zoned").driver(DRIVER).pool("zoned").selector(node_selector(zone="a"))
        for d in range(rnd.randint(1, 3)):
            builder.raw_device(_device(rnd, f"z{d}"))
            devices.append(("zoned", f"z{d}", ""))
        handle.dra.on_slice(False, builder.obj())
    return cache.node_infos(), devices


def _claim(rnd: random.Random, pod: str) -> dict[str, Any]:
    builder = make_claim().name(f"{pod}-claim").uid(f"uid-{pod}-claim").owner(f"uid-{pod}")
    for r in range(rnd.choice([1, 1, 1, 2, 3])):
        class_name = rnd.choice(sorted(CLASSES))
        shape = rnd.random()
        if shape < 0.7:
            builder.request(f"r{r}", class_name, count=rnd.choice([1, 1, 2, 3]))
        elif shape < 0.8:
            builder.request(f"r{r}", class_name, mode="All")
        elif shape < 0.9:
            builder.request(f"r{r}", class_name, admin=True)
        else:
            builder.first_available(
                f"r{r}", sub_request("big", class_name, count=3), sub_request("small", class_name, count=1)
            )
    if rnd.random() < 0.1:
        builder.constraint(f"{DRIVER}/numa")
    return builder.obj()


def _pod(name: str) -> PodInfo:
    raw = make_pod().name(name).uid(f"uid-{name}").obj()
    raw["spec"]["resourceClaims"] = [{"name": "devices", "resourceClaimTemplateName": "tpl"}]
    raw["status"]["resourceClaimStatuses"] = [{"name": "devices", "resourceClaimName": f"{name}-claim"}]
    return PodInfo.from_api(raw)


def _answers(plugin: DynamicResources, pod: PodInfo, nodes: list[NodeInfo], *, batch: bool) -> Any:
    state = CycleState()
    _, status = plugin.pre_filter(state, pod, nodes)
    if not status.ok:
        return status
    statuses: list[Status | None]
    if batch:
        statuses = plugin.filter_nodes(state, pod, nodes)
        assert plugin.filter_nodes(state, pod, nodes) == statuses, "a second batch answers alike"
    else:
        statuses = [None if s.ok else s for s in (plugin.filter(state, pod, node) for node in nodes)]
    outcomes = state.get(STATE_KEY).outcomes
    return statuses, {node: dict(outcome.allocations) for node, outcome in outcomes.items()}


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_filter_nodes_answers_as_filter_does_node_for_node(seed: int) -> None:
    rnd = random.Random(seed)
    handle = FakeHandle()
    for name, selectors in CLASSES.items():
        builder = make_class().name(name)
        for expression in selectors:
            builder.selector(expression)
        handle.dra.on_class(False, builder.obj())
    nodes, devices = _cluster(rnd, handle)
    for i, (pool, device, _) in enumerate(devices):
        if rnd.random() < 0.5:
            result = {"request": "r", "driver": DRIVER, "pool": pool, "device": device}
            handle.dra.on_claim(False, make_claim().name(f"used-{i}").request("r", "gpu").allocated(result).obj())
    one_by_one = DynamicResources(handle)
    batched = DynamicResources(handle)
    reserved: list[tuple[CycleState, PodInfo, str]] = []
    for p in range(10):
        name = f"p{p}"
        handle.dra.on_claim(False, _claim(rnd, name))
        pod = _pod(name)
        expected = _answers(one_by_one, pod, nodes, batch=False)
        assert _answers(batched, pod, nodes, batch=True) == expected
        # A plugin that remembers nothing from earlier pods answers alike.
        assert _answers(DynamicResources(handle), pod, nodes, batch=False) == expected
        # As the scheduler does: the pod is reserved on a feasible node (its devices go in
        # flight), and now and then an earlier one is unreserved (its devices are freed).
        state = CycleState()
        if batched.pre_filter(state, pod, nodes)[1].ok:
            feasible = [
                n.name for n, s in zip(nodes, batched.filter_nodes(state, pod, nodes), strict=True) if s is None
            ]
            if feasible and rnd.random() < 0.7:
                node = rnd.choice(feasible)
                assert batched.reserve(state, pod, node).ok
                reserved.append((state, pod, node))
        if reserved and rnd.random() < 0.3:
            batched.unreserve(*reserved.pop(rnd.randrange(len(reserved))))
        # Between pods, devices are taken and freed, so the kept counts must follow.
        for i in rnd.sample(range(len(devices)), k=min(len(devices), 2)):
            pool, device, _ = devices[i]
            if rnd.random() < 0.5:
                handle.dra.on_claim(True, make_claim().name(f"used-{i}").obj())
            else:
                result = {"request": "r", "driver": DRIVER, "pool": pool, "device": device}
                handle.dra.on_claim(False, make_claim().name(f"used-{i}").request("r", "gpu").allocated(result).obj())


def test_taking_or_freeing_a_device_moves_its_pools_in_use_version_only() -> None:
    handle = FakeHandle()
    result = {"request": "r", "driver": DRIVER, "pool": "n1", "device": "d0"}
    versions = handle.dra.pool_use_versions
    handle.dra.on_claim(False, make_claim().name("c").request("r", "gpu").obj())
    assert versions == {} and handle.dra.use_version == 0, "a claim without allocation takes nothing"
    handle.dra.on_claim(False, make_claim().name("c").request("r", "gpu").allocated(result).obj())
    taken = handle.dra.use_version
    assert taken > 0 and versions == {(DRIVER, "n1"): taken}
    handle.dra.on_claim(False, make_claim().name("c").request("r", "gpu").allocated(result).obj())
    assert handle.dra.use_version == taken, "the same devices again change nothing"
    handle.dra.on_claim(True, make_claim().name("c").obj())
    assert handle.dra.use_version > taken and versions == {(DRIVER, "n1"): handle.dra.use_version}
