"""The port through which the DynamicResources plugin writes ResourceClaims (implemented by the adapters).

Pure (a protocol). Writes are read-modify-write with the claim's
resourceVersion as precondition: a 409 means someone changed the claim in
between, and the caller re-reads and decides again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from usher.core.types import WriteResult


class ClaimWriter(Protocol):
    """Reads and writes ResourceClaims for PreBind and Unreserve; the adapters implement it over the API."""

    async def get(self, namespace: str, name: str) -> WriteResult:
        """Read the claim from the API server (after a conflict)."""
        ...

    async def update(self, claim: Mapping[str, Any]) -> WriteResult:
        """PUT the claim (metadata/spec; e.g. a finalizer), preconditioned on its resourceVersion."""
        ...

    async def update_status(self, claim: Mapping[str, Any]) -> WriteResult:
        """PUT the claim's status (allocation, reservedFor), preconditioned on its resourceVersion."""
        ...

    async def create(self, claim: Mapping[str, Any]) -> WriteResult:
        """POST a claim (a pod's extended-resource claim, with ``generateName``); a retry whose first answer was lost
        must find the claim it made, never make a second (the adapter names it once per call)."""
        ...

    def delete_claim(self, namespace: str, name: str, claim_uid: str) -> None:
        """Queue removing the delete-protection finalizer from the claim and deleting it, if it is still the
        claim of that UID (rollback of a claim the scheduler made); returns at once."""
        ...

    async def set_extended_claim_status(
        self, namespace: str, pod: str, pod_uid: str, status: Mapping[str, Any]
    ) -> WriteResult:
        """Write the pod's ``status.extendedResourceClaimStatus``, if it is still the pod of that UID."""
        ...

    def remove_reservation(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        """Queue the removal of a pod from ``status.reservedFor`` (rollback); returns at once."""
        ...

    async def changed(self, within: float) -> bool:
        """Wait until a ResourceClaim changes (True) or ``within`` seconds pass (False): PreBind waits so for the
        binding conditions of its devices."""
        ...

    def deallocate(
        self, namespace: str, name: str, claim_uid: str, resource_version: str, failed: Callable[[], None]
    ) -> None:
        """Queue clearing the claim's allocation, reservations and device status, if it is still at
        ``resource_version`` (else the write is refused); returns at once. ``failed`` runs if the write
        does not succeed."""
        ...
