"""The e2e harness's clusters: a real local control plane, or an existing cluster by kubeconfig.

Tests, the demo and the benchmarks ask for a `Cluster` (admin access,
waiting, namespaces, kwok nodes); `start` makes a local `ControlPlane`
(etcd, kube-apiserver, kube-controller-manager, kwok as processes), which is
also a `RestartableControlPlane`; `ExternalCluster` wraps a kubeconfig.

Usage::

    with controlplane.running() as cp:
        cp.add_kwok_node("node-1")
        ns = cp.create_namespace("demo")
        cp.kubectl("-n", ns, "get", "pods")

or from a shell: ``python -m e2e.controlplane up [--workdir DIR]``.

Modules, each with one job: `binaries` (version pins, locating the builds),
`pki` (certificates), `processes` (starting, probing and stopping a process),
`wiring` (ports and flags of each component), `local` (the local control
plane), `external` (a cluster by kubeconfig), `access` (credentials,
kubeconfigs, the admin client), `objects` (namespaces and kwok nodes on any
cluster), `clusters` (the protocols), `waiting`, `errors`, `cli`.
"""

from e2e.controlplane.access import AdminClient, AdminCredentials, write_kubeconfig
from e2e.controlplane.binaries import Binaries, cache_dir, read_versions
from e2e.controlplane.clusters import Cluster, RestartableControlPlane
from e2e.controlplane.errors import (
    ApiError,
    ComponentError,
    ControlPlaneError,
    KubectlError,
    MissingBinaryError,
    WaitTimeoutError,
)
from e2e.controlplane.external import ExternalCluster
from e2e.controlplane.local import ControlPlane, running, start
from e2e.controlplane.objects import KWOK_NODE_ANNOTATION, NOT_READY_TAINT, node_ready
from e2e.controlplane.processes import Component, free_ports
from e2e.controlplane.waiting import wait_for
from e2e.controlplane.wiring import DEFAULT_CONTROLLERS, NODE_LEASE_SECONDS, POD_CIDR, Ports

__all__ = [
    "DEFAULT_CONTROLLERS",
    "KWOK_NODE_ANNOTATION",
    "NODE_LEASE_SECONDS",
    "NOT_READY_TAINT",
    "POD_CIDR",
    "AdminClient",
    "AdminCredentials",
    "ApiError",
    "Binaries",
    "Cluster",
    "Component",
    "ComponentError",
    "ControlPlane",
    "ControlPlaneError",
    "ExternalCluster",
    "KubectlError",
    "MissingBinaryError",
    "Ports",
    "RestartableControlPlane",
    "WaitTimeoutError",
    "cache_dir",
    "free_ports",
    "node_ready",
    "read_versions",
    "running",
    "start",
    "wait_for",
    "write_kubeconfig",
]
