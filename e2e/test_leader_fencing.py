"""Leader fencing: a leader whose Lease calls hang stops binding before the follower starts.

Two usher replicas elect a leader on a short lease (4 s duration, 3 s renew
deadline, 1 s retry). Each talks to the API server through its own fault
proxy, whose exchange log records, in this test process's monotonic time,
when each call arrived (before the API server could act on it) and when the
API server answered (after it had). Pods arrive one after another; then the
leader's proxy starts holding its Lease calls unanswered, as a stalled API
server or network would, while pods keep arriving. The proof that no two
replicas ever bind at once comes from those logs: the leader's last
successful binding was answered before the follower's first binding even
arrived at the API server, every pod was bound by exactly one successful
binding call, and the stalled leader exited by itself with a non-zero code.

A deleted Lease (``kubectl delete lease``) comes back with one leader: the
leader re-creates it at its next renewal and goes on binding, while the
follower, which saw it missing, waits a lease duration before it would create
it; and when the leader's Lease calls hang as well, the follower re-creates it
only after that lease duration, once the stalled leader has stopped.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client
import pytest

from e2e import faultproxy
from e2e.controlplane import ControlPlane, wait_for
from e2e.faultproxy import FaultProxy
from e2e.test_scheduling import assert_no_node_overcommitted, pod_manifest, scheduled_events
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

LEASE_DURATION = 4
LEASE_FLAGS = (
    "--leader-elect",
    f"--leader-elect-lease-duration={LEASE_DURATION}",
    "--leader-elect-renew-deadline=3",
    "--leader-elect-retry-period=1",
)
BINDING = r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$"
LEASE_CALLS = r"^/apis/coordination\.k8s\.io/v1/namespaces/[^/]+/leases"
LEASE_CREATE = r"^/apis/coordination\.k8s\.io/v1/namespaces/[^/]+/leases$"


def bindings(proxy: FaultProxy) -> list[faultproxy.Exchange]:
    """The binding calls the API server accepted from the replica behind ``proxy``."""
    return [e for e in proxy.answered("POST", BINDING) if 200 <= e.status < 300]


def pod_of(exchange: faultproxy.Exchange) -> str:
    match = re.search(r"/pods/([^/]+)/binding$", exchange.path)
    assert match is not None
    return match.group(1)


@dataclass
class Replicas:
    """Two usher replicas electing a leader, each behind its own fault proxy, and a steady stream of pods."""

    core_api: kubernetes.client.CoreV1Api
    namespace: str
    scheduler: str
    leader: UsherProcess
    follower: UsherProcess
    leader_proxy: FaultProxy
    follower_proxy: FaultProxy
    created: int = 0

    def lease_holder(self) -> str:
        """The Lease's holder; empty while it has none or does not exist."""
        coordination = kubernetes.client.CoordinationV1Api(self.core_api.api_client)
        try:
            lease = coordination.read_namespaced_lease(self.scheduler, self.namespace)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return ""
            raise
        return str(lease.spec.holder_identity or "")

    def create_and_wait_bound(self) -> None:
        """One more pod of the steady stream; the next comes once this one is bound (by either replica)."""
        name = f"p{self.created:03d}"
        self.created += 1
        self.core_api.create_namespaced_pod(self.namespace, pod_manifest(name, self.scheduler, cpu="100m"))
        wait_for(lambda: self.core_api.read_namespaced_pod(name, self.namespace).spec.node_name, 30, f"{name} bound")

    def assert_every_pod_bound_once(self) -> None:
        """Every pod bound by exactly one successful binding call, and by one replica at a time: the old
        leader's last binding was answered before the new leader's first one arrived at the API server."""
        # A pod can read as bound a moment before its binding's answer reaches the proxy's log.
        wait_for(
            lambda: len(bindings(self.leader_proxy)) + len(bindings(self.follower_proxy)) >= self.created,
            10,
            "the proxies to log every binding",
        )
        led, followed = bindings(self.leader_proxy), bindings(self.follower_proxy)
        if led and followed:
            last_by_leader = max(e.answered for e in led)
            first_by_follower = min(e.arrived for e in followed)
            assert last_by_leader < first_by_follower, (
                f"the old leader's last binding was answered {last_by_leader - first_by_follower:.3f}s "
                "after the new leader's first binding reached the API server"
            )
        per_pod = Counter(pod_of(e) for e in led + followed)
        assert len(per_pod) == self.created, "every pod was bound by a successful binding call"
        assert max(per_pod.values()) == 1, f"a pod was bound twice: {per_pod.most_common(3)}"
        assert all(p.spec.node_name for p in self.core_api.list_namespaced_pod(self.namespace).items)
        assert max(scheduled_events(self.core_api, self.namespace, self.scheduler).values()) == 1


