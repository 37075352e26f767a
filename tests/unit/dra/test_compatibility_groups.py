"""Compatibility groups (DRADeviceCompatibilityGroups), against upstream's own table.

The allocator cases are the ``compatibility-groups-*`` cases of
``structured/internal/allocatortesting/allocator_testing.go`` in ``k8s.io/dynamic-resource-allocation`` v0.37.1,
written here as data for one node (upstream's ``node-1``); the semantics are ``experimental/compatibility_groups.go``
(the rolling intersection per counter set), ``experimental/allocator_experimental.go``
(``checkAndConsumeCompatibilityGroups``, ``compatibilityGroupsBaselineForPool``) and, with the gate off,
``experimental/pools_experimental.go`` (a slice whose devices name groups is ignored, so its pool is incomplete).

Upstream's ``Features`` map to :class:`DraState`'s gates: ``CompatibilityGroups`` is ``compatibility_groups``,
``DeviceTaints`` ``device_taints`` and ``ConsumableCapacity`` ``consumable`` (off unless a case sets them, as
upstream's zero ``Features``); ``PartitionableDevices`` is on in every case, and usher has no gate for
``PrioritizedList``. Upstream's ``allocatedDevices`` is usher's ``in_use``.

Upstream compares results with ``ConsistOf`` (claims in any order, each claim's results in any order) after
replacing every ``shareID`` by a fixed one, and expects a node-local selector and no config: here a result is
(request, pool, device, consumed capacity or None for a dedicated device), and a shareID must be a UUID.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from tests.unit.dra.builders import make_claim, make_class, make_slice
from usher.core.dra.allocation import REASON_CANNOT_ALLOCATE, AllocationOutcome, MatchMemo, allocate, plan_claims
from usher.core.dra.model import Device, DeviceId, parse_claim, parse_class
from usher.core.dra.state import DraState
from usher.core.resources import parse_quantity

DRIVER_A = "driver-a"
POOL_1 = "pool-1"
POOL_2 = "pool-2"
NODE = "node-1"
NODE_LABELS = {"region": "region-1", "planet": "earth"}  # node(node1, region1)
CLASS_A = "class-a"
CAPACITY_0 = "capacity-0"
COUNTER_SET_1 = "counter-set-1"
COUNTER_SET_2 = "counter-set-2"

ONE, TWO, FOUR = "1", "2", "4"

TAINT_NO_SCHEDULE = {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}

# class(classA, driverA) and classWithAllowMultipleAllocations(classA, driverA, true): their selectors.
BY_DRIVER = f'device.driver == "{DRIVER_A}"'
SHARED_ONLY = f"{BY_DRIVER} && device.allowMultipleAllocations == true"

# ---------------------------------------------------------------- upstream's generators, as raw API objects


def uses(counter_set: str, counters: Mapping[str, str], *groups: str) -> dict[str, Any]:
    """deviceCounterConsumption(counterSet, counters), or deviceCounterConsumptionWithGroups(..., groups...)."""
    entry: dict[str, Any] = {
        "counterSet": counter_set,
        "counters": {name: {"value": value} for name, value in counters.items()},
    }
    if groups:
        entry["compatibilityGroups"] = list(groups)
    return entry


def dev(
    name: str,
    *consumption: Mapping[str, Any],
    taints: Sequence[Mapping[str, str]] = (),
    multi: bool = False,
    from_counters: bool = False,
) -> dict[str, Any]:
    """device(name, nil|fromCounters, nil).withTaints(...).withDeviceCounterConsumption(...)
    .withAllowMultipleAllocations(): ``from_counters`` makes its capacity the counters it consumes."""
    entry: dict[str, Any] = {"name": name}
    if taints:
        entry["taints"] = [dict(t) for t in taints]
    if consumption:
        entry["consumesCounters"] = [copy.deepcopy(dict(c)) for c in consumption]
    if from_counters:
        entry["capacity"] = {
            counter: {"value": amount["value"]} for c in consumption for counter, amount in c["counters"].items()
        }
    if multi:
        entry["allowMultipleAllocations"] = True
    return entry


def devices_slice(name: str, pool: str, count: int, *devices: Mapping[str, Any]) -> dict[str, Any]:
    """sliceWithDevices(name, node1, resourcePool(pool, count), driverA, devices...)."""
    builder = make_slice().name(name).driver(DRIVER_A).node(NODE).pool(pool, count=count)
    for entry in devices:
        builder.raw_device(entry)
    return builder.obj()


def counters_slice(name: str, pool: str, count: int, *sets: tuple[str, Mapping[str, str]]) -> dict[str, Any]:
    """sliceWithCounterSets(name, node1, resourcePool(pool, count), driverA, counterSet(...)...)."""
    builder = make_slice().name(name).driver(DRIVER_A).node(NODE).pool(pool, count=count)
    for counter_set, counters in sets:
        builder.counters(counter_set, **counters)
    return builder.obj()


def req(name: str, count: int = 1, *, capacity: str | None = None) -> dict[str, Any]:
    """deviceRequest(name, classA, count), withCapacityRequest(&quantity) (a request for capacity-0)."""
    body: dict[str, Any] = {"deviceClassName": CLASS_A, "allocationMode": "ExactCount", "count": count}
    if capacity is not None:
        body["capacity"] = {"requests": {CAPACITY_0: capacity}}
    return {"name": name, "exactly": body}


def sub(name: str, count: int = 1) -> dict[str, Any]:
    """subRequest(name, classA, count)."""
    return {"name": name, "deviceClassName": CLASS_A, "allocationMode": "ExactCount", "count": count}


def first(name: str, *subs: Mapping[str, Any]) -> dict[str, Any]:
    """requestWithPrioritizedList(name, subs...)."""
    return {"name": name, "firstAvailable": [dict(s) for s in subs]}


def claim(*requests: Mapping[str, Any], name: str = "claim-0") -> dict[str, Any]:
    """claim(name).withRequests(...) / claimWithRequest(name, req, classA); the builder gives each its own uid."""
    builder = make_claim().name(name)
    for request in requests:
        builder.raw_request(request)
    return builder.obj()


# ---------------------------------------------------------------- a stand-in for CEL

_DRIVER_IS = re.compile(r'device\.driver == "([^"]*)"')
_MULTI_IS = re.compile(r"device\.allowMultipleAllocations == (true|false)")


def _clause(clause: str, device: Device, driver: str) -> bool:
    if found := _DRIVER_IS.fullmatch(clause):
        return driver == found[1]
    if found := _MULTI_IS.fullmatch(clause):
        return device.allow_multiple is (found[1] == "true")
    raise AssertionError(f"the test's CEL stand-in does not know {clause!r}")


def evaluate(expression: str, device: Device, driver: str) -> bool:
    """The two class selectors above: ``&&`` of the clauses :func:`_clause` knows."""
    return all(_clause(clause, device, driver) for clause in expression.split(" && "))


# ---------------------------------------------------------------- expected results

Result = tuple[str, str, str, Mapping[str, str] | None]
"""(request, pool, device, consumed capacity): None for a dedicated result, a mapping for a share."""


def dedicated(request: str, device: str, pool: str = POOL_1) -> Result:
    """deviceAllocationResult(request, driverA, pool, device, false)."""
    return (request, pool, device, None)


def share(request: str, device: str, consumed: Mapping[str, str]) -> Result:
    """deviceRequestAllocationResult(request, driverA, pool1, device).withConsumedCapacity(&fixedShareID, ...)."""
    return (request, POOL_1, device, dict(consumed))


@dataclass(frozen=True)
class Case:
    claims: Sequence[Mapping[str, Any]]
    slices: Sequence[Mapping[str, Any]]
    expected: Sequence[Sequence[Result]] | None
    """Each claim's results (claims and results in any order); None: no allocation on the node, and no error."""
    groups: bool = True
    """Features.CompatibilityGroups."""
    taints: bool = False
    """Features.DeviceTaints."""
    consumable: bool = False
    """Features.ConsumableCapacity."""
    selector: str = BY_DRIVER
    """The selector of class-a."""
    allocated: Sequence[str] = ()
    """upstream's allocatedDevices: devices of pool-1 other claims hold."""


