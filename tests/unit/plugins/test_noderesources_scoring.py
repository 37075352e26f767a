"""NodeResourcesBalancedAllocation and NodeResourcesFit scores against kube-scheduler v1.37's own cases.

The cases are ported from ``pkg/scheduler/framework/plugins/noderesources`` (balanced_allocation_test.go,
least_allocated_test.go, most_allocated_test.go, fit_test.go's TestFitScore), with kube's expected scores.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice
from usher.core.cache import Cache, NodeInfo
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.dynamicresources import DynamicResources
from usher.core.plugins.noderesources import NodeResourcesFit, parse_args
from usher.core.plugins.noderesources.balanced import NodeResourcesBalancedAllocation
from usher.core.plugins.noderesources.balanced import parse_args as balanced_args
from usher.core.types import Code, PodInfo

GPU = "nvidia.com/gpu"
EXTENDED = "abc.com/xyz"
DRA_RESOURCE = "extended.resource.dra.io/something"
"""kube's ``extendedResourceName``: served by the DeviceClass ``device-class-name``."""


def node(name: str, cpu: str, memory: str, **extended: int) -> dict[str, Any]:
    """kube's ``makeNode(name, milliCPU, memory, extended)``."""
    return make_node().name(name).capacity(cpu=cpu, memory=memory, **extended).obj()


def two_containers(first: dict[str, str], second: dict[str, str]) -> dict[str, Any]:
    """kube's ``st.MakePod().Req(first).Req(second)``: two containers."""
    return make_pod().req(**first).container(**second).obj()


def infos(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] = ()) -> list[NodeInfo]:  # type: ignore[assignment]
    cache = Cache()
    for raw in nodes:
        cache.add_or_update_node(raw)
    for pod in pods:
        cache.add_or_update_pod(PodInfo.from_api(pod))
    by_name = {n.name: n for n in cache.node_infos()}
    return [by_name[raw["metadata"]["name"]] for raw in nodes]


def serving_class(handle: FakeHandle) -> None:
    """kube's ``deviceClassWithExtendResourceName``."""
    raw = make_class().name("device-class-name").obj()
    raw["spec"]["extendedResourceName"] = DRA_RESOURCE
    handle.dra.on_class(False, raw)


def devices_on(handle: FakeHandle, node_name: str, count: int) -> None:
    raw = make_slice().name(f"slice-{node_name}").pool(f"pool-{node_name}").node(node_name).devices("device-", count)
    handle.dra.on_slice(False, raw.obj())


CPU_MEMORY_GPU = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": GPU, "weight": 1}]


def balanced(resources: list[dict[str, Any]] | None = None, handle: FakeHandle | None = None) -> Any:
    args = balanced_args({"resources": resources} if resources else {})
    return NodeResourcesBalancedAllocation(args, handle if handle is not None else FakeHandle())


# -- NodeResourcesBalancedAllocation -----------------------------------------------------------------------------


def test_balanced_allocation_skips_a_pod_asking_for_none_of_its_resources() -> None:
    plugin = balanced()
    pod = PodInfo.from_api(make_pod().obj())
    nodes = infos([node("node1", "4", "10000"), node("node2", "4", "10000")])
    assert plugin.pre_score(CycleState(), pod, nodes).code is Code.SKIP
    # Scored without PreScore, such a pod gets 0 everywhere (kube's Score).
    assert [plugin.score(CycleState(), pod, n)[0] for n in nodes] == [0, 0]
    assert plugin.score_nodes(CycleState(), pod, nodes)[0] == [0, 0]


