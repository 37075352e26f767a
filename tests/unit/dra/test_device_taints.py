"""Device taints and tolerations (DRADeviceTaints, DRADeviceTaintRules), against upstream's own tables.

The allocator cases are the ``tainted-*`` and taint cases of ``allocatortesting/allocator_testing.go`` in
``k8s.io/dynamic-resource-allocation`` v0.37.1, written here as data; the toleration matrix is
``resourceclaim/devicetoleration_test.go``'s; the rule cases follow ``resourceslice/tracker``'s applyPatches.
Inventories are built through :class:`DraState`, so the gate's effect (taints dropped as slices are read) and
the rules' (taints added) are the ones the scheduler runs with.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle, framework_of
from tests.unit.dra.builders import DRIVER, make_claim, make_class, make_slice, sub_request
from usher.core.cache import Cache
from usher.core.cycle import schedule
from usher.core.dra.allocation import REASON_CANNOT_ALLOCATE, MatchMemo, allocate, plan_claims
from usher.core.dra.model import DeviceId, DeviceTaint, DeviceToleration, parse_claim, parse_class
from usher.core.dra.state import DraState
from usher.core.dra.taints import (
    TaintRule,
    apply_rules,
    kept_off_by_taints,
    parse_taint_rule,
    tolerates,
    untolerated,
)
from usher.core.framework.cycle_state import CycleState
from usher.core.types import PodInfo

KEY = "taint-key"
NONE = {"key": KEY, "value": "taint-value", "effect": "None"}
NO_SCHEDULE = {"key": KEY, "value": "taint-value", "effect": "NoSchedule"}
NO_EXECUTE = {"key": KEY, "value": "taint-value-2", "effect": "NoExecute"}
TOLERATE_NO_SCHEDULE = {"operator": "Exists", "key": KEY, "effect": "NoSchedule"}
TOLERATE_NO_EXECUTE = {"operator": "Equal", "key": KEY, "value": "taint-value-2", "effect": "NoExecute"}


def tainted(name: str, *taints: Mapping[str, Any], consumes: Mapping[str, Mapping[str, str]] | None = None) -> dict:
    entry: dict[str, Any] = {"name": name}
    if taints:
        entry["taints"] = [dict(t) for t in taints]
    if consumes:
        entry["consumesCounters"] = [
            {"counterSet": s, "counters": {c: {"value": v} for c, v in counters.items()}}
            for s, counters in consumes.items()
        ]
    return entry


def node_slice(*devices: Mapping[str, Any], count: int = 1) -> dict[str, Any]:
    builder = make_slice().node("n1").pool("pool-1", count=count)
    for entry in devices:
        builder.raw_device(entry)
    return builder.obj()


def exact(name: str = "gpu", *, mode: str | None = None, admin: bool | None = None, tolerations: Sequence = ()) -> dict:
    body = sub_request("", "gpu", mode=mode)
    if admin is not None:
        body["adminAccess"] = admin
    if tolerations:
        body["tolerations"] = [dict(t) for t in tolerations]
    return {"name": name, "exactly": body}


def first_available(*subs: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": "gpu", "firstAvailable": [dict(s) for s in subs]}


def sub(name: str, class_name: str = "gpu", *, tolerations: Sequence = ()) -> dict[str, Any]:
    entry = sub_request(name, class_name)
    if tolerations:
        entry["tolerations"] = [dict(t) for t in tolerations]
    return entry


@dataclass
class Case:
    requests: Sequence[Mapping[str, Any]]
    slices: Sequence[Mapping[str, Any]]
    expected: Sequence[tuple[str, str, Sequence[Mapping[str, Any]]]] | None
    """(request, device, tolerations written into the result) per result; None: no allocation on the node."""
    gate: bool = True
    in_use: Iterable[str] = ()
    classes: Sequence[str] = ("gpu",)
    rules: Sequence[Mapping[str, Any]] = field(default_factory=list)


def allocate_case(case: Case) -> Any:
    state = DraState(device_taints=case.gate)
    for raw in case.slices:
        state.on_slice(False, raw)
    for rule in case.rules:
        state.on_taint_rule(False, rule)
    claim = make_claim()
    for request in case.requests:
        claim.raw_request(request)
    raw_claim = claim.obj()
    classes = {name: parse_class(_class(name)) for name in case.classes}
    outcome = allocate(
        plan_claims([parse_claim(raw_claim)], classes, memo=MatchMemo()),
        node_name="n1",
        node_labels={},
        inventory=state.inventory(),
        in_use={DeviceId(DRIVER, "pool-1", name) for name in case.in_use},
        evaluate=by_driver,
        deadline=None,
        timeout=None,
        now=lambda: 0.0,
    )
    return raw_claim, outcome


def _class(name: str) -> dict[str, Any]:
    """Class ``gpu`` selects the default driver's devices, any other class another driver's (upstream's classB)."""
    return make_class().name(name).selector(f"driver == {DRIVER if name == 'gpu' else 'other.io'}").obj()


def by_driver(expression: str, device: Any, driver: str) -> bool:
    """A stand-in for CEL that understands ``driver == <name>`` only."""
    return expression == f"driver == {driver}"


UPSTREAM = {
    "tainted-two-devices": Case(
        [exact()], [node_slice(tainted("device-1", NO_SCHEDULE), tainted("device-2", NO_EXECUTE))], None
    ),
    "tainted-one-device-two-taints": Case([exact()], [node_slice(tainted("device-1", NO_SCHEDULE, NO_EXECUTE))], None),
    "tainted-two-devices-tolerated": Case(
        [exact(tolerations=[TOLERATE_NO_EXECUTE])],
        [node_slice(tainted("device-1", NO_SCHEDULE), tainted("device-2", NO_EXECUTE))],
        [("gpu", "device-2", [TOLERATE_NO_EXECUTE])],
    ),
    "tainted-two-devices-prioritized-list-tolerated": Case(
        [first_available(sub("sub-0"), sub("sub-1", tolerations=[TOLERATE_NO_EXECUTE]))],
        [node_slice(tainted("device-1", NO_SCHEDULE), tainted("device-2", NO_EXECUTE))],
        [("gpu/sub-1", "device-2", [TOLERATE_NO_EXECUTE])],
    ),
    "tainted-no-effect": Case([exact()], [node_slice(tainted("device-1", NONE))], [("gpu", "device-1", [])]),
    "tainted-one-device-two-taints-both-tolerated": Case(
        [exact(tolerations=[TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE])],
        [node_slice(tainted("device-1", NO_SCHEDULE, NO_EXECUTE))],
        [("gpu", "device-1", [TOLERATE_NO_SCHEDULE, TOLERATE_NO_EXECUTE])],
    ),
    "tainted-disabled": Case(
        [exact()], [node_slice(tainted("device-1", NO_SCHEDULE, NO_EXECUTE))], [("gpu", "device-1", [])], gate=False
    ),
    "tainted-prioritized-list": Case(
        [first_available(sub("sub-0", "other"), sub("sub-1"))],
        [node_slice(tainted("device-1", NO_SCHEDULE))],
        None,
        classes=("gpu", "other"),
    ),
    "tainted-prioritized-list-disabled": Case(
        [first_available(sub("sub-0", "other"), sub("sub-1"))],
        [node_slice(tainted("device-1", NO_SCHEDULE))],
        [("gpu/sub-1", "device-1", [])],
        gate=False,
        classes=("gpu", "other"),
    ),
    "tainted-admin-access": Case(
        [exact(admin=True)], [node_slice(tainted("device-1", NO_SCHEDULE))], None, in_use=("device-1", "device-2")
    ),
    "tainted-admin-access-disabled": Case(
        [exact(admin=True)],
        [node_slice(tainted("device-1", NO_SCHEDULE))],
        [("gpu", "device-1", [])],
        gate=False,
        in_use=("device-1", "device-2"),
    ),
    "tainted-all-devices-single": Case([exact(mode="All")], [node_slice(tainted("device-1", NO_SCHEDULE))], None),
    "tainted-all-devices-single-disabled": Case(
        [exact(mode="All")], [node_slice(tainted("device-1", NO_SCHEDULE))], [("gpu", "device-1", [])], gate=False
    ),
    "partitionable-devices-taint-releases-counter": Case(
        [exact()],
        [
            node_slice(
                tainted("device-1", NO_SCHEDULE, consumes={"set-1": {"c": "1"}}),
                tainted("device-2", consumes={"set-1": {"c": "1"}}),
                count=2,
            ),
            make_slice().name("counters").node("n1").pool("pool-1", count=2).counters("set-1", c="1").obj(),
        ],
        [("gpu", "device-2", [])],
    ),
}


@pytest.mark.parametrize("case", UPSTREAM.values(), ids=UPSTREAM.keys())
def test_upstream_allocator_table(case: Case) -> None:
    claim, outcome = allocate_case(case)
    if case.expected is None:
        assert (outcome.ok, outcome.reason, outcome.error) == (False, REASON_CANNOT_ALLOCATE, None)
        return
    assert outcome.ok, outcome
    results = outcome.allocations[claim["metadata"]["uid"]].results
    assert [(r["request"], r["device"], r.get("tolerations", [])) for r in results] == [
        (request, device, [dict(t) for t in tolerations]) for request, device, tolerations in case.expected
    ]


def test_an_all_request_fails_on_a_node_where_it_selects_an_untolerated_device_rather_than_leaving_it_out() -> None:
    """kube's allocator collects an All request's devices by selectors alone; a taint then fails the request."""
    case = Case([exact(mode="All")], [node_slice(tainted("device-1"), tainted("device-2", NO_SCHEDULE))], None)
    assert allocate_case(case)[1].reason == REASON_CANNOT_ALLOCATE
    tolerated = Case(
        [exact(mode="All", tolerations=[TOLERATE_NO_SCHEDULE])],
        [node_slice(tainted("device-1"), tainted("device-2", NO_SCHEDULE))],
        [("gpu", "device-1", [TOLERATE_NO_SCHEDULE]), ("gpu", "device-2", [TOLERATE_NO_SCHEDULE])],
    )
    claim, outcome = allocate_case(tolerated)
    assert [r["device"] for r in outcome.allocations[claim["metadata"]["uid"]].results] == ["device-1", "device-2"]


def test_requests_with_other_tolerations_do_not_share_selector_answers() -> None:
    """The memo of answers is keyed by tolerations too: a tolerating pod must not inherit a 'no' (or a 'yes')."""
    memo = MatchMemo()
    state = DraState()
    state.on_slice(False, node_slice(tainted("device-1", NO_SCHEDULE)))
    classes = {"gpu": parse_class(make_class().obj())}

    def run(*tolerations: Mapping[str, Any]) -> bool:
        claim = parse_claim(make_claim().raw_request(exact(tolerations=tolerations)).obj())
        return allocate(
            plan_claims([claim], classes, memo=memo),
            node_name="n1",
            node_labels={},
            inventory=state.inventory(),
            in_use=set(),
            evaluate=lambda expression, device, driver: True,
            deadline=None,
            timeout=None,
            now=lambda: 0.0,
        ).ok

    assert [run(), run(TOLERATE_NO_SCHEDULE), run(), run(TOLERATE_NO_SCHEDULE)] == [False, True, False, True]


def test_a_tainted_device_still_runs_the_selectors_and_meets_their_errors() -> None:
    """Taints are checked after the selectors, as kube does: a CEL error on a tainted device is still an error."""
    state = DraState()
    state.on_slice(False, node_slice(tainted("device-1", NO_SCHEDULE)))

    def broken(expression: str, device: Any, driver: str) -> bool:
        raise RuntimeError("no such key: model")

    outcome = allocate(
        plan_claims(
            [parse_claim(make_claim().request("gpu", selectors=("boom",)).obj())],
            {"gpu": parse_class(make_class().obj())},
        ),
        node_name="n1",
        node_labels={},
        inventory=state.inventory(),
        in_use=set(),
        evaluate=broken,
        deadline=None,
        timeout=None,
        now=lambda: 0.0,
    )
    assert outcome.error is not None and "no such key: model" in outcome.error


# ---------------------------------------------------------------- tolerations (resourceclaim.ToleratesTaint)

TOLERATIONS = [
    ("same key and effect, Exists, taint without value", {"key": "foo", "operator": "Exists", "effect": "NoSchedule"},
     {"key": "foo", "effect": "NoSchedule"}, True),
    ("same key and effect, Exists, taint with a value", {"key": "foo", "operator": "Exists", "effect": "NoSchedule"},
     {"key": "foo", "value": "bar", "effect": "NoSchedule"}, True),
    ("same effect, empty key and Exists match every taint", {"key": "", "operator": "Exists", "effect": "NoSchedule"},
     {"key": "foo", "value": "bar", "effect": "NoSchedule"}, True),
    ("same key, effect and value, Equal", {"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"},
     {"key": "foo", "value": "bar", "effect": "NoSchedule"}, True),
    ("same key and effect, other value, Equal",
     {"key": "foo", "operator": "Equal", "value": "value1", "effect": "NoSchedule"},
     {"key": "foo", "value": "value2", "effect": "NoSchedule"}, False),
    ("same key and value, other effect, Equal",
     {"key": "foo", "operator": "Equal", "value": "bar", "effect": "NoSchedule"},
     {"key": "foo", "value": "bar", "effect": "NoExecute"}, False),
    ("no operator means Equal", {"key": "foo", "value": "bar"},
     {"key": "foo", "value": "bar", "effect": "NoExecute"}, True),
    ("no effect tolerates every effect", {"key": "foo", "operator": "Exists"},
     {"key": "foo", "effect": "NoExecute"}, True),
    ("an unknown operator tolerates nothing", {"key": "foo", "operator": "Lt", "value": "bar"},
     {"key": "foo", "value": "bar", "effect": "NoSchedule"}, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"), [t[1:] for t in TOLERATIONS], ids=[t[0] for t in TOLERATIONS]
)
def test_toleration_tolerates_taint(toleration: dict[str, str], taint: dict[str, str], expected: bool) -> None:
    parsed_toleration = DeviceToleration(
        **{("toleration_seconds" if k == "tolerationSeconds" else k): v for k, v in toleration.items()}
    )
    parsed_taint = DeviceTaint(key=taint["key"], value=taint.get("value", ""), effect=taint["effect"])
    assert tolerates(parsed_toleration, parsed_taint) is expected


def test_only_no_schedule_and_no_execute_keep_a_device_away() -> None:
    taints = [DeviceTaint("a", "", "None"), DeviceTaint("b", "", "SomeFutureEffect")]
    assert untolerated(taints, ()) is None
    blocking = DeviceTaint("c", "x", "NoExecute")
    assert untolerated([*taints, blocking], ()) == blocking


# ---------------------------------------------------------------- DeviceTaintRules (the slice tracker's patches)


def rule(name: str, effect: str = "NoSchedule", **selector: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": {"key": "example.com/maintenance", "value": name, "effect": effect}}
    if selector:
        spec["deviceSelector"] = {k: v for k, v in selector.items() if v is not None}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec}


RULES = [
    ("no selector taints nothing", rule("r"), {}),
    ("driver only taints every device of the driver", rule("r", driver=DRIVER), {"gpu-0": ["r"], "gpu-1": ["r"]}),
    ("another driver taints nothing", rule("r", driver="other.io"), {}),
    ("pool and device taint one device", rule("r", driver=DRIVER, pool="pool-1", device="gpu-1"), {"gpu-1": ["r"]}),
    ("another pool taints nothing", rule("r", pool="pool-2"), {}),
    ("device name alone matches in any pool", rule("r", device="gpu-0"), {"gpu-0": ["r"]}),
]


@pytest.mark.parametrize(("raw", "expected"), [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_rules_patch_the_devices_they_select(raw: dict[str, Any], expected: dict[str, list[str]]) -> None:
    state = DraState()
    state.on_slice(False, make_slice().name("s").node("n1").device("gpu-0").device("gpu-1").obj())
    changed = state.on_taint_rule(False, raw)
    assert {d.name: [t.value for t in d.taints] for d in state.slices["s"].devices if d.taints} == expected
    assert [s.name for s in changed] == (["s"] if expected else [])


def test_a_rule_adds_to_the_slice_s_own_taints_and_goes_when_deleted() -> None:
    state = DraState()
    state.on_slice(False, node_slice(tainted("device-1", NONE)) | {"metadata": {"name": "s"}})
    before = state.slices_version
    state.on_taint_rule(False, rule("drain", "NoExecute", device="device-1"))
    assert [str(t) for t in state.slices["s"].devices[0].taints] == [
        "taint-key=taint-value:None",
        "example.com/maintenance=drain:NoExecute",
    ]
    assert state.slices_version > before, "the inventory must be rebuilt with the new taints"
    assert [s.name for s in state.on_taint_rule(True, rule("drain", "NoExecute", device="device-1"))] == ["s"]
    assert [str(t) for t in state.slices["s"].devices[0].taints] == ["taint-key=taint-value:None"]


def test_a_slice_published_after_a_rule_gets_its_taint() -> None:
    state = DraState()
    state.on_taint_rule(False, rule("r", driver=DRIVER))
    state.on_slice(False, make_slice().name("late").node("n1").device("gpu-0").obj())
    assert [t.value for t in state.slices["late"].devices[0].taints] == ["r"]


@pytest.mark.parametrize(
    ("gates", "expected"),
    [({"taint_rules": False}, []), ({"device_taints": False}, [])],
    ids=["rules off", "taints off (rules need them)"],
)
def test_rules_are_ignored_without_their_gates(gates: dict[str, bool], expected: list[str]) -> None:
    state = DraState(**gates)
    state.on_slice(False, make_slice().name("s").node("n1").device("gpu-0").obj())
    assert state.on_taint_rule(False, rule("r", driver=DRIVER)) == []
    assert [t.value for t in state.slices["s"].devices[0].taints] == expected


def test_a_rule_changed_to_another_device_moves_its_taint() -> None:
    state = DraState()
    state.on_slice(False, make_slice().name("s").node("n1").device("gpu-0").device("gpu-1").obj())
    state.on_taint_rule(False, rule("r", device="gpu-0"))
    state.on_taint_rule(False, rule("r", device="gpu-1"))
    assert {d.name: [t.value for t in d.taints] for d in state.slices["s"].devices} == {"gpu-0": [], "gpu-1": ["r"]}


def test_parse_and_apply_alone() -> None:
    parsed = parse_taint_rule(rule("r", driver=DRIVER, device="gpu-0"))
    assert parsed == TaintRule(
        name="r",
        taint=DeviceTaint("example.com/maintenance", "r", "NoSchedule"),
        selects=True,
        driver=DRIVER,
        device="gpu-0",
    )
    from usher.core.dra.model import parse_slice

    original = parse_slice(make_slice().node("n1").device("gpu-1").obj())
    assert apply_rules(original, [parsed]) is original, "a slice no rule touches is not copied"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"metadata": {"name": "r"}, "spec": {"taint": {"effect": "NoSchedule"}}}, "spec.taint.key: required"),
        ({"metadata": {"name": "r"}, "spec": {"taint": {"key": "k"}}}, "spec.taint.effect: required"),
        ({"metadata": {"name": "r"}, "spec": {"deviceSelector": {"driver": 3}, "taint": NO_SCHEDULE}}, "driver"),
    ],
    ids=["no key", "no effect", "driver not a string"],
)
def test_a_malformed_rule_is_recorded_as_broken_and_taints_nothing(raw: dict[str, Any], message: str) -> None:
    state = DraState()
    state.on_slice(False, make_slice().name("s").node("n1").device("gpu-0").obj())
    assert state.on_taint_rule(False, raw) == []
    assert message in state.broken["devicetaintrule/r"]


