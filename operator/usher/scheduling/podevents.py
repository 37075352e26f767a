"""Events about pods (events.k8s.io/v1), written through the dispatcher as kube-scheduler writes them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from usher.adapters.dispatching import ApiCall, Request
from usher.adapters.reporting import event_path, pod_event_body
from usher.scheduling.ports import ApiWriter


class PodEvents:
    """Writes one Event per call (Scheduled, FailedScheduling, NotReadyForScheduling); never waits."""

    def __init__(self, writer: ApiWriter) -> None:
        self._writer = writer

    def emit(
        self, pod: Mapping[str, Any], event_type: str, reason: str, action: str, note: str, controller: str
    ) -> None:
        """``controller`` is the reporting controller: the pod's profile (scheduler name)."""
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        body = pod_event_body(
            pod, controller=controller, event_type=event_type, reason=reason, action=action, note=note
        )
        # Best effort: an Event waits for the bindings and status patches ready with it.
        request = Request("POST", event_path(namespace), body)
        self._writer.add(ApiCall.fixed("event", None, request, best_effort=True))
