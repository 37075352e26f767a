"""NodeShares: what each node's pods add to per-topology-domain sums, kept across cycles. Pure.

InterPodAffinity's PreFilter counts and PreScore sums, and PodTopologySpread's
PreFilter counts, are, per incoming pod, a walk of every existing pod of the
cluster (kube-scheduler walks them on 16 goroutines; usher has one thread).
For pods that ask alike (the plugin's signature of the pod) each node's part
only changes when the node does, and ``NodeInfo.generation`` says when: so a
burst of pods from one template walks only the nodes changed since the
previous pod's cycle. ``ByKind`` keeps such state per signature (NodeAffinity
keeps its Filter answers per node in one too).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo

Entry = tuple[str, str, int]
"""(topologyKey, value, weight): one term of one existing pod counted for its node's domain."""
Pair = tuple[str, str]
"""(topologyKey, value): one topology domain."""

T = TypeVar("T")

MAX_KINDS = 16
"""Kinds of incoming pods whose shares a plugin keeps (a few templates burst at a time)."""


def sum_entries(nodes: Iterable[NodeInfo], entries_of: Callable[[NodeInfo], list[Entry]]) -> dict[Pair, int]:
    """(topologyKey, value) -> summed weight of ``nodes``' entries, walked afresh: what `NodeShares` keeps
    (plugins call it where nothing is kept, and property tests compare the two)."""
    sums: dict[Pair, int] = {}
    for node in nodes:
        for key, value, weight in entries_of(node):
            pair = (key, value)
            sums[pair] = sums.get(pair, 0) + weight
    return sums


def by_key(sums: Mapping[Pair, int]) -> dict[str, dict[str, int]]:
    """topologyKey -> value -> summed weight."""
    out: dict[str, dict[str, int]] = {}
    for (key, value), total in sums.items():
        out.setdefault(key, {})[value] = total
    return out


class ByKind(Generic[T]):
    """What a plugin keeps per signature of incoming pods (a ``factory()`` each), the least recently used
    dropped first."""

    __slots__ = ("_factory", "_kinds", "_limit")

    def __init__(self, factory: Callable[[], T], limit: int = MAX_KINDS) -> None:
        self._factory = factory
        self._kinds: dict[Hashable, T] = {}
        self._limit = limit

    def __call__(self, signature: Hashable) -> T:
        """What is kept for pods with ``signature`` (new and empty for a signature not seen lately)."""
        kept = self._kinds.pop(signature, None)
        if kept is None:
            kept = self._factory()
            if len(self._kinds) >= self._limit:
                del self._kinds[next(iter(self._kinds))]
        self._kinds[signature] = kept
        return kept

    def __len__(self) -> int:
        return len(self._kinds)


V = TypeVar("V")

NODES_KEPT = 16384
"""Node names a per-node answer keeps per signature before it is cleared wholesale: entries are looked up by
name and checked against the node, so a deleted node's entry is never read again, only never pruned."""


class PerNodeByKind(ByKind[dict[str, V]]):
    """``ByKind`` of per-node answers (node name -> answer), each dict cleared wholesale once it holds more
    than ``NODES_KEPT`` names (a cluster whose nodes come and go by new names would grow it without bound)."""

    __slots__ = ()

    def __init__(self, limit: int = MAX_KINDS) -> None:
        super().__init__(dict, limit)

    def __call__(self, signature: Hashable) -> dict[str, V]:
        kept = super().__call__(signature)
        if len(kept) > NODES_KEPT:
            kept.clear()
        return kept


