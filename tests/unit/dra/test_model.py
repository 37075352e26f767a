"""Parsing resource.k8s.io/v1 objects: defaults as the apiserver applies them, errors that name the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice, node_selector, sub_request
from usher.core.dra.model import (
    Constraint,
    DeviceId,
    ModelError,
    SubRequest,
    Version,
    allocated_devices,
    parse_claim,
    parse_class,
    parse_slice,
)

# ---------------------------------------------------------------- slices


def test_attributes_are_stored_by_domain_with_bare_ids_in_the_drivers_domain() -> None:
    raw = (
        make_slice()
        .node("n1")
        .device(
            "gpu-0",
            numa=1,
            model="a100",
            healthy=True,
            firmware=Version("1.2.3"),
            attrs={"other.io/rack": "r1", f"{DRIVER}/index": 0},
            capacity={"memory": "80Gi", "other.io/bandwidth": "10G"},
        )
        .obj()
    )
    device = parse_slice(raw).devices[0]
    assert device.attributes == {
        DRIVER: {"numa": 1, "model": "a100", "healthy": True, "firmware": Version("1.2.3"), "index": 0},
        "other.io": {"rack": "r1"},
    }
    assert device.capacity == {DRIVER: {"memory": "80Gi"}, "other.io": {"bandwidth": "10G"}}


def test_the_qualified_spelling_of_an_attribute_wins_over_the_bare_one() -> None:
    for order in (("numa", f"{DRIVER}/numa"), (f"{DRIVER}/numa", "numa")):
        values = {order[0]: 1 if order[0] == "numa" else 2, order[1]: 1 if order[1] == "numa" else 2}
        device = parse_slice(make_slice().node("n1").device("d", attrs=values).obj()).devices[0]
        assert device.attributes[DRIVER]["numa"] == 2


@pytest.mark.parametrize(
    ("configure", "expected"),
    [
        pytest.param(lambda b: b.node("n1"), ("n1", None, False, False), id="nodeName"),
        pytest.param(
            lambda b: b.selector(node_selector(zone="a")),
            (None, node_selector(zone="a"), False, False),
            id="nodeSelector",
        ),
        pytest.param(lambda b: b.all_nodes(), (None, None, True, False), id="allNodes"),
        pytest.param(lambda b: b.per_device(), (None, None, False, True), id="perDeviceNodeSelection"),
        pytest.param(lambda b: b, (None, None, False, False), id="a future kind of node access is kept as none"),
    ],
)
def test_slice_node_access(configure: Callable[[Any], Any], expected: tuple[Any, ...]) -> None:
    parsed = parse_slice(configure(make_slice().pool("p", generation=3, count=2)).obj())
    assert (parsed.node_name, parsed.node_selector, parsed.all_nodes, parsed.per_device) == expected
    assert (parsed.pool, parsed.generation, parsed.slice_count) == ("p", 3, 2)


def test_per_device_node_access_and_alpha_features_are_read_per_device() -> None:
    raw = (
        make_slice()
        .per_device()
        .device("a", node="n1")
        .device("b", all_nodes=True)
        .device("c", selector=node_selector(zone="z"))
        .device(
            "d",
            extra={
                "bindingConditions": ["ready"],
                "bindingFailureConditions": ["failed"],
                "bindsToNode": True,
                "consumesCounters": [{"counterSet": "s"}],
            },
        )
        .obj()
    )
    a, b, c, d = parse_slice(raw).devices
    assert (a.node_name, b.all_nodes, c.node_selector) == ("n1", True, node_selector(zone="z"))
    assert (a.binding_conditions, d.binding_conditions, d.binding_failure_conditions) == ((), ("ready",), ("failed",))
    assert (a.binds_to_node, d.binds_to_node, d.consumes_counters) == (False, True, True)


def test_shared_counters_and_their_consumption_are_read_as_quantities() -> None:
    raw = (
        make_slice()
        .node("n1")
        .counters("mem", memory="80Gi")
        .counters("cores", a="1", b="500m")
        .device("half", consumes={"mem": {"memory": "40Gi"}, "cores": {"a": "1"}})
        .device("whole")
        .obj()
    )
    parsed = parse_slice(raw)
    nano = 10**9  # amounts are kept in nano units: exact integers
    assert parsed.shared_counters == (
        ("mem", {"memory": 80 * 2**30 * nano}),
        ("cores", {"a": nano, "b": nano // 2}),
    )
    half, whole = parsed.devices
    assert half.counters == ((("mem", "memory"), 40 * 2**30 * nano), (("cores", "a"), nano))
    assert (half.counter_sets, half.consumes_counters) == (("mem", "cores"), True)
    assert (whole.counters, whole.counter_sets, whole.consumes_counters) == ((), (), False)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation of a raw object at a dotted path (list indices as numbers)."""

    def mutate(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = raw
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return mutate


_DELETE = object()


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(_set("spec.driver", _DELETE), "spec.driver", id="a slice without driver"),
        pytest.param(_set("spec.pool.name", ""), "spec.pool.name", id="a slice without pool name"),
        pytest.param(
            _set("spec.pool.resourceSliceCount", 0), "spec.pool.resourceSliceCount", id="a pool of zero slices"
        ),
        pytest.param(_set("spec.pool.generation", "1"), "spec.pool.generation", id="a generation that is text"),
        pytest.param(_set("spec.allNodes", True), "at most one of nodeName", id="two kinds of node access"),
        pytest.param(
            _set("spec.nodeSelector", {"nodeSelectorTerms": [{}, {}]}),
            "spec.nodeSelector.nodeSelectorTerms: must have exactly one term",
            id="a node selector of two terms",
        ),
        pytest.param(
            _set("spec.devices.0.attributes", {"numa": {"int": 1, "string": "1"}}),
            'spec.devices[0].attributes["numa"]: must set exactly one',
            id="an attribute with two values",
        ),
        pytest.param(
            _set("spec.devices.0.attributes", {"numa": {"int": "1"}}),
            'spec.devices[0].attributes["numa"].int',
            id="an int attribute that is text",
        ),
        pytest.param(
            _set("spec.devices.0.capacity", {"memory": {}}),
            'spec.devices[0].capacity["memory"].value',
            id="a capacity without value",
        ),
        pytest.param(_set("spec.devices.0.name", ""), "spec.devices[0].name", id="a device without name"),
        pytest.param(
            _set("spec.sharedCounters", [{"name": "s", "counters": {"c": {"value": "lots"}}}]),
            "spec.sharedCounters[0].counters['c'].value: invalid quantity",
            id="a shared counter that is no quantity",
        ),
        pytest.param(
            _set("spec.sharedCounters", [{"counters": {}}]), "spec.sharedCounters[0].name", id="a nameless counter set"
        ),
        pytest.param(
            _set("spec.devices.0.consumesCounters", [{"counterSet": "s", "counters": {"c": {}}}]),
            "spec.devices[0].consumesCounters[0].counters['c'].value: must be a quantity",
            id="a consumed counter without value",
        ),
        pytest.param(
            _set("spec.devices.0.consumesCounters", [{"counters": {}}]),
            "spec.devices[0].consumesCounters[0].counterSet",
            id="a consumption naming no counter set",
        ),
    ],
)
def test_malformed_slices_name_the_field(mutate: Callable[[dict[str, Any]], None], field: str) -> None:
    raw = make_slice().node("n1").device("gpu-0", numa=0, capacity={"memory": "1Gi"}).obj()
    mutate(raw)
    with pytest.raises(ModelError, match=field.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_slice(raw)


# ---------------------------------------------------------------- classes


def test_a_class_keeps_its_selectors_and_config_in_order() -> None:
    parsed = parse_class(make_class().name("gpu").selector("a").selector("b").config(DRIVER, {"x": 1}).obj())
    assert parsed.name == "gpu"
    assert parsed.selectors == ("a", "b")
    assert parsed.config == ({"opaque": {"driver": DRIVER, "parameters": {"x": 1}}},)


def test_a_class_selector_without_expression_names_the_field() -> None:
    raw = make_class().obj()
    raw["spec"]["selectors"] = [{"cel": {}}]
    with pytest.raises(ModelError, match=r"spec\.selectors\[0\]\.cel\.expression"):
        parse_class(raw)


# ---------------------------------------------------------------- claims


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        pytest.param(sub_request(""), SubRequest("r", "gpu", (), "ExactCount", 1), id="no mode and no count mean one"),
        pytest.param(
            {**sub_request(""), "allocationMode": "", "count": 0},
            SubRequest("r", "gpu", (), "ExactCount", 1),
            id="an empty mode and count 0 mean one",
        ),
        pytest.param(sub_request("", count=3), SubRequest("r", "gpu", (), "ExactCount", 3), id="an explicit count"),
        pytest.param(sub_request("", mode="All"), SubRequest("r", "gpu", (), "All", 1), id="All"),
        pytest.param(
            {**sub_request("", selectors=("s1", "s2")), "adminAccess": True},
            SubRequest("r", "gpu", ("s1", "s2"), "ExactCount", 1, admin_access=True),
            id="selectors and adminAccess",
        ),
    ],
)
def test_request_defaults(request_body: dict[str, Any], expected: SubRequest) -> None:
    claim = parse_claim(make_claim().raw_request({"name": "r", "exactly": request_body}).obj())
    assert claim.requests[0].exactly == expected
    assert claim.requests[0].first_available == ()


