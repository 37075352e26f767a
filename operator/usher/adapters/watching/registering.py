"""Wires the watches of one scheduler to its sink: which kinds, which sink method each kind's events go to."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from usher.adapters.watching.holdings import Holdings
from usher.adapters.watching.kinds import KINDS, OPTIONAL_KINDS, POD_GROUPS, VOLUME_RESOURCES, WORKLOADS, Kind
from usher.adapters.watching.ports import DeletionRecorder, Deliver, WatchSink
from usher.adapters.watching.reconciling import Reconciler, ReconcileSettings
from usher.adapters.watching.streaming import Streams
from usher.adapters.watching.syncing import InitialSync, SyncSettings

DEFAULT_SYNC = SyncSettings()
DEFAULT_RECONCILE = ReconcileSettings()


@dataclass(frozen=True, slots=True)
class Watches:
    """What `register` returns: the tasks the composition root runs next to kopf."""

    streams: Streams
    """Must run (`Streams.run`, beside kopf): the watches themselves."""
    sync: InitialSync
    """Must run (`InitialSync.run`) for the sink ever to be marked synced."""
    reconciler: Reconciler
    """Runs once synced (`Reconciler.run`), to find the deletions kopf missed."""


def register(
    sink: WatchSink,
    *,
    optional: Collection[Kind] = (),
    settings: SyncSettings = DEFAULT_SYNC,
    reconcile: ReconcileSettings = DEFAULT_RECONCILE,
    recorder: DeletionRecorder | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Watches:
    """Wire the watches of one scheduler to its sink.

    ``optional``: the kinds of ``OPTIONAL_KINDS`` to watch too (served, as `discover` found, and wanted).
    ``recorder`` counts the deletions the watch never reported, found by a re-listing or the reconciler.
    ``sleep`` is how the reconciler waits (between rounds, before its confirming LIST): injected by tests.
    """
    kinds = (*KINDS, *(kind for kind in OPTIONAL_KINDS if kind in optional))
    sync = InitialSync(sink, kinds, settings=settings)

    def dra(plural: str) -> Deliver:
        return lambda event_type, raw: sink.on_dra(plural, event_type, raw)

    def volume(plural: str) -> Deliver:
        return lambda event_type, raw: sink.on_volume(plural, event_type, raw)

    deliveries: dict[str, Deliver] = {
        "pods": sink.on_pod,
        "nodes": sink.on_node,
        "namespaces": sink.on_namespace,
        "poddisruptionbudgets": sink.on_disruption_budget,
        "services": sink.on_service,
        **{plural: volume(plural) for _, plural in VOLUME_RESOURCES},
    }
    if POD_GROUPS in kinds:
        deliveries["podgroups"] = sink.on_pod_group
    if WORKLOADS in kinds:
        deliveries["workloads"] = sink.on_workload
    holdings = Holdings({plural: deliveries.get(plural) or dra(plural) for _, plural in kinds})
    return Watches(
        Streams(sync, holdings, kinds, recorder=recorder),
        sync,
        Reconciler(holdings, kinds, settings=reconcile, recorder=recorder, sleep=sleep),
    )
