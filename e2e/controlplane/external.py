"""An existing cluster reached by a kubeconfig (kind via e2e/kind.sh, or any other): ``USHER_KUBECONFIG``.

Nothing is started or stopped: the cluster outlives the harness, so
`ExternalCluster` implements `e2e.controlplane.clusters.Cluster` and not
`RestartableControlPlane`. ``add_kwok_node`` needs a kwok controller running
in that cluster with the same annotation selector (e2e/kind.sh installs
one); the cluster's own controllers make ServiceAccounts and lift the
not-ready taint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from e2e.controlplane import objects
from e2e.controlplane.access import AdminClient, AdminCredentials
from e2e.controlplane.binaries import Binaries
from e2e.controlplane.clusters import Cluster
from e2e.controlplane.waiting import wait_for

__all__ = ["ExternalCluster"]

T = TypeVar("T")


class ExternalCluster:
    """A cluster someone else runs; the harness acts on it with the kubeconfig's credentials.

    Build one with `from_kubeconfig`. The kubeconfig's current context must
    carry a CA (``certificate-authority`` or ``-data``) and a client
    certificate or a token; exec plugins are not supported.
    """

    def __init__(self, *, source: Path, workdir: Path, client: AdminClient) -> None:
        self.source = source
        self.workdir = workdir
        self._api = client

    @classmethod
    def from_kubeconfig(cls, kubeconfig: Path, workdir: Path, *, binaries: Binaries | None = None) -> ExternalCluster:
        """Read the credentials of ``kubeconfig``; the harness's files (a self-contained copy of the
        kubeconfig, logs of processes tests start) go to ``workdir``."""
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "logs").mkdir(exist_ok=True)
        credentials = AdminCredentials.from_kubeconfig(kubeconfig, workdir / "credentials")
        own_kubeconfig = credentials.write_kubeconfig(workdir / "kubeconfig")
        client = AdminClient(
            credentials, kubeconfig=own_kubeconfig, kubectl=(binaries or Binaries.locate()).kubectl,
            kubectl_cache=workdir / "kubectl-cache",
        )  # fmt: skip
        return cls(source=kubeconfig, workdir=workdir, client=client)

    @property
    def kubeconfig(self) -> Path:
        """A self-contained copy of the source kubeconfig's current context (``<workdir>/kubeconfig``)."""
        return self._api.kubeconfig

    @property
    def server(self) -> str:
        return self._api.credentials.server

    @property
    def admin(self) -> AdminCredentials:
        return self._api.credentials

    @property
    def logs_dir(self) -> Path:
        """``<workdir>/logs``: logs of processes tests start (the cluster's own logs are elsewhere)."""
        return self.workdir / "logs"

    def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", timeout: float = 30.0
    ) -> Any:
        return self._api.request(method, path, body, content_type=content_type, timeout=timeout)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0) -> str:
        return self._api.kubectl(*args, stdin=stdin, check=check, timeout=timeout)

    def wait_for(
        self,
        predicate: Callable[[], T],
        timeout: float,
        what: str,
        *,
        interval: float = 0.1,
        ignore: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Plain `wait_for`: there are no processes of ours whose death could explain a timeout."""
        return wait_for(predicate, timeout, what, interval=interval, ignore=ignore)

    def create_namespace(self, name: str, *, labels: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
        return objects.create_namespace(
            self._api, name, labels=labels, timeout=timeout, wait_for=self.wait_for,
            create_default_service_account=False,  # the cluster's serviceaccount-controller does
        )  # fmt: skip

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
        node = objects.create_kwok_node(
            self._api, name, cpu=cpu, memory=memory, pods=pods, labels=labels, taints=taints,
            annotations=annotations, extra_resources=extra_resources,
        )  # fmt: skip
        if wait:
            node = self.wait_for_nodes_ready([name], timeout=timeout)[name]
        return node

    def wait_for_nodes_ready(self, names: Sequence[str], *, timeout: float = 60.0) -> dict[str, dict[str, Any]]:
        return objects.wait_for_nodes_ready(
            self._api, names, timeout=timeout, wait_for=self.wait_for,
            lift_not_ready_taint=False,  # the cluster's node-lifecycle-controller does
        )  # fmt: skip


#: Static interface check (mypy): an external cluster is a complete `Cluster`.
_IMPLEMENTS: type[Cluster] = ExternalCluster
