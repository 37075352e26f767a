"""NodeInfo: one node and the pods counted against it.

Pure. ``requested`` is kept incrementally so a fit check is O(resources),
not O(pods on the node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.resources import PODS, ResourceList, add_into, resource_list
from usher.core.types import NodeName, PodInfo, PodKey


@dataclass(slots=True)
class NodeInfo:
    name: NodeName
    raw: Mapping[str, Any] | None = None
    allocatable: ResourceList = field(default_factory=dict)
    unschedulable: bool = False
    pods: dict[PodKey, PodInfo] = field(default_factory=dict)
    requested: ResourceList = field(default_factory=dict)

    def set_node(self, raw: Mapping[str, Any]) -> None:
        status = raw.get("status") or {}
        self.raw = raw
        self.allocatable = resource_list(status.get("allocatable"))
        self.unschedulable = bool((raw.get("spec") or {}).get("unschedulable"))

    def add_pod(self, pod: PodInfo) -> None:
        if pod.key in self.pods:
            self.remove_pod(pod.key)
        self.pods[pod.key] = pod
        add_into(self.requested, pod.requests)
        self.requested[PODS] = self.requested.get(PODS, 0) + 1

    def remove_pod(self, key: PodKey) -> PodInfo | None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return None
        for name, amount in pod.requests.items():
            self.requested[name] = self.requested.get(name, 0) - amount
        self.requested[PODS] = self.requested.get(PODS, 0) - 1
        return pod

    @property
    def exists(self) -> bool:
        """False for a placeholder holding pods of a node the watch has not shown (or deleted)."""
        return self.raw is not None
