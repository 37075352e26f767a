"""Dynamic volume provisioning for e2e tests: a CSI driver and Kubernetes' csi-provisioner per kwok node.

Why: volume scheduling (WaitForFirstConsumer, the selected-node annotation, PV
node affinity, CSINode attach limits, CSIStorageCapacity) is only proven
against a provisioner that really makes PVs. kwok nodes have no kubelet, so
nothing runs node plugins or registers CSINodes there. As in Kubernetes'
"distributed provisioning" deployment, each served node gets its own driver
(e2e/hostpath-csi: volumes are directories, booked against a fixed capacity)
and its own ``csi-provisioner --node-deployment`` (the real external-provisioner
sidecar), both plain processes here; the harness writes what kubelet would:
the node's topology label and its CSINode with the attach limit. The rest is
the real thing: kcm's PV binder hands claims to the provisioner, which creates
PVs with node affinity, deletes them, and publishes CSIStorageCapacity.

Usage (see the `hostpath_storage` fixture)::

    storage.serve(node_a, node_b, capacity="2Gi", attach_limit=3)
    core_api.create_namespaced_persistent_volume_claim(ns, claim("data", storage.wffc_class, "1Gi"))

One `HostPathStorage` per driver name at a time: it owns the CSIDriver, its
classes, CSINodes entries, capacities and PVs, and `stop` removes them all.
"""

from __future__ import annotations

import atexit
import hashlib
import http.client
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
from kubernetes.client import ApiException
from kubernetes.utils import parse_quantity

from e2e.controlplane import Cluster, Component, MissingBinaryError, cache_dir, free_ports, read_versions
from e2e.controlplane.processes import http_get, spawn, terminate

__all__ = [
    "DRIVER",
    "SELECTED_NODE_ANNOTATION",
    "TOPOLOGY_KEY",
    "HostPathStorage",
    "StorageBinaries",
    "claim",
    "claim_volume",
    "ephemeral_volume",
    "hostpath_storage",
    "pv_nodes",
]

DRIVER = "hostpath.e2e.usher.dev"
#: The node label (and CSI topology segment) whose value is the node's name: PVs' node affinity uses it.
TOPOLOGY_KEY = "topology.hostpath.e2e.usher.dev/node"
#: Set by the scheduler on a WaitForFirstConsumer claim (or by the provisioner on an Immediate one).
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
HOSTPATH_CSI_SOURCE = Path(__file__).resolve().parent / "hostpath-csi"
BUILD_COMMAND = "make binaries"
_MERGE_PATCH = "application/merge-patch+json"


def source_hash(source: Path = HOSTPATH_CSI_SOURCE) -> str:
    """The driver's version: e2e/build-binaries.sh stamps the same hash of its sources into the binary."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class StorageBinaries:
    """The provisioner at its pinned version and the driver built from this checkout."""

    csi_provisioner: Path
    hostpath_csi: Path

    @classmethod
    def locate(cls) -> StorageBinaries:
        root = cache_dir() / "bin"
        version = read_versions()["EXTERNAL_PROVISIONER_VERSION"]
        return cls(root / f"external-provisioner-{version}" / "csi-provisioner", root / "hostpath-csi" / "hostpath-csi")

    def require(self) -> None:
        """Fail, naming the make target, when a binary is missing or the driver predates its sources."""
        problems = [f"{p.name} at {p}" for p in (self.csi_provisioner, self.hostpath_csi) if not p.is_file()]
        if not problems:
            want = f"hostpath-csi {source_hash()}"
            have = subprocess.run(
                [str(self.hostpath_csi), "--version"], capture_output=True, text=True, check=False
            ).stdout.strip()
            if have != want:
                problems.append(f"{self.hostpath_csi} is '{have}', e2e/hostpath-csi is '{want}'")
        if problems:
            raise MissingBinaryError(
                "missing or stale CSI binaries: " + "; ".join(problems) + f". Build them with `{BUILD_COMMAND}`"
                " (or `bash e2e/build-binaries.sh csi`) from the repository root."
            )


def claim(name: str, class_name: str, size: str = "1Gi") -> dict[str, Any]:
    """A ReadWriteOnce PersistentVolumeClaim of ``size`` in the class ``class_name``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class_name,
            "resources": {"requests": {"storage": size}},
        },
    }


def claim_volume(name: str, claim_name: str) -> dict[str, Any]:
    """A pod volume using an existing claim."""
    return {"name": name, "persistentVolumeClaim": {"claimName": claim_name}}


