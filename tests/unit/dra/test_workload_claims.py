"""Claims of pod groups (DRAWorkloadResourceClaims): shared by a PodGroup's pods, reserved for the group.

kube-scheduler's DynamicResources with ``resourceclaim.BindTo``/``IsForPod``/``IsReservedForPod`` and its
pending allocations shared within a pod-group cycle are the reference. Only the ClaimWriter port (API
writes) is a recording double; the framework, the pod-group cycle, the allocator and the states are real.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pod_group
from tests.frameworks import FakeHandle, framework_of
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice
from usher.config import parse_config
from usher.core.cache import Cache
from usher.core.cycle import schedule
from usher.core.dra.allocation import Allocation
from usher.core.dra.model import DeviceId
from usher.core.dra.state import DraState, InFlight
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import Framework
from usher.core.groupcycle import simulate_group
from usher.core.plugins.registry import in_tree_registry
from usher.core.podgroups import Member, PodGroup
from usher.core.types import Code, NodeName, PodInfo, Status

CLASS = "gpu"
GROUP_REF = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups"}


def world(*, workload_claims: bool = True) -> tuple[Cache, FakeHandle, Framework]:
    """Nodes n1 and n2 with two GPUs each, and a framework with DynamicResources and GangScheduling."""
    cache = Cache()
    handle = FakeHandle(pod_groups=cache.pod_groups, dra=DraState(workload_claims=workload_claims))
    handle.dra.on_class(False, make_class().name(CLASS).selector(f'device.driver == "{DRIVER}"').obj())
    for node in ("n1", "n2"):
        cache.add_or_update_node(make_node().name(node).obj())
        handle.dra.on_slice(
            False, make_slice().name(f"{node}-s").driver(DRIVER).pool(node).node(node).devices("gpu", 2).obj()
        )
    fw = framework_of(
        "PrioritySort", "NodeResourcesFit", "DynamicResources", "GangScheduling", "DefaultBinder", handle=handle
    )
    return cache, handle, fw


def pod_group(cache: Cache, name: str, min_count: int | None = None, *claims: dict[str, Any]) -> PodGroup:
    raw = make_pod_group(name, min_count, resourceClaims=list(claims))
    _, group = cache.pod_groups.on_pod_group(False, raw)
    assert group is not None
    return group


def member(name: str, group: str | None, entry: dict[str, Any], generated: str | None = None) -> PodInfo:
    builder = make_pod().name(name).uid(f"uid-{name}")
    if group is not None:
        builder = builder.group(group)
    pod = builder.obj()
    pod["spec"]["resourceClaims"] = [entry]
    if generated is not None:
        pod["status"]["resourceClaimStatuses"] = [{"name": entry["name"], "resourceClaimName": generated}]
    return PodInfo.from_api(pod)


def cycle(fw: Framework, cache: Cache, pod: PodInfo) -> tuple[CycleState, NodeName | None, str]:
    """One pod's cycle; placed and reserved when a node fits. Returns (state, node, message)."""
    state = CycleState()
    result = schedule(fw, state, pod, cache.node_infos(), rng=random.Random(1))
    if result.node is not None:
        cache.assume(pod, result.node)
        assert fw.run_reserve(state, pod, result.node).ok
    return state, result.node, result.message


SHARED = {"name": "gpu", "resourceClaimName": "shared"}


