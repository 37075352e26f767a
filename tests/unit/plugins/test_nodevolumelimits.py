"""NodeVolumeLimits: per CSI driver, a node's attach limit (kube-scheduler's CSILimits, csi_test.go's cases)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.builders import make_csi_driver, make_csi_node, make_node, make_pod, make_pv, make_pvc, make_storage_class
from tests.frameworks import FakeHandle
from usher.config import default_config
from usher.core.cache import Cache, NodeInfo
from usher.core.cycle import schedule
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import nodevolumelimits
from usher.core.plugins.nodevolumelimits import (
    REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NodeVolumeLimits,
    assigned_pod_deleted,
    claim_added,
    csi_node_updated,
)
from usher.core.plugins.registry import in_tree_registry
from usher.core.types import Code, PodInfo, QueueingHint, Status
from usher.core.volumes.csitranslation import TranslationError, inline_volume_handle, pv_volume_handle

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
EBS_IN_TREE = "kubernetes.io/aws-ebs"
HOSTPATH_IN_TREE = "kubernetes.io/hostpath"
NODE = "node-1"
CLASS = "csi-sc"

EXCEEDED = (Code.UNSCHEDULABLE, (REASON_MAX_VOLUME_COUNT_EXCEEDED,))
FITS = (Code.SUCCESS, ())


def claim_name(driver: str, index: int | str) -> str:
    return f"csi-{driver.replace('/', '-')}-{index}"


def volumes_for(driver: str) -> list[tuple[str, dict[str, Any]]]:
    """csi_test.go's fixtures for one driver: PVs csi-<driver>-0..3 (CSI, or the in-tree source for in-tree
    plugin names), each with a claim of the same name bound to it."""
    objects: list[tuple[str, dict[str, Any]]] = []
    for j in range(4):
        name = claim_name(driver, j)
        builder = make_pv().name(name).claimed_by("default", name)
        if driver == EBS_IN_TREE:
            builder.source(awsElasticBlockStore={"volumeID": name})
        elif driver == HOSTPATH_IN_TREE:
            builder.source(hostPath={"path": "/tmp"})
        else:
            builder.csi(driver, name)
        objects.append(("persistentvolumes", builder.obj()))
        objects.append(("persistentvolumeclaims", make_pvc().name(name).bound(name).obj()))
    return objects


def setup(
    drivers: tuple[str, ...], limit_source: str = "csinode", limit: int = 0, extra: tuple[Any, ...] = ()
) -> NodeVolumeLimits:
    """``limit_source``: "csinode" (every driver with ``limit``), "csinode-with-no-limit", "no-csi-driver" (a
    CSINode without drivers) or "none" (no CSINode). Claims csi-4 (unbound, class csi-sc provisioned by the
    first driver), csi-5 (unbound, no class) and csi-6 (class csi-sc, bound to a PV that does not exist)."""
    handle = FakeHandle()
    objects: list[tuple[str, dict[str, Any]]] = []
    for driver in drivers:
        objects += volumes_for(driver)
    objects += [
        ("storageclasses", make_storage_class(CLASS, provisioner=drivers[0])),
        ("persistentvolumeclaims", make_pvc().name("csi-4").storage_class(CLASS).obj()),
        ("persistentvolumeclaims", make_pvc().name("csi-5").obj()),
        ("persistentvolumeclaims", make_pvc().name("csi-6").storage_class(CLASS).bound("missing-in-action").obj()),
    ]
    if limit_source == "csinode":
        objects.append(("csinodes", make_csi_node(NODE, dict.fromkeys(drivers, limit), migrated=EBS_IN_TREE)))
    elif limit_source == "csinode-with-no-limit":
        objects.append(("csinodes", make_csi_node(NODE, dict.fromkeys(drivers), migrated=EBS_IN_TREE)))
    elif limit_source == "no-csi-driver":
        objects.append(("csinodes", make_csi_node(NODE, {})))
    for kind, raw in (*objects, *extra):
        handle.volumes.on_event(kind, False, raw)
    return nodevolumelimits.new({}, handle)


def pod_using(*claims: str) -> PodInfo:
    builder = make_pod()
    for claim in claims:
        builder.pvc(claim)
    return PodInfo.from_api(builder.obj())


def pod_with(*sources: dict[str, Any], name: str = "", namespace: str = "", uid: str = "") -> PodInfo:
    builder = make_pod()
    if name:
        builder.name(name)
    if namespace:
        builder.namespace(namespace)
    if uid:
        builder.uid(uid)
    for i, source in enumerate(sources):
        builder.volume(str(source.get("name", f"v{i}")), **{k: v for k, v in source.items() if k != "name"})
    return PodInfo.from_api(builder.obj())


def node_with(*pods: PodInfo) -> NodeInfo:
    cache = Cache()
    info = cache.add_or_update_node(make_node().name(NODE).obj())
    for pod in pods:
        raw = dict(pod.raw)
        raw["spec"] = {**raw["spec"], "nodeName": NODE}
        cache.add_or_update_pod(PodInfo.from_api(raw))
    return info


def run(plugin: NodeVolumeLimits, pod: PodInfo, node: NodeInfo) -> Status:
    state = CycleState()
    _, pre = plugin.pre_filter(state, pod, [node])
    if pre.code is Code.SKIP:
        return pre
    assert pre.ok
    return plugin.filter(state, pod, node)


def ephemeral_claim(pod: str, volume: str, owner: str | None) -> tuple[str, dict[str, Any]]:
    builder = make_pvc().name(f"{pod}-{volume}").namespace("test").storage_class(CLASS)
    if owner is not None:
        builder.owned_by(owner)
    return "persistentvolumeclaims", builder.obj()


EPHEMERAL = {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
INLINE_EBS = {"awsElasticBlockStore": {"volumeID": "aws-inline1"}}
CONFIG_MAP_AND_SECRET = ({"configMap": {"name": "c"}}, {"secret": {"secretName": "s"}})

# csi_test.go's pods
running = pod_using(claim_name(EBS, 3))
pending = pod_using("csi-4")
pending_too = pod_using("csi-4")
missing_pv = pod_using("csi-6")
no_class = pod_using("csi-5")
gce_two = pod_using(claim_name(GCE, 1), claim_name(GCE, 2))
in_tree_one = pod_using(claim_name(EBS_IN_TREE, 0))
in_tree_two = pod_using(claim_name(EBS_IN_TREE, 1), claim_name(EBS_IN_TREE, 2))
ebs_one = pod_using(claim_name(EBS, 0))
ebs_two = pod_using(claim_name(EBS, 1), claim_name(EBS, 2))
hostpath_one = pod_using(claim_name(HOSTPATH_IN_TREE, 0))
ephemeral_pod = pod_with({"name": "xyz", **EPHEMERAL}, name="abc", namespace="test", uid="12345")
ephemeral_two = pod_with(
    {"name": "x", **EPHEMERAL}, {"name": "y", **EPHEMERAL}, name="abc", namespace="test", uid="12345II"
)
inline = pod_with(INLINE_EBS)
inline_same_handle = pod_with({"awsElasticBlockStore": {"volumeID": claim_name(EBS, 1)}})

BOTH_EBS = (EBS_IN_TREE, EBS)
OWNED = (ephemeral_claim("abc", "xyz", "12345"),)


@pytest.mark.parametrize(
    ("pod", "existing", "drivers", "limit_source", "limit", "extra", "expected"),
    [
        (ebs_one, [running, ebs_two], (EBS,), "csinode", 4, (), FITS),
        (ebs_one, [running, ebs_two], (EBS,), "csinode", 2, (), EXCEEDED),
        (ebs_one, [running, ebs_two], (EBS,), "csinode-with-no-limit", 2, (), FITS),
        (ebs_one, [pending, ebs_two], (EBS,), "csinode", 2, (), EXCEEDED),
        (ebs_one, [pending, pending_too, ebs_two], (EBS,), "csinode", 4, (), FITS),
        (ebs_one, [missing_pv, ebs_two], (EBS,), "csinode", 2, (), EXCEEDED),
        (ebs_one, [running, no_class], (EBS,), "csinode", 2, (), FITS),
        (ebs_one, [gce_two, ebs_two], (EBS, GCE), "csinode", 2, (), EXCEEDED),
        (gce_two, [ebs_two, running], (EBS, GCE), "csinode", 2, (), FITS),
        (in_tree_one, [in_tree_two], BOTH_EBS, "csinode", 2, (), EXCEEDED),
        (inline, [in_tree_two], BOTH_EBS, "none", 0, (), FITS),
        (pending, [in_tree_two], BOTH_EBS, "csinode", 2, (), EXCEEDED),
        (in_tree_one, [in_tree_two], BOTH_EBS, "csinode-with-no-limit", 2, (), FITS),
        (hostpath_one, [ebs_two], (HOSTPATH_IN_TREE, EBS), "csinode", 2, (), FITS),
        (inline, [in_tree_two], BOTH_EBS, "csinode", 2, (), EXCEEDED),
        (in_tree_one, [ebs_two], BOTH_EBS, "csinode", 2, (), EXCEEDED),
        (inline, [ebs_two, in_tree_one], BOTH_EBS, "csinode", 3, (), EXCEEDED),
        (inline_same_handle, [ebs_two, in_tree_one], BOTH_EBS, "csinode", 3, (), FITS),
        (ebs_one, [in_tree_two], BOTH_EBS, "csinode", 2, (), EXCEEDED),
        (ephemeral_pod, [], (EBS,), "csinode-with-no-limit", 0, OWNED, FITS),
        (ephemeral_pod, [running, ebs_two], (EBS,), "csinode", 2, OWNED, EXCEEDED),
        (
            ebs_one,
            [running, ephemeral_two],
            (EBS,),
            "csinode",
            2,
            (ephemeral_claim("abc", "x", "12345II"), ephemeral_claim("abc", "y", "12345II")),
            EXCEEDED,
        ),
        (ebs_one, [running, ephemeral_pod, ebs_two], (EBS,), "csinode", 3, OWNED, EXCEEDED),
        (ebs_one, [running, ephemeral_pod, ebs_two], (EBS,), "csinode", 5, OWNED, FITS),
        (
            pod_with(*CONFIG_MAP_AND_SECRET, {"persistentVolumeClaim": {"claimName": claim_name(EBS, 0)}}),
            [],
            (EBS,),
            "csinode",
            2,
            (),
            FITS,
        ),
        (pod_with(*CONFIG_MAP_AND_SECRET, INLINE_EBS), [in_tree_two], BOTH_EBS, "csinode", 2, (), EXCEEDED),
        (ebs_one, [pod_using("not-there"), ebs_two], (EBS,), "csinode", 3, (), FITS),
    ],
    ids=[
        "fits when node volume limit >= new pods CSI volume",
        "doesn't when node volume limit <= pods CSI volume",
        "fits when the driver does not report a limit",
        "count pending PVCs towards volume limit <= pods CSI volume",
        "count multiple pending pvcs (one claim counted once) towards volume limit >= pods CSI volume",
        "should count PVCs with invalid PV name but valid SC",
        "don't count pvcs with missing SC towards volume limit",
        "count pvcs with the same type towards volume limit",
        "don't count pvcs with different type towards volume limit",
        "should count in-tree volumes if migration is enabled",
        "nil csi node",
        "should count unbound in-tree volumes if migration is enabled",
        "should not limit pod if volume used does not report limits",
        "should not count non-migratable in-tree volumes",
        "should count in-tree inline volumes if migration is enabled",
        "should count in-tree and csi volumes (when scheduling in-tree volumes)",
        "should count in-tree, inline and csi volumes (when scheduling in-tree volumes)",
        "should not count an inline volume twice when it has the same CSI handle as an attached one",
        "should count in-tree and csi volumes (when scheduling csi volumes)",
        "ephemeral volume unbound",
        "ephemeral doesn't when node volume limit <= pods CSI volume",
        "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume",
        "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume",
        "persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume",
        "don't skip Filter when the pod has pvcs",
        "don't skip Filter when the pod has inline migratable volumes",
        "an existing pod's missing claim is not counted",
    ],
)
def test_filter_counts_unique_volumes_per_driver_against_the_csinode_limit(
    pod: PodInfo,
    existing: list[PodInfo],
    drivers: tuple[str, ...],
    limit_source: str,
    limit: int,
    extra: tuple[Any, ...],
    expected: tuple[Code, tuple[str, ...]],
) -> None:
    status = run(setup(drivers, limit_source, limit, extra), pod, node_with(*existing))
    assert (status.code, status.reasons) == expected


@pytest.mark.parametrize(
    ("pod", "existing", "extra", "expected"),
    [
        (
            ephemeral_pod,
            [],
            (),
            (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found',
            ),
        ),
        (
            pod_with(*CONFIG_MAP_AND_SECRET, {"name": "xyz", **EPHEMERAL}, name="abc", namespace="test"),
            [],
            (),
            (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found',
            ),
        ),
        (
            pod_using("nowhere"),
            [],
            (),
            (
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                'looking up PVC default/nowhere: persistentvolumeclaim "nowhere" not found',
            ),
        ),
        (
            ephemeral_pod,
            [],
            (ephemeral_claim("abc", "xyz", None),),
            (Code.ERROR, "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"),
        ),
        (
            ebs_one,
            [ephemeral_pod],
            (ephemeral_claim("abc", "xyz", "someone-else"),),
            (Code.ERROR, "PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"),
        ),
        (
            pod_with({"awsElasticBlockStore": {"volumeID": "aws://us-east-1a/not-a-volume"}}),
            [],
            (),
            (
                Code.ERROR,
                "converting volume(v0) from inline to csi: failed to translate Kubernetes ID to EBS Volume ID "
                "Invalid format for AWS volume (aws://us-east-1a/not-a-volume)",
            ),
        ),
        (
            pod_with({"azureDisk": {"diskName": "d", "diskURI": "uri", "kind": "Shared"}}),
            [],
            (),
            (Code.ERROR, "converting volume(v0) from inline to csi: kind(Shared) is not supported in csi migration"),
        ),
        (
            pod_with({"persistentVolumeClaim": {"claimName": ""}}),
            [],
            (),
            (Code.ERROR, "PersistentVolumeClaim had no name"),
        ),
    ],
    ids=[
        "ephemeral volume missing",
        "don't skip Filter when the pod has ephemeral volumes",
        "the pod's claim missing",
        "ephemeral volume not owned",
        "an existing pod's ephemeral volume not owned",
        "an inline EBS volume id csi-translation-lib cannot translate",
        "an inline Azure disk that is not managed",
        "a claim volume without a claim name",
    ],
)
def test_filter_fails_with_kube_schedulers_status(
    pod: PodInfo, existing: list[PodInfo], extra: tuple[Any, ...], expected: tuple[Code, str]
) -> None:
    status = run(setup((EBS,), "csinode", 10, extra), pod, node_with(*existing))
    assert (status.code, status.message) == expected


@pytest.mark.parametrize(
    "pod",
    [
        PodInfo.from_api(make_pod().obj()),
        pod_with(*CONFIG_MAP_AND_SECRET),
        pod_with({"emptyDir": {}}, {"hostPath": {"path": "/tmp"}}, {"csi": {"driver": EBS}}),
    ],
    ids=[
        "a pod without volumes",
        "skip Filter when the pod only uses secrets and configmaps",
        "inline CSI, hostPath and emptyDir volumes are not counted",
    ],
)
def test_prefilter_skips_pods_without_attachable_volumes(pod: PodInfo) -> None:
    _, status = setup((EBS,)).pre_filter(CycleState(), pod, [])
    assert status.code is Code.SKIP


# ---------------------------------------------------------------------- VolumeLimitScaling (on in 1.37)


@pytest.mark.parametrize(
    ("limit_source", "limit", "driver_spec", "expected"),
    [
        ("no-csi-driver", 0, {}, FITS),
        (
            "no-csi-driver",
            0,
            {"preventPodSchedulingIfMissing": True},
            (Code.UNSCHEDULABLE, (f"{EBS} CSI driver is not installed on the node",)),
        ),
        (
            "none",
            0,
            {"preventPodSchedulingIfMissing": True},
            (Code.UNSCHEDULABLE, (f"{EBS} CSI driver is not installed on the node",)),
        ),
        ("csinode", 2, {"preventPodSchedulingIfMissing": True}, FITS),
        ("csinode-with-no-limit", 0, {"preventPodSchedulingIfMissing": True}, FITS),
        ("no-csi-driver", 0, None, FITS),
    ],
    ids=[
        "allow scheduling when CSIDriver exists but PreventPodSchedulingIfMissing is not set",
        "fail when driver not installed and PreventPodSchedulingIfMissing is true",
        "fail when the node has no CSINode and PreventPodSchedulingIfMissing is true",
        "driver installed within limit",
        "driver installed without a limit",
        "allow scheduling when CSIDriver object missing",
    ],
)
def test_a_driver_that_opts_in_must_be_installed_on_the_node(
    limit_source: str, limit: int, driver_spec: dict[str, Any] | None, expected: tuple[Code, tuple[str, ...]]
) -> None:
    extra = () if driver_spec is None else (("csidrivers", make_csi_driver(EBS, **driver_spec)),)
    status = run(setup((EBS,), limit_source, limit, extra), ebs_one, node_with())
    assert (status.code, status.reasons) == expected


def test_without_a_csinode_migration_is_off_so_an_inline_in_tree_volume_needs_no_driver() -> None:
    extra = (("csidrivers", make_csi_driver(EBS, preventPodSchedulingIfMissing=True)),)
    assert run(setup(BOTH_EBS, "none", 0, extra), inline, node_with()) == Status()
    status = run(setup(BOTH_EBS, "none", 0, extra), ebs_one, node_with())
    assert status.reasons == (f"{EBS} CSI driver is not installed on the node",)


def test_unbound_claims_of_one_class_count_as_one_volume_each() -> None:
    extra = (("persistentvolumeclaims", make_pvc().name("csi-7").storage_class(CLASS).obj()),)
    status = run(setup((EBS,), "csinode", 2, extra), ebs_one, node_with(pod_using("csi-4", "csi-7")))
    assert (status.code, status.reasons) == EXCEEDED
    status = run(setup((EBS,), "csinode", 3, extra), ebs_one, node_with(pod_using("csi-4", "csi-7")))
    assert status == Status()


def test_the_default_profile_reports_the_limit_as_kube_scheduler_does() -> None:
    handle = FakeHandle()
    for kind, raw in volumes_for(EBS):
        handle.volumes.on_event(kind, False, raw)
    handle.volumes.on_event("csinodes", False, make_csi_node("n1", {EBS: 1}))
    handle.volumes.on_event("csinodes", False, make_csi_node("n2", {EBS: 2}))
    fw = build_framework(default_config("usher").profiles[0], registry=in_tree_registry(), handle=handle)
    cache = Cache()
    for name in ("n1", "n2"):
        cache.add_or_update_node(make_node().name(name).obj())
        raw = make_pod().name(f"holder-{name}").node(name).pvc(claim_name(EBS, 3)).obj()
        cache.add_or_update_pod(PodInfo.from_api(raw))
    result = schedule(fw, CycleState(), ebs_one, cache.node_infos(), rng=random.Random(1))
    assert result.node == "n2"
    result = schedule(fw, CycleState(), ebs_two, cache.node_infos(), rng=random.Random(1))
    assert result.message == f"0/2 nodes are available: 2 {REASON_MAX_VOLUME_COUNT_EXCEEDED}."
    assert result.unschedulable_plugins == {"NodeVolumeLimits"}


# ---------------------------------------------------------------------- csi-translation-lib


@pytest.mark.parametrize(
    ("pv", "expected"),
    [
        (
            make_pv().name("pv").source(gcePersistentDisk={"pdName": "disk"}).obj(),
            (GCE, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/disk"),
        ),
        (
            make_pv()
            .name("pv")
            .label("topology.kubernetes.io/zone", "us-east1-b")
            .source(gcePersistentDisk={"pdName": "disk"})
            .obj(),
            (GCE, "projects/UNSPECIFIED/zones/us-east1-b/disks/disk"),
        ),
        (
            make_pv()
            .name("pv")
            .label("failure-domain.beta.kubernetes.io/zone", "us-east1-b__us-east1-c")
            .source(gcePersistentDisk={"pdName": "disk"})
            .obj(),
            (GCE, "projects/UNSPECIFIED/regions/us-east1/disks/disk"),
        ),
        (
            make_pv().name("pv").source(awsElasticBlockStore={"volumeID": "aws://us-east-1a/vol-1"}).obj(),
            (EBS, "vol-1"),
        ),
        (make_pv().name("pv").source(cinder={"volumeID": "c1"}).obj(), ("cinder.csi.openstack.org", "c1")),
        (
            make_pv().name("pv").source(azureDisk={"diskName": "d", "diskURI": "uri"}).obj(),
            ("disk.csi.azure.com", "uri"),
        ),
        (make_pv().name("pv").source(portworxVolume={"volumeID": "px"}).obj(), ("pxd.portworx.com", "px")),
        (
            make_pv()
            .name("pv")
            .claimed_by("ns", "c")
            .source(azureFile={"secretName": "azure-storage-account-acct-secret", "shareName": "share"})
            .obj(),
            ("file.csi.azure.com", "#acct#share#pv#ns"),
        ),
    ],
    ids=["gce unzoned", "gce zonal", "gce regional", "aws url", "cinder", "azure disk", "portworx", "azure file"],
)
def test_in_tree_pvs_translate_to_csi_lib_handles(pv: dict[str, Any], expected: tuple[str, str]) -> None:
    plugin, handle = pv_volume_handle(pv)
    assert (plugin.driver, handle) == expected


@pytest.mark.parametrize(
    "pv",
    [
        make_pv()
        .name("pv")
        .label("topology.kubernetes.io/zone", "a__b")
        .source(gcePersistentDisk={"pdName": "d"})
        .obj(),
        make_pv().name("pv").source(awsElasticBlockStore={"volumeID": "aws://zone/bad"}).obj(),
        make_pv().name("pv").source(azureFile={"secretName": "s", "shareName": "share"}).obj(),
        make_pv().name("pv").source(hostPath={"path": "/tmp"}).obj(),
    ],
    ids=["gce zones of no region", "aws id not a volume", "azure file without a secret namespace", "not in-tree"],
)
def test_untranslatable_pvs_raise(pv: dict[str, Any]) -> None:
    with pytest.raises(TranslationError):
        pv_volume_handle(pv)


def test_inline_volumes_translate_without_zone_information() -> None:
    plugin, handle = inline_volume_handle({"name": "v", "gcePersistentDisk": {"pdName": "d"}}, "ns")
    assert (plugin.driver, handle) == (GCE, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/d")
    plugin, handle = inline_volume_handle({"name": "v", "azureFile": {"secretName": "s", "shareName": "sh"}}, "ns")
    assert (plugin.driver, handle) == ("file.csi.azure.com", "#s#sh#v#ns")


# ---------------------------------------------------------------------- events and hints


def test_it_registers_kube_schedulers_events() -> None:
    events = {reg.event: reg.hint for reg in setup((EBS,)).events_to_register()}
    assert events == {
        ClusterEvent(Resource.CSI_NODE, ActionType.ADD): None,
        ClusterEvent(Resource.CSI_NODE, ActionType.UPDATE): csi_node_updated,
        ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE): assigned_pod_deleted,
        ClusterEvent(Resource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD): claim_added,
    }


@pytest.mark.parametrize(
    ("old", "new", "hint"),
    [
        ({EBS: 1}, {EBS: 2}, QueueingHint.QUEUE),
        ({EBS: 2}, {EBS: 1}, QueueingHint.QUEUE_SKIP),
        ({EBS: 1}, {EBS: 1}, QueueingHint.QUEUE_SKIP),
        ({EBS: 1}, {EBS: 1, GCE: 3}, QueueingHint.QUEUE),
        ({EBS: 1}, {EBS: None}, QueueingHint.QUEUE_SKIP),
    ],
    ids=[
        "limit raised, queue",
        "limit decreased, skip queueing",
        "limit unchanged, skip queueing",
        "a driver with a limit added, queue",
        "a limit removed counts as 0, skip queueing",
    ],
)
def test_a_csinode_update_requeues_when_a_limit_rises(
    old: dict[str, int | None], new: dict[str, int | None], hint: QueueingHint
) -> None:
    assert csi_node_updated(ebs_one, make_csi_node(NODE, old), make_csi_node(NODE, new)) is hint


def _placed(pod: PodInfo, node: str = NODE) -> dict[str, Any]:
    return {**pod.raw, "spec": {**pod.raw["spec"], "nodeName": node}}


@pytest.mark.parametrize(
    ("deleted", "hint"),
    [
        (_placed(pod_using("placeholder")), QueueingHint.QUEUE),
        (_placed(pod_with({"awsElasticBlockStore": {}})), QueueingHint.QUEUE),
        (_placed(ephemeral_pod), QueueingHint.QUEUE),
        (_placed(PodInfo.from_api(make_pod().obj())), QueueingHint.QUEUE_SKIP),
        (_placed(pod_with(*CONFIG_MAP_AND_SECRET)), QueueingHint.QUEUE_SKIP),
        (pod_using(claim_name(EBS, 0)).raw, QueueingHint.QUEUE_SKIP),
        (make_pod().pvc("c").nominated(NODE).obj(), QueueingHint.QUEUE),
    ],
    ids=[
        "return a Queue when a deleted pod has a PVC",
        "return a Queue when a deleted pod has a inline migratable volume",
        "return a Queue when a deleted pod has an ephemeral volume",
        "return a QueueSkip when a deleted pod doesn't have any volume",
        "return a QueueSkip when a deleted pod has only configmaps and secrets",
        "return a QueueSkip when a deleted pod is not scheduled",
        "return a Queue when a deleted pod was only nominated",
    ],
)
def test_a_deleted_pod_requeues_when_it_may_have_freed_attachments(deleted: dict[str, Any], hint: QueueingHint) -> None:
    assert assigned_pod_deleted(ebs_one, deleted, None) is hint


@pytest.mark.parametrize(
    ("pod", "added", "hint"),
    [
        (pod_with(namespace="ns1"), make_pvc().namespace("ns2").obj(), QueueingHint.QUEUE_SKIP),
        (
            pod_with({"persistentVolumeClaim": {"claimName": "pvc1"}}, namespace="ns1"),
            make_pvc().name("pvc1").namespace("ns1").obj(),
            QueueingHint.QUEUE,
        ),
        (
            pod_with({"name": "ephemeral", **EPHEMERAL}, name="pod1", namespace="ns1"),
            make_pvc().name("pod1-ephemeral").namespace("ns1").obj(),
            QueueingHint.QUEUE,
        ),
        (
            pod_with({"persistentVolumeClaim": {"claimName": "pvc1"}}, namespace="ns1"),
            make_pvc().name("pvc2").namespace("ns1").obj(),
            QueueingHint.QUEUE_SKIP,
        ),
        (pod_with(namespace="ns1"), make_pvc().name("pvc2").namespace("ns1").obj(), QueueingHint.QUEUE_SKIP),
    ],
    ids=[
        "a pod isn't in the same namespace as an added PVC",
        "a pod is in the same namespace as an added PVC",
        "a pod has an ephemeral volume related to an added PVC",
        "a pod doesn't have the same PVC as an added PVC",
        "a pod doesn't have any PVC attached",
    ],
)
def test_an_added_claim_requeues_the_pods_using_it(pod: PodInfo, added: dict[str, Any], hint: QueueingHint) -> None:
    assert claim_added(pod, None, added) is hint


def test_it_takes_no_args() -> None:
    with pytest.raises(PluginArgsError):
        nodevolumelimits.new({"anything": 1}, FakeHandle())


@pytest.mark.parametrize("seed", range(10))
def test_attachments_kept_per_node_equal_a_fresh_count_while_pods_claims_pvs_and_limits_change(seed: int) -> None:
    """Pods with claims come and go on three nodes while claims bind, unbind and vanish, PVs change drivers,
    the class changes provisioner and CSINode limits move; a long-lived plugin (keeping each node's count)
    must answer every incoming pod exactly as a fresh one does."""
    rnd = random.Random(seed)
    handle = FakeHandle()
    volumes = handle.volumes
    kept = nodevolumelimits.new({}, handle)
    cache = Cache()
    nodes = [f"n{i}" for i in range(3)]
    for name in nodes:
        cache.add_or_update_node(make_node().name(name).obj())
    claims = [f"c{i}" for i in range(6)]
    version = iter(range(2, 10_000))

    def event(kind: str, raw: dict[str, Any], deleted: bool = False) -> None:
        raw["metadata"]["resourceVersion"] = str(next(version))
        volumes.on_event(kind, deleted, raw)

    event("storageclasses", make_storage_class(CLASS, provisioner=EBS))
    event("csidrivers", make_csi_driver(EBS, preventPodSchedulingIfMissing=True))  # a node without it rejects
    for claim in claims:
        event("persistentvolumes", make_pv().name(f"pv-{claim}").claimed_by("default", claim).csi(EBS, claim).obj())
        event("persistentvolumeclaims", make_pvc().name(claim).storage_class(CLASS).bound(f"pv-{claim}").obj())
    for name in nodes:
        event("csinodes", make_csi_node(name, {EBS: 2, GCE: 2}))
    placed: list[str] = []
    answers = set()
    without_csinode: set[str] = set()
    for step in range(200):
        action = rnd.random()
        claim = rnd.choice(claims)
        if action < 0.3:
            uses = rnd.sample([*claims, ""] if rnd.random() < 0.05 else claims, rnd.choice([1, 2]))
            builder = make_pod().name(f"p{step}").uid(f"u{step}").node(rnd.choice(nodes))
            for used in uses:
                builder.pvc(used)
            cache.add_or_update_pod(PodInfo.from_api(builder.obj()))
            placed.append(f"default/p{step}")
        elif action < 0.45 and placed:
            cache.remove_pod(placed.pop(rnd.randrange(len(placed))))  # type: ignore[arg-type]
        elif action < 0.55:
            bound = make_pvc().name(claim).storage_class(CLASS)
            event("persistentvolumeclaims", (bound.bound(f"pv-{claim}") if rnd.random() < 0.5 else bound).obj())
        elif action < 0.6:
            event("persistentvolumeclaims", make_pvc().name(claim).obj(), deleted=True)
        elif action < 0.7:
            pv = make_pv().name(f"pv-{claim}").claimed_by("default", claim)
            driver = rnd.choice([EBS, GCE, EBS_IN_TREE])  # in-tree EBS counts only while the node has a CSINode
            if driver == EBS_IN_TREE:
                pv.source(awsElasticBlockStore={"volumeID": claim})
            else:
                pv.csi(driver, claim)
            event("persistentvolumes", pv.obj())
        elif action < 0.75:
            event("storageclasses", make_storage_class(CLASS, provisioner=rnd.choice([EBS, GCE])))
        elif action < 0.85:
            name = rnd.choice(nodes)
            if rnd.random() < 0.8:
                event("csinodes", make_csi_node(name, {EBS: rnd.randint(1, 4), GCE: rnd.randint(1, 4)}))
            else:
                event("csinodes", make_csi_node(name, {}), deleted=True)
        incoming = pod_using(*rnd.sample(claims, rnd.choice([1, 2])))
        if any(volumes.watched_claim(f"default/{c['persistentVolumeClaim']['claimName']}") is None
               for c in incoming.raw["spec"]["volumes"]):  # fmt: skip
            continue
        fresh = nodevolumelimits.new({}, handle)
        state = CycleState()  # one cycle: PreFilter once, then Filter on every node, as the framework runs them
        _, pre = kept.pre_filter(state, incoming, cache.node_infos())
        assert pre.ok
        per_node = []
        for info in cache.node_infos():
            got, want = kept.filter(state, incoming, info), run(fresh, incoming, info)
            assert (got.code, got.reasons) == (want.code, want.reasons), f"step {step}, node {info.name}"
            answers.add(got.code)
            per_node.append((got.code, got.reasons))
        # The batch (nodes without a CSINode share one answer) says the same, node for node.
        batch_state = CycleState()
        kept.pre_filter(batch_state, incoming, cache.node_infos())
        batched = kept.filter_nodes(batch_state, incoming, cache.node_infos())
        assert [FITS if s is None else (s.code, s.reasons) for s in batched] == per_node, f"step {step}"
        without_csinode.update(info.name for info in cache.node_infos() if info.name not in volumes.csi_nodes)
    assert {Code.SUCCESS, Code.UNSCHEDULABLE} <= answers
    assert without_csinode, "some steps had nodes without a CSINode (the batch's shared answer)"
