"""VolumeZone: bound PVs' zone and region labels must match the node's (kube-scheduler's)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pv, make_pvc, make_storage_class
from tests.frameworks import FakeHandle
from usher.config import default_config
from usher.core.cache import Cache, NodeInfo
from usher.core.cycle import schedule
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import volumezone
from usher.core.plugins.registry import in_tree_registry
from usher.core.plugins.volumezone import (
    LABEL_BETA_REGION,
    LABEL_BETA_ZONE,
    LABEL_REGION,
    LABEL_ZONE,
    PRE_FILTER_STATE_KEY,
    REASON_CONFLICT,
    PVTopology,
    VolumeZone,
    claim_changed,
    class_added,
    pv_topologies,
    volume_changed,
)
from usher.core.types import Code, PodInfo, QueueingHint, Status

UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
CONFLICT = (UNRESOLVABLE, (REASON_CONFLICT,))
FITS = (Code.SUCCESS, ())

VOLUME_LABELS: dict[str, dict[str, str]] = {
    "vol-beta-zone": {LABEL_BETA_ZONE: "us-west1-a"},
    "vol-beta-region": {LABEL_BETA_REGION: "us-west1", "uselessLabel": "none"},
    "vol-zone": {LABEL_ZONE: "us-west1-a"},
    "vol-region": {LABEL_REGION: "us-west1", "uselessLabel": "none"},
    "vol-zone-and-region": {LABEL_ZONE: "us-west1-a", LABEL_REGION: "us-west1-a"},
    "vol-multi-zone-beta": {LABEL_BETA_ZONE: "us-west1-c__us-west1-a"},
    "vol-multi-zone": {LABEL_ZONE: "us-west1-c__ us-west1-a"},
    "vol-unparseable": {LABEL_ZONE: "us-west1-a____"},
    "vol-no-labels": {},
}


def handle_with(*objects: tuple[str, dict[str, Any]]) -> FakeHandle:
    """PVs ``vol-*`` of VOLUME_LABELS, each bound to claim ``pvc-<vol>``, plus ``objects``."""
    handle = FakeHandle()
    for name, labels in VOLUME_LABELS.items():
        builder = make_pv().name(name).claimed_by("default", f"pvc-{name}")
        for key, value in labels.items():
            builder.label(key, value)
        handle.volumes.on_event("persistentvolumes", False, builder.obj())
        handle.volumes.on_event("persistentvolumeclaims", False, make_pvc().name(f"pvc-{name}").bound(name).obj())
    handle.volumes.on_event("storageclasses", False, make_storage_class("wait"))
    handle.volumes.on_event("storageclasses", False, make_storage_class("immediate", binding="Immediate"))
    for kind, raw in objects:
        handle.volumes.on_event(kind, False, raw)
    return handle


def pod_using(*claims: str, name: str = "p", namespace: str = "default") -> PodInfo:
    builder = make_pod().name(name).namespace(namespace)
    for claim in claims:
        builder.pvc(claim)
    return PodInfo.from_api(builder.obj())


def node(**labels: str) -> NodeInfo:
    """A node labelled with ``labels`` (``beta_zone``/``beta_region``/``zone``/``region`` for the topology keys)."""
    keys = {"beta_zone": LABEL_BETA_ZONE, "beta_region": LABEL_BETA_REGION, "zone": LABEL_ZONE, "region": LABEL_REGION}
    builder = make_node().name("host1")
    for key, value in labels.items():
        builder.label(keys.get(key, key), value)
    cache = Cache()
    return cache.add_or_update_node(builder.obj())


def run(plugin: VolumeZone, pod: PodInfo, target: NodeInfo) -> tuple[Status, Status | None]:
    state = CycleState()
    _, pre = plugin.pre_filter(state, pod, [target])
    if not pre.ok:
        return pre, None
    return pre, plugin.filter(state, pod, target)


@pytest.mark.parametrize(
    ("volume", "labels", "expected"),
    [
        ("vol-beta-zone", {}, FITS),
        ("vol-beta-zone", {"beta_zone": "us-west1-a", "uselessLabel": "none"}, FITS),
        ("vol-beta-zone", {"beta_zone": "no_us-west1-a"}, CONFLICT),
        ("vol-beta-region", {"beta_region": "us-west1"}, FITS),
        ("vol-beta-region", {"beta_region": "no_us-west1"}, CONFLICT),
        ("vol-zone", {"zone": "us-west1-a"}, FITS),
        ("vol-zone", {"zone": "no_us-west1-a"}, CONFLICT),
        ("vol-region", {"region": "us-west1"}, FITS),
        ("vol-region", {"region": "no_us-west1"}, CONFLICT),
        ("vol-zone-and-region", {"zone": "us-west1-a"}, CONFLICT),
        ("vol-zone", {"beta_zone": "us-west1-a"}, CONFLICT),
        ("vol-beta-zone", {"zone": "us-west1-a"}, FITS),
        ("vol-beta-zone", {"zone": "us-west1-b"}, CONFLICT),
        ("vol-multi-zone-beta", {"beta_zone": "us-west1-a"}, FITS),
        ("vol-multi-zone-beta", {"beta_zone": "us-west1-b"}, CONFLICT),
        ("vol-multi-zone", {"zone": "us-west1-a"}, FITS),
        ("vol-zone", {"uselessLabel": "none"}, FITS),
    ],
    ids=[
        "a node without labels fits any volume",
        "beta zone label matched",
        "beta zone label doesn't match",
        "beta region label matched",
        "beta region label doesn't match",
        "zone label matched",
        "zone label doesn't match",
        "region label matched",
        "region label doesn't match",
        "a zone and region PV on a node with only the zone",
        "a GA zone PV on a node with only the beta zone",
        "a beta zone PV matches the node's GA zone",
        "a beta zone PV against another GA zone",
        "a multi-zone beta PV in one of its zones",
        "a multi-zone beta PV outside its zones",
        "a multi-zone PV (values trimmed) in one of its zones",
        "a node with labels but no topology label fits",
    ],
)
def test_filter_matches_the_bound_volumes_topology_labels_against_the_nodes(
    volume: str, labels: dict[str, str], expected: tuple[Code, tuple[str, ...]]
) -> None:
    pre, status = run(volumezone.new({}, handle_with()), pod_using(f"pvc-{volume}"), node(**labels))
    assert pre.code is Code.SUCCESS
    assert status is not None and (status.code, status.reasons) == expected


@pytest.mark.parametrize(
    ("pod", "objects"),
    [
        (PodInfo.from_api(make_pod().name("p").obj()), ()),
        (PodInfo.from_api(make_pod().name("p").ephemeral("scratch", "wait").obj()), ()),
        (pod_using("pvc-vol-no-labels"), ()),
        (pod_using("pvc-vol-unparseable"), ()),
        (pod_using("unbound"), (("persistentvolumeclaims", make_pvc().name("unbound").storage_class("wait").obj()),)),
    ],
    ids=[
        "a pod without volumes",
        "a generic ephemeral volume (not looked at)",
        "a bound PV without topology labels",
        "a PV whose zone label lists an empty zone (ignored)",
        "an unbound claim of a WaitForFirstConsumer class",
    ],
)
def test_prefilter_skips_pods_without_topology_to_check(pod: PodInfo, objects: tuple[tuple[str, Any], ...]) -> None:
    state = CycleState()
    _, status = volumezone.new({}, handle_with(*objects)).pre_filter(state, pod, [node(zone="a")])
    assert status.code is Code.SKIP
    assert state.get(PRE_FILTER_STATE_KEY) is None


def _class_without_binding_mode() -> dict[str, Any]:
    storage_class = make_storage_class("unset")
    del storage_class["volumeBindingMode"]
    return storage_class


@pytest.mark.parametrize(
    ("claim", "objects", "message"),
    [
        ("missing", (), 'persistentvolumeclaim "missing" not found'),
        ("", (), "PersistentVolumeClaim had no name"),
        (
            "no-class",
            (make_pvc().name("no-class").obj(),),
            "PersistentVolumeClaim had no pv name and storageClass name",
        ),
        (
            "unknown-class",
            (make_pvc().name("unknown-class").storage_class("gold").obj(),),
            'storageclass.storage.k8s.io "gold" not found',
        ),
        (
            "unset-class",
            (make_pvc().name("unset-class").storage_class("unset").obj(), _class_without_binding_mode()),
            'VolumeBindingMode not set for StorageClass "unset"',
        ),
        ("immediate", (make_pvc().name("immediate").storage_class("immediate").obj(),), "PersistentVolume had no name"),
        ("lost", (make_pvc().name("lost").bound("vol-gone").obj(),), 'persistentvolume "vol-gone" not found'),
    ],
    ids=[
        "a missing claim",
        "a claim volume without a claim name",
        "an unbound claim without a class",
        "an unbound claim of a class that does not exist",
        "an unbound claim of a class without a binding mode",
        "an unbound claim of an Immediate class",
        "a claim bound to a PV that does not exist",
    ],
)
def test_prefilter_and_filter_reject_the_pod_with_kube_schedulers_message(
    claim: str, objects: tuple[dict[str, Any], ...], message: str
) -> None:
    kinds = {"PersistentVolumeClaim": "persistentvolumeclaims", "StorageClass": "storageclasses"}
    plugin = volumezone.new({}, handle_with(*((kinds[raw["kind"]], raw) for raw in objects)))
    pod = pod_using(claim)
    pre, _ = run(plugin, pod, node(zone="us-west1-a"))
    assert (pre.code, pre.reasons) == (UNRESOLVABLE, (message,))
    # Without its PreFilter (a profile may disable it), Filter works the volumes out itself.
    status = plugin.filter(CycleState(), pod, node(zone="us-west1-a"))
    assert (status.code, status.reasons) == (UNRESOLVABLE, (message,))


def test_a_pv_usher_cannot_read_holds_the_pod_with_the_reason() -> None:
    broken = make_pv().name("vol-broken").capacity("lots").obj()
    claim = make_pvc().name("pvc-broken").bound("vol-broken").obj()
    plugin = volumezone.new({}, handle_with(("persistentvolumes", broken), ("persistentvolumeclaims", claim)))
    pre, _ = run(plugin, pod_using("pvc-broken"), node(zone="us-west1-a"))
    assert pre.code is UNRESOLVABLE
    assert pre.message.startswith('persistentvolume "vol-broken": spec.capacity.storage: ')


def test_filter_without_prefilter_still_checks_the_volumes_zone() -> None:
    plugin = volumezone.new({}, handle_with())
    status = plugin.filter(CycleState(), pod_using("pvc-vol-zone"), node(zone="us-west1-b"))
    assert (status.code, status.reasons) == CONFLICT


def test_every_bound_volume_must_match() -> None:
    plugin = volumezone.new({}, handle_with())
    pod = pod_using("pvc-vol-zone", "pvc-vol-region")
    assert run(plugin, pod, node(zone="us-west1-a", region="us-west1"))[1] == Status()
    status = run(plugin, pod, node(zone="us-west1-a", region="us-east1"))[1]
    assert status is not None and (status.code, status.reasons) == CONFLICT


def test_the_default_profile_reports_the_zone_conflict_as_kube_scheduler_does() -> None:
    fw = build_framework(default_config("usher").profiles[0], registry=in_tree_registry(), handle=handle_with())
    cache = Cache()
    for name, zone in (("n1", "us-west1-a"), ("n2", "us-west1-b"), ("n3", "us-west1-c")):
        cache.add_or_update_node(make_node().name(name).label(LABEL_ZONE, zone).obj())
    result = schedule(fw, CycleState(), pod_using("pvc-vol-zone"), cache.node_infos(), rng=random.Random(1))
    assert result.node == "n1"
    result = schedule(fw, CycleState(), pod_using("pvc-vol-multi-zone"), cache.node_infos(), rng=random.Random(1))
    assert result.node in ("n1", "n3")
    cache.remove_node("n1")
    result = schedule(fw, CycleState(), pod_using("pvc-vol-zone"), cache.node_infos(), rng=random.Random(1))
    assert result.message == f"0/2 nodes are available: 2 {REASON_CONFLICT}."
    assert result.unschedulable_plugins == {"VolumeZone"}


# ---------------------------------------------------------------------- events and hints


def test_it_registers_kube_schedulers_events() -> None:
    add_update = ActionType.ADD | ActionType.UPDATE
    events = {reg.event: reg.hint for reg in volumezone.new({}, FakeHandle()).events_to_register()}
    assert events == {
        ClusterEvent(Resource.STORAGE_CLASS, ActionType.ADD): class_added,
        ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL): None,
        ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, add_update): claim_changed,
        ClusterEvent(Resource.PERSISTENT_VOLUME, add_update): volume_changed,
    }


@pytest.mark.parametrize(
    ("pod", "old", "new", "hint"),
    [
        (pod_using(), None, make_pvc().name("PVC_1").bound("Vol_1").obj(), QueueingHint.QUEUE_SKIP),
        (pod_using("PVC_2"), None, make_pvc().name("PVC_1").bound("Vol_1").obj(), QueueingHint.QUEUE_SKIP),
        (pod_using("PVC_1"), None, make_pvc().name("PVC_1").namespace("ns1").obj(), QueueingHint.QUEUE_SKIP),
        (pod_using("PVC_1"), None, make_pvc().name("PVC_1").bound("Vol_1").obj(), QueueingHint.QUEUE),
        (
            pod_using("PVC_1"),
            make_pvc().name("PVC_1").obj(),
            make_pvc().name("PVC_1").bound("Vol_1").obj(),
            QueueingHint.QUEUE,
        ),
        (
            pod_using(),
            make_pvc().name("PVC_1").obj(),
            make_pvc().name("PVC_1").bound("Vol_1").obj(),
            QueueingHint.QUEUE_SKIP,
        ),
    ],
    ids=[
        "skip: added, the pod uses no claim",
        "skip: added, the pod uses another claim",
        "skip: added in another namespace",
        "queue: the pod's claim added",
        "queue: the pod's claim updated",
        "skip: updated, the pod uses no claim",
    ],
)
def test_claim_events_requeue_the_pods_using_the_claim(pod: PodInfo, old: Any, new: Any, hint: QueueingHint) -> None:
    assert claim_changed(pod, old, new) is hint


@pytest.mark.parametrize(
    ("added", "hint"),
    [
        (_class_without_binding_mode(), QueueingHint.QUEUE_SKIP),
        (make_storage_class("SC_1", binding="Immediate"), QueueingHint.QUEUE_SKIP),
        (make_storage_class("SC_1"), QueueingHint.QUEUE),
    ],
    ids=["skip: no binding mode", "skip: Immediate", "queue: WaitForFirstConsumer"],
)
def test_only_an_added_wait_for_first_consumer_class_requeues(added: dict[str, Any], hint: QueueingHint) -> None:
    assert class_added(pod_using("PVC_1"), None, added) is hint


def _pv(**labels: str) -> dict[str, Any]:
    builder = make_pv().name("Vol_1")
    for key, value in labels.items():
        builder.label(key, value)
    return builder.obj()


@pytest.mark.parametrize(
    ("old", "new", "hint"),
    [
        (None, _pv(**{LABEL_BETA_ZONE: "us-west1-b"}), QueueingHint.QUEUE),
        (_pv(**{LABEL_BETA_ZONE: "us-west1-a"}), _pv(**{LABEL_BETA_ZONE: "us-west1-b"}), QueueingHint.QUEUE),
        (
            _pv(**{LABEL_BETA_ZONE: "us-west1-a"}),
            _pv(**{LABEL_BETA_ZONE: "us-west1-a", LABEL_ZONE: "zone"}),
            QueueingHint.QUEUE,
        ),
        (
            _pv(**{LABEL_BETA_ZONE: "us-west1-a", LABEL_ZONE: "zone"}),
            _pv(**{LABEL_BETA_ZONE: "us-west1-a", LABEL_ZONE: "zone", "other": "x"}),
            QueueingHint.QUEUE_SKIP,
        ),
        (_pv(**{LABEL_ZONE: "a__b"}), _pv(**{LABEL_ZONE: "b__a"}), QueueingHint.QUEUE_SKIP),
    ],
    ids=[
        "queue: a PV added",
        "queue: its zone changed",
        "queue: a topology label added",
        "skip: another label changed",
        "skip: the same zones in another order",
    ],
)
def test_volume_events_requeue_on_topology_changes(old: Any, new: Any, hint: QueueingHint) -> None:
    assert volume_changed(pod_using("PVC_1"), old, new) is hint


def test_pv_topologies_reads_the_four_labels_in_kube_schedulers_order() -> None:
    raw = _pv(**{LABEL_REGION: "r", LABEL_ZONE: "z1__z2", LABEL_BETA_REGION: "br", LABEL_BETA_ZONE: "bz"})
    assert pv_topologies(raw) == [
        PVTopology("Vol_1", LABEL_BETA_ZONE, frozenset({"bz"})),
        PVTopology("Vol_1", LABEL_BETA_REGION, frozenset({"br"})),
        PVTopology("Vol_1", LABEL_ZONE, frozenset({"z1", "z2"})),
        PVTopology("Vol_1", LABEL_REGION, frozenset({"r"})),
    ]


def test_it_takes_no_args() -> None:
    with pytest.raises(PluginArgsError):
        volumezone.new({"anything": 1}, FakeHandle())
