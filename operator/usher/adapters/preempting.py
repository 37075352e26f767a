"""The API calls that evict a preemption victim, as kube-scheduler's preemption executor makes them.

First the victim's ``DisruptionTarget`` condition (reason
``PreemptionByScheduler``), so its controllers and PDB accounting know why it
goes; then a graceful delete with a UID precondition, so a pod recreated under
the same name is never the one deleted. Both are leader-only: a replica that
lost its lease evicts nothing.

Both are untracked, as kube-scheduler sends them past its dispatcher. A
victim may have been assumed a moment ago, with its binding still waiting in
the dispatcher; as tracked calls about that pod they would be superseded by
the binding (it matters more than a status patch or a delete), and the
preemption would fail for nothing. Untracked, they run beside it: if the
delete lands first, the binding meets a pod that is gone.
"""

from __future__ import annotations

from collections.abc import Callable

from usher.adapters.dispatching import ApiCall, Request
from usher.adapters.kubeapi import ApiResult
from usher.adapters.reporting import STRATEGIC_MERGE, condition_patch, pod_path, status_path
from usher.core.types import PodInfo

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def disruption_condition_call(victim: PodInfo, scheduler_name: str, on_done: Callable[[ApiResult], None]) -> ApiCall:
    """``DisruptionTarget=True, reason=PreemptionByScheduler`` on the victim, built against the victim as
    preemption saw it (nothing is sent when the condition is there already)."""
    message = f"{scheduler_name}: preempting to accommodate a higher priority pod"
    patch = condition_patch(
        victim.raw, kind=DISRUPTION_TARGET, status="True", reason=PREEMPTION_BY_SCHEDULER, message=message
    )
    path = status_path(victim.namespace, victim.name)
    request = None if patch is None else Request("PATCH", path, patch, STRATEGIC_MERGE)
    return ApiCall("pod_status_patch", victim.key, lambda _: request, on_done=on_done, leader_only=True, tracked=False)


def victim_delete_call(victim: PodInfo, on_done: Callable[[ApiResult], None] | None = None) -> ApiCall:
    """A graceful delete of exactly this pod (its UID), as kube-scheduler's util.DeletePod."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}}
    request = Request("DELETE", pod_path(victim.namespace, victim.name), body)
    return ApiCall.fixed("pod_delete", victim.key, request, on_done=on_done, leader_only=True, tracked=False)