BALANCED_CASES = [
    pytest.param(
        two_containers({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"}),
        [node("node1", "4", "10000"), node("node2", "6", "10000")],
        [],
        None,
        [68, 75],
        id="nothing scheduled, resources requested, differently sized nodes",
    ),
    pytest.param(
        two_containers({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"}),
        [node("node1", "10", "20000"), node("node2", "10", "20000")],
        [
            make_pod().node("node1").req(cpu="1000m").container(cpu="2000m").obj(),
            make_pod().node("node2").req(cpu="1000m", memory="2000").container(cpu="2000m", memory="3000").obj(),
        ],
        None,
        [73, 74],
        id="resources requested, pods scheduled with resources",
    ),
    pytest.param(
        two_containers({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"}),
        [node("node1", "10", "20000"), node("node2", "10", "50000")],
        [
            make_pod().node("node1").req(cpu="1000m").container(cpu="2000m").obj(),
            make_pod().node("node2").req(cpu="1000m", memory="2000").container(cpu="2000m", memory="3000").obj(),
        ],
        None,
        [73, 70],
        id="resources requested, pods scheduled with resources, differently sized nodes",
    ),
    pytest.param(
        two_containers({"memory": "2000"}, {"memory": "3000"}),
        [node("node1", "3", "5000"), node("node2", "3", "5000")],
        [make_pod().node("node1").req(cpu="1000m").container(cpu="2000m").obj()],
        None,
        [100, 50],
        id="nodes to reach min and max score",
    ),
    pytest.param(
        two_containers({"cpu": "1000m"}, {"cpu": "2000m"}),
        [node("node1", "6", "10000"), node("node2", "6", "10000")],
        [
            make_pod().node("node1").req(cpu="1000m").container(cpu="2000m").obj(),
            make_pod().node("node2").req(cpu="1000m", memory="2000").container(cpu="2000m", memory="3000").obj(),
        ],
        None,
        [62, 62],
        id="requested resources at node capacity",
    ),
    pytest.param(
        make_pod().req(cpu="0", memory="0", **{GPU: "1"}).obj(),
        [node("node1", "3500m", "40000", **{GPU: 8}), node("node2", "3500m", "40000", **{GPU: 8})],
        [
            make_pod()
            .node("node1")
            .req(cpu="1000m", memory="2000")
            .container(cpu="2000m", memory="3000", **{GPU: "3"})
            .obj(),
            make_pod().node("node2").req(cpu="1000m", memory="2000").container(cpu="2000m", memory="3000").obj(),
        ],
        CPU_MEMORY_GPU,
        [75, 76],
        id="a scalar resource the pod requests is scored",
    ),
    pytest.param(
        two_containers({"cpu": "1000m", "memory": "2000"}, {"cpu": "2000m", "memory": "3000"}),
        [node("node1", "3500m", "40000", **{GPU: 8}), node("node2", "3500m", "40000")],
        [],
        CPU_MEMORY_GPU,
        [56, 56],
        id="a scalar resource the pod does not request is left out",
    ),
]


@pytest.mark.parametrize(("pod", "nodes", "pods", "resources", "expected"), BALANCED_CASES)
def test_balanced_allocation_scores_as_kube_scheduler(
    pod: dict[str, Any],
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    resources: list[dict[str, Any]] | None,
    expected: list[int],
) -> None:
    plugin = balanced(resources)
    incoming = PodInfo.from_api(pod)
    node_infos = infos(nodes, pods)
    assert plugin.pre_score(CycleState(), incoming, node_infos).ok
    assert [plugin.score(CycleState(), incoming, n)[0] for n in node_infos] == expected
    assert plugin.score_nodes(CycleState(), incoming, node_infos)[0] == expected


def dra_existing_pods() -> list[dict[str, Any]]:
    return [
        make_pod().node("node1").req(cpu="1000m").container(cpu="2000m").obj(),
        make_pod().node("node2").req(cpu="1000m", memory="2000").container(cpu="2000m", memory="3000").obj(),
    ]


def test_balanced_allocation_counts_a_device_class_s_devices_for_the_resource_it_serves() -> None:
    """kube's "include DRA resource on a node for balanced resource allocation": node2 has no such device."""
    handle = FakeHandle()
    serving_class(handle)
    devices_on(handle, "node1", 8)
    plugin = balanced([{"name": "cpu"}, {"name": "memory"}, {"name": DRA_RESOURCE}], handle)
    pod = PodInfo.from_api(make_pod().req(**{DRA_RESOURCE: "1"}).obj())
    nodes = infos([node("node1", "3500m", "40000"), node("node2", "3500m", "40000")], dra_existing_pods())
    assert plugin.pre_score(CycleState(), pod, nodes).ok
    assert [plugin.score(CycleState(), pod, n)[0] for n in nodes] == [76, 75]
    # Without the class the resource is scored nowhere: both nodes keep their balance (75).
    plugin = balanced([{"name": "cpu"}, {"name": "memory"}, {"name": DRA_RESOURCE}], FakeHandle())
    assert [plugin.score(CycleState(), pod, n)[0] for n in nodes] == [75, 75]


def test_the_scorers_and_the_allocator_read_one_inventory_rebuilt_when_a_slice_changes() -> None:
    handle = FakeHandle()
    serving_class(handle)
    devices_on(handle, "node1", 8)
    resources = [{"name": "cpu"}, {"name": "memory"}, {"name": DRA_RESOURCE}]
    scorers = [balanced(resources, handle), fit("LeastAllocated", [{**r, "weight": 1} for r in resources], handle)]
    allocator = DynamicResources(handle)
    pod = PodInfo.from_api(make_pod().req(**{DRA_RESOURCE: "1"}).obj())
    nodes = infos([node("node1", "3500m", "40000"), node("node2", "3500m", "40000")], dra_existing_pods())
    before = [[s.score(CycleState(), pod, n)[0] for n in nodes] for s in scorers]
    inventory = handle.dra.inventory()
    assert allocator._current_inventory() is inventory, "one build for every reader"
    devices_on(handle, "node2", 8)
    after = [[s.score(CycleState(), pod, n)[0] for n in nodes] for s in scorers]
    assert handle.dra.inventory() is not inventory, "a slice change rebuilds it"
    assert [b[1] for b in before] != [a[1] for a in after], "node2's devices count once its slice is known"
    assert allocator._current_inventory() is handle.dra.inventory()


# -- NodeResourcesFit ------------------------------------------------------------------------------------------


def fit(strategy: str, resources: list[dict[str, Any]], handle: FakeHandle | None = None) -> NodeResourcesFit:
    args = parse_args({"scoringStrategy": {"type": strategy, "resources": resources}})
    return NodeResourcesFit(args, handle if handle is not None else FakeHandle())


EXTENDED_SET = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": EXTENDED, "weight": 1}]
WEIGHTED_FIRST = [{"name": EXTENDED, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]


@pytest.mark.parametrize(
    ("strategy", "pod", "nodes", "resources", "expected"),
    [
        pytest.param(
            "LeastAllocated",
            two_containers({"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"}),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXTENDED: 4})],
            EXTENDED_SET,
            [50, 50],
            id="least allocated: bypass extended resource if the pod does not request",
        ),
        pytest.param(
            "LeastAllocated",
            make_pod().req(cpu="3000", memory="5000", **{EXTENDED: "2"}).obj(),
            [node("node1", "6000", "10000", **{EXTENDED: 4}), node("node2", "6000", "10000", **{EXTENDED: 10})],
            EXTENDED_SET,
            [50, 60],
            id="least allocated: honor extended resource if the pod requests",
        ),
        pytest.param(
            "LeastAllocated",
            make_pod().req(cpu="3000", memory="4000").obj(),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXTENDED: 4})],
            WEIGHTED_FIRST,
            [55, 55],
            id="least allocated: if the node doesn't have a resource",
        ),
        pytest.param(
            "MostAllocated",
            two_containers({"cpu": "1000", "memory": "2000"}, {"cpu": "2000", "memory": "3000"}),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXTENDED: 4})],
            EXTENDED_SET,
            [50, 50],
            id="most allocated: bypass extended resource if the pod does not request",
        ),
        pytest.param(
            "MostAllocated",
            make_pod().req(cpu="3000", memory="5000", **{EXTENDED: "2"}).obj(),
            [node("node1", "6000", "10000", **{EXTENDED: 4}), node("node2", "6000", "10000", **{EXTENDED: 10})],
            EXTENDED_SET,
            [50, 40],
            id="most allocated: honor extended resource if the pod request",
        ),
        pytest.param(
            "MostAllocated",
            make_pod().req(cpu="3000", memory="4000").obj(),
            [node("node1", "6000", "10000"), node("node2", "6000", "10000", **{EXTENDED: 4})],
            WEIGHTED_FIRST,
            [45, 45],
            id="most allocated: if the node doesn't have a resource",
        ),
    ],
)
def test_fit_scores_extended_resources_as_kube_scheduler(
    strategy: str,
    pod: dict[str, Any],
    nodes: list[dict[str, Any]],
    resources: list[dict[str, Any]],
    expected: list[int],
) -> None:
    plugin = fit(strategy, resources)
    incoming = PodInfo.from_api(pod)
    node_infos = infos(nodes)
    assert [plugin.score(CycleState(), incoming, n)[0] for n in node_infos] == expected
    assert plugin.score_nodes(CycleState(), incoming, node_infos)[0] == expected


