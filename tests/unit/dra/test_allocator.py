"""The structured-parameters allocator, behaviour by behaviour, as kube-scheduler's DynamicResources Filter.

Selectors are evaluated by a tiny stand-in for CEL: ``"<domain>/<id> == <python literal>"`` compares an
attribute, ``"true"`` is true and ``"boom"`` raises like a CEL runtime error.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice, node_selector, sub_request
from usher.core.dra.allocation import (
    REASON_CANNOT_ALLOCATE,
    REASON_INVALID_POOLS,
    REASON_TIMED_OUT,
    AllocationOutcome,
    Inventory,
    MatchMemo,
    allocate,
    plan_claims,
)
from usher.core.dra.model import Device, DeviceId, Version, parse_claim, parse_class, parse_slice

CANNOT = REASON_CANNOT_ALLOCATE
INVALID = REASON_INVALID_POOLS
OTHER = "other.io"


def model(value: str) -> str:
    return f"{DRIVER}/model == {value!r}"


def numa(value: int) -> str:
    return f"{DRIVER}/numa == {value!r}"


class FakeCel:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, expression: str, device: Device, driver: str) -> bool:
        self.calls += 1
        if expression == "true":
            return True
        if expression == "boom":
            raise RuntimeError("no such key: model")
        name, _, literal = expression.partition(" == ")
        domain, _, ident = name.partition("/")
        value = device.attributes.get(domain, {}).get(ident)
        return value is not None and value == ast.literal_eval(literal)


def frozen_clock() -> float:
    """A clock that never moves: a deadline ahead of it is never passed, however slow the machine."""
    return 0.0


@dataclass(frozen=True)
class Error:
    """An expected Error outcome whose message contains ``text``."""

    text: str


def run(
    claims: Sequence[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    *,
    classes: Iterable[Mapping[str, Any]] = (),
    node: str = "n1",
    labels: Mapping[str, str] | None = None,
    in_use: Iterable[str] = (),
    evaluate: FakeCel | None = None,
    deadline: float | None = None,
    timeout: float | None = None,
    now: Any = frozen_clock,
    partitionable: bool = True,
) -> AllocationOutcome:
    """Allocate on ``node``; ``in_use`` names devices of pool-1 of the default driver."""
    parsed_classes = [parse_class(c) for c in classes] or [parse_class(make_class().obj())]
    return allocate(
        plan_claims([parse_claim(c) for c in claims], {c.name: c for c in parsed_classes}),
        node_name=node,
        node_labels=labels or {},
        inventory=Inventory.build((parse_slice(s) for s in slices), partitionable=partitionable),
        in_use={DeviceId(DRIVER, "pool-1", name) for name in in_use},
        evaluate=evaluate or FakeCel(),
        deadline=deadline,
        timeout=timeout,
        now=now,
    )


def picks(outcome: AllocationOutcome, claims: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Per claim, the devices allocated (``request:device`` when the request is not the only one)."""
    found: list[list[str]] = []
    for claim in claims:
        results = outcome.allocations[claim["metadata"]["uid"]].results
        requests = {r["request"] for r in results}
        found.append([r["device"] if requests == {"gpu"} else f"{r['request']}:{r['device']}" for r in results])
    return found


def check(outcome: AllocationOutcome, claims: Sequence[Mapping[str, Any]], expected: Any) -> None:
    if isinstance(expected, Error):
        assert not outcome.ok
        assert outcome.error is not None, outcome
        assert expected.text in outcome.error
        assert outcome.reason == outcome.error
    elif isinstance(expected, str):
        assert (outcome.ok, outcome.reason, outcome.error) == (False, expected, None)
    else:
        assert outcome.ok, outcome
        assert picks(outcome, claims) == expected


def local(*names: str, node: str = "n1", **attributes: Any) -> dict[str, Any]:
    builder = make_slice().node(node)
    for name in names:
        builder.device(name, **attributes)
    return builder.obj()


def claim(count: int | None = None, **kwargs: Any) -> dict[str, Any]:
    return make_claim().request("gpu", count=count, **kwargs).obj()


TWO = local("gpu-0", "gpu-1")
ONE = local("gpu-0")

# ---------------------------------------------------------------- devices taken


@pytest.mark.parametrize(
    ("claims", "slices", "in_use", "expected"),
    [
        pytest.param([claim()], [TWO], ["gpu-0"], [["gpu-1"]], id="a device in use by another claim is skipped"),
        pytest.param([claim()], [TWO], ["gpu-0", "gpu-1"], CANNOT, id="with every device in use nothing fits"),
        pytest.param(
            [claim(), claim()], [TWO], [], [["gpu-0"], ["gpu-1"]], id="two claims of one pod get different devices"
        ),
        pytest.param(
            [claim(), claim()], [TWO], ["gpu-1"], CANNOT, id="two claims of one pod never share the one free device"
        ),
        pytest.param(
            [claim(admin=True)], [TWO], ["gpu-0", "gpu-1"], [["gpu-0"]], id="adminAccess ignores devices in use"
        ),
        pytest.param(
            [claim(2), claim(admin=True)],
            [TWO],
            [],
            [["gpu-0", "gpu-1"], ["gpu-0"]],
            id="adminAccess ignores devices picked for another claim of the pod",
        ),
        pytest.param(
            [make_claim().request("a", admin=True).request("b", admin=True).obj()],
            [ONE],
            [],
            CANNOT,
            id="one claim never gets a device twice even with adminAccess",
        ),
        pytest.param(
            [claim(admin=True), claim(2)],
            [TWO],
            [],
            CANNOT,
            id="a device picked with adminAccess is not free for a later claim of the pod, as in kube",
        ),
        pytest.param([claim(mode="All")], [TWO], [], [["gpu-0", "gpu-1"]], id="All takes every matching device"),
        pytest.param([claim(mode="All")], [TWO], ["gpu-1"], CANNOT, id="All fails when a matching device is busy"),
        pytest.param(
            [claim(mode="All", selectors=(model("a100"),))],
            [make_slice().node("n1").device("gpu-0", model="a100").device("gpu-1", model="h100").obj()],
            ["gpu-1"],
            [["gpu-0"]],
            id="All does not care about busy devices its selectors exclude",
        ),
        pytest.param(
            [claim(mode="All", selectors=(model("b200"),))], [TWO], [], CANNOT, id="All needs at least one device"
        ),
        pytest.param([claim(), claim(mode="All")], [TWO], [], CANNOT, id="All competes with other claims of the pod"),
    ],
)
def test_devices_taken(
    claims: list[dict[str, Any]], slices: list[dict[str, Any]], in_use: list[str], expected: Any
) -> None:
    check(run(claims, slices, in_use=in_use), claims, expected)


