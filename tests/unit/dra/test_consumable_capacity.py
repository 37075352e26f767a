"""Consumable capacity (DRAConsumableCapacity, DRAFractionalCapacityRange) and ``distinctAttribute``, against
upstream's own tables.

The allocator cases are the ``consumable-capacity-*``, ``allow-multiple-allocations-*``,
``partitionable-consumable-capacity-*``, ``partitionable-empty-capacity-*``, ``with-distinct-constraints*`` and
``distinct-constraint-*`` cases of ``structured/internal/allocatortesting/allocator_testing.go`` in
``k8s.io/dynamic-resource-allocation`` v0.37.1, written here as data for one node; the pure-function cases are
``structured/internal/incubating/consumable_capacity_test.go``'s. Upstream's ``allocatedDevices`` is usher's
``in_use``, its ``allocatedCapacityDevices`` (and ``allocatedSharedDeviceIDs``) usher's ``shared`` and
``shared_pools``; the cases that have some are run a second time with that state built by :class:`DraState`
from allocated claims, as the scheduler builds it.

Upstream compares results with ``ConsistOf`` (claims in any order, each claim's results in any order) after
replacing every ``shareID`` by a fixed one: here a result is (request, driver, pool, device, has a shareID,
consumed capacity by value), and a shareID must be a UUID.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from tests.unit.dra.builders import constraint, make_claim, make_class, make_slice
from usher.core.dra.allocation import AllocationOutcome, MatchMemo, allocate, plan_claims
from usher.core.dra.consumable import (
    Amount,
    CapacityError,
    CapacityPolicy,
    DeviceCapacity,
    _exact_milli,
    _take,
    _use_milli,
    _violates,
    consumed_capacity,
    fits,
)
from usher.core.dra.model import Device, DeviceId, parse_claim, parse_class
from usher.core.dra.state import DraState
from usher.core.resources import parse_quantity

DRIVER_A = "driver-a"
POOL_1 = "pool-1"
NODE = "node1"
CLASS_A = "class-a"
CAPACITY_0 = "capacity-0"
CAPACITY_1 = "capacity-1"
COUNTER_SET_1 = "counter-set-1"
COUNTER_SET_2 = "counter-set-2"

STRING_ATTRIBUTE = f"{DRIVER_A}/stringAttribute"
BOOL_ATTRIBUTE = f"{DRIVER_A}/boolAttribute"
VERSION_ATTRIBUTE = f"{DRIVER_A}/driverVersion"
INT_ATTRIBUTE = f"{DRIVER_A}/numa"

INT64_MAX = 2**63 - 1

# ---------------------------------------------------------------- upstream's generators, as raw API objects

# class(classA, driverA) and classWithAllowMultipleAllocations(classA, driverA, true/false): their selectors.
BY_DRIVER = f'device.driver == "{DRIVER_A}"'
SHARED_ONLY = f"{BY_DRIVER} && device.allowMultipleAllocations == true"
DEDICATED_ONLY = f"{BY_DRIVER} && device.allowMultipleAllocations == false"


def ranged(value: str) -> dict[str, Any]:
    """withCapacityRequestPolicyRange: default 2, validRange min 2, step 2, max 4."""
    return {"value": value, "requestPolicy": {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}}


def fractional_ranged(value: str) -> dict[str, Any]:
    """withFractionalCapacityRequestPolicyRange: default 200m, validRange min 200m, step 100m, max 1."""
    return {
        "value": value,
        "requestPolicy": {"default": "200m", "validRange": {"min": "200m", "step": "100m", "max": "1"}},
    }


def valid_values(default: str, value: str, *more: str) -> dict[str, Any]:
    """withCapacityRequestPolicyValidValues: default ``default``, validValues the default then ``more``."""
    return {"value": value, "requestPolicy": {"default": default, "validValues": [default, *more]}}


def plain(value: str) -> dict[str, Any]:
    """A capacity without a request policy."""
    return {"value": value}


def _attribute(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)  # a raw attribute ({"version": "1.0.0"}, or upstream's empty one)
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def dev(
    name: str,
    *,
    multi: bool = False,
    capacity: Mapping[str, Mapping[str, Any]] | None = None,
    attrs: Mapping[str, Any] | None = None,
    consumes: Sequence[tuple[str, Mapping[str, str]]] = (),
    from_counters: bool = False,
) -> dict[str, Any]:
    """upstream's device(...): ``multi`` is withAllowMultipleAllocations, ``consumes`` withDeviceCounterConsumption,
    ``from_counters`` its capacity made of the counters it consumes (then ``capacity`` entries replace them)."""
    entry: dict[str, Any] = {"name": name}
    if attrs:
        entry["attributes"] = {k: _attribute(v) for k, v in attrs.items()}
    capacities: dict[str, Any] = {}
    if from_counters:
        for _, counters in consumes:
            capacities.update({counter: {"value": amount} for counter, amount in counters.items()})
    capacities.update({k: dict(v) for k, v in (capacity or {}).items()})
    if capacities:
        entry["capacity"] = capacities
    if consumes:
        entry["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {c: {"value": v} for c, v in counters.items()}}
            for counter_set, counters in consumes
        ]
    if multi:
        entry["allowMultipleAllocations"] = True
    return entry


def node_slice(*devices: Mapping[str, Any], name: str = "slice-1", count: int = 1) -> dict[str, Any]:
    builder = make_slice().name(name).driver(DRIVER_A).node(NODE).pool(POOL_1, count=count)
    for entry in devices:
        builder.raw_device(entry)
    return builder.obj()


def counter_slice(*sets: tuple[str, Mapping[str, str]], name: str = "slice-2", count: int = 2) -> dict[str, Any]:
    builder = make_slice().name(name).driver(DRIVER_A).node(NODE).pool(POOL_1, count=count)
    for counter_set, counters in sets:
        builder.counters(counter_set, **counters)
    return builder.obj()


def _body(
    class_name: str, count: int | None, capacity: str | None, selectors: Sequence[str], all_mode: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": class_name}
    if all_mode:
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if capacity is not None:
        body["capacity"] = {"requests": {CAPACITY_0: capacity}}  # upstream's capacityRequests(&quantity)
    return body


def req(
    name: str,
    *,
    count: int = 1,
    capacity: str | None = None,
    selectors: Sequence[str] = (),
    all_mode: bool = False,
    class_name: str = CLASS_A,
) -> dict[str, Any]:
    """request / deviceRequest / allDeviceRequest (``all_mode``), withCapacityRequest, withSelectors."""
    return {"name": name, "exactly": _body(class_name, count, capacity, selectors, all_mode)}


def sub(
    name: str,
    *,
    capacity: str | None = None,
    selectors: Sequence[str] = (),
    all_mode: bool = False,
) -> dict[str, Any]:
    """subRequest(name, classA, 1, selectors...), withCapacityRequest, withAllocationMode(All).

    Upstream keeps ``count: 1`` on a sub-request switched to All; the API refuses a count with All (and so does
    usher's parser), so an All sub-request here has none: the allocator ignores it for All anyway."""
    return {"name": name, **_body(CLASS_A, 1, capacity, selectors, all_mode)}


def first(name: str, *subs: Mapping[str, Any]) -> dict[str, Any]:
    """requestWithPrioritizedList."""
    return {"name": name, "firstAvailable": [dict(s) for s in subs]}


def distinct(attribute: str, *requests: str) -> dict[str, Any]:
    return constraint(attribute, *requests, distinct=True)


def match(attribute: str, *requests: str) -> dict[str, Any]:
    return constraint(attribute, *requests, distinct=False)


def claim(*requests: Mapping[str, Any], name: str = "claim-0", constraints: Sequence[Mapping[str, Any]] = ()) -> Any:
    """claim(name).withConstraints(...).withRequests(...); the builder gives every claim its own uid."""
    builder = make_claim().name(name)
    for request in requests:
        builder.raw_request(request)
    raw = builder.obj()
    if constraints:
        raw["spec"]["devices"]["constraints"] = [dict(c) for c in constraints]
    return raw


def attribute_is(name: str, value: str) -> str:
    return f'device.attributes["{DRIVER_A}"].{name} == "{value}"'


def kind(value: str) -> str:
    return attribute_is("kind", value)


def memory_at_least(quantity: str) -> str:
    return f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("{quantity}")) >= 0'


