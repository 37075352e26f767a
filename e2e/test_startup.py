"""usher's start-up against a real API server: ready only once its cache holds everything that already existed."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import kubernetes.client
import pytest

from e2e.controlplane import Cluster, wait_for
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess
from usher.adapters.connecting import connect
from usher.adapters.kubeapi import ApiResult, KubeApi
from usher.adapters.watching import METADATA_ONLY, api_lister

pytestmark = pytest.mark.e2e


def test_usher_is_ready_only_once_its_cache_holds_the_pods_bound_before_it_started(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
) -> None:
    full = kwok_nodes("full", cpu="1", pods=110)
    free = kwok_nodes("free", cpu="1", pods=110)
    # Bound by someone else before usher starts: they fill one node, which only usher's cache can tell.
    for i in range(40):
        manifest = pod_manifest(f"bound-{i:02d}", "default-scheduler", cpu="25m", memory="1Mi")
        manifest["spec"]["nodeName"] = full
        core_api.create_namespaced_pod(namespace, manifest)

    scheduler = usher()  # returns once /readyz says synced
    synced = re.search(r"cache synced: (\d+) nodes", scheduler.log_path.read_text())
    assert synced is not None and int(synced.group(1)) >= 2
    core_api.create_namespaced_pod(namespace, pod_manifest("new", scheduler.scheduler_name, cpu="500m"))

    wait_for(lambda: core_api.read_namespaced_pod("new", namespace).spec.node_name is not None, 60, "the new pod bound")
    assert core_api.read_namespaced_pod("new", namespace).spec.node_name == free
    assert scheduler.terminate() == 0


def test_the_sync_lists_names_and_uids_only(control_plane: Cluster, namespace: str) -> None:
    """usher's own start-up LIST asks for metadata only: kopf lists the objects themselves."""

    async def list_both() -> tuple[list[str], ApiResult]:
        connection = await connect(str(control_plane.kubeconfig))
        api = KubeApi(connection.async_config)
        try:
            keys = await api_lister(api, page_size=2)("", "namespaces")
            raw = await api.request("GET", "/api/v1/namespaces?limit=1", accept=METADATA_ONLY)
        finally:
            await api.close()
        return list(keys or ()), raw

    keys, raw = asyncio.run(list_both())
    assert raw.ok and raw.body.get("kind") == "PartialObjectMetadataList"
    assert "spec" not in raw.body["items"][0] and raw.body["items"][0]["metadata"]["uid"]
    assert len(keys) >= 5  # default, kube-system, kube-public, kube-node-lease, this test's: pages of 2