def test_first_available_sub_requests_keep_their_order_and_names() -> None:
    raw = make_claim().first_available("gpu", sub_request("big", "large", count=2), sub_request("small")).obj()
    request = parse_claim(raw).requests[0]
    assert request.exactly is None
    assert [(s.name, s.class_name, s.count) for s in request.first_available] == [
        ("big", "large", 2),
        ("small", "gpu", 1),
    ]


def test_claim_metadata_and_status() -> None:
    result = {"request": "r", "driver": DRIVER, "pool": "p", "device": "d"}
    raw = (
        make_claim()
        .name("c")
        .uid("u1")
        .request("r")
        .constraint(f"{DRIVER}/numa", "r")
        .config(DRIVER, {"a": 1}, "r")
        .allocated(result)
        .reserved("pod-uid")
        .deleting()
        .owner("other", controller=False)
        .owner("pod-uid")
        .finalizer("resource.kubernetes.io/delete-protection")
        .obj()
    )
    claim = parse_claim(raw)
    assert (claim.namespace, claim.name, claim.uid, claim.key) == ("default", "c", "u1", "default/c")
    assert claim.constraints == (Constraint(("r",), f"{DRIVER}/numa"),)
    assert claim.config == ({"requests": ["r"], "opaque": {"driver": DRIVER, "parameters": {"a": 1}}},)
    assert claim.allocation == {"devices": {"results": [result]}}
    assert claim.reserved_for == ("pod-uid",)
    assert claim.deleting
    assert claim.owner_uid == "pod-uid"
    assert claim.finalizers == ("resource.kubernetes.io/delete-protection",)
    assert claim.raw is raw


