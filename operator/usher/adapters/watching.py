"""kopf's watch streams, feeding the events of Pods, Nodes, Namespaces, DRA and other objects into the scheduler.

Namespaces are watched only for their labels (InterPodAffinity's namespaceSelector).

PodGroups and Workloads (``WORKLOAD_KINDS``, scheduling.k8s.io/v1beta1, a
beta API off by default in kube-apiserver) are optional: `discover` asks the
API server at start-up which of them it serves, and only those are watched
(``register(..., optional=...)``). Without PodGroups usher runs without gang
support, which the composition root logs once.

Each kind is read from kopf's watch stream (`Streams`): kopf lists the kind,
watches it from the listing, reconnects and re-lists after a 410, with kopf's
login and settings. usher registers no kopf handler for a watched kind, so kopf
writes nothing to the watched objects (no finalizers, no annotations, no
status, no Events), and every event, the listing's included, is handed to the
sink once, in the stream's order: an object's events in order, and a name's
old object before the new one created under it.

kopf's per-object handler pipeline (one worker task per object; per event:
causes, three loggers, a throttler, the handler's keyword arguments built as
views of the body) is not used: it cost about 80 us of CPU per event here, as
much as all the rest of usher's handling of a pod's event, for work that only
state handlers need. The stream, its `Resource` and the `Vault` come from
kopf's ``_cogs`` modules, which kopf does not promise to keep: pyproject pins
kopf to 1.45.x, and every e2e test runs usher's watches against a real API server.

Knowing when the cache is synced is usher's own job (`InitialSync`): usher
takes its own paginated LIST of every kind at start and marks the sink synced
once kopf has delivered each listed object (or a later LIST shows it gone).
kopf's ``@kopf.index`` handlers would give that guarantee for free, but their
barrier costs CPU quadratic in the number of listed objects: every object's
worker waits on one shared condition and each finished object wakes all the
others (about 36 s of CPU for 4,000 pods before the first scheduling cycle).

kopf re-lists a kind when its watch expires (410 Gone) but, unlike client-go's
informers, never reports the objects deleted during the gap: `Reconciler`
finds them with the same metadata-only LIST (see its docstring for why it
never drops an object that exists) and hands the sink a DELETED for each,
through the path kopf's own events take (`Holdings.deliver`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import kopf
from kopf._cogs.clients import auth as kopf_auth
from kopf._cogs.clients import watching as kopf_streams
from kopf._cogs.structs.credentials import Vault
from kopf._cogs.structs.references import Resource

from usher.adapters.kubeapi import KubeApi

logger = logging.getLogger(__name__)


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


DRA_RESOURCES = ("resourceclaims", "resourceslices", "deviceclasses")
VOLUME_RESOURCES: tuple[tuple[str, str], ...] = (
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("storage.k8s.io", "storageclasses"),
    ("storage.k8s.io", "csinodes"),
    ("storage.k8s.io", "csidrivers"),
    ("storage.k8s.io", "csistoragecapacities"),
)

Deliver = Callable[[str, Mapping[str, Any]], None]
"""Hands one object to the sink: ``("MODIFIED" | "DELETED", raw object)``."""


def configure(settings: kopf.OperatorSettings) -> None:
    """Make kopf a read-only watch layer: no Events of its own, no discovery, long watch requests."""
    settings.posting.enabled = False  # kopf must write nothing, not even Events of its own
    settings.scanning.disabled = True  # no CRD/namespace discovery: the kinds are fixed
    settings.watching.server_timeout = 300


Kind = tuple[str, str]
"""(API group, plural) of a watched kind; its version is v1 unless `VERSIONS` says otherwise."""

POD_GROUPS: Kind = ("scheduling.k8s.io", "podgroups")
WORKLOADS: Kind = ("scheduling.k8s.io", "workloads")
WORKLOAD_KINDS: tuple[Kind, ...] = (POD_GROUPS, WORKLOADS)
"""Watched when the API server serves them (`discover`): gang scheduling, and ``usher explain`` for Workloads."""
DEVICE_TAINT_RULES: Kind = ("resource.k8s.io", "devicetaintrules")
"""Watched when DRADeviceTaintRules is on and the API server serves them (resource.k8s.io/v1 since 1.37)."""
OPTIONAL_KINDS: tuple[Kind, ...] = (*WORKLOAD_KINDS, DEVICE_TAINT_RULES)
"""The kinds watched only when `discover` finds them served (and their feature is on)."""
VERSIONS: Mapping[Kind, str] = dict.fromkeys(WORKLOAD_KINDS, "v1beta1")
"""The kinds watched at another version than v1."""


def version(group: str, plural: str) -> str:
    return VERSIONS.get((group, plural), "v1")


def api_path(group: str, plural: str) -> str:
    """The collection's path across all namespaces (``/api/v1/pods``, ``/apis/<group>/<version>/<plural>``)."""
    return f"/apis/{group}/{version(group, plural)}/{plural}" if group else f"/api/v1/{plural}"


