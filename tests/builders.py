"""Fluent builders for API objects as the API server serves them (plain dicts).

make_pod().name("p").req(cpu="500m").obj()
make_node().name("n1").capacity(cpu="4", memory="8Gi", pods=110).obj()
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Self

_uids = itertools.count(1)
_versions = itertools.count(1)


class PodBuilder:
    def __init__(self) -> None:
        n = next(_uids)
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{n}", "namespace": "default", "uid": f"uid-{n}", "resourceVersion": "1"},
            "spec": {"schedulerName": "usher", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending"},
        }

    def name(self, name: str) -> Self:
        self._pod["metadata"]["name"] = name
        return self

    def namespace(self, namespace: str) -> Self:
        self._pod["metadata"]["namespace"] = namespace
        return self

    def uid(self, uid: str) -> Self:
        self._pod["metadata"]["uid"] = uid
        return self

    def scheduler(self, name: str) -> Self:
        self._pod["spec"]["schedulerName"] = name
        return self

    def priority(self, value: int) -> Self:
        self._pod["spec"]["priority"] = value
        return self

    def node(self, name: str) -> Self:
        self._pod["spec"]["nodeName"] = name
        return self

    def phase(self, phase: str) -> Self:
        self._pod["status"]["phase"] = phase
        return self

    def req(self, **requests: str) -> Self:
        """Requests of the (first) container; ``ephemeral_storage`` means ``ephemeral-storage``."""
        resources = self._pod["spec"]["containers"][0].setdefault("resources", {})
        resources.setdefault("requests", {}).update({k.replace("_", "-"): v for k, v in requests.items()})
        return self

    def container(self, **requests: str) -> Self:
        self._pod["spec"]["containers"].append(
            {"name": f"c{len(self._pod['spec']['containers'])}", "resources": {"requests": requests}}
        )
        return self

    def init_container(self, *, sidecar: bool = False, **requests: str) -> Self:
        init = {"name": f"init{len(self._pod['spec'].get('initContainers', []))}", "resources": {"requests": requests}}
        if sidecar:
            init["restartPolicy"] = "Always"
        self._pod["spec"].setdefault("initContainers", []).append(init)
        return self

    def overhead(self, **amounts: str) -> Self:
        self._pod["spec"]["overhead"] = amounts
        return self

    def gates(self, *names: str) -> Self:
        self._pod["spec"]["schedulingGates"] = [{"name": n} for n in names]
        return self

    def version(self, version: str | None = None) -> Self:
        self._pod["metadata"]["resourceVersion"] = version or str(next(_versions) + 1000)
        return self

    def pvc(self, claim: str, volume: str | None = None) -> Self:
        """A volume backed by the PersistentVolumeClaim ``claim``."""
        volumes = self._pod["spec"].setdefault("volumes", [])
        volumes.append({"name": volume or f"vol-{claim}", "persistentVolumeClaim": {"claimName": claim}})
        return self

    def ephemeral(self, volume: str, storage_class: str = "") -> Self:
        """A generic ephemeral volume (its claim is ``<pod>-<volume>``)."""
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        if storage_class:
            spec["storageClassName"] = storage_class
        self._pod["spec"].setdefault("volumes", []).append(
            {"name": volume, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}
        )
        return self

    def volume(self, name: str, **source: Any) -> Self:
        """A volume with the given source, e.g. ``volume("d", gcePersistentDisk={"pdName": "disk"})``."""
        self._pod["spec"].setdefault("volumes", []).append({"name": name, **source})
        return self

    def nominated(self, node: str) -> Self:
        self._pod["status"]["nominatedNodeName"] = node
        return self

    def group(self, pod_group: str) -> Self:
        """A member of the PodGroup ``pod_group`` (``spec.schedulingGroup.podGroupName``)."""
        self._pod["spec"]["schedulingGroup"] = {"podGroupName": pod_group}
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


class NodeBuilder:
    def __init__(self) -> None:
        n = next(_uids)
        self._node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"node-{n}", "uid": f"uid-{n}", "labels": {}},
            "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }

    def name(self, name: str) -> Self:
        self._node["metadata"]["name"] = name
        return self

    def capacity(self, **amounts: str | int) -> Self:
        self._node["status"]["allocatable"] = {k.replace("_", "-"): str(v) for k, v in amounts.items()}
        return self

    def label(self, key: str, value: str) -> Self:
        self._node["metadata"]["labels"][key] = value
        return self

    def unschedulable(self, value: bool = True) -> Self:
        self._node["spec"]["unschedulable"] = value
        return self

    def condition(self, kind: str, status: str, heartbeat: str) -> Self:
        self._node["status"]["conditions"] = [{"type": kind, "status": status, "lastHeartbeatTime": heartbeat}]
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._node)


def make_pod() -> PodBuilder:
    return PodBuilder()


def make_node() -> NodeBuilder:
    return NodeBuilder()


class ClaimBuilder:
    """A PersistentVolumeClaim (``make_pvc``): Pending, ReadWriteOnce, 1Gi unless told otherwise."""

    def __init__(self) -> None:
        n = next(_uids)
        self._pvc: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"pvc-{n}", "namespace": "default", "uid": f"uid-{n}", "resourceVersion": "1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"},
        }

    def name(self, name: str) -> Self:
        self._pvc["metadata"]["name"] = name
        return self

    def storage_class(self, name: str) -> Self:
        self._pvc["spec"]["storageClassName"] = name
        return self

    def namespace(self, namespace: str) -> Self:
        self._pvc["metadata"]["namespace"] = namespace
        return self

    def access_modes(self, *modes: str) -> Self:
        self._pvc["spec"]["accessModes"] = list(modes)
        return self

    def request(self, size: str) -> Self:
        self._pvc["spec"]["resources"]["requests"]["storage"] = size
        return self

    def bound(self, volume: str) -> Self:
        """Bound by the PV controller (volumeName and bind-completed)."""
        self._pvc["spec"]["volumeName"] = volume
        self._pvc["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
        self._pvc["status"]["phase"] = "Bound"
        return self

    def annotate(self, key: str, value: str) -> Self:
        self._pvc["metadata"].setdefault("annotations", {})[key] = value
        return self

    def owned_by(self, uid: str) -> Self:
        self._pvc["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": uid, "controller": True}]
        return self

    def phase(self, phase: str) -> Self:
        self._pvc["status"]["phase"] = phase
        return self

    def deleting(self) -> Self:
        self._pvc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return self

    def version(self, version: str) -> Self:
        self._pvc["metadata"]["resourceVersion"] = version
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pvc)


class VolumeBuilder:
    """A PersistentVolume (``make_pv``): Available, ReadWriteOnce, 1Gi unless told otherwise."""

    def __init__(self) -> None:
        n = next(_uids)
        self._pv: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"pv-{n}", "uid": f"uid-{n}", "resourceVersion": "1"},
            "spec": {"accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}},
            "status": {"phase": "Available"},
        }

    def name(self, name: str) -> Self:
        self._pv["metadata"]["name"] = name
        return self

    def storage_class(self, name: str) -> Self:
        self._pv["spec"]["storageClassName"] = name
        return self

    def capacity(self, size: str) -> Self:
        self._pv["spec"]["capacity"]["storage"] = size
        return self

    def on_node(self, node: str, key: str = "kubernetes.io/hostname") -> Self:
        """Node affinity to nodes labelled ``key=node``."""
        term = {"matchExpressions": [{"key": key, "operator": "In", "values": [node]}]}
        self._pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
        return self

    def label(self, key: str, value: str) -> Self:
        self._pv["metadata"].setdefault("labels", {})[key] = value
        return self

    def csi(self, driver: str, handle: str) -> Self:
        """A CSI volume (``spec.csi``)."""
        self._pv["spec"]["csi"] = {"driver": driver, "volumeHandle": handle}
        return self

    def source(self, **source: Any) -> Self:
        """An in-tree volume source, e.g. ``source(awsElasticBlockStore={"volumeID": "vol-1"})``."""
        self._pv["spec"].update(source)
        return self

    def claimed_by(self, namespace: str, name: str, uid: str = "") -> Self:
        self._pv["spec"]["claimRef"] = {"namespace": namespace, "name": name, "uid": uid}
        return self

    def phase(self, phase: str) -> Self:
        self._pv["status"]["phase"] = phase
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pv)


def make_pvc() -> ClaimBuilder:
    return ClaimBuilder()


def make_pv() -> VolumeBuilder:
    return VolumeBuilder()


def make_storage_class(
    name: str, *, provisioner: str = "example.com/csi", binding: str = "WaitForFirstConsumer", **extra: Any
) -> dict[str, Any]:
    """A StorageClass; ``extra`` fields (``allowedTopologies``) are set as given."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "resourceVersion": "1"},
        "provisioner": provisioner,
        "volumeBindingMode": binding,
        **extra,
    }


