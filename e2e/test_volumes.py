"""Pods with PersistentVolumeClaims, scheduled by usher against the real PV controller and a real provisioner.

kube-controller-manager's PV binder and ephemeral-volume controllers run in
the control plane; e2e/storage.py serves chosen kwok nodes with a CSI driver
and Kubernetes' csi-provisioner each (PVs with node affinity, capacity
published as CSIStorageCapacity). usher decides; every assertion reads the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.storage import (
    SELECTED_NODE_ANNOTATION,
    HostPathStorage,
    claim,
    claim_volume,
    ephemeral_volume,
    hostpath_storage,
    pv_nodes,
)
from e2e.test_reporting import events_for
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

__all__ = ["hostpath_storage"]  # the fixture, imported for this module's tests


def pod_with(name: str, scheduler: str, *volumes: dict[str, Any]) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler, cpu="10m", memory="16Mi")
    pod["spec"]["volumes"] = list(volumes)
    return pod


def node_of(core_api: kubernetes.client.CoreV1Api, namespace: str, pod: str) -> str | None:
    return str(core_api.read_namespaced_pod(pod, namespace).spec.node_name or "") or None


def bound_pv(core_api: kubernetes.client.CoreV1Api, namespace: str, claim_name: str) -> dict[str, Any]:
    pvc = core_api.read_namespaced_persistent_volume_claim(claim_name, namespace)
    assert pvc.status.phase == "Bound" and pvc.spec.volume_name
    pv = core_api.read_persistent_volume(pvc.spec.volume_name)
    return dict(core_api.api_client.sanitize_for_serialization(pv))


def test_a_wait_for_first_consumer_claim_is_provisioned_on_the_node_usher_picks(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    with_storage = kwok_nodes("storage", cpu="4")
    kwok_nodes("diskless", cpu="64")  # roomier, but no storage: capacity tracking rules it out
    hostpath_storage.serve(with_storage, capacity="10Gi")
    scheduler = usher()
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("data", hostpath_storage.wffc_class, "1Gi"))
    core_api.create_namespaced_pod(namespace, pod_with("p", scheduler.scheduler_name, claim_volume("data", "data")))
    wait_for(lambda: node_of(core_api, namespace, "p"), 90, "the pod bound once its volume is provisioned")
    assert node_of(core_api, namespace, "p") == with_storage
    pvc = core_api.read_namespaced_persistent_volume_claim("data", namespace)
    assert pvc.metadata.annotations[SELECTED_NODE_ANNOTATION] == with_storage
    assert pv_nodes(bound_pv(core_api, namespace, "data")) == [with_storage], "provisioned on the chosen node"
    assert hostpath_storage.volumes_on(with_storage), "the driver on that node made the volume"


def test_a_missing_claim_holds_the_pod_until_it_is_created(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    node = kwok_nodes("n", cpu="4")
    hostpath_storage.serve(node)
    scheduler = usher()
    core_api.create_namespaced_pod(namespace, pod_with("p", scheduler.scheduler_name, claim_volume("data", "later")))
    message = (
        '0/1 nodes are available: persistentvolumeclaim "later" not found. '
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
    wait_for(lambda: events_for(core_api, namespace, "p", "FailedScheduling"), 30, "the FailedScheduling Event")
    assert events_for(core_api, namespace, "p", "FailedScheduling") == [message]
    assert node_of(core_api, namespace, "p") is None
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("later", hostpath_storage.wffc_class))

    def selected() -> str | None:
        annotations = core_api.read_namespaced_persistent_volume_claim("later", namespace).metadata.annotations
        return (annotations or {}).get(SELECTED_NODE_ANNOTATION)

    # The claim's add event requeues the pod: scheduled (its node chosen, provisioning asked for) within 2 s.
    wait_for(selected, 2, "usher to choose the pod's node within 2 s of the claim's creation")
    wait_for(lambda: node_of(core_api, namespace, "p"), 90, "the pod bound once its volume is provisioned")
    assert node_of(core_api, namespace, "p") == selected() == node


def test_a_hundred_pods_each_with_a_claim_are_bound_where_their_volumes_are_provisioned(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    nodes = [kwok_nodes(f"n{i}", cpu="16", memory="64Gi", pods=110) for i in range(4)]
    hostpath_storage.serve(*nodes, capacity="100Gi")
    scheduler = usher()
    for i in range(100):
        core_api.create_namespaced_persistent_volume_claim(namespace, claim(f"c{i:03d}", hostpath_storage.wffc_class))
        core_api.create_namespaced_pod(
            namespace, pod_with(f"p{i:03d}", scheduler.scheduler_name, claim_volume("data", f"c{i:03d}"))
        )

    def bound() -> int:
        return sum(1 for p in core_api.list_namespaced_pod(namespace).items if p.spec.node_name)

    wait_for(lambda: bound() == 100, 300, "100 pods bound with their volumes")
    pods = {p.metadata.name: p.spec.node_name for p in core_api.list_namespaced_pod(namespace).items}
    for i in range(100):
        assert pv_nodes(bound_pv(core_api, namespace, f"c{i:03d}")) == [pods[f"p{i:03d}"]], f"c{i:03d}"
    assert len(set(pods.values())) == 4, "spread over every node serving storage"


def test_a_claim_too_big_for_one_nodes_capacity_goes_where_it_fits(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    small = kwok_nodes("small", cpu="64")
    large = kwok_nodes("large", cpu="4")
    hostpath_storage.serve(small, capacity="2Gi")
    hostpath_storage.serve(large, capacity="20Gi")
    scheduler = usher()
    core_api.create_namespaced_persistent_volume_claim(namespace, claim("big", hostpath_storage.wffc_class, "5Gi"))
    core_api.create_namespaced_pod(namespace, pod_with("p", scheduler.scheduler_name, claim_volume("data", "big")))
    wait_for(lambda: node_of(core_api, namespace, "p"), 90, "the pod bound")
    assert node_of(core_api, namespace, "p") == large
    assert pv_nodes(bound_pv(core_api, namespace, "big")) == [large]


def test_a_pod_reusing_a_bound_claim_follows_its_volume(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    first = kwok_nodes("a", cpu="4")
    second = kwok_nodes("b", cpu="64")
    hostpath_storage.serve(first, second)
    scheduler = usher()
    immediate = claim("shared", hostpath_storage.immediate_class)
    core_api.create_namespaced_persistent_volume_claim(namespace, immediate)
    wait_for(
        lambda: core_api.read_namespaced_persistent_volume_claim("shared", namespace).status.phase == "Bound",
        90,
        "the Immediate claim provisioned and bound without a pod",
    )
    [where] = pv_nodes(bound_pv(core_api, namespace, "shared"))
    for i in range(3):
        core_api.create_namespaced_pod(
            namespace, pod_with(f"p{i}", scheduler.scheduler_name, claim_volume("data", "shared"))
        )
    wait_for(lambda: all(node_of(core_api, namespace, f"p{i}") for i in range(3)), 60, "three pods bound")
    assert {node_of(core_api, namespace, f"p{i}") for i in range(3)} == {where}, "the PV's node affinity decides"


def test_a_generic_ephemeral_volume_waits_for_its_claim_then_is_provisioned(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    node = kwok_nodes("n", cpu="4")
    hostpath_storage.serve(node)
    scheduler = usher()
    volume = ephemeral_volume("scratch", hostpath_storage.wffc_class)
    core_api.create_namespaced_pod(namespace, pod_with("p", scheduler.scheduler_name, volume))
    wait_for(lambda: node_of(core_api, namespace, "p"), 90, "the pod bound on its ephemeral volume's node")
    pvc = core_api.read_namespaced_persistent_volume_claim("p-scratch", namespace)
    assert pvc.metadata.owner_references[0].name == "p", "kcm's ephemeral-volume controller made the claim"
    assert pv_nodes(bound_pv(core_api, namespace, "p-scratch")) == [node]


def test_a_static_volume_is_bound_by_usher_to_the_claim_on_the_pods_node(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    kwok_nodes("elsewhere", cpu="64")
    node = kwok_nodes("local", cpu="4")
    storage = kubernetes.client.StorageV1Api(core_api.api_client)
    class_name = f"{namespace}-local"
    storage.create_storage_class(
        {
            "metadata": {"name": class_name},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
    )
    volume = f"{namespace}-local-pv"
    try:
        core_api.create_persistent_volume(
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "5Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class_name,
                    "local": {"path": "/mnt/disk"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )
        wait_for(lambda: core_api.read_persistent_volume(volume).status.phase == "Available", 60, "the PV Available")
        scheduler = usher()
        core_api.create_namespaced_persistent_volume_claim(namespace, claim("data", class_name, "1Gi"))
        core_api.create_namespaced_pod(namespace, pod_with("p", scheduler.scheduler_name, claim_volume("d", "data")))
        wait_for(lambda: node_of(core_api, namespace, "p"), 90, "the pod bound after its volume")
        assert node_of(core_api, namespace, "p") == node, "the only node the local volume reaches"
        pv = core_api.read_persistent_volume(volume)
        assert (pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == (namespace, "data")
        assert pv.metadata.annotations["pv.kubernetes.io/bound-by-controller"] == "yes"
        assert core_api.read_namespaced_persistent_volume_claim("data", namespace).spec.volume_name == volume
    finally:
        storage.delete_storage_class(class_name)
        core_api.delete_persistent_volume(volume)


def test_a_statefulset_of_twenty_replicas_with_volume_claim_templates_comes_up(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    nodes = [kwok_nodes(f"n{i}", cpu="16", memory="64Gi", pods=110) for i in range(3)]
    hostpath_storage.serve(*nodes, capacity="100Gi")
    scheduler = usher()
    template = pod_with("db", scheduler.scheduler_name)
    template["metadata"] = {"labels": {"app": "db"}}
    template["spec"]["volumes"] = []
    template["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    apps = kubernetes.client.AppsV1Api(core_api.api_client)
    apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "db"},
            "spec": {
                "replicas": 20,
                "serviceName": "db",
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
                "volumeClaimTemplates": [
                    {"metadata": {"name": "data"}, "spec": claim("data", hostpath_storage.wffc_class)["spec"]}
                ],
            },
        },
    )

    def running() -> int:
        pods = core_api.list_namespaced_pod(namespace, label_selector="app=db").items
        return sum(1 for p in pods if p.spec.node_name and p.status.phase == "Running")

    wait_for(lambda: running() == 20, 300, "the StatefulSet's 20 pods running")
    for pod in core_api.list_namespaced_pod(namespace, label_selector="app=db").items:
        assert pv_nodes(bound_pv(core_api, namespace, f"data-{pod.metadata.name}")) == [pod.spec.node_name]
    wait_for(
        lambda: apps.read_namespaced_stateful_set("db", namespace).status.ready_replicas == 20,
        60,
        "the StatefulSet to report 20 ready replicas",
    )


def test_deleting_a_pod_frees_its_nodes_attach_count_for_a_waiting_pod(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    hostpath_storage: HostPathStorage,
) -> None:
    node = kwok_nodes("n", cpu="16")
    hostpath_storage.serve(node, attach_limit=2)
    scheduler = usher()
    for i in range(3):
        core_api.create_namespaced_persistent_volume_claim(namespace, claim(f"c{i}", hostpath_storage.wffc_class))
    for i in range(2):
        core_api.create_namespaced_pod(
            namespace, pod_with(f"p{i}", scheduler.scheduler_name, claim_volume("d", f"c{i}"))
        )
    wait_for(lambda: all(node_of(core_api, namespace, f"p{i}") for i in range(2)), 90, "two pods bound")
    core_api.create_namespaced_pod(namespace, pod_with("waiting", scheduler.scheduler_name, claim_volume("d", "c2")))
    message = (
        "0/1 nodes are available: 1 node(s) exceed max volume count. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    wait_for(lambda: events_for(core_api, namespace, "waiting", "FailedScheduling"), 30, "the FailedScheduling Event")
    assert events_for(core_api, namespace, "waiting", "FailedScheduling") == [message]
    core_api.delete_namespaced_pod("p0", namespace, grace_period_seconds=0)
    wait_for(lambda: node_of(core_api, namespace, "waiting"), 90, "the waiting pod bound once p0's volume is gone")
    assert node_of(core_api, namespace, "waiting") == node