def test_admin_access_results_are_marked_and_take_no_device() -> None:
    claims = [claim(admin=True)]
    allocation = run(claims, [ONE]).allocations[claims[0]["metadata"]["uid"]]
    assert allocation.results == (
        {"request": "gpu", "driver": DRIVER, "pool": "pool-1", "device": "gpu-0", "adminAccess": True},
    )
    assert allocation.devices() == frozenset()


# ---------------------------------------------------------------- node-local and network-attached devices

MATCH_N1 = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}


def zone(name: str, pool: str, *devices: str, **labels: str) -> dict[str, Any]:
    builder = make_slice().name(name).pool(pool).selector(node_selector(**labels))
    for device in devices:
        builder.device(device)
    return builder.obj()


def everywhere(pool: str, *devices: str) -> dict[str, Any]:
    builder = make_slice().pool(pool).all_nodes()
    for device in devices:
        builder.device(device)
    return builder.obj()


@pytest.mark.parametrize(
    ("count", "slices", "expected_devices", "expected_selector"),
    [
        pytest.param(1, [local("gpu-0", node="n2")], None, None, id="a slice of another node is invisible"),
        pytest.param(1, [ONE], ["gpu-0"], MATCH_N1, id="a node-local device pins the claim to the node by name"),
        pytest.param(
            1,
            [zone("s", "net", "nic-0", zone="a")],
            ["nic-0"],
            node_selector(zone="a"),
            id="a device behind a node selector gives that selector",
        ),
        pytest.param(1, [zone("s", "net", "nic-0", zone="b")], None, None, id="a node selector that does not match"),
        pytest.param(
            2,
            [zone("s1", "net-a", "nic-0", zone="a"), zone("s2", "net-b", "nic-1", zone="a", rack="r1")],
            ["nic-0", "nic-1"],
            {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a"]},
                            {"key": "rack", "operator": "In", "values": ["r1"]},
                        ]
                    }
                ]
            },
            id="node selectors of several devices merge into one term without repeats",
        ),
        pytest.param(
            1, [everywhere("net", "nic-0")], ["nic-0"], None, id="devices reachable everywhere give no selector"
        ),
        pytest.param(
            2,
            [everywhere("a-net", "nic-0"), local("gpu-0")],
            ["nic-0", "gpu-0"],
            MATCH_N1,
            id="one node-local device among network devices pins the claim to the node",
        ),
        pytest.param(
            2,
            [zone("s", "a-net", "nic-0", zone="a"), everywhere("b-net", "nic-1")],
            ["nic-0", "nic-1"],
            node_selector(zone="a"),
            id="node selector and all-nodes devices give the selector",
        ),
        pytest.param(
            1,
            [make_slice().per_device().device("d-n2", node="n2").device("d-n1", node="n1").obj()],
            ["d-n1"],
            MATCH_N1,
            id="per-device node names: only the node's own device, pinned to the node",
        ),
        pytest.param(
            2,
            [make_slice().per_device().device("d-n2", node="n2").device("d-n1", node="n1").obj()],
            None,
            None,
            id="per-device node names: another node's device is out of reach",
        ),
        pytest.param(
            2,
            [
                make_slice()
                .per_device()
                .device("d-all", all_nodes=True)
                .device("d-zone", selector=node_selector(zone="a"))
                .obj()
            ],
            ["d-all", "d-zone"],
            node_selector(zone="a"),
            id="per-device selectors and all-nodes devices",
        ),
    ],
)
def test_node_access(
    count: int, slices: list[dict[str, Any]], expected_devices: list[str] | None, expected_selector: Any
) -> None:
    claims = [claim(count)]
    outcome = run(claims, slices, labels={"zone": "a", "rack": "r1"})
    if expected_devices is None:
        check(outcome, claims, CANNOT)
        return
    check(outcome, claims, [expected_devices])
    assert outcome.allocations[claims[0]["metadata"]["uid"]].node_selector == expected_selector


def test_each_claim_of_a_pod_gets_its_own_node_selector() -> None:
    claims = [claim(), claim()]
    outcome = run(claims, [everywhere("a-net", "nic-0"), ONE])
    check(outcome, claims, [["nic-0"], ["gpu-0"]])
    assert [outcome.allocations[c["metadata"]["uid"]].node_selector for c in claims] == [None, MATCH_N1]


# ---------------------------------------------------------------- pools