class NodeShares:
    """For pods that ask alike (``signature``): what each node added to the per-domain sums, with the node's
    generation, and the running sums.

    Existing pods' terms also match the incoming pod's labels, and scheduler_perf gives every pod a label of
    its own ("signature"): so the shares hold for pods whose labels agree on the keys those terms read
    (``_reference``); a pod that differs there starts them afresh. A burst of pods from one template then
    walks only the nodes that changed since the previous pod's cycle (usually the one it was bound to), not
    every pod of the cluster: kube-scheduler walks them all, in parallel."""

    __slots__ = ("_counted", "_includes", "_keyed", "_list", "_mark", "_nodes", "_reference", "_totals")

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[int, list[Entry]]] = {}
        self._counted: dict[tuple[str, str], int] = {}
        """(topologyKey, value) -> entries counted in it (a pair is dropped when none is left)."""
        self._totals: dict[tuple[str, str], int] = {}
        """(topologyKey, value) -> summed weight, as ``by_pair`` hands it out (a C-level copy)."""
        self._keyed: dict[str, dict[str, int]] = {}
        """topologyKey -> value -> summed weight, the same as ``by_key`` hands it out."""
        self._reference: dict[str, str | None] = {}
        """Label key read by an existing pod's term -> the value (None: absent) every kept entry was made for."""
        self._list: Sequence[NodeInfo] | None = None
        """The cache's node list the shares were last brought up to date with (see ``_mark``)."""
        self._includes: Callable[[NodeInfo], bool] | None = None
        """Which of that list's nodes they were (the whole list, or a ``NodeSubset``'s choice)."""
        self._mark = 0
        """The cache journal's newest generation then: a node with a newer one changed since."""

    def refresh(
        self,
        nodes: Sequence[NodeInfo],
        labels: Mapping[str, str],
        entries_of: Callable[[NodeInfo, set[str]], list[Entry]],
    ) -> None:
        """Walk again the nodes of ``nodes`` whose generation moved (all, when ``labels`` differ from the
        reference), forget nodes no longer there.

        Given nodes of the same cache list as last time (a ``NodeList``, or a ``NodeSubset`` of it: the same
        nodes exist), only the nodes its journal shows changed since the last refresh are looked at, not
        every node: walked again if still among ``nodes`` (``includes``), forgotten if not."""
        if any(labels.get(key) != value for key, value in self._reference.items()):
            self._nodes.clear()
            self._counted.clear()
            self._totals.clear()
            self._keyed.clear()
            self._reference.clear()
            self._list = None
        journal = getattr(nodes, "journal", None)
        origin = getattr(nodes, "origin", None)
        includes = getattr(nodes, "includes", None)
        if journal is not None and origin is not None and origin is self._list and includes == self._includes:
            assert includes is not None
            for node in journal.changed_since(self._mark):
                if node.exists and includes(node):
                    self._walk(node, labels, entries_of)
                else:  # left ``nodes`` (its last pod with terms went) or a placeholder in no list
                    kept = self._nodes.pop(node.name, None)
                    if kept is not None:
                        self._count(kept[1], -1)
            self._mark = journal.latest
            return
        seen = 0
        for node in nodes:
            seen += 1
            self._walk(node, labels, entries_of)
        if seen != len(self._nodes):  # nodes left (deleted, or no longer holding pods with terms)
            present = {node.name for node in nodes}
            for name in [n for n in self._nodes if n not in present]:
                self._count(self._nodes.pop(name)[1], -1)
        if journal is not None and origin is not None:
            self._list, self._includes, self._mark = origin, includes, journal.latest
        else:
            self._list, self._includes, self._mark = None, None, 0

    def _walk(
        self, node: NodeInfo, labels: Mapping[str, str], entries_of: Callable[[NodeInfo, set[str]], list[Entry]]
    ) -> None:
        kept = self._nodes.get(node.name)
        if kept is not None and kept[0] == node.generation:
            return
        read: set[str] = set()
        entries = entries_of(node, read)
        for key in read:
            # No kept entry read this key (else it is in the reference already, with this pod's value).
            self._reference.setdefault(key, labels.get(key))
        if kept is not None:
            self._count(kept[1], -1)
        self._count(entries, 1)
        self._nodes[node.name] = (node.generation, entries)

    def by_key(self) -> dict[str, dict[str, int]]:
        """topologyKey -> value -> summed weight, for every pair some entry counts in (the caller's copy)."""
        return {key: dict(values) for key, values in self._keyed.items()}

    def by_pair(self) -> dict[Pair, int]:
        """(topologyKey, value) -> summed weight, for every pair some entry counts in (the caller's copy)."""
        return dict(self._totals)

    def _count(self, entries: list[Entry], sign: int) -> None:
        counted, totals, keyed = self._counted, self._totals, self._keyed
        for key, value, weight in entries:
            pair = (key, value)
            values = keyed.get(key)
            if values is None:
                values = keyed[key] = {}
            left = counted.get(pair, 0) + sign
            if left == 0:
                del counted[pair], totals[pair], values[value]
                if not values:
                    del keyed[key]
            else:
                counted[pair] = left
                totals[pair] = values[value] = totals.get(pair, 0) + sign * weight
