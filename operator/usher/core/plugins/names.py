"""Every in-tree plugin name, in one place (kube-scheduler's names, so configurations carry over)."""

PRIORITY_SORT = "PrioritySort"
SCHEDULING_GATES = "SchedulingGates"
NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_RESOURCES_FIT = "NodeResourcesFit"
DEFAULT_BINDER = "DefaultBinder"
