"""The one write usher makes to a PodGroup: its ``PodGroupInitiallyScheduled`` condition (podgroups/status patch).

As kube-scheduler's updatePodGroupCondition: the condition is a
``metav1.Condition`` (type, status, reason, message, observedGeneration,
lastTransitionTime), sent as a strategic-merge patch of that one condition
(merge key ``type``), built against the newest PodGroup the watch delivered
when it is due: a patch that would change nothing is dropped, and a
condition already True is never turned back to False (it marks the first
success for good).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from usher.adapters.dispatching import ApiCall, Request
from usher.adapters.reporting import STATUS_PATCH_RELEVANCE, STRATEGIC_MERGE

API = "/apis/scheduling.k8s.io/v1beta1"


def pod_group_object_key(namespace: str, name: str) -> str:
    """The dispatcher's key of a PodGroup (``podgroups/<ns>/<name>``: never the key of a pod)."""
    return f"podgroups/{namespace}/{name}"


def pod_group_status_path(namespace: str, name: str) -> str:
    return f"{API}/namespaces/{namespace}/podgroups/{name}/status"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_group_condition_patch(
    pod_group: Mapping[str, Any] | None, *, kind: str, status: str, reason: str, message: str
) -> dict[str, Any] | None:
    """A strategic-merge patch setting one condition of the PodGroup, or None when nothing would change
    (the same condition for the same generation) or when it would turn a True condition False."""
    meta = (pod_group or {}).get("metadata") or {}
    generation = meta.get("generation")
    current: Mapping[str, Any] | None = None
    for existing in ((pod_group or {}).get("status") or {}).get("conditions") or ():
        if isinstance(existing, Mapping) and existing.get("type") == kind:
            current = existing
    if current is not None:
        if current.get("status") == "True" and status != "True":
            return None
        same = (current.get("status"), current.get("reason"), current.get("message"))
        if same == (status, reason, message) and current.get("observedGeneration") == generation:
            return None
    transition = current.get("lastTransitionTime") if current and current.get("status") == status else None
    condition: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition or _now(),
    }
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    return {"status": {"conditions": [condition]}}


def pod_group_condition_call(
    pod_group: Mapping[str, Any], *, kind: str, status: str, reason: str, message: str
) -> ApiCall:
    """A tracked patch of one PodGroup condition, built against the newest watched PodGroup when due."""
    meta = pod_group.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    path = pod_group_status_path(namespace, name)

    def build(current: Mapping[str, Any] | None) -> Request | None:
        patch = pod_group_condition_patch(
            current if current is not None else pod_group, kind=kind, status=status, reason=reason, message=message
        )
        return None if patch is None else Request("PATCH", path, patch, STRATEGIC_MERGE)

    return ApiCall(
        "pod_group_status_patch", pod_group_object_key(namespace, name), build, relevance=STATUS_PATCH_RELEVANCE
    )
