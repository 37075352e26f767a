"""The port through which the DynamicResources plugin writes ResourceClaims (implemented by the adapters).

Pure (a protocol). Writes are read-modify-write with the claim's
resourceVersion as precondition: a 409 means someone changed the claim in
between, and the caller re-reads and decides again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class WriteResult:
    """An API server's answer to a claim read or write: the HTTP status and the body it returned."""

    status: int
    body: Mapping[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def message(self) -> str:
        return str(self.body.get("message") or f"HTTP {self.status}")


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

    def remove_reservation(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        """Queue the removal of a pod from ``status.reservedFor`` (rollback); returns at once."""
        ...