@pytest.mark.parametrize(
    ("claims", "slices", "expected"),
    [
        pytest.param(
            [claim()],
            [
                make_slice().name("old").node("n1").pool("pool-1", generation=1).device("old-0").obj(),
                make_slice().name("new").node("n1").pool("pool-1", generation=2).device("new-0").obj(),
            ],
            [["new-0"]],
            id="slices of an older generation are ignored",
        ),
        pytest.param(
            [claim()],
            [
                make_slice().name("old").node("n1").pool("pool-1", generation=1).device("old-0").obj(),
                make_slice().name("new").node("n2").pool("pool-1", generation=2).device("new-0").obj(),
            ],
            CANNOT,
            id="a newer generation elsewhere retires the node's older slice",
        ),
        pytest.param(
            [claim()],
            [make_slice().node("n1").pool("pool-1", count=2).device("gpu-0").obj()],
            CANNOT,
            id="nothing is allocated from an incomplete pool",
        ),
        pytest.param(
            [claim()],
            [
                make_slice().node("n1").pool("pool-1", count=2).device("gpu-0").device("gpu-0").obj(),
                make_slice().name("other").node("n1").pool("pool-2").device("gpu-1").obj(),
            ],
            [["gpu-1"]],
            id="an incomplete pool is passed over and never judged invalid",
        ),
        pytest.param(
            [claim(mode="All")],
            [make_slice().node("n1").pool("pool-1", count=2).device("gpu-0").obj()],
            Error("asks for all devices, but resource pool gpu.example.com/pool-1 is currently being updated"),
            id="an incomplete pool makes All an error",
        ),
        pytest.param(
            [claim(mode="All")],
            [
                make_slice().name("a").node("n1").pool("pool-1", count=2).device("gpu-0").obj(),
                make_slice().name("b").node("n2").pool("pool-1", count=2).device("gpu-1").obj(),
            ],
            [["gpu-0"]],
            id="a pool spread over nodes is complete and All takes what the node reaches",
        ),
        pytest.param(
            [claim()],
            [
                make_slice().name("a").node("n1").pool("pool-1", count=2).device("gpu-0").obj(),
                make_slice().name("b").node("n1").pool("pool-1", count=2).device("gpu-0").obj(),
            ],
            INVALID,
            id="duplicate device names make the pool invalid: no solution says so, and is no error",
        ),
        pytest.param(
            [claim()],
            [
                make_slice().name("a").node("n1").pool("pool-1", count=2).device("gpu-0").obj(),
                make_slice().name("b").node("n1").pool("pool-1", count=2).device("gpu-0").obj(),
                make_slice().name("c").node("n1").pool("pool-2").device("gpu-9").obj(),
            ],
            [["gpu-9"]],
            id="an invalid pool is passed over when another pool serves the claim",
        ),
        pytest.param(
            [claim(mode="All")],
            [make_slice().node("n1").device("gpu-0").device("gpu-0").obj()],
            Error("asks for all devices, but resource pool gpu.example.com/pool-1 is currently invalid"),
            id="duplicate device names make All an error",
        ),
        pytest.param(
            [claim()],
            [
                make_slice().name("a").node("n1").pool("pool-1", count=2).device("gpu-0").obj(),
                make_slice().name("b").node("n2").pool("pool-1", count=2).device("gpu-0").obj(),
            ],
            [["gpu-0"]],
            id="duplicate names only across nodes do not matter to either node",
        ),
        pytest.param(
            [claim()],
            [local("gpu-0"), make_slice().node("n1").pool("pool-2").device("x").device("x").obj()],
            [["gpu-0"]],
            id="an invalid pool the search never reaches is no error",
        ),
        pytest.param(
            [claim(2)],
            [local("gpu-0"), make_slice().node("n1").pool("pool-2").device("x").device("x").obj()],
            INVALID,
            id="no solution on a node that sees an invalid pool names the invalid pools",
        ),
    ],
)
def test_pools(claims: list[dict[str, Any]], slices: list[dict[str, Any]], expected: Any) -> None:
    check(run(claims, slices), claims, expected)


# ---------------------------------------------------------------- requests and selectors

MIXED = (
    make_slice()
    .node("n1")
    .device("d0", model="a100", numa=0)
    .device("d1", model="h100", numa=1)
    .device("d2", model="a100", numa=1)
    .obj()
)


@pytest.mark.parametrize(
    ("class_selectors", "request_selectors", "expected"),
    [
        pytest.param((), (), [["d0"]], id="no selectors take the first device"),
        pytest.param((model("a100"),), (), [["d0"]], id="class selectors alone"),
        pytest.param((), (numa(1),), [["d1"]], id="request selectors alone"),
        pytest.param((model("a100"),), (numa(1),), [["d2"]], id="class selectors and request selectors must both hold"),
        pytest.param((model("a100"), numa(1)), (), [["d2"]], id="all selectors of a class must hold"),
        pytest.param((model("b200"),), (), CANNOT, id="no device matches the class"),
    ],
)
def test_selectors(class_selectors: tuple[str, ...], request_selectors: tuple[str, ...], expected: Any) -> None:
    builder = make_class()
    for expression in class_selectors:
        builder.selector(expression)
    claims = [claim(selectors=request_selectors)]
    check(run(claims, [MIXED], classes=[builder.obj()]), claims, expected)


def big_or_small(name: str = "gpu", big: int = 2) -> dict[str, Any]:
    return (
        make_claim()
        .first_available(name, sub_request("big", count=big, selectors=(model("a100"),)), sub_request("small"))
        .obj()
    )


@pytest.mark.parametrize(
    ("claims", "slices", "in_use", "expected"),
    [
        pytest.param([claim(2)], [TWO], [], [["gpu-0", "gpu-1"]], id="ExactCount takes count distinct devices"),
        pytest.param([claim(3)], [TWO], [], CANNOT, id="ExactCount needs count devices"),
        pytest.param(
            [big_or_small()], [MIXED], [], [["gpu/big:d0", "gpu/big:d2"]], id="firstAvailable prefers its first entry"
        ),
        pytest.param(
            [big_or_small()], [MIXED], ["d2"], [["gpu/small:d0"]], id="firstAvailable falls back to the next entry"
        ),
        pytest.param(
            [big_or_small(), claim()],
            [MIXED],
            ["d1"],
            [["gpu/small:d0"], ["d2"]],
            id="a later claim makes an earlier claim fall back",
        ),
        pytest.param([big_or_small()], [MIXED], ["d0", "d1", "d2"], CANNOT, id="no entry of firstAvailable fits"),
        pytest.param(
            [make_claim().request("a").request("b", selectors=(model("a100"),)).obj()],
            [make_slice().node("n1").device("d0", model="a100").device("d1", model="h100").obj()],
            [],
            [["a:d1", "b:d0"]],
            id="backtracking over requests of one claim",
        ),
    ],
)
def test_requests(claims: list[dict[str, Any]], slices: list[dict[str, Any]], in_use: list[str], expected: Any) -> None:
    check(run(claims, slices, in_use=in_use), claims, expected)


# ---------------------------------------------------------------- partitionable devices (DRAPartitionableDevices)