KINDS: tuple[Kind, ...] = (
    ("", "pods"),
    ("", "nodes"),
    ("", "namespaces"),
    ("", "services"),
    ("policy", "poddisruptionbudgets"),
    *(("resource.k8s.io", plural) for plural in DRA_RESOURCES),
    *VOLUME_RESOURCES,
)

CLUSTER_SCOPED: frozenset[Kind] = frozenset(
    {
        ("", "nodes"),
        ("", "namespaces"),
        ("", "persistentvolumes"),
        ("storage.k8s.io", "storageclasses"),
        ("storage.k8s.io", "csinodes"),
        ("storage.k8s.io", "csidrivers"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "deviceclasses"),
        DEVICE_TAINT_RULES,
    }
)


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
    settings: SyncSettings = SyncSettings(),
    reconcile: ReconcileSettings = ReconcileSettings(),
    recorder: DeletionRecorder | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Watches:
    """Wire the watches of one scheduler to its sink.

    ``optional``: the kinds of ``OPTIONAL_KINDS`` to watch too (served, as `discover` found, and wanted).
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
        Streams(sync, holdings, kinds),
        sync,
        Reconciler(holdings, kinds, settings=reconcile, recorder=recorder, sleep=sleep),
    )


EVENTS_PER_TURN = 16
"""Events one stream hands on back to back (when the API server sent them at once) before it lets the
scheduling loop and the dispatcher run; the loop schedules up to as many pods per turn (``YIELD_EVERY``).

