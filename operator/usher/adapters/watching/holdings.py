"""What the sink was handed and not told deleted, per kind: the one path every delivery takes.

kopf's events (`streaming`), the deletions a re-listing proves (`relisting`) and
the ones the reconciler finds (`reconciling`) all reach the sink through
`Holdings.deliver`, so the sink sees one ordered story per object whoever
found it, and what a missed deletion leaves behind is known.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from usher.adapters.watching.keys import Identity, identity, object_key
from usher.adapters.watching.ports import Deliver

logger = logging.getLogger(__name__)

Held = tuple[str, int, Mapping[str, Any]]
"""What was last delivered of one object: its `object_key`, the delivery's sequence number, the object itself."""


class Holdings:
    """The objects the sink was handed and not told deleted, per kind: what a missed deletion leaves behind.

    Every delivery goes through `deliver`, which numbers it: comparing numbers
    tells whether an object was delivered after a given moment. Keyed by
    namespace/name like the sink, so an object re-created under its name
    replaces the old one here as it does there.

    Cost: one dict store per event, and a reference to the last version of each
    object (the cache and the queue hold most of those anyway).
    """

    def __init__(self, deliveries: Mapping[str, Deliver]) -> None:
        self._deliveries = dict(deliveries)
        self.objects: dict[str, dict[Identity, Held]] = {plural: {} for plural in self._deliveries}
        self.sequence = 0
        """The number of the latest delivery, of any kind."""

    def deliver(self, plural: str, event_type: str, raw: Mapping[str, Any]) -> None:
        """Hand one event to the sink (``event_type`` is MODIFIED or DELETED) and remember what the sink holds."""
        meta = raw.get("metadata") or {}
        self.sequence += 1
        if event_type == "DELETED":
            self.objects[plural].pop(identity(meta), None)
        else:
            self.objects[plural][identity(meta)] = (object_key(meta), self.sequence, raw)
        try:
            self._deliveries[plural](event_type, raw)
        except Exception:
            # A bug on one object must not stop the watch of all the others.
            logger.exception(
                "handling %s %s of %s/%s failed", event_type, plural, meta.get("namespace"), meta.get("name")
            )
