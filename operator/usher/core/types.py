"""Plain records the core passes around: pod keys and parsed pods.

Pure. A PodInfo is parsed once per watch event from the raw dict the API
server served; the raw object is kept for plugins that need more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NewType

from usher.core.resources import ResourceList, pod_requests

PodKey = NewType("PodKey", str)
"""``namespace/name``: how queues and the cache address a pod."""

NodeName = NewType("NodeName", str)


def pod_key(namespace: str, name: str) -> PodKey:
    return PodKey(f"{namespace}/{name}")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """An immutable view of one version of a pod, with what scheduling needs precomputed."""

    key: PodKey
    uid: str
    namespace: str
    name: str
    resource_version: str
    priority: int
    scheduler_name: str
    node_name: str
    scheduling_gates: tuple[str, ...]
    requests: ResourceList
    terminal: bool
    deleting: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a pod as served by the API server. Raises ValueError on malformed requests."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        return cls(
            key=pod_key(namespace, name),
            uid=str(meta.get("uid") or ""),
            namespace=namespace,
            name=name,
            resource_version=str(meta.get("resourceVersion") or ""),
            priority=int(spec.get("priority") or 0),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            node_name=str(spec.get("nodeName") or ""),
            scheduling_gates=tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or []),
            requests=pod_requests(obj),
            terminal=status.get("phase") in ("Succeeded", "Failed"),
            deleting=bool(meta.get("deletionTimestamp")),
            raw=obj,
        )

    @property
    def assigned(self) -> bool:
        return bool(self.node_name)