def test_pods_of_a_basic_group_share_its_claim_reserved_once_for_the_podgroup() -> None:
    cache, handle, fw = world()
    group = pod_group(cache, "train", None, SHARED)
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    first = member("a", "train", SHARED)
    state, node, _ = cycle(fw, cache, first)
    assert node is not None
    assert asyncio.run(fw.run_pre_bind(state, first, node)).ok
    written = handle.claims.stored["default/shared"]
    assert written["status"]["reservedFor"] == [{**GROUP_REF, "name": "train", "uid": group.uid}]
    assert written["status"]["allocation"]["devices"]["results"][0]["pool"] == node
    writes = len(handle.claims.writes)
    for name in ("b", "c", "d"):
        pod = member(name, "train", SHARED)
        state, second_node, _ = cycle(fw, cache, pod)
        assert second_node == node, "pinned where the group's devices are"
        assert asyncio.run(fw.run_pre_bind(state, pod, second_node)).ok
        fw.run_unreserve(state, pod, second_node)
    assert len(handle.claims.writes) == writes, "the group's reservation covers its other pods: nothing to write"
    assert handle.claims.removed == [], "a pod's rollback leaves the PodGroup's reservation alone"
    assert len(handle.dra.in_use()) == 1, "one device, allocated once"


def test_a_gang_shares_an_allocation_nobody_has_written_yet_within_its_cycle() -> None:
    cache, handle, fw = world()
    group = pod_group(cache, "train", 3, SHARED)
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    pods = [member(f"w{i}", "train", SHARED) for i in range(3)]
    for pod in pods:
        cache.pod_groups.track(pod, Member.UNSCHEDULED)
    simulation = simulate_group(fw, group, pods, cache, scheduled=0, new_state=CycleState, rng=random.Random(1))
    assert simulation.status.ok, simulation.status.message
    nodes = {outcome.result.node for outcome in simulation.placed}
    assert len(simulation.placed) == 3 and len(nodes) == 1, "all three where the one allocation is"
    assert len(handle.dra.in_use()) == 1
    # PreBind of the members (as the binding cycles run them): the first writes allocation and reservation,
    # the others find the claim reserved for their PodGroup.
    [node] = nodes
    assert node is not None

    async def bind_all() -> list[bool]:
        return [(await fw.run_pre_bind(outcome.state, outcome.pod, node)).ok for outcome in simulation.placed]

    assert asyncio.run(bind_all()) == [True, True, True]
    assert [kind for kind, _ in handle.claims.writes] == ["update", "status"]
    written = handle.claims.stored["default/shared"]
    assert written["status"]["reservedFor"] == [{**GROUP_REF, "name": "train", "uid": group.uid}]
    assert handle.dra.in_flight == {}, "written: the claim's allocation holds the device now"
    assert len(handle.dra.in_use()) == 1


def test_reverting_a_gang_frees_the_allocation_it_shared() -> None:
    cache, handle, fw = world()
    group = pod_group(cache, "train", 2, SHARED)
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    pods = [member(f"w{i}", "train", SHARED) for i in range(2)]
    simulation = simulate_group(fw, group, pods, cache, scheduled=0, new_state=CycleState, rng=random.Random(1))
    assert simulation.status.ok and len(handle.dra.in_use()) == 1
    simulation.revert()
    assert handle.dra.in_flight == {} and len(handle.dra.in_use()) == 0


def test_a_pod_outside_the_group_waits_for_the_groups_allocation_to_be_written() -> None:
    cache, handle, fw = world()
    pod_group(cache, "train", None, SHARED)
    pod_group(cache, "other", None, SHARED)
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    _, node, _ = cycle(fw, cache, member("a", "train", SHARED))
    assert node is not None
    for outsider in (member("lone", None, SHARED), member("b", "other", SHARED)):
        _, elsewhere, message = cycle(fw, cache, outsider)
        assert elsewhere is None
        assert message == "0/2 nodes are available: resource claim default/shared is in the process of being allocated."


def test_a_claim_the_pod_does_not_name_as_its_groups_is_reserved_for_the_pod() -> None:
    cache, handle, fw = world()
    pod_group(cache, "train", None, {"name": "other", "resourceClaimName": "shared"})
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    pod = member("a", "train", SHARED)  # same claim, but under another entry name: not the group's
    state, node, _ = cycle(fw, cache, pod)
    assert node is not None
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    assert handle.claims.stored["default/shared"]["status"]["reservedFor"] == [
        {"resource": "pods", "name": "a", "uid": "uid-a"}
    ]


