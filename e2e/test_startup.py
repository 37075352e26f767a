"""usher's start-up against a real API server: ready only once its cache holds everything that already existed."""

from __future__ import annotations

import re
from collections.abc import Callable

import kubernetes.client
import pytest

from e2e.controlplane import wait_for
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

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
