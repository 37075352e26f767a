"""What users see: the Unschedulable condition and FailedScheduling Event in kube-scheduler's shape,
bindings that survive server errors, and a burst that never overcommits a node."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import kubernetes.client
import pytest

from e2e.controlplane import Cluster, wait_for
from e2e.faultproxy import Fault, running
from e2e.test_scheduling import (
    assert_no_node_overcommitted,
    events_in,
    fits_in,
    free_room,
    pod_manifest,
    pods_in,
    scheduled_events,
)
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e


def events_for(core_api: kubernetes.client.CoreV1Api, namespace: str, pod: str, reason: str) -> list[str]:
    return [e.note for e in events_in(core_api, namespace) if e.pod == pod and e.reason == reason]


def test_a_pod_that_fits_nowhere_gets_the_condition_and_one_event(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    small = kwok_nodes("small", cpu="2", memory="8Gi")
    cordoned = kwok_nodes("cordoned", cpu="16", memory="8Gi")
    core_api.patch_node(cordoned, {"spec": {"unschedulable": True}})
    scheduler = usher()
    core_api.create_namespaced_pod(namespace, pod_manifest("huge", scheduler.scheduler_name, cpu="4"))
    # 4 cpu on a 2-cpu node: no eviction can help there either (kube-scheduler v1.37's fitsRequest: Unresolvable).
    message = (
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )

    def condition() -> object:
        for c in core_api.read_namespaced_pod("huge", namespace).status.conditions or []:
            if c.type == "PodScheduled":
                return (c.status, c.reason, c.message)
        return None

    wait_for(lambda: condition() == ("False", "Unschedulable", message), 30, "the Unschedulable condition")
    wait_for(lambda: events_for(core_api, namespace, "huge", "FailedScheduling"), 30, "the FailedScheduling Event")
    assert events_for(core_api, namespace, "huge", "FailedScheduling") == [message]
    assert small  # the small node is one of the two counted
    # The condition patch touched nothing else: the pod is still exactly as created otherwise.
    pod = core_api.read_namespaced_pod("huge", namespace)
    assert pod.spec.node_name is None and pod.metadata.annotations is None


def test_bindings_answered_with_server_errors_still_bind_exactly_once(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    test_id: str,
    tmp_path: Path,
) -> None:
    kwok_nodes("n")
    faults = [
        Fault("POST", r"/pods/[^/]+/binding$", 500, times=3),
        Fault("POST", r"/pods/[^/]+/binding$", 429, times=1, retry_after="1"),
    ]
    with running(control_plane, faults) as proxy:
        name = f"usher-{test_id}"[:63].rstrip("-")
        log = control_plane.logs_dir / f"usher-{test_id}.log"
        with UsherProcess(
            kubeconfig=proxy.kubeconfig(tmp_path / "kubeconfig"), scheduler_name=name, log_path=log
        ) as usher:
            usher.start()
            core_api.create_namespaced_pod(namespace, pod_manifest("p", name))
            wait_for(lambda: core_api.read_namespaced_pod("p", namespace).spec.node_name, 60, "the pod bound")
            wait_for(lambda: scheduled_events(core_api, namespace, name)["p"] == 1, 30, "the Scheduled Event")
            assert proxy.count("POST", "/binding$", 500) == 3
            assert proxy.count("POST", "/binding$", 429) == 1
            assert proxy.count("POST", "/binding$", 201) == 1, "exactly one binding reached the API server"
            assert (
                usher.metric("scheduler_async_api_call_execution_total", call_type="pod_binding", result="success") == 1
            )
            assert usher.metric("scheduler_schedule_attempts_total", result="scheduled") == 1
            assert usher.terminate() == 0


def test_a_200_pod_burst_across_10_nodes_never_overcommits(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    # 10 nodes of different shapes: 58 GiB of memory against the 117 GiB the 200 pods ask for, so about half
    # of them fit (how many depends on which are bound first); the rest must stay Pending.
    nodes = [kwok_nodes(f"n{i}", cpu=str(2 + i % 4), memory=f"{4 + 2 * (i % 3)}Gi", pods=15 + i) for i in range(10)]
    scheduler = usher()
    sizes = [("250m", "256Mi"), ("500m", "512Mi"), ("100m", "1Gi")]
    for i in range(200):
        cpu, memory = sizes[i % 3]
        core_api.create_namespaced_pod(
            namespace, pod_manifest(f"p{i:03d}", scheduler.scheduler_name, cpu=cpu, memory=memory)
        )

    def settled() -> bool:
        attempts = scheduler.metric("scheduler_schedule_attempts_total")
        pending = scheduler.metric("scheduler_pending_pods", queue="active") + scheduler.metric(
            "scheduler_pending_pods", queue="backoff"
        )
        return (
            attempts >= 200
            and pending == 0
            and scheduler.metric("scheduler_pending_async_api_calls", call_type="pod_binding") == 0
        )

    wait_for(settled, 120, "every pod tried and every binding finished")
    bound = [p for p in pods_in(core_api, namespace) if p["spec"].get("nodeName")]
    per_node = assert_no_node_overcommitted(core_api, nodes)  # summed from the API, not from usher's state
    assert sum(per_node.values()) == len(bound)
    assert 0 < len(bound) < 200, f"{len(bound)} bound: the cluster holds about half"
    room = free_room(core_api, nodes)
    pending = [p for p in pods_in(core_api, namespace) if not p["spec"].get("nodeName")]
    fitting = [p["metadata"]["name"] for p in pending if any(fits_in(p, left) for left in room.values())]
    assert fitting == [], f"left pending though a node has room for them: {fitting}"
    assert scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") == len(bound)
