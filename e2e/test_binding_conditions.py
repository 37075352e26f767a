"""Binding conditions (DRADeviceBindingConditions) against the real API server: devices prepared before binding.

A device that must be attached over a fabric before use is published with ``bindingConditions``. usher
allocates it and reserves the claim, then holds the pod in PreBind until the device's conditions are true in the
claim's ``status.devices`` (written here as its driver would); a failure condition or the binding timeout sends
the pod back, the claim is deallocated and allocated anew. Every assertion reads the API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import Driver, claim, resource_slice
from e2e.test_dra import claim_pod
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

ATTACHED = "example.com/attached"
FAILED = "example.com/attach-failed"


def fabric_slice(node: str) -> dict[str, Any]:
    device = {"name": "gpu-0", "bindingConditions": [ATTACHED], "bindingFailureConditions": [FAILED]}
    return resource_slice(f"{node}-fabric", node, devices=[device])


def reserved_for(raw: Mapping[str, Any], pod_uid: str) -> bool:
    return any(r.get("uid") == pod_uid for r in (raw.get("status") or {}).get("reservedFor") or [])


def report(driver: Driver, namespace: str, name: str, kind: str, *, reason: str = "Attached") -> None:
    """The driver reports a condition of the claim's device as true (status.devices)."""
    raw = driver.read_claim(namespace, name)
    [result] = raw["status"]["allocation"]["devices"]["results"]
    raw["status"]["devices"] = [
        {
            "driver": result["driver"],
            "pool": result["pool"],
            "device": result["device"],
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": f"{kind} set by the e2e driver",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    ]
    driver.resource.replace_namespaced_resource_claim_status(name, namespace, raw)


def start(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    driver: Driver,
    scheduler: UsherProcess,
) -> str:
    """The claim ``c`` and a pod using it; returns the pod's UID once usher reserved the claim for it (PreBind)."""
    driver.resource.create_namespaced_resource_claim(namespace, claim("c", driver.class_name))  # type: ignore[arg-type]
    pod = core_api.create_namespaced_pod(namespace, claim_pod("p", scheduler.scheduler_name, claim_name="c"))
    uid = str(pod.metadata.uid)
    wait_for(lambda: reserved_for(driver.read_claim(namespace, "c"), uid), 30, "the claim reserved for the pod")
    return uid


def bound(core_api: kubernetes.client.CoreV1Api, namespace: str) -> str | None:
    node: str | None = core_api.read_namespaced_pod("p", namespace).spec.node_name
    return node


def test_the_pod_binds_only_once_its_device_is_attached(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    node = kwok_nodes("b")
    driver.publish(fabric_slice(node))
    start(core_api, namespace, driver, usher())
    raw = driver.read_claim(namespace, "c")
    [result] = raw["status"]["allocation"]["devices"]["results"]
    assert (result["bindingConditions"], result["bindingFailureConditions"]) == ([ATTACHED], [FAILED])
    assert raw["status"]["allocation"]["allocationTimestamp"], "the binding timeout's start"
    assert bound(core_api, namespace) is None, "held in PreBind: the device is not attached yet"
    report(driver, namespace, "c", ATTACHED)
    assert wait_for(lambda: bound(core_api, namespace), 30, "the pod bound once the device is attached") == node


def test_a_failed_attachment_deallocates_the_claim_and_the_pod_gets_the_device_anew(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    node = kwok_nodes("f")
    driver.publish(fabric_slice(node))
    uid = start(core_api, namespace, driver, usher())
    report(driver, namespace, "c", FAILED, reason="NoPath")

    def allocated_anew() -> bool:
        raw = driver.read_claim(namespace, "c")
        status = raw.get("status") or {}
        # Deallocation clears status.devices: an allocation without the failure is a new one.
        return bool(status.get("allocation")) and not status.get("devices") and reserved_for(raw, uid)

    wait_for(allocated_anew, 60, "the claim deallocated after the failure and allocated again")
    assert bound(core_api, namespace) is None
    report(driver, namespace, "c", ATTACHED)
    assert wait_for(lambda: bound(core_api, namespace), 30, "the pod bound on the second attachment") == node


def test_a_device_never_attached_times_out_and_is_allocated_again(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
    tmp_path: Path,
) -> None:
    node = kwok_nodes("t")
    driver.publish(fabric_slice(node))
    scheduler_name = f"bt-{namespace[-50:]}"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {scheduler_name}
  pluginConfig:
  - name: DynamicResources
    args: {{bindingTimeout: 2s}}
"""
    )
    scheduler = usher(scheduler_name=scheduler_name, extra_args=("--config", str(config)))
    start(core_api, namespace, driver, scheduler)
    first = driver.read_claim(namespace, "c")["status"]["allocation"]["allocationTimestamp"]

    def stamped_again() -> bool:
        allocation = (driver.read_claim(namespace, "c").get("status") or {}).get("allocation") or {}
        return bool(allocation.get("allocationTimestamp")) and allocation["allocationTimestamp"] != first

    wait_for(stamped_again, 60, "the claim deallocated at the timeout and allocated again, with a new timestamp")
    assert bound(core_api, namespace) is None
    report(driver, namespace, "c", ATTACHED)
    assert wait_for(lambda: bound(core_api, namespace), 30, "bound once attached in time") == node
