"""DefaultPreemption against the real API server, kube-controller-manager's disruption controller and kwok.

Ten nodes are filled with pods of two priorities; half of the low-priority
pods are covered by a PodDisruptionBudget that allows no disruption. Then
high-priority pods arrive that each need one victim, together with more
low-priority pods that must not take the room preemption frees. Every
assertion reads the API server: who was deleted, who is bound where, what
each node holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from e2e import faultproxy
from e2e.controlplane import Cluster, wait_for
from e2e.test_chaos import usher_through
from e2e.test_scheduling import assert_no_node_overcommitted, events_in, pod_manifest, pods_in
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e


def placed(name: str, scheduler: str, node: str, priority_class: str, **labels: str) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler, cpu="1")
    pod["spec"]["nodeName"] = node
    pod["spec"]["priorityClassName"] = priority_class
    pod["metadata"]["labels"] = dict(labels)
    return pod


def pending(name: str, scheduler: str, priority_class: str) -> dict[str, Any]:
    pod = pod_manifest(name, scheduler, cpu="1")
    pod["spec"]["priorityClassName"] = priority_class
    return pod


def test_high_priority_pods_preempt_the_cheapest_victims_and_keep_the_room_they_freed(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    priority_classes: Callable[[int], str],
) -> None:
    low, mid, high = priority_classes(100), priority_classes(200), priority_classes(1000)
    nodes = [kwok_nodes(f"n{i}", cpu="4", memory="16Gi", pods=110) for i in range(10)]
    scheduler = usher()
    name = scheduler.scheduler_name
    # Every node full: two low-priority pods and two mid-priority pods of 1 CPU each.
    for i, node in enumerate(nodes):
        group = "protected" if i < 5 else "free"
        for j in range(2):
            core_api.create_namespaced_pod(namespace, placed(f"low-{i}-{j}", name, node, low, group=group))
            core_api.create_namespaced_pod(namespace, placed(f"mid-{i}-{j}", name, node, mid, group="mid"))
    policy = kubernetes.client.PolicyV1Api(core_api.api_client)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "protected"},
            "spec": {"minAvailable": 10, "selector": {"matchLabels": {"group": "protected"}}},
        },
    )

    def budget_settled() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("protected", namespace).status
        return status is not None and status.current_healthy == 10 and status.disruptions_allowed == 0

    wait_for(budget_settled, 60, "the disruption controller to count the protected pods")
    assert_no_node_overcommitted(core_api, nodes)

    for i in range(5):
        core_api.create_namespaced_pod(namespace, pending(f"high-{i}", name, high))
    for i in range(3):
        core_api.create_namespaced_pod(namespace, pending(f"late-low-{i}", name, low))

    def by_name() -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in pods_in(core_api, namespace)}

    def highs_bound() -> bool:
        pods = by_name()
        return all(pods.get(f"high-{i}", {}).get("spec", {}).get("nodeName") for i in range(5))

    wait_for(highs_bound, 120, "every high-priority pod bound")
    pods = by_name()
    before = {f"low-{i}-{j}" for i in range(10) for j in range(2)} | {
        f"mid-{i}-{j}" for i in range(10) for j in range(2)
    }
    gone = sorted(before - set(pods))
    assert len(gone) == 5, f"exactly one victim per preemptor: {gone}"
    assert all(victim.startswith("low-") and int(victim.split("-")[1]) >= 5 for victim in gone), (
        f"only unprotected low-priority pods are preempted while they suffice: {gone}"
    )
    assert all(pods[f"mid-{i}-{j}"]["spec"]["nodeName"] == nodes[i] for i in range(10) for j in range(2))
    assert all(not pods[f"late-low-{i}"]["spec"].get("nodeName") for i in range(3)), (
        "no lower-priority pod took the room freed for a preemptor"
    )
    assert_no_node_overcommitted(core_api, nodes)
    preempted = [e for e in events_in(core_api, namespace) if e.reason == "Preempted"]
    assert sorted(e.pod for e in preempted) == gone
    assert all(e.note.startswith("Preempted by pod ") for e in preempted)
    assert scheduler.metric("scheduler_preemption_attempts_total") >= 5
    assert scheduler.metric("scheduler_preemption_victims_count") == 5, "one victim chosen per preemptor, once"
    assert scheduler.metric("scheduler_preemption_goroutines_execution_total", result="success") == 5
    late = core_api.read_namespaced_pod("late-low-0", namespace)
    [condition] = [c for c in late.status.conditions or [] if c.type == "PodScheduled"]
    assert "preemption: " in condition.message, condition.message


def test_a_victim_whose_binding_hangs_is_evicted_at_once(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    priority_classes: Callable[[int], str],
    test_id: str,
    tmp_path: Path,
) -> None:
    """Preemption may pick a pod whose binding has not been answered: assumed on the node, not bound yet.
    kube-scheduler marks and deletes the victim past its API dispatcher, so the victim goes at once; usher's
    eviction once queued behind the victim's own binding call, and a hanging binding held it for minutes."""
    low, high = priority_classes(100), priority_classes(1000)
    kwok_nodes("one-slot", cpu="4", memory="8Gi", pods=1)
    with faultproxy.running(control_plane, []) as proxy:
        stall = proxy.stall("POST", rf"^/api/v1/namespaces/{namespace}/pods/low/binding$")
        scheduler = usher_through(proxy, control_plane, test_id, tmp_path)
        with scheduler:
            scheduler.start()
            name = scheduler.scheduler_name
            core_api.create_namespaced_pod(namespace, pending("low", name, low))
            wait_for(lambda: stall.stalled >= 1, 30, "low assumed on the only slot, its binding held unanswered")
            core_api.create_namespaced_pod(namespace, pending("high", name, high))

            def low_gone() -> bool:
                return "low" not in {p["metadata"]["name"] for p in pods_in(core_api, namespace)}

            # The binding's own timeout is 30 s, and it is retried: 15 s tells the two apart.
            wait_for(low_gone, 15, "the victim marked and deleted while its binding still hangs")
            assert stall.stalled >= 1 and not proxy.answered("POST", r"/pods/low/binding$"), "never answered"
            [marked] = proxy.answered("PATCH", rf"^/api/v1/namespaces/{namespace}/pods/low/status$")
            [deleted] = proxy.answered("DELETE", rf"^/api/v1/namespaces/{namespace}/pods/low$")
            assert (marked.status, deleted.status) == (200, 200)
            assert marked.answered <= deleted.arrived, "DisruptionTarget first, then the delete"

            def preempted() -> list[str]:
                return [e.pod for e in events_in(core_api, namespace) if e.reason == "Preempted"]

            wait_for(preempted, 15, "the victim's Preempted Event")
            assert preempted() == ["low"]
