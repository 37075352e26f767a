"""What the resource scorers read per node and resource: kube-scheduler's calculateNodeAllocatableRequest. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from usher.core.dra.capacity import class_totals
from usher.core.resources import PODS, is_scalar

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.dra.state import DraState

__all__ = ["allocatable_and_requested"]


def allocatable_and_requested(
    node: NodeInfo, resource: str, want: int, requested: Mapping[str, int], dra: DraState | None
) -> tuple[int, int]:
    """(the node's allocatable, what its pods request) of ``resource``, for a pod asking for ``want`` of it;
    (0, 0) where the score leaves the resource out: an extended resource the pod does not ask for, ``pods``
    (kube's NodeInfo has no such scalar), or one the node has none of. On a node whose allocatable lacks a
    resource a DeviceClass serves, the class's devices there and those in use (`usher.core.dra.capacity`)."""
    if (not want and is_scalar(resource)) or resource == PODS:
        return 0, 0
    capacity = node.allocatable.get(resource, 0)
    if capacity or dra is None:
        return capacity, requested.get(resource, 0)
    return class_totals(dra, resource, node.name, node.labels)
