"""Chaos: usher and the control plane under real faults, judged by what the API server holds afterwards.

Each test starts a burst of pods (plain and with DRA claims), breaks
something real in the middle of it, and then reads the cluster back:

- every pod is bound, and usher reported at most one Scheduled Event per pod
  (it writes one only after a binding the API server accepted);
- no node holds more than its allocatable;
- no device is allocated to two claims; every claim is allocated and reserved
  for exactly its pod, and that pod is bound to the node the allocation names;
- usher is still the same process and healthy (except where usher itself is
  the thing killed: then its successor is).

Nothing here waits on a timing: each wait is for a condition read from the
API server. A leader stopped by SIGTERM, its Lease calls stalled and its Lease deleted,
mid DRA burst with a follower waiting, are here (plain-pod versions with the
bindings' timing in ``test_leader_fencing.py``); a plain-pod crash of usher mid-burst is
``test_scheduling.py``'s ``test_a_crash_in_the_middle_of_a_burst_binds_every_pod_exactly_once``.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import urllib3

from e2e import faultproxy
from e2e.controlplane import Cluster, ControlPlane, RestartableControlPlane, wait_for
from e2e.dra_driver import Driver, claim_template
from e2e.test_dra import claim_pod, claims_in
from e2e.test_leader_fencing import LEASE_CALLS, two_replicas
from e2e.test_scheduling import assert_no_node_overcommitted, pod_manifest, pods_in, scheduled_events
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

#: pods/binding request paths, as the fault proxy matches them.
BINDING = r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$"

#: Errors of the test's own API client while the API server or etcd is down.
OUTAGE = (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, ConnectionError)


class Burst:
    """Half plain pods, half pods with a claim from a template, created in two waves around a fault."""

    def __init__(
        self, core_api: kubernetes.client.CoreV1Api, namespace: str, scheduler: str, driver: Driver, total: int
    ) -> None:
        self.core_api, self.namespace, self.scheduler, self.total = core_api, namespace, scheduler, total
        driver.resource.create_namespaced_resource_claim_template(namespace, claim_template("one", driver.class_name))
        self.created = 0

    def create(self, count: int) -> None:
        """Create the next ``count`` pods, each retried through an outage until the API server takes it."""
        for _ in range(count):
            i = self.created
            name = f"p{i:03d}"
            manifest = claim_pod(name, self.scheduler, template="one") if i % 2 else pod_manifest(name, self.scheduler)
            wait_for(functools.partial(self._create, manifest), 120, f"{name} created", ignore=OUTAGE)
            self.created += 1

    def _create(self, manifest: dict[str, Any]) -> bool:
        try:
            self.core_api.create_namespaced_pod(self.namespace, manifest)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:  # 409: an earlier try reached the API server before the outage hid its answer
                raise
        return True

    def bound(self) -> int:
        return sum(1 for p in pods_in(self.core_api, self.namespace) if p["spec"].get("nodeName"))


def assert_consistent(
    core_api: kubernetes.client.CoreV1Api, driver: Driver, namespace: str, nodes: list[str], scheduler: str, total: int
) -> None:
    """The end state every chaos run must reach (see the module docstring)."""
    pods = {p["metadata"]["uid"]: p for p in pods_in(core_api, namespace)}
    assert len(pods) == total and all(p["spec"].get("nodeName") for p in pods.values())
    assert_no_node_overcommitted(core_api, nodes)
    events = scheduled_events(core_api, namespace, scheduler)
    assert not events or max(events.values()) == 1, f"a pod was reported scheduled twice: {events.most_common(3)}"
    devices: Counter[tuple[str, str, str]] = Counter()
    # The claims the pods' statuses name: one per pod with a template claim. kube-controller-manager may
    # have created a second one for a pod when the outage ate its create's answer (it retries under a new
    # generated name): such an orphan is named by no pod, and usher must have given it nothing.
    named = {s["resourceClaimName"] for p in pods.values() for s in p["status"].get("resourceClaimStatuses") or []}
    assert len(named) == total // 2, "one claim per pod with a template claim"
    listed = claims_in(driver.resource, namespace)
    claims = [c for c in listed if c["metadata"]["name"] in named]
    assert len(claims) == total // 2, "every claim the pods name exists"
    for orphan in (c for c in listed if c["metadata"]["name"] not in named):
        status = orphan.get("status") or {}
        assert not status.get("allocation") and not status.get("reservedFor"), f"usher used an orphan: {orphan}"
    for item in claims:
        status = item.get("status") or {}
        allocation = status.get("allocation")
        assert allocation is not None, f"claim {item['metadata']['name']} is not allocated"
        for result in allocation["devices"]["results"]:
            devices[(result["driver"], result["pool"], result["device"])] += 1
        reserved = status.get("reservedFor") or []
        assert len(reserved) == 1, f"claim {item['metadata']['name']} is reserved for {reserved}"
        pod = pods.get(reserved[0]["uid"])
        assert pod is not None, f"claim {item['metadata']['name']} is reserved for a pod that does not exist"
        [term] = allocation["nodeSelector"]["nodeSelectorTerms"]
        assert term["matchFields"][0]["values"] == [pod["spec"]["nodeName"]], "the pod is bound where its device is"
    doubled = [device for device, n in devices.items() if n > 1]
    assert not doubled, f"devices allocated to two claims: {doubled}"


def nodes_with_devices(kwok_nodes: Callable[..., str], driver: Driver, count: int, devices: int) -> list[str]:
    nodes = [kwok_nodes(f"n{i}", cpu="16", memory="32Gi", pods=110) for i in range(count)]
    for node in nodes:
        driver.publish_node(node, devices=devices)
    return nodes


def usher_through(proxy: faultproxy.FaultProxy, control_plane: Cluster, test_id: str, tmp_path: Path) -> UsherProcess:
    """usher (not started yet) talking to the API server through the fault proxy."""
    return UsherProcess(
        kubeconfig=proxy.kubeconfig(tmp_path / "usher.kubeconfig"),
        scheduler_name=f"usher-{test_id}"[:63].rstrip("-"),
        log_path=control_plane.logs_dir / f"usher-{test_id}.log",
    )


def healthy(scheduler: UsherProcess) -> None:
    assert scheduler.process is not None and scheduler.process.poll() is None, "usher is still the same process"
    assert scheduler.get("/healthz")[0] == 200


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_a_control_plane_component_crashing_mid_burst_loses_and_doubles_nothing(
    restartable_control_plane: RestartableControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
    component: str,
) -> None:
    total = 40
    nodes = nodes_with_devices(kwok_nodes, driver, 3, devices=8)
    scheduler = usher()
    burst = Burst(core_api, namespace, scheduler.scheduler_name, driver, total)
    burst.create(total // 2)
    wait_for(lambda: burst.bound() >= 4, 60, "the first pods bound")
    restartable_control_plane.restart(component, kill=True)
    burst.create(total - total // 2)
    wait_for(lambda: burst.bound() == total, 180, "every pod bound after the restart", ignore=OUTAGE)
    assert_consistent(core_api, driver, namespace, nodes, scheduler.scheduler_name, total)
    healthy(scheduler)


def test_usher_killed_mid_burst_of_pods_with_claims_allocates_every_device_once(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    driver: Driver,
) -> None:
    total = 40
    nodes = nodes_with_devices(kwok_nodes, driver, 3, devices=8)
    first = usher()
    burst = Burst(core_api, namespace, first.scheduler_name, driver, total)
    burst.create(total // 2)
    wait_for(lambda: burst.bound() >= 6, 60, "the first pods bound")
    first.kill()
    burst.create(total - total // 2)
    second = usher(scheduler_name=first.scheduler_name)
    wait_for(lambda: burst.bound() == total, 120, "every pod bound by the second life")
    assert_consistent(core_api, driver, namespace, nodes, first.scheduler_name, total)
    healthy(second)


def test_one_api_call_in_ten_failing_with_503_or_429_loses_and_doubles_nothing(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    driver: Driver,
    control_plane: Cluster,
    test_id: str,
    tmp_path: Path,
) -> None:
    """Every tenth request of any kind, watches included, plus the first bindings and claim writes for sure."""
    total = 40
    nodes = nodes_with_devices(kwok_nodes, driver, 3, devices=8)
    chaos = faultproxy.EveryNth(every=10)
    claim_status = r"^/apis/resource\.k8s\.io/v1/namespaces/[^/]+/resourceclaims/[^/]+/status$"
    certain = [faultproxy.Fault("POST", BINDING, 503, times=3), faultproxy.Fault("PUT", claim_status, 429, times=3)]
    with faultproxy.running(control_plane, certain, chaos=chaos) as proxy:
        scheduler = usher_through(proxy, control_plane, test_id, tmp_path)
        with scheduler:
            scheduler.start()
            burst = Burst(core_api, namespace, scheduler.scheduler_name, driver, total)
            burst.create(total)
            wait_for(lambda: burst.bound() == total, 180, "every pod bound through the faults")
            assert_consistent(core_api, driver, namespace, nodes, scheduler.scheduler_name, total)
            healthy(scheduler)
            assert chaos.injected[503] > 0 and chaos.injected[429] > 0
            assert [fault.injected for fault in certain] == [3, 3]
            assert proxy.count("POST", BINDING, 201) == total, "one accepted binding per pod"


def test_bindings_whose_answers_are_lost_bind_once_and_keep_their_claims_reserved(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    driver: Driver,
    control_plane: Cluster,
    test_id: str,
    tmp_path: Path,
) -> None:
    """Each binding reaches the API server but its answer is a 503: the retry is told "already assigned".

    That is the API server restarting between writing a binding and answering it. usher must take the
    pod as bound where it put it, not roll it back: a rollback drops the claim's reservation while the
    pod stays bound (the kubelet would then refuse to run it).
    """
    total = 10
    nodes = nodes_with_devices(kwok_nodes, driver, 2, devices=8)
    lost = faultproxy.Fault("POST", BINDING, 503, times=total, forward=True, first_per_path=True)
    with faultproxy.running(control_plane, [lost]) as proxy:
        scheduler = usher_through(proxy, control_plane, test_id, tmp_path)
        with scheduler:
            scheduler.start()
            burst = Burst(core_api, namespace, scheduler.scheduler_name, driver, total)
            burst.create(total)
            wait_for(lambda: burst.bound() == total, 120, "every pod bound")
            wait_for(
                lambda: scheduler.metric("scheduler_schedule_attempts_total", result="scheduled") == total,
                30,
                "every pod counted scheduled",
            )
            assert lost.injected == total and len(lost.paths) == total, "each pod's first binding answer lost"
            assert [e.status for e in proxy.answered("POST", BINDING)].count(201) == total, "each binding written"
            assert proxy.count("POST", BINDING, 409) == total, "each retry told the pod is bound already"
            assert_consistent(core_api, driver, namespace, nodes, scheduler.scheduler_name, total)
            assert scheduler.metric("scheduler_schedule_attempts_total", result="error") == 0
            healthy(scheduler)


#: The write calls a leader makes for a pod with a claim: its claim's allocation and reservation, its binding.
SCHEDULING_WRITES = r"^/apis/resource\.k8s\.io/v1/namespaces/[^/]+/resourceclaims/[^/]+(/status)?$|" + BINDING[1:]


def test_a_leader_stopped_by_sigterm_mid_dra_burst_writes_nothing_once_the_follower_can_lead(
    control_plane: ControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    driver: Driver,
    test_id: str,
    tmp_path: Path,
) -> None:
    """SIGTERM stops the leader's loop, lets its binding cycles finish, drains every write and only then releases
    the Lease (usher.scheduling.stopping): every write of any kind from the old leader was answered before the new
    leader's first claim or binding write reached the API server, and the burst ends with each pod bound once,
    each device allocated once and each claim reserved for its bound pod."""
    total = 40
    nodes = nodes_with_devices(kwok_nodes, driver, 3, devices=8)
    with two_replicas(control_plane, core_api, namespace, test_id, tmp_path) as pair:
        burst = Burst(core_api, namespace, pair.scheduler, driver, total)
        burst.create(total // 2)
        wait_for(lambda: burst.bound() >= 6, 60, "the first pods bound")
        # The leader's claim writes and bindings now take 2 s to reach the API server: SIGTERM finds some in
        # flight, which must all be answered before the Lease is released.
        held = [pair.leader_proxy.stall(method, SCHEDULING_WRITES, delay=2.0) for method in ("PUT", "PATCH", "POST")]
        burst.create(4)
        wait_for(lambda: sum(s.stalled for s in held) >= 2, 30, "writes in flight")
        assert pair.leader.terminate() == 0, "a clean shutdown"
        burst.create(total - total // 2 - 4)
        wait_for(lambda: burst.bound() == total, 120, "every pod bound, the last ones by the new leader")
        old = [e for e in pair.leader_proxy.exchanges if e.method != "GET"]
        new = [
            e for method in ("PUT", "PATCH", "POST") for e in pair.follower_proxy.answered(method, SCHEDULING_WRITES)
        ]
        assert old and new, "both replicas wrote"
        last_old, first_new = max(e.answered for e in old), min(e.arrived for e in new)
        assert last_old < first_new, (
            f"the old leader's last write was answered {last_old - first_new:.3f}s after the new leader's first "
            "claim or binding write reached the API server"
        )
        assert "released lease" in pair.leader.log_path.read_text(), "the Lease was released after the drain"
        assert_consistent(core_api, driver, namespace, nodes, pair.scheduler, total)


@pytest.mark.parametrize("fault", ["Lease calls stalled", "Lease deleted"])
def test_a_leader_losing_its_lease_mid_dra_burst_hands_over_with_no_device_or_pod_doubled(
    control_plane: ControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    driver: Driver,
    test_id: str,
    tmp_path: Path,
    fault: str,
) -> None:
    """The leader's Lease calls hang (it must stop by its renew deadline, before the follower may take over), or
    the Lease is deleted (the leader re-creates it and goes on, or, if it cannot, a follower does a lease duration
    later): either way the DRA burst ends with each pod bound once, each device allocated once, each claim reserved
    for its bound pod, and no write of a replica that no longer led answered after the other's first claim or
    binding write arrived."""
    total = 40
    nodes = nodes_with_devices(kwok_nodes, driver, 3, devices=8)
    with two_replicas(control_plane, core_api, namespace, test_id, tmp_path) as pair:
        burst = Burst(core_api, namespace, pair.scheduler, driver, total)
        burst.create(total // 2)
        wait_for(lambda: burst.bound() >= 6, 60, "the first pods bound")
        if fault == "Lease calls stalled":
            for method in ("GET", "PUT"):
                pair.leader_proxy.stall(method, LEASE_CALLS)
            burst.create(4)  # pods the stalled leader may still bind before its renew deadline
            wait_for(
                lambda: pair.follower.metric("leader_election_master_status", name=pair.scheduler) == 1,
                30,
                "the follower to lead",
            )
        else:
            coordination = kubernetes.client.CoordinationV1Api(core_api.api_client)
            coordination.delete_namespaced_lease(pair.scheduler, namespace)
        burst.create(total - burst.created)
        wait_for(lambda: burst.bound() == total, 120, "every pod bound")
        assert_consistent(core_api, driver, namespace, nodes, pair.scheduler, total)
        led = [e for method in ("PUT", "PATCH", "POST") for e in pair.leader_proxy.answered(method, SCHEDULING_WRITES)]
        followed = [
            e for method in ("PUT", "PATCH", "POST") for e in pair.follower_proxy.answered(method, SCHEDULING_WRITES)
        ]
        if fault == "Lease calls stalled":
            assert followed, "the follower took over"
            assert pair.leader.process is not None
            wait_for(lambda: pair.leader.process.poll() is not None, 60, "the stalled leader exits by itself")
        if led and followed:
            last_led, first_followed = max(e.answered for e in led), min(e.arrived for e in followed)
            assert last_led < first_followed, (
                f"the old leader's last claim or binding write was answered {last_led - first_followed:.3f}s after "
                "the new leader's first one reached the API server"
            )
