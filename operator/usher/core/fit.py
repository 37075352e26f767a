"""Does a pod fit on a node? The resource check of kube-scheduler's NodeResourcesFit.

Pure. Every resource the pod requests must fit in the node's allocatable minus
what the pods already counted on it (bound, assumed, whoever placed them)
request; one more pod must fit under the node's pod capacity.
"""

from __future__ import annotations

from usher.core.cache import NodeInfo
from usher.core.resources import CPU, MEMORY, PODS
from usher.core.types import PodInfo

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_TOO_MANY_PODS = "Too many pods"


def insufficient(name: str) -> str:
    return f"Insufficient {name}"


def fit_reasons(pod: PodInfo, node: NodeInfo) -> list[str]:
    """Why ``pod`` cannot go to ``node``: an empty list means it fits."""
    if node.unschedulable:
        return [REASON_UNSCHEDULABLE]
    reasons: list[str] = []
    if node.requested.get(PODS, 0) + 1 > node.allocatable.get(PODS, 0):
        reasons.append(REASON_TOO_MANY_PODS)
    for name, amount in pod.requests.items():
        if name == PODS:
            continue
        free = node.allocatable.get(name, 0) - node.requested.get(name, 0)
        if amount > free:
            reasons.append(insufficient(name))
    return reasons


def least_allocated_score(pod: PodInfo, node: NodeInfo) -> int:
    """0-100, higher when more cpu and memory stay free after placing the pod."""
    total = 0
    for name in (CPU, MEMORY):
        capacity = node.allocatable.get(name, 0)
        if capacity <= 0:
            continue
        used = node.requested.get(name, 0) + pod.requests.get(name, 0)
        total += max(0, (capacity - used) * 100 // capacity)
    return total // 2
