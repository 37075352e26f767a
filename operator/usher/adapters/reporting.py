"""Bodies and paths of the API calls usher makes about a pod: bindings and Events."""

from __future__ import annotations

import datetime
import secrets
import socket
from collections.abc import Mapping
from typing import Any


def binding_call_body(namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def binding_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}/binding"


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
