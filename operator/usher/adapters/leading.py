"""Leader election on a coordination.k8s.io Lease.

Only the leader schedules. Followers run everything else (watches, cache,
queue) so they take over warm within the lease duration. The rules are
client-go's:

- a candidate takes the Lease when it does not exist, when it has no holder,
  or when its record (holder, renewTime) has not changed for the lease
  duration *as observed by this candidate's own clock* (clocks of different
  machines are never compared);
- the leader renews every retry period; every write carries the Lease's
  resourceVersion, so two candidates never both win;
- a leader that cannot renew within the renew deadline has lost: it stops
  scheduling at once and usher exits, as kube-scheduler does, to come back
  as a follower;
- on a clean shutdown the leader releases the Lease (empty holder) so a
  follower takes over at once instead of after the lease duration.

Fencing. A follower takes over no earlier than ``lease_duration`` after it
saw the last renewal, and it saw it after the API server stored it. The
leader counts its renew deadline from the moment it *sent* that renewal
(before the server stored it), and every Lease call it makes carries a
timeout that ends at that deadline (as client-go's renew bounds its requests
by a context), so a stalled API server cannot hold the leader past it. Hence
the leader clears ``leading`` (and calls ``on_lost``) at most
``renew_deadline`` after the stored renewal, strictly before any follower may
acquire (``renew_deadline < lease_duration`` is validated by the config).
Because a busy event loop can delay the elector's wake-up, the dispatcher
also asks ``holds()`` right before sending each binding.
Time is the injected monotonic ``Clock``; sleeping is injected too, so the
unit tests drive all of it on virtual time.

(The Kubernetes client's own async elector is not used: in client 37 its
LeaseLock fails to create a Lease at all.)
"""

from __future__ import annotations

import asyncio
import datetime
import logging
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


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """Where the Lease lives and the three durations of kube-scheduler's leaderElection block."""

    name: str
    namespace: str
    lease_duration: float = 15.0
    """A follower takes the Lease over once its record has not changed for this long (by its own clock)."""
    renew_deadline: float = 10.0
    """The leader stops scheduling once this long has passed since it sent its last successful renewal."""
    retry_period: float = 2.0
    """Time between two attempts to acquire or renew."""


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
    """LeaseApi over the API server: one named Lease."""

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
    holder: str = ""
    """The holder another candidate wrote, when the Lease is someone else's."""


class LeaderElector:
    """client-go's leader election over one Lease, fenced by the renew deadline.

    ``leading`` is set while this instance may schedule; ``holds()`` answers the
    same question at the instant of each API call, so a write queued before a
    stall is never sent after the deadline. ``on_lost`` runs once when leadership ends.
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
        self.settings = settings
        self.identity = identity or default_identity()
        self.leading = asyncio.Event()
        self._leases = leases
        self._on_lost = on_lost
        self._clock: Clock = clock or MonotonicClock()
        self._sleep = sleep
        self._recorder: LeaderRecorder = recorder or _Unrecorded()
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
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
            elif self.leading.is_set() and attempt.holder:
                self._lose(f"{attempt.holder!r} holds it now")
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

    async def _try_acquire_or_renew(self, deadline: float) -> _Attempt:
        result = await self._leases.get(timeout=self._remaining(deadline))
        if result.status == 404:
            return await self._create(deadline)
        if not result.ok:
            logger.warning("leader election: reading the lease: HTTP %d %s", result.status, result.message)
            return _Attempt()
        lease = result.body
        spec: Mapping[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        now = self._clock.now()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder == self.identity:
            return await self._write(lease, deadline, acquire=False)
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration)
        if holder and now - self._observed_at < duration:
            return _Attempt(holder=holder)  # someone else holds a live lease
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
                "leaseDurationSeconds": int(self.settings.lease_duration),
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
        if result.status != 409:  # 409: another candidate created it first
            logger.warning("leader election: creating the lease: HTTP %d %s", result.status, result.message)
        return _Attempt()

    async def _write(self, lease: Mapping[str, Any], deadline: float, *, acquire: bool) -> _Attempt:
        """PUT with the read resourceVersion: a concurrent writer makes this a 409, never a double win."""
        spec = dict(lease.get("spec") or {})
        now = _micro_time()
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = int(self.settings.lease_duration)
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
