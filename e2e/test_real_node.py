"""`helm install` for real: the chart's Deployment runs usher as pods on a node that runs pods.

Locally the harness starts a control plane with kube-scheduler (it places the chart's pods, whose
schedulerName is the default) and a real node (`e2e.node`: kubelet, containerd, Debian's runc, the
image `make image` built, imported without a registry). The node is tainted, and only the chart's
pods tolerate the taint, so what usher schedules goes to kwok nodes. On kind (``USHER_KUBECONFIG``,
e2e/kind.sh) the same tests run on kind's nodes with the image kind.sh loaded
(``USHER_IMAGE_TAG``).

The tests share one release and run in file order: install, schedule, lose the leader, upgrade,
uninstall.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
import yaml

from e2e import controlplane
from e2e.controlplane import Cluster, WaitTimeoutError, cache_dir, read_versions
from e2e.image import CHART, archive, chart_app_version, require_image
from e2e.node import RealNode, apiserver_args
from e2e.prometheus import Prometheus
from e2e.pytest_plugin import EXTERNAL_KUBECONFIG_ENV, unique_name
from e2e.test_scheduling import pod_manifest, scheduled_events

pytestmark = pytest.mark.e2e

TAINT = {"key": "usher.test/real-node", "value": "true", "effect": "NoSchedule"}
#: The chart's default lease duration (values.yaml leaderElection.leaseDuration).
LEASE_SECONDS = 15
RELEASE = "usher-real"
#: The profile both configurations share; the upgrade changes only its pluginConfig. Without the
#: balanced-allocation score the choice between two nodes is NodeResourcesFit's strategy alone.
PROFILE = {
    "schedulerName": RELEASE,
    "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
}


@dataclass
class Target:
    """Where the chart is installed: the cluster, the values that place its pods, and the real node if any."""

    cluster: Cluster
    values: dict[str, Any]
    node: RealNode | None = None
    namespace: str = ""
    core: kubernetes.client.CoreV1Api = field(init=False)

    def __post_init__(self) -> None:
        client = kubernetes.config.new_client_from_config(config_file=str(self.cluster.kubeconfig))
        self.core = kubernetes.client.CoreV1Api(client)

    def helm(self, *args: str) -> str:
        """helm in the test's namespace; ``--wait`` for pods that start for real needs more than test_chart's 120 s."""
        binary = cache_dir() / "bin" / read_versions()["HELM_VERSION"] / "helm"
        command = [str(binary), *args, "--namespace", self.namespace, f"--kubeconfig={self.cluster.kubeconfig}"]
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def usher_pods(self) -> list[kubernetes.client.V1Pod]:
        selector = f"app.kubernetes.io/instance={RELEASE}"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def lease_holder(self) -> str:
        lease = kubernetes.client.CoordinationV1Api(self.core.api_client).read_namespaced_lease(RELEASE, self.namespace)
        return str(lease.spec.holder_identity or "")


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest, artifacts_dir: Path) -> Iterator[Target]:
    if os.environ.get(EXTERNAL_KUBECONFIG_ENV):
        cluster: Cluster = request.getfixturevalue("control_plane")
        tag = os.environ.get("USHER_IMAGE_TAG") or chart_app_version()
        external = Target(cluster, {"image": {"tag": tag}})
        external.namespace = cluster.create_namespace(unique_name("real"))
        yield external
        return
    require_image()
    workdir = artifacts_dir / "real-node"
    # The EndpointSlice controller: Prometheus finds the chart's pods through its Service's slices.
    controllers = (*controlplane.DEFAULT_CONTROLLERS, "endpointslice-controller")
    with controlplane.running(
        workdir, scheduler=True, extra_apiserver_args=apiserver_args(workdir), controllers=controllers
    ) as plane:
        node = RealNode.start(plane, images=(archive("pause"), archive("usher")), taints=(TAINT,))
        try:
            local = Target(
                plane,
                {
                    "nodeSelector": {"kubernetes.io/hostname": node.name},
                    "tolerations": [{**TAINT, "operator": "Equal"}],
                },
                node,
            )
            local.namespace = plane.create_namespace(unique_name("real"))
            yield local
        finally:
            node.stop()


def values_file(target: Target, tmp_path: Path, **values: Any) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({**target.values, "schedulerName": RELEASE, **values}))
    return path


def running_and_ready(pod: kubernetes.client.V1Pod) -> bool:
    if pod.status.phase != "Running" or pod.metadata.deletion_timestamp:
        return False
    return all(s.ready for s in pod.status.container_statuses or [])


def leader_pod(target: Target) -> str:
    """The name of the pod holding the Lease (its identity is ``<POD_NAME>_<8 hex>``)."""
    holder = target.cluster.wait_for(target.lease_holder, 60, "a leader", ignore=(kubernetes.client.ApiException,))
    return holder.rsplit("_", 1)[0]


def test_helm_install_runs_both_replicas_as_pods_on_the_node(target: Target, tmp_path: Path) -> None:
    values = values_file(target, tmp_path, config={"profiles": [PROFILE]})
    target.helm("install", RELEASE, str(CHART), "-f", str(values), "--wait", "--timeout", "240s")

    # helm's --wait reads the Deployment's status; each pod's own Ready condition follows its readiness probe
    # (every 5 s) and reaches the API on the kubelet's status sync: wait for both, not for the first read.
    def both_ready() -> list[kubernetes.client.V1Pod] | None:
        pods = target.usher_pods()
        return pods if len(pods) == 2 and all(running_and_ready(p) for p in pods) else None

    pods = target.cluster.wait_for(both_ready, 60, "both replicas running and ready")
    assert all(s.restart_count == 0 for p in pods for s in p.status.container_statuses), "liveness probes pass"
    if target.node is not None:
        assert {p.spec.node_name for p in pods} == {target.node.name}
        assert all(p.status.pod_ip.startswith("10.251.") for p in pods), "pod addresses of the node's bridge"
    leader = leader_pod(target)
    assert leader in {p.metadata.name for p in pods}
    # The pod's log through the apiserver and kubelet: usher found its in-cluster credentials.
    log = target.cluster.kubectl("logs", "-n", target.namespace, leader)
    assert "(in-cluster service account)" in log, log[-2000:]
    assert "forbidden" not in log.lower(), log[-2000:]


def bound_nodes(target: Target) -> dict[str, str]:
    return {
        p.metadata.name: p.spec.node_name
        for p in target.core.list_namespaced_pod(target.namespace, label_selector="app=e2e").items
        if p.spec.node_name
    }


def kwok_pod(target: Target, name: str) -> dict[str, Any]:
    """A pod for usher that fits only this module's kwok nodes (kind's own node is not tainted)."""
    pod = pod_manifest(name, RELEASE, cpu="100m")
    pod["spec"]["nodeSelector"] = {"usher.test/pool": target.namespace}
    return pod


def test_the_leader_schedules_onto_kwok_nodes(target: Target) -> None:
    nodes = [f"{target.namespace}-kwok-{i}"[:63] for i in range(2)]
    for name in nodes:
        target.cluster.add_kwok_node(name, cpu="4", memory="8Gi", labels={"usher.test/pool": target.namespace})
    for i in range(10):
        target.core.create_namespaced_pod(target.namespace, kwok_pod(target, f"first-{i}"))
    target.cluster.wait_for(lambda: len(bound_nodes(target)) == 10, 60, "10 pods bound")
    assert set(bound_nodes(target).values()) <= set(nodes)
    assert max(scheduled_events(target.core, target.namespace, RELEASE).values()) == 1


def test_prometheus_scrapes_the_leader_pod_through_the_service(target: Target, tmp_path: Path) -> None:
    """Prometheus finds the pods behind the chart's metrics Service by its EndpointSlices, as a
    ServiceMonitor does, and scrapes each pod's address; the leader's series show the pods it bound."""
    service = f"{RELEASE}-metrics"
    scrape = {
        "job_name": "usher-service",
        "kubernetes_sd_configs": [
            {
                "role": "endpointslice",
                "kubeconfig_file": str(target.cluster.kubeconfig),
                "namespaces": {"names": [target.namespace]},
            }
        ],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_service_name"], "regex": service, "action": "keep"},
            {"source_labels": ["__meta_kubernetes_endpointslice_port_name"], "regex": "metrics", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
        ],
    }
    logs = target.node.logs_dir if target.node is not None else tmp_path
    prometheus = Prometheus.start([scrape], tmp_path / "prometheus", logs / "prometheus-real-node.log")
    try:
        leader = leader_pod(target)
        pods = {p.metadata.name: p.status.pod_ip for p in target.usher_pods()}
        target.cluster.wait_for(
            lambda: {labels["pod"] for labels, up in prometheus.vector(f'up{{job="{service}"}}') if up == 1}
            == set(pods),
            60, "both replicas scraped through the Service's endpoints",
        )  # fmt: skip
        ups = prometheus.vector(f'up{{job="{service}"}}')
        assert {labels["instance"].rsplit(":", 1)[0] for labels, _ in ups} == set(pods.values()), "the pods' own IPs"
        leading = prometheus.vector(f'leader_election_master_status{{job="{service}"}} == 1')
        assert [labels["pod"] for labels, _ in leading] == [leader]
        scheduled = f'sum(scheduler_schedule_attempts_total{{job="{service}", pod="{leader}", result="scheduled"}})'
        target.cluster.wait_for(
            lambda: (prometheus.query(scheduled) or 0) >= 10, 60, "the leader's 10 scheduled pods in PromQL"
        )
    finally:
        prometheus.stop()


def test_deleting_the_leader_pod_hands_over_within_the_lease_duration(target: Target) -> None:
    leader = leader_pod(target)
    [follower] = [p.metadata.name for p in target.usher_pods() if p.metadata.name != leader]
    deleted = time.monotonic()

    def new_leader() -> str:
        """The pod holding the Lease if it is not the deleted one: the follower, or the Deployment's
        replacement for the deleted pod when it starts first (both are valid heirs)."""
        holder = leader_pod(target)
        return holder if holder and holder != leader else ""

    target.core.delete_namespaced_pod(leader, target.namespace)
    # Pods keep coming while the Lease changes hands.
    for i in range(20):
        target.core.create_namespaced_pod(target.namespace, kwok_pod(target, f"handover-{i}"))
    try:
        heir = target.cluster.wait_for(
            new_leader, LEASE_SECONDS, "another replica to take the Lease", ignore=(kubernetes.client.ApiException,)
        )
    except WaitTimeoutError as timeout:
        lease = target.cluster.kubectl("get", "lease", RELEASE, "-n", target.namespace, "-o", "yaml", check=False)
        log = target.cluster.kubectl("logs", follower, "-n", target.namespace, "--tail", "40", check=False)
        raise AssertionError(f"{timeout}\nLease now:\n{lease}\nthe follower's log:\n{log}") from timeout
    took = time.monotonic() - deleted
    assert took < LEASE_SECONDS
    assert heir in {p.metadata.name for p in target.usher_pods()}, "the Lease is held by a live replica"
    target.cluster.wait_for(lambda: len(bound_nodes(target)) == 30, 60, "every pod bound after the handover")
    events: Counter[str] = scheduled_events(target.core, target.namespace, RELEASE)
    assert max(events.values()) == 1, f"a pod was bound twice: {events.most_common(3)}"
    # The Deployment replaces the deleted pod; the new one follows.
    target.cluster.wait_for(
        lambda: len([p for p in target.usher_pods() if running_and_ready(p)]) == 2, 120, "two replicas again"
    )


def test_helm_upgrade_with_a_changed_plugin_config_rolls_the_pods_and_takes_effect(
    target: Target, tmp_path: Path
) -> None:
    full, empty = (f"{target.namespace}-{n}"[:63] for n in ("full", "empty"))
    for name in (full, empty):
        target.cluster.add_kwok_node(name, cpu="4", memory="8Gi", labels={"usher.test/strategy": "yes"})

    def placed(name: str) -> str:
        pod = pod_manifest(name, RELEASE, cpu="500m")
        pod["spec"]["nodeSelector"] = {"usher.test/strategy": "yes"}
        target.core.create_namespaced_pod(target.namespace, pod)
        return str(target.cluster.wait_for(lambda: bound_nodes(target).get(name), 60, f"{name} bound"))

    filler = pod_manifest("filler", RELEASE, cpu="2")
    filler["spec"]["nodeName"] = full
    target.core.create_namespaced_pod(target.namespace, filler)
    assert placed("least-allocated") == empty, "the default strategy spreads"

    before = {p.metadata.name for p in target.usher_pods()}
    most = {
        **PROFILE,
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}],
    }
    values = values_file(target, tmp_path, config={"profiles": [most]})
    target.helm("upgrade", RELEASE, str(CHART), "-f", str(values), "--wait", "--timeout", "240s")
    target.cluster.wait_for(
        lambda: {p.metadata.name for p in target.usher_pods()}.isdisjoint(before) and len(target.usher_pods()) == 2,
        120, "the old pods replaced by two new ones",
    )  # fmt: skip
    leader = leader_pod(target)
    assert leader not in before
    assert placed("most-allocated") == full, "MostAllocated packs onto the fuller node"


def test_helm_uninstall_leaves_nothing_behind(target: Target) -> None:
    target.helm("uninstall", RELEASE, "--wait", "--timeout", "120s")
    target.cluster.wait_for(lambda: not target.usher_pods(), 120, "the chart's pods gone")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    left = target.cluster.kubectl(
        "get", "all,configmaps,serviceaccounts,roles,rolebindings,endpointslices", "-n", target.namespace,
        "-l", selector, "-o", "name",
    )  # fmt: skip
    assert left.strip() == ""
    cluster_wide = target.cluster.kubectl("get", "clusterroles,clusterrolebindings", "-l", selector, "-o", "name")
    assert cluster_wide.strip() == ""
    # The Lease is the chart's (templates/lease.yaml), so it goes too; usher may not create another one.
    leases = kubernetes.client.CoordinationV1Api(target.core.api_client)
    assert RELEASE not in {lease.metadata.name for lease in leases.list_namespaced_lease(target.namespace).items}
    if target.node is not None:
        node = target.node
        target.cluster.wait_for(
            lambda: not [c for c in node.ctr("tasks", "ls").stdout.splitlines()[1:] if "RUNNING" in c],
            60, "no container running on the node",
        )  # fmt: skip
