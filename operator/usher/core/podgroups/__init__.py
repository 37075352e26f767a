"""Pod groups (scheduling.k8s.io/v1beta1 PodGroup, Workload): the objects and their members' states. Pure."""

from usher.core.podgroups.model import (
    INITIALLY_SCHEDULED,
    PREEMPT_LOWER_PRIORITY,
    REASON_SCHEDULED,
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    GroupClaim,
    PodGroup,
    Workload,
    WorkloadRef,
)
from usher.core.podgroups.states import GroupState, Member, PodGroupStates

__all__ = [
    "INITIALLY_SCHEDULED",
    "PREEMPT_LOWER_PRIORITY",
    "REASON_SCHEDULED",
    "REASON_SCHEDULER_ERROR",
    "REASON_UNSCHEDULABLE",
    "GroupClaim",
    "GroupState",
    "Member",
    "PodGroup",
    "PodGroupStates",
    "Workload",
    "WorkloadRef",
]
