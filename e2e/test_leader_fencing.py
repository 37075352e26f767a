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
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import kubernetes.client
import pytest

from e2e import faultproxy
from e2e.controlplane import ControlPlane, wait_for
from e2e.faultproxy import FaultProxy
from e2e.test_scheduling import assert_no_node_overcommitted, pod_manifest, scheduled_events
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e

LEASE_FLAGS = (
    "--leader-elect",
    "--leader-elect-lease-duration=4",
    "--leader-elect-renew-deadline=3",
    "--leader-elect-retry-period=1",
)
BINDING = r"^/api/v1/namespaces/[^/]+/pods/[^/]+/binding$"


def bindings(proxy: FaultProxy) -> list[faultproxy.Exchange]:
    """The binding calls the API server accepted from the replica behind ``proxy``."""
    return [e for e in proxy.answered("POST", BINDING) if 200 <= e.status < 300]


def pod_of(exchange: faultproxy.Exchange) -> str:
    match = re.search(r"/pods/([^/]+)/binding$", exchange.path)
    assert match is not None
    return match.group(1)


def test_a_leader_whose_lease_calls_stall_stops_binding_before_the_follower_takes_over(
    control_plane: ControlPlane,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    test_id: str,
    tmp_path: Path,
) -> None:
    scheduler = f"usher-{test_id}"[:63].rstrip("-")
    nodes = [kwok_nodes(f"n{i}", cpu="64", memory="256Gi", pods=250) for i in range(3)]
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
        leader, follower = replicas[leader_name], replicas[follower_name]
        leader_proxy, follower_proxy = proxies[leader_name], proxies[follower_name]

        created = 0

        def create_and_wait_bound() -> None:
            """One more pod of the steady stream; the next comes once this one is bound (by either replica)."""
            nonlocal created
            name = f"p{created:03d}"
            created += 1
            core_api.create_namespaced_pod(namespace, pod_manifest(name, scheduler, cpu="100m"))
            wait_for(lambda: core_api.read_namespaced_pod(name, namespace).spec.node_name, 30, f"{name} bound")

        while len(bindings(leader_proxy)) < 20:
            create_and_wait_bound()
        assert leader.metric("leader_election_master_status", name=scheduler) == 1
        assert follower.metric("leader_election_master_status", name=scheduler) == 0
        lease_calls = r"^/apis/coordination\.k8s\.io/v1/namespaces/[^/]+/leases"
        stalled_from = time.monotonic()
        stalls = [leader_proxy.stall(method, lease_calls) for method in ("GET", "PUT")]
        # The stream goes on through the stall and the handover, until the follower has bound some itself.
        while len(bindings(follower_proxy)) < 20:
            assert created < 600, "the follower never took over"
            create_and_wait_bound()

        assert sum(s.stalled for s in stalls) >= 1, "the leader's Lease calls were held"
        assert follower.metric("scheduler_schedule_attempts_total", result="scheduled") > 0
        assert follower.metric("leader_election_master_status", name=scheduler) == 1
        assert leader.process is not None
        wait_for(lambda: leader.process.poll() is not None, 60, "the stalled leader exits by itself")
        assert leader.process.returncode != 0, "losing the lease is an error exit"

        led, followed = bindings(leader_proxy), bindings(follower_proxy)
        last_by_leader = max(e.answered for e in led)
        first_by_follower = min(e.arrived for e in followed)
        assert last_by_leader < first_by_follower, (
            f"the old leader's last binding was answered {last_by_leader - first_by_follower:.3f}s "
            "after the new leader's first binding reached the API server"
        )
        per_pod = Counter(pod_of(e) for e in led + followed)
        assert len(per_pod) == created, "every pod was bound by a successful binding call"
        assert max(per_pod.values()) == 1, f"a pod was bound twice: {per_pod.most_common(3)}"
        assert all(p.spec.node_name for p in core_api.list_namespaced_pod(namespace).items)
        assert max(scheduled_events(core_api, namespace, scheduler).values()) == 1
        assert_no_node_overcommitted(core_api, nodes)
        assert "lost lease" in leader.log_path.read_text(), "the leader says why it stopped"
        # Connections for a burst of writes are opened ahead of time by the leader only, each answering a
        # GET /version first: a standby replica holds none until it takes over.
        assert [e for e in leader_proxy.exchanges if e.path == "/version"], "the leader warmed its connections"
        warmed = [e.arrived for e in follower_proxy.exchanges if e.path == "/version"]
        assert warmed, "the new leader warmed its connections"
        assert min(warmed) > stalled_from, "the follower opened no connections ahead of time while it followed"
        assert follower.process is not None and follower.process.poll() is None, "the follower keeps running"