def test_a_claim_without_owner_or_status() -> None:
    claim = parse_claim(make_claim().request("r").obj())
    assert (claim.owner_uid, claim.allocation, claim.reserved_for, claim.deleting) == ("", None, (), False)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        pytest.param(
            {"name": "r", "exactly": {**sub_request(""), "allocationMode": "Some"}},
            r"spec\.devices\.requests\[0\]\.exactly\.allocationMode: unknown mode 'Some'",
            id="an unknown allocationMode",
        ),
        pytest.param(
            {"name": "r", "exactly": sub_request("", count=-1)},
            r"spec\.devices\.requests\[0\]\.exactly\.count: must be at least 1",
            id="a negative count",
        ),
        pytest.param(
            {"name": "r", "exactly": sub_request("", count=2, mode="All")},
            r"spec\.devices\.requests\[0\]\.exactly\.count: must not be set with allocationMode All",
            id="a count with All",
        ),
        pytest.param(
            {"name": "r", "exactly": sub_request(""), "firstAvailable": [sub_request("a")]},
            r"spec\.devices\.requests\[0\]: must set exactly one of exactly, firstAvailable",
            id="both exactly and firstAvailable",
        ),
        pytest.param(
            {"name": "r"},
            r"spec\.devices\.requests\[0\]: must set exactly one of exactly, firstAvailable",
            id="neither exactly nor firstAvailable",
        ),
        pytest.param(
            {"name": "r", "exactly": {}},
            r"spec\.devices\.requests\[0\]\.exactly\.deviceClassName: required",
            id="no device class",
        ),
        pytest.param(
            {"name": "r", "firstAvailable": [sub_request("a"), {"deviceClassName": "gpu"}]},
            r"spec\.devices\.requests\[0\]\.firstAvailable\[1\]\.name: required",
            id="a sub-request without name",
        ),
        pytest.param(
            {"name": "r", "exactly": {**sub_request(""), "selectors": [{"cel": {"expression": ""}}]}},
            r"spec\.devices\.requests\[0\]\.exactly\.selectors\[0\]\.cel\.expression: required",
            id="an empty selector",
        ),
        pytest.param(
            {"exactly": sub_request("")},
            r"spec\.devices\.requests\[0\]\.name: required",
            id="a request without name",
        ),
        pytest.param(
            {"name": "r", "exactly": {**sub_request(""), "adminAccess": "yes"}},
            r"spec\.devices\.requests\[0\]\.exactly\.adminAccess: must be a boolean",
            id="adminAccess that is text",
        ),
    ],
)
def test_malformed_requests_name_the_field(entry: dict[str, Any], field: str) -> None:
    with pytest.raises(ModelError, match=field):
        parse_claim(make_claim().raw_request(entry).obj())


