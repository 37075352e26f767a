"""Telling users why a pod is held back: NotReadyForScheduling (KEP-5501) and `usher explain`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import Driver, claim
from e2e.test_dra import claim_pod
from e2e.test_scheduling import events_in, pod_manifest
from e2e.usher_process import REPO, UsherProcess

pytestmark = pytest.mark.e2e

GATES_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def pod_scheduled(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> tuple[str, str, str] | None:
    for c in core_api.read_namespaced_pod(name, namespace).status.conditions or []:
        if c.type == "PodScheduled":
            return (c.status, c.reason, c.message)
    return None


def notes(core_api: kubernetes.client.CoreV1Api, namespace: str, pod: str, reason: str) -> list[str]:
    return [e.note for e in events_in(core_api, namespace) if e.pod == pod and e.reason == reason]


def test_a_held_back_pod_gets_the_condition_and_event_and_a_gated_pod_is_left_alone(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    test_id: str,
) -> None:
    node = kwok_nodes("n")
    scheduler = usher(extra_args=("--pre-enqueue-status-delay", "1"))
    gated = pod_manifest("gated", scheduler.scheduler_name)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/approval"}]
    core_api.create_namespaced_pod(namespace, gated)
    core_api.create_namespaced_pod(namespace, claim_pod("needs-claim", scheduler.scheduler_name, claim_name="missing"))
    message = 'resourceclaim.resource.k8s.io "missing" not found'
    wait_for(
        lambda: pod_scheduled(core_api, namespace, "needs-claim") == ("False", "NotReadyForScheduling", message),
        30,
        "the NotReadyForScheduling condition",
    )
    wait_for(lambda: notes(core_api, namespace, "needs-claim", "NotReadyForScheduling") == [message], 30, "its Event")
    # Both pods were held back at the same moment with the same delay: the gated one's message equals the
    # API server's SchedulingGated condition, so it was never patched.
    assert pod_scheduled(core_api, namespace, "gated") == ("False", "SchedulingGated", GATES_MESSAGE)
    assert scheduler.metric("scheduler_async_api_call_execution_total", call_type="pod_status_patch") == 1

    driver = Driver(core_api.api_client, f"{test_id[:40]}-gpu")
    driver.publish_class()
    driver.publish_node(node, devices=1)
    try:
        driver.resource.create_namespaced_resource_claim(namespace, claim("missing", driver.class_name))
        wait_for(lambda: core_api.read_namespaced_pod("needs-claim", namespace).spec.node_name, 30, "the pod bound")
        wait_for(
            lambda: (pod_scheduled(core_api, namespace, "needs-claim") or ("",))[0] == "True",
            30,
            "PodScheduled=True once bound (the stale reason gone)",
        )
    finally:
        driver.cleanup()


def test_a_reason_that_resolves_within_the_delay_never_reaches_the_api(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    test_id: str,
) -> None:
    node = kwok_nodes("n")
    driver = Driver(core_api.api_client, f"{test_id[:40]}-gpu")
    driver.publish_class()
    driver.publish_node(node, devices=1)
    try:
        scheduler = usher(extra_args=("--pre-enqueue-status-delay", "3"))
        core_api.create_namespaced_pod(namespace, claim_pod("brief", scheduler.scheduler_name, claim_name="soon"))
        wait_for(lambda: scheduler.metric("scheduler_pending_pods", queue="gated") == 1, 30, "the pod held back")
        driver.resource.create_namespaced_resource_claim(namespace, claim("soon", driver.class_name))
        wait_for(lambda: core_api.read_namespaced_pod("brief", namespace).spec.node_name, 30, "the pod bound")
        # The pending "set" merged with the "clear": once due, it changes nothing and is dropped.
        wait_for(
            lambda: scheduler.metric("scheduler_pending_async_api_calls", call_type="pod_status_patch") == 0,
            30,
            "the delayed status call to fall due",
        )
        assert scheduler.metric("scheduler_async_api_call_execution_total", call_type="pod_status_patch") == 0
        assert notes(core_api, namespace, "brief", "NotReadyForScheduling") == []
    finally:
        driver.cleanup()


def explain(scheduler: UsherProcess, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "usher", "explain", target, "--address", f"127.0.0.1:{scheduler.port}"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "operator"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_usher_explain_says_why_a_pod_is_pending(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    node = kwok_nodes("small", cpu="2", memory="4Gi")
    scheduler = usher(extra_args=("--enable-debug-endpoints",))
    gated = pod_manifest("gated", scheduler.scheduler_name)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/approval"}]
    core_api.create_namespaced_pod(namespace, gated)
    core_api.create_namespaced_pod(namespace, pod_manifest("too-big", scheduler.scheduler_name, cpu="8"))
    wait_for(
        lambda: (
            scheduler.metric("scheduler_pending_pods", queue="unschedulable") == 1
            and scheduler.metric("scheduler_pending_pods", queue="gated") == 1
        ),
        30,
        "one gated and one unschedulable pod",
    )

    out = explain(scheduler, f"{namespace}/gated")
    assert out.returncode == 0, out.stderr
    assert f"Pod {namespace}/gated: gated" in out.stdout
    assert f"held back by SchedulingGates: {GATES_MESSAGE}" in out.stdout
    assert (
        "UnscheduledPodUpdatePodSchedulingGatesEliminated" in out.stdout
        or "PodUpdatePodSchedulingGatesEliminated" in out.stdout
    )

    out = explain(scheduler, f"{namespace}/too-big")
    assert out.returncode == 0, out.stderr
    assert f"Pod {namespace}/too-big: unschedulable" in out.stdout
    assert "held back by NodeResourcesFit: Insufficient cpu" in out.stdout
    assert f"    {node}: Insufficient cpu" in out.stdout
    assert "0/1 nodes are available: 1 Insufficient cpu." in out.stdout
    assert "NodeAdd" in out.stdout, "says which events would retry it"

    status, body = scheduler.get("/debug/queue")
    assert status == 200
    summary = json.loads(body)
    assert summary["pending"] == {"active": 0, "backoff": 0, "unschedulable": 1, "gated": 1}
    assert summary["heldBackByPlugin"] == {"SchedulingGates": 1, "NodeResourcesFit": 1}

    out = explain(scheduler, f"{namespace}/nobody")
    assert out.returncode == 0 and "unknown" in out.stdout


def test_debug_endpoints_are_off_unless_enabled(usher: Callable[..., UsherProcess]) -> None:
    scheduler = usher()
    status, _ = scheduler.get("/debug/queue")
    assert status == 404
    out = explain(scheduler, "default/anything")
    assert out.returncode == 1 and "--enable-debug-endpoints" in out.stderr