# ---------------------------------------------------------------- usher explain


def test_explain_names_the_devices_a_claim_selects_but_may_not_have_and_their_taints() -> None:
    state = DraState()
    state.on_slice(False, node_slice(tainted("device-0"), tainted("device-1", NO_SCHEDULE), tainted("device-2", NONE)))
    state.on_slice(
        False, make_slice().name("other").driver("other.io").node("n1").raw_device(tainted("x", NO_EXECUTE)).obj()
    )
    classes = {"gpu": parse_class(_class("gpu"))}
    plain = parse_claim(make_claim().name("plain").raw_request(exact()).obj())
    tolerant = parse_claim(make_claim().name("tolerant").raw_request(exact(tolerations=[TOLERATE_NO_SCHEDULE])).obj())
    allocated = parse_claim(
        make_claim()
        .name("done")
        .raw_request(exact())
        .allocated({"request": "gpu", "driver": DRIVER, "pool": "pool-1", "device": "device-0"})
        .obj()
    )
    assert kept_off_by_taints([plain, tolerant, allocated], state.slices.values(), classes, by_driver) == [
        {
            "claim": "default/plain",
            "request": "gpu",
            "device": f"{DRIVER}/pool-1/device-1",
            "taint": "taint-key=taint-value:NoSchedule",
        }
    ]


