"""Device taints (DRADeviceTaints, DRADeviceTaintRules) against the real API server and kube-controller-manager.

A tainted GPU is what a driver publishes for a device that is unhealthy or in maintenance, and what an admin's
DeviceTaintRule says of a device: usher must not hand it to a claim that does not tolerate the taint, and a
NoExecute taint (which kube-controller-manager's device-taint-eviction-controller enforces by evicting the
pods using the device) must not send the replacement pod back to the same device. Every assertion reads the API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import DRIVER, Driver, claim_spec
from e2e.test_dra import claim_pod
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

MAINTENANCE = {"key": "example.com/maintenance", "value": "firmware", "effect": "NoSchedule"}
UNHEALTHY = {"key": "example.com/unhealthy", "value": "ecc", "effect": "NoExecute"}


def tolerating_claim(name: str, class_name: str, *tolerations: Mapping[str, Any]) -> dict[str, Any]:
    spec = claim_spec(class_name)
    spec["devices"]["requests"][0]["exactly"]["tolerations"] = [dict(t) for t in tolerations]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec}


def device_of(driver: Driver, namespace: str, claim: str) -> str | None:
    allocation = (driver.read_claim(namespace, claim).get("status") or {}).get("allocation")
    if not allocation:
        return None
    [result] = allocation["devices"]["results"]
    return str(result["device"])


class Rules:
    """DeviceTaintRules made by one test, deleted at its end."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.api = kubernetes.client.CustomObjectsApi(api_client)
        self.names: list[str] = []

    def add(self, name: str, taint: Mapping[str, str], *, pool: str, device: str) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": DRIVER, "pool": pool, "device": device}, "taint": dict(taint)},
        }
        self.api.create_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules", body)
        self.names.append(name)

    def delete(self, name: str) -> None:
        self.api.delete_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules", name)
        self.names.remove(name)

    def cleanup(self) -> None:
        for name in list(self.names):
            self.delete(name)


@pytest.fixture
def rules(core_api: kubernetes.client.CoreV1Api) -> Any:
    made = Rules(core_api.api_client)
    yield made
    made.cleanup()


def rule_events(scheduler: UsherProcess) -> float:
    """DeviceTaintRule watch events usher has handled."""
    return scheduler.metric("scheduler_event_handling_duration_seconds_count", event="DeviceTaintRuleChange")


def bound(core_api: kubernetes.client.CoreV1Api, namespace: str, pod: str) -> str | None:
    node: str | None = core_api.read_namespaced_pod(pod, namespace).spec.node_name
    return node


def create(
    core_api: kubernetes.client.CoreV1Api,
    driver: Driver,
    namespace: str,
    scheduler: UsherProcess,
    name: str,
    *tolerations: Mapping[str, Any],
) -> None:
    """A claim ``name`` (with ``tolerations``) and a pod ``name`` using it."""
    driver.resource.create_namespaced_resource_claim(
        namespace,
        tolerating_claim(name, driver.class_name, *tolerations),  # type: ignore[arg-type]  # dict body as is
    )
    core_api.create_namespaced_pod(namespace, claim_pod(name, scheduler.scheduler_name, claim_name=name))


