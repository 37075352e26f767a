"""What usher knows about storage: claims and volumes (as watched, or as just assumed), storage
classes, CSI nodes, drivers and capacities. Pure.

PVCs and PVs follow kube-scheduler's assume cache: Reserve *assumes* the
objects it is about to write (a PV bound to a claim, a PVC annotated with its
selected node), so the next pod's Filter already sees them taken; the watch's
copy replaces the assumed one once its resourceVersion is as new; Unreserve
restores the watched copy. ``version`` is bumped on every change, so waiters
(PreBind waiting for the PV controller and the provisioner) know when to look
again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from usher.core.types import version_not_older
from usher.core.volumes.model import (
    Capacity,
    Claim,
    CsiDriver,
    CsiNode,
    StorageClass,
    Volume,
    VolumeModelError,
    parse_capacity,
    parse_claim,
    parse_class,
    parse_csi_driver,
    parse_csi_node,
    parse_volume,
)

WATCHED_LOG = 4096
"""Watch events ``watched_changes_since`` can list (a reader further behind starts afresh)."""


def _key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name") or "")


class VolumeState:
    """Storage objects by key (``namespace/name`` for namespaced kinds, ``name`` otherwise)."""

    def __init__(self) -> None:
        self._claims: dict[str, Claim] = {}
        self._assumed_claims: dict[str, Claim] = {}
        self._volumes: dict[str, Volume] = {}
        self._assumed_volumes: dict[str, Volume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CsiNode] = {}
        self.csi_drivers: dict[str, CsiDriver] = {}
        self.capacities: dict[str, Capacity] = {}
        self.broken: dict[str, str] = {}
        """Objects the API served that usher cannot parse: kind/key -> why (reported on the pods they block)."""
        self.version = 0
        """Bumped on every change."""
        self._listeners: list[Callable[[], None]] = []
        self._watched_log: deque[tuple[int, str, str]] = deque()
        """(version, kind, key) of the latest watch events, oldest first (at most WATCHED_LOG entries)."""
        self._log_dropped = 0
        """The version of the newest event dropped from the log."""

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change (the binding cycle's waiters use it)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.version += 1
        for listener in self._listeners:
            listener()

    def watched_changes_since(self, version: int) -> list[tuple[str, str]] | None:
        """(kind, key) of every watched object changed by a watch event after ``version``, newest first;
        None when some of those events are no longer logged (the caller must assume anything changed)."""
        if version < self._log_dropped:
            return None
        out: list[tuple[str, str]] = []
        for logged, kind, key in reversed(self._watched_log):
            if logged <= version:
                break
            out.append((kind, key))
        return out

    # ------------------------------------------------------------------ reads

    def claim(self, key: str) -> Claim | None:
        """The assumed copy if there is one, else the watched one (the assume cache's Get)."""
        return self._assumed_claims.get(key) or self._claims.get(key)

    def watched_claim(self, key: str) -> Claim | None:
        """The API server's copy as last watched (the assume cache's GetAPIObj)."""
        return self._claims.get(key)

    def volume(self, name: str) -> Volume | None:
        return self._assumed_volumes.get(name) or self._volumes.get(name)

    def watched_volume(self, name: str) -> Volume | None:
        return self._volumes.get(name)

    def volumes(self) -> Iterator[Volume]:
        """Every PV, assumed copies in place of watched ones."""
        for name, volume in self._volumes.items():
            yield self._assumed_volumes.get(name, volume)
        for name, volume in self._assumed_volumes.items():
            if name not in self._volumes:
                yield volume

    def volumes_of_class(self, class_name: str) -> list[Volume]:
        return [v for v in self.volumes() if v.class_name == class_name]

    # ------------------------------------------------------------------ watch events

    def on_event(self, kind: str, deleted: bool, raw: Mapping[str, Any]) -> tuple[Any, Any]:
        """Apply one watch event of ``kind``; returns (old, new) records for the cluster event (None when
        absent). A malformed object is recorded in ``broken`` and treated as absent."""
        key = _key(raw)
        table, parse = self._tables[kind]
        store: dict[str, Any] = getattr(self, table)
        old = store.get(key)
        new: Any = None
        self.broken.pop(f"{kind}/{key}", None)
        if deleted:
            store.pop(key, None)
        else:
            try:
                new = parse(raw)
            except (VolumeModelError, ValueError, TypeError) as exc:
                self.broken[f"{kind}/{key}"] = str(exc)
                store.pop(key, None)
            else:
                store[key] = new
        if kind == "persistentvolumeclaims":
            self._settle(self._assumed_claims, key, new)
        elif kind == "persistentvolumes":
            self._settle(self._assumed_volumes, key, new)
        self._changed()
        if len(self._watched_log) >= WATCHED_LOG:
            self._log_dropped = self._watched_log.popleft()[0]
        self._watched_log.append((self.version, kind, key))
        return old, new

    _tables: dict[str, tuple[str, Callable[[Mapping[str, Any]], Any]]] = {
        "persistentvolumeclaims": ("_claims", parse_claim),
        "persistentvolumes": ("_volumes", parse_volume),
        "storageclasses": ("classes", parse_class),
        "csinodes": ("csi_nodes", parse_csi_node),
        "csidrivers": ("csi_drivers", parse_csi_driver),
        "csistoragecapacities": ("capacities", parse_capacity),
    }
    KINDS = tuple(_tables)

    @staticmethod
    def _settle(assumed: dict[str, Any], key: str, watched: Claim | Volume | None) -> None:
        """The watch's copy replaces an assumed one as new as it or older (or when the object went)."""
        mine = assumed.get(key)
        if mine is not None and (watched is None or version_not_older(watched.version, mine.version)):
            del assumed[key]

    # ------------------------------------------------------------------ assume / restore

    def assume_claim(self, raw: Mapping[str, Any]) -> Claim:
        """Take ``raw`` (a PVC about to be written, or just written) as the claim's current state."""
        claim = parse_claim(raw)
        watched = self._claims.get(claim.key)
        if watched is not None and not version_not_older(claim.version, watched.version):
            raise VolumeModelError(f"persistentvolumeclaim {claim.key}: assumed version is older than the watched one")
        self._assumed_claims[claim.key] = claim
        self._changed()
        return claim

    def assume_volume(self, raw: Mapping[str, Any]) -> Volume:
        volume = parse_volume(raw)
        watched = self._volumes.get(volume.name)
        if watched is not None and not version_not_older(volume.version, watched.version):
            raise VolumeModelError(f"persistentvolume {volume.name}: assumed version is older than the watched one")
        self._assumed_volumes[volume.name] = volume
        self._changed()
        return volume

    def restore_claim(self, key: str) -> None:
        if self._assumed_claims.pop(key, None) is not None:
            self._changed()

    def restore_volume(self, name: str) -> None:
        if self._assumed_volumes.pop(name, None) is not None:
            self._changed()