def counter_slice(node: str = "n1", *, name: str = "counters", count: int = 2, **counters: str) -> dict[str, Any]:
    """The pool's slice of shared counters (no devices), as drivers publish it beside the devices' slice."""
    return make_slice().name(name).node(node).pool("pool-1", count=count).counters("set", **counters).obj()


def partitions(*devices: tuple[str, dict[str, str]], node: str = "n1", count: int = 2) -> dict[str, Any]:
    """The pool's device slice: each device consumes the given counters of counter set ``set``."""
    builder = make_slice().name("devices").node(node).pool("pool-1", count=count)
    for name, consumed in devices:
        builder.device(name, consumes={"set": consumed})
    return builder.obj()


#: scheduler_perf's Partitionable: four counters of 1; two devices of two counters each.
HALVES = [
    counter_slice(counter1="1", counter2="1", counter3="1", counter4="1"),
    partitions(("device-1", {"counter1": "1", "counter2": "1"}), ("device-2", {"counter3": "1", "counter4": "1"})),
]
#: Three partitions over three counters, the middle one overlapping both others.
OVERLAP = [
    counter_slice(a="1", b="1", c="1"),
    partitions(("left", {"a": "1", "b": "1"}), ("middle", {"b": "1"}), ("right", {"c": "1"})),
]


def backtracking() -> list[dict[str, Any]]:
    """scheduler_perf's PartitionableBacktracking: 70Gi of memory, eight cpus; device 1 needs 20Gi, 2-8 10Gi."""
    counters = (
        make_slice()
        .name("counters")
        .node("n1")
        .pool("pool-1", count=2)
        .counters("mem", mem="70Gi")
        .counters("cpus", **{f"cpu{i}": "1" for i in range(1, 9)})
        .obj()
    )
    devices = make_slice().name("devices").node("n1").pool("pool-1", count=2).obj()
    for i in range(1, 9):
        consumes = {"mem": {"mem": "20Gi" if i == 1 else "10Gi"}, "cpus": {f"cpu{i}": "1"}}
        devices["spec"]["devices"].append(
            {
                "name": f"dev-{i}",
                "consumesCounters": [
                    {"counterSet": name, "counters": {c: {"value": v} for c, v in used.items()}}
                    for name, used in consumes.items()
                ],
            }
        )
    return [counters, devices]


@pytest.mark.parametrize(
    ("claims", "slices", "in_use", "expected"),
    [
        pytest.param([claim(2)], HALVES, [], [["device-1", "device-2"]], id="partitions whose counters add up"),
        pytest.param([claim(), claim()], HALVES, [], [["device-1"], ["device-2"]], id="two claims share the counters"),
        pytest.param([claim(2)], HALVES, ["device-1"], CANNOT, id="a partition in use keeps its counters"),
        pytest.param([claim(2)], OVERLAP, [], [["left", "right"]], id="the search backtracks over counters"),
        pytest.param([claim()], OVERLAP, ["left"], [["right"]], id="counters a device in use holds are taken"),
        pytest.param([claim(3)], OVERLAP, [], CANNOT, id="overlapping partitions never all fit"),
        pytest.param(
            [claim(7)],
            backtracking(),
            [],
            [[f"dev-{i}" for i in range(2, 9)]],
            id="seven of eight partitions: the one combination that fits the memory",
        ),
        pytest.param(
            [claim()],
            [counter_slice(a="1"), partitions(("big", {"a": "2"}), ("small", {"a": "1"}))],
            [],
            [["small"]],
            id="a partition asking more than the counter holds is never taken",
        ),
        pytest.param(
            [claim()],
            [counter_slice(a="1"), partitions(("over", {"a": "1"}), ("free", {}))],
            ["over"],
            [["free"]],
            id="a partition consuming nothing is taken while no counter is overdrawn",
        ),
        pytest.param(
            [claim()],
            [counter_slice(a="0.5"), partitions(("p", {"a": "500m"}))],
            [],
            [["p"]],
            id="counters are quantities",
        ),
    ],
)
def test_partitionable_devices(
    claims: list[dict[str, Any]], slices: list[dict[str, Any]], in_use: list[str], expected: Any
) -> None:
    check(run(claims, slices, in_use=in_use), claims, expected)


def test_one_request_s_devices_are_searched_as_combinations_and_hopeless_branches_cut() -> None:
    """Seven of eight partitions where only one seven fit: as orderings of the same devices the failing branches
    with device 1 are thousands of steps (8,505 reads of the search's clock); as combinations (kube v1.37's
    startLocation), cut where too few devices are left to finish, under a hundred."""
    reads = 0

    def counting_clock() -> float:
        nonlocal reads
        reads += 1
        return float(reads)

    claims = [claim(7)]
    check(run(claims, backtracking(), deadline=200, now=counting_clock), claims, [[f"dev-{i}" for i in range(2, 9)]])
    assert reads < 200


def test_a_pool_whose_devices_in_use_overdraw_a_counter_gives_no_partition() -> None:
    # kube's checkAvailableCounters: every counter of the pool must stay at zero or above after the pick.
    slices = [counter_slice(a="1", b="1"), partitions(("x", {"a": "1"}), ("y", {"a": "1"}), ("z", {"b": "1"}))]
    claims = [claim()]
    check(run(claims, slices, in_use=["x", "y"]), claims, CANNOT)


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        pytest.param(
            [counter_slice(a="1"), partitions(("p", {"b": "1"}))],
            INVALID,
            id="a counter the set does not offer",
        ),
        pytest.param(
            [
                counter_slice(a="1"),
                make_slice()
                .name("devices")
                .node("n1")
                .pool("pool-1", count=2)
                .device("p", consumes={"other": {"a": "1"}})
                .obj(),
            ],
            INVALID,
            id="a counter set the pool does not offer",
        ),
        pytest.param(
            [
                make_slice().name("c1").node("n1").pool("pool-1", count=3).counters("set", a="1").obj(),
                make_slice().name("c2").node("n1").pool("pool-1", count=3).counters("set", a="1").obj(),
                make_slice().name("devices").node("n1").pool("pool-1", count=3).device("p").obj(),
            ],
            INVALID,
            id="a counter set named twice",
        ),
        pytest.param([partitions(("p", {"a": "1"}))], CANNOT, id="counters not published yet: incomplete, not invalid"),
    ],
)
def test_pools_with_broken_counters_are_passed_over(slices: list[dict[str, Any]], expected: str) -> None:
    claims = [claim()]
    check(run(claims, slices), claims, expected)
    # A valid pool on the node still serves the claim.
    other = make_slice().name("other").node("n1").pool("pool-2").device("gpu-9").obj()
    check(run(claims, [*slices, other]), claims, [["gpu-9"]])