def two_devices(first_groups: Sequence[str], second_groups: Sequence[str], amount: str) -> list[dict[str, Any]]:
    """The shape most cases share: device-1 and device-2 draw ``amount`` from counter-set-1 (of 4) of pool-1."""
    return [
        devices_slice(
            "slice-1",
            POOL_1,
            2,
            dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: amount}, *first_groups)),
            dev("device-2", uses(COUNTER_SET_1, {CAPACITY_0: amount}, *second_groups)),
        ),
        counters_slice("slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR})),
    ]


UPSTREAM: dict[str, Case] = {
    "compatibility-groups-compatible": Case(
        [claim(req("req-0"), req("req-1"))],
        two_devices(["mig"], ["mig"], TWO),
        [[dedicated("req-0", "device-1"), dedicated("req-1", "device-2")]],
    ),
    "compatibility-groups-incompatible": Case(
        [claim(req("req-0"), req("req-1"))],
        two_devices(["mig"], ["vgpu"], TWO),
        None,
    ),
    "compatibility-groups-taint-rollback": Case(
        [claim(req("req-0"))],
        [
            devices_slice(
                "slice-1",
                POOL_1,
                2,
                dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: TWO}, "mig"), taints=[TAINT_NO_SCHEDULE]),
                dev("device-2", uses(COUNTER_SET_1, {CAPACITY_0: TWO}, "vgpu")),
            ),
            counters_slice("slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR})),
        ],
        [[dedicated("req-0", "device-2")]],
        taints=True,
    ),
    "compatibility-groups-incompatible-with-allocated-peer": Case(
        [claim(req("req-0"))],
        two_devices(["mig"], ["vgpu"], ONE),
        None,
        allocated=["device-1"],
    ),
    "compatibility-groups-compatible-with-allocated-peer": Case(
        [claim(req("req-0"))],
        two_devices(["mig"], ["mig"], ONE),
        [[dedicated("req-0", "device-2")]],
        allocated=["device-1"],
    ),
    "compatibility-groups-disabled-skips-grouped-pool": Case(
        [claim(req("req-0"))],
        [
            devices_slice("slice-1", POOL_1, 2, dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: TWO}, "mig"))),
            counters_slice("slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR})),
            devices_slice("slice-3", POOL_2, 2, dev("device-2", uses(COUNTER_SET_2, {CAPACITY_0: TWO}))),
            counters_slice("slice-4", POOL_2, 2, (COUNTER_SET_2, {CAPACITY_0: FOUR})),
        ],
        [[dedicated("req-0", "device-2", POOL_2)]],
        groups=False,
    ),
    "compatibility-groups-disabled-skips-ungrouped-device-in-grouped-pool": Case(
        [claim(req("req-0"))],
        [
            devices_slice("slice-1", POOL_1, 3, dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "mig"))),
            devices_slice("slice-2", POOL_1, 3, dev("device-2", uses(COUNTER_SET_1, {CAPACITY_0: ONE}))),
            counters_slice("slice-3", POOL_1, 3, (COUNTER_SET_1, {CAPACITY_0: FOUR})),
        ],
        None,
        groups=False,
    ),
    "compatibility-groups-multiple-counter-sets": Case(
        [claim(req("req-0"), req("req-1"))],
        [
            devices_slice(
                "slice-1",
                POOL_1,
                2,
                dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: TWO}, "mig")),
                dev("device-2", uses(COUNTER_SET_2, {CAPACITY_0: TWO}, "vgpu")),
            ),
            counters_slice(
                "slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR}), (COUNTER_SET_2, {CAPACITY_0: FOUR})
            ),
        ],
        [[dedicated("req-0", "device-1"), dedicated("req-1", "device-2")]],
    ),
    "compatibility-groups-multiple-counter-sets-spanning-device": Case(
        [claim(req("req-0"), req("req-1"))],
        [
            devices_slice(
                "slice-1",
                POOL_1,
                2,
                dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "mig")),
                dev(
                    "device-2",
                    uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "vgpu"),
                    uses(COUNTER_SET_2, {CAPACITY_0: ONE}, "vgpu"),
                ),
            ),
            counters_slice(
                "slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR}), (COUNTER_SET_2, {CAPACITY_0: FOUR})
            ),
        ],
        None,
    ),
    "compatibility-groups-with-prioritized-list": Case(
        [claim(req("req-0"), first("req-1", sub("subReq-0", 2), sub("subReq-1", 1)))],
        [
            devices_slice(
                "slice-1",
                POOL_1,
                2,
                dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "mig")),
                dev("device-2", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "mig")),
                dev("device-3", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "vgpu")),
            ),
            counters_slice("slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR})),
        ],
        [[dedicated("req-0", "device-1"), dedicated("req-1/subReq-1", "device-2")]],
    ),
    "compatibility-groups-with-consumable-capacity": Case(
        [claim(req("req-0", capacity=ONE), req("req-1", capacity=ONE))],
        [
            devices_slice(
                "slice-1",
                POOL_1,
                2,
                dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "mig"), from_counters=True, multi=True),
                dev("device-2", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "vgpu"), from_counters=True, multi=True),
                dev("device-3", uses(COUNTER_SET_1, {CAPACITY_0: ONE}, "mig"), from_counters=True, multi=True),
            ),
            counters_slice("slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR})),
        ],
        [[share("req-0", "device-1", {CAPACITY_0: ONE}), share("req-1", "device-3", {CAPACITY_0: ONE})]],
        consumable=True,
        selector=SHARED_ONLY,
    ),
    "compatibility-groups-multiple-claims": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        two_devices(["mig"], ["mig"], ONE),
        [[dedicated("req-0", "device-1")], [dedicated("req-0", "device-2")]],
    ),
    "compatibility-groups-multiple-claims-incompatible": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        two_devices(["mig"], ["vgpu"], ONE),
        None,
    ),
}