def test_without_the_gate_each_pod_reserves_the_claim_for_itself() -> None:
    cache, handle, fw = world(workload_claims=False)
    group = pod_group(cache, "train", 2, SHARED)
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    pods = [member(f"w{i}", "train", SHARED) for i in range(2)]
    simulation = simulate_group(fw, group, pods, cache, scheduled=0, new_state=CycleState, rng=random.Random(1))
    assert simulation.status.ok
    for outcome in simulation.placed:
        assert outcome.result.node is not None
        assert asyncio.run(fw.run_pre_bind(outcome.state, outcome.pod, outcome.result.node)).ok
    assert [r["uid"] for r in handle.claims.stored["default/shared"]["status"]["reservedFor"]] == [
        "uid-w0",
        "uid-w1",
    ]


def group_owned_claim(owner: str) -> dict[str, Any]:
    claim = make_claim().name("train-gpu-x1").uid("gen").request("gpu", CLASS).obj()
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": owner, "uid": "pg", "controller": True}
    ]
    return claim


TEMPLATE = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}


@pytest.mark.parametrize(
    ("workload_claims", "group", "message"),
    [
        pytest.param(True, "train", "", id="made for the pod's group"),
        pytest.param(
            True,
            "other",
            "ResourceClaim default/train-gpu-x1 was not created for pod default/p "
            "(neither pod nor PodGroup other is the owner)",
            id="made for another group",
        ),
        pytest.param(
            False,
            "train",
            "ResourceClaim default/train-gpu-x1 was not created for pod default/p (pod is not owner)",
            id="gate off",
        ),
    ],
)
def test_a_claim_made_from_a_template_for_the_podgroup_counts_as_its_pods_own(
    workload_claims: bool, group: str, message: str
) -> None:
    cache, handle, fw = world(workload_claims=workload_claims)
    pod_group(cache, group, None, TEMPLATE)
    handle.dra.on_claim(False, group_owned_claim("train"))
    status = fw.run_pre_enqueue(member("p", group, TEMPLATE, generated="train-gpu-x1"))
    assert (status.ok, status.message) == (not message, message)


def test_a_group_claim_that_names_nothing_is_reported_on_its_pods() -> None:
    cache, handle, fw = world()
    pod_group(cache, "train", None, {"name": "gpu"})
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    _, node, message = cycle(fw, cache, member("a", "train", SHARED))
    assert node is None
    assert message == "0/2 nodes are available: PodGroup default/train claim gpu: none of the supported fields are set."


def test_an_in_flight_allocation_lasts_until_the_last_pod_sharing_it_lets_go() -> None:
    dra = DraState()
    device = DeviceId(DRIVER, "n1", "gpu-0")
    allocation = Allocation(({"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-0"},), (), None)
    dra.add_in_flight("default/shared", InFlight("default/a", "cu", allocation, frozenset({device}), "default/train"))
    assert dra.share_in_flight("default/shared", "default/b")
    dra.release_in_flight("default/shared", "default/a")
    assert dra.holds("default/shared", "default/b") and device in dra.in_use()
    dra.release_in_flight("default/shared", "default/b")
    assert "default/shared" not in dra.in_flight and device not in dra.in_use()
    assert not dra.share_in_flight("default/shared", "default/c"), "nothing left to share"


def test_an_unknown_pod_group_keeps_its_pods_claims_unreserved() -> None:
    cache, handle, fw = world()
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    pod = member("a", "ghost", SHARED)
    _, node, message = cycle(fw, cache, pod)
    assert node is None
    assert message == '0/2 nodes are available: podgroup.scheduling.k8s.io "ghost" not found.'
    # As kube-scheduler's statusUnschedulable: preemption cannot conjure the PodGroup up.
    outcome = fw.run_pre_filter(CycleState(), pod, cache.node_infos())
    assert outcome.status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE, outcome.status


# ---------------------------------------------------------------------- PostFilter, PodGroupPostFilter


