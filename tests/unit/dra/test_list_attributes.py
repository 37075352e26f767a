"""List-typed device attributes (DRAListTypeAttributes) under ``matchAttribute`` and ``distinctAttribute``,
against upstream's own table.

The allocator cases are the ``list-attributes-*`` cases of
``structured/internal/allocatortesting/allocator_testing.go`` in ``k8s.io/dynamic-resource-allocation`` v0.37.1,
written here as data for one node. Their semantics are the experimental allocator's: ``attributeAsSet`` turns a
scalar or a list into a set (a scalar is a list of one), ``matchAttributeConstraint`` wants a non-empty
intersection of the sets of all the devices, of one type (``deviceAttributeListAsSet.intersection``),
``distinctAttributeConstraint`` wants them pairwise disjoint (``experimental/constraint.go``). With the gate
off, upstream's scalar code finds no value in a list, so a constraint on one cannot be satisfied.

Upstream's class ``class(classA, driverA)`` selects ``device.driver == "driver-a"``; each case runs once with a
stand-in for that selector and once with usher's CEL (:class:`SelectorResults`), which must accept devices with
list attributes. Results are compared as upstream's ``ConsistOf``: the one claim's results in any order.

The last tests run selectors that read list attributes through usher's CEL, as Kubernetes' DRA CEL allows them
(``cel/compile_test.go``: lists are CEL lists of ints, bools, strings or semvers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.dra.builders import constraint, make_claim, make_class, make_slice
from usher.core.dra.allocation import AllocationOutcome, MatchMemo, allocate, plan_claims
from usher.core.dra.matching import SelectorResults
from usher.core.dra.model import AttributeList, Device, parse_claim, parse_class
from usher.core.dra.state import DraState

DRIVER_A = "driver-a"
POOL_1 = "pool-1"
NODE = "node-1"
CLASS_A = "class-a"

STRING_ATTRIBUTE = f"{DRIVER_A}/stringAttribute"
INT_ATTRIBUTE = f"{DRIVER_A}/numa"
BOOL_ATTRIBUTE = f"{DRIVER_A}/boolAttribute"
VERSION_ATTRIBUTE = f"{DRIVER_A}/driverVersion"

BY_DRIVER = f'device.driver == "{DRIVER_A}"'
"""The selector of upstream's class(classA, driverA)."""

Evaluate = Callable[[str, Device, str], bool]

# ---------------------------------------------------------------- raw attribute values


def string(value: str) -> dict[str, Any]:
    """{StringValue: new(value)}."""
    return {"string": value}


def strings(*values: str) -> dict[str, Any]:
    """{StringValues: []string{...}}."""
    return {"strings": list(values)}


def ints(*values: int) -> dict[str, Any]:
    """{IntValues: []int64{...}}."""
    return {"ints": list(values)}


def bools(*values: bool) -> dict[str, Any]:
    """{BoolValues: []bool{...}}."""
    return {"bools": list(values)}


def versions(*values: str) -> dict[str, Any]:
    """{VersionValues: []string{...}}."""
    return {"versions": list(values)}


EMPTY: dict[str, Any] = {}
"""An attribute with no value: upstream's ``{}``, and also its ``{StringValues: []string{}}`` and
``{VersionValues: []string{}}``, which the API serves as ``{}`` (the list fields are ``omitempty``, and an empty
list fails validation anyway)."""


# ---------------------------------------------------------------- upstream's generators, as raw API objects


def dev(name: str, attribute: str, value: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """device(name, nil, {attribute: value}): ``attribute`` is the bare id, as upstream writes it."""
    return (name, attribute, dict(value))


def node_slice(devices: Sequence[tuple[str, str, Mapping[str, Any]]]) -> dict[str, Any]:
    """sliceWithDevices(slice1, node1, pool1, driverA, ...)."""
    builder = make_slice().name("slice-1").driver(DRIVER_A).node(NODE).pool(POOL_1)
    for name, attribute, value in devices:
        builder.raw_device({"name": name, "attributes": {attribute: dict(value)}})
    return builder.obj()


def req(name: str, count: int = 1, selectors: Sequence[str] = ()) -> dict[str, Any]:
    """request(name, classA, count) / deviceRequest(name, classA, count), withSelectors."""
    body: dict[str, Any] = {"deviceClassName": CLASS_A, "allocationMode": "ExactCount", "count": count}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}


