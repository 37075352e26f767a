"""Leader election on a coordination.k8s.io Lease.

Only the leader schedules. Followers run everything else (watches, cache,
queue) so they take over warm within the lease duration. The rules are
client-go's (``tools/leaderelection``), with the two departures argued below
(the recorded duration, and a missing Lease):

- a candidate takes the Lease when it has no holder, or when its record (the
  Lease's spec) has not changed for the duration that record gives
  (``leaseDurationSeconds``) *as observed by this candidate's own clock*
  (clocks of different machines are never compared);
- the leader renews every retry period; every write carries the Lease's
  resourceVersion and a create of a Lease that exists is a 409, so two
  candidates never both win: a write that meets a 409 is never a win;
- a leader that cannot renew within the renew deadline has lost: it stops
  scheduling at once and usher exits, as kube-scheduler does, to come back
  as a follower; so does a leader that sees another holder, or whose create
  of its vanished Lease meets another candidate's;
- a leader that finds its Lease deleted creates it again at its next renewal
  (as client-go's tryAcquireOrRenew does on NotFound); a follower creates a
  missing Lease only once it has stayed missing for a lease duration;
- on a clean shutdown the leader releases the Lease (empty holder) so a
  follower takes over at once instead of after the lease duration.

Durations. ``spec.leaseDurationSeconds`` is an int32 of whole seconds.
client-go writes ``int(LeaseDuration / time.Second)``, truncating: with a
10.9 s lease duration and a 10.5 s renew deadline it records 10, and a
follower takes over 10 s after the last renewal while the leader believes it
holds the Lease until 10.5 s after it. usher records the lease duration
rounded *up*, ``D = ceil(lease_duration)``, so ``D >= lease_duration >
renew_deadline = R`` (the second inequality is checked here as in
NewLeaderElector, with ``R > 1.2 x retry_period`` and all three finite and
positive).

Fencing. Say the leader sent its last successful write (renewal or create)
at ``s``; the API server stored it at ``w >= s``. The leader counts its renew
deadline from ``s``, and every Lease call it makes times out by ``s + R`` (as
client-go's renew bounds its requests by a context), so a stalled API server
cannot hold it past that: ``holds()`` is false from ``s + R`` on, and the
elector clears ``leading`` and calls ``on_lost`` no later. A follower B
sends the write that makes it leader no earlier than ``s + D``:

- expired record: B first saw the record of that write at ``o >= w`` (its
  GET was answered after the store) and writes only once the record has
  stayed unchanged for the ``D`` it records: at ``>= o + D >= s + D``;
- deleted Lease: the deletion came after the store, and B first saw the
  Lease missing at ``o >= w``; B creates it only once it has stayed missing
  for ``D' = max(D of the last record B saw, its own D)``: at
  ``>= o + D' >= s + D``. A leader still holding re-creates it within a
  retry period, far sooner; B then reads that record and counts afresh. Two
  creates racing each other: one gets 409 AlreadyExists and does not lead.

``s + D > s + R``: the old leader's last binding leaves before the new
leader has even sent its winning write. Because a busy event loop can delay
the elector's wake-up, the dispatcher asks ``holds()`` right before sending
each binding. Time is the injected monotonic ``Clock``; sleeping is injected
too, so the unit tests drive all of it on virtual time.

What the argument assumes, as client-go's does: the candidates' clocks run
at the same rate to within the slack ``D - R`` per lease duration; they
share one configuration (a candidate that never saw a record counts a
missing Lease with its own ``D``); only a leader that has stopped empties the
holder, so whoever empties it by hand or re-creates an empty Lease vouches
that no leader runs; and the Lease is not deleted again within a retry
period of the leader's re-creating it (B could miss that record and count
from the first deletion): the old leader then stops at its next attempt, a
retry period later at most. The price of the missing-Lease rule: with no
Lease at all, the first candidate waits one lease duration before creating
it, since "never created" and "just deleted under a live leader" look the
same. The chart creates the Lease (empty), so an install leads at once.

The elector talks to the API server over a client of its own
(``LEASE_CONNECTIONS``), so a burst of bindings holding every connection of
the dispatcher's client cannot delay a renewal past the renew deadline.

(The Kubernetes client's own async elector is not used: in client 37 its
LeaseLock fails to create a Lease at all.)
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import math
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from usher.adapters.kubeapi import ApiResult, KubeApi
from usher.core.clock import Clock, MonotonicClock

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
JITTER_FACTOR = 1.2
"""client-go's: the renew deadline must exceed this many retry periods."""
INT32_MAX = 2**31 - 1
LEASE_CONNECTIONS = 2
"""Connections of the elector's own API client: its calls never overlap, so two leave one spare."""
_MISSING = "<no lease>"
"""The record of a Lease that does not exist (a present one's is its spec as JSON, which starts with ``{``)."""


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Where the Lease lives and the three durations of kube-scheduler's leaderElection block."""

    name: str
    namespace: str
    lease_duration: float = 15.0
    """A follower takes the Lease over once its record has not changed for this long (by its own clock),
    rounded up to the whole seconds the Lease records."""
    renew_deadline: float = 10.0
    """The leader stops scheduling once this long has passed since it sent its last successful renewal."""
    retry_period: float = 2.0
    """Time between two attempts to acquire or renew."""

    @property
    def lease_duration_seconds(self) -> int:
        """What the Lease records (``spec.leaseDurationSeconds``, whole seconds): the lease duration rounded
        *up*, so a follower that judges expiry by the record never waits less than this leader assumes."""
        return math.ceil(self.lease_duration)