def capacity_0_at_least(quantity: str) -> str:
    return f'device.capacity["{DRIVER_A}"]["{CAPACITY_0}"].compareTo(quantity("{quantity}")) >= 0'


BOOL_SELECTOR = f'device.attributes["{DRIVER_A}"].boolAttribute'

# ---------------------------------------------------------------- a stand-in for CEL

_DRIVER_IS = re.compile(r'device\.driver == "([^"]*)"')
_MULTI_IS = re.compile(r"device\.allowMultipleAllocations == (true|false)")
_ATTRIBUTE_IS = re.compile(r'device\.attributes\["([^"]+)"\]\.(\w+) == "([^"]*)"')
_ATTRIBUTE = re.compile(r'device\.attributes\["([^"]+)"\]\.(\w+)')
_CAPACITY_AT_LEAST = re.compile(
    r'device\.capacity\["([^"]+)"\](?:\.(\w+)|\["([^"]+)"\])\.compareTo\(quantity\("([^"]+)"\)\) >= 0'
)


def _clause(clause: str, device: Device, driver: str) -> bool:
    if found := _DRIVER_IS.fullmatch(clause):
        return driver == found[1]
    if found := _MULTI_IS.fullmatch(clause):
        return device.allow_multiple is (found[1] == "true")
    if found := _ATTRIBUTE_IS.fullmatch(clause):
        return bool(_lookup(device.attributes, found[1], found[2]) == found[3])
    if found := _ATTRIBUTE.fullmatch(clause):
        return _lookup(device.attributes, found[1], found[2]) is True
    if found := _CAPACITY_AT_LEAST.fullmatch(clause):
        amount = _lookup(device.capacity, found[1], found[2] or found[3])
        return parse_quantity(str(amount)) >= parse_quantity(found[4])
    raise AssertionError(f"the test's CEL stand-in does not know {clause!r}")


def _lookup(values: Mapping[str, Mapping[str, Any]], domain: str, ident: str) -> Any:
    try:
        return values[domain][ident]
    except KeyError:
        raise KeyError(f"no such key: {ident}") from None


def evaluate(expression: str, device: Device, driver: str) -> bool:
    """The selectors the generators above write: ``||`` of ``&&`` of the clauses :func:`_clause` knows."""
    return any(
        all(_clause(clause, device, driver) for clause in alternative.split(" && "))
        for alternative in expression.split(" || ")
    )


# ---------------------------------------------------------------- expected results

Result = tuple[str, str, Mapping[str, str] | None]
"""(request, device, consumed capacity): None for a dedicated result, a mapping (maybe empty) for a share."""


def dedicated(request: str, device: str) -> Result:
    """deviceAllocationResult(request, driverA, pool1, device, false)."""
    return (request, device, None)


def share(request: str, device: str, consumed: Mapping[str, str] | None = None) -> Result:
    """deviceRequestAllocationResult(...).withConsumedCapacity(&fixedShareID, consumed)."""
    return (request, device, dict(consumed or {}))


@dataclass(frozen=True)
class Case:
    claims: Sequence[Mapping[str, Any]]
    slices: Sequence[Mapping[str, Any]]
    expected: Sequence[Sequence[Result]] | None = None
    """Each claim's results (claims and results in any order); None: no allocation on the node, and no error."""
    error: str | None = None
    """A substring of the Error outcome's message (upstream's, with ``claim-0`` as usher names it)."""
    selector: str = BY_DRIVER
    """The selector of class-a."""
    allocated: Sequence[str] = ()
    """upstream's allocatedDevices: devices of pool-1 other claims hold whole."""
    shared: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """upstream's allocatedCapacityDevices / allocatedSharedDeviceIDs: devices of pool-1 other claims share, and
    what those shares take of each capacity."""
    consumable: bool = True
    fractional: bool = False
    """upstream's Features.FractionalCapacityRange, off unless a case sets it."""