def match(attribute: str, *requests: str) -> dict[str, Any]:
    return constraint(attribute, *requests, distinct=False)


def distinct(attribute: str, *requests: str) -> dict[str, Any]:
    return constraint(attribute, *requests, distinct=True)


def claim(constraint: Mapping[str, Any], *requests: Mapping[str, Any]) -> dict[str, Any]:
    """claimWithRequests(claim0, constraints, requests...)."""
    builder = make_claim().name("claim-0")
    for request in requests:
        builder.raw_request(request)
    raw = builder.obj()
    raw["spec"]["devices"]["constraints"] = [dict(constraint)]
    return raw


# ---------------------------------------------------------------- the table


@dataclass(frozen=True)
class Case:
    constraint: Mapping[str, Any]
    requests: Sequence[Mapping[str, Any]]
    devices: Sequence[tuple[str, str, Mapping[str, Any]]]
    expected: Sequence[tuple[str, str]] | None = None
    """(request, device) of claim-0's results, in any order; None: upstream's expectResults nil (no allocation)."""
    error: str | None = None
    """A substring of the Error outcome's message."""
    list_attributes: bool = True
    """upstream's Features.ListTypeAttributes."""


UPSTREAM: dict[str, Case] = {
    # ------------------------------------------------ matchAttribute
    "list-attributes-match-constaint-scalar-string-values": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [dev("device-1", "stringAttribute", string("value1")), dev("device-2", "stringAttribute", string("value1"))],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-match-constaint-list-of-string-values-with-common-elements": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2", "value3")),
            dev("device-2", "stringAttribute", strings("value2", "value3", "value4")),
        ],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-match-constaint-list-of-string-values-with-partially-common-elements": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 3)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2")),
            dev("device-2", "stringAttribute", strings("value2", "value3")),
            dev("device-3", "stringAttribute", strings("value3", "value1")),
        ],
    ),
    "list-attributes-match-constraint-backtrack-needs-intersection-restore": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 3)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2")),
            dev("device-2", "stringAttribute", strings("value1")),
            dev("device-3", "stringAttribute", strings("value2")),
            dev("device-4", "stringAttribute", strings("value2")),
        ],
        [("req-0", "device-1"), ("req-0", "device-3"), ("req-0", "device-4")],
    ),
    "list-attributes-match-constaint-list-of-string-values-without-common-elements": Case(
        match(STRING_ATTRIBUTE),
        # Upstream's two requests are both named req-0 (its allocator does not validate names).
        [req("req-0"), req("req-0")],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2")),
            dev("device-2", "stringAttribute", strings("value3", "value4")),
        ],
    ),
    "list-attributes-match-constaint-mixed-scalar-and-list-of-string-values-with-common-elements": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", strings("value1", "value2")),
        ],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-match-constaint-mixed-scalar-and-list-of-string-values-with-partially-common-elements": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 3)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", strings("value1", "value2")),
            dev("device-3", "stringAttribute", strings("value2", "value3")),
        ],
    ),
    "list-attributes-match-constaint-mixed-scalar-and-list-of-string-values-without-common-elements": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", strings("value2", "value3")),
        ],
    ),
    "list-attributes-match-constaint-list-of-int-values-with-common-elements": Case(
        match(INT_ATTRIBUTE),
        [req("req-0", 2)],
        [dev("device-1", "numa", ints(0, 1, 2)), dev("device-2", "numa", ints(1, 2, 3))],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-match-constaint-list-of-bool-values-with-common-elements": Case(
        match(BOOL_ATTRIBUTE),
        [req("req-0", 2)],
        [dev("device-1", "boolAttribute", bools(True, False)), dev("device-2", "boolAttribute", bools(True))],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-match-constaint-list-of-version-values-with-common-elements": Case(
        match(VERSION_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "driverVersion", versions("1.0.0", "1.1.0", "2.0.0")),
            dev("device-2", "driverVersion", versions("1.1.0", "2.0.0", "2.1.0")),
        ],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-match-constaint-with-empty-or-unknown-type": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        # Upstream: {} and {StringValues: []string{}}; both are {} on the wire.
        [dev("device-1", "stringAttribute", EMPTY), dev("device-2", "stringAttribute", EMPTY)],
        error="unsupported attribute value",
    ),
    "list-attributes-disabled-match-constraint-with-lists": Case(
        match(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2", "value3")),
            dev("device-2", "stringAttribute", strings("value2", "value3", "value4")),
        ],
        list_attributes=False,
    ),
    # ------------------------------------------------ distinctAttribute
    "list-attributes-distinct-constraint-scalar-string-values-all-distinct": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [dev("device-1", "stringAttribute", string("value1")), dev("device-2", "stringAttribute", string("value2"))],
        [("req-0", "device-1"), ("req-0", "device-2")],
    ),
    "list-attributes-distinct-constraint-scalar-string-values-not-distinct": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [dev("device-1", "stringAttribute", string("value1")), dev("device-2", "stringAttribute", string("value1"))],
    ),
    "list-attributes-distinct-constraint-single-request-count-3-not-distinct": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 3)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", string("value2")),
            dev("device-3", "stringAttribute", string("value1")),
        ],
    ),
    "list-attributes-distinct-constraint-single-request-count-3-all-distinct": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 3)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", string("value2")),
            dev("device-3", "stringAttribute", string("value3")),
        ],
        [("req-0", "device-1"), ("req-0", "device-2"), ("req-0", "device-3")],
    ),
    "list-attributes-distinct-constraint-list-of-string-values-all-distinct": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2")),
            dev("device-2", "stringAttribute", strings("value2", "value3")),
            dev("device-3", "stringAttribute", strings("value3", "value4")),
        ],
        [("req-0", "device-1"), ("req-0", "device-3")],
    ),
    "list-attributes-distinct-constraint-list-of-string-values-with-common-elements": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2", "value3")),
            dev("device-2", "stringAttribute", strings("value2", "value4", "value5")),
        ],
    ),
    "list-attributes-distinct-constraint-mixed-scalar-and-list-all-distinct": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", strings("value1", "value2")),
            dev("device-3", "stringAttribute", strings("value2", "value3")),
        ],
        [("req-0", "device-1"), ("req-0", "device-3")],
    ),
    "list-attributes-distinct-constraint-mixed-scalar-and-list-with-common-elements": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", string("value1")),
            dev("device-2", "stringAttribute", strings("value1", "value2")),
        ],
    ),
    "list-attributes-distinct-constraint-list-of-int-values-all-distinct": Case(
        distinct(INT_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "numa", ints(0, 1)),
            dev("device-2", "numa", ints(1, 2)),
            dev("device-3", "numa", ints(2, 3)),
        ],
        [("req-0", "device-1"), ("req-0", "device-3")],
    ),
    "list-attributes-distinct-constraint-list-of-bool-values-all-distinct": Case(
        distinct(BOOL_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "boolAttribute", bools(True)),
            dev("device-2", "boolAttribute", bools(True, False)),
            dev("device-3", "boolAttribute", bools(False)),
        ],
        [("req-0", "device-1"), ("req-0", "device-3")],
    ),
    "list-attributes-distinct-constraint-list-of-version-values-all-distinct": Case(
        distinct(VERSION_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "driverVersion", versions("1.0.0", "1.1.0")),
            dev("device-2", "driverVersion", versions("1.1.0", "2.0.0")),
            dev("device-3", "driverVersion", versions("2.0.0", "2.1.0")),
        ],
        [("req-0", "device-1"), ("req-0", "device-3")],
    ),
    "list-attributes-distinct-constaint-with-empty-or-unknown-type": Case(
        distinct(VERSION_ATTRIBUTE),
        [req("req-0", 2)],
        # Upstream: {VersionValues: []string{}} and {VersionValues: nil}; both are {} on the wire.
        [dev("device-1", "driverVersion", EMPTY), dev("device-2", "driverVersion", EMPTY)],
        error="unsupported attribute value",
    ),
    "list-attributes-disabled-distinct-constraint-with-lists": Case(
        distinct(STRING_ATTRIBUTE),
        [req("req-0", 2)],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2", "value3")),
            dev("device-2", "stringAttribute", strings("value2", "value3", "value4")),
        ],
        list_attributes=False,
    ),
    "list-attributes-distinct-constraint-backtrack-needs-remove": Case(
        distinct(STRING_ATTRIBUTE, "req-0", "req-1", "req-2"),
        [req("req-0"), req("req-1"), req("req-2")],
        [
            dev("device-1", "stringAttribute", strings("value1", "value2", "value3")),
            dev("device-2", "stringAttribute", strings("value3", "value4", "value5")),
            dev("device-3", "stringAttribute", strings("value1", "value2")),
            dev("device-4", "stringAttribute", strings("value3", "value4")),
            dev("device-0", "stringAttribute", strings("value5", "value6")),
        ],
        [("req-0", "device-3"), ("req-1", "device-4"), ("req-2", "device-0")],
    ),
}


