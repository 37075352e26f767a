"""ClaimWriter over the dispatcher: ResourceClaim writes of the DynamicResources plugin's PreBind.

Writes go through the dispatcher (untracked: each is a read-modify-write
with its own resourceVersion precondition, so two pods reserving one shared
claim must not merge); reads after a conflict go straight to the API. A
PreBind waiting for binding conditions is woken by ``notify``, which the DRA
state calls whenever a watched claim changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from usher.adapters.changes import Changes
from usher.adapters.dispatching import ApiCall, Dispatcher, Request
from usher.adapters.kubeapi import ApiResult, KubeApi
from usher.adapters.reporting import STRATEGIC_MERGE
from usher.core.dra.model import FINALIZER
from usher.core.types import WriteResult


def claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


class DispatcherClaimWriter(Changes):
    """The DRA ``ClaimWriter`` port: ResourceClaim status and binding writes through the dispatcher."""

    def __init__(self, dispatcher: Dispatcher, api: KubeApi) -> None:
        super().__init__()
        self._dispatcher = dispatcher
        self._api = api

    async def get(self, namespace: str, name: str) -> WriteResult:
        result = await self._api.request("GET", claim_path(namespace, name))
        return WriteResult(result.status, result.body)

    async def update(self, claim: Mapping[str, Any]) -> WriteResult:
        return await self._write("resourceclaim_update", "", claim)

    async def update_status(self, claim: Mapping[str, Any]) -> WriteResult:
        return await self._write("resourceclaim_status_update", "/status", claim)

    async def create(self, claim: Mapping[str, Any]) -> WriteResult:
        namespace = str((claim.get("metadata") or {}).get("namespace"))
        request = Request("POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", dict(claim))
        return await self._send("resourceclaim_create", request)

    def delete_claim(self, namespace: str, name: str, claim_uid: str) -> None:
        # The finalizer first (kube-scheduler's deleteClaim): nothing else would remove it from a claim whose pod
        # never ran. The UID in both is the precondition: a claim recreated under the name is left alone.
        unprotect = {"metadata": {"uid": claim_uid, "$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
        delete = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": claim_uid}}
        path = claim_path(namespace, name)

        def then_delete(result: ApiResult) -> None:
            if result.ok:
                self._dispatcher.add(ApiCall.fixed("resourceclaim_delete", None, Request("DELETE", path, delete)))

        request = Request("PATCH", path, unprotect, STRATEGIC_MERGE)
        self._dispatcher.add(ApiCall.fixed("resourceclaim_unprotect", None, request, on_done=then_delete))

    async def set_extended_claim_status(
        self, namespace: str, pod: str, pod_uid: str, status: Mapping[str, Any]
    ) -> WriteResult:
        patch = {"metadata": {"uid": pod_uid}, "status": {"extendedResourceClaimStatus": dict(status)}}
        request = Request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}/status", patch, STRATEGIC_MERGE)
        return await self._send("pod_extended_resource_claim_status", request)

    def remove_reservation(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        patch = {
            "metadata": {"uid": claim_uid},  # precondition: the same claim, not one recreated under its name
            "status": {"reservedFor": [{"$patch": "delete", "uid": pod_uid}]},
        }
        request = Request("PATCH", claim_path(namespace, name) + "/status", patch, STRATEGIC_MERGE)
        self._dispatcher.add(ApiCall.fixed("resourceclaim_unreserve", None, request))

    def deallocate(
        self, namespace: str, name: str, claim_uid: str, resource_version: str, failed: Callable[[], None]
    ) -> None:
        patch = {
            # Preconditions: the same claim, unchanged since usher decided (a 409 drops the write).
            "metadata": {"uid": claim_uid, "resourceVersion": resource_version},
            "status": {"allocation": None, "reservedFor": None, "devices": None},
        }
        request = Request("PATCH", claim_path(namespace, name) + "/status", patch, STRATEGIC_MERGE)

        def done(result: ApiResult) -> None:
            if not result.ok:
                failed()

        self._dispatcher.add(ApiCall.fixed("resourceclaim_deallocate", None, request, on_done=done))

    async def _write(self, call_type: str, suffix: str, claim: Mapping[str, Any]) -> WriteResult:
        meta = claim.get("metadata") or {}
        path = claim_path(str(meta.get("namespace")), str(meta.get("name"))) + suffix
        return await self._send(call_type, Request("PUT", path, dict(claim)))

    async def _send(self, call_type: str, request: Request) -> WriteResult:
        """One write through the dispatcher (untracked, see the module docstring), awaited."""
        result = await self._dispatcher.call(ApiCall.fixed(call_type, None, request))
        return WriteResult(result.status, result.body)