UPSTREAM: dict[str, Case] = {
    "partitionable-consumable-capacity-backtrack-releases-counter": Case(
        [claim(req("req-0", selectors=[kind("shared")]), req("req-1", selectors=[kind("counteronly")]))],
        [
            node_slice(
                dev("device-1", attrs={"kind": "shared"}, multi=True, consumes=[(COUNTER_SET_1, {"c": "1"})]),
                dev("device-2", attrs={"kind": "shared"}),
                dev("device-3", attrs={"kind": "counteronly"}, consumes=[(COUNTER_SET_1, {"c": "1"})]),
                count=2,
            ),
            counter_slice((COUNTER_SET_1, {"c": "1"})),
        ],
        [[dedicated("req-0", "device-2"), dedicated("req-1", "device-3")]],
    ),
    "consumable-capacity-rejection-rolls-back-constraints": Case(
        [
            claim(req("req-0", capacity="2", selectors=[attribute_is("stringAttribute", "cap")])),
            claim(
                first(
                    "req-0",
                    sub("subReq-0", selectors=[attribute_is("stringAttribute", "cap")], all_mode=True, capacity="2"),
                    sub("subReq-1", selectors=[attribute_is("stringAttribute", "fb")]),
                ),
                name="claim-1",
                constraints=[match(STRING_ATTRIBUTE)],
            ),
        ],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("2")}, attrs={"stringAttribute": "cap"}, multi=True),
                dev("device-2", attrs={"stringAttribute": "fb"}),
            )
        ],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})], [dedicated("req-0/subReq-1", "device-2")]],
    ),
    "partitionable-empty-capacity-multiple-share-backtrack-keeps-counter-ownership": Case(
        [
            claim(req("req-0", selectors=[kind("shared")])),
            claim(
                req("req-1", selectors=[f"{kind('shared')} || {kind('fallback')}"]),
                req("req-2", selectors=[kind("gate")]),
                req("req-3", selectors=[kind("shared")]),
                name="claim-1",
                constraints=[match(STRING_ATTRIBUTE, "req-1", "req-2")],
            ),
        ],
        [
            node_slice(
                dev(
                    "device-1",
                    attrs={"kind": "shared", "stringAttribute": "red"},
                    multi=True,
                    consumes=[(COUNTER_SET_1, {"c": "1"})],
                ),
                dev("device-2", attrs={"kind": "fallback", "stringAttribute": "blue"}),
                dev("device-3", attrs={"kind": "gate", "stringAttribute": "blue"}),
                count=2,
            ),
            counter_slice((COUNTER_SET_1, {"c": "1"})),
        ],
        [
            [share("req-0", "device-1")],
            [dedicated("req-1", "device-2"), dedicated("req-2", "device-3"), share("req-3", "device-1")],
        ],
    ),
    "consumable-capacity-disabled-feature": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1"))],
        error="claim claim-0, request req-0: has capacity requests, but the DRAConsumableCapacity feature is disabled",
        consumable=False,
    ),
    "consumable-capacity-disabled-feature-with-prioritized-list": Case(
        [claim(first("req-0", sub("subReq-0", capacity="1"), sub("subReq-1", capacity="1")))],
        [node_slice(dev("device-1"))],
        error="claim claim-0, subrequest subReq-0: has capacity requests, but the DRAConsumableCapacity feature "
        "is disabled",
        consumable=False,
    ),
    "consumable-capacity-multi-allocatable-device-with-missing-capacity-request": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1", capacity={CAPACITY_1: plain("1")}, multi=True))],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request": Case(
        [claim(req("req-0", capacity="1", all_mode=True))],
        [node_slice(dev("device-1", capacity={CAPACITY_1: plain("1")}, multi=True))],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        [node_slice(dev("device-1", multi=True))],
        [[share("req-0", "device-1")], [share("req-0", "device-1")]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("1")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("1")}, multi=True),
            )
        ],
        [[share("req-0", "device-1", {CAPACITY_0: "1"})], [share("req-0", "device-2", {CAPACITY_0: "1"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: plain("2")}, multi=True))],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request": Case(
        [claim(req("req-0", capacity="1")), claim(req("req-0", capacity="1"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: plain("2")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "1"})], [share("req-0", "device-1", {CAPACITY_0: "1"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})], [share("req-0", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-zero-request-policy": Case(
        [claim(req("req-0")), claim(req("req-0"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: valid_values("0", "1")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "0"})], [share("req-0", "device-1", {CAPACITY_0: "0"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-violates-zero-request-policy": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: valid_values("0", "1")}, multi=True))],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request": Case(
        [claim(req("req-0", capacity="1")), claim(req("req-0", capacity="1"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})], [share("req-0", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-range-policy-step": Case(
        [claim(req("req-0", capacity="3"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "4"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-range-policy-request-above-int64-rejected": Case(
        [claim(req("req-0", capacity="18446744073709551616"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        error="cannot be represented",
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-range-policy-rounded-value-overflow-rejected": Case(
        [claim(req("req-0", capacity="9223372036854775807"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        error="cannot be represented",
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-range-policy-overflow-aborts-not-skip": Case(
        [claim(req("req-0", capacity="18446744073709551616"))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("36893488147419103232")}, multi=True),
            )
        ],
        error="cannot be represented",
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-range-policy-allocation-mode-all-overflow-aborts": Case(
        [claim(req("req-0", capacity="18446744073709551616", all_mode=True))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        error="cannot be represented",
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-negative-request-aborts": Case(
        [claim(req("req-0", capacity="-5"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: plain("10")}, multi=True))],
        error="negative",
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy": Case(
        [claim(req("req-0", capacity="2"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: valid_values("1", "4", "2")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up": Case(
        [claim(req("req-0", capacity="2"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: valid_values("1", "3", "3")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "3"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request": Case(
        [claim(req("req-0", capacity="1")), claim(req("req-0", capacity="2"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("2")}, multi=True))],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy": Case(
        [claim(req("req-0", capacity="6"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("10")}, multi=True))],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining": Case(
        [claim(req("req-0", capacity="2"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("4")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
        shared={"device-1": {CAPACITY_0: "2"}},
    ),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device": Case(
        [claim(req("req-0", capacity="2"))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: ranged("2")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: ranged("2")}, multi=True),
            )
        ],
        [[share("req-0", "device-2", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
        shared={"device-1": {CAPACITY_0: "2"}},
    ),
    "consumable-capacity-with-multi-allocatable-device-backtrack": Case(
        [
            claim(req("req-0", capacity="2"), req("req-1", capacity="2"), constraints=[match(STRING_ATTRIBUTE)]),
            claim(req("req-0", capacity="2"), name="claim-1"),
        ],
        [
            node_slice(
                dev(
                    "device-2",
                    capacity={CAPACITY_0: ranged("2")},
                    attrs={"stringAttribute": "stringAttributeValue1"},
                    multi=True,
                ),
                dev(
                    "device-1",
                    capacity={CAPACITY_0: ranged("4")},
                    attrs={"stringAttribute": "stringAttributeValue2"},
                    multi=True,
                ),
            )
        ],
        [
            [share("req-0", "device-1", {CAPACITY_0: "2"}), share("req-1", "device-1", {CAPACITY_0: "2"})],
            [share("req-0", "device-2", {CAPACITY_0: "2"})],
        ],
    ),
    "consumable-capacity-multi-allocatable-device-with-subrequest": Case(
        [
            claim(
                first(
                    "req-0",
                    sub("subReq-0", capacity="4"),
                    sub("subReq-1", capacity="2"),
                    sub("subReq-1"),
                )
            )
        ],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("2")}, multi=True))],
        [[share("req-0/subReq-1", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity": Case(
        [claim(req("req-0", capacity="2"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("2")}, multi=True))],
        selector=SHARED_ONLY,
        shared={"device-1": {CAPACITY_0: "2"}},
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity": Case(
        [claim(req("req-0", capacity="2", all_mode=True))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: plain("2")}, multi=True), dev("device-2", multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity": Case(
        [claim(req("req-0", capacity="2", all_mode=True))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("2")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("1")}, multi=True),
            )
        ],
        [[share("req-0", "device-1", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient": Case(
        [claim(req("req-0", capacity="1"), req("req-1", capacity="1", all_mode=True))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("2")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("1")}, multi=True),
            )
        ],
        [
            [
                share("req-0", "device-1", {CAPACITY_0: "1"}),
                share("req-1", "device-1", {CAPACITY_0: "1"}),
                share("req-1", "device-2", {CAPACITY_0: "1"}),
            ]
        ],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient": Case(
        [claim(req("req-0", capacity="1", all_mode=True))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("2")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("1")}, multi=True),
            )
        ],
        [[share("req-0", "device-1", {CAPACITY_0: "1"}), share("req-0", "device-2", {CAPACITY_0: "1"})]],
        shared={"device-1": {CAPACITY_0: "1"}},
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient": Case(
        [claim(req("req-0", capacity="1"), req("req-1", capacity="1", all_mode=True))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("1")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("1")}, multi=True),
            )
        ],
    ),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient": Case(
        [claim(req("req-0", capacity="1", all_mode=True))],
        [
            node_slice(
                dev("device-1", capacity={CAPACITY_0: plain("1")}, multi=True),
                dev("device-2", capacity={CAPACITY_0: plain("1")}, multi=True),
            )
        ],
        shared={"device-1": {CAPACITY_0: "1"}},
    ),
    "consumable-capacity-dedicated-device-with-consumable-capacity-request": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: plain("1")}))],
        [[dedicated("req-0", "device-1")]],
        selector=DEDICATED_ONLY,
    ),
    "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request": Case(
        [claim(req("req-0", capacity="1")), claim(req("req-0", capacity="1"), name="claim-1")],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("2")}))],
        selector=DEDICATED_ONLY,
    ),
    "consumable-capacity-requests-are-not-modified": Case(
        [claim(req("req-0", capacity="2"), req("req-1", capacity="1000000000000000000000"))],
        [
            node_slice(
                dev(
                    "device-1",
                    capacity={
                        CAPACITY_0: {
                            "value": "1000000000000000000002",
                            "requestPolicy": {"default": "1000000000000000000000", "validRange": {"min": "2"}},
                        }
                    },
                    multi=True,
                )
            )
        ],
        [
            [
                share("req-0", "device-1", {CAPACITY_0: "2"}),
                share("req-1", "device-1", {CAPACITY_0: "1000000000000000000000"}),
            ]
        ],
    ),
    "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: plain("1")}, multi=True))],
        selector=DEDICATED_ONLY,
    ),
    "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("2")}, multi=True))],
        selector=SHARED_ONLY,
        allocated=["device-1"],
    ),
    "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable": Case(
        [claim(req("req-0", capacity="1"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: ranged("2")}))],
        selector=SHARED_ONLY,
        shared={"device-1": {CAPACITY_0: "1"}},
    ),
    "allow-multiple-allocations-with-partitionable-device": Case(
        [
            claim(
                req("req-0"),
                first(
                    "req-1",
                    sub("subReq-0", selectors=[memory_at_least("6Gi")]),
                    sub("subReq-1", selectors=[memory_at_least("4Gi")]),
                ),
            )
        ],
        [
            node_slice(
                *(
                    dev(name, multi=True, consumes=[(COUNTER_SET_1, {"memory": memory})], from_counters=True)
                    for name, memory in (("device-1", "4Gi"), ("device-2", "6Gi"), ("device-3", "4Gi"))
                ),
                count=2,
            ),
            counter_slice((COUNTER_SET_1, {"memory": "8Gi"})),
        ],
        [
            [
                share("req-0", "device-1", {"memory": "4Gi"}),
                share("req-1/subReq-1", "device-3", {"memory": "4Gi"}),
            ]
        ],
        selector=SHARED_ONLY,
    ),
    "allow-multiple-allocations-with-shared-device-counter-cross-cycle": Case(
        [claim(req("req-0", capacity="1", selectors=[attribute_is("mode", "b")]))],
        [
            node_slice(
                *(
                    dev(
                        name,
                        attrs={"mode": mode},
                        multi=True,
                        consumes=[(COUNTER_SET_1, {CAPACITY_0: "1"})],
                        from_counters=True,
                    )
                    for name, mode in (("device-1", "a"), ("device-2", "b"))
                ),
                count=2,
            ),
            counter_slice((COUNTER_SET_1, {CAPACITY_0: "1"})),
        ],
        selector=SHARED_ONLY,
        shared={"device-1": {CAPACITY_0: "1"}},
    ),
    "partitionable-consumable-capacity-shared-device-counter-not-recharged": Case(
        [claim(req("req-0"))],
        [
            node_slice(dev("device-1", multi=True, consumes=[(COUNTER_SET_1, {"c": "1"})]), count=2),
            counter_slice((COUNTER_SET_1, {"c": "1"})),
        ],
        [[share("req-0", "device-1")]],
        shared={"device-1": {}},
    ),
    "consumable-capacity-with-partitionable-device-multiple-capacity-pools": Case(
        [
            claim(
                req("req-0", capacity="1"),
                req("req-2", capacity="2"),
                first(
                    "req-1",
                    sub("subReq-0", selectors=[capacity_0_at_least("4")], capacity="1"),
                    sub("subReq-1", selectors=[capacity_0_at_least("2")], capacity="1"),
                ),
            )
        ],
        [
            node_slice(
                *(
                    dev(
                        name,
                        capacity={CAPACITY_1: ranged("4")},
                        multi=True,
                        consumes=[(COUNTER_SET_1, {CAPACITY_0: amount}), (COUNTER_SET_2, {CAPACITY_1: "4"})],
                        from_counters=True,
                    )
                    for name, amount in (("device-1", "2"), ("device-2", "4"), ("device-3", "2"))
                ),
                count=2,
            ),
            counter_slice((COUNTER_SET_1, {CAPACITY_0: "4"}), (COUNTER_SET_2, {CAPACITY_1: "8"})),
        ],
        [
            [
                share("req-0", "device-1", {CAPACITY_0: "1", CAPACITY_1: "2"}),
                share("req-2", "device-3", {CAPACITY_0: "2", CAPACITY_1: "2"}),
                share("req-1/subReq-1", "device-1", {CAPACITY_0: "1", CAPACITY_1: "2"}),
            ]
        ],
    ),
    "with-distinct-constraints": Case(
        [
            claim(
                req("req-0"),
                req("req-1"),
                req("req-2"),
                req("req-3"),
                constraints=[
                    distinct(BOOL_ATTRIBUTE, "req-0", "req-1"),
                    distinct(VERSION_ATTRIBUTE, "req-0", "req-1", "req-2"),
                    distinct(INT_ATTRIBUTE, "req-0", "req-1", "req-2", "req-3"),
                ],
            )
        ],
        [
            node_slice(
                *(
                    dev(
                        name,
                        attrs={"driverVersion": {"version": version}, "numa": numa, "boolAttribute": flag},
                        multi=True,
                    )
                    for name, version, numa, flag in (
                        ("device-1", "1.0.0", 0, True),
                        ("device-2", "1.0.1", 1, False),
                        ("device-3", "1.0.2", 2, True),
                        ("device-4", "1.0.0", 3, True),
                    )
                )
            )
        ],
        [
            [
                share("req-0", "device-1"),
                share("req-1", "device-2"),
                share("req-2", "device-3"),
                share("req-3", "device-4"),
            ]
        ],
    ),
    "distinct-constraint-single-request-count-3-not-distinct": Case(
        [claim(req("req-0", count=3), constraints=[distinct(STRING_ATTRIBUTE)])],
        [
            node_slice(
                *(
                    dev(name, attrs={"stringAttribute": value})
                    for name, value in (("device-1", "value1"), ("device-2", "value2"), ("device-3", "value1"))
                )
            )
        ],
    ),
    "distinct-constraint-single-request-count-3-all-distinct": Case(
        [claim(req("req-0", count=3), constraints=[distinct(STRING_ATTRIBUTE)])],
        [
            node_slice(
                *(
                    dev(name, attrs={"stringAttribute": value})
                    for name, value in (("device-1", "value1"), ("device-2", "value2"), ("device-3", "value3"))
                )
            )
        ],
        [[dedicated("req-0", "device-1"), dedicated("req-0", "device-2"), dedicated("req-0", "device-3")]],
    ),
    "distinct-constraint-two-requests-with-count-not-distinct": Case(
        [claim(req("req-0", count=2), req("req-1"), constraints=[distinct(STRING_ATTRIBUTE, "req-0", "req-1")])],
        [
            node_slice(
                *(
                    dev(name, attrs={"stringAttribute": value})
                    for name, value in (("device-1", "value1"), ("device-2", "value2"), ("device-3", "value1"))
                )
            )
        ],
    ),
    "with-distinct-constraints-attribute-not-set": Case(
        [claim(req("req-0"), constraints=[distinct(BOOL_ATTRIBUTE, "req-0")])],
        [node_slice(dev("device-1", multi=True))],
    ),
    "with-distinct-constraints-unknown-type-attribute": Case(
        [claim(req("req-0"), constraints=[distinct(BOOL_ATTRIBUTE, "req-0")])],
        [node_slice(dev("device-1", attrs={"boolAttribute": {}}, multi=True))],
        error="unsupported attribute value",
    ),
    "with-distinct-constraints-with-subrequests": Case(
        [
            claim(
                *(
                    first(name, sub("subReq-0", selectors=[BOOL_SELECTOR]), sub("subReq-1"))
                    for name in ("req-0", "req-1", "req-2")
                ),
                constraints=[distinct(BOOL_ATTRIBUTE, "req-0", "req-1")],
            )
        ],
        [
            node_slice(
                dev("device-1", attrs={"boolAttribute": True}, multi=True),
                dev("device-2", attrs={"boolAttribute": False}, multi=True),
            )
        ],
        [
            [
                share("req-0/subReq-0", "device-1"),
                share("req-1/subReq-1", "device-2"),
                share("req-2/subReq-0", "device-1"),
            ]
        ],
    ),
    "distinct-constraint-single-request-multiple-devices-attribute-not-set": Case(
        [claim(req("req-0", count=3), constraints=[distinct(INT_ATTRIBUTE)])],
        [node_slice(dev("device-1"), dev("device-2"), dev("device-3"))],
    ),
    "distinct-constraint-single-request-not-enough-distinct-values": Case(
        [claim(req("req-0", count=3), constraints=[distinct(INT_ATTRIBUTE)])],
        [
            node_slice(
                *(
                    dev(name, attrs={"numa": numa})
                    for name, numa in (("device-1", 1), ("device-2", 2), ("device-3", 2), ("device-4", 2))
                )
            )
        ],
    ),
    "distinct-constraint-single-request-multiple-devices-attribute-set": Case(
        [claim(req("req-0", count=3), constraints=[distinct(INT_ATTRIBUTE)])],
        [
            node_slice(
                *(
                    dev(name, attrs={"numa": numa})
                    for name, numa in (("device-1", 1), ("device-2", 2), ("device-3", 1), ("device-4", 3))
                )
            )
        ],
        [[dedicated("req-0", "device-1"), dedicated("req-0", "device-2"), dedicated("req-0", "device-4")]],
    ),
    "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint": Case(
        [claim(req("req-0", capacity="1"), req("req-1", capacity="1"), constraints=[distinct(STRING_ATTRIBUTE)])],
        [
            node_slice(
                dev(
                    "device-1",
                    capacity={CAPACITY_0: ranged("2")},
                    attrs={"stringAttribute": "stringAttributeValue"},
                    multi=True,
                )
            )
        ],
        selector=SHARED_ONLY,
    ),
    "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint": Case(
        [claim(req("req-0", capacity="2"), req("req-1", capacity="2"), constraints=[distinct(STRING_ATTRIBUTE)])],
        [
            # Upstream names both slices slice-1; a name is a slice's identity in usher's state.
            node_slice(
                dev(
                    "device-1",
                    capacity={CAPACITY_0: ranged("4")},
                    attrs={"stringAttribute": "stringAttributeValue1"},
                    multi=True,
                ),
                count=2,
            ),
            node_slice(
                dev(
                    "device-2",
                    capacity={CAPACITY_0: ranged("4")},
                    attrs={"stringAttribute": "stringAttributeValue2"},
                    multi=True,
                ),
                name="slice-2",
                count=2,
            ),
        ],
        [[share("req-0", "device-1", {CAPACITY_0: "2"}), share("req-1", "device-2", {CAPACITY_0: "2"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-fractional-range-gate-disabled": Case(
        [claim(req("req-0", capacity="200m"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: fractional_ranged("1")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "1"})]],
        selector=SHARED_ONLY,
    ),
    "consumable-capacity-fractional-range-gate-enabled-round-up": Case(
        [claim(req("req-0", capacity="250m"))],
        [node_slice(dev("device-1", capacity={CAPACITY_0: fractional_ranged("1")}, multi=True))],
        [[share("req-0", "device-1", {CAPACITY_0: "300m"})]],
        selector=SHARED_ONLY,
        fractional=True,
    ),
}

WITH_ALLOCATED_STATE = {name: case for name, case in UPSTREAM.items() if case.allocated or case.shared}


# ---------------------------------------------------------------- running a case


def _device_id(name: str) -> DeviceId:
    return DeviceId(DRIVER_A, POOL_1, name)


def _state(case: Case) -> DraState:
    state = DraState(consumable=case.consumable, fractional=case.fractional)
    for raw in case.slices:
        state.on_slice(False, raw)
    return state


def share_id(name: str) -> str:
    """A fixed share ID for an allocated claim's result."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"share/{name}"))


def _allocated_claims(case: Case) -> list[dict[str, Any]]:
    """The allocated claims that leave the case's devices in use: one per device held whole or shared."""
    claims: list[dict[str, Any]] = []
    for name in case.allocated:
        result: dict[str, Any] = {"request": "req-0", "driver": DRIVER_A, "pool": POOL_1, "device": name}
        claims.append(make_claim().name(f"holds-{name}").raw_request(req("req-0")).allocated(result).obj())
    for name, consumed in case.shared.items():
        result = {"request": "req-0", "driver": DRIVER_A, "pool": POOL_1, "device": name, "shareID": share_id(name)}
        if consumed:
            result["consumedCapacity"] = dict(consumed)
        claims.append(make_claim().name(f"shares-{name}").raw_request(req("req-0")).allocated(result).obj())
    return claims


def allocate_case(case: Case, *, through_claims: bool = False) -> tuple[DraState, AllocationOutcome]:
    state = _state(case)
    if through_claims:
        for raw in _allocated_claims(case):
            state.on_claim(False, raw)
        in_use: Any = state.in_use()
        shared: Any = state.shared_use()
        shared_pools: Any = state.shared_pools()
    else:
        in_use = {_device_id(name) for name in case.allocated}
        shared = {
            _device_id(name): {k: parse_quantity(v) for k, v in consumed.items()}
            for name, consumed in case.shared.items()
        }
        shared_pools = {(DRIVER_A, POOL_1)} if case.shared else set()
    classes = {CLASS_A: parse_class(make_class().name(CLASS_A).selector(case.selector).obj())}
    before = copy.deepcopy(list(case.claims))
    outcome = allocate(
        plan_claims(
            [parse_claim(raw) for raw in case.claims],
            classes,
            memo=MatchMemo(),
            consumable=case.consumable,
            fractional=case.fractional,
        ),
        node_name=NODE,
        node_labels={},
        inventory=state.inventory(),
        in_use=in_use,
        evaluate=evaluate,
        deadline=None,
        timeout=None,
        now=lambda: 0.0,
        shared=shared,
        shared_pools=shared_pools,
    )
    assert list(case.claims) == before, "the claims the allocator read were modified"
    return state, outcome


Normalized = tuple[str, str, str, str, bool, tuple[tuple[str, Decimal], ...]]


def _normalize(result: Mapping[str, Any]) -> Normalized:
    share_id = result.get("shareID")
    if share_id is not None:
        assert str(uuid.UUID(share_id)) == share_id.lower(), f"shareID {share_id!r} is not a UUID"
    assert not result.get("adminAccess"), result
    consumed = result.get("consumedCapacity") or {}
    return (
        result["request"],
        result["driver"],
        result["pool"],
        result["device"],
        share_id is not None,
        tuple(sorted((name, parse_quantity(amount)) for name, amount in consumed.items())),
    )


def _expected(result: Result) -> Normalized:
    request, device, consumed = result
    return (
        request,
        DRIVER_A,
        POOL_1,
        device,
        consumed is not None,
        tuple(sorted((name, parse_quantity(amount)) for name, amount in (consumed or {}).items())),
    )


def check(case: Case, state: DraState, outcome: AllocationOutcome) -> None:
    if case.error is not None:
        assert not outcome.ok, outcome
        assert outcome.error is not None, (outcome, state.broken)
        # usher names a claim namespace/name, upstream's claims have no namespace.
        assert case.error.replace("claim claim-", "claim default/claim-") in outcome.error
        return
    if case.expected is None:
        assert (outcome.ok, outcome.error) == (False, None), (outcome, state.broken)
        return
    assert outcome.ok, (outcome, state.broken)
    assert set(outcome.allocations) == {raw["metadata"]["uid"] for raw in case.claims}
    got = sorted(
        sorted(_normalize(r) for r in outcome.allocations[raw["metadata"]["uid"]].results) for raw in case.claims
    )
    want = sorted(sorted(_expected(r) for r in results) for results in case.expected)
    assert got == want


@pytest.mark.parametrize("case", UPSTREAM.values(), ids=UPSTREAM.keys())
def test_upstream_allocator_table(case: Case) -> None:
    check(case, *allocate_case(case))


@pytest.mark.parametrize("case", WITH_ALLOCATED_STATE.values(), ids=WITH_ALLOCATED_STATE.keys())
def test_upstream_allocator_table_with_the_allocated_state_of_claims(case: Case) -> None:
    """The same cases, with the devices in use and the shares taken from allocated claims through DraState."""
    check(case, *allocate_case(case, through_claims=True))


# ---------------------------------------------------------------- incubating/consumable_capacity_test.go


def q(text: str) -> Amount:
    """A quantity as the model parses it (binary units keep their format)."""
    return Amount(parse_quantity(text), text.endswith(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")))


ONE, TWO, THREE, ZERO = q("1"), q("2"), q("3"), q("0")
MAX_INT64 = q(str(INT64_MAX))
MAX_INT64_PLUS_1 = q(str(INT64_MAX + 1))
MAX_INT64_MINUS_1 = q(str(INT64_MAX - 1))
TWO_POW_64_PLUS_3 = q(str(2**64 + 3))
POINT_ONE, POINT_TWO, POINT_TWO_FIVE, POINT_THREE, POINT_FOUR = q("100m"), q("200m"), q("250m"), q("300m"), q("400m")
TOO_BIG_FOR_MILLI = q("9224372036854776E3")
"""Its milli value overflows int64."""


def milli(units: int) -> Amount:
    """resource.NewMilliQuantity(units, DecimalSI)."""
    return Amount(Decimal(units) / 1000)


def in_range(
    minimum: Amount,
    *,
    maximum: Amount | None = None,
    step: Amount | None = None,
    default: Amount | None = None,
) -> CapacityPolicy:
    return CapacityPolicy(default=default, valid_min=minimum, valid_max=maximum, valid_step=step, has_range=True)


def one_of(default: Amount, *values: Amount) -> CapacityPolicy:
    return CapacityPolicy(default=default, valid_values=values)


def test_get_consumed_capacity_from_request() -> None:
    """get-consumed-capacity-from-request: asked (over the default), the default, else the whole capacity."""
    capacities = [
        DeviceCapacity(CAPACITY_0, TWO, in_range(ONE, default=TWO)),
        DeviceCapacity(CAPACITY_1, TWO, in_range(ONE, default=ONE)),
        DeviceCapacity("dummy", ONE),
    ]
    consumed = consumed_capacity({CAPACITY_0: ONE, "dummy": ONE}, capacities, fractional=False)
    assert {name: amount.value for name, amount in consumed.items()} == {
        CAPACITY_0: 1,
        CAPACITY_1: 1,
        "dummy": 1,
    }


def _shares(state: DraState) -> dict[str, dict[str, Decimal]]:
    return {device.device: dict(consumed) for device, consumed in state.shared_use().items()}


def test_allocated_consumed_capacity_adds_up_and_goes_back_to_nothing() -> None:
    """add-sub-allocating-consumed-capacity and insert-remove-allocating-consumed-capacity-collection: the shares
    of one device add up, and removing them takes their capacity off again (DraState's aggregate)."""
    state = DraState()
    assert _shares(state) == {}
    sharing = []
    for i in range(2):
        result = {
            "request": "req-0",
            "driver": DRIVER_A,
            "pool": POOL_1,
            "device": "device-1",
            "shareID": share_id(f"claim-{i}"),
            "consumedCapacity": {CAPACITY_0: "1"},
        }
        sharing.append(make_claim().name(f"claim-{i}").raw_request(req("req-0")).allocated(result).obj())
        state.on_claim(False, sharing[-1])
    assert _shares(state) == {"device-1": {CAPACITY_0: Decimal(2)}}
    assert set(state.shared_pools()) == {(DRIVER_A, POOL_1)}
    state.on_claim(True, sharing[0])
    assert _shares(state) == {"device-1": {CAPACITY_0: Decimal(1)}}
    state.on_claim(True, sharing[1])
    assert _shares(state) == {}
    assert not state.shared_pools()


VIOLATIONS = {
    "no constraint": (ONE, None, False, False),
    "less than maximum": (ONE, in_range(ONE, maximum=TWO, default=ONE), False, False),
    "more than maximum": (TWO, in_range(ONE, maximum=ONE, default=ONE), False, True),
    "in set": (ONE, one_of(ONE, ONE), False, False),
    "not in set": (TWO, one_of(ONE, ONE), False, True),
    "fractional step aligned (0.3 = min+1*step)": (
        POINT_THREE,
        in_range(POINT_TWO, maximum=ONE, step=POINT_ONE, default=POINT_TWO),
        True,
        False,
    ),
    "fractional step not aligned (0.25 is not a multiple of 0.1 from 0.2)": (
        POINT_TWO_FIVE,
        in_range(POINT_TWO, maximum=ONE, step=POINT_ONE, default=POINT_TWO),
        True,
        True,
    ),
    "requested value overflows milli representation": (
        TOO_BIG_FOR_MILLI,
        in_range(ONE, step=ONE, default=ONE),
        True,
        True,
    ),
}


@pytest.mark.parametrize(("requested", "policy", "fractional", "expected"), VIOLATIONS.values(), ids=VIOLATIONS.keys())
def test_violates_policy(requested: Amount, policy: CapacityPolicy | None, fractional: bool, expected: bool) -> None:
    """violate-capacity-sharing (violatesPolicy)."""
    assert _violates(requested, policy, fractional) is expected


CONSUMED = {
    "empty": (None, ONE, CapacityPolicy(), False, ONE),
    "request-above-maxint64-is-rejected": (
        TWO_POW_64_PLUS_3,
        TWO_POW_64_PLUS_3,
        in_range(ZERO, step=THREE, default=ZERO),
        False,
        None,
    ),
    "rounded-value-above-maxint64-is-rejected": (
        MAX_INT64,
        MAX_INT64_PLUS_1,
        in_range(ZERO, step=TWO, default=ZERO),
        False,
        None,
    ),
    "max-safe-boundary-rounds-to-maxint64": (
        MAX_INT64_MINUS_1,
        MAX_INT64,
        in_range(ONE, step=TWO, default=ONE),
        False,
        MAX_INT64,
    ),
    "min in range": (None, TWO, in_range(ONE, default=ONE), False, ONE),
    "default in set": (None, TWO, one_of(ONE, ONE), False, ONE),
    "more than min in range": (TWO, TWO, in_range(ONE, default=ONE), False, TWO),
    "less than min in range": (ONE, TWO, in_range(TWO, default=ONE), False, TWO),
    "with step (round up)": (TWO, THREE, in_range(ONE, step=TWO, default=ONE), False, THREE),
    "with step (no remaining)": (TWO, TWO, in_range(ONE, step=ONE, default=ONE), False, TWO),
    "fractional step round up (0.25 to 0.3)": (
        POINT_TWO_FIVE,
        ONE,
        in_range(POINT_TWO, maximum=ONE, step=POINT_ONE, default=POINT_TWO),
        True,
        POINT_THREE,
    ),
    "fractional step already aligned (0.4 = min+2*step)": (
        POINT_FOUR,
        ONE,
        in_range(POINT_TWO, maximum=ONE, step=POINT_ONE, default=POINT_TWO),
        True,
        POINT_FOUR,
    ),
    "valid value in set": (TWO, THREE, one_of(ONE, ONE, TWO, THREE), False, TWO),
    "set (round up)": (TWO, THREE, one_of(ONE, ONE, THREE), False, THREE),
    "larger than set": (THREE, THREE, one_of(ONE, ONE, TWO), False, THREE),
    "fractional-step-request-not-milli-representable-is-rejected": (
        TOO_BIG_FOR_MILLI,
        TOO_BIG_FOR_MILLI,
        in_range(POINT_ONE, step=POINT_ONE, default=ONE),
        True,
        None,
    ),
    "fractional-step-rounded-value-passes-milli-range-is-rejected": (
        milli(INT64_MAX - 1),
        milli(INT64_MAX),
        in_range(POINT_ONE, step=POINT_ONE, default=POINT_ONE),
        True,
        None,
    ),
}


@pytest.mark.parametrize(
    ("requested", "value", "policy", "fractional", "expected"), CONSUMED.values(), ids=CONSUMED.keys()
)
def test_calculate_consumed_capacity(
    requested: Amount | None, value: Amount, policy: CapacityPolicy, fractional: bool, expected: Amount | None
) -> None:
    """calculate-consumed-capacity (calculateConsumedCapacity); None: errCapacityRequestNotRepresentable."""
    capacity = DeviceCapacity(CAPACITY_0, value, policy)
    if expected is None:
        with pytest.raises(CapacityError):
            _take(requested, capacity, fractional)
    else:
        assert _take(requested, capacity, fractional).value == expected.value


SAFE_MILLI = {
    "whole number": (ONE, 1000),
    "fractional milli": (POINT_ONE, 100),
    "too large for milli (overflows int64)": (TOO_BIG_FOR_MILLI, None),
}


@pytest.mark.parametrize(("quantity", "expected"), SAFE_MILLI.values(), ids=SAFE_MILLI.keys())
def test_safe_milli_value(quantity: Amount, expected: int | None) -> None:
    """safe-milli-value; None: an error."""
    assert _exact_milli(quantity.value) == expected


USE_MILLI = {
    "fractional disabled": (in_range(POINT_TWO, maximum=ONE, step=POINT_ONE), False, False),
    "all fractional, fits in milli": (in_range(POINT_TWO, maximum=ONE, step=POINT_ONE), True, True),
    "all integer, fits in milli (no hasFractional gate any more)": (in_range(ONE, maximum=THREE, step=ONE), True, True),
    "min overflows milli, falls back to integer": (in_range(TOO_BIG_FOR_MILLI, step=ONE), True, False),
    "step too small (sub-milli)": (in_range(ONE, step=ZERO), True, False),
}


@pytest.mark.parametrize(("policy", "fractional", "expected"), USE_MILLI.values(), ids=USE_MILLI.keys())
def test_use_milli(policy: CapacityPolicy, fractional: bool, expected: bool) -> None:
    """use-milli."""
    assert _use_milli(policy, fractional) is expected


@pytest.mark.parametrize("reverse", [False, True], ids=["soft capacity first", "fatal capacity first"])
def test_cmp_request_over_capacity_fatal_beats_soft(reverse: bool) -> None:
    """cmp-request-over-capacity-fatal-beats-soft: a request that cannot be represented is an error even where
    another capacity already refuses the device, whichever comes first (upstream loops over Go's map order)."""
    capacities = [
        DeviceCapacity(CAPACITY_0, ONE),  # asking 2 of 1: soft, the device is passed over
        DeviceCapacity(CAPACITY_1, MAX_INT64_PLUS_1, in_range(ZERO, step=TWO)),  # MaxInt64 rounds past it: fatal
    ]
    if reverse:
        capacities.reverse()
    with pytest.raises(CapacityError):
        fits({CAPACITY_0: TWO, CAPACITY_1: MAX_INT64}, capacities, fractional=False)
