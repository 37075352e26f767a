"""Deletions behind the watch's back, against a real API server: found at once by a re-listing, else by the reconciler.

A watch misses deletions when it cannot resume (410 Gone: the resourceVersion it
would resume from was compacted away) and its client lists again. The first test
runs usher as a user would, behind the fault proxy, which cuts usher's pod watch,
holds it while pods are deleted, then answers it 410 Gone: kopf lists the pods
again, and usher must hand the deletions on as soon as that listing ends, not
minutes later.

The second test is the reconciler, the safety net for whatever slips past both:
the watch is played by the test, which hands the real objects to the sink through
`Holdings.deliver` (the function the watch streams call), deletes some of them
through the API with no watch running, and lets the reconciler's real
metadata-only, paginated LISTs find them. What the sink does with a DELETED is
the same as for kopf's own (unit-tested in tests/unit).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from e2e import faultproxy
from e2e.controlplane import Cluster, wait_for
from e2e.test_scheduling import pod_manifest, pods_in
from e2e.usher_process import UsherProcess
from usher.adapters import watching
from usher.adapters.connecting import connect
from usher.adapters.kubeapi import KubeApi
from usher.adapters.metrics import Metrics

pytestmark = pytest.mark.e2e


#: kopf's pod watch (and LIST) across all namespaces, as the fault proxy matches it.
POD_COLLECTION = r"^/api/v1/pods$"

RELIST_WITHIN = 20.0
"""Seconds the deletions may take to show after the watch is restored: kopf's reconnect and one LIST.

The reconciler's first round comes 240 to 360 s after the sync, so a pass is the re-listing's."""


def test_pods_deleted_while_the_watch_was_down_leave_usher_right_after_kopf_lists_again(
    control_plane: Cluster,
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    settled: None,
    test_id: str,
    tmp_path: Path,
) -> None:
    kwok_nodes("n", cpu="64", memory="128Gi", pods=110)
    bound, pending = [f"bound-{i:02d}" for i in range(40)], [f"pending-{i:02d}" for i in range(10)]
    with faultproxy.running(control_plane, []) as proxy:
        watch = proxy.expire_watches(POD_COLLECTION)
        scheduler = UsherProcess(
            kubeconfig=proxy.kubeconfig(tmp_path / "usher.kubeconfig"),
            scheduler_name=f"usher-{test_id}"[:63].rstrip("-"),
            log_path=control_plane.logs_dir / f"usher-{test_id}.log",
        )
        with scheduler:
            scheduler.start()
            name = scheduler.scheduler_name
            for pod in [*bound, "kept"]:
                core_api.create_namespaced_pod(namespace, pod_manifest(pod, name))
            for pod in pending:  # no node has the label: unschedulable, in usher's queue
                manifest = pod_manifest(pod, name)
                manifest["spec"]["nodeSelector"] = {"e2e.usher.dev/nowhere": "true"}
                core_api.create_namespaced_pod(namespace, manifest)
            wait_for(lambda: bound_pods(core_api, namespace) == {*bound, "kept"}, 60, "the pods bound")
            wait_for(
                lambda: scheduler.metric("scheduler_pending_pods", queue="unschedulable") == len(pending),
                60,
                "the pending pods unschedulable in usher's queue",
            )
            wait_for(lambda: pods_cached(scheduler) == len(bound) + 1, 30, "the bound pods in usher's cache")
            assert scheduler.metric("usher_missed_deletions_total", kind="pods") == 0

            watch.cut()
            wait_for(lambda: watch.held >= 1, 30, "kopf's pod watch reconnecting, held by the proxy")
            for pod in [*bound, *pending]:
                core_api.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
            core_api.create_namespaced_pod(namespace, pod_manifest("late", name))  # for the re-listing to bring
            wait_for(lambda: pod_names(core_api, namespace) == {"kept", "late"}, 30, "the deletions in the API")
            time.sleep(1)  # what a watch would have reported by now, usher has not heard
            assert pods_cached(scheduler) == len(bound) + 1, "the watch is down: usher still counts the bound pods"
            assert scheduler.metric("scheduler_pending_pods", queue="unschedulable") == len(pending)

            watch.restore()
            restored = time.monotonic()
            wait_for(
                lambda: scheduler.metric("usher_missed_deletions_total", kind="pods") == len(bound) + len(pending),
                RELIST_WITHIN,
                "the deletions handed on after kopf's new listing",
            )
            took = time.monotonic() - restored
            assert pods_cached(scheduler) <= 2, "the bound pods left usher's cache (kept, and late once bound)"
            assert scheduler.metric("scheduler_pending_pods", queue="unschedulable") == 0, "and its queue"
            wait_for(lambda: bound_pods(core_api, namespace) == {"kept", "late"}, 30, "the pod created meanwhile bound")
            wait_for(lambda: pods_cached(scheduler) == 2, 10, "usher's cache: the two pods that exist")
            assert scheduler.metric("usher_missed_deletions_total", kind="pods") == len(bound) + len(pending)

            assert watch.expired >= 1, "kopf's watch was told 410 Gone"
            assert watch.relists and all("resourceVersion" not in query for query in watch.relists), (
                f"kopf's new listing is a consistent read (no resourceVersion): {watch.relists}"
            )
            log = scheduler.log_path.read_text()
            assert "kopf listed pods again: 50 deleted while it was not watching" in log
            assert "deleted without the watch saying so" not in log, "found by the re-listing, not the reconciler"
            assert scheduler.terminate() == 0
    print(f"deletions handed on {took:.2f} s after the watch was restored")


def pod_names(core_api: kubernetes.client.CoreV1Api, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods_in(core_api, namespace)}


def bound_pods(core_api: kubernetes.client.CoreV1Api, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods_in(core_api, namespace) if p["spec"].get("nodeName")}


def pods_cached(scheduler: UsherProcess) -> float:
    """The pods usher's cache counts on nodes (bound or assumed), across the cluster."""
    return scheduler.metric("scheduler_cache_size", type="pods")


