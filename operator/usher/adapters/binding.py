"""The Binder port over the dispatcher: DefaultBinder's pods/binding call, awaited by the binding cycle."""

from __future__ import annotations

from usher.adapters.dispatching import SKIPPED, ApiCall, Dispatcher, Request
from usher.adapters.kubeapi import ApiResult
from usher.adapters.reporting import binding_call_body, binding_path
from usher.core.types import Cause, NodeName, PodInfo, Status, error

BINDING_RELEVANCE = 2
"""More than a status patch (reporting.STATUS_PATCH_RELEVANCE): a waiting patch is replaced by it."""


def binding_status(result: ApiResult) -> Status:
    """What a pods/binding answer means for the binding cycle, with a typed cause where it must act on it."""
    if result is SKIPPED:
        return error(f"binding superseded: {result.message}", Cause.SUPERSEDED)
    if result.ok:
        return Status()
    if result.status == 409:
        # "pod X is already assigned to node Y", or a UID precondition: a recreated pod.
        return error(f"pod is bound already or was replaced: {result.message}", Cause.POD_CONFLICT)
    if result.status == 404:
        return error(f"pod no longer exists: {result.message}", Cause.POD_NOT_FOUND)
    return error(f"binding rejected: {result.message}")


class DispatcherBinder:
    """Binds through the dispatcher, which retries 429/5xx and answers with the final result."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher

    async def bind(self, pod: PodInfo, node: NodeName) -> Status:
        request = Request(
            "POST", binding_path(pod.namespace, pod.name), binding_call_body(pod.namespace, pod.name, pod.uid, node)
        )
        result = await self._dispatcher.call(
            ApiCall.fixed("pod_binding", pod.key, request, relevance=BINDING_RELEVANCE, leader_only=True)
        )
        return binding_status(result)
