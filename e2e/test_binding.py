"""DefaultBinder's API call against the real API server: every answer maps to the cause the binding cycle acts on.

usher's binding cycle never retries a pod the API server says is bound
already, was replaced by a pod of the same name, or is gone: the watch tells
where it went. These cases are decided by the API server's own answers
(409 for a pod already assigned or a UID precondition, 404 for a deleted
pod), so they are exercised here through the real dispatcher and binder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import kubernetes.client
import pytest

from e2e.controlplane import ControlPlane
from e2e.test_scheduling import pod_manifest
from usher.adapters.binding import DispatcherBinder
from usher.adapters.connecting import connect
from usher.adapters.dispatching import Dispatcher
from usher.adapters.kubeapi import KubeApi
from usher.core.types import Cause, NodeName, PodInfo, Status

pytestmark = pytest.mark.e2e


def bind_with_usher(control_plane: ControlPlane, scenario: Callable[[DispatcherBinder], Awaitable[Status]]) -> Status:
    async def run() -> Status:
        connection = await connect(str(control_plane.kubeconfig))
        api = KubeApi(connection.async_config)
        dispatcher = Dispatcher(api)
        dispatcher.start()
        try:
            return await scenario(DispatcherBinder(dispatcher, api))
        finally:
            await dispatcher.stop()
            await api.close()

    return asyncio.run(run())


def pod_info(core_api: kubernetes.client.CoreV1Api, namespace: str, name: str) -> PodInfo:
    raw = core_api.api_client.sanitize_for_serialization(core_api.read_namespaced_pod(name, namespace))
    return PodInfo.from_api(raw)


def test_binding_a_free_pod_succeeds(
    control_plane: ControlPlane, core_api: kubernetes.client.CoreV1Api, namespace: str, kwok_nodes: Callable[..., str]
) -> None:
    node = kwok_nodes("a")
    core_api.create_namespaced_pod(namespace, pod_manifest("free", "nobody"))
    pod = pod_info(core_api, namespace, "free")

    status = bind_with_usher(control_plane, lambda binder: binder.bind(pod, NodeName(node)))

    assert status.ok, status
    assert core_api.read_namespaced_pod("free", namespace).spec.node_name == node


def test_binding_a_pod_bound_already_is_a_conflict_and_leaves_it_where_it_is(
    control_plane: ControlPlane, core_api: kubernetes.client.CoreV1Api, namespace: str, kwok_nodes: Callable[..., str]
) -> None:
    first, second = kwok_nodes("first"), kwok_nodes("second")
    core_api.create_namespaced_pod(namespace, pod_manifest("taken", "nobody"))
    pod = pod_info(core_api, namespace, "taken")
    core_api.create_namespaced_binding(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "taken"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": first},
        },
        _preload_content=False,
    )

    status = bind_with_usher(control_plane, lambda binder: binder.bind(pod, NodeName(second)))

    assert status.cause is Cause.POD_CONFLICT, status
    assert "already assigned" in status.message
    assert core_api.read_namespaced_pod("taken", namespace).spec.node_name == first


def test_binding_a_pod_bound_already_to_that_node_is_done_as_after_a_lost_answer(
    control_plane: ControlPlane, core_api: kubernetes.client.CoreV1Api, namespace: str, kwok_nodes: Callable[..., str]
) -> None:
    """The first attempt's answer was lost and the retry meets "already assigned": the pod is where usher put it."""
    node = kwok_nodes("a")
    core_api.create_namespaced_pod(namespace, pod_manifest("mine", "nobody"))
    pod = pod_info(core_api, namespace, "mine")
    first = bind_with_usher(control_plane, lambda binder: binder.bind(pod, NodeName(node)))

    again = bind_with_usher(control_plane, lambda binder: binder.bind(pod, NodeName(node)))

    assert first.ok and again.ok, (first, again)
    assert core_api.read_namespaced_pod("mine", namespace).spec.node_name == node


def test_binding_a_pod_replaced_by_one_of_the_same_name_is_a_conflict(
    control_plane: ControlPlane, core_api: kubernetes.client.CoreV1Api, namespace: str, kwok_nodes: Callable[..., str]
) -> None:
    node = kwok_nodes("a")
    core_api.create_namespaced_pod(namespace, pod_manifest("reborn", "nobody"))
    old = pod_info(core_api, namespace, "reborn")
    core_api.delete_namespaced_pod("reborn", namespace, grace_period_seconds=0)
    core_api.create_namespaced_pod(namespace, pod_manifest("reborn", "nobody"))

    status = bind_with_usher(control_plane, lambda binder: binder.bind(old, NodeName(node)))

    assert status.cause is Cause.POD_CONFLICT, status
    assert core_api.read_namespaced_pod("reborn", namespace).spec.node_name is None


def test_binding_a_deleted_pod_is_not_found(
    control_plane: ControlPlane, core_api: kubernetes.client.CoreV1Api, namespace: str, kwok_nodes: Callable[..., str]
) -> None:
    node = kwok_nodes("a")
    core_api.create_namespaced_pod(namespace, pod_manifest("gone", "nobody"))
    pod = pod_info(core_api, namespace, "gone")
    core_api.delete_namespaced_pod("gone", namespace, grace_period_seconds=0)

    status = bind_with_usher(control_plane, lambda binder: binder.bind(pod, NodeName(node)))

    assert status.cause is Cause.POD_NOT_FOUND, status
