"""The Binder port over the dispatcher: DefaultBinder's pods/binding call, awaited by the binding cycle."""

from __future__ import annotations

from usher.adapters.dispatching import ApiCall, Dispatcher, Request
from usher.adapters.kubeapi import ApiResult
from usher.adapters.reporting import binding_call_body, binding_path
from usher.core.types import NodeName, PodInfo, Status, error

BINDING_RELEVANCE = 2
"""More than a status patch (reporting.STATUS_PATCH_RELEVANCE): a waiting patch is replaced by it."""

ALREADY_BOUND = "pod is already bound"
POD_GONE = "pod no longer exists"


def binding_status(result: ApiResult) -> Status:
    """What a pods/binding answer means for the binding cycle."""
    if result.status == 0 and "superseded" in result.message:
        return error(f"binding superseded: {result.message}")
    if result.ok:
        return Status()
    if result.status == 409:
        # "pod X is already assigned to node Y" (or a UID precondition: a recreated pod).
        return error(ALREADY_BOUND) if "already" in result.message else error(POD_GONE)
    if result.status == 404:
        return error(POD_GONE)
    return error(f"binding rejected: {result.message}")


class DispatcherBinder:
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
