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

(The Kubernetes client's own async elector is not used: in client 37 its
LeaseLock fails to create a Lease at all.)
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from usher.adapters.kubeapi import ApiResult, KubeApi

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    name: str
    namespace: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def default_namespace() -> str:
    """The pod's own namespace in a cluster, else ``default``."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        settings: LeaseSettings,
        api: KubeApi,
        on_lost: Callable[[], None],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.identity = identity()
        self.leading = asyncio.Event()
        self._api = api
        self._on_lost = on_lost
        self._now = monotonic
        self._observed: tuple[str, str] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{settings.name}"

    async def run(self) -> None:
        """Campaign, then lead; returns only when leadership was lost (after calling ``on_lost``)."""
        logger.info(
            "leader election: waiting for lease %s/%s as %s", self.settings.namespace, self.settings.name, self.identity
        )
        while True:
            try:
                held = await self._try_acquire_or_renew()
            except Exception as exc:  # a transient transport error: treat like a failed renewal
                logger.warning("leader election: %s", exc)
                held = False
            now = self._now()
            if held:
                self._last_renew = now
                if not self.leading.is_set():
                    logger.info("leader election: %s leads; scheduling starts", self.identity)
                    self.leading.set()
            elif self.leading.is_set() and now - self._last_renew >= self.settings.renew_deadline:
                self.leading.clear()
                logger.error(
                    "leader election: could not renew lease %s/%s within %gs; stopping",
                    self.settings.namespace,
                    self.settings.name,
                    self.settings.renew_deadline,
                )
                self._on_lost()
                return
            await asyncio.sleep(self.settings.retry_period)

    async def release(self) -> None:
        """Give the Lease up (clean shutdown) so a follower need not wait out the lease duration."""
        if not self.leading.is_set():
            return
        self.leading.clear()
        result = await self._api.request("GET", self._path)
        if result.ok and (result.body.get("spec") or {}).get("holderIdentity") == self.identity:
            lease = dict(result.body)
            lease["spec"] = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
            await self._api.request("PUT", self._path, lease)
            logger.info("leader election: released lease %s/%s", self.settings.namespace, self.settings.name)

    async def _try_acquire_or_renew(self) -> bool:
        result = await self._api.request("GET", self._path)
        if result.status == 404:
            return (await self._create()).ok
        if not result.ok:
            logger.warning("leader election: reading the lease: HTTP %d %s", result.status, result.message)
            return False
        lease = result.body
        spec: Mapping[str, Any] = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        now = self._now()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder == self.identity:
            return (await self._write(lease, acquire=False)).ok
        duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration)
        if holder and now - self._observed_at < duration:
            return False  # someone else holds a live lease
        written = await self._write(lease, acquire=True)
        if written.ok:
            logger.info(
                "leader election: took lease %s/%s over from %r", self.settings.namespace, self.settings.name, holder
            )
        return written.ok

    async def _create(self) -> ApiResult:
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
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.settings.namespace}/leases"
        return await self._api.request("POST", path, body)

    async def _write(self, lease: Mapping[str, Any], *, acquire: bool) -> ApiResult:
        """PUT with the read resourceVersion: a concurrent writer makes this a 409, never a double win."""
        spec = dict(lease.get("spec") or {})
        now = _micro_time()
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = int(self.settings.lease_duration)
        spec["renewTime"] = now
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        return await self._api.request("PUT", self._path, {**lease, "spec": spec})