@contextlib.contextmanager
def two_replicas(
    control_plane: ControlPlane, core_api: kubernetes.client.CoreV1Api, namespace: str, test_id: str, tmp_path: Path
) -> Iterator[Replicas]:
    """Start two replicas and wait for one to lead (with no Lease yet: after a lease duration)."""
    scheduler = f"usher-{test_id}"[:63].rstrip("-")
    with contextlib.ExitStack() as stack:
        proxies: dict[str, FaultProxy] = {}
        replicas: dict[str, UsherProcess] = {}
        for name in ("replica-a", "replica-b"):
            proxy = stack.enter_context(faultproxy.running(control_plane, []))
            replica = UsherProcess(
                kubeconfig=proxy.kubeconfig(tmp_path / f"{name}.kubeconfig"),
                scheduler_name=scheduler,
                log_path=control_plane.logs_dir / f"usher-{test_id}-{name}.log",
                extra_args=(*LEASE_FLAGS, f"--leader-elect-resource-namespace={namespace}"),
                env={"POD_NAME": name},
            )
            stack.enter_context(replica)
            proxies[name], replicas[name] = proxy, replica
        for replica in replicas.values():
            replica.start()
        coordination = kubernetes.client.CoordinationV1Api(core_api.api_client)
        holder: str = wait_for(
            lambda: coordination.read_namespaced_lease(scheduler, namespace).spec.holder_identity,
            30,
            "a leader",
            ignore=(kubernetes.client.ApiException,),
        )
        leader_name = "replica-a" if holder.startswith("replica-a") else "replica-b"
        follower_name = "replica-b" if leader_name == "replica-a" else "replica-a"
        yield Replicas(
            core_api,
            namespace,
            scheduler,
            leader=replicas[leader_name],
            follower=replicas[follower_name],
            leader_proxy=proxies[leader_name],
            follower_proxy=proxies[follower_name],
        )


def test_a_leader_whose_lease_calls_stall_stops_binding_before_the_follower_takes_over(
    control_plane: ControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    test_id: str,
    tmp_path: Path,
) -> None:
    nodes = [kwok_nodes(f"n{i}", cpu="64", memory="256Gi", pods=250) for i in range(3)]
    with two_replicas(control_plane, core_api, namespace, test_id, tmp_path) as pair:
        scheduler = pair.scheduler
        leader, follower = pair.leader, pair.follower
        leader_proxy, follower_proxy = pair.leader_proxy, pair.follower_proxy
        while len(bindings(leader_proxy)) < 20:
            pair.create_and_wait_bound()
        assert leader.metric("leader_election_master_status", name=scheduler) == 1
        assert follower.metric("leader_election_master_status", name=scheduler) == 0
        stalled_from = time.monotonic()
        stalls = [leader_proxy.stall(method, LEASE_CALLS) for method in ("GET", "PUT")]
        # The stream goes on through the stall and the handover, until the follower has bound some itself.
        while len(bindings(follower_proxy)) < 20:
            assert pair.created < 600, "the follower never took over"
            pair.create_and_wait_bound()

        assert sum(s.stalled for s in stalls) >= 1, "the leader's Lease calls were held"
        assert follower.metric("scheduler_schedule_attempts_total", result="scheduled") > 0
        assert follower.metric("leader_election_master_status", name=scheduler) == 1
        assert leader.process is not None
        wait_for(lambda: leader.process.poll() is not None, 60, "the stalled leader exits by itself")
        assert leader.process.returncode != 0, "losing the lease is an error exit"

        assert bindings(leader_proxy) and bindings(follower_proxy)
        pair.assert_every_pod_bound_once()
        assert_no_node_overcommitted(core_api, nodes)
        assert "lost lease" in leader.log_path.read_text(), "the leader says why it stopped"
        # Connections for a burst of writes are opened ahead of time by the leader only, each answering a
        # GET /version first: a standby replica holds none until it takes over.
        assert [e for e in leader_proxy.exchanges if e.path == "/version"], "the leader warmed its connections"
        warmed = [e.arrived for e in follower_proxy.exchanges if e.path == "/version"]
        assert warmed, "the new leader warmed its connections"
        assert min(warmed) > stalled_from, "the follower opened no connections ahead of time while it followed"
        assert follower.process is not None and follower.process.poll() is None, "the follower keeps running"


