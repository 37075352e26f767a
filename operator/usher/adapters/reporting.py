"""Bodies and paths of the API calls usher makes about a pod: bindings and Events."""

from __future__ import annotations

import datetime
import secrets
import socket
from collections.abc import Callable, Mapping
from typing import Any

from usher.adapters.dispatching import ApiCall, BuildFn, Request
from usher.adapters.kubeapi import ApiResult


def binding_call_body(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def binding_path(namespace: str, name: str) -> str:
    return pod_path(namespace, name) + "/binding"


def status_path(namespace: str, name: str) -> str:
    return pod_path(namespace, name) + "/status"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_condition(pod: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None


def condition_patch(
    pod: Mapping[str, Any] | None, *, kind: str, status: str, reason: str, message: str
) -> dict[str, Any] | None:
    """A strategic-merge patch setting one condition (merge key ``type``), or None if nothing changes.

    Only that condition is sent, so other conditions are never disturbed; the
    transition time moves only when the status flips.
    """
    current = pod_condition(pod, kind)
    if current is not None and (current.get("status"), current.get("reason"), current.get("message")) == (
        status,
        reason,
        message,
    ):
        return None
    transition = current.get("lastTransitionTime") if current and current.get("status") == status else None
    condition = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": transition or _now(),
    }
    return {"status": {"conditions": [condition]}}


def event_path(namespace: str) -> str:
    return f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"


_INSTANCE = f"{socket.gethostname()}"


def pod_event_body(
    pod: Mapping[str, Any], *, controller: str, event_type: str, reason: str, action: str, note: str
) -> dict[str, Any]:
    """An events.k8s.io/v1 Event about a pod, as kube-scheduler writes them."""
    meta = pod.get("metadata") or {}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta.get('name')}.{secrets.token_hex(8)}",
            "namespace": meta.get("namespace"),
        },
        "eventTime": now,
        "reportingController": controller,
        "reportingInstance": f"{controller}-{_INSTANCE}",
        "action": action,
        "reason": reason,
        "type": event_type,
        "note": note[:1024],
        "regarding": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
    }


def condition_removal(pod: Mapping[str, Any] | None, *, kind: str, reason: str) -> dict[str, Any] | None:
    """A strategic-merge patch deleting the ``kind`` condition if (and only if) it has ``reason``."""
    current = pod_condition(pod, kind)
    if current is None or current.get("reason") != reason:
        return None
    return {"status": {"conditions": [{"$patch": "delete", "type": kind}]}}


STRATEGIC_MERGE = "application/strategic-merge-patch+json"
STATUS_PATCH_RELEVANCE = 1
"""A status patch matters less than a binding (2): a binding queued for the pod wins."""


def pod_status_call(
    pod: Mapping[str, Any],
    patch_for: Callable[[Mapping[str, Any] | None], dict[str, Any] | None],
    *,
    delay: float = 0.0,
    on_done: Callable[[ApiResult], None] | None = None,
) -> ApiCall:
    """A tracked strategic-merge patch of a pod's status, built against the newest version of the pod
    when it is due (``patch_for`` returns None when nothing would change: the call is dropped)."""
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    path = status_path(namespace, name)

    def build(current: Mapping[str, Any] | None) -> Request | None:
        patch = patch_for(current)
        return None if patch is None else Request("PATCH", path, patch, STRATEGIC_MERGE)

    def merge(older: BuildFn) -> BuildFn:
        def both(current: Mapping[str, Any] | None) -> Request | None:
            before, after = older(current), build(current)
            if before is None or after is None:
                return after or before
            if not isinstance(before.body, Mapping) or not isinstance(after.body, Mapping):
                return after
            body = merge_status_patches(before.body, after.body)
            return Request("PATCH", path, body, STRATEGIC_MERGE)

        return both

    return ApiCall(
        "pod_status_patch",
        f"{namespace}/{name}",
        build,
        relevance=STATUS_PATCH_RELEVANCE,
        delay=delay,
        on_done=on_done,
        merge=merge,
    )


def merge_status_patches(older: Mapping[str, Any], newer: Mapping[str, Any]) -> dict[str, Any]:
    """Two strategic-merge patches of a pod's status as one: the newer wins where both set a field;
    conditions are merged by type (kube-scheduler's PodStatusPatchCall.Merge keeps the older call's
    nomination and its conditions of other types)."""
    merged: dict[str, Any] = dict(older)
    for key, value in newer.items():
        before = merged.get(key)
        if key == "conditions" and isinstance(before, list) and isinstance(value, list):
            types = {c.get("type") for c in value}
            merged[key] = [*value, *(c for c in before if c.get("type") not in types)]
        elif isinstance(before, Mapping) and isinstance(value, Mapping):
            merged[key] = merge_status_patches(before, value)
        else:
            merged[key] = value
    return merged
