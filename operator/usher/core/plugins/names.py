"""Every in-tree plugin name, in one place (kube-scheduler's names, so configurations carry over)."""

PRIORITY_SORT = "PrioritySort"
SCHEDULING_GATES = "SchedulingGates"
NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_NAME = "NodeName"
TAINT_TOLERATION = "TaintToleration"
NODE_AFFINITY = "NodeAffinity"
NODE_PORTS = "NodePorts"
NODE_RESOURCES_FIT = "NodeResourcesFit"
POD_TOPOLOGY_SPREAD = "PodTopologySpread"
INTER_POD_AFFINITY = "InterPodAffinity"
DYNAMIC_RESOURCES = "DynamicResources"
NODE_RESOURCES_BALANCED_ALLOCATION = "NodeResourcesBalancedAllocation"
DEFAULT_BINDER = "DefaultBinder"

NO_NODES_AVAILABLE = "NoNodesAvailable"
"""Not a plugin: the rejector recorded when the cluster has no node at all, so the pod waits for a
NodeAdd instead of retrying every 10 s as kube-scheduler does (its ErrNoNodesAvailable has no rejector)."""