def test_without_the_gate_partitions_and_counter_slices_are_ignored() -> None:
    claims = [claim()]
    # The counter slice is ignored, so the pool (two slices) is incomplete: nothing is allocated from it.
    check(run(claims, HALVES, partitionable=False), claims, CANNOT)
    plain = make_slice().node("n1").device("counted", consumes={"set": {"a": "1"}}).device("plain").obj()
    check(run(claims, [plain], partitionable=False), claims, [["plain"]])
    per_device = make_slice().name("pd").pool("pool-2").per_device().device("reach", node="n1").obj()
    check(run(claims, [per_device], partitionable=False), claims, CANNOT)
    check(run(claims, [per_device]), claims, [["reach"]])


@pytest.mark.parametrize(
    ("classes", "claims", "expected"),
    [
        pytest.param(
            [make_class().obj()],
            [claim(class_name="missing")],
            Error("request gpu: device class missing does not exist"),
            id="a missing class is an error",
        ),
        pytest.param(
            [make_class().selector("boom").obj()],
            [claim()],
            Error("class gpu: selector #0 'boom' on device gpu.example.com/pool-1/d0: CEL runtime error: no such key"),
            id="a CEL error in a class selector is an error naming the class and expression",
        ),
        pytest.param(
            [make_class().obj()],
            [make_claim().name("c").request("gpu", selectors=("true", "boom")).obj()],
            Error("claim default/c, request gpu: selector #1 'boom'"),
            id="a CEL error in a request selector is an error naming the request and expression",
        ),
        pytest.param(
            [make_class().obj()],
            [make_claim().name("c").request("gpu", mode="All", selectors=("boom",)).obj()],
            Error("claim default/c, request gpu: selector #0 'boom'"),
            id="a CEL error while collecting All devices is an error",
        ),
        pytest.param(
            [make_class().selector(model("h100")).obj()],
            [make_claim().request("gpu", selectors=("boom",)).obj()],
            Error("selector #0 'boom' on device gpu.example.com/pool-1/d1"),
            id="request selectors run only on devices the class accepts",
        ),
    ],
)
def test_errors(classes: list[dict[str, Any]], claims: list[dict[str, Any]], expected: Error) -> None:
    check(run(claims, [MIXED], classes=classes), claims, expected)


def test_selectors_run_once_per_device_and_request() -> None:
    cel = FakeCel()
    claims = [make_claim().request("a", count=2, selectors=(numa(1),)).obj()]
    outcome = run(claims, [MIXED], classes=[make_class().selector("true").obj()], evaluate=cel)
    check(outcome, claims, [["a:d1", "a:d2"]])
    # Two expressions on each of d0, d1, d2 once: the second slot finds d0's answer cached.
    assert cel.calls == 6


# ---------------------------------------------------------------- matchAttribute

NUMA = f"{DRIVER}/numa"


def numa_slice(*values: Any) -> dict[str, Any]:
    builder = make_slice().node("n1")
    for i, value in enumerate(values):
        if value is None:
            builder.device(f"d{i}")
        else:
            builder.device(f"d{i}", attrs={"numa": value})
    return builder.obj()


@pytest.mark.parametrize(
    ("claims", "slices", "expected"),
    [
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()],
            [numa_slice(0, 1, 1)],
            [["d1", "d2"]],
            id="the first device fixes the value and backtracking finds a matching pair",
        ),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()],
            [numa_slice(None, 0)],
            CANNOT,
            id="a device without the attribute fails the constraint",
        ),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()],
            [numa_slice(1, "1")],
            CANNOT,
            id="values of different types never match",
        ),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()],
            [numa_slice(True, 1, True)],
            [["d0", "d2"]],
            id="a bool never matches an int",
        ),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()],
            [numa_slice(Version("1.0.0"), Version("1.0.0"))],
            [["d0", "d1"]],
            id="versions match by their text",
        ),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()],
            [make_slice().node("n1").device("d0", attrs={NUMA: 0}).device("d1", attrs={"numa": 0}).obj()],
            [["d0", "d1"]],
            id="a bare attribute id in the driver's domain matches its qualified name",
        ),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(f"{OTHER}/numa").obj()],
            [numa_slice(0, 0)],
            CANNOT,
            id="a bare attribute id never belongs to another domain",
        ),
        pytest.param(
            [make_claim().request("a").request("b").request("c").constraint(NUMA).obj()],
            [numa_slice(0, 1, 0)],
            CANNOT,
            id="a constraint without requests covers all requests",
        ),
        pytest.param(
            [make_claim().request("a").request("b").request("c").constraint(NUMA, "a", "c").obj()],
            [numa_slice(0, 1, 0)],
            [["a:d0", "b:d1", "c:d2"]],
            id="a constraint limited to some requests leaves the others free",
        ),
        pytest.param(
            [
                make_claim()
                .request("a")
                .first_available("b", sub_request("x", count=2), sub_request("y"))
                .constraint(NUMA, "a", "b/x")
                .obj()
            ],
            [numa_slice(0, 1, 2)],
            [["a:d0", "b/y:d1"]],
            id="a constraint naming one sub-request: that entry fails, the next is free",
        ),
        pytest.param(
            [make_claim().request("gpu").constraint(NUMA).obj(), make_claim().request("gpu").constraint(NUMA).obj()],
            [numa_slice(0, 1)],
            [["d0"], ["d1"]],
            id="constraints hold within one claim, not across claims",
        ),
        pytest.param(
            [make_claim().name("c").request("gpu", mode="All").constraint(NUMA).obj()],
            [numa_slice(0, 1)],
            Error("claim default/c, request gpu: cannot add device gpu.example.com/pool-1/d1"),
            id="All devices that break a constraint are an error",
        ),
    ],
)
def test_match_attribute(claims: list[dict[str, Any]], slices: list[dict[str, Any]], expected: Any) -> None:
    check(run(claims, slices), claims, expected)


