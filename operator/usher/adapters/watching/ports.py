"""What the watches talk to: the sink their events go to, the LISTs they compare with, the deletion counter.

The composition root fills these with the scheduler's event handlers, `listing.api_lister` and the
metrics adapter; unit tests with recording fakes and scripted listers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol


class WatchSink(Protocol):
    """Where watch events go (the scheduler's event handlers), one call per event, in order per object."""

    def on_pod(self, event_type: str | None, raw: Mapping[str, Any]) -> None: ...

    def on_node(self, event_type: str | None, raw: Mapping[str, Any]) -> None: ...

    def on_namespace(self, event_type: str | None, raw: Mapping[str, Any]) -> None: ...

    def on_dra(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """``kind`` is resourceclaims, resourceslices, deviceclasses or devicetaintrules (resource.k8s.io/v1)."""
        ...

    def on_volume(self, kind: str, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """``kind`` is one of VOLUME_RESOURCES' plurals (core/v1 or storage.k8s.io/v1)."""
        ...

    def on_disruption_budget(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A policy/v1 PodDisruptionBudget (DefaultPreemption counts them)."""
        ...

    def on_service(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A Service (its selector shapes PodTopologySpread's default constraints)."""
        ...

    def on_pod_group(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A scheduling.k8s.io/v1beta1 PodGroup (only when served, see `discover`)."""
        ...

    def on_workload(self, event_type: str | None, raw: Mapping[str, Any]) -> None:
        """A scheduling.k8s.io/v1beta1 Workload (only when served, see `discover`)."""
        ...

    def mark_synced(self) -> None: ...


Deliver = Callable[[str, Mapping[str, Any]], None]
"""Hands one object to the sink: ``("MODIFIED" | "DELETED", raw object)``."""


class DeletionRecorder(Protocol):
    """Counts the deletions found that the watch never reported (the metrics adapter)."""

    def missed_deletion(self, kind: str) -> None:
        """One object of ``kind`` (a plural) was found deleted though the watch never said so."""
        ...


class Lister(Protocol):
    """Lists the keys of every object of one kind (the API server's, or a script in tests)."""

    async def __call__(self, group: str, plural: str) -> Collection[str] | None:
        """The `object_key` of every object of a kind, from one consistent LIST; None if the kind is not served.

        Raises on any other failure (the caller retries).
        """
        ...