def ephemeral_volume(name: str, class_name: str, size: str = "1Gi") -> dict[str, Any]:
    """A generic ephemeral volume: kcm's ephemeral-volume-controller makes the claim ``<pod>-<name>``."""
    spec = claim(name, class_name, size)["spec"]
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}


def pv_nodes(pv: dict[str, Any]) -> list[str]:
    """The nodes a PV's node affinity allows, by our topology key (what the provisioner wrote)."""
    terms = pv["spec"].get("nodeAffinity", {}).get("required", {}).get("nodeSelectorTerms", [])
    return [
        value
        for term in terms
        for expression in term.get("matchExpressions", [])
        if expression["key"] == TOPOLOGY_KEY and expression["operator"] == "In"
        for value in expression["values"]
    ]


@dataclass
class _ServedNode:
    """One node's driver and provisioner, and where the driver keeps its volumes."""

    node: str
    directory: Path
    capacity_bytes: int
    attach_limit: int | None
    driver: Component
    provisioner: Component
    metrics_port: int


class HostPathStorage:
    """Node-local CSI storage on chosen kwok nodes, with a WaitForFirstConsumer and an Immediate class.

    ``name`` prefixes the classes (``<name>-wffc``, ``<name>-immediate``).
    ``storage_capacity`` is the CSIDriver's ``storageCapacity``: whether
    schedulers must heed the published CSIStorageCapacity objects (they are
    published either way, in ``capacity_namespace``).
    """

    def __init__(
        self,
        cluster: Cluster,
        api_client: kubernetes.client.ApiClient,
        *,
        name: str = "usher-hostpath",
        driver: str = DRIVER,
        storage_capacity: bool = True,
        capacity_namespace: str = "kube-system",
    ) -> None:
        self.cluster = cluster
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.storage = kubernetes.client.StorageV1Api(api_client)
        self.driver = driver
        self.storage_capacity = storage_capacity
        self.capacity_namespace = capacity_namespace
        self.wffc_class = f"{name}-wffc"
        self.immediate_class = f"{name}-immediate"
        self.binaries = StorageBinaries.locate()
        self.served: dict[str, _ServedNode] = {}
        self.classes: list[str] = []
        self.workdir: Path | None = None
        self.driver_created = False

    def __enter__(self) -> HostPathStorage:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- cluster-wide objects

    def start(self) -> HostPathStorage:
        """Create the CSIDriver and both StorageClasses; no node offers storage until `serve`."""
        self.binaries.require()
        # Short: each node's unix socket lives here, and socket paths are limited to 107 bytes.
        self.workdir = Path(tempfile.mkdtemp(prefix="usher-csi-"))
        atexit.register(self.stop)
        try:
            self._create_cluster_objects()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_cluster_objects(self) -> None:
        self.storage.create_csi_driver(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSIDriver",
                "metadata": {"name": self.driver},
                "spec": {
                    "attachRequired": False,
                    "podInfoOnMount": False,
                    "storageCapacity": self.storage_capacity,
                    "volumeLifecycleModes": ["Persistent"],
                },
            }
        )
        self.driver_created = True
        self.add_class(self.wffc_class, binding_mode="WaitForFirstConsumer")
        self.add_class(self.immediate_class, binding_mode="Immediate")

    def add_class(self, name: str, *, binding_mode: str, allowed_nodes: list[str] | None = None) -> str:
        """Another StorageClass of this driver (removed by `stop`), optionally limited to some nodes."""
        body: dict[str, Any] = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": self.driver,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": binding_mode,
        }
        if allowed_nodes is not None:
            body["allowedTopologies"] = [{"matchLabelExpressions": [{"key": TOPOLOGY_KEY, "values": allowed_nodes}]}]
        self.storage.create_storage_class(body)
        self.classes.append(name)
        return name

    # ----------------------------------------------------------------- per node

    def serve(self, *nodes: str, capacity: str = "10Gi", attach_limit: int | None = None, timeout: float = 60) -> None:
        """Offer ``capacity`` on each node, at most ``attach_limit`` volumes per node (None: no limit).

        Labels the Node, writes its CSINode as kubelet would, starts its driver
        and provisioner, and returns once every provisioner has published the
        node's CSIStorageCapacity for the WaitForFirstConsumer class (so it
        is connected to its driver and watching the API).
        """
        if self.workdir is None:
            raise RuntimeError("HostPathStorage.serve before start")
        capacity_bytes = int(parse_quantity(capacity))
        for node in nodes:
            if node in self.served:
                raise ValueError(f"{node} is served already")
            self._register_node(node, attach_limit)
            directory = self.workdir / f"n{len(self.served)}"
            directory.mkdir()
            self.served[node] = self._launch(node, directory, capacity_bytes, attach_limit)
        for node in nodes:
            self._wait(partial(_metrics_up, self.served[node]), timeout, f"csi-provisioner of {node} serving /metrics")
        for node in nodes:
            self._wait(partial(self._published, node), timeout, f"CSIStorageCapacity of {self.wffc_class} on {node}")

    def _register_node(self, node: str, attach_limit: int | None) -> None:
        """kubelet's part of driver registration: the topology label and the CSINode entry."""
        self.core.patch_node(node, {"metadata": {"labels": {TOPOLOGY_KEY: node}}}, _content_type=_MERGE_PATCH)
        entry: dict[str, Any] = {"name": self.driver, "nodeID": node, "topologyKeys": [TOPOLOGY_KEY]}
        if attach_limit is not None:
            entry["allocatable"] = {"count": attach_limit}
        try:
            existing = self._csi_node(node)
        except ApiException as error:
            if error.status != 404:
                raise
            uid = self.core.api_client.sanitize_for_serialization(self.core.read_node(node))["metadata"]["uid"]
            self.storage.create_csi_node(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSINode",
                    # Owned by the Node, as kubelet does it: deleting the node deletes its CSINode.
                    "metadata": {
                        "name": node,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}],
                    },
                    "spec": {"drivers": [entry]},
                }
            )
        else:
            existing["spec"]["drivers"] = [d for d in existing["spec"]["drivers"] if d["name"] != self.driver]
            existing["spec"]["drivers"].append(entry)
            self.storage.replace_csi_node(node, existing)

    def _launch(self, node: str, directory: Path, capacity_bytes: int, attach_limit: int | None) -> _ServedNode:
        socket = directory / "csi.sock"
        logs = self.cluster.logs_dir
        driver = spawn(
            f"hostpath-csi-{node}",
            [
                str(self.binaries.hostpath_csi),
                f"--endpoint={socket}",
                f"--drivername={self.driver}",
                f"--nodeid={node}",
                f"--topology-key={TOPOLOGY_KEY}",
                f"--datadir={directory / 'data'}",
                f"--capacity={capacity_bytes}",
                f"--max-volumes-per-node={attach_limit or 0}",
            ],
            logs,
            directory,
        )
        port = free_ports(1)[0]
        provisioner = spawn(
            f"csi-provisioner-{node}",
            [
                str(self.binaries.csi_provisioner),
                f"--kubeconfig={self.cluster.kubeconfig}",
                f"--csi-address={socket}",
                "--node-deployment",
                # Immediate claims: every node's provisioner waits a random moment, then one takes the claim.
                "--node-deployment-base-delay=200ms",
                "--node-deployment-max-delay=2s",
                "--enable-capacity",
                "--capacity-ownerref-level=-1",  # no Pod owns these processes: the objects are ownerless
                "--capacity-poll-interval=10s",  # provisioning and deleting refresh it at once anyway
                "--kube-api-capacity-qps=20",
                "--kube-api-capacity-burst=50",
                "--extra-create-metadata",  # the driver records each volume's claim
                "--retry-interval-max=30s",
                "--worker-threads=10",
                f"--http-endpoint=127.0.0.1:{port}",
                "--v=5",
            ],
            logs,
            directory,
            env={"NODE_NAME": node, "NAMESPACE": self.capacity_namespace},
        )
        return _ServedNode(node, directory, capacity_bytes, attach_limit, driver, provisioner, port)

    # ----------------------------------------------------------------- reading state

    def components(self) -> list[Component]:
        return [c for s in self.served.values() for c in (s.driver, s.provisioner)]

    def ensure_running(self) -> None:
        """Raise `ComponentError` with the log tail if a driver or provisioner has exited."""
        for component in self.components():
            component.ensure_running()

    def volumes_on(self, node: str) -> dict[str, int]:
        """The volumes the node's driver holds on disk: volume id (the PV's volumeHandle) -> bytes."""
        data = self.served[node].directory / "data"
        state = data / "volumes.json"
        if not state.exists():
            return {}
        volumes = {v["id"]: int(v["bytes"]) for v in json.loads(state.read_text())}
        assert all((data / "volumes" / v).is_dir() for v in volumes), f"a volume of {node} has no directory"
        return volumes

    def capacity(self, node: str, class_name: str | None = None) -> int | None:
        """Bytes the node's CSIStorageCapacity offers for the class (default: the WFFC class); None if unpublished."""
        wanted = class_name or self.wffc_class
        for item in self.storage.list_namespaced_csi_storage_capacity(
            self.capacity_namespace, label_selector=f"csi.storage.k8s.io/drivername={self.driver}"
        ).items:
            labels = (item.node_topology.match_labels or {}) if item.node_topology else {}
            if item.storage_class_name == wanted and labels.get(TOPOLOGY_KEY) == node and item.capacity is not None:
                return int(parse_quantity(item.capacity))
        return None

    def _published(self, node: str) -> bool:
        return self.capacity(node) is not None

    def _csi_node(self, node: str) -> dict[str, Any]:
        body: dict[str, Any] = self.storage.api_client.sanitize_for_serialization(self.storage.read_csi_node(node))
        return body

    def _wait(self, predicate: Callable[[], object], timeout: float, what: str) -> None:
        def probe() -> object:
            self.ensure_running()
            return predicate()

        self.cluster.wait_for(probe, timeout, what, ignore=(OSError, http.client.HTTPException))

    # ----------------------------------------------------------------- teardown

    def stop(self) -> None:
        """Stop every process and remove what this storage made. Idempotent; tolerates deleted nodes."""
        if self.workdir is None:
            return
        atexit.unregister(self.stop)
        workdir, self.workdir = self.workdir, None
        terminate(self.components(), grace=5.0)
        try:
            self._remove_objects()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self.served.clear()
            self.classes.clear()
            self.driver_created = False

    def _remove_objects(self) -> None:
        self.storage.delete_collection_namespaced_csi_storage_capacity(
            self.capacity_namespace, label_selector=f"csi.storage.k8s.io/drivername={self.driver}"
        )
        self._release_volumes()
        for name in self.classes:
            _ignore_missing(partial(self.storage.delete_storage_class, name))
        if self.driver_created:
            _ignore_missing(partial(self.storage.delete_csi_driver, self.driver))
        for node in self.served:
            self._unregister_node(node)

    def _release_volumes(self) -> None:
        """Delete this driver's PVs, which no provisioner will now: drop the provisioner's finalizer.

        A PV still bound keeps kcm's pv-protection finalizer until its claim goes with the test's namespace.
        """
        for pv in self.storage.api_client.sanitize_for_serialization(self.core.list_persistent_volume().items):
            if pv["spec"].get("csi", {}).get("driver") != self.driver:
                continue
            name = pv["metadata"]["name"]
            _ignore_missing(partial(self.core.delete_persistent_volume, name))
            finalizers = [f for f in pv["metadata"].get("finalizers", []) if not f.startswith("external-provisioner.")]
            patch = {"metadata": {"finalizers": finalizers}}
            _ignore_missing(partial(self.core.patch_persistent_volume, name, patch, _content_type=_MERGE_PATCH))

    def _unregister_node(self, node: str) -> None:
        try:
            existing = self._csi_node(node)
        except ApiException as error:
            if error.status != 404:
                raise
        else:
            others = [d for d in existing["spec"]["drivers"] if d["name"] != self.driver]
            if others:
                existing["spec"]["drivers"] = others
                self.storage.replace_csi_node(node, existing)
            else:
                _ignore_missing(partial(self.storage.delete_csi_node, node))
        patch = {"metadata": {"labels": {TOPOLOGY_KEY: None}}}
        _ignore_missing(partial(self.core.patch_node, node, patch, _content_type=_MERGE_PATCH))


def _metrics_up(served: _ServedNode) -> bool:
    """The provisioner serves /metrics once it has reached its driver and read the node's info."""
    return http_get("http", served.metrics_port, "/metrics")[0] == 200


def _ignore_missing(call: Callable[[], object]) -> None:
    """Run a delete or patch; an object already gone is what teardown wanted anyway."""
    try:
        call()
    except ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture
def hostpath_storage(
    control_plane: Cluster, core_api: kubernetes.client.CoreV1Api, test_id: str
) -> Iterator[HostPathStorage]:
    """Started `HostPathStorage` for one test, classes ``<test>-wffc`` and ``<test>-immediate``; stopped at the end.

    Import it into a test module (``from e2e.storage import hostpath_storage``), then call
    ``hostpath_storage.serve(node, ...)`` for the kwok nodes that should offer storage.
    """
    with HostPathStorage(control_plane, core_api.api_client, name=test_id[:40].rstrip("-")) as storage:
        yield storage
