"""The API calls that evict a preemption victim, as kube-scheduler's preemption executor makes them.

First the victim's ``DisruptionTarget`` condition (reason
``PreemptionByScheduler``), so its controllers and PDB accounting know why it
goes; then a graceful delete with a UID precondition, so a pod recreated under
the same name is never the one deleted. Both are leader-only: a replica that
lost its lease evicts nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from usher.adapters.dispatching import ApiCall, Request
from usher.adapters.kubeapi import ApiResult
from usher.adapters.reporting import condition_patch, pod_path, pod_status_call
from usher.core.types import PodInfo

DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"


def disruption_condition_call(victim: PodInfo, scheduler_name: str, on_done: Callable[[ApiResult], None]) -> ApiCall:
    """``DisruptionTarget=True, reason=PreemptionByScheduler`` on the victim (dropped when it is there already)."""
    message = f"{scheduler_name}: preempting to accommodate a higher priority pod"

    def patch_for(current: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return condition_patch(
            current, kind=DISRUPTION_TARGET, status="True", reason=PREEMPTION_BY_SCHEDULER, message=message
        )

    return pod_status_call(victim.raw, patch_for, on_done=on_done, leader_only=True)


def victim_delete_call(victim: PodInfo, on_done: Callable[[ApiResult], None] | None = None) -> ApiCall:
    """A graceful delete of exactly this pod (its UID), as kube-scheduler's util.DeletePod."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}}
    request = Request("DELETE", pod_path(victim.namespace, victim.name), body)
    return ApiCall.fixed("pod_delete", victim.key, request, on_done=on_done, leader_only=True)