def pinned_to_a_gone_node(group: PodGroup | None, *reserved: str) -> dict[str, Any]:
    """``shared``, allocated on node n3 (no longer in the cluster: it keeps its pods off every node), reserved
    for the PodGroup (if any) and the uids ``reserved``."""
    claim = (
        make_claim()
        .name("shared")
        .uid("cu")
        .request("gpu", CLASS)
        .allocated({"request": "gpu", "driver": DRIVER, "pool": "n3", "device": "gpu0"})
        .reserved(*reserved)
        .obj()
    )
    claim["metadata"]["resourceVersion"] = "7"
    claim["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n3"]}]}]
    }
    if group is not None:
        claim["status"].setdefault("reservedFor", []).insert(0, {**GROUP_REF, "name": group.name, "uid": group.uid})
    return claim


def failed_members(fw: Framework, cache: Cache, *pods: PodInfo) -> list[tuple[PodInfo, CycleState]]:
    """Each pod's cycle, failed: (pod, its cycle state), as the pod-group cycle hands them to PostFilter."""
    members = []
    for pod in pods:
        state, node, _ = cycle(fw, cache, pod)
        assert node is None
        members.append((pod, state))
    return members


def test_a_group_kept_off_every_node_by_its_claim_gives_it_back_and_waits_for_the_outcome() -> None:
    cache, handle, fw = world()
    group = pod_group(cache, "train", 2, SHARED)
    handle.dra.on_claim(False, pinned_to_a_gone_node(group))
    pods = [member(f"w{i}", "train", SHARED) for i in range(2)]
    status = fw.run_pod_group_post_filter(group, failed_members(fw, cache, *pods))
    assert status.code is Code.UNSCHEDULABLE
    assert status.message == "deallocation of ResourceClaim default/shared requested"
    assert handle.claims.deallocated == [("default/shared", "cu", "7")], "conditional on the version usher saw"
    # Until the outcome is seen, nobody uses or allocates the claim.
    _, node, message = cycle(fw, cache, pods[0])
    assert node is None
    assert message == "0/2 nodes are available: resource claim default/shared is being deallocated."
    [failed] = handle.claims.deallocation_failures
    failed()  # the write was refused: the claim is as it was
    assert not handle.dra.deallocating("default/shared")
    handle.dra.start_deallocating(handle.dra.claim("default/shared"))  # asked again ...
    freed = make_claim().name("shared").uid("cu").request("gpu", CLASS).obj()
    freed["metadata"]["resourceVersion"] = "8"
    handle.dra.on_claim(False, freed)  # ... and the watch shows it deallocated
    assert not handle.dra.deallocating("default/shared")
    _, node, _ = cycle(fw, cache, pods[0])
    assert node is not None, "allocated anew where the pod fits"


def test_a_group_claim_someone_else_holds_only_loses_the_groups_reservation() -> None:
    cache, handle, fw = world()
    group = pod_group(cache, "train", 2, SHARED)
    handle.dra.on_claim(False, pinned_to_a_gone_node(group, "uid-stranger"))
    members = failed_members(fw, cache, member("w0", "train", SHARED))
    status = fw.run_pod_group_post_filter(group, members)
    assert status.message == "ResourceClaim default/shared unreserved for PodGroup default/train"
    assert handle.claims.deallocated == []
    assert handle.claims.removed == [("default/shared", "cu", group.uid)]


@pytest.mark.parametrize("why", ["a member is scheduled", "gate off", "topology placement", "nobody was tried"])
def test_a_group_leaves_its_claims_alone(why: str) -> None:
    cache, handle, fw = world(workload_claims=why != "gate off")
    spec = {"schedulingConstraints": {"topology": [{"key": "rack"}]}} if why == "topology placement" else {}
    raw = make_pod_group("train", 2, resourceClaims=[SHARED], **spec)
    _, group = cache.pod_groups.on_pod_group(False, raw)
    assert group is not None
    handle.dra.on_claim(False, pinned_to_a_gone_node(group))
    if why == "a member is scheduled":
        cache.pod_groups.track(member("w1", "train", SHARED), Member.ASSIGNED)
    members = [] if why == "nobody was tried" else failed_members(fw, cache, member("w0", "train", SHARED))
    status = fw.run_pod_group_post_filter(group, members)
    assert (status.code, status.message) == (Code.UNSCHEDULABLE, "")
    assert handle.claims.deallocated == [] and handle.claims.removed == []


