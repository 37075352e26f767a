"""What tests, the demo and the benchmarks may ask of a cluster, as protocols.

`Cluster` is everything the e2e suite needs from any cluster: admin access
(kubeconfig, raw requests, kubectl), waiting, namespaces and kwok nodes.
Two implementations, both complete: `e2e.controlplane.local.ControlPlane`
(processes this harness runs) and `e2e.controlplane.external.ExternalCluster`
(any cluster reached by a kubeconfig, ``USHER_KUBECONFIG``).

`RestartableControlPlane` adds what only a cluster whose processes we run
can do: look at a component's process and restart it. A test that needs it
asks for the ``restartable_control_plane`` fixture, which skips, saying
why, on an external cluster.

Starting and stopping are not members: whoever made a cluster owns its
lifetime (`e2e.controlplane.local.running`, the pytest plugin), and an
external cluster outlives the harness.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from e2e.controlplane.access import AdminCredentials
from e2e.controlplane.processes import Component

__all__ = ["Cluster", "RestartableControlPlane"]

T = TypeVar("T")


@runtime_checkable
class Cluster(Protocol):
    """A Kubernetes cluster the harness can act on as admin."""

    @property
    def kubeconfig(self) -> Path:
        """An admin kubeconfig with the credentials embedded (for kubectl, helm, usher, the Python client)."""
        ...

    @property
    def server(self) -> str:
        """The apiserver URL (``https://host:port``)."""
        ...

    @property
    def admin(self) -> AdminCredentials:
        """The admin's credentials: the CA that verifies the apiserver, a client certificate or a token."""
        ...

    @property
    def logs_dir(self) -> Path:
        """Where processes a test starts next to the cluster (usher, Prometheus) write their logs."""
        ...

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> Any:
        """One raw apiserver request as admin; the decoded JSON (None when empty); `ApiError` on status >= 400."""
        ...

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0) -> str:
        """The pinned kubectl as admin; stdout; `KubectlError` on a non-zero exit unless ``check`` is false."""
        ...

    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float,
        what: str,
        *,
        interval: float = 0.1,
        ignore: tuple[type[BaseException], ...] = (),
    ) -> T:
        """`e2e.controlplane.waiting.wait_for`, failing at once if the cluster is known to be broken."""
        ...

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
        """Create a namespace and wait until it accepts pods (its `default` ServiceAccount exists); the name."""
        ...

    def add_kwok_node(
        self,
        name: str,
        *,
        cpu: str = "4",
        memory: str = "8Gi",
        pods: int = 110,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        annotations: Mapping[str, str] | None = None,
        extra_resources: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Create a fake Node that kwok manages and (by default) wait until it is schedulable.

        The node carries kwok's annotation but not kwok's usual
        ``kwok.x-k8s.io/node=fake:NoSchedule`` taint: usher should see ordinary
        nodes. Capacity = allocatable = cpu/memory/pods (+ 100Gi
        ephemeral-storage, + ``extra_resources``, e.g. extended resources).
        Labels default to what a kubelet sets (hostname, os, arch).
        ``taints`` are dicts like ``{"key": k, "value": v, "effect": "NoSchedule"}``.
        "Schedulable" means Ready and without the not-ready taint that
        admission adds to new nodes. Returns the node as last read.
        """
        ...

    def wait_for_nodes_ready(self, names: Sequence[str], *, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        """Wait until every named node is Ready and free of the not-ready taint; the nodes as last read."""
        ...


@runtime_checkable
class RestartableControlPlane(Cluster, Protocol):
    """A cluster whose control-plane processes this harness runs, so it can inspect and restart them."""

    def component(self, name: str) -> Component:
        """The running component called ``name`` (etcd, kube-apiserver, kube-controller-manager, kwok, ...)."""
        ...

    def restart(self, name: str, *, grace: float = 10.0, timeout: float = 120.0, kill: bool = False) -> Component:
        """Stop the component (SIGTERM, SIGKILL after ``grace``; ``kill``: SIGKILL at once, as a crash) and
        start it again with the same flags and state; return the new one once it is ready again."""
        ...
