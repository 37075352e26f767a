"""The harness's CSI storage (e2e/storage.py) on its own, with no scheduler running.

What volume-scheduling tests will rely on, checked first: kcm's PV binder hands
claims to the node-local provisioners; a WaitForFirstConsumer claim waits for
a selected node and gets a volume on that node only; an Immediate claim is
taken by one node; capacity is published per node and shrinks; a claim that
does not fit is given back; CSINodes carry the attach limit. Every assertion
reads the API or the driver's disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes.client
import pytest
from kubernetes.utils import parse_quantity

from e2e.controlplane import Cluster, wait_for
from e2e.storage import (
    DRIVER,
    SELECTED_NODE_ANNOTATION,
    TOPOLOGY_KEY,
    HostPathStorage,
    claim,
    ephemeral_volume,
    hostpath_storage,  # noqa: F401 (a fixture)
    pv_nodes,
)
from e2e.test_scheduling import pod_manifest

pytestmark = pytest.mark.e2e

GI = 1 << 30


def read_claim(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = core_api.api_client.sanitize_for_serialization(
        core_api.read_namespaced_persistent_volume_claim(name, namespace)
    )
    return body


def read_pv(core_api: kubernetes.client.CoreV1Api, name: str) -> dict[str, Any]:
    body: dict[str, Any] = core_api.api_client.sanitize_for_serialization(core_api.read_persistent_volume(name))
    return body


def has_event(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str, reason: str) -> bool:
    selector = f"involvedObject.name={name},reason={reason}"
    return bool(core_api.list_namespaced_event(namespace, field_selector=selector).items)


def wait_bound(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    """The claim once Bound, and its PV."""
    wait_for(lambda: read_claim(core_api, namespace, name)["status"].get("phase") == "Bound", 60, f"claim {name} Bound")
    return read_pv(core_api, read_claim(core_api, namespace, name)["spec"]["volumeName"])


def test_immediate_claim_is_bound_to_a_volume_on_one_served_node(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    hostpath_storage: HostPathStorage,  # noqa: F811
) -> None:
    nodes = [kwok_nodes("a"), kwok_nodes("b")]
    hostpath_storage.serve(*nodes)
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("data", hostpath_storage.immediate_class))

    pv = wait_bound(core_api, namespace, "data")
    [node] = pv_nodes(pv)
    assert node in nodes
    assert read_claim(core_api, namespace, "data")["metadata"]["annotations"][SELECTED_NODE_ANNOTATION] == node
    assert pv["spec"]["csi"]["driver"] == DRIVER
    assert pv["spec"]["csi"]["volumeAttributes"]["node"] == node
    assert hostpath_storage.volumes_on(node) == {pv["spec"]["csi"]["volumeHandle"]: GI}
    [other] = set(nodes) - {node}
    assert hostpath_storage.volumes_on(other) == {}


def test_wait_for_first_consumer_claim_waits_for_a_selected_node_and_gets_a_volume_pinned_there(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    hostpath_storage: HostPathStorage,  # noqa: F811
) -> None:
    a, b = kwok_nodes("a"), kwok_nodes("b")
    hostpath_storage.serve(a, b)
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("data", hostpath_storage.wffc_class, "2Gi"))

    # The binder has seen the claim and left it to a scheduler; no provisioner took it.
    wait_for(lambda: has_event(core_api, namespace, "data", "WaitForFirstConsumer"), 30, "WaitForFirstConsumer event")
    pending = read_claim(core_api, namespace, "data")
    assert pending["status"]["phase"] == "Pending"
    assert SELECTED_NODE_ANNOTATION not in pending["metadata"].get("annotations", {})
    assert hostpath_storage.volumes_on(a) == hostpath_storage.volumes_on(b) == {}

    # What a scheduler does once it has picked a node for the claim's pod.
    core_api.patch_namespaced_persistent_volume_claim(
        "data", namespace, {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: b}}}
    )
    pv = wait_bound(core_api, namespace, "data")
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": TOPOLOGY_KEY, "operator": "In", "values": [b]}]}
    ]
    assert pv["spec"]["csi"]["volumeAttributes"]["node"] == b, "made by b's driver"
    handle = pv["spec"]["csi"]["volumeHandle"]
    assert hostpath_storage.volumes_on(b) == {handle: 2 * GI}
    assert hostpath_storage.volumes_on(a) == {}

    # Reclaim policy Delete: b's provisioner deletes the volume with the claim.
    core_api.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_for(lambda: hostpath_storage.volumes_on(b) == {}, 60, "the volume deleted from b's disk")
    pv_name = pv["metadata"]["name"]
    wait_for(
        lambda: not core_api.list_persistent_volume(field_selector=f"metadata.name={pv_name}").items, 60, "PV gone"
    )


def test_csinodes_carry_the_attach_limit_and_nodes_the_topology_label(
    core_api: kubernetes.client.CoreV1Api,
    kwok_nodes: Callable[..., str],
    hostpath_storage: HostPathStorage,  # noqa: F811
) -> None:
    limited, unlimited = kwok_nodes("limited"), kwok_nodes("unlimited")
    hostpath_storage.serve(limited, attach_limit=2)
    hostpath_storage.serve(unlimited)
    storage_api = kubernetes.client.StorageV1Api(core_api.api_client)
    serialize = core_api.api_client.sanitize_for_serialization

    for node, allocatable in ((limited, {"allocatable": {"count": 2}}), (unlimited, {})):
        csi_node = serialize(storage_api.read_csi_node(node))
        assert csi_node["spec"]["drivers"] == [
            {"name": DRIVER, "nodeID": node, "topologyKeys": [TOPOLOGY_KEY], **allocatable}
        ]
        assert csi_node["metadata"]["ownerReferences"][0]["name"] == node
        assert serialize(core_api.read_node(node))["metadata"]["labels"][TOPOLOGY_KEY] == node


def test_capacity_is_published_per_node_and_a_claim_that_does_not_fit_is_given_back(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    hostpath_storage: HostPathStorage,  # noqa: F811
) -> None:
    small, large = kwok_nodes("small"), kwok_nodes("large")
    hostpath_storage.serve(small, capacity="3Gi")
    hostpath_storage.serve(large, capacity="8Gi")
    assert hostpath_storage.capacity(small) == 3 * GI
    assert hostpath_storage.capacity(large) == 8 * GI
    storage_api = kubernetes.client.StorageV1Api(core_api.api_client)
    [driver] = [d for d in storage_api.list_csi_driver().items if d.metadata.name == DRIVER]
    assert driver.spec.storage_capacity is True

    core_api.create_namespaced_persistent_volume_claim(namespace, claim("first", hostpath_storage.wffc_class, "2Gi"))
    core_api.patch_namespaced_persistent_volume_claim(
        "first", namespace, {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: small}}}
    )
    wait_bound(core_api, namespace, "first")
    wait_for(lambda: hostpath_storage.capacity(small) == GI, 30, "small's capacity down to 1Gi")
    assert hostpath_storage.capacity(large) == 8 * GI

    # 2Gi no longer fit on small: its provisioner gives the claim back by dropping the selected node.
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("second", hostpath_storage.wffc_class, "2Gi"))
    core_api.patch_namespaced_persistent_volume_claim(
        "second", namespace, {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: small}}}
    )
    wait_for(lambda: has_event(core_api, namespace, "second", "ProvisioningFailed"), 60, "ProvisioningFailed event")
    wait_for(
        lambda: SELECTED_NODE_ANNOTATION not in read_claim(core_api, namespace, "second")["metadata"]["annotations"],
        60,
        "the selected node dropped from the claim",
    )
    assert read_claim(core_api, namespace, "second")["status"]["phase"] == "Pending"
    assert sum(hostpath_storage.volumes_on(small).values()) == 2 * GI


def test_generic_ephemeral_volume_gets_its_claim_from_kube_controller_manager(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    hostpath_storage: HostPathStorage,  # noqa: F811
) -> None:
    node = kwok_nodes("a")
    hostpath_storage.serve(node)
    pod = pod_manifest("app", "no-scheduler-here")
    pod["spec"]["volumes"] = [ephemeral_volume("scratch", hostpath_storage.wffc_class, "1Gi")]
    created = core_api.create_namespaced_pod(namespace, pod)

    made = wait_for(
        lambda: core_api.list_namespaced_persistent_volume_claim(namespace).items, 30, "the ephemeral volume's claim"
    )
    [pvc] = [core_api.api_client.sanitize_for_serialization(c) for c in made]
    assert pvc["metadata"]["name"] == "app-scratch"
    assert pvc["metadata"]["ownerReferences"][0]["uid"] == created.metadata.uid
    assert pvc["spec"]["storageClassName"] == hostpath_storage.wffc_class
    assert parse_quantity(pvc["spec"]["resources"]["requests"]["storage"]) == GI


def test_stop_removes_processes_objects_and_labels_and_lets_volumes_go(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    test_id: str,
) -> None:
    node = kwok_nodes("a")
    storage = HostPathStorage(control_plane, core_api.api_client, name=f"{test_id[:30]}-own").start()
    storage.serve(node, attach_limit=1)
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("data", storage.immediate_class))
    pv_name = wait_bound(core_api, namespace, "data")["metadata"]["name"]
    processes = storage.components()
    storage_api = kubernetes.client.StorageV1Api(core_api.api_client)
    classes = {storage.wffc_class, storage.immediate_class}

    storage.stop()

    assert all(not p.alive() for p in processes)
    assert not {c.metadata.name for c in storage_api.list_storage_class().items} & classes
    assert DRIVER not in {d.metadata.name for d in storage_api.list_csi_driver().items}
    assert node not in {n.metadata.name for n in storage_api.list_csi_node().items}
    assert TOPOLOGY_KEY not in (core_api.read_node(node).metadata.labels or {})
    assert not storage_api.list_csi_storage_capacity_for_all_namespaces(
        label_selector=f"csi.storage.k8s.io/drivername={DRIVER}"
    ).items
    # No provisioner is left to delete the PV: stop did, and it goes once its claim is gone.
    left = read_pv(core_api, pv_name)["metadata"]
    assert left["deletionTimestamp"]
    assert not [f for f in left.get("finalizers", []) if f.startswith("external-provisioner.")]
    core_api.delete_namespaced_persistent_volume_claim("data", namespace)
    wait_for(
        lambda: not core_api.list_persistent_volume(field_selector=f"metadata.name={pv_name}").items, 60, "PV gone"
    )
    storage.stop()  # idempotent
