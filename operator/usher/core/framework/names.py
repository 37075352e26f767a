"""Every plugin name, in one place: kube-scheduler's, so configurations carry over.

``IN_TREE`` is kube-scheduler v1.37's in-tree registry: a configuration may
disable any of them, or give args to one usher does not implement (ignored
and logged); enabling one usher does not implement is an error. What usher
implements is what ``registry.in_tree_registry`` registers.
"""

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
DEFAULT_PREEMPTION = "DefaultPreemption"
VOLUME_BINDING = "VolumeBinding"
VOLUME_RESTRICTIONS = "VolumeRestrictions"
VOLUME_ZONE = "VolumeZone"
NODE_VOLUME_LIMITS = "NodeVolumeLimits"
GANG_SCHEDULING = "GangScheduling"
IMAGE_LOCALITY = "ImageLocality"

# kube-scheduler's in-tree plugins usher does not implement.
NODE_DECLARED_FEATURES = "NodeDeclaredFeatures"
DEFERRED_POD_SCHEDULING = "DeferredPodScheduling"
TOPOLOGY_PLACEMENT_GENERATOR = "TopologyPlacementGenerator"
POD_GROUP_PODS_COUNT = "PodGroupPodsCount"

IN_TREE: frozenset[str] = frozenset(
    {
        PRIORITY_SORT,
        DEFAULT_BINDER,
        DEFAULT_PREEMPTION,
        DYNAMIC_RESOURCES,
        GANG_SCHEDULING,
        IMAGE_LOCALITY,
        INTER_POD_AFFINITY,
        NODE_AFFINITY,
        NODE_DECLARED_FEATURES,
        NODE_NAME,
        NODE_PORTS,
        NODE_RESOURCES_BALANCED_ALLOCATION,
        NODE_RESOURCES_FIT,
        NODE_UNSCHEDULABLE,
        NODE_VOLUME_LIMITS,
        POD_TOPOLOGY_SPREAD,
        DEFERRED_POD_SCHEDULING,
        SCHEDULING_GATES,
        TAINT_TOLERATION,
        VOLUME_BINDING,
        VOLUME_RESTRICTIONS,
        VOLUME_ZONE,
        TOPOLOGY_PLACEMENT_GENERATOR,
        POD_GROUP_PODS_COUNT,
    }
)
"""kube-scheduler v1.37's in-tree plugin names (its ``names.go`` and ``NewInTreeRegistry``)."""

NO_NODES_AVAILABLE = "NoNodesAvailable"
"""Not a plugin: the rejector recorded when the cluster has no node at all, so the pod waits for a
NodeAdd instead of retrying every 10 s as kube-scheduler does (its ErrNoNodesAvailable has no rejector)."""
