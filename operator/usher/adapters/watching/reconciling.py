"""The safety net for missed deletions: every few minutes, what the sink holds is compared with a fresh LIST.

A re-listing by kopf already hands on the deletions of its gap (`relisting`). The
reconciler finds any deletion that slipped past both the watch and the re-listing
(a listing cut short and resumed, a bug), more slowly and more carefully: two
metadata-only LISTs, some seconds apart.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass

from usher.adapters.watching.holdings import Holdings
from usher.adapters.watching.keys import Identity
from usher.adapters.watching.kinds import Kind
from usher.adapters.watching.ports import DeletionRecorder, Lister

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReconcileSettings:
    """How often and how carefully `Reconciler` looks for the deletions kopf missed."""

    interval: float = 300.0
    """Seconds between two rounds of looking for the deletions kopf missed (the first one after the sync)."""
    jitter: float = 0.2
    """Each wait is drawn within this fraction either side of ``interval``, so replicas do not list in step."""
    confirm_after: float = 10.0
    """Seconds between the LIST that lacks a held object and the LIST that confirms it gone.

    Long enough for the watch to deliver a deletion it is merely late with (that is no missed deletion).
    """


class Reconciler:
    """Delivers a DELETED for each object the sink holds that no longer exists: the deletions kopf missed.

    Every ``interval`` seconds, each kind is listed (metadata only, paginated) and a
    held object is declared gone only when all of this holds:

    1. its uid is absent from a LIST sent after its last delivery (that LIST is a
       consistent snapshot taken after it was sent, and an object usher was handed
       before it existed before it; uids are never reused, so absent means deleted);
    2. nothing about it is delivered for ``confirm_after`` seconds and a second LIST
       still lacks it: the watch gets time to report a deletion it is only late
       with, and one wrong answer cannot drop an object.

    Condition 2 is checked and the deletion delivered in one step of the event loop,
    so no event can slip in between. An object re-created under the same name
    while kopf was away is the same object to the sink: kopf's re-listing
    delivers the new one (a newer delivery, so kept); if the reconciler is
    first, the old one is deleted and kopf's delivery adds the new one after.

    A failed LIST is logged and the kind is looked at again next round. The LISTs
    yield to the event loop between pages; comparing them with what is held is one
    pass over a kind's objects.
    """

    def __init__(
        self,
        holdings: Holdings,
        kinds: Iterable[Kind],
        *,
        settings: ReconcileSettings = ReconcileSettings(),
        recorder: DeletionRecorder | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.holdings = holdings
        self.settings = settings
        self._kinds = tuple(kinds)
        self._recorder = recorder
        self._rng = rng or random.Random()
        self._sleep = sleep

    async def run(self, lister: Lister) -> None:
        """Look for missed deletions every ``interval`` seconds (jittered), until cancelled. Start it once synced."""
        while True:
            await self._sleep(self.next_wait())
            await self.round(lister)

    def next_wait(self) -> float:
        """Seconds until the next round: ``interval``, give or take ``jitter`` of it."""
        spread = self.settings.interval * self.settings.jitter
        return self.settings.interval + self._rng.uniform(-spread, spread)

    async def round(self, lister: Lister) -> int:
        """Look at every kind once; returns how many missed deletions were delivered."""
        found = 0
        for group, plural in self._kinds:
            try:
                found += await self._reconcile(lister, group, plural)
            except Exception as error:
                logger.warning("looking for missed deletions of %s failed (next round retries): %s", plural, error)
        return found

    async def _reconcile(self, lister: Lister, group: str, plural: str) -> int:
        held = self.holdings.objects[plural]
        if not held:
            return 0
        since = self.holdings.sequence
        listed = await lister(group, plural)
        if listed is None:  # not served (any more): nothing to compare with
            return 0
        suspects = self._missing(plural, since, listed)
        if not suspects:
            return 0
        await self._sleep(self.settings.confirm_after)
        listed = await lister(group, plural)
        if listed is None:
            return 0
        gone = suspects & self._missing(plural, since, listed)
        for identity in sorted(gone):
            key, _, raw = held[identity]
            namespace, name = identity
            logger.warning(
                "%s %s was deleted without the watch saying so (uid %s): delivering its deletion now",
                plural,
                f"{namespace}/{name}" if namespace else name,
                key,
            )
            self.holdings.deliver(plural, "DELETED", raw)
            if self._recorder is not None:
                self._recorder.missed_deletion(plural)
        return len(gone)

    def _missing(self, plural: str, since: int, listed: Collection[str]) -> set[Identity]:
        """The held objects last delivered no later than delivery ``since`` whose key ``listed`` lacks."""
        present = set(listed)
        return {
            identity
            for identity, (key, sequence, _) in self.holdings.objects[plural].items()
            if sequence <= since and key not in present
        }