# ---------------------------------------------------------------- running a case


def by_driver(expression: str, device: Device, driver: str) -> bool:
    """A stand-in for CEL that knows only upstream's class selector."""
    assert expression == BY_DRIVER, f"the test's CEL stand-in does not know {expression!r}"
    return driver == DRIVER_A


EVALUATORS: dict[str, Callable[[], Evaluate]] = {"stand-in": lambda: by_driver, "cel": SelectorResults}


def run(
    claims: Sequence[Mapping[str, Any]],
    slices: Sequence[Mapping[str, Any]],
    *,
    list_attributes: bool,
    evaluate: Evaluate,
) -> tuple[DraState, AllocationOutcome]:
    state = DraState(list_attributes=list_attributes)
    for raw in slices:
        state.on_slice(False, raw)
    classes = {CLASS_A: parse_class(make_class().name(CLASS_A).selector(BY_DRIVER).obj())}
    outcome = allocate(
        plan_claims(
            [parse_claim(raw) for raw in claims], classes, memo=MatchMemo(), list_attributes=state.list_attributes
        ),
        node_name=NODE,
        node_labels={},
        inventory=state.inventory(),
        in_use=set(),
        evaluate=evaluate,
        deadline=None,
        timeout=None,
        now=lambda: 0.0,
    )
    return state, outcome


