"""The devices of a DeviceClass one node reaches, and how many are in use: DRA-backed extended resources in
scoring. Pure.

kube-scheduler v1.37 (DRAExtendedResource) scores an extended resource that a DeviceClass serves
(``example.com/gpu``, ``deviceclass.resource.kubernetes.io/<class>``) on a node whose allocatable has none of it
by that class's devices: to NodeResourcesFit and NodeResourcesBalancedAllocation the node's allocatable is the
number of devices of the class it reaches, and what its pods requested is the number of those in use (by any
claim's allocation or an allocation in flight), to which the pod's own request is added
(``calculateDRAResourceTotals``). A device is of the class when every CEL selector of the class is true for it.
When a selector fails, kube logs it and leaves the resource out on that node; so does this.

kube walks every slice for every node. Here the allocator's inventory (`DraState.inventory`, rebuilt when a
slice changes and shared with DynamicResources, as are the selector answers) finds the slices a node reaches
through its index; its pools are at their newest generation, where kube counts every slice it lists, so the two
differ only while a driver republishes a pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from usher.core.dra.cel import CelError
from usher.core.dra.extended import served_resources
from usher.core.selectors import SelectorError

if TYPE_CHECKING:
    from usher.core.dra.state import DraState

__all__ = ["class_totals"]


def class_totals(dra: DraState, resource: str, node_name: str, labels: Mapping[str, str]) -> tuple[int, int]:
    """(devices, in use) of the class serving ``resource`` that the node reaches; (0, 0) when no class serves it,
    the class is gone, or a selector (of the class, or of a slice's node selector) fails."""
    if not served_resources((resource,), dra.class_of_resource):
        return 0, 0
    device_class = dra.classes.get(dra.class_of_resource[resource])
    if device_class is None:
        return 0, 0
    selectors = device_class.selectors
    in_use = dra.in_use()
    evaluate = dra.selectors
    total = used = 0
    try:
        for pool in dra.inventory().visible_pools(node_name, labels):
            driver = pool.pool.driver
            for candidate in pool.candidates:
                if all(evaluate(expression, candidate.device, driver) for expression in selectors):
                    total += 1
                    used += candidate.id in in_use
    except (CelError, SelectorError):
        return 0, 0
    return total, used
