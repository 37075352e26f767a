"""The deletions a fresh listing proves: what the sink holds of a kind that kopf's new listing lacks. Pure.

kopf's stream of a kind lists it (each object an event of type None, then the
``LISTED`` mark), watches from the listing, and lists again whenever its watch
cannot resume: a 410 Gone (the resourceVersion it would resume from was
compacted away), a connection lost during a listing, or a stream usher starts
again after a failure. kopf then delivers what the new listing holds, but says
nothing of the objects deleted while it was away. client-go's informers do:
``DeltaFIFO.Replace`` deletes from the store, at once, every object the new
listing lacks. `Relisting` does the same for usher; the stream hands the sink a
DELETED for each, with the last state it was handed (as client-go's
``DeletedFinalStateUnknown``), through `Holdings.deliver` like any watch event.

Theory of operation. `Holdings.deliver` numbers every delivery. When the first
object of a listing is about to be delivered (`listed`), the number of the last
delivery before it is kept; when ``LISTED`` comes (`gone`), the held objects of
that kind last delivered no later than that number are the ones the listing did
not deliver: those are gone. A ``LISTED`` with no object before it is an empty
listing: everything held of the kind is gone.

Why nothing that exists is dropped (the pods usher assumed or bound itself included):

1. kopf lists with no resourceVersion (and `streaming.configure` keeps kopf's
   watch-list streaming off): a consistent read, served at the API server's latest
   resourceVersion as of the request (pages, if any, all from that snapshot), so
   the listing is at least as recent as every state of the kind usher was handed
   before sending it. The e2e test of re-listing checks the LIST kopf sends.
2. One stream per kind delivers that kind's events in order, and it sends the LIST
   only after its previous watch ended: every held object of the kind not delivered
   by the listing was delivered before the LIST was sent, so its state is older
   than the listing. (The reconciler delivers only deletions, which hold nothing.)
3. The sink knows objects by namespace/name, as `Holdings` does. A name the listing
   lacks therefore names no object at the listing's resourceVersion: the object
   usher held was deleted. A name re-created meanwhile is in the listing, its new
   object delivered, and so it is kept (the sink replaces the old uid, as for a
   watch event).
4. Objects usher writes but the stream has not delivered (a pod it assumed and
   bound, a claim it allocated) are either held, and then in the listing since they
   exist, or not held, and then never deleted here: only held objects are.

A listing cut short (kopf lists again on a lost connection) is not told apart
from the next one: the mark stays at the first, so an object either listing
delivered is kept. Such an object is at worst left for the reconciler, never
dropped. ``gone`` is one pass over the kind's held objects, once per listing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from usher.adapters.watching.holdings import Holdings


class Relisting:
    """Tells, when kopf's listing of a kind ends, which held objects of that kind it lacked: deleted meanwhile."""

    def __init__(self, holdings: Holdings) -> None:
        self._holdings = holdings
        self._since: dict[str, int] = {}
        """Per kind being listed, the number of the last delivery before the listing's first object."""

    def listed(self, plural: str) -> None:
        """An object of kopf's listing of ``plural`` is about to be delivered."""
        self._since.setdefault(plural, self._holdings.sequence)

    def gone(self, plural: str) -> list[Mapping[str, Any]]:
        """kopf's listing of ``plural`` ended: the last state of each held object it did not deliver."""
        since = self._since.pop(plural, self._holdings.sequence)
        return [raw for _, sequence, raw in self._holdings.objects[plural].values() if sequence <= since]