def test_a_gpu_its_driver_tainted_no_schedule_goes_only_to_a_claim_that_tolerates_it(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    node = kwok_nodes("t")
    driver.publish_node(node, devices=2, taints={0: [MAINTENANCE]})
    scheduler = usher()
    create(core_api, driver, namespace, scheduler, "first")
    wait_for(lambda: bound(core_api, namespace, "first"), 30, "the first pod bound")
    assert device_of(driver, namespace, "first") == "gpu-1", "the untainted GPU"
    create(core_api, driver, namespace, scheduler, "second")
    wait_for(
        lambda: scheduler.metric("scheduler_unschedulable_pods", plugin="DynamicResources") == 1,
        30,
        "the second pod waiting: the only GPU left is tainted",
    )
    assert device_of(driver, namespace, "second") is None
    assert bound(core_api, namespace, "second") is None

    def reason() -> str:
        conditions = core_api.read_namespaced_pod("second", namespace).status.conditions or []
        return next((c.message or "" for c in conditions if c.type == "PodScheduled"), "")

    message = wait_for(lambda: "untolerated device taints" in reason() and reason(), 30, "the taint in the reason")
    assert "cannot allocate all claims" in message, "kube-scheduler's words first"
    assert f"device {DRIVER}/{node}/gpu-0 has taint example.com/maintenance=firmware:NoSchedule" in message
    toleration = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    create(core_api, driver, namespace, scheduler, "tolerant", toleration)
    wait_for(lambda: bound(core_api, namespace, "tolerant"), 30, "the tolerating pod bound")
    raw = driver.read_claim(namespace, "tolerant")
    [result] = raw["status"]["allocation"]["devices"]["results"]
    assert (result["device"], result["tolerations"]) == ("gpu-0", [toleration])
    assert bound(core_api, namespace, "second") is None, "a tolerating claim's device stays its own"


def test_a_device_taint_rule_added_mid_burst_takes_effect_for_the_next_pod_and_its_removal_wakes_it(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
    rules: Rules,
) -> None:
    node = kwok_nodes("r")
    driver.publish_node(node, devices=4)
    scheduler = usher()
    for name in ("p0", "p1"):
        create(core_api, driver, namespace, scheduler, name)
    wait_for(lambda: all(bound(core_api, namespace, p) for p in ("p0", "p1")), 30, "the burst's first pods bound")
    taken = {device_of(driver, namespace, p) for p in ("p0", "p1")}
    free = sorted({"gpu-0", "gpu-1", "gpu-2", "gpu-3"} - taken)
    rules.add(f"{namespace}-drain", MAINTENANCE, pool=node, device=free[1])
    wait_for(lambda: rule_events(scheduler) >= 1, 30, "usher to see the DeviceTaintRule")
    for name in ("p2", "p3"):
        create(core_api, driver, namespace, scheduler, name)
    wait_for(lambda: bound(core_api, namespace, "p2") or bound(core_api, namespace, "p3"), 30, "one more pod bound")
    wait_for(
        lambda: scheduler.metric("scheduler_unschedulable_pods", plugin="DynamicResources") == 1,
        30,
        "the last pod waiting: the free GPU left is tainted by the rule",
    )
    allocated = [device_of(driver, namespace, p) for p in ("p2", "p3")]
    assert sorted(d for d in allocated if d) == [free[0]], "the tainted GPU was not allocated"
    rules.delete(f"{namespace}-drain")
    wait_for(lambda: all(bound(core_api, namespace, p) for p in ("p2", "p3")), 30, "the rule's removal woke the pod")
    assert sorted(device_of(driver, namespace, p) or "" for p in ("p0", "p1", "p2", "p3")) == [
        "gpu-0",
        "gpu-1",
        "gpu-2",
        "gpu-3",
    ]


def test_a_no_execute_taint_evicts_the_pod_and_its_replacement_gets_another_gpu(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
    rules: Rules,
) -> None:
    """kube-controller-manager evicts a pod whose device gets a NoExecute taint it does not tolerate; the claim is
    then deallocated, and the pod made in its place must not get the tainted device back (no evict-reschedule loop)."""
    node = kwok_nodes("x")
    driver.publish_node(node, devices=2)
    scheduler = usher()
    create(core_api, driver, namespace, scheduler, "victim")
    wait_for(lambda: bound(core_api, namespace, "victim"), 30, "the pod bound")
    device = device_of(driver, namespace, "victim")
    assert device is not None
    rules.add(f"{namespace}-broken", UNHEALTHY, pool=node, device=device)

    def gone() -> bool:
        return not [p for p in core_api.list_namespaced_pod(namespace).items if p.metadata.name == "victim"]

    wait_for(gone, 60, "the device-taint-eviction-controller to evict the pod")
    wait_for(lambda: device_of(driver, namespace, "victim") is None, 60, "the claim deallocated")
    core_api.create_namespaced_pod(namespace, claim_pod("victim", scheduler.scheduler_name, claim_name="victim"))
    wait_for(lambda: bound(core_api, namespace, "victim"), 30, "the replacement bound")
    assert device_of(driver, namespace, "victim") not in (None, device), "the replacement got the healthy GPU"
    pods: Sequence[Any] = core_api.list_namespaced_pod(namespace).items
    assert [p.metadata.deletion_timestamp for p in pods] == [None], "the replacement is not evicted in turn"
