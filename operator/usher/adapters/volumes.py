"""VolumeWriter over the dispatcher: VolumeBinding's PreBind writes of PVs and PVCs, and its wait for
kube-controller-manager's PV controller and the provisioner.

Writes are PUTs of the whole object (its resourceVersion is the precondition),
untracked as the claim writes are: each is a read-modify-write of its own.
``changed`` wakes every waiter on the next storage change the watch brings
(``notify``, called by the volume state), so a PreBind waiting for its claims
to bind costs nothing while nothing happens, and nothing polls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from usher.adapters.changes import Changes
from usher.adapters.dispatching import ApiCall, Dispatcher, Request
from usher.core.types import WriteResult


def volume_path(name: str) -> str:
    return f"/api/v1/persistentvolumes/{name}"


def claim_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


class DispatcherVolumeWriter(Changes):
    """The ``VolumeWriter`` port: PV and PVC updates through the dispatcher, waits on watched changes."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        super().__init__()
        self._dispatcher = dispatcher

    async def update_volume(self, volume: Mapping[str, Any]) -> WriteResult:
        name = str((volume.get("metadata") or {}).get("name"))
        return await self._put("persistentvolume_update", volume_path(name), volume)

    async def update_claim(self, claim: Mapping[str, Any]) -> WriteResult:
        meta = claim.get("metadata") or {}
        path = claim_path(str(meta.get("namespace")), str(meta.get("name")))
        return await self._put("persistentvolumeclaim_update", path, claim)

    async def _put(self, call_type: str, path: str, body: Mapping[str, Any]) -> WriteResult:
        result = await self._dispatcher.call(ApiCall.fixed(call_type, None, Request("PUT", path, dict(body))))
        return WriteResult(result.status, result.body)
