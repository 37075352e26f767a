"""allocResourceClaims against the real API server: every claim allocated, no device given twice.

`bench.executor.allocate_claims` decides each claim's devices in turn and writes the allocations many at a
time; the smoke test cannot cover it (the only workload with the op allocates no claim at its smallest size).
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from typing import Any

import pytest

from bench.executor import allocate_claims
from bench.kube import Api, ApiError
from e2e.controlplane import Cluster
from e2e.dra_driver import resource_slice

pytestmark = pytest.mark.e2e

NODES = 3
DEVICES_PER_NODE = 4


def _node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def _slice(node: str, driver: str) -> dict[str, Any]:
    devices = [{"name": f"dev-{i}"} for i in range(DEVICES_PER_NODE)]
    return resource_slice(f"{node}-slice", node, driver=driver, devices=devices)


def _claim(name: str, device_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": device_class}}]}},
    }


async def test_every_claim_gets_a_device_of_its_own(control_plane: Cluster, namespace: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    driver, device_class = f"alloc-{suffix}.bench.usher.dev", f"alloc-{suffix}"
    nodes = [f"alloc-{suffix}-{i}" for i in range(NODES)]
    async with Api(control_plane) as api:
        try:
            await api.request(
                "POST",
                "/apis/resource.k8s.io/v1/deviceclasses",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": device_class},
                    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
                },
            )
            for node in nodes:
                await api.request("POST", "/api/v1/nodes", _node(node))
                await api.request("POST", "/apis/resource.k8s.io/v1/resourceslices", _slice(node, driver))
            claims_path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
            # As many claims as devices: one device given twice leaves a claim with none.
            for i in range(NODES * DEVICES_PER_NODE):
                await api.request("POST", claims_path, _claim(f"claim-{i}", device_class))

            await allocate_claims(api, namespace, random.Random(1))

            claims = (await api.request("GET", claims_path))["items"]
            allocations = [(claim.get("status") or {}).get("allocation") or {} for claim in claims]
            allocated = [
                (result["pool"], result["device"])
                for allocation in allocations
                for result in allocation.get("devices", {}).get("results", [])
            ]
            assert len(claims) == NODES * DEVICES_PER_NODE
            assert all(allocations), "every claim is allocated"
            assert len(allocated) == len(claims)
            assert [d for d, n in Counter(allocated).items() if n > 1] == [], "no device is given twice"
            assert set(allocated) == {(node, f"dev-{i}") for node in nodes for i in range(DEVICES_PER_NODE)}
        finally:
            for node in nodes:
                await _delete(api, f"/apis/resource.k8s.io/v1/resourceslices/{node}-slice")
                await _delete(api, f"/api/v1/nodes/{node}")
            await _delete(api, f"/apis/resource.k8s.io/v1/deviceclasses/{device_class}")


async def _delete(api: Api, path: str) -> None:
    try:
        await api.request("DELETE", path)
    except ApiError as error:
        if error.status != 404:
            raise
