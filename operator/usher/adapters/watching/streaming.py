"""kopf's watch streams, one per kind, handed on to the sink in order; the deletions a re-listing proves.

usher registers no kopf handler for a watched kind, so kopf writes nothing to the
watched objects (no finalizers, no annotations, no status, no Events), and every
event, the listing's included, is handed to the sink once, in the stream's order:
an object's events in order, and a name's old object before the new one created
under it. When kopf lists a kind again, the objects the sink holds that the new
listing lacks are handed on as deleted at the end of it (`relisting`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import kopf

from usher.adapters.watching import kopf_private
from usher.adapters.watching.holdings import Holdings
from usher.adapters.watching.keys import identity
from usher.adapters.watching.kinds import CLUSTER_SCOPED, Kind, version
from usher.adapters.watching.ports import DeletionRecorder
from usher.adapters.watching.relisting import Relisting
from usher.adapters.watching.syncing import InitialSync

logger = logging.getLogger(__name__)

EVENTS_PER_TURN = 16
"""Events one stream hands on back to back (when the API server sent them at once) before it lets the
scheduling loop and the dispatcher run; the loop schedules up to as many pods per turn (``YIELD_EVERY``).

One event per turn let the intake trail the loop during bursts (a pod's two or three events against 16
pods scheduled per turn). Against one per turn, 16 gave lower gate-removal latency (p50 82-89 against
95-104 ms, p99 155-175 against 177-211) and less CPU per pod on four upstream workloads (bench/NOTES.md)."""

NAMES_LOGGED = 5
"""How many of the objects a re-listing found deleted are named in its log line (all at DEBUG)."""


def configure(settings: kopf.OperatorSettings) -> None:
    """Make kopf a read-only watch layer: no Events of its own, no discovery, long watch requests."""
    settings.posting.enabled = False  # kopf must write nothing, not even Events of its own
    settings.scanning.disabled = True  # no CRD/namespace discovery: the kinds are fixed
    settings.watching.server_timeout = 300
    # Listings as a LIST, then events of type None and LISTED: what `relisting` reads (the default, pinned).
    settings.watching.initial_streaming = False


class Streams:
    """Reads each watched kind's events from kopf's watch stream and hands them to the sink, in order.

    kopf's stream (`kopf_private.watch_stream`) lists the kind, then watches it from the listing's
    resourceVersion, reconnecting on timeouts and disconnects and listing again after a 410. Its
    per-object worker pipeline (causes, loggers, throttling, handler invocation: about 80 us of CPU
    per event here, most of usher's watch cost) is not used: usher's handlers need the raw event only.

    At the end of every listing, the objects the sink holds that the listing lacked are handed on as
    DELETED, at once, and counted as missed deletions (`Relisting` says why that drops nothing that exists).

    A stream that fails (an API error kopf gives up on after its retries) is logged and started again,
    ``retry`` seconds later, doubling to ``max_retry``: a kind is never left unwatched. Its new listing
    re-delivers every object and ends with the deletions of the gap, as above.
    """

    def __init__(
        self,
        sync: InitialSync,
        holdings: Holdings,
        kinds: Iterable[Kind],
        *,
        recorder: DeletionRecorder | None = None,
        retry: float = 1.0,
        max_retry: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._sync = sync
        self._holdings = holdings
        self._relisting = Relisting(holdings)
        self._recorder = recorder
        self.kinds = tuple(kinds)
        """The kinds streamed, one stream each."""
        self._retry = retry
        self._max_retry = max_retry
        self._sleep = sleep

    async def run(self, settings: kopf.OperatorSettings, vault: kopf_private.Vault) -> None:
        """Stream every kind until cancelled, authenticated by kopf's ``vault`` (filled by kopf's login)."""
        kopf_private.use_credentials(vault)  # this task's context, which the streams' tasks inherit
        async with asyncio.TaskGroup() as group:
            for kind in self.kinds:
                group.create_task(self._stream(settings, *kind), name=f"watch-{kind[1]}")

    async def _stream(self, settings: kopf.OperatorSettings, group: str, plural: str) -> None:
        resource = kopf_private.resource(
            group, version(group, plural), plural, namespaced=(group, plural) not in CLUSTER_SCOPED
        )
        delay = self._retry
        handled = 0
        while True:
            try:
                async for event in kopf_private.watch_stream(settings, resource):
                    self.handle(plural, event)
                    delay = self._retry
                    handled += 1
                    if handled % EVENTS_PER_TURN == 0:
                        await asyncio.sleep(0)
            except Exception as error:
                logger.warning("watching %s failed (restarting in %.0f s): %s", plural, delay, error)
            await self._sleep(delay)
            delay = min(delay * 2, self._max_retry)

    def handle(self, plural: str, event: kopf_private.StreamItem) -> None:
        """One item of kopf's stream: an object's event goes to the sink, bookmarks (kopf's or the server's) do not.

        The end of a listing (kopf's ``LISTED``) hands on the deletions the listing proves.
        """
        if isinstance(event, kopf_private.Bookmark):
            if event is kopf_private.LISTED:
                self._listed(plural)
            return
        if event["type"] == "BOOKMARK":
            return
        raw = event["object"]  # the parsed JSON itself: no copy, no view
        _trim(raw)
        if event["type"] is None:
            self._relisting.listed(plural)
        self._deliver(plural, "DELETED" if event["type"] == "DELETED" else "MODIFIED", raw)

    def _deliver(self, plural: str, event_type: str, raw: Mapping[str, Any]) -> None:
        self._holdings.deliver(plural, event_type, raw)
        if not self._sync.synced:
            self._sync.delivered(plural, raw)

    def _listed(self, plural: str) -> None:
        gone = self._relisting.gone(plural)
        if not gone:
            return
        names = ["/".join(filter(None, identity(raw.get("metadata") or {}))) for raw in gone]
        logger.info(
            "kopf listed %s again: %d deleted while it was not watching (%s%s), handling them as deleted now",
            plural,
            len(gone),
            ", ".join(names[:NAMES_LOGGED]),
            ", ..." if len(names) > NAMES_LOGGED else "",
        )
        logger.debug("%s deleted while kopf was not watching: %s", plural, names)
        for raw in gone:
            self._deliver(plural, "DELETED", raw)
            if self._recorder is not None:
                self._recorder.missed_deletion(plural)


def _trim(raw: Mapping[str, Any]) -> None:
    """Drop ``metadata.managedFields`` from a watched object, in place, as kube-scheduler's pod informer does.

    Nothing in usher reads them (a write that omits them leaves them as they are), and they are often half
    of an object's nested dicts and lists: memory the cache holds, and objects the collector walks. kopf
    is done with the object when its event handler runs: usher's handlers change nothing else in it.
    """
    meta = raw.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        del meta["managedFields"]
