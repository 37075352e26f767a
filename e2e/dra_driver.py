"""A test DRA "driver" for e2e tests: it publishes a DeviceClass and ResourceSlices for kwok nodes.

Real drivers run a kubelet plugin per node that publishes the node's devices;
kwok nodes have no kubelet, so the test publishes the same objects itself
through the real API server. Nothing else about DRA is faked: the
resourceclaim controller in kube-controller-manager makes claims from
templates and deallocates them, usher allocates and reserves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes.client

DRIVER = "gpu.e2e.usher.dev"


def device_class(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def resource_slice(name: str, node: str, *, slices: int = 1, driver: str = DRIVER, **spec: Any) -> dict[str, Any]:
    """A node-local ResourceSlice of the pool named after the node (``slices`` in the pool); ``spec``: the rest
    (``devices``, ``sharedCounters``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": slices},
            **spec,
        },
    }


def node_slice(
    node: str,
    devices: int,
    *,
    model: str = "a100",
    memory: str = "40Gi",
    taints: Mapping[int, Sequence[Mapping[str, str]]] | None = None,
) -> dict[str, Any]:
    """``devices`` GPUs ``gpu-<i>`` on the node; ``taints``: device index -> the taints its driver puts on it."""
    entries: list[dict[str, Any]] = [
        {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": model}, "index": {"int": i}},
            "capacity": {"memory": {"value": memory}},
        }
        for i in range(devices)
    ]
    for index, device_taints in (taints or {}).items():
        entries[index]["taints"] = [dict(t) for t in device_taints]
    return resource_slice(f"{node}-{DRIVER}", node, devices=entries)


def partitioned_slices(node: str, memory: str, partitions: dict[str, str]) -> list[dict[str, Any]]:
    """One device carved into partitions (DRAPartitionableDevices): a slice offering the device's ``memory`` as a
    shared counter, and a slice of partitions, each consuming the memory given; one pool of two slices."""
    counters = resource_slice(
        f"{node}-counters",
        node,
        slices=2,
        sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": memory}}}],
    )
    devices = resource_slice(
        f"{node}-partitions",
        node,
        slices=2,
        devices=[
            {
                "name": name,
                "capacity": {"memory": {"value": size}},
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": size}}}],
            }
            for name, size in partitions.items()
        ],
    )
    return [counters, devices]


def claim_spec(device_class_name: str, selector: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim_template(name: str, device_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(device_class_name)},
    }


def claim(name: str, device_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(device_class_name),
    }


class Driver:
    """Publishes and cleans up a class and per-node slices through the real API."""

    def __init__(self, api_client: kubernetes.client.ApiClient, class_name: str) -> None:
        self.resource = kubernetes.client.ResourceV1Api(api_client)
        self.class_name = class_name
        self.slices: list[str] = []
        self.classes: list[str] = []
        """DeviceClasses a test added besides ``class_name``, removed at cleanup."""

    def read_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim as the API server serves it, as a plain dict (camelCase keys)."""
        raw: dict[str, Any] = self.resource.api_client.sanitize_for_serialization(
            self.resource.read_namespaced_resource_claim(name, namespace)
        )
        return raw

    def publish_class(self) -> None:
        self.resource.create_device_class(device_class(self.class_name))  # type: ignore[arg-type]  # a dict body is sent as is

    def publish_node(
        self, node: str, devices: int, *, taints: Mapping[int, Sequence[Mapping[str, str]]] | None = None
    ) -> None:
        body = node_slice(node, devices, taints=taints)
        self.resource.create_resource_slice(body)  # type: ignore[arg-type]
        self.slices.append(body["metadata"]["name"])

    def publish_partitions(self, node: str, memory: str, partitions: dict[str, str]) -> None:
        for body in partitioned_slices(node, memory, partitions):
            self.publish(body)

    def publish(self, body: Mapping[str, Any]) -> None:
        """Any ResourceSlice (see :func:`resource_slice`), removed at cleanup."""
        self.resource.create_resource_slice(dict(body))  # type: ignore[arg-type]
        self.slices.append(body["metadata"]["name"])

    def cleanup(self) -> None:
        for name in self.slices:
            self.resource.delete_resource_slice(name)
        for name in self.classes:
            self.resource.delete_device_class(name)
        self.resource.delete_device_class(self.class_name)
