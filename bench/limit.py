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
import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from bench.kube import MERGE_PATCH, Api, ApiError, cancel
from bench.workloads import DRIVER

logger = logging.getLogger(__name__)

SCHEDULER_NAME = "bench-limit"
FINALIZER = "resource.kubernetes.io/delete-protection"


async def bind(api: Api, namespace: str, name: str, uid: str, node: str) -> None:
    """``pods/binding``: the one write that places a pod."""
    await api.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods/{name}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


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
        await cancel(self._tasks)
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
                await bind(self.api, self.namespace, job.name, job.uid, node)
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


# --------------------------------------------------------------------------- scheduler_perf workloads


@dataclass(frozen=True, slots=True)
class _PodJob:
    namespace: str
    name: str
    uid: str
    claims: tuple[str, ...]
    """Names of the pod's ResourceClaims (in its namespace), direct or generated from templates."""


class ClusterLimitBinder:
    """The bind limit on scheduler_perf's workloads: every namespace, nodes as they appear, any claim shape.

    scheduler_perf's workloads create pods in many namespaces, create nodes between pod
    batches, and use claims of any request shape; this binder watches all of it. It still
    decides nothing: the next node round-robin. For each claim of a pod it makes the writes a
    scheduler makes, under a lock per claim: the delete-protection finalizer and an
    allocation (one made-up device per requested device, on the chosen node) if the claim has
    none, and the pod appended to ``reservedFor``; then ``pods/binding``. Preemption (deleting
    victims) and status updates of pods it could not place are writes a scheduler makes and
    this binder never does: on such workloads it is a ceiling, not a peer.
    """

    def __init__(self, api: Api, *, scheduler_name: str, concurrency: int = 32) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.concurrency = concurrency
        self.bound = 0
        self.nodes: list[str] = []
        self._node_set: set[str] = set()
        self._nodes_ready = asyncio.Event()
        self._next = 0
        self._devices: dict[str, int] = {}
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        self._reserved: dict[tuple[str, str], list[dict[str, str]]] = {}
        self._allocated: set[tuple[str, str]] = set()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._waiting: dict[tuple[str, str], list[_PodJob]] = {}
        self._seen: set[tuple[str, str, str]] = set()
        self._queue: asyncio.Queue[_PodJob] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        from bench.measure import list_and_watch

        for path, see, name in (
            ("/api/v1/nodes", self._see_node, "limit-nodes"),
            ("/apis/resource.k8s.io/v1/resourceclaims", self._see_claim, "limit-claims"),
            ("/api/v1/pods", self._see_pod, "limit-pods"),
        ):
            synced = asyncio.Event()
            self._tasks.append(asyncio.create_task(list_and_watch(self.api, path, see, synced), name=name))
            await synced.wait()
        self._tasks += [asyncio.create_task(self._worker(), name=f"limit-bind-{i}") for i in range(self.concurrency)]

    async def stop(self) -> None:
        await cancel(self._tasks)
        self._tasks = []

    # ----------------------------------------------------------------- watches

    def _see_node(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            if name in self._node_set:
                self._node_set.discard(name)
                self.nodes.remove(name)
        elif name not in self._node_set:
            self._node_set.add(name)
            self.nodes.append(name)
            self._nodes_ready.set()

    def _see_claim(self, kind: str, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        key = (meta["namespace"], meta["name"])
        if kind == "DELETED":
            self._claims.pop(key, None)
            self._reserved.pop(key, None)
            self._allocated.discard(key)
            return
        self._claims[key] = claim
        for job in self._waiting.pop(key, ()):
            self._enqueue(job)

    def _see_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec", {})
        key = (meta["namespace"], meta["name"], meta["uid"])
        if kind == "DELETED" or key in self._seen or spec.get("nodeName") or spec.get("schedulingGates"):
            return
        if spec.get("schedulerName", "default-scheduler") != self.scheduler_name:
            return
        recorded = pod.get("status", {}).get("resourceClaimStatuses") or []
        statuses = {s.get("name"): s.get("resourceClaimName") for s in recorded}
        claims: list[str] = []
        for entry in spec.get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            if name is None:
                if entry.get("resourceClaimTemplateName") and entry.get("name") not in statuses:
                    return  # the controller has not made the claim yet: a later update names it
                continue
            claims.append(name)
        self._seen.add(key)
        self._enqueue(_PodJob(meta["namespace"], meta["name"], meta["uid"], tuple(claims)))

    def _enqueue(self, job: _PodJob) -> None:
        for claim in job.claims:
            if (job.namespace, claim) not in self._claims:
                self._waiting.setdefault((job.namespace, claim), []).append(job)
                return
        self._queue.put_nowait(job)

    # ----------------------------------------------------------------- writes

    async def _worker(self) -> None:
        while True:
            job = await self._queue.get()
            await self._nodes_ready.wait()
            node = self.nodes[self._next % len(self.nodes)]
            self._next += 1
            try:
                for claim in job.claims:
                    await self._reserve(job, claim, node)
                await bind(self.api, job.namespace, job.name, job.uid, node)
                self.bound += 1
            except ApiError as error:
                logger.error("limit binder: %s", error)

    async def _reserve(self, job: _PodJob, claim_name: str, node: str) -> None:
        key = (job.namespace, claim_name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            claim = self._claims.get(key)
            if claim is None:
                raise ApiError(404, "RESERVE", f"{job.namespace}/{claim_name}", "the claim is gone")
            status = claim.get("status") or {}
            path = f"/apis/resource.k8s.io/v1/namespaces/{job.namespace}/resourceclaims/{claim_name}"
            reserved = self._reserved.get(key, list(status.get("reservedFor") or []))
            reserved = [*reserved, {"resource": "pods", "name": job.name, "uid": job.uid}]
            body: dict[str, Any] = {"status": {"reservedFor": reserved}}
            if not status.get("allocation") and key not in self._allocated:
                finalizers = list(claim["metadata"].get("finalizers") or [])
                if FINALIZER not in finalizers:
                    patch = {"metadata": {"finalizers": [*finalizers, FINALIZER]}}
                    await self.api.request("PATCH", path, patch, content_type=MERGE_PATCH)
                body["status"]["allocation"] = self._allocation(claim, node)
                self._allocated.add(key)
            await self.api.request("PATCH", path + "/status", body, content_type=MERGE_PATCH)
            self._reserved[key] = reserved

    def _allocation(self, claim: dict[str, Any], node: str) -> dict[str, Any]:
        """One made-up device of ``node`` per device the claim requests (the first alternative of a list)."""
        results = []
        for request in (claim.get("spec") or {}).get("devices", {}).get("requests") or []:
            name, exact = request["name"], request.get("exactly") or {}
            if request.get("firstAvailable"):
                exact = request["firstAvailable"][0]
                name = f"{name}/{exact['name']}"
            count = 1 if exact.get("allocationMode") == "All" else int(exact.get("count", 1))
            for _ in range(count):
                device = self._devices.get(node, 0)
                self._devices[node] = device + 1
                results.append({"request": name, "driver": DRIVER, "pool": node, "device": f"dev-{device}"})
        return {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