def test_failed_scheduling_names_the_taint_that_kept_the_pod_off() -> None:
    """kube-scheduler says only "cannot allocate all claims"; usher's DynamicResources PostFilter adds which
    device's taint the pod's claims do not tolerate, so FailedScheduling says why."""
    handle = FakeHandle()
    handle.dra.on_class(False, make_class().name("gpu").selector(f'device.driver == "{DRIVER}"').obj())
    handle.dra.on_slice(False, node_slice(tainted("gpu-0", NO_SCHEDULE)))
    handle.dra.on_claim(False, make_claim().name("c").uid("cu").raw_request(exact()).obj())
    fw = framework_of("PrioritySort", "DynamicResources", "DefaultBinder", handle=handle)
    pod = make_pod().name("p").uid("uid-p").obj()
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    info, state, cache = PodInfo.from_api(pod), CycleState(), Cache()
    cache.add_or_update_node(make_node().name("n1").obj())
    result = schedule(fw, state, info, cache.node_infos(), rng=random.Random(1))
    assert result.node is None and result.node_statuses["n1"].message == REASON_CANNOT_ALLOCATE
    answer = fw.run_post_filter(state, info, result.node_statuses, cache.node_infos())
    assert answer.status.message == (
        f"untolerated device taints: claim default/c request gpu: device {DRIVER}/pool-1/gpu-0 has taint "
        "taint-key=taint-value:NoSchedule"
    )
