"""Fixtures of the e2e suite: an API client, per-test kwok nodes, and usher processes."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes.client
import kubernetes.config
import pytest

from e2e.controlplane import Cluster, wait_for
from e2e.dra_driver import Driver
from e2e.usher_process import UsherProcess

#: The e2e harness's own asyncio clients (the fault proxy's upstream connections, torn by an API server
#: restart in test_chaos) now and then leave a socket to the garbage collector, whose ResourceWarning
#: then surfaces in whatever test runs at that moment (32 sockets to the session API server, seen in
#: test_chart and test_placement). It is the harness's, not usher's: usher runs as its own process in
#: every e2e test, and the unit tests, where usher's code runs in-process, still fail on it.
_HARNESS_SOCKETS = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.path):
            item.add_marker(_HARNESS_SOCKETS)


@pytest.fixture(scope="session")
def core_api(control_plane: Cluster) -> kubernetes.client.CoreV1Api:
    client = kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    return kubernetes.client.CoreV1Api(client)


@pytest.fixture
def test_id(request: pytest.FixtureRequest) -> str:
    """A short DNS-safe id of the running test, for names that must not collide across tests."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    return name[-40:].strip("-")


@pytest.fixture
def kwok_nodes(
    control_plane: Cluster, core_api: kubernetes.client.CoreV1Api, test_id: str
) -> Iterator[Callable[..., str]]:
    """Create Ready kwok nodes for this test only; they are deleted when it ends."""
    created: list[str] = []

    def make(suffix: str, **kwargs: object) -> str:
        name = f"{test_id[:40]}-{suffix}"
        control_plane.add_kwok_node(name, **kwargs)  # type: ignore[arg-type]
        created.append(name)
        return name

    yield make
    for name in created:
        try:
            core_api.delete_node(name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:  # a test may delete a node itself
                raise


@pytest.fixture
def settled(core_api: kubernetes.client.CoreV1Api, namespace: str) -> None:
    """Wait until earlier tests' pods are gone from the shared control plane.

    Their namespaces are deleted as those tests end, and the namespace controller removes their pods
    while the next test runs. Each such removal of a bound pod is an AssignedPodDelete event, on which
    NodeResourcesFit's hint queues every pod it rejected (as upstream's does), so a test that counts
    exactly how often its pod was tried asks for this first.
    """

    def others() -> list[str]:
        pods = core_api.list_pod_for_all_namespaces().items
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods if p.metadata.namespace != namespace]

    wait_for(lambda: not others(), 120, "earlier tests' pods deleted")


@pytest.fixture
def usher(control_plane: Cluster, test_id: str) -> Iterator[Callable[..., UsherProcess]]:
    """Start usher processes (scheduler name ``usher-<test>``); any still running is killed at the end."""
    started: list[UsherProcess] = []

    def start(
        *, scheduler_name: str | None = None, wait_ready: bool = True, extra_args: tuple[str, ...] = ()
    ) -> UsherProcess:
        name = scheduler_name or f"usher-{test_id}"[:63].rstrip("-")
        log = Path(control_plane.logs_dir) / f"usher-{test_id}-{len(started)}.log"
        process = UsherProcess(
            kubeconfig=control_plane.kubeconfig, scheduler_name=name, log_path=log, extra_args=extra_args
        )
        started.append(process)
        return process.start(wait_ready=wait_ready)

    yield start
    for process in started:
        process.__exit__(None, None, None)


@pytest.fixture
def driver(core_api: kubernetes.client.CoreV1Api, test_id: str) -> Iterator[Driver]:
    """The test DRA driver's DeviceClass for this test; its ResourceSlices are removed at the end."""
    published = Driver(core_api.api_client, f"{test_id[:40]}-gpu")
    published.publish_class()
    yield published
    published.cleanup()


@pytest.fixture
def priority_classes(core_api: kubernetes.client.CoreV1Api, test_id: str) -> Iterator[Callable[[int], str]]:
    """Create PriorityClasses for this test only (pods name a class; admission fills in spec.priority)."""
    scheduling = kubernetes.client.SchedulingV1Api(core_api.api_client)
    created: list[str] = []

    def make(value: int) -> str:
        name = f"{test_id[:40]}-p{value}"
        scheduling.create_priority_class(
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        )
        created.append(name)
        # The Priority admission plugin reads classes from its informer: a pod naming the class
        # right away can be refused ("no PriorityClass with name ..."). A dry-run pod shows when
        # admission knows it.
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "priority-probe-"},
            "spec": {"priorityClassName": name, "containers": [{"name": "c", "image": "i"}]},
        }

        def admitted() -> bool:
            try:
                core_api.create_namespaced_pod("default", probe, dry_run="All")
            except kubernetes.client.ApiException as exc:
                if exc.status == 403 and "PriorityClass" in str(exc.body):
                    return False
                raise
            return True

        wait_for(admitted, 30, f"the Priority admission plugin to know {name}")
        return name

    yield make
    for name in created:
        scheduling.delete_priority_class(name)
