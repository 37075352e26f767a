"""When the cache is synced: once kopf has delivered every object of usher's own initial LIST of each kind.

kopf's ``@kopf.index`` handlers would give that guarantee for free, but their
barrier costs CPU quadratic in the number of listed objects: every object's
worker waits on one shared condition and each finished object wakes all the
others (about 36 s of CPU for 4,000 pods before the first scheduling cycle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from usher.adapters.watching.keys import object_key
from usher.adapters.watching.kinds import Kind
from usher.adapters.watching.ports import Lister, WatchSink

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """How `InitialSync` re-lists kinds whose listed objects are slow to arrive, and retries failed LISTs."""

    recheck: float = 5.0
    """Seconds without any awaited object delivered before the kinds still awaited are listed again."""
    max_recheck: float = 60.0
    """The recheck interval doubles while nothing awaited arrives, up to this."""
    retry: float = 1.0
    """Seconds before a failed LIST is retried; doubles on each failure."""
    max_retry: float = 30.0
    """The longest wait before retrying a failed LIST."""


class InitialSync:
    """Marks the sink synced once every object of usher's own initial LIST of each kind is delivered.

    The guarantee: when `WatchSink.mark_synced` is called, the sink has been handed
    every object that existed when usher listed its kind, unless a later LIST shows
    the object gone. Events before and after reach the sink through kopf only, so
    nothing is delivered twice and kopf's per-object order holds.

    usher's LIST and kopf's run concurrently, in no known order. An object that
    usher listed is delivered by kopf either from kopf's listing or as a watch
    event after it, except when kopf listed after its deletion: then kopf never
    mentions it. So while kopf delivers nothing that is awaited for ``recheck``
    seconds, the kinds still awaited are listed again and objects absent from the
    new LIST are no longer awaited (uids are never reused, so absent means deleted).
    (A re-list by kopf, before sync or after, hands on the deletions it proves: `Relisting`.)

    Cost: one set operation per event until synced, one LIST per kind; linear.
    """

    def __init__(self, sink: WatchSink, kinds: Iterable[Kind], *, settings: SyncSettings = SyncSettings()) -> None:
        self.sink = sink
        self.synced = False
        self.settings = settings
        self._kinds = tuple(kinds)
        self._awaited: dict[str, set[str] | None] = {plural: None for _, plural in self._kinds}
        """Per kind, the listed keys not delivered yet; None until usher's LIST of the kind is in."""
        self._early: dict[str, set[str]] = {plural: set() for _, plural in self._kinds}
        """Per kind, the keys kopf delivered before usher's LIST of the kind was in."""
        self._progress = asyncio.Event()

    def delivered(self, plural: str, raw: Mapping[str, Any]) -> None:
        """kopf handed one event of this object to the sink (called only until synced)."""
        key = object_key(raw.get("metadata") or {})
        awaited = self._awaited[plural]
        if awaited is None:
            self._early[plural].add(key)
        elif key in awaited:
            awaited.remove(key)
            self._progress.set()
            if not awaited:
                self._check()

    async def run(self, lister: Lister) -> None:
        """List every kind, then wait until the listed objects are delivered, listing stalled kinds again."""
        for group, plural in self._kinds:
            keys = await self._list(lister, group, plural)
            early = self._early.pop(plural)
            self._awaited[plural] = {key for key in keys or () if key not in early}
        self._check()
        recheck = self.settings.recheck
        while not self.synced:
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), timeout=recheck)
                recheck = self.settings.recheck
                continue
            except TimeoutError:
                pass
            recheck = min(recheck * 2, self.settings.max_recheck)
            for group, plural in self._kinds:
                awaited = self._awaited[plural]
                if awaited:
                    keys = await self._list(lister, group, plural)
                    gone = awaited.difference(keys or ())
                    logger.info(
                        "%d listed %s not delivered yet, %d of them deleted since", len(awaited), plural, len(gone)
                    )
                    awaited.difference_update(gone)
            self._check()

    def _check(self) -> None:
        if not self.synced and all(awaited is not None and not awaited for awaited in self._awaited.values()):
            self.synced = True
            self.sink.mark_synced()

    async def _list(self, lister: Lister, group: str, plural: str) -> Collection[str] | None:
        delay = self.settings.retry
        while True:
            try:
                return await lister(group, plural)
            except Exception as error:
                logger.warning("listing %s failed (retrying in %.0f s): %s", plural, delay, error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.settings.max_retry)