# ---------------------------------------------------------------- results and configs


def opaque(name: str) -> dict[str, Any]:
    return {"driver": DRIVER, "parameters": {"name": name}}


def test_configs_from_classes_come_first_then_matching_claim_configs() -> None:
    classes = [
        make_class().name("gpu").config(DRIVER, {"name": "class-gpu-1"}).config(DRIVER, {"name": "class-gpu-2"}).obj(),
        make_class().name("nic").config(DRIVER, {"name": "class-nic"}).obj(),
    ]
    raw = (
        make_claim()
        .request("a", "gpu")
        .request("b", "gpu")
        .first_available("c", sub_request("big", "gpu", count=5), sub_request("small", "nic"))
        .config(DRIVER, {"name": "claim-all"})
        .config(DRIVER, {"name": "claim-a"}, "a")
        .config(DRIVER, {"name": "claim-c-big"}, "c/big")
        .config(DRIVER, {"name": "claim-c-small"}, "c/small")
        .config(DRIVER, {"name": "claim-c"}, "c")
        .config(DRIVER, {"name": "claim-every-one"}, "a", "b", "c/small")
        .obj()
    )
    outcome = run([raw], [local("d0", "d1", "d2")], classes=classes)
    allocation = outcome.allocations[raw["metadata"]["uid"]]
    assert [r["request"] for r in allocation.results] == ["a", "b", "c/small"]
    assert allocation.config == (
        {"source": "FromClass", "requests": ["a", "b"], "opaque": opaque("class-gpu-1")},
        {"source": "FromClass", "requests": ["a", "b"], "opaque": opaque("class-gpu-2")},
        {"source": "FromClass", "requests": ["c/small"], "opaque": opaque("class-nic")},
        {"source": "FromClaim", "opaque": opaque("claim-all")},
        {"source": "FromClaim", "requests": ["a"], "opaque": opaque("claim-a")},
        {"source": "FromClaim", "requests": ["c/small"], "opaque": opaque("claim-c-small")},
        {"source": "FromClaim", "requests": ["c"], "opaque": opaque("claim-c")},
        {"source": "FromClaim", "opaque": opaque("claim-every-one")},
    )


def test_one_class_config_used_by_every_request_applies_to_all() -> None:
    raw = make_claim().request("a").request("b").obj()
    outcome = run([raw], [TWO], classes=[make_class().config(DRIVER, {"name": "x"}).obj()])
    assert outcome.allocations[raw["metadata"]["uid"]].config == ({"source": "FromClass", "opaque": opaque("x")},)


def test_status_allocation_is_the_api_object() -> None:
    raw = make_claim().request("gpu").config(DRIVER, {"name": "x"}).obj()
    allocation = run([raw], [ONE]).allocations[raw["metadata"]["uid"]]
    status = allocation.status_allocation()
    assert status == {
        "devices": {
            "results": [{"request": "gpu", "driver": DRIVER, "pool": "pool-1", "device": "gpu-0"}],
            "config": [{"source": "FromClaim", "opaque": opaque("x")}],
        },
        "nodeSelector": MATCH_N1,
    }
    status["devices"]["results"][0]["device"] = "changed"
    assert allocation.results[0]["device"] == "gpu-0"
    assert allocation.devices() == frozenset({DeviceId(DRIVER, "pool-1", "gpu-0")})


def test_status_allocation_leaves_out_what_is_empty() -> None:
    raw = claim()
    allocation = run([raw], [everywhere("pool-1", "nic")]).allocations[raw["metadata"]["uid"]]
    assert allocation.status_allocation() == {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "pool-1", "device": "nic"}]}
    }


# ---------------------------------------------------------------- the 32-results limit

MANY = make_slice().node("n1").devices("d", 40).obj()


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param([claim(32)], 32, id="32 devices fit in one claim"),
        pytest.param(
            [make_claim().name("c").request("gpu", count=33).obj()],
            Error("claim default/c: number of requested devices 33 exceeds the claim limit of 32"),
            id="a request for 33 devices is an error",
        ),
        pytest.param(
            [make_claim().name("c").request("a", count=16).request("b", count=17).obj()],
            Error("number of requested devices 33 exceeds the claim limit of 32"),
            id="33 devices over two requests are an error",
        ),
        pytest.param(
            [make_claim().name("c").request("gpu", mode="All").obj()],
            Error("number of requested devices 40 exceeds the claim limit of 32"),
            id="All matching 40 devices is an error",
        ),
        pytest.param(
            [make_claim().first_available("gpu", sub_request("big", count=33), sub_request("small", count=2)).obj()],
            2,
            id="a sub-request over the limit falls back to the next one",
        ),
        pytest.param(
            [
                make_claim()
                .request("a", count=31)
                .first_available("b", sub_request("x", count=2), sub_request("y"))
                .obj()
            ],
            32,
            id="a sub-request that would pass the limit with earlier requests falls back",
        ),
        pytest.param([claim(20), claim(20)], None, id="the limit is per claim, devices are not"),
    ],
)
def test_results_limit(claims: list[dict[str, Any]], expected: Any) -> None:
    outcome = run(claims, [MANY])
    if isinstance(expected, Error):
        check(outcome, claims, expected)
    elif expected is None:
        assert outcome.ok
        assert [len(a.results) for a in outcome.allocations.values()] == [20, 20]
    else:
        assert outcome.ok, outcome
        assert len(outcome.allocations[claims[0]["metadata"]["uid"]].results) == expected


# ---------------------------------------------------------------- deadline and edges


def test_a_passed_deadline_times_out_without_error() -> None:
    clock = itertools.count()
    outcome = run([claim()], [TWO], deadline=0.5, now=lambda: float(next(clock)))
    assert (outcome.ok, outcome.reason, outcome.error) == (False, REASON_TIMED_OUT, None)


