"""The scheduler's view of nodes and of the pods on them, including pods it has assumed.

Pure.
"""

from usher.core.cache.budgets import DisruptionBudget
from usher.core.cache.caching import (
    Cache,
    NodeList,
    SetAside,
    claims_in_use,
    nodes_with_affinity_pods,
    nodes_with_required_anti_affinity_pods,
    pod_claim_keys,
)
from usher.core.cache.nodeinfo import NodeInfo

__all__ = [
    "Cache",
    "DisruptionBudget",
    "NodeInfo",
    "NodeList",
    "SetAside",
    "claims_in_use",
    "nodes_with_affinity_pods",
    "nodes_with_required_anti_affinity_pods",
    "pod_claim_keys",
]
