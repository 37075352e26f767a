"""Dynamic Resource Allocation against the real API server and kube-controller-manager.

A test driver publishes a DeviceClass and one ResourceSlice per kwok node;
kube-controller-manager turns ResourceClaimTemplates into claims and
deallocates claims whose pods are gone; usher allocates devices, reserves
claims and binds pods. Every assertion reads the API.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import DRIVER, Driver, claim, claim_spec, claim_template
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e


def claim_pod(
    name: str, scheduler: str, *, template: str | None = None, claim_name: str | None = None
) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler, cpu="10m", memory="16Mi")
    entry: dict[str, Any] = {"name": "gpu"}
    if template:
        entry["resourceClaimTemplateName"] = template
    else:
        entry["resourceClaimName"] = claim_name
    pod["spec"]["resourceClaims"] = [entry]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return pod


def claims_in(resource: kubernetes.client.ResourceV1Api, namespace: str) -> list[dict[str, Any]]:
    items = resource.list_namespaced_resource_claim(namespace).items
    return [resource.api_client.sanitize_for_serialization(c) for c in items]


def test_200_pods_with_template_claims_get_distinct_devices_on_20_nodes(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    nodes = [kwok_nodes(f"g{i:02d}", cpu="64", memory="256Gi", pods=110) for i in range(20)]
    for node in nodes:
        driver.publish_node(node, devices=10)
    driver.resource.create_namespaced_resource_claim_template(namespace, claim_template("one-gpu", driver.class_name))
    scheduler = usher()
    for i in range(200):
        core_api.create_namespaced_pod(namespace, claim_pod(f"p{i:03d}", scheduler.scheduler_name, template="one-gpu"))

    def bound() -> int:
        return sum(1 for p in core_api.list_namespaced_pod(namespace).items if p.spec.node_name)

    wait_for(lambda: bound() == 200, 180, "200 pods bound")
    pods = {p.metadata.uid: p for p in core_api.list_namespaced_pod(namespace).items}
    devices: Counter[tuple[str, str, str]] = Counter()
    for item in claims_in(driver.resource, namespace):
        allocation = item["status"]["allocation"]
        [result] = allocation["devices"]["results"]
        devices[(result["driver"], result["pool"], result["device"])] += 1
        [reserved] = item["status"]["reservedFor"]
        pod = pods[reserved["uid"]]
        assert reserved["name"] == pod.metadata.name
        assert result["pool"] == pod.spec.node_name, "a node-local device on the pod's own node"
        terms = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pod.spec.node_name]}]}]
        assert "resource.kubernetes.io/delete-protection" in item["metadata"]["finalizers"]
    assert len(devices) == 200 and set(devices.values()) == {1}, "every device allocated once"
    assert all(d[0] == DRIVER for d in devices)


def test_two_pods_sharing_a_claim_land_on_its_node(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    for i in range(3):
        driver.publish_node(kwok_nodes(f"s{i}"), devices=1)
    driver.resource.create_namespaced_resource_claim(namespace, claim("shared", driver.class_name))
    scheduler = usher()
    core_api.create_namespaced_pod(namespace, claim_pod("first", scheduler.scheduler_name, claim_name="shared"))
    wait_for(lambda: core_api.read_namespaced_pod("first", namespace).spec.node_name, 30, "the first pod bound")
    core_api.create_namespaced_pod(namespace, claim_pod("second", scheduler.scheduler_name, claim_name="shared"))
    wait_for(lambda: core_api.read_namespaced_pod("second", namespace).spec.node_name, 30, "the second pod bound")
    first = core_api.read_namespaced_pod("first", namespace)
    second = core_api.read_namespaced_pod("second", namespace)
    assert first.spec.node_name == second.spec.node_name
    shared = driver.resource.api_client.sanitize_for_serialization(
        driver.resource.read_namespaced_resource_claim("shared", namespace)
    )
    assert {r["uid"] for r in shared["status"]["reservedFor"]} == {first.metadata.uid, second.metadata.uid}
    assert len(shared["status"]["allocation"]["devices"]["results"]) == 1


def test_a_pod_whose_claim_does_not_exist_waits_then_is_bound_within_2s(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    driver.publish_node(kwok_nodes("w"), devices=2)
    scheduler = usher()
    core_api.create_namespaced_pod(namespace, claim_pod("waiter", scheduler.scheduler_name, claim_name="later"))
    wait_for(lambda: scheduler.metric("scheduler_pending_pods", queue="gated") == 1, 30, "the pod held back")
    assert scheduler.metric("scheduler_schedule_attempts_total") == 0
    started = time.monotonic()
    driver.resource.create_namespaced_resource_claim(namespace, claim("later", driver.class_name))
    wait_for(lambda: core_api.read_namespaced_pod("waiter", namespace).spec.node_name, 10, "the pod bound")
    assert time.monotonic() - started < 2.0


def test_deleting_a_bound_pod_frees_its_device_for_a_waiting_pod(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    driver.publish_node(kwok_nodes("only"), devices=1)
    driver.resource.create_namespaced_resource_claim_template(namespace, claim_template("one-gpu", driver.class_name))
    scheduler = usher()
    core_api.create_namespaced_pod(namespace, claim_pod("holder", scheduler.scheduler_name, template="one-gpu"))
    wait_for(lambda: core_api.read_namespaced_pod("holder", namespace).spec.node_name, 30, "the holder bound")
    core_api.create_namespaced_pod(namespace, claim_pod("next", scheduler.scheduler_name, template="one-gpu"))
    wait_for(
        lambda: scheduler.metric("scheduler_unschedulable_pods", plugin="DynamicResources") == 1,
        30,
        "the second pod waiting for a device",
    )
    core_api.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
    wait_for(lambda: core_api.read_namespaced_pod("next", namespace).spec.node_name, 60, "the freed device reused")


def test_partitions_of_one_device_are_allocated_while_its_memory_lasts(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    """DRAPartitionableDevices: two 20Gi halves and the 40Gi whole of one 40Gi device. The halves go to two pods;
    a pod that needs the whole waits while either half is held, and gets it once both are freed."""
    node = kwok_nodes("mig")
    driver.publish_partitions(node, "40Gi", {"half-0": "20Gi", "half-1": "20Gi", "whole": "40Gi"})
    driver.resource.create_namespaced_resource_claim_template(namespace, claim_template("any-gpu", driver.class_name))
    whole = claim_template("whole-gpu", driver.class_name)
    whole["spec"]["spec"] = claim_spec(
        driver.class_name, f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
    )
    driver.resource.create_namespaced_resource_claim_template(namespace, whole)
    scheduler = usher()

    def device_of(pod: str) -> str | None:
        for item in claims_in(driver.resource, namespace):
            reserved = (item.get("status") or {}).get("reservedFor") or []
            if any(r["name"] == pod for r in reserved):
                [result] = item["status"]["allocation"]["devices"]["results"]
                return str(result["device"])
        return None

    for name in ("first", "second"):
        core_api.create_namespaced_pod(namespace, claim_pod(name, scheduler.scheduler_name, template="any-gpu"))
        wait_for(lambda n=name: core_api.read_namespaced_pod(n, namespace).spec.node_name, 30, f"{name} bound")
    assert {device_of("first"), device_of("second")} == {"half-0", "half-1"}, "the halves first, in slice order"
    core_api.create_namespaced_pod(namespace, claim_pod("third", scheduler.scheduler_name, template="whole-gpu"))

    def waiting() -> bool:
        conditions = core_api.read_namespaced_pod("third", namespace).status.conditions or []
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable" and "cannot allocate all claims" in c.message
            for c in conditions
        )

    wait_for(waiting, 30, "the third pod unschedulable: the halves hold all of the memory")

    def failed_attempts() -> float:
        return scheduler.metric("scheduler_schedule_attempts_total", result="unschedulable")

    before = failed_attempts()
    core_api.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
    # kube-controller-manager removes the first pod's claim, which frees its half (freed devices retry every
    # waiting pod): 20Gi are free, still short of the whole, so the retry fails again.
    wait_for(lambda: failed_attempts() > before, 60, "the third pod tried again once the first half was freed")
    assert core_api.read_namespaced_pod("third", namespace).spec.node_name is None
    core_api.delete_namespaced_pod("second", namespace, grace_period_seconds=0)
    wait_for(lambda: core_api.read_namespaced_pod("third", namespace).spec.node_name == node, 60, "third bound")
    assert device_of("third") == "whole"


def allocate_elsewhere(resource: kubernetes.client.ResourceV1Api, namespace: str, name: str, node: str) -> None:
    """Give the claim an allocation of ``node``'s first device, reserved for nobody, as a scheduler that then lost
    its pod would leave it (kube-controller-manager deallocates only when the last reservation goes)."""
    body = resource.api_client.sanitize_for_serialization(resource.read_namespaced_resource_claim(name, namespace))
    body["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    resource.replace_namespaced_resource_claim_status(name, namespace, body)


def only_on(node: str) -> dict[str, Any]:
    """A pod's affinity to one node by name."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def test_a_claim_allocated_where_its_pod_cannot_go_is_deallocated_and_allocated_where_it_can(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    """DynamicResources' PostFilter, as kube-scheduler's: the claim kept the pod off every node it may use and
    nobody holds it, so its allocation is cleared (a status PATCH) and the pod tried again."""
    elsewhere, usable = kwok_nodes("elsewhere"), kwok_nodes("usable")
    for node in (elsewhere, usable):
        driver.publish_node(node, devices=1)
    driver.resource.create_namespaced_resource_claim(namespace, claim("c", driver.class_name))
    allocate_elsewhere(driver.resource, namespace, "c", elsewhere)
    scheduler = usher()
    pod = claim_pod("p", scheduler.scheduler_name, claim_name="c")
    pod["spec"]["affinity"] = only_on(usable)
    created = core_api.create_namespaced_pod(namespace, pod)
    wait_for(lambda: core_api.read_namespaced_pod("p", namespace).spec.node_name, 30, "the pod bound")
    assert core_api.read_namespaced_pod("p", namespace).spec.node_name == usable
    status = claims_in(driver.resource, namespace)[0]["status"]
    assert [r["pool"] for r in status["allocation"]["devices"]["results"]] == [usable]
    assert [r["uid"] for r in status["reservedFor"]] == [created.metadata.uid]
    assert scheduler.metric("scheduler_schedule_attempts_total", result="unschedulable") >= 1


def extended_pod(name: str, scheduler: str, resource: str, count: int) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler, cpu="10m", memory="16Mi")
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"][resource] = str(count)
    resources["limits"] = {resource: str(count)}  # extended resources are not overcommitted: limits = requests
    return pod


def test_extended_resources_a_device_class_serves_come_from_a_claim_usher_makes_for_the_pod(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    """DRAExtendedResource (GA in v1.37): a pod asks for ``<domain>/gpu: 2`` the way it would ask a device plugin.
    Where a node's allocatable has the resource, that serves it; where it has none, usher allocates two devices of
    the class that names the resource through a claim of the pod's own, and kube-controller-manager cleans the
    claim up with the pod."""
    resource = f"e2e.usher.dev/{namespace[-50:]}"
    patched = driver.resource.read_device_class(driver.class_name)
    patched.spec.extended_resource_name = resource
    driver.resource.replace_device_class(driver.class_name, patched)
    implicit = f"deviceclass.resource.kubernetes.io/{driver.class_name}"
    plugin_node = kwok_nodes("plugin", extra_resources={resource: "1"})  # a device plugin's one device
    dra_nodes = [kwok_nodes(f"dra{i}") for i in range(2)]
    for node in dra_nodes:
        driver.publish_node(node, devices=2)
    scheduler = usher()

    def bound(name: str) -> str:
        node = core_api.read_namespaced_pod(name, namespace).spec.node_name
        return str(node) if node else ""

    def claims_of(pod: str) -> list[dict[str, Any]]:
        return [
            item
            for item in claims_in(driver.resource, namespace)
            if [o["name"] for o in item["metadata"].get("ownerReferences") or []] == [pod]
        ]

    core_api.create_namespaced_pod(namespace, extended_pod("first", scheduler.scheduler_name, resource, 2))
    wait_for(lambda: bound("first"), 30, "the first pod bound")
    first_node = bound("first")
    assert first_node in dra_nodes, "the device plugin's node has one, the pod asks for two"
    [made] = claims_of("first")
    first = core_api.read_namespaced_pod("first", namespace)
    meta = made["metadata"]
    assert meta["name"].startswith("first-extended-resources-")
    assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert meta["ownerReferences"][0]["uid"] == first.metadata.uid and meta["ownerReferences"][0]["controller"]
    # Its place among the container's requests by name: cpu, the resource, memory.
    assert made["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",
            "exactly": {"deviceClassName": driver.class_name, "allocationMode": "ExactCount", "count": 2},
        }
    ]
    results = made["status"]["allocation"]["devices"]["results"]
    assert len({r["device"] for r in results}) == 2 and {r["pool"] for r in results} == {first_node}
    assert [r["uid"] for r in made["status"]["reservedFor"]] == [first.metadata.uid]
    status = core_api.api_client.sanitize_for_serialization(first.status)["extendedResourceClaimStatus"]
    assert status == {
        "resourceClaimName": meta["name"],
        "requestMappings": [
            {"containerName": "main", "resourceName": resource, "requestName": "container-0-request-1"}
        ],
    }

    # The class's implicit name asks for the same devices: the other node's two.
    core_api.create_namespaced_pod(namespace, extended_pod("second", scheduler.scheduler_name, implicit, 2))
    wait_for(lambda: bound("second"), 30, "the second pod bound")
    assert bound("second") == next(n for n in dra_nodes if n != first_node)
    # One more: no device is free, the device plugin's node has one: no claim is made for it.
    core_api.create_namespaced_pod(namespace, extended_pod("third", scheduler.scheduler_name, resource, 1))
    wait_for(lambda: bound("third"), 30, "the third pod bound")
    assert bound("third") == plugin_node and claims_of("third") == []
    assert core_api.read_namespaced_pod("third", namespace).status.extended_resource_claim_status is None

    # Nothing is left for a fourth; it gets the first pod's devices once the first pod and its claim are gone.
    core_api.create_namespaced_pod(namespace, extended_pod("fourth", scheduler.scheduler_name, resource, 2))

    def waiting() -> bool:
        conditions = core_api.read_namespaced_pod("fourth", namespace).status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    wait_for(waiting, 30, "the fourth pod unschedulable")
    assert bound("fourth") == ""
    core_api.delete_namespaced_pod("first", namespace, grace_period_seconds=0)
    wait_for(lambda: bound("fourth") == first_node, 60, "the fourth pod bound where the first pod's devices were")
    wait_for(lambda: claims_of("first") == [], 60, "the first pod's claim deleted with it")
    [fourth] = claims_of("fourth")
    assert {r["pool"] for r in fourth["status"]["allocation"]["devices"]["results"]} == {first_node}


def test_a_scoring_strategy_listing_a_resource_a_device_class_serves_scores_it_by_the_class_s_devices(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """kube-scheduler v1.37 scores such a resource, on nodes whose allocatable lacks it, by the devices of the
    class there and those in use. Two profiles score that resource alone: spreading (LeastAllocated), four pods
    asking for a device each go two to each of two nodes; packing (MostAllocated), four more all go to one."""
    resource = f"e2e.usher.dev/{namespace[-50:]}"
    patched = driver.resource.read_device_class(driver.class_name)
    patched.spec.extended_resource_name = resource
    driver.resource.replace_device_class(driver.class_name, patched)
    nodes = [kwok_nodes(f"dra{i}") for i in range(2)]
    for node in nodes:
        driver.publish_node(node, devices=8)
    spread, packed = f"spread-{namespace[-50:]}", f"packed-{namespace[-50:]}"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {spread}
  pluginConfig:
  - name: NodeResourcesFit
    args: {{scoringStrategy: {{type: LeastAllocated, resources: [{{name: {resource}, weight: 1}}]}}}}
- schedulerName: {packed}
  pluginConfig:
  - name: NodeResourcesFit
    args: {{scoringStrategy: {{type: MostAllocated, resources: [{{name: {resource}, weight: 1}}]}}}}
"""
    )
    usher(extra_args=("--config", str(config)))

    def place(name: str, profile: str) -> str:
        core_api.create_namespaced_pod(namespace, extended_pod(name, profile, resource, 1))
        node: str = wait_for(lambda: core_api.read_namespaced_pod(name, namespace).spec.node_name, 30, f"{name} bound")
        return node

    spread_to = Counter(place(f"spread-{i}", spread) for i in range(4))
    assert sorted(spread_to.values()) == [2, 2], f"spread by the devices in use: {spread_to}"
    packed_to = Counter(place(f"packed-{i}", packed) for i in range(4))
    assert len(packed_to) == 1, f"packed by the devices in use: {packed_to}"
