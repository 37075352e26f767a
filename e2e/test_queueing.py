"""The queue against a real API server: gates, QueueingHints, priorities, deletions, configuration.

Every claim about what usher did *not* do is proven with its metrics (events
handled vs. attempts made), never by sleeping and looking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import kubernetes.client
import pytest

from e2e.controlplane import Cluster, wait_for
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e


def bound(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str | None:
    return core_api.read_namespaced_pod(name, namespace).spec.node_name  # type: ignore[no-any-return]


def test_a_gated_pod_waits_counted_as_gated_and_is_bound_within_2s_of_ungating(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    kwok_nodes("n")
    scheduler = usher()
    gated = pod_manifest("gated", scheduler.scheduler_name)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/approval"}]
    core_api.create_namespaced_pod(namespace, gated)
    wait_for(lambda: scheduler.metric("scheduler_pending_pods", queue="gated") == 1, 30, "the pod counted as gated")
    assert scheduler.metric("scheduler_schedule_attempts_total") == 0
    pod = core_api.read_namespaced_pod("gated", namespace)
    assert pod.spec.node_name is None
    assert [c.reason for c in pod.status.conditions or []] == ["SchedulingGated"]

    started = time.monotonic()
    core_api.patch_namespaced_pod("gated", namespace, {"spec": {"schedulingGates": None}})
    wait_for(lambda: bound(core_api, namespace, "gated"), 5, "the ungated pod bound")
    assert time.monotonic() - started < 2.0
    assert scheduler.metric("scheduler_pending_pods", queue="gated") == 0
    assert (
        scheduler.metric(
            "scheduler_queue_incoming_pods_total", event="UnscheduledPodUpdatePodSchedulingGatesEliminated"
        )
        == 1
    )


def test_a_pod_rejected_for_cpu_returns_for_a_roomy_node_not_for_a_label_change(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    settled: None,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    small = kwok_nodes("small", cpu="2", memory="8Gi")
    scheduler = usher()
    core_api.create_namespaced_pod(namespace, pod_manifest("big", scheduler.scheduler_name, cpu="6"))
    wait_for(
        lambda: scheduler.metric("scheduler_pending_pods", queue="unschedulable") == 1, 30, "the pod unschedulable"
    )
    assert scheduler.metric("scheduler_schedule_attempts_total", result="unschedulable") == 1
    assert scheduler.metric("scheduler_unschedulable_pods", plugin="NodeResourcesFit") == 1

    handled_before = scheduler.metric("scheduler_event_handling_duration_seconds_count", event="NodeUpdate")
    core_api.patch_node(small, {"metadata": {"labels": {"example.com/team": "blue"}}})
    wait_for(
        lambda: (
            scheduler.metric("scheduler_event_handling_duration_seconds_count", event="NodeUpdate") > handled_before
        ),
        30,
        "usher to handle the label change",
    )
    # Handled, yet no plugin that rejected the pod cares about labels: no hint asked, no retry. (`settled`
    # keeps earlier tests' pod deletions, on which Fit's hint is rightly asked, out of this count.)
    assert scheduler.metric("scheduler_queueing_hint_execution_duration_seconds_count", plugin="NodeResourcesFit") == 0
    assert scheduler.metric("scheduler_queue_incoming_pods_total", event="NodeUpdateNodeLabel") == 0
    assert scheduler.metric("scheduler_schedule_attempts_total", result="unschedulable") == 1
    wait_for(
        lambda: scheduler.metric("scheduler_pending_pods", queue="unschedulable") == 1, 30, "the pod unschedulable"
    )

    roomy = kwok_nodes("roomy", cpu="8", memory="8Gi")
    wait_for(lambda: bound(core_api, namespace, "big"), 30, "the pod bound to the roomy node")
    assert bound(core_api, namespace, "big") == roomy
    assert (
        scheduler.metric(
            "scheduler_queueing_hint_execution_duration_seconds_count",
            plugin="NodeResourcesFit",
            event="NodeAdd",
            hint="Queue",
        )
        == 1
    )
    assert scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") == 1


def test_priorities_order_the_pops(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    scheduling = kubernetes.client.SchedulingV1Api(core_api.api_client)
    classes = {f"{namespace}-low": 10, f"{namespace}-high": 1000}
    for name, value in classes.items():
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    # The one slot opens with a single event, the removal of a taint no pod tolerates. A node that only
    # now appeared would not do: admission gives a new node the not-ready taint, lifted a moment later,
    # and pods tried in between fail on it and wait out a backoff, each its own.
    closed = {"key": "example.com/closed", "effect": "NoSchedule"}
    node = kwok_nodes("one-slot", cpu="4", memory="8Gi", pods=1, taints=[closed])
    try:
        scheduler = usher()
        for i in range(3):
            low = pod_manifest(f"low-{i}", scheduler.scheduler_name)
            low["spec"]["priorityClassName"] = f"{namespace}-low"
            core_api.create_namespaced_pod(namespace, low)
        high = pod_manifest("high", scheduler.scheduler_name)
        high["spec"]["priorityClassName"] = f"{namespace}-high"
        core_api.create_namespaced_pod(namespace, high)
        # All four fail once on the taint; wait until their 1 s backoff is certainly over.
        wait_for(lambda: scheduler.metric("scheduler_pending_pods", queue="unschedulable") == 4, 30, "4 pods parked")
        parked = time.monotonic()
        wait_for(lambda: time.monotonic() - parked > 1.5, 5, "the backoff to pass")
        core_api.patch_node(node, {"spec": {"taints": []}})
        wait_for(
            lambda: scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") >= 1, 30, "one bound"
        )
        assert bound(core_api, namespace, "high"), "the high-priority pod popped first and took the only slot"
        assert not any(bound(core_api, namespace, f"low-{i}") for i in range(3))
        assert scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") == 1
    finally:
        for name in classes:
            scheduling.delete_priority_class(name)


def test_a_pod_deleted_while_queued_disappears_from_every_gauge(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    usher: Callable[..., UsherProcess],
) -> None:
    scheduler = usher()
    gated = pod_manifest("gated", scheduler.scheduler_name)
    gated["spec"]["schedulingGates"] = [{"name": "g"}]
    core_api.create_namespaced_pod(namespace, gated)
    core_api.create_namespaced_pod(namespace, pod_manifest("nowhere", scheduler.scheduler_name, cpu="1000"))
    wait_for(
        lambda: (
            (
                scheduler.metric("scheduler_pending_pods", queue="gated"),
                scheduler.metric("scheduler_pending_pods", queue="unschedulable"),
            )
            == (1, 1)
        ),
        30,
        "one gated and one unschedulable pod",
    )
    core_api.delete_namespaced_pod("gated", namespace, grace_period_seconds=0)
    core_api.delete_namespaced_pod("nowhere", namespace, grace_period_seconds=0)
    wait_for(lambda: scheduler.metric("scheduler_pending_pods") == 0, 30, "every gauge back to 0")
    assert scheduler.metric("scheduler_unschedulable_pods") == 0


def test_a_configuration_file_defines_the_profiles(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    tmp_path: Path,
) -> None:
    kwok_nodes("a", cpu="4", memory="8Gi")
    kwok_nodes("b", cpu="4", memory="8Gi")
    spread, packed = f"{namespace}-spread"[:63], f"{namespace}-packed"[:63]
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: {spread}
- schedulerName: {packed}
  pluginConfig:
  - name: NodeResourcesFit
    args: {{scoringStrategy: {{type: MostAllocated}}}}
"""
    )
    scheduler = usher(extra_args=("--config", str(config)))
    for i in range(4):
        core_api.create_namespaced_pod(namespace, pod_manifest(f"packed-{i}", packed, cpu="500m"))
    wait_for(
        lambda: scheduler.metric("scheduler_schedule_attempts_total", result="scheduled", profile=packed) == 4,
        30,
        "4 bound",
    )
    nodes = {bound(core_api, namespace, f"packed-{i}") for i in range(4)}
    assert len(nodes) == 1, f"MostAllocated packs the pods onto one node, got {nodes}"
    core_api.create_namespaced_pod(namespace, pod_manifest("spread-0", spread, cpu="500m"))
    wait_for(lambda: bound(core_api, namespace, "spread-0"), 30, "the spread profile's pod bound")
    assert bound(core_api, namespace, "spread-0") not in nodes, "LeastAllocated picks the emptier node"