One event per turn let the intake trail the loop during bursts (a pod's two or three events against 16
pods scheduled per turn). Against one per turn, 16 gave lower gate-removal latency (p50 82-89 against
95-104 ms, p99 155-175 against 177-211) and less CPU per pod on four upstream workloads (bench/NOTES.md)."""


class Streams:
    """Reads each watched kind's events from kopf's watch stream and hands them to the sink, in order.

    kopf's stream (``infinite_watch``) lists the kind, then watches it from the listing's resourceVersion,
    reconnecting on timeouts and disconnects and listing again after a 410. Its per-object worker pipeline
    (causes, loggers, throttling, handler invocation: about 80 us of CPU per event here, most of
    usher's watch cost) is not used: usher's handlers need the raw event only.

    A stream that fails (an API error kopf gives up on after its retries) is logged and started again,
    ``retry`` seconds later, doubling to ``max_retry``: a kind is never left unwatched. Its new listing
    re-delivers every object; deletions during the gap are `Reconciler`'s.
    """

    def __init__(
        self,
        sync: InitialSync,
        holdings: Holdings,
        kinds: Iterable[Kind],
        *,
        retry: float = 1.0,
        max_retry: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._sync = sync
        self._holdings = holdings
        self.kinds = tuple(kinds)
        """The kinds streamed, one stream each."""
        self._retry = retry
        self._max_retry = max_retry
        self._sleep = sleep

    async def run(self, settings: kopf.OperatorSettings, vault: Vault) -> None:
        """Stream every kind until cancelled, authenticated by kopf's ``vault`` (filled by kopf's login)."""
        kopf_auth.vault_var.set(vault)  # this task's context: kopf's API calls read their credentials here
        async with asyncio.TaskGroup() as group:
            for kind in self.kinds:
                group.create_task(self._stream(settings, *kind), name=f"watch-{kind[1]}")

    async def _stream(self, settings: kopf.OperatorSettings, group: str, plural: str) -> None:
        resource = Resource(group, version(group, plural), plural, namespaced=(group, plural) not in CLUSTER_SCOPED)
        delay = self._retry
        handled = 0
        while True:
            try:
                async for event in kopf_streams.infinite_watch(settings=settings, resource=resource, namespace=None):
                    self.handle(plural, event)
                    delay = self._retry
                    handled += 1
                    if handled % EVENTS_PER_TURN == 0:
                        await asyncio.sleep(0)
            except Exception as error:
                logger.warning("watching %s failed (restarting in %.0f s): %s", plural, delay, error)
            await self._sleep(delay)
            delay = min(delay * 2, self._max_retry)

    def handle(self, plural: str, event: Any) -> None:
        """One item of kopf's stream: an object's event goes to the sink, bookmarks (kopf's or the server's) do not."""
        if isinstance(event, kopf_streams.Bookmark) or event["type"] == "BOOKMARK":
            return
        raw = event["object"]  # the parsed JSON itself: no copy, no view
        _trim(raw)
        self._holdings.deliver(plural, "DELETED" if event["type"] == "DELETED" else "MODIFIED", raw)
        if not self._sync.synced:
            self._sync.delivered(plural, raw)


def _trim(raw: Mapping[str, Any]) -> None:
    """Drop ``metadata.managedFields`` from a watched object, in place, as kube-scheduler's pod informer does.

    Nothing in usher reads them (a write that omits them leaves them as they are), and they are often half
    of an object's nested dicts and lists: memory the cache holds, and objects the collector walks. kopf
    is done with the object when its event handler runs: usher's handlers change nothing else in it.
    """
    meta = raw.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        del meta["managedFields"]


def _deliver(deliver: Deliver, plural: str, event_type: str, raw: Mapping[str, Any]) -> None:
    try:
        deliver(event_type, raw)
    except Exception:
        # A bug on one object must not stop the watch of all the others.
        meta = raw.get("metadata") or {}
        logger.exception("handling %s %s of %s/%s failed", event_type, plural, meta.get("namespace"), meta.get("name"))


def object_key(meta: Mapping[str, Any]) -> str:
    """What identifies one object across usher's LIST and kopf's events: its uid (never reused)."""
    uid = meta.get("uid")
    return str(uid) if uid else f"{meta.get('namespace') or ''}/{meta.get('name')}"


class Lister(Protocol):
    """Lists the keys of every object of one kind (the API server's, or a script in tests)."""

    async def __call__(self, group: str, plural: str) -> Collection[str] | None:
        """The `object_key` of every object of a kind, from one consistent LIST; None if the kind is not served.

        Raises on any other failure (the caller retries).
        """
        ...


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
    (A re-list by kopf before sync is covered the same way; after sync, `Reconciler` finds what it skips.)

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


Identity = tuple[str, str]
"""(namespace, name): how the sink tells objects apart, whatever their uid."""

Held = tuple[str, int, Mapping[str, Any]]
"""What was last delivered of one object: its `object_key`, the delivery's sequence number, the object itself."""


class Holdings:
    """The objects the sink was handed and not told deleted, per kind: what a missed deletion leaves behind.

    Every delivery, kopf's events and the reconciler's deletions alike, goes through
    `deliver`, which numbers it: comparing numbers tells whether an object was
    delivered after a given moment. Keyed by namespace/name like the sink, so an
    object re-created under its name replaces the old one here as it does there.

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
        identity = (meta.get("namespace") or "", meta.get("name") or "")
        self.sequence += 1
        if event_type == "DELETED":
            self.objects[plural].pop(identity, None)
        else:
            self.objects[plural][identity] = (object_key(meta), self.sequence, raw)
        _deliver(self._deliveries[plural], plural, event_type, raw)


class DeletionRecorder(Protocol):
    """Counts the deletions the reconciler found that the watch never reported (the metrics adapter)."""

    def missed_deletion(self, kind: str) -> None:
        """One object of ``kind`` (a plural) was found deleted though the watch never said so."""
        ...


class Reconciler:
    """Delivers a DELETED for each object the sink holds that no longer exists: the deletions kopf missed.

    kopf re-lists a kind after its watch expired and delivers what it finds,
    but says nothing of the objects deleted in between (client-go's informers
    would send DeletedFinalStateUnknown). Every ``interval`` seconds, each kind
    is listed (metadata only, paginated) and a held object is declared gone
    only when all of this holds:

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


class ListingError(RuntimeError):
    """A LIST answered neither with the objects nor with 404."""


METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
"""Names and uids are all the sync needs: the API server sends metadata only (kopf lists the objects)."""


def api_lister(api: KubeApi, *, page_size: int = 500) -> Lister:
    """A `Lister` through usher's API client: paginated, so one consistent snapshot per kind."""

    async def list_keys(group: str, plural: str) -> Collection[str] | None:
        base = api_path(group, plural)
        keys: list[str] = []
        token = ""
        while True:
            page = f"{base}?limit={page_size}" + (f"&continue={quote(token, safe='')}" if token else "")
            result = await api.request("GET", page, accept=METADATA_ONLY)
            if result.status == 404 and not token:
                return None
            if not result.ok:
                raise ListingError(f"GET {base}: {result.message}")
            keys.extend(object_key(item.get("metadata") or {}) for item in result.body.get("items") or ())
            token = (result.body.get("metadata") or {}).get("continue") or ""
            if not token:
                return keys

    return list_keys


async def discover(
    api: KubeApi,
    kinds: Iterable[Kind],
    *,
    attempts: int = 5,
    retry: float = 1.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> tuple[Kind, ...]:
    """Which of ``kinds`` the API server serves, from its discovery documents (one GET per group version).

    A 404 means the group version is not served (a beta API the API server was not told to serve).
    Any other failure is retried ``attempts`` times, ``retry`` seconds apart and doubling; then the
    kinds of that group version count as not served, with a warning: usher starts without them.
    """
    served: list[Kind] = []
    by_version: dict[str, list[Kind]] = {}
    for group, plural in kinds:
        by_version.setdefault(f"/apis/{group}/{version(group, plural)}" if group else "/api/v1", []).append(
            (group, plural)
        )
    for path, wanted in by_version.items():
        delay = retry
        for attempt in range(1, attempts + 1):
            try:
                result = await api.request("GET", path)
            except Exception as error:  # a connection failure: retried like a 5xx
                reason = f"{type(error).__name__}: {error}"
            else:
                if result.status == 404:
                    break
                if result.ok:
                    names = {r.get("name") for r in result.body.get("resources") or () if isinstance(r, Mapping)}
                    served.extend(kind for kind in wanted if kind[1] in names)
                    break
                reason = result.message
            if attempt == attempts:
                logger.warning("discovering %s failed (%s): starting without %s", path, reason, wanted)
                break
            await sleep(delay)
            delay *= 2
    return tuple(served)
