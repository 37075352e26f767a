"""The bind limit: a "scheduler" that decides nothing and writes as fast as the API server accepts.

Why: a scheduler's throughput only means something next to the ceiling set
by the API server itself. This binder watches its pods, gives each the next
node round-robin (and, for DRA pods, the next free device of that node), and
makes exactly the writes a correct scheduler must make, with many calls in
flight: for a pod with a claim, the claim's finalizer, the claim's status
(allocation and reservedFor), then ``pods/binding``; for any other pod,
only ``pods/binding``. Everything else a real scheduler does (filtering,
scoring, queueing, events) costs zero here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from bench.kube import MERGE_PATCH, Api, ApiError
from bench.workloads import DRIVER

logger = logging.getLogger(__name__)

SCHEDULER_NAME = "bench-limit"
FINALIZER = "resource.kubernetes.io/delete-protection"


@dataclass(frozen=True, slots=True)
class _Job:
    name: str
    uid: str
    claim: str | None


class LimitBinder:
    """Binds every pending pod of ``scheduler_name`` in one namespace; start it, then stop it."""

    def __init__(
        self,
        api: Api,
        namespace: str,
        nodes: list[str],
        *,
        devices_per_node: int = 0,
        concurrency: int = 32,
        scheduler_name: str = SCHEDULER_NAME,
    ) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self.nodes = nodes
        self.devices_per_node = devices_per_node
        self.concurrency = concurrency
        self.bound = 0
        self._next = 0
        self._used_devices: dict[str, int] = {}
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._seen: set[str] = set()
        self._claims: set[str] = set()
        self._waiting_for_claim: dict[str, deque[_Job]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        ready = asyncio.Event()
        self._tasks.append(asyncio.create_task(self._watch_pods(ready), name="limit-pods"))
        await ready.wait()
        if self.devices_per_node:
            claims_ready = asyncio.Event()
            self._tasks.append(asyncio.create_task(self._watch_claims(claims_ready), name="limit-claims"))
            await claims_ready.wait()
        self._tasks += [asyncio.create_task(self._worker(), name=f"limit-bind-{i}") for i in range(self.concurrency)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    # ----------------------------------------------------------------- watches

    def _see_pod(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec", {})
        name = meta["name"]
        if name in self._seen or spec.get("nodeName") or spec.get("schedulingGates"):
            return
        if spec.get("schedulerName") != self.scheduler_name:
            return
        claim: str | None = None
        entries = spec.get("resourceClaims") or []
        if entries:
            entry = entries[0]
            claim = entry.get("resourceClaimName")
            if claim is None:  # from a template: the controller names it in the pod's status
                statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
                claim = next((s.get("resourceClaimName") for s in statuses if s.get("name") == entry["name"]), None)
                if claim is None:
                    return  # not yet; a later update carries it
        self._seen.add(name)
        job = _Job(name, meta["uid"], claim)
        if claim is not None and claim not in self._claims:
            self._waiting_for_claim.setdefault(claim, deque()).append(job)
        else:
            self._queue.put_nowait(job)

    def _see_claim(self, claim: dict[str, Any]) -> None:
        name = claim["metadata"]["name"]
        if name in self._claims:
            return
        self._claims.add(name)
        for job in self._waiting_for_claim.pop(name, ()):
            self._queue.put_nowait(job)

    async def _watch_pods(self, ready: asyncio.Event) -> None:
        await self._watch(f"/api/v1/namespaces/{self.namespace}/pods", self._see_pod, ready)

    async def _watch_claims(self, ready: asyncio.Event) -> None:
        await self._watch(
            f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims", self._see_claim, ready
        )

    async def _watch(self, path: str, see: Any, ready: asyncio.Event) -> None:
        while True:
            listing = await self.api.request("GET", path)
            for item in listing["items"]:
                see(item)
            ready.set()
            try:
                async for event in self.api.watch(path, listing["metadata"]["resourceVersion"]):
                    if event.get("type") in {"ADDED", "MODIFIED"}:
                        see(event["object"])
                    elif event.get("type") == "ERROR":
                        break
            except (ApiError, OSError) as error:
                logger.warning("limit watch of %s ended (%s)", path, error)

    # ----------------------------------------------------------------- writes

    def _place(self) -> tuple[str, int]:
        """The next node round-robin, and the index of the next free device on it."""
        node = self.nodes[self._next % len(self.nodes)]
        self._next += 1
        device = self._used_devices.get(node, 0)
        self._used_devices[node] = device + 1
        return node, device

    async def _worker(self) -> None:
        while True:
            job = await self._queue.get()
            node, device = self._place()
            try:
                if job.claim is not None:
                    await self._allocate(job, node, device)
                await self.api.request(
                    "POST",
                    f"/api/v1/namespaces/{self.namespace}/pods/{job.name}/binding",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": job.name, "uid": job.uid},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    },
                )
                self.bound += 1
            except ApiError as error:
                logger.error("limit binder: %s", error)

    async def _allocate(self, job: _Job, node: str, device: int) -> None:
        path = f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims/{job.claim}"
        await self.api.request("PATCH", path, {"metadata": {"finalizers": [FINALIZER]}}, content_type=MERGE_PATCH)
        status = {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{device}"}]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": job.name, "uid": job.uid}],
            }
        }
        await self.api.request("PATCH", path + "/status", status, content_type=MERGE_PATCH)
