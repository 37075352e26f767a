"""The reconciler against a real API server: what was deleted behind the watch's back is found, nothing else.

kopf misses a deletion only when its watch expires (410 Gone) while the object
is deleted, which a test cannot provoke on demand without rewriting the watch
stream. So the watch is played by the test: it hands the real objects to the
sink through `Holdings.deliver` (the function the watch streams call), deletes
some of them through the API with no watch running, and lets the reconciler's
real metadata-only, paginated LISTs find them. What the sink does with a
DELETED is the same as for kopf's own (unit-tested in tests/unit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import kubernetes.client
import pytest

from e2e.controlplane import Cluster, wait_for
from e2e.test_scheduling import pod_manifest
from usher.adapters import watching
from usher.adapters.connecting import connect
from usher.adapters.kubeapi import KubeApi
from usher.adapters.metrics import Metrics

pytestmark = pytest.mark.e2e


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
