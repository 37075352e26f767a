"""usher against a real API server: pods bound, nothing overcommitted, foreign pods untouched,
a crash in the middle of a burst loses and double-binds nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.usher_process import UsherProcess
from usher.core.resources import pod_requests, resource_list

pytestmark = pytest.mark.e2e


def pod_manifest(name: str, scheduler: str, *, cpu: str = "250m", memory: str = "128Mi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "e2e"}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def pods_in(core_api: kubernetes.client.CoreV1Api, namespace: str) -> list[dict[str, Any]]:
    client = core_api.api_client
    items = core_api.list_namespaced_pod(namespace).items
    return [client.sanitize_for_serialization(p) for p in items]


def node_usage(
    core_api: kubernetes.client.CoreV1Api, nodes: list[str]
) -> dict[str, tuple[Counter[str], Counter[str], int]]:
    """Per node, read from the API: its allocatable, what its bound pods request, and how many pods are bound."""
    client = core_api.api_client
    all_pods = [client.sanitize_for_serialization(p) for p in core_api.list_pod_for_all_namespaces().items]
    usage: dict[str, tuple[Counter[str], Counter[str], int]] = {}
    for node_name in nodes:
        node = client.sanitize_for_serialization(core_api.read_node(node_name))
        used: Counter[str] = Counter()
        on_node = [p for p in all_pods if p["spec"].get("nodeName") == node_name]
        for pod in on_node:
            used.update(pod_requests(pod))
        usage[node_name] = (Counter(resource_list(node["status"]["allocatable"])), used, len(on_node))
    return usage


def assert_no_node_overcommitted(core_api: kubernetes.client.CoreV1Api, nodes: list[str]) -> Counter[str]:
    """Every node's bound pods request no more than its allocatable. Returns pods per node."""
    per_node: Counter[str] = Counter()
    for node_name, (allocatable, used, count) in node_usage(core_api, nodes).items():
        per_node[node_name] = count
        assert count <= allocatable["pods"], f"{node_name}: {count} pods > {allocatable['pods']}"
        for resource, amount in used.items():
            assert amount <= allocatable.get(resource, 0), f"{node_name}: {resource} {amount} > {allocatable}"
    return per_node


def free_room(core_api: kubernetes.client.CoreV1Api, nodes: list[str]) -> dict[str, Counter[str]]:
    """Each node's allocatable minus what its bound pods request (``pods`` counts pods), read from the API."""
    room: dict[str, Counter[str]] = {}
    for node_name, (allocatable, used, count) in node_usage(core_api, nodes).items():
        left = Counter(allocatable)
        left.subtract(used)
        left["pods"] -= count
        room[node_name] = left
    return room


def fits_in(pod: dict[str, Any], room: Counter[str]) -> bool:
    """Whether ``pod``'s requests (and one pod slot) fit in ``room``."""
    return room["pods"] >= 1 and all(amount <= room[resource] for resource, amount in pod_requests(pod).items())


@dataclass(frozen=True)
class Event:
    """An Event as users see it (read through core/v1, which also serves events.k8s.io Events)."""

    pod: str
    reason: str
    controller: str
    note: str


def events_in(core_api: kubernetes.client.CoreV1Api, namespace: str) -> list[Event]:
    return [
        Event(e.involved_object.name, e.reason or "", e.reporting_component or "", e.message or "")
        for e in core_api.list_namespaced_event(namespace).items
    ]


def scheduled_events(core_api: kubernetes.client.CoreV1Api, namespace: str, controller: str) -> Counter[str]:
    return Counter(
        e.pod for e in events_in(core_api, namespace) if e.reason == "Scheduled" and e.controller == controller
    )