@pytest.mark.parametrize("leader_stalled", [False, True], ids=["the leader re-creates it", "the leader's calls hang"])
def test_a_deleted_lease_comes_back_with_one_leader_and_no_pod_is_bound_twice(
    control_plane: ControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    test_id: str,
    tmp_path: Path,
    leader_stalled: bool,
) -> None:
    nodes = [kwok_nodes(f"n{i}", cpu="64", memory="256Gi", pods=250) for i in range(3)]
    with two_replicas(control_plane, core_api, namespace, test_id, tmp_path) as pair:
        while len(bindings(pair.leader_proxy)) < 10:
            pair.create_and_wait_bound()
        holder = pair.lease_holder()
        if leader_stalled:
            for method in ("GET", "PUT", "POST"):
                pair.leader_proxy.stall(method, LEASE_CALLS)
        coordination = kubernetes.client.CoordinationV1Api(core_api.api_client)
        deleted_at = time.monotonic()
        coordination.delete_namespaced_lease(pair.scheduler, namespace)

        def back() -> bool:
            """The Lease is held again, and the pods go on being bound (by the follower, if the leader stalled)."""
            if pair.created < 30 or not pair.lease_holder():
                return False
            return not leader_stalled or len(bindings(pair.follower_proxy)) >= 5

        # Pods keep coming while the Lease is gone and comes back.
        while not back():
            assert pair.created < 600, "no leader came back"
            pair.create_and_wait_bound()

        [recreated] = [
            e
            for proxy in (pair.leader_proxy, pair.follower_proxy)
            for e in proxy.answered("POST", LEASE_CREATE)
            if e.status == 201 and e.arrived > deleted_at
        ]
        follower_creates = [e for e in pair.follower_proxy.answered("POST", LEASE_CREATE) if e.arrived > deleted_at]
        if not leader_stalled:
            assert pair.lease_holder() == holder, "the leader re-created its Lease and leads on"
            assert recreated in pair.leader_proxy.exchanges
            assert recreated.arrived - deleted_at < LEASE_DURATION, "at its next renewal"
            assert not follower_creates, "the follower, which saw the Lease missing, waited"
            assert not bindings(pair.follower_proxy), "only the leader bound"
            assert pair.leader.metric("leader_election_master_status", name=pair.scheduler) == 1
            assert pair.follower.metric("leader_election_master_status", name=pair.scheduler) == 0
        else:
            assert pair.lease_holder().startswith("replica-") and pair.lease_holder() != holder
            assert recreated in pair.follower_proxy.exchanges, "the follower re-created it"
            assert recreated.arrived - deleted_at >= LEASE_DURATION, "after it stayed missing for a lease duration"
            assert pair.leader.process is not None
            wait_for(lambda: pair.leader.process.poll() is not None, 60, "the stalled leader exits by itself")
            assert pair.leader.process.returncode != 0, "losing the lease is an error exit"
            assert bindings(pair.follower_proxy), "the follower took over"
        pair.assert_every_pod_bound_once()
        assert_no_node_overcommitted(core_api, nodes)
        assert pair.follower.process is not None and pair.follower.process.poll() is None