def test_the_deadline_is_checked_during_a_long_search() -> None:
    ticks = itertools.count()
    # Four claims over 20 devices, then an All request that can never succeed: the search
    # would try 20 * 19 * 18 * 17 placements before giving up.
    claims = [claim() for _ in range(4)] + [claim(mode="All")]
    slices = [local(*(f"d{i}" for i in range(20)))]
    outcome = run(claims, slices, in_use=["d19"], deadline=100.0, now=lambda: float(next(ticks)))
    assert outcome.reason == REASON_TIMED_OUT
    assert next(ticks) < 150


def test_a_future_deadline_lets_the_search_finish() -> None:
    outcome = run([claim()], [TWO], deadline=60.0)
    assert outcome.ok


def test_a_timeout_starts_the_deadline_when_the_search_first_needs_one() -> None:
    clock = itertools.count()
    outcome = run([claim()], [TWO], timeout=0.5, now=lambda: float(next(clock)))
    assert (outcome.ok, outcome.reason, outcome.error) == (False, REASON_TIMED_OUT, None)
    assert run([claim()], [TWO], timeout=60.0).ok


def test_devices_remembered_at_the_pools_in_use_version_are_found_without_the_clock() -> None:
    inventory = Inventory.build([parse_slice(local("d0", "d1", "d2"))])
    classes = {"gpu": parse_class(make_class().obj())}
    memo = MatchMemo()

    def attempt(in_use: set[str], version: int, now: Any) -> list[list[str]]:
        claims = [claim()]
        outcome = allocate(
            plan_claims([parse_claim(c) for c in claims], classes, memo=memo),
            node_name="n1",
            node_labels={},
            inventory=inventory,
            in_use={DeviceId(DRIVER, "pool-1", name) for name in in_use},
            evaluate=FakeCel(),
            now=now,
            use_versions={(DRIVER, "pool-1"): version},
            timeout=60.0,
        )
        return picks(outcome, claims)

    def no_clock() -> float:
        raise AssertionError("the clock was read")

    assert attempt({"d0"}, 1, frozen_clock) == [["d1"]], "walks past d0"
    assert attempt({"d0"}, 1, no_clock) == [["d1"]], "the same version: from memory"
    assert attempt(set(), 2, frozen_clock) == [["d0"]], "d0 freed: a new version, walked again"


def test_no_claims_is_success() -> None:
    assert run([], [TWO]) == AllocationOutcome(ok=True, allocations={})


def test_allocated_claims_are_refused() -> None:
    raw = make_claim().request("gpu").allocated({"request": "gpu", "driver": DRIVER, "pool": "p", "device": "d"}).obj()
    with pytest.raises(ValueError, match="already allocated"):
        run([raw], [TWO])


def test_a_bad_slice_node_selector_is_an_error() -> None:
    bad = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}
    outcome = run([claim()], [make_slice().selector(bad).device("x").obj()])
    assert outcome.error is not None
    assert "node selector of ResourceSlice" in outcome.error


def test_many_claims_with_many_devices_need_no_recursion() -> None:
    slices = [
        make_slice().name(f"s{i}").node("n1").pool("pool-1", count=10).devices(f"s{i}-", 128).obj() for i in range(10)
    ]
    claims = [claim(32) for _ in range(40)]
    outcome = run(claims, slices)
    assert outcome.ok
    taken = [r["device"] for a in outcome.allocations.values() for r in a.results]
    assert len(taken) == len(set(taken)) == 1280


class CountingInUse:
    """The devices in use, counting how often the allocator asks: once per device it visits."""

    def __init__(self, devices: Iterable[DeviceId]) -> None:
        self.devices = frozenset(devices)
        self.lookups = 0

    def __contains__(self, device: object) -> bool:
        self.lookups += 1
        return device in self.devices


@pytest.mark.parametrize("devices_per_node", [10, 1000], ids=["10 devices per node", "1000 devices per node"])
def test_allocating_on_each_of_20_nodes_visits_and_judges_only_the_devices_up_to_the_first_free_one(
    devices_per_node: int,
) -> None:
    """What keeps Filter well under a millisecond per node, counted rather than timed.

    One plan serves every node; on each, the allocator visits the busy gpu-0 and the free gpu-1,
    judges gpu-1 once per selector (the class's, then the request's), and stops: none of the
    node's other devices is looked at, and without a deadline no clock is read.
    """
    slices = [
        make_slice().name(f"s{n}").pool(f"n{n}").node(f"n{n}").devices("gpu-", devices_per_node, model="a100").obj()
        for n in range(20)
    ]
    inventory = Inventory.build(parse_slice(s) for s in slices)
    classes = {"gpu": parse_class(make_class().selector(model("a100")).obj())}
    claims = [claim(selectors=(model("a100"),))]
    plan = plan_claims([parse_claim(c) for c in claims], classes)
    cel = FakeCel()

    def no_clock() -> float:
        raise AssertionError("the clock was read")

    for n in range(20):
        in_use = CountingInUse(DeviceId(DRIVER, f"n{m}", "gpu-0") for m in range(20))
        calls_before = cel.calls
        outcome = allocate(
            plan,
            node_name=f"n{n}",
            node_labels={},
            inventory=inventory,
            in_use=in_use,
            evaluate=cel,
            now=no_clock,
        )
        assert picks(outcome, claims) == [["gpu-1"]]
        assert (in_use.lookups, cel.calls - calls_before) == (2, 2), f"node n{n}: devices visited, selectors run"


# ---------------------------------------------------------------- one plan for every node, one memo for every pod

NODES = ("n1", "n2", "n3")
LABELS = {"n1": {"zone": "a"}, "n2": {"zone": "b"}, "n3": {"zone": "a"}}
SPREAD = [
    make_slice().name("l1").pool("n1").node("n1").device("d0", model="h100", numa=0).device("d1", model="a100").obj(),
    make_slice().name("l2").pool("n2").node("n2").device("d0", model="a100", numa=1).device("d1", numa=1).obj(),
    zone("z", "net", "nic-0", "nic-1", zone="a"),
    everywhere("shared", "s0", "s1"),
]