def test_fit_scores_a_resource_a_device_class_serves_by_the_class_s_devices_and_those_in_use() -> None:
    """kube's "LeastAllocated with Extended resources" (3 devices on node1, 2 on node2: 66 and 50); then one of
    node1's devices taken by a claim's allocation, then node2's freed when the claim goes."""
    handle = FakeHandle()
    serving_class(handle)
    devices_on(handle, "node1", 3)
    devices_on(handle, "node2", 2)
    plugin = fit("LeastAllocated", [{"name": DRA_RESOURCE, "weight": 1}], handle)
    pod = PodInfo.from_api(make_pod().req(**{DRA_RESOURCE: "1"}).obj())
    nodes = infos([make_node().name("node1").obj(), make_node().name("node2").obj()])
    assert [plugin.score(CycleState(), pod, n)[0] for n in nodes] == [66, 50]

    result = {"request": "r", "driver": DRIVER, "pool": "pool-node1", "device": "device-0"}
    claim = make_claim().name("taken").allocated(result).obj()
    handle.dra.on_claim(False, claim)
    assert [plugin.score(CycleState(), pod, n)[0] for n in nodes] == [33, 50]
    handle.dra.on_claim(True, claim)
    assert plugin.score_nodes(CycleState(), pod, nodes)[0] == [66, 50]


