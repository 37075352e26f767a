"""The PodGroupInitiallyScheduled condition of the pod groups a cycle tried (kube-scheduler's updatePodGroupCondition).

True (reason ``Scheduled``) once a group's members are committed; False with
reason ``Unschedulable`` when the group cannot be placed, ``SchedulerError``
when it cannot be tried (a malformed PodGroup, members that disagree on
scheduler name, priority or preemption policy, a plugin error). Written
through the dispatcher against the newest watched PodGroup: only a change is
sent, and True is never turned back to False.
"""

from __future__ import annotations

from usher.adapters.podgroup_status import pod_group_condition_call
from usher.core.podgroups import (
    INITIALLY_SCHEDULED,
    REASON_SCHEDULED,
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    PodGroup,
)
from usher.scheduling.ports import ApiWriter


class PodGroupConditions:
    """Writes one PodGroup condition per call; never waits."""

    def __init__(self, writer: ApiWriter) -> None:
        self._writer = writer

    def scheduled(self, group: PodGroup, message: str = "") -> None:
        self._set(group, "True", REASON_SCHEDULED, message)

    def unschedulable(self, group: PodGroup, message: str) -> None:
        self._set(group, "False", REASON_UNSCHEDULABLE, message)

    def error(self, group: PodGroup, message: str) -> None:
        self._set(group, "False", REASON_SCHEDULER_ERROR, message)

    def _set(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        call = pod_group_condition_call(
            group.raw, kind=INITIALLY_SCHEDULED, status=status, reason=reason, message=message
        )
        self._writer.add(call, current=group.raw)