def check_durations(settings: LeaseSettings) -> None:
    """NewLeaderElector's rules, which the fencing argument rests on (ValueError if broken): the lease
    duration exceeds the renew deadline, which exceeds ``JITTER_FACTOR`` retry periods; all finite and
    positive; and the recorded duration fits the Lease's int32."""
    durations = {
        "lease duration": settings.lease_duration,
        "renew deadline": settings.renew_deadline,
        "retry period": settings.retry_period,
    }
    for name, seconds in durations.items():
        if not (math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"leader election: the {name} must be a finite number of seconds above 0, got {seconds}")
    if not settings.lease_duration > settings.renew_deadline:
        raise ValueError(
            f"leader election: the lease duration ({settings.lease_duration:g}s) must be greater than "
            f"the renew deadline ({settings.renew_deadline:g}s)"
        )
    if not settings.renew_deadline > JITTER_FACTOR * settings.retry_period:
        raise ValueError(
            f"leader election: the renew deadline ({settings.renew_deadline:g}s) must be greater than "
            f"{JITTER_FACTOR:g} x the retry period ({settings.retry_period:g}s)"
        )
    if settings.lease_duration_seconds > INT32_MAX:
        raise ValueError(f"leader election: the lease duration must be at most {INT32_MAX}s (the Lease's int32)")


class LeaseApi(Protocol):
    """The Lease calls the elector makes; each must give up (TimeoutError) after ``timeout`` seconds."""

    async def get(self, *, timeout: float) -> ApiResult: ...

    async def create(self, lease: Mapping[str, Any], *, timeout: float) -> ApiResult: ...

    async def replace(self, lease: Mapping[str, Any], *, timeout: float) -> ApiResult:
        """PUT: a stale ``metadata.resourceVersion`` makes it a 409."""
        ...


class LeaderRecorder(Protocol):
    """Where the elector reports leadership (kube-scheduler's ``leader_election_master_status``)."""

    def leading_changed(self, lease: str, leading: bool) -> None: ...


class _Unrecorded:
    def leading_changed(self, lease: str, leading: bool) -> None:
        pass


class KubeLeases:
    """LeaseApi over the API server: one named Lease. Give it a client of its own (``LEASE_CONNECTIONS``)."""

    def __init__(self, api: KubeApi, *, namespace: str, name: str) -> None:
        self._api = api
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._path = f"{self._collection}/{name}"

    async def get(self, *, timeout: float) -> ApiResult:
        return await self._call("GET", self._path, None, timeout)

    async def create(self, lease: Mapping[str, Any], *, timeout: float) -> ApiResult:
        return await self._call("POST", self._collection, lease, timeout)

    async def replace(self, lease: Mapping[str, Any], *, timeout: float) -> ApiResult:
        return await self._call("PUT", self._path, lease, timeout)

    async def _call(self, method: str, path: str, body: Mapping[str, Any] | None, timeout: float) -> ApiResult:
        # The client's own timeout covers the HTTP exchange; this one also covers everything around it.
        async with asyncio.timeout(timeout):
            return await self._api.request(method, path, body, timeout=timeout)


