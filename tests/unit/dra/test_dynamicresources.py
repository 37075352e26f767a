"""The DynamicResources plugin through the real framework, queue, allocator and CEL.

Only the ClaimWriter port (API writes) is a recording double; everything
else is the code that runs in production.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import random
import re
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle, framework_of, scheduling_queue
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice, sub_request
from tests.unit.test_queue import Recorder
from usher.core.cache import Cache
from usher.core.clock import FakeClock
from usher.core.cycle import schedule
from usher.core.dra.cel import DeviceInput, SelectorEvaluator
from usher.core.dra.matching import SelectorResults
from usher.core.dra.model import DeviceId
from usher.core.dra.state import DraState
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import Framework
from usher.core.handling import EventHandlers
from usher.core.plugins.dynamicresources import DynamicResources
from usher.core.queue import Where
from usher.core.types import Code, NodeName, PodInfo, PodKey, QueueingHint

CLASS = "gpu"
CLAIM_ADD = ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.ADD)
CLAIM_UPDATE = ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.UPDATE)


def only_dra(handle: FakeHandle) -> Framework:
    """A profile with just the plugins these tests need, so scores do not get in the way."""
    return framework_of("PrioritySort", "NodeResourcesFit", "DynamicResources", "DefaultBinder", handle=handle)


def claim_pod(
    name: str, *, claim: str | None = None, template: str | None = None, generated: str | None = None
) -> dict[str, Any]:
    pod = make_pod().name(name).uid(f"uid-{name}").obj()
    entry: dict[str, Any] = {"name": "gpu"}
    if claim:
        entry["resourceClaimName"] = claim
    else:
        entry["resourceClaimTemplateName"] = template or "tpl"
    pod["spec"]["resourceClaims"] = [entry]
    if generated is not None:
        pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": generated}]
    return pod


@pytest.fixture
def handle() -> FakeHandle:
    h = FakeHandle()
    h.dra.on_class(False, make_class().name(CLASS).selector(f'device.driver == "{DRIVER}"').obj())
    for node in ("n1", "n2"):
        h.dra.on_slice(
            False, make_slice().name(f"{node}-s").driver(DRIVER).pool(node).node(node).devices("gpu", 2).obj()
        )
    return h


@pytest.fixture
def cache() -> Cache:
    c = Cache()
    for node in ("n1", "n2"):
        c.add_or_update_node(make_node().name(node).obj())
    return c


def cycle(fw: Framework, cache: Cache, pod: dict[str, Any]) -> tuple[CycleState, PodInfo, NodeName | None, Any]:
    info = PodInfo.from_api(pod)
    state = CycleState()
    result = schedule(fw, state, info, cache.node_infos(), rng=random.Random(1))
    if result.node is not None:
        assert fw.run_reserve(state, info, result.node).ok
    return state, info, result.node, result


# ---------------------------------------------------------------------- PreEnqueue


@pytest.mark.parametrize(
    ("pod", "claims", "message"),
    [
        pytest.param(
            claim_pod("p"), [], 'pod "default/p": ResourceClaim not created yet', id="template claim not created yet"
        ),
        pytest.param(claim_pod("p", claim="c"), [], 'resourceclaim.resource.k8s.io "c" not found', id="claim missing"),
        pytest.param(
            claim_pod("p", claim="c"),
            [make_claim().name("c").request("gpu", CLASS).deleting().obj()],
            'resourceclaim "c" is being deleted',
            id="claim being deleted",
        ),
        pytest.param(
            claim_pod("p", generated="c"),
            [make_claim().name("c").request("gpu", CLASS).owner("someone-else").obj()],
            "ResourceClaim default/c was not created for pod default/p (pod is not owner)",
            id="template claim of another pod",
        ),
        pytest.param(
            claim_pod("p", generated="c"),
            [make_claim().name("c").request("gpu", CLASS).owner("uid-p").obj()],
            "",
            id="own template claim resolves",
        ),
    ],
)
def test_pre_enqueue_holds_pods_whose_claims_are_not_ready(
    handle: FakeHandle, pod: dict[str, Any], claims: list[dict[str, Any]], message: str
) -> None:
    for claim in claims:
        handle.dra.on_claim(False, claim)
    status = only_dra(handle).run_pre_enqueue(PodInfo.from_api(pod))
    assert status.message == message
    if message:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.plugin == "DynamicResources"


def test_a_null_generated_name_means_the_claim_is_not_needed(handle: FakeHandle) -> None:
    pod = claim_pod("p")
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": None}]
    assert only_dra(handle).run_pre_enqueue(PodInfo.from_api(pod)).ok


# ---------------------------------------------------------------------- allocation, reserve, prebind


def test_two_pods_get_distinct_devices_and_prebind_writes_finalizer_allocation_and_reservation(
    handle: FakeHandle, cache: Cache
) -> None:
    fw = only_dra(handle)
    picked = []
    for name in ("a", "b", "c", "d"):
        handle.dra.on_claim(False, make_claim().name(f"claim-{name}").uid(f"cu-{name}").request("gpu", CLASS).obj())
        state, pod, node, _ = cycle(fw, cache, claim_pod(name, claim=f"claim-{name}"))
        assert node is not None
        assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
        written = handle.claims.stored[f"default/claim-{name}"]
        [result] = written["status"]["allocation"]["devices"]["results"]
        picked.append((result["pool"], result["device"]))
        assert result["pool"] == node
        assert written["status"]["reservedFor"] == [{"resource": "pods", "name": name, "uid": f"uid-{name}"}]
        assert "resource.kubernetes.io/delete-protection" in written["metadata"]["finalizers"]
    assert len(set(picked)) == 4, "four pods, four distinct devices"
    kinds = [k for k, _ in handle.claims.writes]
    assert kinds == ["update", "status"] * 4, "the finalizer first, then allocation + reservedFor"
    # All four devices are taken now: a fifth pod cannot be placed.
    handle.dra.on_claim(False, make_claim().name("claim-e").request("gpu", CLASS).obj())
    _, _, node, result = cycle(fw, cache, claim_pod("e", claim="claim-e"))
    assert node is None
    assert result.message == "0/2 nodes are available: 2 cannot allocate all claims."
    assert result.unschedulable_plugins == {"DynamicResources"}


def test_an_in_flight_allocation_blocks_its_devices_before_anything_is_written(
    handle: FakeHandle, cache: Cache
) -> None:
    fw = only_dra(handle)
    pools = []
    for name in ("a", "b", "c", "d"):
        handle.dra.on_claim(False, make_claim().name(f"claim-{name}").request("gpu", CLASS).obj())
        _, _, node, _ = cycle(fw, cache, claim_pod(name, claim=f"claim-{name}"))
        pools.append(node)
    assert sorted(pools) == ["n1", "n1", "n2", "n2"]
    assert len(handle.dra.in_use()) == 4


def test_a_write_conflict_rereads_the_claim_and_tries_again(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    claim = make_claim().name("c").uid("cu").request("gpu", CLASS).obj()
    handle.dra.on_claim(False, claim)
    handle.claims.stored["default/c"] = claim
    handle.claims.answers = [200, 409]  # the finalizer lands; the status write conflicts once
    state, pod, node, _ = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node is not None
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    assert [k for k, _ in handle.claims.writes] == ["update", "status", "status"]
    assert handle.claims.stored["default/c"]["status"]["reservedFor"][0]["uid"] == "uid-p"


def test_a_shared_allocated_claim_pins_the_pod_and_only_gains_a_reservation(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    shared = (
        make_claim()
        .name("shared")
        .uid("su")
        .request("gpu", CLASS)
        .allocated({"request": "gpu", "driver": DRIVER, "pool": "n2", "device": "gpu0"})
        .reserved("uid-first")
        .obj()
    )
    shared["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
    }
    handle.dra.on_claim(False, shared)
    state, pod, node, _ = cycle(fw, cache, claim_pod("second", claim="shared"))
    assert node == "n2"
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    [(kind, written)] = handle.claims.writes
    assert kind == "status"
    assert [r["uid"] for r in written["status"]["reservedFor"]] == ["uid-first", "uid-second"]
    allocation = dict(written["status"]["allocation"])
    # kube-scheduler v1.37 (DRADeviceBindingConditions on) stamps an allocation it reserves that has no stamp yet.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", allocation.pop("allocationTimestamp"))
    assert allocation == shared["status"]["allocation"], "the allocation is otherwise left as it was"


def test_unreserve_frees_in_flight_devices_and_rolls_back_reservations(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    state, pod, node, _ = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node is not None and len(handle.dra.in_use()) == 1
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    fw.run_unreserve(state, pod, node)
    assert handle.claims.removed == [("default/c", "cu", "uid-p")]


def test_deallocation_frees_the_devices(handle: FakeHandle) -> None:
    allocated = (
        make_claim()
        .name("c")
        .request("gpu", CLASS)
        .allocated({"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu0"})
    )
    handle.dra.on_claim(False, allocated.obj())
    assert len(handle.dra.in_use()) == 1
    freed = make_claim().name("c").request("gpu", CLASS).obj()
    freed["metadata"]["resourceVersion"] = "2"
    freed["metadata"]["uid"] = allocated.obj()["metadata"]["uid"]
    handle.dra.on_claim(False, freed)
    assert len(handle.dra.in_use()) == 0


def test_a_device_allocated_by_another_scheduler_is_never_picked(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    for i, device in enumerate(["gpu0", "gpu1"]):
        theirs = (
            make_claim()
            .name(f"theirs-{i}")
            .request("gpu", CLASS)
            .allocated({"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device})
        )
        handle.dra.on_claim(False, theirs.obj())
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", CLASS).obj())
    _, _, node, _ = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node == "n2"


def test_a_broken_cel_selector_is_reported_on_the_pod_and_nothing_raises(handle: FakeHandle, cache: Cache) -> None:
    handle.dra.on_class(False, make_class().name("broken").selector("device.driver ==").obj())
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", "broken").obj())
    _, _, node, result = cycle(only_dra(handle), cache, claim_pod("p", claim="c"))
    assert node is None
    assert result.status.code is Code.ERROR, "kube-scheduler aborts the attempt: the class is wrong, not a node"
    assert "device.driver ==" in result.status.message


def test_a_cel_runtime_error_on_one_node_keeps_the_pod_off_every_node(handle: FakeHandle, cache: Cache) -> None:
    """Upstream's "with different ResourceSlices keeps pod pending because of CEL runtime errors": n1's devices
    lack the attribute the selector reads, n2's have it; kube-scheduler's Filter returns an Error on n1, which ends
    the attempt although n2 would do."""
    handle.dra.on_class(False, make_class().name("a100").selector(A100).obj())
    handle.dra.on_slice(False, make_slice().name("n1-s").driver(DRIVER).pool("n1").node("n1").devices("gpu", 2).obj())
    models(handle, n2="a100")
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", "a100").obj())
    fw = only_dra(handle)
    for _ in range(2):  # whichever node the attempt starts from
        _, _, node, result = cycle(fw, cache, claim_pod("p", claim="c"))
        assert node is None
        assert result.status.code is Code.ERROR
        assert result.status.message.startswith('running "DynamicResources" filter plugin: class a100: selector #0')
        assert "CEL runtime error" in result.status.message and "n1" in result.status.message


def test_a_missing_device_class_holds_the_pod(handle: FakeHandle, cache: Cache) -> None:
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", "nonexistent").obj())
    _, _, node, result = cycle(only_dra(handle), cache, claim_pod("p", claim="c"))
    assert node is None
    assert result.pre_filter_message == "request gpu: device class nonexistent does not exist"


def test_an_invalid_pool_rejects_its_node_unless_another_pool_fits(handle: FakeHandle, cache: Cache) -> None:
    """kube-scheduler v1.37 passes over invalid pools while it searches and, with no solution on the node, rejects
    it with "invalid resource pools were encountered" (Unschedulable, not an Error that ends the attempt)."""
    fw = only_dra(handle)
    broken = make_slice().name("n1-s").driver(DRIVER).pool("n1").node("n1").device("gpu0").device("gpu0").obj()
    handle.dra.on_slice(False, broken)
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", CLASS, count=2).obj())
    _, _, node, result = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node == "n2"
    for attempt in range(2):  # the second attempt answers from what the first remembered
        handle.dra.on_claim(False, make_claim().name(f"c{attempt}").request("gpu", CLASS, count=2).obj())
        _, _, node, result = cycle(fw, cache, claim_pod(f"q{attempt}", claim=f"c{attempt}"))
        assert node is None
        assert result.node_statuses["n1"].message == "invalid resource pools were encountered"
        assert result.node_statuses["n2"].message == "cannot allocate all claims"
        assert {s.code for s in result.node_statuses.values()} == {Code.UNSCHEDULABLE_AND_UNRESOLVABLE}


def test_partitions_in_flight_hold_their_counters_for_the_next_pod(handle: FakeHandle, cache: Cache) -> None:
    """Partitions of one device on n1: "ab" takes both counters, so neither "b" nor "a" is left for the next pods,
    though nothing is written yet (the first pod's allocation is in flight)."""
    fw = only_dra(handle)
    for node in ("n1", "n2"):
        handle.dra.on_slice(False, make_slice().name(f"{node}-s").driver(DRIVER).pool(node).node(node).obj())
    handle.dra.on_slice(
        False, make_slice().name("n1-c").driver(DRIVER).pool("p", count=2).node("n1").counters("s", a="1", b="1").obj()
    )
    handle.dra.on_slice(
        False,
        make_slice()
        .name("n1-d")
        .driver(DRIVER)
        .pool("p", count=2)
        .node("n1")
        .device("ab", consumes={"s": {"a": "1", "b": "1"}})
        .device("b", consumes={"s": {"b": "1"}})
        .device("a", consumes={"s": {"a": "1"}})
        .obj(),
    )
    handle.dra.on_claim(False, make_claim().name("one").request("gpu", CLASS).obj())
    _, _, node, _ = cycle(fw, cache, claim_pod("one", claim="one"))
    assert node == "n1"
    assert set(handle.dra.in_use()) == {DeviceId(DRIVER, "p", "ab")}
    for name in ("two", "three"):
        handle.dra.on_claim(False, make_claim().name(name).request("gpu", CLASS).obj())
        _, _, node, result = cycle(fw, cache, claim_pod(name, claim=name))
        assert node is None
        assert result.node_statuses["n1"].message == "cannot allocate all claims"


# ---------------------------------------------------------------------- remembered selector answers

A100 = f'device.attributes["{DRIVER}"].model == "a100"'
H100 = f'device.attributes["{DRIVER}"].model == "h100"'


def models(handle: FakeHandle, **by_node: str) -> None:
    """Replace each node's slice: two devices of the given model."""
    for node, model in by_node.items():
        handle.dra.on_slice(
            False,
            make_slice().name(f"{node}-s").driver(DRIVER).pool(node).node(node).devices("gpu", 2, model=model).obj(),
        )


def test_a_changed_slice_is_judged_again(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    handle.dra.on_class(False, make_class().name("a100").selector(A100).obj())
    models(handle, n1="h100", n2="h100")
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", "a100").obj())
    _, _, node, result = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node is None and result.message == "0/2 nodes are available: 2 cannot allocate all claims."
    models(handle, n2="a100")
    _, _, node, _ = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node == "n2", "the answers about n2's old devices are gone with them"


def test_a_changed_class_is_judged_by_its_new_selectors(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    models(handle, n1="h100", n2="a100")
    for name, (selector, expected) in enumerate([(A100, "n2"), (H100, "n1"), (A100, "n2")]):
        handle.dra.on_class(False, make_class().name("pick").selector(selector).obj())
        handle.dra.on_claim(False, make_claim().name(f"c{name}").request("gpu", "pick").obj())
        _, _, node, _ = cycle(fw, cache, claim_pod(f"p{name}", claim=f"c{name}"))
        assert node == expected


def test_pods_asking_alike_have_each_device_judged_once(handle: FakeHandle, cache: Cache) -> None:
    class Counting(SelectorEvaluator):
        calls = 0

        def matches(self, expression: str, device: DeviceInput) -> bool:
            Counting.calls += 1
            return super().matches(expression, device)

    handle.dra.selectors = SelectorResults(Counting())
    plugin = DynamicResources(handle)
    for name in ("a", "b", "c"):
        handle.dra.on_claim(False, make_claim().name(f"claim-{name}").request("gpu", CLASS).obj())
        pod = PodInfo.from_api(claim_pod(name, claim=f"claim-{name}"))
        state = CycleState()
        assert plugin.pre_filter(state, pod, cache.node_infos())[1].ok
        assert all(plugin.filter(state, pod, node).ok for node in cache.node_infos())
    assert Counting.calls == 2, "the first device of each node, once for all three pods"


# ---------------------------------------------------------------------- events and the PreQueueingHint


def test_claim_events_only_check_the_pods_that_reference_the_claim(handle: FakeHandle) -> None:
    recorder = Recorder()
    fw = only_dra(handle)
    queue = scheduling_queue(FakeClock(), fw, recorder=recorder)
    for i in range(5):
        raw = claim_pod(f"p{i}", claim=f"claim-{i}")
        handle.dra.index.update_pod(PodKey(f"default/p{i}"), "default", raw)
        queue.add(PodInfo.from_api(raw))
    assert queue.pending()["gated"] == 5
    claim = make_claim().name("claim-3").request("gpu", CLASS).obj()
    handle.dra.on_claim(False, claim)
    assert queue.move_all(CLAIM_ADD, None, claim) == 1
    assert [h[:2] for h in recorder.hints] == [("DynamicResources", "ResourceClaimAdd")]
    assert recorder.pre_hints == [("DynamicResources", "narrowed")]
    assert queue.get(PodKey("default/p3")).where is Where.ACTIVE  # type: ignore[union-attr]


def test_a_deallocation_checks_every_waiting_pod(handle: FakeHandle) -> None:
    recorder = Recorder()
    queue = scheduling_queue(FakeClock(), only_dra(handle), recorder=recorder)
    allocated = (
        make_claim()
        .name("elsewhere")
        .request("gpu", CLASS)
        .allocated({"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu0"})
        .obj()
    )
    freed = make_claim().name("elsewhere").request("gpu", CLASS).obj()
    for i in range(3):
        raw = claim_pod(f"p{i}", claim=f"claim-{i}")
        handle.dra.on_claim(False, make_claim().name(f"claim-{i}").request("gpu", CLASS).obj())
        queue.add(PodInfo.from_api(raw))
        queued = queue.pop()
        assert queued is not None
        queue.add_unschedulable(queued, unschedulable_plugins=["DynamicResources"])
    queue.move_all(CLAIM_UPDATE, allocated, freed)
    assert recorder.pre_hints == [("DynamicResources", "all_pods")]
    assert len([h for h in recorder.hints if h[0] == "DynamicResources"]) == 3


def test_a_claim_nobody_references_checks_no_pod(handle: FakeHandle) -> None:
    recorder = Recorder()
    queue = scheduling_queue(FakeClock(), only_dra(handle), recorder=recorder)
    queue.add(PodInfo.from_api(claim_pod("p", claim="mine")))
    claim = make_claim().name("unrelated").request("gpu", CLASS).obj()
    assert queue.move_all(CLAIM_ADD, None, claim) == 0
    assert recorder.hints == []


@pytest.mark.parametrize(("gate", "expected"), [(True, 500), (False, 500 * 500 - 500 * 499 // 2)])
def test_n_claim_events_cost_o_n_hint_calls_with_the_gate_and_o_n2_without(
    handle: FakeHandle, gate: bool, expected: int
) -> None:
    """500 pods wait for their claims; their 500 claims arrive one by one. Count QueueingHint calls."""
    n = 500
    recorder = Recorder()
    queue = scheduling_queue(FakeClock(), only_dra(handle), recorder=recorder, pre_queueing_hints=gate)
    for i in range(n):
        raw = claim_pod(f"p{i}", claim=f"claim-{i}")
        handle.dra.index.update_pod(PodKey(f"default/p{i}"), "default", raw)
        queue.add(PodInfo.from_api(raw))
    assert queue.pending()["gated"] == n
    for i in range(n):
        claim = make_claim().name(f"claim-{i}").request("gpu", CLASS).obj()
        handle.dra.on_claim(False, claim)
        queue.move_all(CLAIM_ADD, None, claim)
    calls = len(recorder.hints)
    print(f"\nN={n} claim events, SchedulerPreQueueingHints={gate}: {calls} QueueingHint calls")
    assert calls == expected
    assert queue.pending()["active"] == n


def test_a_claim_deleted_while_the_pod_is_being_bound_fails_the_binding(handle: FakeHandle, cache: Cache) -> None:
    fw = only_dra(handle)
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    state, pod, node, _ = cycle(fw, cache, claim_pod("p", claim="c"))
    assert node is not None
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).deleting().obj())
    status = asyncio.run(fw.run_pre_bind(state, pod, node))
    assert status.code is Code.UNSCHEDULABLE and status.message == 'resourceclaim "c" is being deleted'
    assert handle.claims.writes == [], "nothing written for a claim on its way out"


# ---------------------------------------------------------------------- rejections and preemption


def test_devices_short_everywhere_are_no_case_for_preemption(handle: FakeHandle, cache: Cache) -> None:
    """kube-scheduler's statusUnschedulable: "cannot allocate all claims" is UnschedulableAndUnresolvable, so
    DefaultPreemption tries no node (evicting pods frees no device in its dry run) and says so."""
    fw = framework_of(
        "PrioritySort", "NodeResourcesFit", "DynamicResources", "DefaultPreemption", "DefaultBinder", handle=handle
    )
    for name in ("a", "b", "c", "d"):  # four low-priority pods take the four devices and are bound
        handle.dra.on_claim(False, make_claim().name(f"claim-{name}").uid(f"cu-{name}").request("gpu", CLASS).obj())
        state, pod, node, _ = cycle(fw, cache, claim_pod(name, claim=f"claim-{name}"))
        assert node is not None and asyncio.run(fw.run_pre_bind(state, pod, node)).ok
        handle.dra.on_claim(False, handle.claims.stored[f"default/claim-{name}"])
        bound = claim_pod(name, claim=f"claim-{name}")
        bound["spec"]["nodeName"] = node
        cache.add_or_update_pod(PodInfo.from_api(bound))
    handle.dra.on_claim(False, make_claim().name("claim-high").request("gpu", CLASS).obj())
    high = claim_pod("high", claim="claim-high")
    high["spec"]["priority"] = 1000
    state, pod, node, result = cycle(fw, cache, high)
    assert node is None
    assert {status.code for status in result.node_statuses.values()} == {Code.UNSCHEDULABLE_AND_UNRESOLVABLE}
    answer = fw.run_post_filter(state, pod, result.node_statuses, cache.node_infos())
    assert answer.nominated_node is None and not answer.victims
    assert answer.status.message == "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."


def test_a_claim_another_pod_is_allocating_holds_the_pod_unresolvably(handle: FakeHandle, cache: Cache) -> None:
    """kube-scheduler: "resource claim ... is in the process of being allocated" is UnschedulableAndUnresolvable
    (the pod waits for the claim's update, and preemption is not tried)."""
    fw = only_dra(handle)
    handle.dra.on_claim(False, make_claim().name("shared").uid("cu").request("gpu", CLASS).obj())
    _, _, node, _ = cycle(fw, cache, claim_pod("first", claim="shared"))
    assert node is not None, "reserved: its allocation is in flight, nothing written yet"
    _, _, node, result = cycle(fw, cache, claim_pod("second", claim="shared"))
    assert node is None
    assert (
        result.message == "0/2 nodes are available: resource claim default/shared is in the process of being allocated."
    )
    assert {status.code for status in result.node_statuses.values()} == {Code.UNSCHEDULABLE_AND_UNRESOLVABLE}


def waiting_for(queue: Any, raw: dict[str, Any]) -> PodKey:
    """Add the pod, pop it and park it as DynamicResources rejected it."""
    queue.add(PodInfo.from_api(raw))
    queued = queue.pop()
    assert queued is not None
    queue.add_unschedulable(queued, unschedulable_plugins=["DynamicResources"])
    return queued.pod.key


def test_a_claim_change_retries_its_pods_only_when_created_or_its_status_changed(handle: FakeHandle) -> None:
    """kube-scheduler's isSchedulableAfterClaimChange: a finalizer added (status as before) or an unallocated
    claim deleted is QueueSkip."""
    queue = scheduling_queue(FakeClock(), only_dra(handle))
    claim = make_claim().name("shared").uid("cu").request("gpu", CLASS).obj()
    handle.dra.on_claim(False, claim)
    raw = claim_pod("p", claim="shared")
    handle.dra.index.update_pod(PodKey("default/p"), "default", raw)
    key = waiting_for(queue, raw)
    protected = copy.deepcopy(claim)
    protected["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    assert queue.move_all(CLAIM_UPDATE, claim, protected) == 0
    assert queue.move_all(ClusterEvent(Resource.RESOURCE_CLAIM, ActionType.DELETE), protected, None) == 0
    assert queue.get(key).where is Where.UNSCHEDULABLE  # type: ignore[union-attr]
    allocated = copy.deepcopy(protected)
    allocated["status"] = {"allocation": {"devices": {"results": []}}}
    assert queue.move_all(CLAIM_UPDATE, protected, allocated) == 1


def test_a_claim_usher_wrote_retries_its_waiting_pods_at_once_and_its_watch_events_raise_nothing(
    handle: FakeHandle, cache: Cache
) -> None:
    """As kube-scheduler's assume cache: the event is raised when the write is assumed, not when the watch
    catches up (which may be much later under load); the watch's copies of versions already known are no
    events at all."""
    fw = only_dra(handle)
    recorder = Recorder()
    handlers = EventHandlers(cache, scheduling_queue(FakeClock(), fw, recorder=recorder), {"usher"}, dra=handle.dra)
    claim = make_claim().name("shared").uid("cu").request("gpu", CLASS).obj()
    assert handlers.on_dra("resourceclaims", None, claim) == "ResourceClaimAdd"
    state, first, node, _ = cycle(fw, cache, claim_pod("first", claim="shared"))
    assert node is not None, "reserved: the allocation is in flight"
    second = claim_pod("second", claim="shared")
    handle.dra.index.update_pod(PodKey("default/second"), "default", second)
    key = waiting_for(handlers.queue, second)

    assert asyncio.run(fw.run_pre_bind(state, first, node)).ok  # the finalizer, then allocation + reservation
    assert handlers.queue.get(key).where is not Where.UNSCHEDULABLE, "retried when the write was assumed"  # type: ignore[union-attr]
    assert [hint[:2] for hint in recorder.hints] == [("DynamicResources", "ResourceClaimUpdate")]

    (_, sent), _ = handle.claims.writes
    protected = copy.deepcopy(sent)
    protected["metadata"]["resourceVersion"] = str(int(sent["metadata"]["resourceVersion"]) + 1)
    written = handle.claims.stored["default/shared"]
    assert handlers.on_dra("resourceclaims", None, protected) == "", "older than the assumed version"
    assert handlers.on_dra("resourceclaims", None, written) == "", "the assumed version itself"
    assert handle.dra.claim("default/shared").resource_version == written["metadata"]["resourceVersion"]  # type: ignore[union-attr]
    assert len(recorder.hints) == 1


def test_an_allocation_that_times_out_is_an_error_as_kube_scheduler_makes_it(handle: FakeHandle, cache: Cache) -> None:
    """kube-scheduler: "timed out trying to allocate devices" is an Error naming the node (the attempt ends, the
    pod retries after its backoff), not a rejection of that node."""
    ticks = itertools.count()
    plugin = DynamicResources(handle, filter_timeout=0.5, now=lambda: float(next(ticks)))
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", CLASS).obj())
    pod = PodInfo.from_api(claim_pod("p", claim="c"))
    state = CycleState()
    nodes = cache.node_infos()
    assert plugin.pre_filter(state, pod, nodes)[1].ok
    status = plugin.filter(state, pod, nodes[0])
    assert (status.code, status.message) == (Code.ERROR, f"node {nodes[0].name}: timed out trying to allocate devices")
    unlimited = DynamicResources(handle, filter_timeout=0, now=lambda: float(next(ticks)))
    state = CycleState()
    assert unlimited.pre_filter(state, pod, nodes)[1].ok
    assert unlimited.filter(state, pod, nodes[0]).ok


# ---------------------------------------------------------------------- extended resources backed by DRA


GPU_RESOURCE = "example.com/gpu"


def served(handle: FakeHandle) -> None:
    """The ``gpu`` class also serves ``example.com/gpu`` (spec.extendedResourceName)."""
    raw = make_class().name(CLASS).selector(f'device.driver == "{DRIVER}"').obj()
    raw["spec"]["extendedResourceName"] = GPU_RESOURCE
    handle.dra.on_class(False, raw)


def gpu_pod(name: str, count: str = "1") -> dict[str, Any]:
    return make_pod().name(name).uid(f"uid-{name}").req(**{GPU_RESOURCE: count}).obj()


def test_an_extended_resource_a_class_serves_is_allocated_through_a_claim_made_for_the_pod(
    handle: FakeHandle, cache: Cache
) -> None:
    served(handle)
    fw = only_dra(handle)
    state, pod, node, _ = cycle(fw, cache, gpu_pod("p", "2"))
    assert node is not None
    assert len(handle.dra.in_use()) == 2, "Reserve holds the two devices in flight"
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    assert [kind for kind, _ in handle.claims.writes] == ["create", "status", "pod-status"]
    created = handle.claims.writes[0][1]
    meta = created["metadata"]
    assert meta["name"] == "p-extended-resources-00001" and meta["generateName"] == "p-extended-resources-"
    assert meta["finalizers"] == ["resource.kubernetes.io/delete-protection"], "protected from its creation"
    assert meta["ownerReferences"][0]["uid"] == "uid-p" and meta["ownerReferences"][0]["controller"] is True
    assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert [r["exactly"] for r in created["spec"]["devices"]["requests"]] == [
        {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 2}
    ]
    written = handle.claims.stored[f"default/{meta['name']}"]
    results = written["status"]["allocation"]["devices"]["results"]
    assert {(r["request"], r["pool"]) for r in results} == {("container-0-request-0", node)}
    assert len({r["device"] for r in results}) == 2
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    status = handle.claims.writes[2][1]
    assert status["metadata"]["uid"] == "uid-p"
    assert status["extendedResourceClaimStatus"] == {
        "requestMappings": [
            {"containerName": "c", "resourceName": GPU_RESOURCE, "requestName": "container-0-request-0"}
        ],
        "resourceClaimName": meta["name"],
    }
    assert len(handle.dra.in_use()) == 2 and not handle.dra.in_flight, "the written allocation holds them now"
    data = state.get("DynamicResources/state")
    assert data.in_use == {} and not data.extended_plans and not data.outcomes, "a binding pod keeps no search"
    # Both devices of that node are taken: the next pod asking for two goes to the other node.
    _, _, other, _ = cycle(fw, cache, gpu_pod("q", "2"))
    assert other is not None and other != node


def test_a_device_plugin_s_allocatable_serves_the_resource_where_it_has_some(handle: FakeHandle) -> None:
    """kube-scheduler's shouldDelegateResourceToDRA: a node with any of the resource in its allocatable is
    NodeResourcesFit's to judge (here: too little), one with none is DynamicResources'."""
    served(handle)
    cache = Cache()
    cache.add_or_update_node(
        make_node().name("n1").capacity(cpu="4", memory="8Gi", pods=110, **{GPU_RESOURCE: "1"}).obj()
    )
    cache.add_or_update_node(make_node().name("n2").obj())
    fw = only_dra(handle)
    state, pod, node, _ = cycle(fw, cache, gpu_pod("p", "2"))
    assert node == "n2"
    _, _, node, result = cycle(fw, cache, gpu_pod("q", "2"))
    assert node is None
    assert result.message == ("0/2 nodes are available: 1 Insufficient example.com/gpu, 1 cannot allocate all claims.")
    # One it fits on n1 by its allocatable: nothing is allocated through DRA there.
    handle.claims.writes.clear()
    state, pod, node, _ = cycle(fw, cache, gpu_pod("r", "1"))
    assert node == "n1"
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    assert handle.claims.writes == []


def test_without_a_class_serving_it_the_resource_is_the_node_s_allocatable_only(
    handle: FakeHandle, cache: Cache
) -> None:
    fw = only_dra(handle)
    _, _, node, result = cycle(fw, cache, gpu_pod("p"))
    assert node is None
    assert result.message == "0/2 nodes are available: 2 Insufficient example.com/gpu."
    assert result.unschedulable_plugins == {"NodeResourcesFit"}


def test_unreserve_deletes_the_claim_made_for_the_pod(handle: FakeHandle, cache: Cache) -> None:
    served(handle)
    fw = only_dra(handle)
    handle.claims.answers = [200, 200, 500]  # created, allocated and reserved; the pod's status fails
    state, pod, node, _ = cycle(fw, cache, gpu_pod("p"))
    assert node is not None
    status = asyncio.run(fw.run_pre_bind(state, pod, node))
    assert status.code is Code.ERROR and "extendedResourceClaimStatus" not in status.message
    assert "in the pod's status" in status.message
    fw.run_unreserve(state, pod, node)
    assert handle.claims.deleted == [("default/p-extended-resources-00001", "created-1")]
    assert handle.claims.removed == [], "deleted, not unreserved"


def test_unreserve_before_prebind_frees_the_devices_and_deletes_nothing(handle: FakeHandle, cache: Cache) -> None:
    served(handle)
    fw = only_dra(handle)
    state, pod, node, _ = cycle(fw, cache, gpu_pod("p"))
    assert node is not None and len(handle.dra.in_use()) == 1
    fw.run_unreserve(state, pod, node)
    assert len(handle.dra.in_use()) == 0 and not handle.dra.in_flight
    assert handle.claims.deleted == []


def test_a_claim_an_earlier_attempt_made_rejects_every_node_until_postfilter_deleted_it(
    handle: FakeHandle, cache: Cache
) -> None:
    served(handle)
    stale = make_claim().name("p-extended-resources-x").uid("stale-uid").request("container-0-request-0", CLASS).obj()
    stale["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    stale["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
    ]
    handle.dra.on_claim(False, stale)
    fw = only_dra(handle)
    state, pod, node, result = cycle(fw, cache, gpu_pod("p"))
    assert node is None
    assert result.message.startswith("0/2 nodes are available: 2 cannot schedule extended resource claim.")
    answer = fw.run_post_filter(state, pod, result.node_statuses, cache.node_infos())
    assert answer.status.reasons == ("deletion of ResourceClaim default/p-extended-resources-x requested",)
    assert handle.claims.deleted == [("default/p-extended-resources-x", "stale-uid")]
    handle.dra.on_claim(True, stale)
    _, _, node, _ = cycle(fw, cache, gpu_pod("p"))
    assert node is not None


def test_device_events_retry_pods_waiting_for_an_extended_resource(handle: FakeHandle) -> None:
    served(handle)
    plugin = DynamicResources(handle)
    [slices] = [e for e in plugin.events_to_register() if e.event.resource is Resource.RESOURCE_SLICE]
    waiting, plain = PodInfo.from_api(gpu_pod("p")), PodInfo.from_api(make_pod().name("x").obj())
    assert slices.hint is not None
    assert slices.hint(waiting, None, {}) is QueueingHint.QUEUE
    assert slices.hint(plain, None, {}) is QueueingHint.QUEUE_SKIP
    [classes] = [e for e in plugin.events_to_register() if e.event.resource is Resource.DEVICE_CLASS]
    assert classes.hint is not None
    gpu = make_class().name(CLASS).obj()
    assert classes.hint(waiting, gpu, gpu) is QueueingHint.QUEUE
    assert classes.hint(waiting, None, make_class().name("other").obj()) is QueueingHint.QUEUE_SKIP


# ---------------------------------------------------------------------- Score (DRAPrioritizedList)


def test_a_node_that_can_give_an_earlier_first_available_alternative_scores_higher(
    handle: FakeHandle, cache: Cache
) -> None:
    """kube-scheduler's Score: 8 for the first alternative, 7 for the second. n1 has one device left (another
    claim holds one), so only the one-device alternative fits there; n2 gives the two-device first choice."""
    result = {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu0"}
    handle.dra.on_claim(False, make_claim().name("held").request("gpu", CLASS).allocated(result).obj())
    handle.dra.on_claim(
        False,
        make_claim()
        .name("c")
        .first_available("gpu", sub_request("both", CLASS, count=2), sub_request("one", CLASS, count=1))
        .obj(),
    )
    fw = framework_of("PrioritySort", "DynamicResources", "DefaultBinder", handle=handle)
    plugin = next(p for p, _ in fw.plugins.score if p.name == "DynamicResources")
    for seed in range(8):  # without the score the two nodes tie and the seeded draw picks either
        info = PodInfo.from_api(claim_pod("p", claim="c"))
        state = CycleState()
        chosen = schedule(fw, state, info, cache.node_infos(), rng=random.Random(seed)).node
        assert chosen == "n2", f"seed {seed}"
        scores = {n.name: plugin.score(state, info, n)[0] for n in cache.node_infos()}
        assert scores == {"n1": 7, "n2": 8}


def test_pods_without_first_available_requests_are_not_scored(handle: FakeHandle, cache: Cache) -> None:
    handle.dra.on_claim(False, make_claim().name("c").request("gpu", CLASS).obj())
    fw = framework_of("PrioritySort", "DynamicResources", "DefaultBinder", handle=handle)
    plugin = next(p for p, _ in fw.plugins.score if p.name == "DynamicResources")
    info = PodInfo.from_api(claim_pod("p", claim="c"))
    state = CycleState()
    assert schedule(fw, state, info, cache.node_infos(), rng=random.Random(1)).node is not None
    assert "DynamicResources" in state.skip_score_plugins
    assert plugin.pre_score(state, info, cache.node_infos()).code is Code.SKIP  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- consumable capacity (shared devices)

SHARED_GPU = {
    "name": "gpu0",
    "allowMultipleAllocations": True,
    "capacity": {"memory": {"value": "40Gi", "requestPolicy": {"default": "4Gi", "validRange": {"min": "4Gi"}}}},
}


def memory_request(memory: str) -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": CLASS, "capacity": {"requests": {"memory": memory}}}}


def share_of(claim: str, memory: str, share: str = "0b6e4c1e-5a36-4c0e-9d52-3f1c1a0c0001") -> dict[str, Any]:
    """A claim allocated a share of n1's GPU (by anyone), taking ``memory``."""
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "n1",
        "device": "gpu0",
        "shareID": share,
        "consumedCapacity": {"memory": memory},
    }
    return make_claim().name(claim).raw_request(memory_request(memory)).allocated(result).obj()


@pytest.fixture
def shared_gpu(handle: FakeHandle) -> FakeHandle:
    """n1 has one GPU of 40Gi that claims share; n2 has none."""
    handle.dra.on_slice(
        False, make_slice().name("n1-s").driver(DRIVER).pool("n1").node("n1").raw_device(SHARED_GPU).obj()
    )
    handle.dra.on_slice(False, make_slice().name("n2-s").driver(DRIVER).pool("n2").node("n2").obj())
    return handle


def test_shares_in_flight_hold_their_capacity_for_the_next_pod_until_unreserve(
    shared_gpu: FakeHandle, cache: Cache
) -> None:
    """Two pods take 16Gi each of the 40Gi GPU before anything is written; the third, asking 16Gi, does not fit
    beside them until one is unreserved."""
    fw = only_dra(shared_gpu)
    dra = shared_gpu.dra
    reserved = []
    for name in ("one", "two", "three"):
        dra.on_claim(False, make_claim().name(name).uid(f"cu-{name}").raw_request(memory_request("16Gi")).obj())
        reserved.append(cycle(fw, cache, claim_pod(name, claim=name)))
    assert [node for _, _, node, _ in reserved] == ["n1", "n1", None]
    assert reserved[2][3].node_statuses["n1"].message == "cannot allocate all claims"
    assert dra.in_use() == {}, "a share does not take its device whole"
    assert dra.shared_use() == {DeviceId(DRIVER, "n1", "gpu0"): {"memory": 32 * 2**30}}
    results = [in_flight.allocation.results[0] for in_flight in dra.in_flight.values()]
    assert [r["consumedCapacity"] for r in results] == [{"memory": "16Gi"}, {"memory": "16Gi"}]
    assert results[0]["shareID"] != results[1]["shareID"]
    state, pod, node, _ = reserved[0]
    assert node is not None
    fw.run_unreserve(state, pod, node)
    assert dra.shared_use() == {DeviceId(DRIVER, "n1", "gpu0"): {"memory": 16 * 2**30}}
    assert cycle(fw, cache, claim_pod("three", claim="three"))[2] == "n1"


def test_shares_other_schedulers_wrote_count_and_their_deallocation_frees_the_capacity(
    shared_gpu: FakeHandle, cache: Cache
) -> None:
    fw = only_dra(shared_gpu)
    dra = shared_gpu.dra
    dra.on_claim(False, share_of("theirs", "32Gi"))
    dra.on_claim(False, make_claim().name("mine").raw_request(memory_request("10Gi")).obj())
    _, _, node, result = cycle(fw, cache, claim_pod("p", claim="mine"))
    assert node is None, "10Gi does not fit beside 32Gi in 40Gi"
    assert result.node_statuses["n1"].message == "cannot allocate all claims"
    dra.on_claim(True, share_of("theirs", "32Gi"))
    assert dra.shared_use() == {}
    assert cycle(fw, cache, claim_pod("p", claim="mine"))[2] == "n1"


def test_without_the_gate_a_share_takes_its_device_whole_and_asking_for_capacity_is_an_error(cache: Cache) -> None:
    """DRAConsumableCapacity off, as kube-scheduler: shares count as dedicated devices, devices are not shared,
    and a request with capacity fails with kube's error."""
    handle = FakeHandle(dra=DraState(consumable=False, fractional=False))
    handle.dra.on_class(False, make_class().name(CLASS).selector(f'device.driver == "{DRIVER}"').obj())
    shared_gpu_of = make_slice().name("n1-s").driver(DRIVER).pool("n1").node("n1").raw_device(SHARED_GPU).obj()
    handle.dra.on_slice(False, shared_gpu_of)
    handle.dra.on_claim(False, share_of("theirs", "4Gi"))
    assert set(handle.dra.in_use()) == {DeviceId(DRIVER, "n1", "gpu0")}
    assert handle.dra.shared_use() == {}
    fw = only_dra(handle)
    handle.dra.on_claim(False, make_claim().name("plain").request("gpu", CLASS).obj())
    assert cycle(fw, cache, claim_pod("p", claim="plain"))[2] is None, "the GPU is taken whole"
    handle.dra.on_claim(False, make_claim().name("asking").raw_request(memory_request("4Gi")).obj())
    _, _, node, result = cycle(fw, cache, claim_pod("q", claim="asking"))
    assert node is None
    assert "has capacity requests, but the DRAConsumableCapacity feature is disabled" in str(result.status.message)
