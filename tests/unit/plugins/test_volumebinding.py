"""VolumeBinding: kube-scheduler's PreFilter, Filter, Score, Reserve and PreBind over claims and volumes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pv, make_pvc, make_storage_class
from tests.frameworks import FakeHandle
from usher.core.cache import Cache, NodeInfo
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import volumebinding
from usher.core.plugins.volumebinding import (
    REASON_BIND_CONFLICT,
    REASON_NODE_CONFLICT,
    REASON_NOT_ENOUGH_SPACE,
    REASON_PV_NOT_EXIST,
    STATE_KEY,
    UNBOUND_IMMEDIATE,
    VolumeBinding,
)
from usher.core.types import Code, PodInfo, QueueingHint, Status
from usher.core.volumes.model import ANN_SELECTED_NODE

WFFC = "wffc"
IMMEDIATE = "immediate"
HOSTNAME = "kubernetes.io/hostname"


def setup(*objects: tuple[str, dict[str, Any]], args: dict[str, Any] | None = None) -> tuple[VolumeBinding, FakeHandle]:
    handle = FakeHandle()
    handle.nodes = {"n1": {HOSTNAME: "n1", "zone": "a"}, "n2": {HOSTNAME: "n2", "zone": "b"}}
    handle.volumes.on_event("storageclasses", False, make_storage_class(WFFC))
    handle.volumes.on_event("storageclasses", False, make_storage_class(IMMEDIATE, binding="Immediate"))
    for kind, raw in objects:
        handle.volumes.on_event(kind, False, raw)
    return volumebinding.new(args or {}, handle), handle


def nodes() -> list[NodeInfo]:
    cache = Cache()
    for name, zone in (("n1", "a"), ("n2", "b")):
        cache.add_or_update_node(make_node().name(name).label(HOSTNAME, name).label("zone", zone).obj())
    return cache.node_infos()


def pvc(raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "persistentvolumeclaims", raw


def pv(raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "persistentvolumes", raw


def pod_using(*claims: str) -> PodInfo:
    builder = make_pod().name("p").uid("pod-uid")
    for claim in claims:
        builder.pvc(claim)
    return PodInfo.from_api(builder.obj())


def filtered(plugin: VolumeBinding, pod: PodInfo) -> tuple[CycleState, Status, list[Status]]:
    state = CycleState()
    infos = nodes()
    _, status = plugin.pre_filter(state, pod, infos)
    if not status.ok:
        return state, status, []
    return state, status, [plugin.filter(state, pod, node) for node in infos]


# ---------------------------------------------------------------------- PreFilter


@pytest.mark.parametrize(
    ("objects", "pod", "message"),
    [
        ((), pod_using("data"), 'persistentvolumeclaim "data" not found'),
        (
            (),
            PodInfo.from_api(make_pod().name("p").ephemeral("scratch").obj()),
            'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"',
        ),
        (
            (pvc(make_pvc().name("p-scratch").owned_by("someone-else").obj()),),
            PodInfo.from_api(make_pod().name("p").uid("pod-uid").ephemeral("scratch").obj()),
            "PVC default/p-scratch was not created for pod default/p (pod is not owner)",
        ),
        (
            (pvc(make_pvc().name("data").bound("gone").phase("Lost").obj()),),
            pod_using("data"),
            'persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"',
        ),
        (
            (pvc(make_pvc().name("data").storage_class(WFFC).deleting().obj()),),
            pod_using("data"),
            'persistentvolumeclaim "data" is being deleted',
        ),
        ((pvc(make_pvc().name("data").storage_class(IMMEDIATE).obj()),), pod_using("data"), UNBOUND_IMMEDIATE),
        ((pvc(make_pvc().name("data").storage_class("no-such-class").obj()),), pod_using("data"), UNBOUND_IMMEDIATE),
    ],
    ids=[
        "a missing claim",
        "an ephemeral volume's claim not created yet",
        "an ephemeral volume's claim made for another pod",
        "a lost claim",
        "a claim being deleted",
        "an unbound claim of an Immediate class",
        "an unbound claim of a class that does not exist binds immediately",
    ],
)
def test_prefilter_holds_the_pod_with_kube_schedulers_message(
    objects: tuple[tuple[str, dict[str, Any]], ...], pod: PodInfo, message: str
) -> None:
    plugin, _ = setup(*objects)
    _, status, _ = filtered(plugin, pod)
    assert (status.code, status.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,))


def test_a_pod_without_claims_skips_the_plugin() -> None:
    plugin, _ = setup()
    _, status = plugin.pre_filter(CycleState(), PodInfo.from_api(make_pod().obj()), nodes())
    assert status.code is Code.SKIP


def test_an_ephemeral_volumes_claim_owned_by_the_pod_is_used() -> None:
    claim = make_pvc().name("p-scratch").owned_by("pod-uid").bound("pv-1").obj()
    plugin, _ = setup(pvc(claim), pv(make_pv().name("pv-1").claimed_by("default", "p-scratch").obj()))
    pod = PodInfo.from_api(make_pod().name("p").uid("pod-uid").ephemeral("scratch").obj())
    _, status, per_node = filtered(plugin, pod)
    assert status.ok and per_node == [Status(), Status()]


# ---------------------------------------------------------------------- Filter


def test_a_bound_claim_follows_its_volumes_node_affinity() -> None:
    plugin, _ = setup(
        pvc(make_pvc().name("data").storage_class(WFFC).bound("pv-1").obj()),
        pv(make_pv().name("pv-1").on_node("n2").claimed_by("default", "data").phase("Bound").obj()),
    )
    _, _, (on_n1, on_n2) = filtered(plugin, pod_using("data"))
    assert (on_n1.code, on_n1.reasons) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (REASON_NODE_CONFLICT,))
    assert on_n2.ok


def test_a_claim_bound_to_a_missing_volume_fits_nowhere() -> None:
    plugin, _ = setup(pvc(make_pvc().name("data").bound("gone").obj()))
    _, _, per_node = filtered(plugin, pod_using("data"))
    assert {s.reasons for s in per_node} == {(REASON_PV_NOT_EXIST,)}


def test_a_delayed_claim_takes_the_smallest_fitting_available_volume_on_the_node() -> None:
    plugin, handle = setup(
        pvc(make_pvc().name("data").storage_class(WFFC).request("5Gi").obj()),
        pv(make_pv().name("big").storage_class(WFFC).capacity("100Gi").on_node("n1").obj()),
        pv(make_pv().name("small").storage_class(WFFC).capacity("10Gi").on_node("n1").obj()),
        pv(make_pv().name("too-small").storage_class(WFFC).capacity("1Gi").on_node("n1").obj()),
        pv(make_pv().name("elsewhere").storage_class(WFFC).capacity("5Gi").on_node("n2").obj()),
    )
    handle.volumes.classes[WFFC] = handle.volumes.classes[WFFC].__class__(
        WFFC, "kubernetes.io/no-provisioner", "WaitForFirstConsumer", (), {}
    )
    state, _, (on_n1, on_n2) = filtered(plugin, pod_using("data"))
    assert on_n1.ok and on_n2.ok, "n2 has its own volume"
    assert plugin.reserve(state, pod_using("data"), "n1").ok
    assert handle.volumes.volume("small") is not None
    assert handle.volumes.volume("small").claim_ref == {  # type: ignore[union-attr]
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": "default",
        "name": "data",
        "uid": handle.volumes.claim("default/data").uid,  # type: ignore[union-attr]
        "resourceVersion": "1",
    }, "the smallest volume that fits is assumed bound, so the next pod cannot take it"


def test_without_a_volume_or_a_provisioner_a_delayed_claim_fits_nowhere() -> None:
    plugin, handle = setup(pvc(make_pvc().name("data").storage_class("static").obj()))
    handle.volumes.on_event(
        "storageclasses", False, make_storage_class("static", provisioner="kubernetes.io/no-provisioner")
    )
    _, _, per_node = filtered(plugin, pod_using("data"))
    assert {s.reasons for s in per_node} == {(REASON_BIND_CONFLICT,)}


def test_a_claim_selected_for_another_node_rules_this_one_out() -> None:
    claim = make_pvc().name("data").storage_class(WFFC).annotate(ANN_SELECTED_NODE, "n2").obj()
    plugin, _ = setup(pvc(claim))
    _, _, (on_n1, on_n2) = filtered(plugin, pod_using("data"))
    assert on_n1.reasons == (REASON_BIND_CONFLICT,) and on_n2.ok


def test_a_class_provisions_only_within_its_allowed_topologies() -> None:
    topologies = [{"matchLabelExpressions": [{"key": "zone", "values": ["b"]}]}]
    plugin, handle = setup(pvc(make_pvc().name("data").storage_class("zoned").obj()))
    handle.volumes.on_event("storageclasses", False, make_storage_class("zoned", allowedTopologies=topologies))
    _, _, (on_n1, on_n2) = filtered(plugin, pod_using("data"))
    assert on_n1.reasons == (REASON_BIND_CONFLICT,) and on_n2.ok


def capacity(name: str, zone: str, size: str, class_name: str = WFFC) -> tuple[str, dict[str, Any]]:
    return "csistoragecapacities", {
        "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": "1"},
        "storageClassName": class_name,
        "nodeTopology": {"matchLabels": {"zone": zone}},
        "capacity": size,
    }


def test_capacity_tracking_needs_a_reachable_capacity_with_room() -> None:
    driver = {"metadata": {"name": "example.com/csi", "resourceVersion": "1"}, "spec": {"storageCapacity": True}}
    plugin, _ = setup(
        pvc(make_pvc().name("data").storage_class(WFFC).request("10Gi").obj()),
        ("csidrivers", driver),
        capacity("a", "a", "5Gi"),
        capacity("b", "b", "50Gi"),
    )
    _, _, (on_n1, on_n2) = filtered(plugin, pod_using("data"))
    assert on_n1.reasons == (REASON_NOT_ENOUGH_SPACE,) and on_n2.ok


def test_without_capacity_tracking_capacities_are_not_consulted() -> None:
    plugin, _ = setup(pvc(make_pvc().name("data").storage_class(WFFC).request("10Gi").obj()), capacity("a", "a", "1Gi"))
    _, _, per_node = filtered(plugin, pod_using("data"))
    assert all(s.ok for s in per_node)


# ---------------------------------------------------------------------- Score


def test_score_prefers_the_node_whose_volume_the_claim_fills_least_by_default() -> None:
    plugin, _ = setup(
        pvc(make_pvc().name("data").storage_class(WFFC).request("5Gi").obj()),
        pv(make_pv().name("tight").storage_class(WFFC).capacity("10Gi").on_node("n1").obj()),
        pv(make_pv().name("roomy").storage_class(WFFC).capacity("100Gi").on_node("n2").obj()),
    )
    state, _, _ = filtered(plugin, pod_using("data"))
    infos = nodes()
    assert plugin.pre_score(state, pod_using("data"), infos).ok
    scores = [plugin.score(state, pod_using("data"), node)[0] for node in infos]
    assert scores == [50, 95], "utilisation 50% and 5% on the default shape (0% -> 100, 100% -> 0)"


# ---------------------------------------------------------------------- Reserve / PreBind


async def test_prebind_selects_the_node_and_waits_for_the_pv_controller_to_bind() -> None:
    plugin, handle = setup(pvc(make_pvc().name("data").storage_class(WFFC).obj()))
    pod = pod_using("data")
    state, _, _ = filtered(plugin, pod)
    assert plugin.reserve(state, pod, "n1").ok
    assert handle.volumes.claim("default/data").selected_node == "n1"  # type: ignore[union-attr]
    writer = handle.volume_writer
    # The provisioner and the PV controller answer (the watch), after the scheduler's write (version 2).
    provisioned = make_pvc().name("data").storage_class(WFFC).annotate(ANN_SELECTED_NODE, "n1")
    provisioned.bound("pvc-abc").version("3")
    volume = make_pv().name("pvc-abc").storage_class(WFFC).on_node("n1").claimed_by("default", "data", "x").obj()
    handle.volumes.on_event("persistentvolumes", False, volume)

    writer.script.append(lambda: handle.volumes.on_event("persistentvolumeclaims", False, provisioned.obj()))
    status = await plugin.pre_bind(state, pod, "n1")
    assert status.ok, status.message
    assert len(writer.waits) == 1, "waited once, for the watch to show the claim bound"
    [(kind, written)] = writer.writes
    assert kind == "claim" and written["metadata"]["annotations"][ANN_SELECTED_NODE] == "n1"


async def test_prebind_fails_when_the_provisioner_gives_up() -> None:
    plugin, handle = setup(pvc(make_pvc().name("data").storage_class(WFFC).obj()))
    pod = pod_using("data")
    state, _, _ = filtered(plugin, pod)
    assert plugin.reserve(state, pod, "n1").ok
    # After the write, a newer claim without the annotation: the provisioner rescheduled it.
    gave_up = make_pvc().name("data").storage_class(WFFC).version("9").obj()
    handle.volume_writer.script.append(lambda: handle.volumes.on_event("persistentvolumeclaims", False, gave_up))
    status = await plugin.pre_bind(state, pod, "n1")
    assert (status.code, status.message) == (Code.ERROR, 'binding volumes: provisioning failed for PVC "data"')


async def test_prebind_gives_up_at_the_bind_timeout() -> None:
    plugin, handle = setup(pvc(make_pvc().name("data").storage_class(WFFC).obj()), args={"bindTimeoutSeconds": 30})
    pod = pod_using("data")
    state, _, _ = filtered(plugin, pod)
    assert plugin.reserve(state, pod, "n1").ok
    status = await plugin.pre_bind(state, pod, "n1")
    assert (status.code, status.message) == (Code.ERROR, "binding volumes: context deadline exceeded")
    assert handle.volume_writer.waits and handle.volume_writer.waits[0] <= 30


def test_unreserve_restores_the_claims_and_volumes_as_watched() -> None:
    plugin, handle = setup(pvc(make_pvc().name("data").storage_class(WFFC).obj()))
    pod = pod_using("data")
    state, _, _ = filtered(plugin, pod)
    assert plugin.reserve(state, pod, "n2").ok
    plugin.unreserve(state, pod, "n2")
    assert handle.volumes.claim("default/data").selected_node is None  # type: ignore[union-attr]


def test_a_pod_whose_claims_are_all_bound_has_nothing_to_prebind() -> None:
    plugin, handle = setup(
        pvc(make_pvc().name("data").storage_class(WFFC).bound("pv-1").obj()),
        pv(make_pv().name("pv-1").claimed_by("default", "data").obj()),
    )
    pod = pod_using("data")
    state, _, _ = filtered(plugin, pod)
    assert plugin.reserve(state, pod, "n1").ok
    assert handle.volume_writer.writes == []


def bound_pair(claim: str, volume: str, node: str | None = None) -> tuple[tuple[str, dict[str, Any]], ...]:
    made = make_pv().name(volume).storage_class(WFFC).claimed_by("default", claim).phase("Bound")
    return (
        pvc(make_pvc().name(claim).storage_class(WFFC).bound(volume).obj()),
        pv((made.on_node(node) if node else made).obj()),
    )


@pytest.mark.parametrize(
    ("objects", "claims", "scored"),
    [
        (bound_pair("data", "pv-1"), ("data",), False),
        (bound_pair("data", "pv-1", node="n2"), ("data",), False),
        ((*bound_pair("a", "pv-a"), *bound_pair("b", "pv-b", node="n1")), ("a", "b"), False),
        ((*bound_pair("a", "pv-a", node="n1"), *bound_pair("b", "pv-b", node="n2")), ("a", "b"), False),
        ((pvc(make_pvc().name("data").bound("gone").obj()),), ("data",), False),
        ((*bound_pair("a", "pv-a", node="n2"), pvc(make_pvc().name("b").bound("gone").obj())), ("a", "b"), False),
        ((*bound_pair("a", "pv-a"), pvc(make_pvc().name("b").storage_class(WFFC).obj())), ("a", "b"), True),
    ],
    ids=[
        "bound, no node affinity",
        "bound, pinned to n2",
        "two bound, one pinned",
        "two bound, pinned apart",
        "bound to a missing volume",
        "one pinned, one bound to a missing volume",
        "one bound, one delayed",
    ],
)
def test_filter_nodes_answers_and_records_as_filter_does_node_by_node(
    objects: tuple[tuple[str, dict[str, Any]], ...], claims: tuple[str, ...], scored: bool
) -> None:
    plugin, handle = setup(*objects)
    handle.volumes.on_event("storageclasses", False, make_storage_class(WFFC, provisioner="example.com/csi"))
    pod = pod_using(*claims)
    infos = nodes()
    one_by_one, batched = CycleState(), CycleState()
    assert plugin.pre_filter(one_by_one, pod, infos)[1].ok
    assert plugin.pre_filter(batched, pod, infos)[1].ok
    expected = [None if status.ok else status for status in (plugin.filter(one_by_one, pod, n) for n in infos)]
    assert plugin.filter_nodes(batched, pod, infos) == expected
    assert batched.get(STATE_KEY).by_node == one_by_one.get(STATE_KEY).by_node
    # Only a delayed claim gives a node something to score. Without one PreScore skips the plugin,
    # which adds what every node scoring 0 would.
    assert (plugin.pre_score(batched, pod, infos).code is not Code.SKIP) == scored
    if not scored:
        passed = [node for node, status in zip(infos, expected, strict=True) if status is None]
        assert [plugin.score(one_by_one, pod, node)[0] for node in passed] == [0] * len(passed)


# ---------------------------------------------------------------------- args and hints


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"bindTimeoutSeconds": -1}, "bindTimeoutSeconds"),
        ({"shape": [{"utilization": 200, "score": 1}]}, "shape[0].utilization"),
        ({"bogus": 1}, "bogus"),
    ],
    ids=["a negative bind timeout", "a shape point out of range", "an unknown field"],
)
def test_invalid_args_name_the_field(args: dict[str, Any], field: str) -> None:
    from usher.core.framework.args import PluginArgsError

    with pytest.raises(PluginArgsError) as raised:
        volumebinding.parse_args(args)
    assert raised.value.field == field


def test_a_claim_event_wakes_only_the_pods_using_that_claim() -> None:
    plugin, _ = setup()
    hints = {reg.event.resource.value: reg.hint for reg in plugin.events_to_register()}
    claim_hint = hints["PersistentVolumeClaim"]
    assert claim_hint is not None
    assert claim_hint(pod_using("data"), None, make_pvc().name("data").obj()) is QueueingHint.QUEUE
    assert claim_hint(pod_using("data"), None, make_pvc().name("other").obj()) is QueueingHint.QUEUE_SKIP