def default_namespace() -> str:
    """The pod's own namespace in a cluster, else ``default``."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class _Attempt:
    renewed_at: float | None = None
    """When the successful write was sent (before the server stored it); None: not held."""
    taken: str = ""
    """Why the Lease is another candidate's now (its holder, or its create that came first); empty: unknown."""


class LeaderElector:
    """client-go's leader election over one Lease, fenced by the renew deadline.

    ``leading`` is set while this instance may schedule; ``holds()`` answers the
    same question at the instant of each API call, so a write queued before a
    stall is never sent after the deadline. ``on_lost`` runs once when leadership ends.
    The settings must pass ``check_durations`` (ValueError otherwise).
    """

    def __init__(
        self,
        settings: LeaseSettings,
        leases: LeaseApi,
        on_lost: Callable[[], None],
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        recorder: LeaderRecorder | None = None,
        identity: str | None = None,
    ) -> None:
        check_durations(settings)
        self.settings = settings
        self.identity = identity or default_identity()
        self.leading = asyncio.Event()
        self._leases = leases
        self._on_lost = on_lost
        self._clock: Clock = clock or MonotonicClock()
        self._sleep = sleep
        self._recorder: LeaderRecorder = recorder or _Unrecorded()
        self._observed: str | None = None
        """The Lease's record as last read (its spec as JSON, or ``_MISSING``); None before the first read."""
        self._observed_at = 0.0
        """When this instance first read ``_observed``, by its own clock (after the server stored it)."""
        self._last_duration = settings.lease_duration_seconds
        """The duration the last Lease read recorded, for counting a missing one (at least our own)."""
        self._renew_by = 0.0
        """While leading: the instant this instance must stop (its last renewal's send time + renew deadline)."""

    def holds(self) -> bool:
        """Whether this instance may act as the leader now: leading, and its renew deadline not passed.

        Read by the dispatcher right before each binding it sends, so a binding never leaves after the
        deadline even when the event loop runs it before the elector's own wake-up.
        """
        return self.leading.is_set() and self._clock.now() < self._renew_by

    async def run(self) -> None:
        """Campaign, then lead; returns only when leadership was lost (after calling ``on_lost``)."""
        logger.info(
            "leader election: waiting for lease %s/%s as %s", self.settings.namespace, self.settings.name, self.identity
        )
        self._recorder.leading_changed(self.settings.name, False)
        while True:
            now = self._clock.now()
            if self.leading.is_set() and now >= self._renew_by:
                self._lose(f"could not renew within {self.settings.renew_deadline:g}s")
                return
            # A leader's calls end by its deadline; a candidate's within one renew deadline.
            deadline = self._renew_by if self.leading.is_set() else now + self.settings.renew_deadline
            try:
                attempt = await self._try_acquire_or_renew(deadline)
            except Exception as exc:  # timeouts and transport errors: a failed attempt
                logger.warning("leader election: %s", f"{type(exc).__name__}: {exc}".rstrip(": "))
                attempt = _Attempt()
            if attempt.renewed_at is not None:
                self._renew_by = attempt.renewed_at + self.settings.renew_deadline
                if not self.leading.is_set():
                    logger.info("leader election: %s leads; scheduling starts", self.identity)
                    self.leading.set()
                    self._recorder.leading_changed(self.settings.name, True)
            elif self.leading.is_set() and attempt.taken:
                self._lose(attempt.taken)
                return
            wait = self.settings.retry_period
            if self.leading.is_set():  # wake at the deadline at the latest, not a retry period after it
                wait = min(wait, max(0.0, self._renew_by - self._clock.now()))
            await self._sleep(wait)

    def _lose(self, why: str) -> None:
        self.leading.clear()
        self._recorder.leading_changed(self.settings.name, False)
        logger.error(
            "leader election: lost lease %s/%s (%s); stopping", self.settings.namespace, self.settings.name, why
        )
        self._on_lost()

    async def release(self) -> None:
        """Give the Lease up (clean shutdown) so a follower need not wait out the lease duration."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        self._recorder.leading_changed(self.settings.name, False)
        deadline = self._clock.now() + self.settings.renew_deadline
        result = await self._leases.get(timeout=self._remaining(deadline))
        if result.ok and (result.body.get("spec") or {}).get("holderIdentity") == self.identity:
            lease = dict(result.body)
            lease["spec"] = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
            await self._leases.replace(lease, timeout=self._remaining(deadline))
            logger.info("leader election: released lease %s/%s", self.settings.namespace, self.settings.name)

    def _remaining(self, deadline: float) -> float:
        """The timeout of the next call: what is left until ``deadline``; none left is a timeout already."""
        remaining = deadline - self._clock.now()
        if remaining <= 0:
            raise TimeoutError(f"deadline passed {-remaining:.3f}s ago")
        return remaining

    def _unchanged_for(self, record: str) -> float:
        """How long the Lease has read as ``record`` by this instance's clock (0 when it just changed)."""
        now = self._clock.now()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return now - self._observed_at

    async def _try_acquire_or_renew(self, deadline: float) -> _Attempt:
        result = await self._leases.get(timeout=self._remaining(deadline))
        if result.status == 404:
            if self.leading.is_set():  # ours vanished: no follower may create it for a lease duration yet
                return await self._create(deadline)
            missing_for = self._unchanged_for(_MISSING)
            if missing_for < self._last_duration:  # a leader may still believe it holds the deleted Lease
                return _Attempt()
            attempt = await self._create(deadline)
            if attempt.renewed_at is not None:
                logger.info(
                    "leader election: created lease %s/%s, missing for %.1fs",
                    self.settings.namespace,
                    self.settings.name,
                    missing_for,
                )
            return attempt
        if not result.ok:
            logger.warning("leader election: reading the lease: HTTP %d %s", result.status, result.message)
            return _Attempt()
        lease = result.body
        spec: Mapping[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        unchanged_for = self._unchanged_for(json.dumps(spec, sort_keys=True))
        if holder == self.identity:
            return await self._write(lease, deadline, acquire=False)
        # Expiry by the duration the record gives (client-go's isLeaseValid); a record without one, by ours.
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration_seconds)
        self._last_duration = max(math.ceil(duration), self.settings.lease_duration_seconds)
        if holder and unchanged_for < duration:
            return _Attempt(taken=f"{holder!r} holds it now")  # someone else holds a live lease
        attempt = await self._write(lease, deadline, acquire=True)
        if attempt.renewed_at is not None:
            logger.info(
                "leader election: took lease %s/%s over from %r", self.settings.namespace, self.settings.name, holder
            )
        return attempt

    async def _create(self, deadline: float) -> _Attempt:
        now = _micro_time()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.settings.lease_duration_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        timeout = self._remaining(deadline)
        sent = self._clock.now()
        result = await self._leases.create(body, timeout=timeout)
        if result.ok:
            return _Attempt(renewed_at=sent)
        if result.status == 409:  # AlreadyExists: another candidate's create came first, and it leads
            return _Attempt(taken="another candidate created it first")
        logger.warning("leader election: creating the lease: HTTP %d %s", result.status, result.message)
        return _Attempt()

    async def _write(self, lease: Mapping[str, Any], deadline: float, *, acquire: bool) -> _Attempt:
        """PUT with the read resourceVersion: a concurrent writer makes this a 409, never a double win."""
        spec = dict(lease.get("spec") or {})
        now = _micro_time()
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = self.settings.lease_duration_seconds
        spec["renewTime"] = now
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        timeout = self._remaining(deadline)
        sent = self._clock.now()
        result = await self._leases.replace({**lease, "spec": spec}, timeout=timeout)
        if result.ok:
            return _Attempt(renewed_at=sent)
        if result.status != 409:
            logger.warning("leader election: writing the lease: HTTP %d %s", result.status, result.message)
        return _Attempt()