def make_csi_node(name: str, limits: dict[str, int | None], *, migrated: str = "") -> dict[str, Any]:
    """A CSINode with a driver per ``limits`` entry (None: the driver reports no count); ``migrated`` is
    the ``storage.alpha.kubernetes.io/migrated-plugins`` annotation."""
    drivers: list[dict[str, Any]] = []
    for driver, count in limits.items():
        entry: dict[str, Any] = {"name": driver, "nodeID": name}
        if count is not None:
            entry["allocatable"] = {"count": count}
        drivers.append(entry)
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if migrated:
        meta["annotations"] = {"storage.alpha.kubernetes.io/migrated-plugins": migrated}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta, "spec": {"drivers": drivers}}


def make_csi_driver(name: str, **spec: Any) -> dict[str, Any]:
    """A CSIDriver; ``spec`` fields (``preventPodSchedulingIfMissing``) are set as given."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": spec,
    }


def make_pod_group(
    name: str,
    min_count: int | None = None,
    *,
    namespace: str = "default",
    priority: int | None = None,
    version: str = "1",
    generation: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    """A scheduling.k8s.io/v1beta1 PodGroup: the gang policy with ``min_count``, else the basic policy;
    ``spec`` fields (``workloadRef``, ``schedulingPolicy`` to override) are set as given."""
    policy: dict[str, Any] = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    body: dict[str, Any] = {"schedulingPolicy": policy, **spec}
    if priority is not None:
        body["priority"] = priority
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"pg-{name}-{next(_uids)}",
            "resourceVersion": version,
            "generation": generation,
        },
        "spec": body,
    }