def test_a_burst_of_pods_is_bound_without_overcommitting_any_node(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    # Capacity for exactly 30 pods of 250m: one node half full of someone else's pod,
    # one with room for 16, one limited to 6 pods by its pod count.
    crowded = kwok_nodes("crowded", cpu="4", memory="8Gi", pods=110)
    roomy = kwok_nodes("roomy", cpu="4", memory="8Gi", pods=110)
    few_pods = kwok_nodes("few-pods", cpu="32", memory="64Gi", pods=6)
    foreign = pod_manifest("foreign", "default-scheduler", cpu="2")
    foreign["spec"]["nodeName"] = crowded
    core_api.create_namespaced_pod(namespace, foreign)

    scheduler = usher()
    for i in range(30):
        core_api.create_namespaced_pod(namespace, pod_manifest(f"p{i:02d}", scheduler.scheduler_name))

    def all_running() -> bool:
        pods = [p for p in pods_in(core_api, namespace) if p["metadata"]["name"] != "foreign"]
        return len(pods) == 30 and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for(all_running, 90, "30 pods bound and Running")
    per_node = assert_no_node_overcommitted(core_api, [crowded, roomy, few_pods])
    assert per_node == {crowded: 9, roomy: 16, few_pods: 6}  # 8 of ours + the foreign pod on crowded
    assert scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") == 30
    assert set(scheduled_events(core_api, namespace, scheduler.scheduler_name).values()) == {1}
    assert scheduler.terminate() == 0, "SIGTERM must stop usher cleanly"


def test_pods_of_another_scheduler_are_never_touched(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    kwok_nodes("n")
    scheduler = usher()
    for i in range(3):
        core_api.create_namespaced_pod(namespace, pod_manifest(f"theirs-{i}", "some-other-scheduler"))
    core_api.create_namespaced_pod(namespace, pod_manifest("ours", scheduler.scheduler_name))

    def ours_bound() -> bool:
        return bool(core_api.read_namespaced_pod("ours", namespace).spec.node_name)

    wait_for(ours_bound, 30, "our pod bound")
    # Ours was created last and is bound, so usher has seen the others and left them alone.
    for i in range(3):
        pod = core_api.read_namespaced_pod(f"theirs-{i}", namespace)
        assert pod.spec.node_name is None
        assert pod.metadata.annotations is None, "kopf must write nothing to pods"
        assert not pod.metadata.finalizers
        assert not pod.status.conditions
    assert scheduler.metric("scheduler_schedule_attempts_total") == 1
    assert {e.pod for e in events_in(core_api, namespace) if e.controller == scheduler.scheduler_name} == {"ours"}


def test_a_crash_in_the_middle_of_a_burst_binds_every_pod_exactly_once(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    nodes = [kwok_nodes(f"n{i}", cpu="8", memory="16Gi", pods=110) for i in range(3)]
    first = usher()
    total = 60
    for i in range(total // 2):
        core_api.create_namespaced_pod(namespace, pod_manifest(f"p{i:02d}", first.scheduler_name, cpu="300m"))

    def bound_count() -> int:
        return sum(1 for p in pods_in(core_api, namespace) if p["spec"].get("nodeName"))

    wait_for(lambda: bound_count() >= 10, 60, "the first pods bound")
    first.kill()
    # The burst goes on while usher is down.
    for i in range(total // 2, total):
        core_api.create_namespaced_pod(namespace, pod_manifest(f"p{i:02d}", first.scheduler_name, cpu="300m"))
    assert bound_count() < total

    second = usher(scheduler_name=first.scheduler_name)
    wait_for(lambda: bound_count() == total, 90, "every pod bound after the restart")
    assert_no_node_overcommitted(core_api, nodes)
    events = scheduled_events(core_api, namespace, first.scheduler_name)
    assert max(events.values()) == 1, f"a pod was reported scheduled twice: {events.most_common(3)}"
    # The second life tried each pod it saw unbound at most once and never failed a binding.
    assert second.metric("scheduler_schedule_attempts_total", result="error") == 0
    assert second.terminate() == 0


def test_a_pod_recreated_under_the_name_of_one_just_deleted_is_scheduled(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    """The DELETED of the old pod and the ADDED of the new one arrive back to back, in either order.

    kopf orders events per UID, not per name, so the new pod's ADDED may be handled
    before the old pod's DELETED; usher must not let the old pod's delete drop the new one.
    The old pods are never bound (kwok would act on them): half belong to another
    scheduler, half are ours but held by a scheduling gate, so they sit in usher's queue.
    """
    node = kwok_nodes("n", cpu="32", memory="64Gi", pods=110)
    scheduler = usher()
    names = [f"same-{i:02d}" for i in range(30)]
    for i, name in enumerate(names):
        old = pod_manifest(name, scheduler.scheduler_name if i % 2 else "nobody")
        if i % 2:
            old["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
        core_api.create_namespaced_pod(namespace, old)
    wait_for(
        lambda: scheduler.metric("scheduler_pending_pods", queue="gated") == len(names) // 2,
        30,
        "the gated pods queued",
    )
    new_uids: dict[str, str] = {}
    for name in names:
        core_api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        created = core_api.create_namespaced_pod(namespace, pod_manifest(name, scheduler.scheduler_name))
        new_uids[name] = created.metadata.uid

    def every_new_pod_bound() -> bool:
        pods = {p["metadata"]["name"]: p for p in pods_in(core_api, namespace)}
        return all(
            name in pods and pods[name]["metadata"]["uid"] == uid and pods[name]["spec"].get("nodeName") == node
            for name, uid in new_uids.items()
        )

    wait_for(every_new_pod_bound, 60, "every recreated pod bound")
    assert scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") == len(names)
    assert scheduler.metric("scheduler_pending_pods", queue="gated") == 0
    assert scheduler.terminate() == 0