# ---------------------------------------------------------------- running a case


def inventory_state(case: Case, slices: Sequence[Mapping[str, Any]] | None = None) -> DraState:
    state = DraState(
        partitionable=True,
        compatibility_groups=case.groups,
        device_taints=case.taints,
        consumable=case.consumable,
        fractional=False,
    )
    for raw in case.slices if slices is None else slices:
        state.on_slice(False, raw)
    return state


def allocate_case(case: Case, state: DraState | None = None) -> AllocationOutcome:
    state = state or inventory_state(case)
    classes = {CLASS_A: parse_class(make_class().name(CLASS_A).selector(case.selector).obj())}
    claims_before = copy.deepcopy(list(case.claims))
    slices_before = copy.deepcopy(list(case.slices))
    outcome = allocate(
        plan_claims(
            [parse_claim(raw) for raw in case.claims],
            classes,
            memo=MatchMemo(),
            consumable=case.consumable,
            fractional=False,
        ),
        node_name=NODE,
        node_labels=NODE_LABELS,
        inventory=state.inventory(),
        in_use={DeviceId(DRIVER_A, POOL_1, name) for name in case.allocated},
        evaluate=evaluate,
        deadline=None,
        timeout=None,
        now=lambda: 0.0,
    )
    assert list(case.claims) == claims_before, "the claims the allocator read were modified"
    assert list(case.slices) == slices_before, "the slices the allocator read were modified"
    assert not state.broken, state.broken
    return outcome