def results(outcome: AllocationOutcome, raw_claim: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    allocation = outcome.allocations[raw_claim["metadata"]["uid"]]
    return sorted((r["request"], r["driver"], r["pool"], r["device"]) for r in allocation.results)


@pytest.mark.parametrize("evaluator", EVALUATORS.values(), ids=EVALUATORS.keys())
@pytest.mark.parametrize("case", UPSTREAM.values(), ids=UPSTREAM.keys())
def test_upstream_allocator_table(case: Case, evaluator: Callable[[], Evaluate]) -> None:
    raw_claim = claim(case.constraint, *case.requests)
    state, outcome = run(
        [raw_claim], [node_slice(case.devices)], list_attributes=case.list_attributes, evaluate=evaluator()
    )
    assert not state.broken, state.broken
    if case.error is not None:
        assert not outcome.ok, outcome
        assert outcome.error is not None, outcome
        assert case.error in outcome.error
        return
    if case.expected is None:
        assert (outcome.ok, outcome.error) == (False, None), outcome
        return
    assert outcome.ok, outcome
    assert set(outcome.allocations) == {raw_claim["metadata"]["uid"]}
    assert results(outcome, raw_claim) == sorted((r, DRIVER_A, POOL_1, d) for r, d in case.expected)


def test_the_table_has_every_list_attributes_case() -> None:
    """Upstream v0.37.1 has 27 ``list-attributes-*`` cases (and two ``numanode-*`` ones, not ported here)."""
    assert len(UPSTREAM) == 27
    assert all(name.startswith("list-attributes-") for name in UPSTREAM)


# ---------------------------------------------------------------- the gate, as the inventory shows it


@pytest.mark.parametrize("gate", [True, False], ids=["gate on", "gate off"])
def test_list_attributes_reach_the_allocator_and_cel_whatever_the_gate(gate: bool) -> None:
    """As kube: the apiserver decides whether lists are stored; the scheduler's gate only changes how constraints
    compare them (kube's CEL conversion gives lists to selectors either way)."""
    state = DraState(list_attributes=gate)
    state.on_slice(False, node_slice([dev("device-1", "numa", ints(0, 1))]))
    (device,) = state.slices["slice-1"].devices
    assert device.attributes[DRIVER_A]["numa"] == AttributeList("int", (0, 1))
    assert not device.unsupported_attribute


# ---------------------------------------------------------------- CEL on list attributes


def _attributes(**values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: dict(value) for name, value in values.items()}


SELECTORS: dict[str, tuple[str, dict[str, dict[str, Any]], dict[str, dict[str, Any]], str]] = {
    # (selector, device-1's attributes, device-2's attributes, the device it selects)
    "in-strings": (
        f'"b" in device.attributes["{DRIVER_A}"].names',
        _attributes(names=strings("a", "c")),
        _attributes(names=strings("a", "b")),
        "device-2",
    ),
    "ints-isSorted": (
        f'device.attributes["{DRIVER_A}"].ids.isSorted()',
        _attributes(ids=ints(1, 2, 3)),
        _attributes(ids=ints(3, 1, 2)),
        "device-1",
    ),
    "versions-exists-isGreaterThan": (
        f'device.attributes["{DRIVER_A}"].versions.exists(v, v.isGreaterThan(semver("1.0.0")))',
        _attributes(versions=versions("0.9.0", "1.0.0")),
        _attributes(versions=versions("1.0.0", "1.2.0")),
        "device-2",
    ),
    "bools-includes": (
        f'device.attributes["{DRIVER_A}"].flags.includes(false)',
        _attributes(flags=bools(True, False)),
        _attributes(flags=bools(True, True)),
        "device-1",
    ),
    "ints-size": (
        f'device.attributes["{DRIVER_A}"].ids.size() == 2',
        _attributes(ids=ints(4, 5, 6)),
        _attributes(ids=ints(4, 5)),
        "device-2",
    ),
}


@pytest.mark.parametrize(("selector", "first", "second", "selected"), SELECTORS.values(), ids=SELECTORS.keys())
def test_cel_selector_on_list_attributes(
    selector: str, first: Mapping[str, Any], second: Mapping[str, Any], selected: str
) -> None:
    """A request's selector reading a list attribute picks the one device of two it holds for."""
    raw_slice = make_slice().name("slice-1").driver(DRIVER_A).node(NODE).pool(POOL_1)
    raw_slice.raw_device({"name": "device-1", "attributes": dict(first)})
    raw_slice.raw_device({"name": "device-2", "attributes": dict(second)})
    raw_claim = make_claim().name("claim-0").raw_request(req("req-0", selectors=[selector])).obj()
    state, outcome = run([raw_claim], [raw_slice.obj()], list_attributes=True, evaluate=SelectorResults())
    assert not state.broken, state.broken
    assert outcome.ok, outcome
    assert results(outcome, raw_claim) == [("req-0", DRIVER_A, POOL_1, selected)]
