"""Binding conditions (DRADeviceBindingConditions): devices that must be prepared before their pod is bound.

The readiness rules follow kube-scheduler's ``isClaimReadyForBinding`` and ``isClaimTimeout``
(``pkg/scheduler/framework/plugins/dynamicresources``, v1.37.1); the plugin runs through the real framework with
the ClaimWriter port as a recording double whose ``changed`` plays the claim updates a PreBind waits for.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle, framework_of, registry_with
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice
from usher.core.cache import Cache
from usher.core.cycle import schedule
from usher.core.dra.binding import binding_failure, binding_timed_out, pending_conditions, ready_for_binding
from usher.core.dra.model import parse_claim
from usher.core.dra.state import DraState
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.runtime import Framework
from usher.core.plugins.dynamicresources import DynamicResources, parse_args
from usher.core.types import Code, PodInfo

CLASS = "gpu"
ATTACHED = "example.com/attached"
FAILED = "example.com/attach-failed"
EPOCH_2026 = 1_790_000_000.0
"""The wall clock of these tests (2026-09-21T14:13:20Z): allocation timestamps are compared with it."""


def result(device: str = "gpu0", *, conditions: Sequence[str] = (ATTACHED,)) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device}
    if conditions:
        entry["bindingConditions"] = list(conditions)
        entry["bindingFailureConditions"] = [FAILED]
    return entry


def condition(kind: str, status: str = "True", reason: str = "Done", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def allocated(
    *conditions: Mapping[str, str], stamp: str | None = "2026-09-21T00:00:00Z", device_status: bool = True
) -> Any:
    raw = make_claim().name("c").uid("cu").request("gpu", CLASS).allocated(result()).obj()
    if stamp:
        raw["status"]["allocation"]["allocationTimestamp"] = stamp
    if device_status:
        raw["status"]["devices"] = [
            {"driver": DRIVER, "pool": "n1", "device": "gpu0", "conditions": [dict(c) for c in conditions]}
        ]
    return parse_claim(raw)


@pytest.mark.parametrize(
    ("claim", "ready", "failure"),
    [
        pytest.param(allocated(condition(ATTACHED)), True, "", id="the condition is true: ready"),
        pytest.param(allocated(condition(ATTACHED, "False")), False, "", id="the condition is false: waiting"),
        pytest.param(allocated(), False, "", id="no condition reported yet: waiting"),
        pytest.param(allocated(device_status=False), False, "", id="no device status at all: waiting"),
        pytest.param(
            allocated(condition(ATTACHED), condition(FAILED, reason="NoPath", message="fabric down")),
            False,
            'device binding failed: claim=c, reason=NoPath, message="fabric down"',
            id="a true failure condition fails the binding even when the condition is true",
        ),
        pytest.param(allocated(condition(FAILED, "False")), False, "", id="a false failure condition fails nothing"),
    ],
)
def test_a_claim_is_ready_for_binding_when_every_condition_is_true_and_no_failure_is(
    claim: Any, ready: bool, failure: str
) -> None:
    assert (ready_for_binding(claim), binding_failure(claim)) == (ready, failure)


def test_a_claim_without_binding_conditions_is_ready_once_allocated() -> None:
    raw = make_claim().name("c").request("gpu", CLASS).allocated(result(conditions=())).obj()
    assert ready_for_binding(parse_claim(raw))
    assert not ready_for_binding(parse_claim(make_claim().name("c").request("gpu", CLASS).obj()))


@pytest.mark.parametrize(
    ("stamp", "now", "timed_out"),
    [
        pytest.param("2026-09-21T14:13:20Z", EPOCH_2026 + 600, False, id="600s after the timestamp: not yet"),
        pytest.param("2026-09-21T14:13:20Z", EPOCH_2026 + 601, True, id="601s after it: timed out"),
        pytest.param(None, EPOCH_2026 + 10**6, False, id="no timestamp: never"),
    ],
)
def test_the_binding_timeout_counts_from_the_allocation_timestamp(
    stamp: str | None, now: float, timed_out: bool
) -> None:
    assert binding_timed_out(allocated(stamp=stamp), 600, now) is timed_out


def test_the_pending_summary_names_each_waiting_device_as_kube_does() -> None:
    claim = allocated(condition(FAILED, reason="NoPath"))
    assert pending_conditions(claim) == (f"<driver={DRIVER}, pool=n1> gpu0 failed=[{FAILED}] pending=[{ATTACHED}]")


# ---------------------------------------------------------------------- args


@pytest.mark.parametrize(
    ("args", "gate", "message"),
    [
        pytest.param({"bindingTimeout": "0.5s"}, True, "bindingTimeout: must be at least 1 second", id="under 1s"),
        pytest.param({"bindingTimeout": "soon"}, True, "bindingTimeout: must be a duration", id="not a duration"),
        pytest.param(
            {"bindingTimeout": "60s"},
            False,
            "bindingTimeout: DRADeviceBindingConditions or DRAResourceClaimDeviceStatus feature gate is disabled",
            id="set while the gate is off",
        ),
        pytest.param(
            {"filterTimeout": "-1s"}, True, "filterTimeout: must be zero or positive, got '-1s'", id="negative filter"
        ),
        pytest.param({"filterTimeout": -1}, True, "filterTimeout: must be zero or positive", id="negative seconds"),
        pytest.param({"filterTimeout": float("nan")}, True, "filterTimeout: must be a duration", id="nan filter"),
        pytest.param({"filterTimeout": float("inf")}, True, "filterTimeout: must be a duration", id="endless filter"),
        pytest.param(
            {"filterTimeout": "2562048h"}, True, "filterTimeout: must be a duration", id="filter beyond Go's durations"
        ),
        pytest.param({"bindingTimeout": "-5s"}, True, "bindingTimeout: must be at least 1 second", id="negative"),
    ],
)
def test_bad_binding_timeouts_are_refused_naming_the_field(args: dict[str, Any], gate: bool, message: str) -> None:
    with pytest.raises(PluginArgsError, match=message):
        parse_args(args, binding_conditions=gate)


def test_binding_timeouts_parse_as_go_durations_with_kube_s_default() -> None:
    assert parse_args({}).binding_timeout == 600
    assert parse_args({"bindingTimeout": "1m30s", "filterTimeout": "500ms"}) == type(parse_args({}))(0.5, 90)


# ---------------------------------------------------------------------- the plugin


def attached_gpu_slice(**device: Any) -> dict[str, Any]:
    entry = {"name": "gpu0", "bindingConditions": [ATTACHED], "bindingFailureConditions": [FAILED], **device}
    return make_slice().name("n1-s").driver(DRIVER).pool("n1").node("n1").raw_device(entry).obj()


def world(*, gate: bool = True, selector_slice: bool = False) -> tuple[FakeHandle, Cache]:
    handle = FakeHandle(dra=DraState(binding_conditions=gate))
    handle.dra.on_class(False, make_class().name(CLASS).selector(f'device.driver == "{DRIVER}"').obj())
    if selector_slice:
        raw = make_slice().name("any-s").driver(DRIVER).pool("fabric").all_nodes().obj()
        raw["spec"]["devices"] = [
            {"name": "gpu0", "bindingConditions": [ATTACHED], "bindsToNode": True},
        ]
        handle.dra.on_slice(False, raw)
    else:
        handle.dra.on_slice(False, attached_gpu_slice())
    cache = Cache()
    for node in ("n1", "n2"):
        cache.add_or_update_node(make_node().name(node).obj())
    return handle, cache


class Wall:
    """The wall clock the plugin compares allocation timestamps with; tests move it."""

    def __init__(self) -> None:
        self.now = EPOCH_2026

    def __call__(self) -> float:
        return self.now


def plugin_framework(handle: FakeHandle, wall: Wall, *, binding_timeout: float = 600) -> Framework:
    """DynamicResources (with the tests' wall clock, on which PreBind's wait is also measured) and the plugins a
    cycle needs."""
    plugin = DynamicResources(handle, binding_timeout=binding_timeout, wall=wall, now=wall)
    registry = registry_with("DynamicResources", lambda args, h: plugin)
    return framework_of(
        "PrioritySort", "NodeResourcesFit", "DynamicResources", "DefaultBinder", handle=handle, registry=registry
    )


def claim_pod(name: str, claim: str) -> dict[str, Any]:
    pod = make_pod().name(name).uid(f"uid-{name}").obj()
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    return pod


def reserve(fw: Framework, cache: Cache, pod: dict[str, Any]) -> tuple[CycleState, PodInfo, str | None, Any]:
    info = PodInfo.from_api(pod)
    state = CycleState()
    outcome = schedule(fw, state, info, cache.node_infos(), rng=random.Random(1))
    if outcome.node is not None:
        assert fw.run_reserve(state, info, outcome.node).ok
    return state, info, outcome.node, outcome


def report_conditions(handle: FakeHandle, *conditions: Mapping[str, str]) -> None:
    """The driver sets the device's conditions in the claim's status (a watch event of the written claim)."""
    stored = copy.deepcopy(handle.claims.stored["default/c"])
    stored["metadata"]["resourceVersion"] = str(int(stored["metadata"].get("resourceVersion") or 0) + 100)
    stored["status"]["devices"] = [
        {"driver": DRIVER, "pool": "n1", "device": "gpu0", "conditions": [dict(c) for c in conditions]}
    ]
    handle.dra.on_claim(False, stored)


def test_prebind_waits_for_the_condition_then_binds_with_the_conditions_in_the_result() -> None:
    handle, cache = world()
    wall = Wall()
    fw = plugin_framework(handle, wall)
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    state, pod, node, _ = reserve(fw, cache, claim_pod("p", "c"))
    assert node == "n1"
    handle.claims.script = [
        lambda: report_conditions(handle, condition(ATTACHED, "False")),
        lambda: report_conditions(handle, condition(ATTACHED)),
    ]
    assert asyncio.run(fw.run_pre_bind(state, pod, node)).ok
    assert handle.claims.script == [] and len(handle.claims.waits) == 2, "woken twice, bound on the second"
    [(_, written)] = [w for w in handle.claims.writes if w[0] == "status"]
    [entry] = written["status"]["allocation"]["devices"]["results"]
    assert (entry["bindingConditions"], entry["bindingFailureConditions"]) == ([ATTACHED], [FAILED])
    assert written["status"]["allocation"]["allocationTimestamp"] == "2026-09-21T14:13:20Z", "the wall clock's now"


def test_a_failure_condition_fails_prebind_and_the_next_attempt_deallocates_the_claim() -> None:
    handle, cache = world()
    wall = Wall()
    fw = plugin_framework(handle, wall)
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    state, pod, node, _ = reserve(fw, cache, claim_pod("p", "c"))
    assert node is not None
    handle.claims.script = [lambda: report_conditions(handle, condition(FAILED, reason="NoPath", message="down"))]
    status = asyncio.run(fw.run_pre_bind(state, pod, node))
    assert status.code == Code.ERROR
    assert status.message.startswith('device binding failed: claim=c, reason=NoPath, message="down"')
    fw.run_unreserve(state, pod, node)
    state, pod, again, outcome = reserve(fw, cache, claim_pod("p", "c"))
    assert again is None
    assert {s.message for s in outcome.node_statuses.values()} == {"resourceclaim not available on the node"}
    fw.run_post_filter(state, pod, outcome.node_statuses, cache.node_infos())
    assert [key for key, _, _ in handle.claims.deallocated] == ["default/c"], "PostFilter deallocated it"


def test_prebind_gives_up_at_the_binding_timeout_and_a_timed_out_claim_is_deallocated_next() -> None:
    handle, cache = world()
    wall = Wall()
    fw = plugin_framework(handle, wall, binding_timeout=30)
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    state, pod, node, _ = reserve(fw, cache, claim_pod("p", "c"))
    assert node is not None
    status = asyncio.run(fw.run_pre_bind(state, pod, node))
    assert status.code == Code.ERROR
    assert status.message.startswith("device binding timeout: context deadline exceeded")
    assert handle.claims.waits == [30]
    fw.run_unreserve(state, pod, node)
    state, pod, again, outcome = reserve(fw, cache, claim_pod("p", "c"))
    assert again == "n1", "not timed out yet: the claim still pins the pod to its node"
    fw.run_unreserve(state, pod, "n1")
    wall.now += 31
    state, pod, again, outcome = reserve(fw, cache, claim_pod("p", "c"))
    assert again is None
    fw.run_post_filter(state, pod, outcome.node_statuses, cache.node_infos())
    assert [key for key, _, _ in handle.claims.deallocated] == ["default/c"]


def test_without_the_gate_devices_with_binding_conditions_are_never_allocated() -> None:
    handle, cache = world(gate=False)
    fw = plugin_framework(handle, Wall())
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    _, _, node, outcome = reserve(fw, cache, claim_pod("p", "c"))
    assert node is None
    assert outcome.node_statuses["n1"].message == "cannot allocate all claims"


def test_a_device_that_binds_to_node_pins_its_allocation_to_the_chosen_node() -> None:
    handle, cache = world(selector_slice=True)
    fw = plugin_framework(handle, Wall())
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").request("gpu", CLASS).obj())
    _, _, node, _ = reserve(fw, cache, claim_pod("p", "c"))
    assert node is not None
    [in_flight] = handle.dra.in_flight.values()
    assert in_flight.allocation.node_selector == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