Normalized = tuple[str, str, str, bool, tuple[tuple[str, Decimal], ...]]

_RESULT_FIELDS = {"request", "driver", "pool", "device", "shareID", "consumedCapacity"}
"""What upstream's expected results set: no adminAccess, tolerations or binding conditions."""


def _normalize(result: Mapping[str, Any]) -> Normalized:
    assert set(result) <= _RESULT_FIELDS, result
    assert result["driver"] == DRIVER_A, result
    share_id = result.get("shareID")
    if share_id is not None:
        assert str(uuid.UUID(share_id)) == share_id.lower(), f"shareID {share_id!r} is not a UUID"
    consumed = result.get("consumedCapacity") or {}
    return (
        result["request"],
        result["pool"],
        result["device"],
        share_id is not None,
        tuple(sorted((name, parse_quantity(amount)) for name, amount in consumed.items())),
    )


def _expected(result: Result) -> Normalized:
    request, pool, device, consumed = result
    return (
        request,
        pool,
        device,
        consumed is not None,
        tuple(sorted((name, parse_quantity(amount)) for name, amount in (consumed or {}).items())),
    )


LOCAL_NODE_SELECTOR = {
    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
}
"""localNodeSelector(node1)."""


def check(case: Case, outcome: AllocationOutcome) -> None:
    if case.expected is None:
        assert (outcome.ok, outcome.reason, outcome.error) == (False, REASON_CANNOT_ALLOCATE, None), outcome
        return
    assert outcome.ok, outcome
    assert set(outcome.allocations) == {raw["metadata"]["uid"] for raw in case.claims}
    for allocation in outcome.allocations.values():
        assert allocation.node_selector == LOCAL_NODE_SELECTOR
        assert allocation.config == ()
    got = sorted(
        sorted(_normalize(r) for r in outcome.allocations[raw["metadata"]["uid"]].results) for raw in case.claims
    )
    want = sorted(sorted(_expected(r) for r in results) for results in case.expected)
    assert got == want


@pytest.mark.parametrize("case", [pytest.param(case, id=name) for name, case in UPSTREAM.items()])
def test_upstream_allocator_table(case: Case) -> None:
    check(case, allocate_case(case))


def test_every_upstream_case_is_ported() -> None:
    assert len(UPSTREAM) == 13
    assert all(name.startswith("compatibility-groups-") for name in UPSTREAM)


# ---------------------------------------------------------------- a pool that names no group


