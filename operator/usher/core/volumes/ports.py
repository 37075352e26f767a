"""The port through which VolumeBinding writes PVs and PVCs and waits for the PV controller
(implemented by the adapters). Pure (a protocol).

Writes are PUTs of the whole object with its resourceVersion as precondition,
as kube-scheduler's binder does: a 409 means someone changed it in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from usher.core.types import WriteResult


class VolumeWriter(Protocol):
    """PV and PVC writes of VolumeBinding's PreBind, and the wait for the PV controller."""

    async def update_volume(self, volume: Mapping[str, Any]) -> WriteResult:
        """PUT a PersistentVolume (a claimRef binding it to a claim)."""
        ...

    async def update_claim(self, claim: Mapping[str, Any]) -> WriteResult:
        """PUT a PersistentVolumeClaim (the selected-node annotation that starts provisioning)."""
        ...

    async def changed(self, within: float) -> bool:
        """Wait until a storage object or a node changes (True) or ``within`` seconds pass (False)."""
        ...