@pytest.mark.parametrize(
    ("constraint", "field"),
    [
        pytest.param(
            {"requests": ["gpu"]},
            r"spec\.devices\.constraints\[0\]: empty constraint",
            id="a constraint naming no attribute",
        ),
        pytest.param(
            {"distinctAttribute": "numa"},
            r"spec\.devices\.constraints\[0\]\.distinctAttribute: must be a fully-qualified name",
            id="a distinct attribute that is not fully qualified",
        ),
        pytest.param(
            {"matchAttribute": "numa"},
            r"spec\.devices\.constraints\[0\]\.matchAttribute: must be a fully-qualified name",
            id="a matchAttribute without domain",
        ),
    ],
)
def test_malformed_constraints_name_the_field(constraint: dict[str, Any], field: str) -> None:
    raw = make_claim().request("r").obj()
    raw["spec"]["devices"]["constraints"] = [constraint]
    with pytest.raises(ModelError, match=field):
        parse_claim(raw)


def test_allocated_devices_leave_out_admin_access_results() -> None:
    raw = (
        make_claim()
        .request("r", count=2)
        .allocated(
            {"request": "r", "driver": DRIVER, "pool": "p", "device": "d0"},
            {"request": "r", "driver": DRIVER, "pool": "p", "device": "d1", "adminAccess": True},
        )
        .obj()
    )
    assert allocated_devices(parse_claim(raw)) == {DeviceId(DRIVER, "p", "d0")}
    assert allocated_devices(parse_claim(make_claim().request("r").obj())) == set()


def test_device_ids_read_as_paths() -> None:
    assert str(DeviceId("d", "p", "x")) == "d/p/x"


def test_an_attribute_of_a_type_usher_does_not_know_is_kept_out_and_named() -> None:
    """A newer API's value type (or none): the device is kept, but selectors fail on it, as CEL conversion does."""
    raw = make_slice().device("d", extra={"attributes": {"numa": {}, "model": {"string": "a100"}}}).obj()
    [device] = parse_slice(raw).devices
    assert device.unsupported_attribute == "numa"
    assert "numa" not in device.attributes.get(DRIVER, {})
