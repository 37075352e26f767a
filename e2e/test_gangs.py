"""Gang scheduling against the real API server: scheduling.k8s.io/v1beta1 PodGroups, all of a gang or none of it.

The session's control plane serves scheduling.k8s.io/v1beta1 (``GenericWorkload``
and ``--runtime-config``, see e2e/pytest_plugin.py); each test makes its own
kwok nodes, PodGroups and pods, runs its own usher, and reads the outcome from
the API: where pods are bound, their conditions and Events, the PodGroup's
``PodGroupInitiallyScheduled`` condition.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.dra_driver import Driver, claim, claim_template
from e2e.test_dra import claims_in
from e2e.test_not_ready import explain, notes, pod_scheduled
from e2e.test_scheduling import assert_no_node_overcommitted, pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

WAITING_FOR_QUORUM = "waiting for minCount pods from a gang to appear in scheduling queue"


def pod_group(name: str, min_count: int | None) -> dict[str, Any]:
    """A PodGroup: the gang policy with ``min_count``, else the basic policy."""
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": policy},
    }


def gang_member(name: str, scheduler: str, group: str, *, cpu: str = "1") -> dict[str, Any]:
    pod = pod_manifest(name, scheduler, cpu=cpu, memory="64Mi")
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def pod_group_conditions(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> list[dict[str, Any]]:
    scheduling = kubernetes.client.SchedulingV1beta1Api(core_api.api_client)
    raw = core_api.api_client.sanitize_for_serialization(scheduling.read_namespaced_pod_group(name, namespace))
    return list((raw.get("status") or {}).get("conditions") or [])


def initially_scheduled(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> tuple[str, str] | None:
    for condition in pod_group_conditions(core_api, namespace, name):
        if condition["type"] == "PodGroupInitiallyScheduled":
            return condition["status"], condition["reason"]
    return None


def bound(core_api: kubernetes.client.CoreV1Api, namespace: str, *names: str) -> list[str]:
    return [n for n in names if core_api.read_namespaced_pod(n, namespace).spec.node_name]


@pytest.fixture
def scheduling(core_api: kubernetes.client.CoreV1Api) -> kubernetes.client.SchedulingV1beta1Api:
    return kubernetes.client.SchedulingV1beta1Api(core_api.api_client)


def test_a_gang_that_fits_is_bound_completely(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    nodes = [kwok_nodes("n0", cpu="2"), kwok_nodes("n1", cpu="2")]
    scheduler = usher()
    scheduling.create_namespaced_pod_group(namespace, pod_group("train", 4))
    members = [f"w{i}" for i in range(4)]
    for name in members:
        core_api.create_namespaced_pod(namespace, gang_member(name, scheduler.scheduler_name, "train"))

    wait_for(lambda: bound(core_api, namespace, *members) == members, 30, "the whole gang bound")
    wait_for(
        lambda: initially_scheduled(core_api, namespace, "train") == ("True", "Scheduled"),
        30,
        "PodGroupInitiallyScheduled=True",
    )
    assert_no_node_overcommitted(core_api, nodes)
    assert (
        scheduler.metric("scheduler_schedule_attempts_total", result="scheduled", profile=scheduler.scheduler_name) == 4
    )


def test_a_gang_that_cannot_fit_binds_nobody_and_holds_nothing(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    kwok_nodes("n0", cpu="2")
    scheduler = usher()
    scheduling.create_namespaced_pod_group(namespace, pod_group("train", 3))
    members = ["w0", "w1", "w2"]
    for name in members:
        core_api.create_namespaced_pod(namespace, gang_member(name, scheduler.scheduler_name, "train"))

    wait_for(
        lambda: initially_scheduled(core_api, namespace, "train") == ("False", "Unschedulable"),
        30,
        "PodGroupInitiallyScheduled=False, reason Unschedulable",
    )
    wait_for(
        lambda: all(notes(core_api, namespace, name, "FailedScheduling") for name in members),
        30,
        "a FailedScheduling Event on every member",
    )
    messages = {note for name in members for note in notes(core_api, namespace, name, "FailedScheduling")}
    assert len(messages) == 1, f"one message for the group: {messages}"
    [message] = messages
    assert message.startswith("pod group " + namespace + "/train: minCount (3) cannot be satisfied: 2 scheduled")
    [condition] = pod_group_conditions(core_api, namespace, "train")
    assert message.endswith(condition["message"]), "the PodGroup says the same"
    wait_for(
        lambda: all(pod_scheduled(core_api, namespace, n) == ("False", "Unschedulable", message) for n in members),
        30,
        "the same Unschedulable condition on every member",
    )
    assert bound(core_api, namespace, *members) == []

    # Nothing is held for the gang: a pod that needs the whole node fits.
    core_api.create_namespaced_pod(namespace, pod_manifest("whole", scheduler.scheduler_name, cpu="2", memory="64Mi"))
    wait_for(lambda: bound(core_api, namespace, "whole") == ["whole"], 30, "the smaller pod bound")
    assert bound(core_api, namespace, *members) == []


def test_two_gangs_competing_for_room_for_one_end_one_complete_and_one_empty(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    kwok_nodes("n0", cpu="3")
    scheduler = usher()
    for group in ("a", "b"):
        scheduling.create_namespaced_pod_group(namespace, pod_group(group, 3))
    gangs = {group: [f"{group}{i}" for i in range(3)] for group in ("a", "b")}
    for i in range(3):  # interleaved, as two Jobs starting together would create them
        for group in ("a", "b"):
            core_api.create_namespaced_pod(namespace, gang_member(gangs[group][i], scheduler.scheduler_name, group))

    def settled() -> bool:
        full = [g for g, names in gangs.items() if bound(core_api, namespace, *names) == names]
        return len(full) == 1 and any(
            initially_scheduled(core_api, namespace, g) == ("False", "Unschedulable") for g in gangs if g not in full
        )

    wait_for(settled, 60, "one gang bound whole, the other reported unschedulable")
    winner = next(g for g, names in gangs.items() if bound(core_api, namespace, *names) == names)
    loser = "b" if winner == "a" else "a"
    assert bound(core_api, namespace, *gangs[loser]) == [], "the other gang holds nothing"
    assert initially_scheduled(core_api, namespace, winner) == ("True", "Scheduled")


def test_20_gangs_of_8_on_room_for_12_end_12_whole_and_8_empty_until_room_appears(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    """12 nodes of 8 CPUs hold 12 gangs of eight 1-CPU pods. 20 gangs arrive interleaved, as 20 Jobs
    starting together would create them: 12 end bound whole, 8 hold nothing and say why; 8 more nodes
    come and the 8 waiting gangs are bound whole too. No gang is ever partly bound, no node overcommitted."""
    nodes = [kwok_nodes(f"r{i:02d}", cpu="8", memory="64Gi") for i in range(12)]
    scheduler = usher()
    gangs = {f"g{g:02d}": [f"g{g:02d}-w{i}" for i in range(8)] for g in range(20)}
    for group in gangs:
        scheduling.create_namespaced_pod_group(namespace, pod_group(group, 8))
    for i in range(8):
        for group, members in gangs.items():
            core_api.create_namespaced_pod(namespace, gang_member(members[i], scheduler.scheduler_name, group))

    def bound_per_gang() -> dict[str, int]:
        counts = dict.fromkeys(gangs, 0)
        for pod in core_api.list_namespaced_pod(namespace).items:
            if pod.spec.node_name:
                counts[pod.metadata.name.split("-", 1)[0]] += 1
        return counts

    def settled() -> bool:
        counts = bound_per_gang()
        whole = [g for g, n in counts.items() if n == 8]
        waiting = [g for g, n in counts.items() if n == 0]
        return len(whole) == 12 and all(
            initially_scheduled(core_api, namespace, g) == ("False", "Unschedulable") for g in waiting
        )

    wait_for(settled, 120, "12 gangs bound whole, the other 8 reported unschedulable")
    counts = bound_per_gang()
    assert sorted(counts.values()) == [0] * 8 + [8] * 12, f"no gang partly bound: {counts}"
    waiting = [g for g, n in counts.items() if n == 0]
    for group in waiting:
        [condition] = pod_group_conditions(core_api, namespace, group)
        assert condition["message"].startswith("minCount (8) cannot be satisfied"), condition
        told = f"pod group {namespace}/{group}: {condition['message']}"
        wait_for(
            lambda group=group, told=told: told in notes(core_api, namespace, gangs[group][0], "FailedScheduling"),
            30,
            f"{group}: its pods told what the PodGroup says",
        )
    assert assert_no_node_overcommitted(core_api, nodes)

    more = [kwok_nodes(f"s{i:02d}", cpu="8", memory="64Gi") for i in range(8)]
    wait_for(lambda: set(bound_per_gang().values()) == {8}, 120, "the 8 waiting gangs bound once room appeared")
    assert all(initially_scheduled(core_api, namespace, g) == ("True", "Scheduled") for g in gangs)
    assert assert_no_node_overcommitted(core_api, nodes + more)


def test_pods_wait_for_their_quorum_told_why_then_go_together(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    kwok_nodes("n0", cpu="4")
    scheduler = usher(extra_args=("--pre-enqueue-status-delay", "1", "--enable-debug-endpoints"))
    scheduling.create_namespaced_pod_group(namespace, pod_group("train", 3))
    for name in ("w0", "w1"):
        core_api.create_namespaced_pod(namespace, gang_member(name, scheduler.scheduler_name, "train"))

    for name in ("w0", "w1"):
        wait_for(
            lambda name=name: (
                pod_scheduled(core_api, namespace, name)  # type: ignore[misc]
                == ("False", "NotReadyForScheduling", WAITING_FOR_QUORUM)
            ),
            30,
            f"{name}'s NotReadyForScheduling condition",
        )
    wait_for(lambda: notes(core_api, namespace, "w0", "NotReadyForScheduling") == [WAITING_FOR_QUORUM], 30, "its Event")
    out = explain(scheduler, f"{namespace}/w0")
    assert out.returncode == 0, out.stderr
    assert f"waiting for 1 more pod of PodGroup {namespace}/train" in out.stdout
    report = json.loads(scheduler.get(f"/debug/pods/{namespace}/w0")[1])
    assert report["podGroup"]["members"] == {f"{namespace}/w0": "gated", f"{namespace}/w1": "gated"}
    assert bound(core_api, namespace, "w0", "w1") == []

    core_api.create_namespaced_pod(namespace, gang_member("w2", scheduler.scheduler_name, "train"))

    wait_for(lambda: bound(core_api, namespace, "w0", "w1", "w2") == ["w0", "w1", "w2"], 30, "the gang bound together")
    wait_for(
        lambda: (pod_scheduled(core_api, namespace, "w0") or ("",))[0] == "True",
        30,
        "PodScheduled=True once bound (the NotReadyForScheduling reason gone)",
    )


def test_a_gang_short_of_several_pods_preempts_just_enough_lower_priority_pods(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    priority_classes: Callable[[int], str],
) -> None:
    """Workload-aware preemption: no node has room for any member, so the gang is two pods short;
    usher evicts two of the three batch pods (one per member), nominates, and binds the whole gang."""
    low, high = priority_classes(100), priority_classes(1000)
    nodes = [kwok_nodes(f"n{i}", cpu="2") for i in range(3)]
    scheduler = usher()
    batch = [f"batch-{i}" for i in range(3)]
    for name, node in zip(batch, nodes, strict=True):
        pod = pod_manifest(name, scheduler.scheduler_name, cpu="2", memory="64Mi")
        pod["spec"].update(nodeName=node, priorityClassName=low)
        core_api.create_namespaced_pod(namespace, pod)
    group = pod_group("train", 2)
    group["spec"]["priorityClassName"] = high
    scheduling.create_namespaced_pod_group(namespace, group)
    members = ["w0", "w1"]
    for name in members:
        pod = gang_member(name, scheduler.scheduler_name, "train", cpu="2")
        pod["spec"]["priorityClassName"] = high
        core_api.create_namespaced_pod(namespace, pod)

    wait_for(lambda: bound(core_api, namespace, *members) == members, 90, "the whole gang bound")
    pods = core_api.list_namespaced_pod(namespace).items
    left = [p.metadata.name for p in pods if p.metadata.name in batch and not p.metadata.deletion_timestamp]
    assert len(left) == 1, f"exactly two batch pods evicted, one kept: {left}"
    assert assert_no_node_overcommitted(core_api, nodes)
    told = "preemption: found a placement for podgroup, preempting 2 victims"
    wait_for(
        lambda: any(told in n for n in notes(core_api, namespace, "w0", "FailedScheduling")), 30, "the gang told why"
    )
    # One preemption evicted, two victims. The gang may be tried again while they terminate: kube-scheduler
    # counts that PostFilter run too (Success, "ongoing preemption"), evicting nobody.
    assert scheduler.metric("scheduler_workload_preemption_victims_count") == 1
    assert scheduler.metric("scheduler_workload_preemption_victims_sum") == 2
    assert scheduler.metric("scheduler_workload_preemption_attempts_total", result="Success") >= 1
    assert scheduler.metric("scheduler_podgroup_schedule_attempts_total", result="scheduled") == 1


def test_a_gang_with_a_topology_constraint_is_bound_within_one_rack(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    """TopologyAwareWorkloadScheduling: rack a has room for two of the four members, rack b for all of
    them; the cluster as a whole would take them spread over both racks, the constraint says one."""
    rack_a = [kwok_nodes(f"a{i}", cpu="1", labels={"rack": "a"}) for i in range(2)]
    rack_b = [kwok_nodes(f"b{i}", cpu="2", labels={"rack": "b"}) for i in range(2)]
    scheduler = usher()
    group = pod_group("train", 4)
    group["spec"]["schedulingConstraints"] = {"topology": [{"key": "rack"}]}
    created = scheduling.create_namespaced_pod_group(namespace, group)
    assert created.spec.scheduling_constraints.topology[0].key == "rack", "the API server kept the constraint"
    members = [f"w{i}" for i in range(4)]
    for name in members:
        core_api.create_namespaced_pod(namespace, gang_member(name, scheduler.scheduler_name, "train"))

    wait_for(lambda: bound(core_api, namespace, *members) == members, 60, "the whole gang bound")
    nodes = {core_api.read_namespaced_pod(n, namespace).spec.node_name for n in members}
    assert nodes == set(rack_b), f"all in rack b: {nodes}"
    assert scheduler.metric("scheduler_generated_placements_total") == 2
    assert scheduler.metric("scheduler_placement_evaluations_total", result="feasible") == 1
    assert assert_no_node_overcommitted(core_api, rack_a + rack_b)


def shared_claim_member(name: str, scheduler: str, group: str, entry: dict[str, Any]) -> dict[str, Any]:
    pod = gang_member(name, scheduler, group, cpu="100m")
    pod["spec"]["resourceClaims"] = [entry]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": entry["name"]}]
    return pod


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"name": "gpu", "resourceClaimName": "shared"}, id="claim"),
        pytest.param({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, id="template"),
    ],
)
def test_a_gang_shares_one_claim_through_its_pod_group(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
    entry: dict[str, Any],
) -> None:
    """DRAWorkloadResourceClaims: the PodGroup lists the claim (an existing one, or a template
    kube-controller-manager makes one claim of for the group); all four members name it, so the device is
    allocated once, in the gang's one cycle, every member lands on its node, and the claim is reserved for
    the PodGroup instead of for each pod."""
    nodes = [kwok_nodes(f"d{i}", cpu="4") for i in range(3)]
    for node in nodes:
        driver.publish_node(node, devices=1)
    if "resourceClaimName" in entry:
        driver.resource.create_namespaced_resource_claim(namespace, claim("shared", driver.class_name))
    else:
        driver.resource.create_namespaced_resource_claim_template(
            namespace, claim_template("one-gpu", driver.class_name)
        )
    scheduler = usher()
    group = pod_group("train", 4)
    group["spec"]["resourceClaims"] = [entry]
    created = scheduling.create_namespaced_pod_group(namespace, group)
    assert created.spec.resource_claims, "the API server kept the PodGroup's claims"
    members = [f"w{i}" for i in range(4)]
    for name in members:
        core_api.create_namespaced_pod(namespace, shared_claim_member(name, scheduler.scheduler_name, "train", entry))

    wait_for(lambda: bound(core_api, namespace, *members) == members, 60, "the whole gang bound")
    [item] = claims_in(driver.resource, namespace)
    if "resourceClaimTemplateName" in entry:
        [owner] = item["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("PodGroup", "train", created.metadata.uid)
    [result] = item["status"]["allocation"]["devices"]["results"]
    assert item["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": created.metadata.uid}
    ]
    placed = {core_api.read_namespaced_pod(n, namespace).spec.node_name for n in members}
    assert placed == {result["pool"]}, f"every member on the node of the one device: {placed}"


def test_a_gang_whose_shared_claim_is_pinned_to_a_vanished_node_gets_it_back_and_lands_elsewhere(
    core_api: kubernetes.client.CoreV1Api,
    scheduling: kubernetes.client.SchedulingV1beta1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    """The PodGroup keeps its claim reserved after its pods are gone (kube-controller-manager releases a
    group's reservation only with the PodGroup), so the claim stays allocated on its node. That node goes
    away: the next members fit nowhere, and DynamicResources' PodGroupPostFilter gives the claim back, so
    they are placed, claim and all, on a node that is there."""
    first, second = kwok_nodes("x", cpu="4"), kwok_nodes("y", cpu="4")
    driver.publish_node(first, devices=1)
    scheduler = usher()
    entry = {"name": "gpu", "resourceClaimName": "shared"}
    driver.resource.create_namespaced_resource_claim(namespace, claim("shared", driver.class_name))
    group = pod_group("train", 2)
    group["spec"]["resourceClaims"] = [entry]
    created = scheduling.create_namespaced_pod_group(namespace, group)
    for name in ("a0", "a1"):
        core_api.create_namespaced_pod(namespace, shared_claim_member(name, scheduler.scheduler_name, "train", entry))
    wait_for(lambda: bound(core_api, namespace, "a0", "a1") == ["a0", "a1"], 60, "the first members bound")
    assert {core_api.read_namespaced_pod(n, namespace).spec.node_name for n in ("a0", "a1")} == {first}

    for name in ("a0", "a1"):
        core_api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    core_api.delete_node(first)
    driver.publish_node(second, devices=1)
    [held] = claims_in(driver.resource, namespace)
    assert held["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": created.metadata.uid}
    ], "still the group's, allocated on the vanished node"

    for name in ("b0", "b1"):
        core_api.create_namespaced_pod(namespace, shared_claim_member(name, scheduler.scheduler_name, "train", entry))
    wait_for(lambda: bound(core_api, namespace, "b0", "b1") == ["b0", "b1"], 60, "the next members bound")
    assert {core_api.read_namespaced_pod(n, namespace).spec.node_name for n in ("b0", "b1")} == {second}
    [again] = claims_in(driver.resource, namespace)
    [result] = again["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == second, "allocated anew where the gang is"


def test_an_api_server_without_pod_groups_gets_usher_without_gangs_said_once(tmp_path: Path) -> None:
    """A control plane of its own that does not serve scheduling.k8s.io/v1beta1 (beta APIs off, as most
    clusters run): usher starts, says once that it runs without gang scheduling, and schedules pods."""
    from e2e import controlplane

    plane = controlplane.start(tmp_path / "plane", kcm=False)
    try:
        with pytest.raises(controlplane.ApiError) as served:
            plane.request("GET", "/apis/scheduling.k8s.io/v1beta1")
        assert served.value.status == 404
        plane.add_kwok_node("only", cpu="4", memory="8Gi")
        log = tmp_path / "usher.log"
        usher = UsherProcess(kubeconfig=plane.kubeconfig, scheduler_name="usher", log_path=log).start()
        try:
            plane.request("POST", "/api/v1/namespaces/default/pods", pod_manifest("plain", "usher"))

            def node_of_pod() -> str:
                return str(plane.request("GET", "/api/v1/namespaces/default/pods/plain")["spec"].get("nodeName") or "")

            wait_for(lambda: node_of_pod() == "only", 60, "the pod bound without gang support")
        finally:
            usher.terminate()
        text = log.read_text()
        said = "does not serve scheduling.k8s.io/v1beta1 PodGroups: running without gang scheduling"
        assert text.count(said) == 1, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
    finally:
        plane.stop()
