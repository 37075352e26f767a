"""Device selectors written with the Kubernetes CEL library, against the real API server.

A DeviceClass and each claim select with the functions Kubernetes compiles for DRA (sets, lists, regex, ip, cidr,
url, two-variable comprehensions, ``device.allowMultipleAllocations``); the API server validates them as
kube-scheduler's environment does, and usher must pick, for each claim, the one device its selector describes.
A selector that fails at run time ends its own pod's attempts with kube-scheduler's SchedulerError and never
holds up the other pods. Every assertion reads the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import DRIVER, Driver, claim_spec, resource_slice
from e2e.test_dra import claim_pod
from e2e.test_not_ready import notes
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

ATTRIBUTES = f'device.attributes["{DRIVER}"]'
INDEX = f"int({ATTRIBUTES}.index)"  # an attribute is dyn; Kubernetes' CEL wants list literals of one type
DEVICES = 10

SELECTORS = {
    # claim -> (its selector, the one device it describes)
    "sets": (f'sets.contains(["m0", "x"], [{ATTRIBUTES}.model])', "gpu-0"),
    "is-sorted-sum": (f"[{INDEX}, 1, 2].isSorted() && [{INDEX}, 1].sum() == 2", "gpu-1"),
    "min-max": (f"[{INDEX}, 2].min() == 2 && [{INDEX}, 2].max() == 2", "gpu-2"),
    "index-of": (f"[9, 3, 3].indexOf({INDEX}) == 1 && [3, 3].lastIndexOf({INDEX}) == 1", "gpu-3"),
    "regex-find": (f'{ATTRIBUTES}.url.find("host[0-9]+") == "host4"', "gpu-4"),
    "regex-find-all": (f'{ATTRIBUTES}.ip.findAll("[0-9]+") == ["10", "0", "5", "1"]', "gpu-5"),
    "ip-cidr": (f'cidr("10.0.6.0/24").containsIP(ip({ATTRIBUTES}.ip))', "gpu-6"),
    "url": (f'url({ATTRIBUTES}.url).getHostname() == "host7.example.com"', "gpu-7"),
    "two-variable": (f"[8].exists(i, v, i == 0 && v == {ATTRIBUTES}.index)", "gpu-8"),
    "multiple-allocations": ("device.allowMultipleAllocations", "gpu-9"),
}


def devices() -> list[dict[str, Any]]:
    """gpu-<i>: model m<i>, index i, ip 10.0.<i>.1, url https://host<i>.example.com:80<i>/p; only gpu-9 may be
    allocated more than once."""
    made: list[dict[str, Any]] = []
    for i in range(DEVICES):
        device: dict[str, Any] = {
            "name": f"gpu-{i}",
            "attributes": {
                "model": {"string": f"m{i}"},
                "index": {"int": i},
                "ip": {"string": f"10.0.{i}.1"},
                "url": {"string": f"https://host{i}.example.com:80{i}/p"},
            },
            "capacity": {"memory": {"value": "40Gi"}},
        }
        if i == 9:
            device["allowMultipleAllocations"] = True
        made.append(device)
    return made


def library_class(name: str) -> dict[str, Any]:
    """A DeviceClass whose own selector uses the library too: every device's ip is in 10.0.0.0/16."""
    expression = f'device.driver == "{DRIVER}" && cidr("10.0.0.0/16").containsIP(ip({ATTRIBUTES}.ip))'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def selecting_claim(name: str, class_name: str, selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(class_name, selector),
    }


def test_each_cel_library_function_selects_its_device_and_a_failing_selector_fails_only_its_pod(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    node = kwok_nodes("c")
    driver.publish(resource_slice(f"{node}-library", node, devices=devices()))
    class_name = f"{driver.class_name}-library"
    driver.resource.create_device_class(library_class(class_name))  # type: ignore[arg-type]  # dict body as is
    try:
        scheduler = usher()

        def create(name: str, selector: str) -> None:
            driver.resource.create_namespaced_resource_claim(
                namespace,
                selecting_claim(name, class_name, selector),  # type: ignore[arg-type]
            )
            core_api.create_namespaced_pod(namespace, claim_pod(name, scheduler.scheduler_name, claim_name=name))

        # First in the queue: a selector that reads an attribute no device has, a CEL runtime error.
        create("broken", f"{ATTRIBUTES}.serial == 1")
        for name, (selector, _) in SELECTORS.items():
            create(name, selector)

        def bound(pod: str) -> bool:
            return bool(core_api.read_namespaced_pod(pod, namespace).spec.node_name)

        wait_for(lambda: all(bound(name) for name in SELECTORS), 60, "every pod with a working selector bound")
        for name, (selector, device) in SELECTORS.items():
            [result] = driver.read_claim(namespace, name)["status"]["allocation"]["devices"]["results"]
            assert result["device"] == device, f"{selector} describes {device}"

        def scheduler_error() -> Any:
            conditions = core_api.read_namespaced_pod("broken", namespace).status.conditions or []
            return next((c for c in conditions if c.type == "PodScheduled" and c.reason == "SchedulerError"), None)

        scheduled = wait_for(scheduler_error, 30, "PodScheduled=False, reason SchedulerError on the broken pod")
        assert scheduled.status == "False"
        assert scheduled.message.startswith('running "DynamicResources" filter plugin: claim ')
        assert "CEL runtime error" in scheduled.message and "serial" in scheduled.message
        events = wait_for(lambda: notes(core_api, namespace, "broken", "FailedScheduling"), 30, "an Event on the pod")
        assert "CEL runtime error" in events[0]
        assert not bound("broken")
        assert "allocation" not in (driver.read_claim(namespace, "broken").get("status") or {})
    finally:
        driver.resource.delete_device_class(class_name)