class Sink:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, str]] = []

    def _record(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        if event_type == "DELETED":
            self.deleted.append((kind, raw["metadata"]["name"]))

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("pods", event_type, raw)

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("nodes", event_type, raw)

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("namespaces", event_type, raw)

    def on_disruption_budget(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("poddisruptionbudgets", event_type, raw)

    def on_service(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record("services", event_type, raw)

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record(kind, event_type, raw)

    def on_volume(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        self._record(kind, event_type, raw)

    def mark_synced(self) -> None:
        pass


def test_objects_deleted_while_nothing_watched_are_delivered_deleted_and_the_others_kept(
    control_plane: Cluster, core_api: kubernetes.client.CoreV1Api, namespace: str, test_id: str
) -> None:
    node = f"{test_id[:40]}-gone"
    core_api.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    for name in ("kept", "gone-1", "gone-2"):
        core_api.create_namespaced_pod(namespace, pod_manifest(name, "nobody"))
    sink, metrics = Sink(), Metrics()
    settings = watching.ReconcileSettings(confirm_after=0.5)

    async def scenario() -> int:
        connection = await connect(str(control_plane.kubeconfig))
        api = KubeApi(connection.async_config)
        try:
            reconciler = watching.register(sink, reconcile=settings, recorder=metrics).reconciler
            paths = [f"/api/v1/namespaces/{namespace}/pods/{name}" for name in ("kept", "gone-1", "gone-2")]
            for path in paths:  # what kopf would have delivered
                reconciler.holdings.deliver("pods", "MODIFIED", (await api.request("GET", path)).body)
            reconciler.holdings.deliver("nodes", "MODIFIED", (await api.request("GET", f"/api/v1/nodes/{node}")).body)
            reconciler.holdings.deliver(
                "namespaces", "MODIFIED", (await api.request("GET", f"/api/v1/namespaces/{namespace}")).body
            )

            # Deleted with no watch running: nobody tells the sink.
            for name in ("gone-1", "gone-2"):
                core_api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            core_api.delete_node(node)
            await asyncio.to_thread(wait_for, lambda: gone(core_api, namespace, node), 30, "the deletions")

            lister = watching.api_lister(api, page_size=2)  # pages of 2: the continue tokens are followed
            found = await reconciler.round(lister)
            assert await reconciler.round(lister) == 0, "each missed deletion is delivered once"
            return found
        finally:
            await api.close()

    assert asyncio.run(scenario()) == 3
    assert sorted(sink.deleted) == [("nodes", node), ("pods", "gone-1"), ("pods", "gone-2")]
    exposition = metrics.exposition().decode()
    assert 'usher_missed_deletions_total{kind="pods"} 2.0' in exposition
    assert 'usher_missed_deletions_total{kind="nodes"} 1.0' in exposition


def gone(core_api: kubernetes.client.CoreV1Api, namespace: str, node: str) -> bool:
    pods = {pod.metadata.name for pod in core_api.list_namespaced_pod(namespace).items if pod.metadata}
    nodes = {item.metadata.name for item in core_api.list_node().items if item.metadata}
    return pods == {"kept"} and node not in nodes