def test_a_group_made_claim_is_released_only_by_its_own_group() -> None:
    cache, handle, fw = world()
    group = pod_group(cache, "train", 2, TEMPLATE)
    raw_group = dict(group.raw)
    raw_group["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-gpu-x1"}]}
    _, group = cache.pod_groups.on_pod_group(
        False, {**raw_group, "metadata": {**raw_group["metadata"], "resourceVersion": "2"}}
    )
    assert group is not None
    claim = group_owned_claim("someone-else")
    claim["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu0"}]}},
        "reservedFor": [{**GROUP_REF, "name": "train", "uid": group.uid}],
    }
    handle.dra.on_claim(False, claim)
    status = fw.run_pod_group_post_filter(group, [(member("w0", "train", TEMPLATE), CycleState())])
    assert status.message == "" and handle.claims.removed == [], "not made for this group: left alone"


def test_a_lone_pods_postfilter_gives_back_a_claim_that_keeps_it_off_every_node() -> None:
    cache, handle, fw = world()
    handle.dra.on_claim(False, pinned_to_a_gone_node(None))
    pod = member("p", None, SHARED)
    state, node, _ = cycle(fw, cache, pod)
    assert node is None
    result = fw.run_post_filter(state, pod, {"n1": Status(Code.UNSCHEDULABLE)}, cache.node_infos())
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.status.message == "deallocation of ResourceClaim default/shared requested"
    assert handle.claims.deallocated == [("default/shared", "cu", "7")]


def test_a_claim_held_by_another_pod_is_not_deallocated_for_a_lone_pod() -> None:
    cache, handle, fw = world()
    handle.dra.on_claim(False, pinned_to_a_gone_node(None, "uid-other"))
    pod = member("p", None, SHARED)
    state, _, _ = cycle(fw, cache, pod)
    result = fw.run_post_filter(state, pod, {}, cache.node_infos())
    assert (result.status.code, result.status.message) == (Code.UNSCHEDULABLE, "")
    assert handle.claims.deallocated == []


def test_prebind_refuses_an_allocation_written_by_someone_else_meanwhile() -> None:
    cache, handle, fw = world()
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    pod = member("p", None, {"name": "gpu", "resourceClaimName": "c"})
    state, node, _ = cycle(fw, cache, pod)
    assert node is not None
    other = "n2" if node == "n1" else "n1"
    elsewhere = (
        make_claim()
        .name("c")
        .uid("cu")
        .request("gpu", CLASS)
        .allocated({"request": "gpu", "driver": DRIVER, "pool": other, "device": "gpu1"})
        .obj()
    )
    elsewhere["metadata"]["resourceVersion"] = "5"
    handle.dra.on_claim(False, elsewhere)  # another scheduler allocated it first
    status = asyncio.run(fw.run_pre_bind(state, pod, node))
    assert status.message == "resource claim default/c got allocated elsewhere in the meantime"
    assert handle.claims.writes == []


def test_disabling_dynamic_resources_at_pod_group_post_filter_takes_it_off_that_point_only() -> None:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": "usher", "plugins": {"podGroupPostFilter": {"disabled": [{"name": "DynamicResources"}]}}}
        ],
    }
    registry = in_tree_registry()
    fw = build_framework(parse_config(config, registry=registry).profiles[0], registry=registry, handle=FakeHandle())
    assert fw.plugins.pod_group_post_filter == []
    assert "DynamicResources" in [p.name for p in fw.plugins.post_filter]
