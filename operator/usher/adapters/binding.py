"""The Binder port over the dispatcher: DefaultBinder's pods/binding call, awaited by the binding cycle.

A binding whose answer was lost (the connection dropped, the API server
restarted after writing it) is retried by the dispatcher, and the retry is
answered 409 "already assigned"; a final 5xx may likewise hide a binding that
was written. Taken at its word, such an answer would roll the pod back
(Unreserve drops its ResourceClaim reservations, its volumes' bindings) while
the pod stays bound where usher put it. So before reporting a failure other
than "gone", the binder reads the pod: bound to this node under this UID means
the binding happened, and it is reported as done. kube-scheduler's client-go
never retries the POST, so it meets the 409 less often, but it takes a lost
answer for a failure the same way; usher does not.
"""

from __future__ import annotations

import logging

import aiohttp

from usher.adapters.dispatching import NOT_LEADING, SKIPPED, ApiCall, Dispatcher, Request
from usher.adapters.kubeapi import ApiResult, KubeApi
from usher.adapters.reporting import binding_call_body, binding_path, pod_path
from usher.core.types import Cause, NodeName, PodInfo, Status, error

logger = logging.getLogger(__name__)

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


def _may_have_bound(result: ApiResult) -> bool:
    """An answer that does not rule out a binding written by this call (or an earlier attempt of it)."""
    if result is SKIPPED or result is NOT_LEADING or result.ok or result.status == 404:
        return False
    return result.status in {409, 0} or result.status >= 500


class DispatcherBinder:
    """Binds through the dispatcher, which retries 429/5xx and answers with the final result."""

    def __init__(self, dispatcher: Dispatcher, api: KubeApi) -> None:
        self._dispatcher = dispatcher
        self._api = api

    async def bind(self, pod: PodInfo, node: NodeName) -> Status:
        request = Request(
            "POST", binding_path(pod.namespace, pod.name), binding_call_body(pod.namespace, pod.name, pod.uid, node)
        )
        result = await self._dispatcher.call(
            ApiCall.fixed("pod_binding", pod.key, request, relevance=BINDING_RELEVANCE, leader_only=True)
        )
        if _may_have_bound(result) and await self._bound_to(pod, node):
            logger.info("pod %s: binding answered %s but the pod is bound to %s", pod.key, result.status, node)
            return Status()
        return binding_status(result)

    async def _bound_to(self, pod: PodInfo, node: NodeName) -> bool:
        """Whether the API server has this pod (same UID) bound to ``node``; False when it cannot tell."""
        try:
            read = await self._api.request("GET", pod_path(pod.namespace, pod.name))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:  # "cannot tell": the failure stands
            logger.info("pod %s: reading it after a failed binding: %s", pod.key, exc)
            return False
        if not read.ok:
            return False
        meta, spec = read.body.get("metadata") or {}, read.body.get("spec") or {}
        return bool(meta.get("uid") == pod.uid and spec.get("nodeName") == node)