def _ungrouped_slices() -> list[dict[str, Any]]:
    """device-1..3 draw 2 of counter-set-1's 4, device-4 2 of counter-set-2's 4, device-5 draws nothing."""
    return [
        devices_slice(
            "slice-1",
            POOL_1,
            2,
            dev("device-1", uses(COUNTER_SET_1, {CAPACITY_0: TWO})),
            dev("device-2", uses(COUNTER_SET_1, {CAPACITY_0: TWO})),
            dev("device-3", uses(COUNTER_SET_1, {CAPACITY_0: TWO})),
            dev("device-4", uses(COUNTER_SET_2, {CAPACITY_0: TWO})),
            dev("device-5"),
        ),
        counters_slice("slice-2", POOL_1, 2, (COUNTER_SET_1, {CAPACITY_0: FOUR}), (COUNTER_SET_2, {CAPACITY_0: FOUR})),
    ]


UNGROUPED: dict[str, tuple[list[dict[str, Any]], Sequence[str], list[list[str]] | None]] = {
    "one device": ([claim(req("req-0"))], (), [["device-1"]]),
    "two on one counter set": ([claim(req("req-0", 2))], (), [["device-1", "device-2"]]),
    "the counters turn the third away": ([claim(req("req-0", 3))], (), [["device-1", "device-2", "device-4"]]),
    "too many": ([claim(req("req-0", 5))], (), None),
    "two requests": ([claim(req("req-0"), req("req-1", 2))], (), [["device-1", "device-2", "device-4"]]),
    "two claims": (
        [claim(req("req-0", 2)), claim(req("req-0", 2), name="claim-1")],
        (),
        [["device-1", "device-2"], ["device-4", "device-5"]],
    ),
    "a peer in use": ([claim(req("req-0", 3))], ("device-1",), [["device-2", "device-4", "device-5"]]),
    "two peers in use": ([claim(req("req-0", 2))], ("device-1", "device-4"), [["device-2", "device-5"]]),
}


@pytest.mark.parametrize(("claims", "in_use", "devices"), [pytest.param(*v, id=k) for k, v in UNGROUPED.items()])
def test_a_pool_naming_no_group_is_allocated_as_without_the_gate(
    claims: list[dict[str, Any]], in_use: Sequence[str], devices: list[list[str]] | None
) -> None:
    """No device names a group: with the gate every counter set stays "all empty", which admits every device, so
    the picks (and failures) are the ones the allocator makes without the gate."""
    outcomes = {}
    for gate in (True, False):
        case = Case(claims, _ungrouped_slices(), None, groups=gate, allocated=in_use)
        outcome = allocate_case(case)
        outcomes[gate] = (
            outcome.ok,
            outcome.reason,
            outcome.error,
            {uid: (a.results, a.node_selector, a.config) for uid, a in outcome.allocations.items()},
        )
    assert outcomes[True] == outcomes[False]
    ok, reason, error, allocations = outcomes[True]
    if devices is None:
        assert (ok, reason, error) == (False, REASON_CANNOT_ALLOCATE, None)
        return
    assert ok, outcomes[True]
    assert [[r["device"] for r in allocations[raw["metadata"]["uid"]][0]] for raw in claims] == devices


# ---------------------------------------------------------------- the refusals are the groups' doing


def _without_groups(slices: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    stripped = copy.deepcopy([dict(s) for s in slices])
    for raw in stripped:
        for device in raw["spec"].get("devices") or []:
            for consumption in device.get("consumesCounters") or []:
                consumption.pop("compatibilityGroups", None)
    return stripped


INCOMPATIBLE = [name for name, case in UPSTREAM.items() if case.groups and case.expected is None]
"""The cases the gate on refuses."""


@pytest.mark.parametrize("name", INCOMPATIBLE)
@pytest.mark.parametrize("gate", [False, True], ids=["gate off", "gate on"])
def test_an_incompatible_case_allocates_once_its_groups_are_gone(name: str, gate: bool) -> None:
    """The same devices, counters and claims without ``compatibilityGroups``: the counters alone admit them, so the
    refusal the table expects comes from the groups (with the gate off, the groups would even hide the pool)."""
    case = UPSTREAM[name]
    assert not allocate_case(case).ok
    stripped = Case(
        case.claims,
        _without_groups(case.slices),
        None,
        groups=gate,
        taints=case.taints,
        consumable=case.consumable,
        selector=case.selector,
        allocated=case.allocated,
    )
    outcome = allocate_case(stripped)
    assert (outcome.ok, outcome.error) == (True, None), outcome
    assert set(outcome.allocations) == {raw["metadata"]["uid"] for raw in case.claims}


def test_the_incompatible_cases_are_there() -> None:
    assert INCOMPATIBLE == [
        "compatibility-groups-incompatible",
        "compatibility-groups-incompatible-with-allocated-peer",
        "compatibility-groups-multiple-counter-sets-spanning-device",
        "compatibility-groups-multiple-claims-incompatible",
    ]
