"""NodeInfo: one node and the pods counted against it.

Pure. ``requested``, ``non_zero_requested`` and ``used_ports`` are kept
incrementally so a fit or port check is O(resources), not O(pods on the node).
``non_zero_requested`` counts pods without cpu/memory requests as 100m / 200Mi,
as kube-scheduler does for scoring.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.resources import CPU, MEMORY, PODS, ResourceList, add_into, resource_list
from usher.core.types import HostPort, NodeName, PodInfo, PodKey

DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_GENERATIONS = itertools.count(1)
"""One sequence for every NodeInfo and clone: equal generations mean equal contents."""


def non_zero_requests(pod: PodInfo) -> tuple[int, int]:
    """(cpu, memory) for scoring: unset requests count as 100m / 200Mi."""
    return (
        pod.requests.get(CPU) or DEFAULT_MILLI_CPU_REQUEST,
        pod.requests.get(MEMORY) or DEFAULT_MEMORY_REQUEST,
    )


class Journal:
    """The cache's nodes, the most recently changed last: which changed since a generation, without a walk
    of every node (kube-scheduler's snapshot keeps its NodeInfos in a list ordered the same way)."""

    __slots__ = ("_nodes",)

    def __init__(self) -> None:
        self._nodes: dict[NodeName, NodeInfo] = {}

    def record(self, node: NodeInfo) -> None:
        self._nodes.pop(node.name, None)
        self._nodes[node.name] = node

    def forget(self, name: NodeName) -> None:
        self._nodes.pop(name, None)

    @property
    def latest(self) -> int:
        """The newest generation of any node recorded (0 for none)."""
        return next((node.generation for node in reversed(self._nodes.values())), 0)

    def changed_since(self, generation: int) -> list[NodeInfo]:
        """The nodes whose generation is newer than ``generation``, newest first."""
        changed: list[NodeInfo] = []
        for node in reversed(self._nodes.values()):
            if node.generation <= generation:
                break
            changed.append(node)
        return changed


@dataclass(slots=True)
class NodeInfo:
    """One node and the pods counted on it, with the sums plugins read kept current on every add and remove.

    ``raw`` is None for a node the watch has not shown (yet) or deleted while pods still count on it.
    """

    name: NodeName
    raw: Mapping[str, Any] | None = None
    allocatable: ResourceList = field(default_factory=dict)
    unschedulable: bool = False
    pods: dict[PodKey, PodInfo] = field(default_factory=dict)
    requested: ResourceList = field(default_factory=dict)
    non_zero_requested: ResourceList = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    images: Mapping[str, int] = field(default_factory=dict)
    """Each name of an image in ``status.images`` -> the size the node reports for it (ImageLocality)."""
    taint_shape: tuple[tuple[Any, Any, Any], ...] = ()
    """(key, value, effect) of each taint, in order: all a toleration is matched against, hashable, so nodes
    tainted alike share one answer (TaintToleration keeps one per shape within a cycle)."""
    used_ports: dict[HostPort, int] = field(default_factory=dict)
    """Host ports taken by pods on this node -> how many pods hold each."""
    pods_with_affinity: int = 0
    pods_with_required_anti_affinity: int = 0
    # cpu, memory and pod count as plain numbers, copied from the dicts above whenever they
    # change (kube-scheduler's Resource keeps MilliCPU/Memory/AllowedPodNumber as fields for the
    # same reason): the Fit and BalancedAllocation hot loops read these for every node of
    # every cycle, and an attribute is cheaper than two dict lookups.
    allocatable_cpu: int = 0
    allocatable_memory: int = 0
    allocatable_pods: int = 0
    requested_cpu: int = 0
    requested_memory: int = 0
    requested_pods: int = 0
    non_zero_cpu: int = 0
    non_zero_memory: int = 0
    free_cpu: int = 0
    free_memory: int = 0
    free_pods: int = 0
    """allocatable - requested, for Fit's Filter (the room a pod may take: three reads, no arithmetic)."""
    generation: int = field(default_factory=lambda: next(_GENERATIONS))
    """Renewed on every change of the node or its pods (kube-scheduler's NodeInfo.Generation): a plugin may
    keep what it derived from a node for as long as the generation holds."""
    journal: Journal | None = None
    """The cache's record of changes, told of every new generation (None for a clone)."""

    def _changed(self) -> None:
        self.generation = next(_GENERATIONS)
        if self.journal is not None:
            self.journal.record(self)

    def set_node(self, raw: Mapping[str, Any]) -> None:
        status = raw.get("status") or {}
        spec = raw.get("spec") or {}
        self._changed()
        self.raw = raw
        self.allocatable = resource_list(status.get("allocatable"))
        self.unschedulable = bool(spec.get("unschedulable"))
        self.labels = dict((raw.get("metadata") or {}).get("labels") or {})
        self.taints = tuple(spec.get("taints") or ())
        self.taint_shape = tuple((t.get("key"), t.get("value"), t.get("effect")) for t in self.taints)
        self.images = _images(status.get("images"))
        self.allocatable_cpu = self.allocatable.get(CPU, 0)
        self.allocatable_memory = self.allocatable.get(MEMORY, 0)
        self.allocatable_pods = self.allocatable.get(PODS, 0)
        self._copy_free()

    def node_gone(self) -> None:
        """The Node object was deleted while pods still count here (a placeholder until they go)."""
        self._changed()
        self.raw = None
        self.images = {}

    def _copy_requested(self) -> None:
        requested = self.requested
        self.requested_cpu = requested.get(CPU, 0)
        self.requested_memory = requested.get(MEMORY, 0)
        self.requested_pods = requested.get(PODS, 0)
        self.non_zero_cpu = self.non_zero_requested.get(CPU, 0)
        self.non_zero_memory = self.non_zero_requested.get(MEMORY, 0)
        self._copy_free()

    def _copy_free(self) -> None:
        self.free_cpu = self.allocatable_cpu - self.requested_cpu
        self.free_memory = self.allocatable_memory - self.requested_memory
        self.free_pods = self.allocatable_pods - self.requested_pods

    def add_pod(self, pod: PodInfo) -> None:
        if pod.key in self.pods:
            self.remove_pod(pod.key)
        self._changed()
        self.pods[pod.key] = pod
        add_into(self.requested, pod.requests)
        self.requested[PODS] = self.requested.get(PODS, 0) + 1
        cpu, memory = non_zero_requests(pod)
        self.non_zero_requested[CPU] = self.non_zero_requested.get(CPU, 0) + cpu
        self.non_zero_requested[MEMORY] = self.non_zero_requested.get(MEMORY, 0) + memory
        for port in pod.host_ports:
            self.used_ports[port] = self.used_ports.get(port, 0) + 1
        self.pods_with_affinity += pod.has_pod_affinity
        self.pods_with_required_anti_affinity += pod.has_required_anti_affinity
        self._copy_requested()

    def remove_pod(self, key: PodKey) -> PodInfo | None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        self._changed()
        for name, amount in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) - amount
        self.requested[PODS] = self.requested.get(PODS, 0) - 1
        cpu, memory = non_zero_requests(pod)
        self.non_zero_requested[CPU] -= cpu
        self.non_zero_requested[MEMORY] -= memory
        for port in pod.host_ports:
            left = self.used_ports.get(port, 0) - 1
            if left > 0:
                self.used_ports[port] = left
            else:
                self.used_ports.pop(port, None)
        self.pods_with_affinity -= pod.has_pod_affinity
        self.pods_with_required_anti_affinity -= pod.has_required_anti_affinity
        self._copy_requested()
        return pod

    def clone(self) -> NodeInfo:
        """An independent copy to add or remove pods on (preemption's dry runs); the pods are shared, immutable."""
        return NodeInfo(
            name=self.name,
            raw=self.raw,
            allocatable=self.allocatable,
            unschedulable=self.unschedulable,
            pods=dict(self.pods),
            requested=dict(self.requested),
            non_zero_requested=dict(self.non_zero_requested),
            labels=self.labels,
            taints=self.taints,
            images=self.images,
            taint_shape=self.taint_shape,
            used_ports=dict(self.used_ports),
            pods_with_affinity=self.pods_with_affinity,
            pods_with_required_anti_affinity=self.pods_with_required_anti_affinity,
            allocatable_cpu=self.allocatable_cpu,
            allocatable_memory=self.allocatable_memory,
            allocatable_pods=self.allocatable_pods,
            requested_cpu=self.requested_cpu,
            requested_memory=self.requested_memory,
            requested_pods=self.requested_pods,
            non_zero_cpu=self.non_zero_cpu,
            non_zero_memory=self.non_zero_memory,
            free_cpu=self.free_cpu,
            free_memory=self.free_memory,
            free_pods=self.free_pods,
            generation=self.generation,
        )

    @property
    def exists(self) -> bool:
        """False for a placeholder holding pods of a node the watch has not shown (or deleted)."""
        return self.raw is not None


def _images(raw: Any) -> dict[str, int]:
    """``status.images`` as name -> size in bytes (the first entry naming an image wins; a malformed entry or
    size counts as no image or size 0, never an error: the kubelet writes this, the scheduler only ranks by it)."""
    images: dict[str, int] = {}
    if not isinstance(raw, list):
        return images
    for entry in raw:
        if not isinstance(entry, Mapping):
            continue
        size = entry.get("sizeBytes")
        size = size if isinstance(size, int) and not isinstance(size, bool) else 0
        names = entry.get("names")
        for name in names if isinstance(names, list) else ():
            if isinstance(name, str):
                images.setdefault(name, size)
    return images