def test_a_device_class_s_selectors_decide_which_devices_it_has_on_a_node() -> None:
    handle = FakeHandle()
    raw = make_class().name("device-class-name").selector(f'device.attributes["{DRIVER}"].model == "a"').obj()
    raw["spec"]["extendedResourceName"] = DRA_RESOURCE
    handle.dra.on_class(False, raw)
    slice_ = make_slice().name("s").pool("p").node("node1").devices("a-", 3, model="a").devices("b-", 1, model="b")
    handle.dra.on_slice(False, slice_.obj())
    plugin = fit("MostAllocated", [{"name": DRA_RESOURCE, "weight": 1}], handle)
    pod = PodInfo.from_api(make_pod().req(**{DRA_RESOURCE: "1"}).obj())
    (node1,) = infos([make_node().name("node1").obj()])
    assert plugin.score(CycleState(), pod, node1)[0] == 1 * 100 // 3


def test_a_device_plugin_s_allocatable_is_scored_rather_than_the_class_s_devices() -> None:
    """Devices count only on a node whose allocatable has none of the resource (kube: allocatable 0)."""
    handle = FakeHandle()
    serving_class(handle)
    devices_on(handle, "node1", 3)
    plugin = fit("LeastAllocated", [{"name": DRA_RESOURCE, "weight": 1}], handle)
    pod = PodInfo.from_api(make_pod().req(**{DRA_RESOURCE: "1"}).obj())
    (node1,) = infos([make_node().name("node1").capacity(cpu="4", memory="8Gi", **{DRA_RESOURCE: 4}).obj()])
    assert plugin.score(CycleState(), pod, node1)[0] == (4 - 1) * 100 // 4


def test_pods_listed_as_a_scored_resource_count_for_nothing() -> None:
    """kube's NodeInfo keeps the pod count apart from its scalar resources: "pods" scores as a resource the node
    has none of."""
    nodes = infos([node("node1", "4", "8000", pods=110), node("node2", "8", "8000", pods=110)])
    pod = PodInfo.from_api(make_pod().req(cpu="1", memory="1000").obj())
    with_pods = fit("LeastAllocated", [{"name": "cpu", "weight": 1}, {"name": "pods", "weight": 5}])
    without = fit("LeastAllocated", [{"name": "cpu", "weight": 1}])
    assert [with_pods.score(CycleState(), pod, n)[0] for n in nodes] == [75, 87]
    assert [without.score(CycleState(), pod, n)[0] for n in nodes] == [75, 87]
    plugin = balanced([{"name": "cpu"}, {"name": "memory"}, {"name": "pods"}])
    reference = balanced([{"name": "cpu"}, {"name": "memory"}])
    assert [plugin.score(CycleState(), pod, n)[0] for n in nodes] == [
        reference.score(CycleState(), pod, n)[0] for n in nodes
    ]
