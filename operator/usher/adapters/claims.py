"""ClaimWriter over the dispatcher: ResourceClaim writes of the DynamicResources plugin's PreBind.

Writes go through the dispatcher (untracked: each is a read-modify-write
with its own resourceVersion precondition, so two pods reserving one shared
claim must not merge); reads after a conflict go straight to the API. A
PreBind waiting for binding conditions is woken by ``notify``, which the DRA
state calls whenever a watched claim changes.

A create is idempotent. The dispatcher retries a POST whose answer was lost
(a connection reset, a 504), and with ``generateName`` each retry would make
one more claim. So ``create`` picks the name itself, once, as the API server
would generate it (the base cut to 58 characters, five random characters of
its alphabet), and every retry sends that name: the API server answers a
retry of a create it already made with 409 AlreadyExists, and the claim under
the name is taken as created when it is what was asked for (the same
controller, annotations and spec; not allocated, reserved or being deleted).
A new name per call, not per pod: a claim an earlier attempt made may still
be on its way out (Unreserve deletes it by UID), and must never be taken up.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from usher.adapters.changes import Changes
from usher.adapters.dispatching import ApiCall, Dispatcher, Request
from usher.adapters.kubeapi import ApiResult, KubeApi
from usher.adapters.reporting import STRATEGIC_MERGE
from usher.core.dra.model import FINALIZER
from usher.core.types import WriteResult

GENERATED_BASE_LENGTH = 58
"""The API server's generated names: at most 63 characters, the last five random."""
_GENERATED_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of a generated name's random suffix (apimachinery's rand.String)."""


def claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"


def generated_name(generate_name: str, rng: random.Random) -> str:
    """A name as the API server generates one from ``generateName``."""
    return generate_name[:GENERATED_BASE_LENGTH] + "".join(rng.choices(_GENERATED_ALPHABET, k=5))


def _controller_uid(meta: Mapping[str, Any]) -> str:
    return next((str(ref.get("uid")) for ref in meta.get("ownerReferences") or () if ref.get("controller")), "")


def _contains(have: Any, want: Any) -> bool:
    """Whether ``have`` holds everything of ``want`` (objects may have more fields: the API server's defaults)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(key in have and _contains(have[key], v) for key, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(_contains, have, want))
    return bool(have == want)


def _made_by(existing: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the claim found under a create's name is the one that create asked for: what a retried create
    whose first answer was lost finds."""
    meta, wanted_meta = existing.get("metadata") or {}, wanted.get("metadata") or {}
    status = existing.get("status") or {}
    return (
        _controller_uid(meta) == _controller_uid(wanted_meta)
        and _contains(meta.get("annotations") or {}, wanted_meta.get("annotations") or {})
        and _contains(existing.get("spec"), wanted.get("spec"))
        and not meta.get("deletionTimestamp")
        and not status.get("allocation")
        and not status.get("reservedFor")
    )


class DispatcherClaimWriter(Changes):
    """The DRA ``ClaimWriter`` port: ResourceClaim status and binding writes through the dispatcher."""

    def __init__(self, dispatcher: Dispatcher, api: KubeApi, rng: random.Random | None = None) -> None:
        """``rng``: picks the names of created claims (seeded in tests)."""
        super().__init__()
        self._dispatcher = dispatcher
        self._api = api
        self._rng = rng or random.Random()

    async def get(self, namespace: str, name: str) -> WriteResult:
        result = await self._api.request("GET", claim_path(namespace, name))
        return WriteResult(result.status, result.body)

    async def update(self, claim: Mapping[str, Any]) -> WriteResult:
        return await self._write("resourceclaim_update", "", claim)

    async def update_status(self, claim: Mapping[str, Any]) -> WriteResult:
        return await self._write("resourceclaim_status_update", "/status", claim)

    async def create(self, claim: Mapping[str, Any]) -> WriteResult:
        """POST the claim; one with ``generateName`` is named here, so a retry whose first answer was lost finds the
        claim it made instead of making another (see the module docstring)."""
        body = copy.deepcopy(dict(claim))
        meta = body.setdefault("metadata", {})
        namespace = str(meta.get("namespace"))
        named = not meta.get("name") and bool(meta.get("generateName"))
        if named:
            meta["name"] = generated_name(str(meta["generateName"]), self._rng)
        request = Request("POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", body)
        result = await self._send("resourceclaim_create", request)
        if not (named and result.conflict):
            return result
        try:
            existing = await self.get(namespace, str(meta["name"]))
        except (aiohttp.ClientError, TimeoutError, OSError):
            return result  # the attempt fails; a claim left behind is found by the next one, which deletes it
        return WriteResult(200, existing.body) if existing.ok and _made_by(existing.body, body) else result

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