def outcome_per_node(
    claims: Sequence[Mapping[str, Any]], classes: Sequence[Mapping[str, Any]], *, shared: bool, in_use: Iterable[str]
) -> list[tuple[bool, str, str | None, dict[str, Any]]]:
    """Each node's outcome, with one plan (and memo, over two pods) for all nodes or a fresh plan per node."""
    inventory = Inventory.build(parse_slice(s) for s in SPREAD)
    parsed_classes = {c.name: c for c in (parse_class(raw) for raw in classes)}
    parsed_claims = [parse_claim(c) for c in claims]
    taken = {DeviceId(DRIVER, "n1", name) for name in in_use}
    memo = MatchMemo()
    plans = [plan_claims(parsed_claims, parsed_classes, memo=memo) for _ in range(2)]
    found = []
    for plan in plans if shared else plans[:1]:
        for node in NODES:
            outcome = allocate(
                plan if shared else plan_claims(parsed_claims, parsed_classes),
                node_name=node,
                node_labels=LABELS[node],
                inventory=inventory,
                in_use=taken,
                evaluate=FakeCel(),
            )
            found.append((outcome.ok, outcome.reason, outcome.error, dict(outcome.allocations)))
    return found


@pytest.mark.parametrize(
    ("claims", "classes", "in_use"),
    [
        pytest.param([claim()], [make_class().obj()], [], id="one device"),
        pytest.param([claim(2), claim()], [make_class().obj()], ["d1"], id="two claims, a device in use"),
        pytest.param([claim(selectors=(model("a100"),))], [make_class().obj()], [], id="request selectors"),
        pytest.param([claim()], [make_class().selector(numa(1)).obj()], [], id="class selectors"),
        pytest.param([claim(mode="All", selectors=(model("a100"),))], [make_class().obj()], [], id="All"),
        pytest.param([big_or_small(big=3)], [make_class().obj()], [], id="firstAvailable"),
        pytest.param(
            [make_claim().request("gpu", count=2).constraint(NUMA).obj()], [make_class().obj()], [], id="matchAttribute"
        ),
        pytest.param([claim(admin=True), claim()], [make_class().obj()], ["d0", "d1"], id="adminAccess"),
        pytest.param([claim(40)], [make_class().obj()], [], id="too many devices"),
        pytest.param(
            [claim(), make_claim().request("gpu", "missing").obj()], [make_class().obj()], [], id="a missing class"
        ),
        pytest.param([claim(selectors=("boom",))], [make_class().obj()], [], id="a CEL error"),
    ],
)
def test_one_plan_for_every_node_allocates_as_a_plan_per_node(
    claims: list[dict[str, Any]], classes: list[dict[str, Any]], in_use: list[str]
) -> None:
    fresh = outcome_per_node(claims, classes, shared=False, in_use=in_use)
    assert outcome_per_node(claims, classes, shared=True, in_use=in_use) == fresh + fresh


def test_a_memo_judges_each_device_once_for_every_pod_asking_alike() -> None:
    cel = FakeCel()
    inventory = Inventory.build(parse_slice(s) for s in SPREAD)
    classes = {"gpu": parse_class(make_class().selector(model("a100")).obj())}
    memo = MatchMemo()
    calls = []
    for _ in range(3):
        plan = plan_claims([parse_claim(claim())], classes, memo=memo)
        for node in NODES:
            allocate(plan, node_name=node, node_labels=LABELS[node], inventory=inventory, in_use=(), evaluate=cel)
        calls.append(cel.calls)
    # n1: d0, d1 (a match); n2: d0 (a match); n3: nic-0, nic-1, s0, s1 (none). Then nothing new.
    assert calls == [7, 7, 7]


class FlakyCel(FakeCel):
    """Fails on the devices named in ``failing``, as CEL refuses an expression that ran over its CPU limit."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    def __call__(self, expression: str, device: Device, driver: str) -> bool:
        if device.name in self.failing:
            self.calls += 1
            raise RuntimeError("refused")
        return super().__call__(expression, device, driver)


def test_a_failing_selector_takes_its_remembered_answers_along() -> None:
    cel = FlakyCel()
    slices = [
        everywhere("a-shared", "s0"),  # first in pool order, seen from both nodes
        make_slice().name("l1").pool("n1").node("n1").device("bad").obj(),
        make_slice().name("l2").pool("n2").node("n2").device("gpu-0", model="a100").obj(),
    ]
    inventory = Inventory.build(parse_slice(s) for s in slices)
    classes = {"gpu": parse_class(make_class().selector(model("a100")).obj())}
    memo = MatchMemo()
    plan = plan_claims([parse_claim(claim())], classes, memo=memo)

    def on(node: str) -> AllocationOutcome:
        return allocate(plan, node_name=node, node_labels={}, inventory=inventory, in_use=(), evaluate=cel)

    assert on("n2").ok
    assert cel.calls == 2  # s0 (no), gpu-0 (yes): both remembered
    cel.failing = {"bad"}
    outcome = on("n1")
    assert outcome.error is not None and "refused" in outcome.error
    assert cel.calls == 3  # s0 was remembered, bad failed
    assert on("n2").ok
    assert cel.calls == 5, "the failure made the memo forget the expression's answers, so n2 evaluates again"


def test_an_all_request_on_a_bad_pool_is_reported_before_a_missing_class_of_a_later_request() -> None:
    raw = make_claim().request("all", mode="All").request("x", "missing").obj()
    outcome = run([raw], [make_slice().node("n1").pool("pool-1", count=2).device("gpu-0").obj()])
    assert outcome.error is not None and "currently being updated" in outcome.error
    outcome = run([raw], [local("gpu-0")])
    assert outcome.error is not None and "device class missing does not exist" in outcome.error


def test_allocations_are_built_when_read() -> None:
    claims = [claim(), claim()]
    outcome = run(claims, [TWO])
    assert len(outcome.allocations) == 2
    assert sorted(outcome.allocations) == sorted(c["metadata"]["uid"] for c in claims)
    assert "gpu-0" in repr(outcome)
