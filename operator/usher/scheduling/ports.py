"""What the run-time pieces need from the outside world, as protocols.

The composition root (``usher.app``) hands each piece its adapters through
these: the dispatcher as an ``ApiWriter``, the Prometheus metrics as a
``SchedulingRecorder``. Unit tests hand them fakes, so the loop and both
cycles run without an API server or a metrics registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from usher.adapters.dispatching import ApiCall


class ApiWriter(Protocol):
    """The asynchronous write path (the dispatcher): queue a call and return at once."""

    def add(self, call: ApiCall, current: Mapping[str, Any] | None = None) -> None:
        """Queue ``call``; ``current`` is the newest known version of its object."""
        ...

    def sync_object(self, key: str, obj: Mapping[str, Any]) -> None:
        """A newer version of an object seen by the watch."""
        ...

    def forget_object(self, key: str) -> None:
        """The object is gone: drop what was queued about it."""
        ...


class SchedulingRecorder(Protocol):
    """kube-scheduler's scheduling metrics, recorded by the cycles and the event handlers."""

    def algorithm_finished(self, seconds: float) -> None:
        """scheduler_scheduling_algorithm_duration_seconds."""
        ...

    def attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        """scheduler_schedule_attempts_total and scheduler_scheduling_attempt_duration_seconds;
        ``result`` is scheduled, unschedulable or error."""
        ...

    def pod_scheduled(self, *, attempts: int, sli_seconds: float | None, flushed: bool) -> None:
        """scheduler_pod_scheduling_attempts, scheduler_pod_scheduling_sli_duration_seconds (when the
        first attempt's time is known) and scheduler_pod_scheduled_after_flush_total."""
        ...

    def event_handled(self, event: str, seconds: float) -> None:
        """scheduler_event_handling_duration_seconds."""
        ...

    def preemption_attempted(self) -> None:
        """scheduler_preemption_attempts_total: PostFilter ran for a pod no node fits."""
        ...

    def preemption_victims_chosen(self, count: int) -> None:
        """scheduler_preemption_victims: the victims chosen for one preemptor."""
        ...

    def preemption_evaluated(self, preemptor: str, result: str, seconds: float) -> None:
        """scheduler_preemption_evaluation_duration_seconds: victims looked for (``preemptor`` pod or podgroup,
        ``result`` the PostFilter status code, as kube-scheduler names it)."""
        ...

    def preemption_finished(self, preemptor: str, result: str, seconds: float) -> None:
        """scheduler_preemption_execution_duration_seconds (``preemptor`` pod or podgroup) and
        scheduler_preemption_goroutines_execution_total and _duration_seconds: one preemptor's evictions all
        returned (``result`` success or error)."""
        ...

    def permit_waited(self, result: str, seconds: float) -> None:
        """scheduler_permit_wait_duration_seconds: a pod held at Permit until allowed, rejected or timed out
        (``result`` the status code, as kube-scheduler names it)."""
        ...

    def preemption_disruptions(self, preemptor: str, budget_violations: int, group_disruptions: int) -> None:
        """scheduler_preemption_pdb_violations_total and scheduler_preemption_workload_disruptions (each only
        when above 0) for the victims one preemptor evicts; ``preemptor`` is pod or podgroup."""
        ...

    def pod_group_attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        """scheduler_podgroup_schedule_attempts_total and scheduler_podgroup_scheduling_attempt_duration_seconds;
        ``result`` is scheduled, unschedulable or error."""
        ...

    def pod_group_algorithm_finished(self, seconds: float) -> None:
        """scheduler_podgroup_scheduling_algorithm_duration_seconds."""
        ...

    def placements_evaluated(self, profile: str, generated: int, feasible: int) -> None:
        """scheduler_generated_placements_total and scheduler_placement_evaluations_total (TopologyAware)."""
        ...

    def placement_timed(self, result: str, profile: str, seconds: float) -> None:
        """scheduler_placement_evaluation_duration_seconds: one candidate placement simulated (``result``
        feasible or infeasible)."""
        ...

    def workload_preemption_attempted(self, result: str, victims: int) -> None:
        """scheduler_workload_preemption_attempts_total (``result``: the PostFilter status code, as
        kube-scheduler names it) and, when it evicts, scheduler_workload_preemption_victims."""
        ...


class SilentRecorder:
    """A ``SchedulingRecorder`` that records nothing."""

    def algorithm_finished(self, seconds: float) -> None:
        pass

    def attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        pass

    def pod_scheduled(self, *, attempts: int, sli_seconds: float | None, flushed: bool) -> None:
        pass

    def event_handled(self, event: str, seconds: float) -> None:
        pass

    def preemption_attempted(self) -> None:
        pass

    def preemption_victims_chosen(self, count: int) -> None:
        pass

    def preemption_evaluated(self, preemptor: str, result: str, seconds: float) -> None:
        pass

    def preemption_finished(self, preemptor: str, result: str, seconds: float) -> None:
        pass

    def preemption_disruptions(self, preemptor: str, budget_violations: int, group_disruptions: int) -> None:
        pass

    def permit_waited(self, result: str, seconds: float) -> None:
        pass

    def pod_group_attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        pass

    def pod_group_algorithm_finished(self, seconds: float) -> None:
        pass

    def placements_evaluated(self, profile: str, generated: int, feasible: int) -> None:
        pass

    def placement_timed(self, result: str, profile: str, seconds: float) -> None:
        pass

    def workload_preemption_attempted(self, result: str, victims: int) -> None:
        pass
