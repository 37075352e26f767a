"""Consumable capacity (DRAConsumableCapacity) against the real API server: devices shared by claims.

A device published with ``allowMultipleAllocations`` (a GPU split between inference servers by memory) goes to
several claims, each taking what its request asks, rounded by the device's ``requestPolicy``, while the sum fits.
The allocations are what the API server stores: every assertion reads the claims back, and the accounting
after a restart comes from those claims alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import DRIVER, Driver, resource_slice
from e2e.test_dra import claim_pod
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

MEMORY_POLICY = {"default": "4Gi", "validRange": {"min": "4Gi", "step": "4Gi"}}


def shared_gpus(node: str, count: int, memory: str = "40Gi") -> dict[str, Any]:
    """``count`` shareable GPUs on the node, each with ``memory`` handed out in steps of 4Gi."""
    return resource_slice(
        f"{node}-shared",
        node,
        devices=[
            {
                "name": f"gpu-{i}",
                "allowMultipleAllocations": True,
                "attributes": {"index": {"int": i}},
                "capacity": {"memory": {"value": memory, "requestPolicy": MEMORY_POLICY}},
            }
            for i in range(count)
        ],
    )


def memory_claim(
    name: str, class_name: str, memory: str, *, requests: int = 1, distinct: str | None = None
) -> dict[str, Any]:
    """A claim of ``requests`` requests (``gpu``, ``gpu-1``...) for one GPU each, asking ``memory`` of it."""
    exactly = {"deviceClassName": class_name, "capacity": {"requests": {"memory": memory}}}
    names = ["gpu", *(f"gpu-{i}" for i in range(1, requests))]
    devices: dict[str, Any] = {"requests": [{"name": n, "exactly": dict(exactly)} for n in names]}
    if distinct:
        devices["constraints"] = [{"requests": names, "distinctAttribute": distinct}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": devices},
    }


def results(driver: Driver, namespace: str, claim: str) -> list[Mapping[str, Any]]:
    allocation = (driver.read_claim(namespace, claim).get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def bound(core_api: kubernetes.client.CoreV1Api, namespace: str, pod: str) -> str | None:
    node: str | None = core_api.read_namespaced_pod(pod, namespace).spec.node_name
    return node


def create(
    core_api: kubernetes.client.CoreV1Api, driver: Driver, namespace: str, scheduler: str, body: Mapping[str, Any]
) -> str:
    """The claim and a pod named after it using it."""
    name = str(body["metadata"]["name"])
    driver.resource.create_namespaced_resource_claim(namespace, dict(body))  # type: ignore[arg-type]  # as is
    core_api.create_namespaced_pod(namespace, claim_pod(name, scheduler, claim_name=name))
    return name


def waiting_message(core_api: kubernetes.client.CoreV1Api, namespace: str, pod: str) -> str:
    conditions = core_api.read_namespaced_pod(pod, namespace).status.conditions or []
    return next((c.message or "" for c in conditions if c.type == "PodScheduled" and c.status == "False"), "")


def test_two_claims_share_a_gpu_by_memory_and_a_third_that_does_not_fit_waits_even_across_a_restart(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    node = kwok_nodes("c")
    driver.publish(shared_gpus(node, 1))
    scheduler = usher()
    for name in ("a", "b"):
        create(core_api, driver, namespace, scheduler.scheduler_name, memory_claim(name, driver.class_name, "14Gi"))
    wait_for(lambda: bound(core_api, namespace, "a") and bound(core_api, namespace, "b"), 30, "both pods bound")
    shares = [results(driver, namespace, name) for name in ("a", "b")]
    for [result] in shares:
        assert (result["device"], result["consumedCapacity"]) == ("gpu-0", {"memory": "16Gi"}), "14Gi rounded up"
        assert uuid.UUID(result["shareID"]).version == 5
    assert shares[0][0]["shareID"] != shares[1][0]["shareID"]

    create(core_api, driver, namespace, scheduler.scheduler_name, memory_claim("c", driver.class_name, "10Gi"))
    wait_for(lambda: "cannot allocate all claims" in waiting_message(core_api, namespace, "c"), 30, "c waiting")
    assert results(driver, namespace, "c") == [], "12Gi more does not fit beside 32Gi in 40Gi"

    scheduler.kill()
    restarted = usher()
    create(core_api, driver, namespace, restarted.scheduler_name, memory_claim("d", driver.class_name, "8Gi"))
    wait_for(lambda: bound(core_api, namespace, "d"), 30, "the restarted usher fits 8Gi into what is left")
    [result] = results(driver, namespace, "d")
    assert result["consumedCapacity"] == {"memory": "8Gi"}
    assert bound(core_api, namespace, "c") is None, "after 40Gi of 40Gi, c still waits"
    assert results(driver, namespace, "c") == []


def test_a_distinct_attribute_claim_gets_two_gpus_where_plain_requests_share_one(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    """Each request looks from the first device on, so two requests of one claim may share a GPU (as in kube)
    unless a distinctAttribute constraint says their devices differ."""
    node = kwok_nodes("d")
    driver.publish(shared_gpus(node, 2))
    scheduler = usher()
    name = scheduler.scheduler_name
    create(core_api, driver, namespace, name, memory_claim("together", driver.class_name, "8Gi", requests=2))
    spread = memory_claim("spread", driver.class_name, "8Gi", requests=2, distinct=f"{DRIVER}/index")
    create(core_api, driver, namespace, name, spread)
    wait_for(lambda: bound(core_api, namespace, "together") and bound(core_api, namespace, "spread"), 30, "bound")
    assert [r["device"] for r in results(driver, namespace, "together")] == ["gpu-0", "gpu-0"], "two shares of one"
    assert sorted(r["device"] for r in results(driver, namespace, "spread")) == ["gpu-0", "gpu-1"]
