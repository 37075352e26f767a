"""VolumeRestrictions: in-tree disks shared on a node, ReadWriteOncePod claims shared anywhere (kube-scheduler's)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.builders import make_node, make_pod, make_pv, make_pvc
from tests.frameworks import FakeHandle
from usher.config import default_config
from usher.core.cache import Cache, NodeInfo
from usher.core.cycle import schedule
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import volumerestrictions
from usher.core.plugins.registry import in_tree_registry
from usher.core.plugins.volumerestrictions import (
    PRE_FILTER_STATE_KEY,
    REASON_DISK_CONFLICT,
    REASON_READ_WRITE_ONCE_POD_CONFLICT,
    VolumeRestrictions,
    assigned_pod_deleted,
    claim_added,
)
from usher.core.types import Code, PodInfo, QueueingHint, Status

RWOP, RWO, RWX = "ReadWriteOncePod", "ReadWriteOnce", "ReadWriteMany"

GCE = {"gcePersistentDisk": {"pdName": "foo"}}
GCE_OTHER = {"gcePersistentDisk": {"pdName": "bar"}}
GCE_READ_ONLY = {"gcePersistentDisk": {"pdName": "foo", "readOnly": True}}
EBS = {"awsElasticBlockStore": {"volumeID": "foo"}}
EBS_OTHER = {"awsElasticBlockStore": {"volumeID": "bar"}}
EBS_READ_ONLY = {"awsElasticBlockStore": {"volumeID": "foo", "readOnly": True}}
RBD = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar", "fsType": "ext4"}}
RBD_SHARED_MONITOR = {"rbd": {"monitors": ["b", "c"], "pool": "foo", "image": "bar"}}
RBD_OTHER_MONITORS = {"rbd": {"monitors": ["c", "d"], "pool": "foo", "image": "bar", "fsType": "ext4"}}
RBD_OTHER_IMAGE = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "baz"}}
RBD_READ_ONLY = {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar", "readOnly": True}}
ISCSI = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2016-12.server:storage.target01", "lun": 0}}
ISCSI_OTHER = {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": "iqn.2017-12.server:storage.target01", "lun": 0}}
ISCSI_READ_ONLY = {"iscsi": {**ISCSI["iscsi"], "readOnly": True}}


def pod_with(*sources: dict[str, Any], name: str = "p", node: str = "") -> PodInfo:
    builder = make_pod().name(name)
    for i, source in enumerate(sources):
        builder.volume(f"v{i}", **source)
    if node:
        builder.node(node)
    return PodInfo.from_api(builder.obj())


def pod_using(*claims: str, name: str = "p", namespace: str = "default", node: str = "") -> PodInfo:
    builder = make_pod().name(name).namespace(namespace)
    for claim in claims:
        builder.pvc(claim)
    if node:
        builder.node(node)
    return PodInfo.from_api(builder.obj())


def cluster(*pods: PodInfo) -> list[NodeInfo]:
    """Nodes n1 and n2 with ``pods`` (each on its spec.nodeName)."""
    cache = Cache()
    for name in ("n1", "n2"):
        cache.add_or_update_node(make_node().name(name).obj())
    for pod in pods:
        cache.add_or_update_pod(pod)
    return cache.node_infos()


def setup(*claims: dict[str, Any]) -> VolumeRestrictions:
    handle = FakeHandle()
    for claim in claims:
        handle.volumes.on_event("persistentvolumeclaims", False, claim)
    return volumerestrictions.new({}, handle)


def claim(name: str, *modes: str, namespace: str = "default") -> dict[str, Any]:
    return make_pvc().name(name).namespace(namespace).access_modes(*modes).obj()


def run(plugin: VolumeRestrictions, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[Status, list[Status]]:
    """PreFilter's status, and each node's Filter status when PreFilter succeeded."""
    state = CycleState()
    _, pre = plugin.pre_filter(state, pod, nodes)
    if not pre.ok:
        return pre, []
    return pre, [plugin.filter(state, pod, node) for node in nodes]


# ---------------------------------------------------------------------- in-tree disks on the node


@pytest.mark.parametrize(
    ("wanted", "existing", "conflict"),
    [
        (GCE, GCE, True),
        (GCE, GCE_OTHER, False),
        (GCE_READ_ONLY, GCE_READ_ONLY, False),
        (GCE_READ_ONLY, GCE, True),
        (EBS, EBS, True),
        (EBS, EBS_OTHER, False),
        (EBS_READ_ONLY, EBS_READ_ONLY, True),
        (RBD, RBD, True),
        (RBD, RBD_SHARED_MONITOR, True),
        (RBD, RBD_OTHER_MONITORS, False),
        (RBD, RBD_OTHER_IMAGE, False),
        (RBD_READ_ONLY, RBD_READ_ONLY, False),
        (ISCSI, ISCSI, True),
        (ISCSI, ISCSI_OTHER, False),
        (ISCSI_READ_ONLY, ISCSI_READ_ONLY, False),
        (ISCSI_READ_ONLY, ISCSI, True),
        (GCE, EBS, False),
    ],
    ids=[
        "the same GCE PD",
        "different GCE PDs",
        "the same GCE PD read-only by both",
        "the same GCE PD read-only by one",
        "the same EBS volume",
        "different EBS volumes",
        "the same EBS volume even read-only",
        "the same RBD image",
        "the same RBD image through one shared monitor",
        "the same RBD pool and image on other monitors",
        "another RBD image",
        "the same RBD image read-only by both",
        "the same ISCSI IQN",
        "different ISCSI IQNs",
        "the same ISCSI IQN read-only by both",
        "the same ISCSI IQN read-only by one",
        "a GCE PD and an EBS volume",
    ],
)
def test_an_in_tree_disk_used_on_the_node_rules_out_that_node_only(
    wanted: dict[str, Any], existing: dict[str, Any], conflict: bool
) -> None:
    nodes = cluster(pod_with(existing, name="holder", node="n1"))
    pre, statuses = run(setup(), pod_with(wanted), nodes)
    assert pre.code is Code.SUCCESS
    expected = (Code.UNSCHEDULABLE, (REASON_DISK_CONFLICT,)) if conflict else (Code.SUCCESS, ())
    assert (statuses[0].code, statuses[0].reasons) == expected
    assert statuses[1].code is Code.SUCCESS


@pytest.mark.parametrize(
    ("pod", "claims"),
    [
        (pod_with(), ()),
        (pod_with({"emptyDir": {}}, {"configMap": {"name": "c"}}), ()),
        (pod_using("rwop"), (claim("rwop", RWOP),)),
        (pod_using("rwx"), (claim("rwx", RWX),)),
    ],
    ids=[
        "a pod without volumes",
        "a pod whose volumes have no restrictions",
        "a ReadWriteOncePod claim nobody uses",
        "a ReadWriteMany claim another pod uses",
    ],
)
def test_prefilter_skips_pods_with_nothing_to_check(pod: PodInfo, claims: tuple[dict[str, Any], ...]) -> None:
    nodes = cluster(pod_using("rwx", name="other", node="n1"))
    state = CycleState()
    _, status = setup(*claims).pre_filter(state, pod, nodes)
    assert status.code is Code.SKIP
    assert state.get(PRE_FILTER_STATE_KEY) is None


def test_every_claim_of_the_pod_must_exist() -> None:
    pre, _ = run(setup(claim("present", RWO)), pod_using("present", "missing"), cluster())
    assert (pre.code, pre.reasons) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ('persistentvolumeclaim "missing" not found',),
    )


def test_a_claim_usher_cannot_read_holds_the_pod_with_the_reason() -> None:
    pre, _ = run(setup(make_pvc().name("broken").request("lots").obj()), pod_using("broken"), cluster())
    assert pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert pre.message.startswith('persistentvolumeclaim "broken": spec.resources.requests.storage: ')


# ---------------------------------------------------------------------- ReadWriteOncePod


@pytest.mark.parametrize(
    ("claims", "pod", "existing", "conflict"),
    [
        ((claim("rwop", RWOP),), pod_using("rwop"), [pod_using("rwop", name="holder", node="n2")], True),
        (
            (claim("rwop", RWOP, namespace="team"),),
            pod_using("rwop", namespace="team"),
            [pod_using("rwop", name="holder", namespace="team", node="n2")],
            True,
        ),
        (
            (claim("rwop-1", RWOP), claim("rwop-2", RWOP)),
            pod_using("rwop-1", "rwop-2"),
            [pod_using("rwop-1", "rwop-2", name="holder", node="n1")],
            True,
        ),
        ((claim("rwop", RWOP, RWO),), pod_using("rwop"), [pod_using("rwop", name="holder", node="n1")], True),
        ((claim("rwo", RWO),), pod_using("rwo"), [pod_using("rwo", name="holder", node="n1")], False),
        (
            (claim("rwop", RWOP), claim("rwop", RWOP, namespace="other")),
            pod_using("rwop"),
            [pod_using("rwop", name="holder", namespace="other", node="n1")],
            False,
        ),
    ],
    ids=[
        "a ReadWriteOncePod claim used on another node",
        "a ReadWriteOncePod claim used in the pod's own namespace",
        "two ReadWriteOncePod claims in use",
        "a claim with ReadWriteOncePod among its modes",
        "a ReadWriteOnce claim in use (no restriction across pods)",
        "a claim of the same name in another namespace",
    ],
)
def test_a_read_write_once_pod_claim_in_use_anywhere_rules_out_every_node(
    claims: tuple[dict[str, Any], ...], pod: PodInfo, existing: list[PodInfo], conflict: bool
) -> None:
    pre, statuses = run(setup(*claims), pod, cluster(*existing))
    if not conflict:
        assert pre.code is Code.SKIP
        return
    assert pre.code is Code.SUCCESS
    assert [(s.code, s.reasons) for s in statuses] == [
        (Code.UNSCHEDULABLE, (REASON_READ_WRITE_ONCE_POD_CONFLICT,)),
        (Code.UNSCHEDULABLE, (REASON_READ_WRITE_ONCE_POD_CONFLICT,)),
    ]


def test_preemptions_dry_run_frees_the_claim_by_removing_its_holder_on_a_cloned_state() -> None:
    plugin = setup(claim("rwop", RWOP))
    holder = pod_using("rwop", name="holder", node="n1")
    nodes = cluster(holder)
    pod = pod_using("rwop")
    state = CycleState()
    _, pre = plugin.pre_filter(state, pod, nodes)
    assert pre.ok
    dry_run = state.clone()
    plugin.remove_pod(dry_run, pod, holder, nodes[0])
    assert plugin.filter(dry_run, pod, nodes[0]).ok
    assert plugin.filter(state, pod, nodes[0]).reasons == (REASON_READ_WRITE_ONCE_POD_CONFLICT,)
    plugin.add_pod(dry_run, pod, holder, nodes[0])
    assert plugin.filter(dry_run, pod, nodes[0]).reasons == (REASON_READ_WRITE_ONCE_POD_CONFLICT,)


def test_filter_without_prefilter_state_is_an_error() -> None:
    status = setup().filter(CycleState(), pod_with(GCE), cluster()[0])
    assert (status.code, status.message) == (Code.ERROR, f'cannot read "{PRE_FILTER_STATE_KEY}" from cycleState')


def test_the_default_profile_reports_the_conflicts_as_kube_scheduler_does() -> None:
    handle = FakeHandle()
    bound = make_pvc().name("rwop").access_modes(RWOP).bound("pv-rwop").obj()
    handle.volumes.on_event("persistentvolumeclaims", False, bound)
    handle.volumes.on_event("persistentvolumes", False, make_pv().name("pv-rwop").claimed_by("default", "rwop").obj())
    fw = build_framework(default_config("usher").profiles[0], registry=in_tree_registry(), handle=handle)
    nodes = cluster(pod_with(GCE, name="disk-holder", node="n1"))
    result = schedule(fw, CycleState(), pod_with(GCE), nodes, rng=random.Random(1))
    assert result.node == "n2"
    nodes = cluster(pod_using("rwop", name="claim-holder", node="n1"))
    result = schedule(fw, CycleState(), pod_using("rwop"), nodes, rng=random.Random(1))
    assert result.node is None
    assert result.message == f"0/2 nodes are available: 2 {REASON_READ_WRITE_ONCE_POD_CONFLICT}."
    assert result.unschedulable_plugins == {"VolumeRestrictions"}


# ---------------------------------------------------------------------- events and hints


def test_it_registers_kube_schedulers_events() -> None:
    events = {reg.event: reg.hint for reg in setup().events_to_register()}
    assert events == {
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE): assigned_pod_deleted,
        ClusterEvent(Resource.NODE, ActionType.ADD): None,
        ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD): claim_added,
    }


@pytest.mark.parametrize(
    ("pod", "deleted", "hint"),
    [
        (pod_with(GCE), pod_with(GCE, name="gone", node="n1"), QueueingHint.QUEUE),
        (pod_with(GCE), pod_with(GCE_OTHER, name="gone", node="n1"), QueueingHint.QUEUE_SKIP),
        (pod_with(EBS), pod_with(EBS, name="gone", node="n1"), QueueingHint.QUEUE),
        (pod_with(EBS), pod_with(EBS_OTHER, name="gone", node="n1"), QueueingHint.QUEUE_SKIP),
        (pod_with(RBD), pod_with(RBD, name="gone", node="n1"), QueueingHint.QUEUE),
        (pod_with(RBD), pod_with(RBD_OTHER_MONITORS, name="gone", node="n1"), QueueingHint.QUEUE_SKIP),
        (pod_with(ISCSI), pod_with(ISCSI, name="gone", node="n1"), QueueingHint.QUEUE),
        (pod_with(ISCSI), pod_with(ISCSI_OTHER, name="gone", node="n1"), QueueingHint.QUEUE_SKIP),
        (pod_using("rwop"), pod_using("rwop", name="gone", node="n1"), QueueingHint.QUEUE),
        (pod_using("claim-1"), pod_using("claim-2", name="gone", node="n1"), QueueingHint.QUEUE_SKIP),
        (pod_using("rwop"), pod_using("rwop", name="gone", namespace="other", node="n1"), QueueingHint.QUEUE_SKIP),
    ],
    ids=[
        "queue: the GCE PD it clashed with",
        "skip: another GCE PD",
        "queue: the EBS volume it clashed with",
        "skip: another EBS volume",
        "queue: the RBD image it clashed with",
        "skip: an RBD image on other monitors",
        "queue: the ISCSI IQN it clashed with",
        "skip: another ISCSI IQN",
        "queue: a pod using the same claim",
        "skip: a pod using another claim",
        "skip: a pod of another namespace",
    ],
)
def test_a_deleted_pod_requeues_only_pods_it_blocked(pod: PodInfo, deleted: PodInfo, hint: QueueingHint) -> None:
    assert assigned_pod_deleted(pod, deleted.raw, None) is hint


@pytest.mark.parametrize(
    ("pod", "added", "hint"),
    [
        (pod_using("claim-1", "claim-2"), claim("claim-1", RWX), QueueingHint.QUEUE),
        (pod_using("claim-1"), claim("claim-2", RWX), QueueingHint.QUEUE_SKIP),
        (pod_using("claim-1", namespace="kube-system"), claim("claim-1", RWX), QueueingHint.QUEUE_SKIP),
    ],
    ids=["queue: one of its claims", "skip: a claim it does not use", "skip: a claim of another namespace"],
)
def test_an_added_claim_requeues_the_pods_using_it(pod: PodInfo, added: dict[str, Any], hint: QueueingHint) -> None:
    assert claim_added(pod, None, added) is hint


def test_it_takes_no_args() -> None:
    with pytest.raises(PluginArgsError):
        volumerestrictions.new({"anything": 1}, FakeHandle())
