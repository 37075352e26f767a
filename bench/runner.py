"""Run the benchmark: every workload against every contender, one fresh control plane per run.

    python -m bench.runner                      # the full benchmark (make bench): hand-written and upstream
    python -m bench.runner --smoke              # tiny sizes, numbers only (make bench-smoke)
    python -m bench.runner -w ClaimBurst_500 -c usher-pqh-on -c kube-scheduler-pqh-on --profile
    python -m bench.runner -u SchedulingBasic   # one of scheduler_perf's own test cases (bench/upstream.py)
    python -m bench.runner --list-upstream      # which upstream workload runs for each test case, or why none

Why a fresh control plane per (workload, contender): a scheduler sees every
node and pod of the cluster, so runs sharing an API server would share (and
pay for) each other's objects. Every run gets the same apiserver flags, an
empty etcd, and its own scheduler started before any node exists, as
scheduler_perf does. Contenders run one after another, never concurrently.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from bench import perfconfig, report
from bench.contenders import Contender, by_key
from bench.kube import MERGE_PATCH, Api, run_all
from bench.limit import SCHEDULER_NAME as LIMIT_SCHEDULER_NAME
from bench.limit import LimitBinder
from bench.measure import (
    CpuMeter,
    PodWatcher,
    Sampler,
    cpu_seconds,
    peak_rss_mib,
    percentile,
    start_profiler,
    stop_profiler,
    throughput_stats,
)
from bench.perfconfig import MAX_NODES as UPSTREAM_MAX_NODES
from bench.perfconfig import MAX_PODS as UPSTREAM_MAX_PODS
from bench.workloads import (
    CLASS_NAME,
    Kind,
    Workload,
    burst_claim_name,
    by_name,
    claim,
    device_class,
    node,
    node_name,
    node_slice,
    pod,
)
from e2e.controlplane import ControlPlane, start

if TYPE_CHECKING:  # bench.upstream imports this module: imported where used
    from bench import upstream as upstream_module

logger = logging.getLogger("bench")

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"

#: As scheduler_perf's test API server: no inflight limits, no priority and fairness.
APISERVER_ARGS: tuple[str, ...] = (
    "--max-requests-inflight=0",
    "--max-mutating-requests-inflight=0",
    "--enable-priority-and-fairness=false",
    # Its pprof handlers let the harness collect the API server's garbage before each phase (`Api.collect_garbage`).
    "--profiling=true",
)
#: The harness's kcm defaults to 200 QPS; the resourceclaim-controller makes two writes per pod
#: (the claim, the pod's status), which would cap every contender at 100 pods/s.
KCM_ARGS: tuple[str, ...] = ("--kube-api-qps=5000", "--kube-api-burst=5000")
NAMESPACE = "bench"
#: Writes in flight while the harness creates objects (scheduler_perf creates pods as fast as it can).
CREATE_CONCURRENCY = 32
#: kube-scheduler's metric recorder flushes every second: wait that long before reading counts.
METRICS_FLUSH_SECONDS = 1.5
SMOKE_NODES = 10
SMOKE_PODS = 20
#: The cluster is thrown away after a run: no graceful shutdown to wait for.
STOP_GRACE_SECONDS = 1.0


def run_header(contender: Contender) -> dict[str, Any]:
    """The fields every run's result starts with (``status`` becomes "error" or "timeout" when it fails)."""
    return {"contender": contender.key, "label": contender.label, "family": contender.family, "status": "ok"}


def component_pids(plane: ControlPlane, *, kcm: bool, scheduler: int | None) -> dict[str, int | None]:
    """The processes whose CPU a measured phase reports, by the names of its ``<name>_cpu_s`` keys."""
    pids: dict[str, int | None] = {
        "apiserver": plane.component("kube-apiserver").process.pid,
        "etcd": plane.component("etcd").process.pid,
    }
    if kcm:
        pids["kcm"] = plane.component("kube-controller-manager").process.pid
    pids["scheduler"] = scheduler
    return pids


def with_scheduler(plane: ControlPlane, contender: Contender) -> ControlPlane:
    """``plane`` with ``contender``'s scheduler launched on it (`Contender.launch`); a failed launch stops the plane
    (blocking: the plane-starting thread calls it)."""
    try:
        contender.launch(plane)
    except BaseException:
        plane.stop(STOP_GRACE_SECONDS)
        raise
    return plane


async def start_after(current: asyncio.Future[ControlPlane], start_plane: Callable[[], ControlPlane]) -> ControlPlane:
    """The next run's plane, started (in a thread) once ``current`` (this run's) is up or has failed to start:
    one plane starts at a time."""
    await asyncio.wait([current])
    return await asyncio.to_thread(start_plane)


async def settled(work: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for other planes' starts and stops before measuring (their failures are their runs')."""
    if work:
        waited = time.monotonic()
        await asyncio.wait(work)
        logger.info("measuring after %.1f s waiting for other control planes", time.monotonic() - waited)


async def clean_after_stop(stopping: asyncio.Task[None] | None, workdir: Path, keep: bool) -> None:
    """Once the run's plane has stopped: remove its work directory (only etcd's data when ``keep``)."""
    if stopping is not None:
        await asyncio.wait([stopping])
    await asyncio.to_thread(shutil.rmtree, workdir / "etcd" if keep else workdir, True)


class PlaneRun(Protocol):
    """One run on a control plane of its own (``Run``, ``upstream.UpstreamRun``), as `overlapped` drives it."""

    @property
    def workdir(self) -> Path: ...

    @property
    def stopping(self) -> asyncio.Task[None] | None:
        """The plane's shutdown, once ``execute`` has returned."""
        ...

    def start_plane(self) -> ControlPlane: ...

    async def execute(
        self, plane_task: asyncio.Future[ControlPlane] | None = None, settle: Sequence[asyncio.Future[Any]] = ()
    ) -> dict[str, Any]: ...


R = TypeVar("R", bound=PlaneRun)


async def overlapped(order: list[R], *, keep: bool, prestart: bool = False) -> AsyncIterator[tuple[R, dict[str, Any]]]:
    """Execute the runs in turn, yielding each with its result; control planes start and stop outside measured
    phases. The caller may append runs to ``order`` as results come in; they run too (their planes start during
    a run like the others' if appended before the last run starts).

    The next run's plane starts (once this run's is up, `start_after`) and the previous run's stops while a run
    sets up; its first measured phase waits for both (`settled`). With ``prestart`` (smoke runs) the next plane
    starts at once and nothing waits for other planes. A run's work directory is removed once its plane has
    stopped, unless ``keep`` or the run failed (then ``result["workdir"]`` names it).
    """
    upcoming: asyncio.Future[ControlPlane] | None = None
    cleanups: list[asyncio.Task[None]] = []
    for i, run in enumerate(order):
        plane = upcoming or asyncio.ensure_future(asyncio.to_thread(run.start_plane))
        settle: list[asyncio.Future[Any]] = [] if prestart else list(cleanups[-1:])
        upcoming = None
        if i + 1 < len(order):
            start_next = order[i + 1].start_plane
            upcoming = asyncio.ensure_future(
                asyncio.to_thread(start_next) if prestart else start_after(plane, start_next)
            )
            if not prestart:
                settle.append(upcoming)
        result = await run.execute(plane, settle)
        kept = keep or result["status"] != "ok"
        if kept:
            result["workdir"] = str(run.workdir)
        cleanups.append(asyncio.create_task(clean_after_stop(run.stopping, run.workdir, kept)))
        yield run, result
    await asyncio.gather(*cleanups)


def phase_timeout(pods: int) -> float:
    """How long one phase may take before the run is recorded as timed out (never a pass/fail timing)."""
    return 120.0 + 0.5 * pods


# --------------------------------------------------------------------------- one run


class Run:
    """One workload against one contender on its own control plane."""

    def __init__(
        self, workload: Workload, contender: Contender, workdir: Path, profile_dir: Path | None, repetition: int = 0
    ) -> None:
        self.workload = workload
        self.contender = contender
        self.workdir = workdir
        self.profile_dir = profile_dir
        self.repetition = repetition
        self.result: dict[str, Any] = {
            **run_header(contender),
            "pre_queueing_hints": contender.pre_queueing_hints,
            "repetition": repetition,
        }
        self.nodes = [node_name(i) for i in range(workload.nodes)]
        self.api: Api  # set once the control plane is up
        self.stopping: asyncio.Task[None] | None = None
        """The plane's shutdown, in a thread: the next run starts meanwhile."""
        self._settle: list[asyncio.Future[Any]] = []

    def start_plane(self) -> ControlPlane:
        """This run's control plane, its scheduler launched (blocking: run it in a thread)."""
        plane = start(
            self.workdir,
            extra_apiserver_args=APISERVER_ARGS,
            kcm=False,  # the hand-written workloads need no controller (claims are made by the harness)
            kwok=False,
            **self.contender.plane_kwargs(self.workdir),
        )
        return with_scheduler(plane, self.contender)

    async def execute(
        self, plane_task: asyncio.Future[ControlPlane] | None = None, settle: Sequence[asyncio.Future[Any]] = ()
    ) -> dict[str, Any]:
        """Run the workload on the plane ``plane_task`` starts (one is started if None); the plane is stopped
        (``stopping``). ``settle``: work elsewhere on the machine the first measured phase waits for."""
        w, c = self.workload, self.contender
        logger.info("=== %s / %s (run %d)", w.name, c.label, self.repetition + 1)
        started = time.monotonic()
        self._settle = list(settle)
        try:
            plane = await (plane_task if plane_task is not None else asyncio.to_thread(self.start_plane))
        except Exception as error:
            logger.exception("%s / %s: the control plane did not start", w.name, c.label)
            self.result.update(status="error", error=f"{type(error).__name__}: {error}")
            return self.result
        try:
            plane.create_namespace(NAMESPACE)
            async with Api(plane, connections=CREATE_CONCURRENCY + 8) as api:
                self.api = api
                watcher = PodWatcher(api, NAMESPACE)
                await watcher.start()
                try:
                    await c.start(plane, api, NAMESPACE, self.nodes, w.devices_per_node)
                    await self._phases(plane, api, watcher)
                except Exception as error:  # recorded, so one failing run does not lose the others
                    logger.exception("%s / %s failed", w.name, c.label)
                    self.result["status"] = "timeout" if isinstance(error, TimeoutError) else "error"
                    self.result["error"] = f"{type(error).__name__}: {error}"
                finally:
                    pid = c.pid
                    if pid is not None:
                        self.result.setdefault("scheduler", {})["peak_rss_mib"] = round(peak_rss_mib(pid), 1)
                        self.result["scheduler"]["cpu_s_total"] = round(cpu_seconds(pid), 2)
                    await c.stop()
                    await watcher.stop()
        finally:
            c.discard(plane)
            self.stopping = asyncio.create_task(asyncio.to_thread(plane.stop, STOP_GRACE_SECONDS))
        self.result["run_seconds"] = round(time.monotonic() - started, 1)
        return self.result

    async def _phases(self, plane: ControlPlane, api: Api, watcher: PodWatcher) -> None:
        w = self.workload
        t = time.monotonic()
        await self._create_nodes(api)
        self.result["setup_seconds"] = round(time.monotonic() - t, 2)

        if w.init_pods:
            t = time.monotonic()
            await self._create_pods("init", w.init_pods)
            await watcher.wait(
                lambda: watcher.bound("init") >= w.init_pods,
                phase_timeout(w.init_pods),
                "init pods bound",
                self.contender.ensure_alive,
            )
            self.result["init_seconds"] = round(time.monotonic() - t, 2)

        if w.gated_pods:
            await self._create_pods("gated", w.gated_pods)
            await self._wait_pending(w.gated_pods, "gated pods in the scheduler's queue")
        if w.kind is Kind.CLAIM_BURST:
            await self._create_pods("measured", w.measured_pods)
            await self._wait_pending(w.measured_pods, "pods waiting for their claims")

        async def create_measured() -> None:
            if w.kind is Kind.CLAIM_BURST:
                claims = [claim(burst_claim_name(i), CLASS_NAME) for i in range(w.measured_pods)]
                await run_all(claims, lambda body: self._post(api, "resourceclaims", body), CREATE_CONCURRENCY)
            else:
                await self._create_pods("measured", w.measured_pods)

        if w.measured_pods:
            self.result["measured"] = await self._measure(
                plane, api, watcher, "measured", w.measured_pods, create_measured, profile_name=w.name
            )

        if w.ungate:
            ungated_at: dict[str, float] = {}
            names = [f"gated-{i:05d}" for i in range(w.ungate)]

            async def ungate_one(name: str) -> None:
                await api.request(
                    "PATCH",
                    f"/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                    {"spec": {"schedulingGates": None}},
                    content_type=MERGE_PATCH,
                )
                ungated_at[name] = time.monotonic()

            async def ungate() -> None:
                batch = w.ungate_batch or len(names)
                began = time.monotonic()
                for round_, first in enumerate(range(0, len(names), batch)):
                    # The workload's pace (a user releasing pods), not a wait for a condition.
                    await asyncio.sleep(max(0.0, began + round_ * w.ungate_every_s - time.monotonic()))
                    await run_all(names[first : first + batch], ungate_one, CREATE_CONCURRENCY)

            profile = f"{w.name}.ungate" if w.paced else None
            result = await self._measure(plane, api, watcher, "gated", w.ungate, ungate, profile_name=profile)
            latencies = sorted(
                max(0.0, watcher.bound_at[n] - ungated_at[n])
                for n in names
                if n in watcher.bound_at and n in ungated_at
            )
            if latencies:
                result["latency_s"] = {
                    q: round(percentile(latencies, p), 3)
                    for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
                }
            self.result["ungate"] = result

        if self.contender.family == "limit" and w.kind is Kind.GATED:
            self.result["bind_only"] = await self._bind_only(plane, api, watcher)

    async def _bind_only(self, plane: ControlPlane, api: Api, watcher: PodWatcher) -> dict[str, Any]:
        """The pure binding rate: pods created first (nobody binds them), then bound as fast as possible.

        Why besides the limit's ordinary run: there, as for the schedulers,
        pods are created while they are bound, so creation shares the API
        server with binding; this is how fast the API server accepts
        ``pods/binding`` alone, on the same cluster state.
        """
        count = self.workload.measured_pods
        hold = f"{LIMIT_SCHEDULER_NAME}-later"
        await run_all(
            range(count),
            lambda i: self._post(api, "pods", pod(f"bindonly-{i:05d}", hold, "bindonly")),
            CREATE_CONCURRENCY,
        )
        await watcher.wait(
            lambda: sum(1 for p in watcher.phase_of.values() if p == "bindonly") >= count, 60, "bind-only pods seen"
        )
        binder = LimitBinder(api, NAMESPACE, self.nodes, scheduler_name=hold)

        async def bind() -> None:
            await binder.start()

        try:
            return await self._measure(plane, api, watcher, "bindonly", count, bind, profile_name=None)
        finally:
            await binder.stop()

    async def _measure(
        self,
        plane: ControlPlane,
        api: Api,
        watcher: PodWatcher,
        phase: str,
        count: int,
        action: Callable[[], Awaitable[None]],
        *,
        profile_name: str | None,
    ) -> dict[str, Any]:
        """Run ``action`` (which creates or releases ``count`` pods of ``phase``) and measure their binding."""
        await settled(self._settle)
        self._settle = []
        c = self.contender
        pid = c.pid
        meter = CpuMeter(component_pids(plane, kcm=False, scheduler=pid))
        gc_cycles = await api.collect_garbage()
        metrics_before = await c.metrics() or {}
        meter.start()
        base = watcher.bound(phase)
        sampler = Sampler(lambda: watcher.bound(phase) - base)
        profiler = self._start_profiler(pid, profile_name)
        sampler.start()
        t0 = time.monotonic()
        status = "ok"
        try:
            await action()
            await watcher.wait(
                lambda: watcher.bound(phase) - base >= count,
                phase_timeout(count),
                f"{phase} pods bound",
                c.ensure_alive,
            )
        except TimeoutError:
            status = "timeout"
        finally:
            elapsed = time.monotonic() - t0
            await sampler.stop()
            stop_profiler(profiler)
        bound = watcher.bound(phase) - base
        out: dict[str, Any] = {
            "status": status,
            "pods": count,
            "bound": bound,
            "elapsed_s": round(elapsed, 3),
            **throughput_stats(sampler.samples, bound, elapsed),
            "samples": [[round(t, 3), n] for t, n in sampler.samples],
            # CPU of the scheduler, kube-apiserver, etcd (and kcm), the harness, and anything else (noise).
            **meter.stop(),
            "apiserver_gc_cycles": await api.gc_cycles() - gc_cycles,
        }
        if pid:
            # kube-scheduler flushes its metrics asynchronously, once a second.
            await asyncio.sleep(METRICS_FLUSH_SECONDS)
        metrics_after = await c.metrics() or {}
        for key in ("hint_invocations", "pre_hint_evaluations", "pre_hint_narrowed", "pre_hint_all_pods"):
            if key in metrics_after:
                out[key] = int(metrics_after[key] - metrics_before.get(key, 0))
        if status != "ok":
            self.result["status"] = "timeout"
            self.result["error"] = f"only {bound} of {count} {phase} pods bound in {phase_timeout(count):g} s"
        logger.info("%s: %d/%d bound in %.1f s, average %.1f pods/s", phase, bound, count, elapsed, out["average"])
        return out

    def _start_profiler(self, pid: int | None, name: str | None) -> subprocess.Popen[bytes] | None:
        """py-spy on usher for the measured phase only (collapsed stacks, for `bench.profile`)."""
        if self.profile_dir is None or pid is None or name is None or self.contender.family != "usher":
            return None
        out = self.profile_dir / f"{name}.{self.contender.key}-{self.repetition}.txt"
        return start_profiler(pid, out, self.workdir / "logs" / "py-spy.log")

    # ----------------------------------------------------------------- objects

    async def _post(self, api: Api, plural: str, body: dict[str, Any]) -> None:
        group = "/api/v1" if plural == "pods" else "/apis/resource.k8s.io/v1"
        await api.request("POST", f"{group}/namespaces/{NAMESPACE}/{plural}", body)

    async def _create_nodes(self, api: Api) -> None:
        """Nodes, then (DRA) a DeviceClass, a ResourceSlice per node and the claim template.

        The TaintNodesByCondition admission plugin puts the not-ready taint on
        every new node, and no node-lifecycle-controller runs to lift it (no
        kubelet would keep leases fresh), so the harness lifts it itself.
        """
        w = self.workload

        async def add(index: int) -> None:
            await api.request("POST", "/api/v1/nodes", node(index))
            await api.request(
                "PATCH", f"/api/v1/nodes/{node_name(index)}", {"spec": {"taints": None}}, content_type=MERGE_PATCH
            )

        await run_all(range(w.nodes), add, CREATE_CONCURRENCY)
        if w.uses_dra:
            await api.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class(CLASS_NAME))

            async def publish(name: str) -> None:
                await api.request(
                    "POST", "/apis/resource.k8s.io/v1/resourceslices", node_slice(name, w.devices_per_node)
                )

            await run_all(self.nodes, publish, CREATE_CONCURRENCY)

    async def _create_pods(self, phase: str, count: int) -> None:
        w = self.workload
        scheduler = self.contender.scheduler_name

        def body(i: int) -> dict[str, Any]:
            name = f"{phase}-{i:05d}"
            requests = dict(w.pod_requests)
            if w.kind is Kind.CLAIM_BURST:
                return pod(name, scheduler, phase, claim_name=burst_claim_name(i), requests=requests)
            return pod(name, scheduler, phase, gated=phase == "gated", requests=requests)

        async def create(i: int) -> None:
            await self._post(self.api, "pods", body(i))

        await run_all(range(count), create, CREATE_CONCURRENCY)

    async def _wait_pending(self, count: int, what: str) -> None:
        """Wait until the scheduler holds ``count`` pods it cannot schedule yet (gated or unschedulable).

        Why: the measured phase must start with the queue in the state the
        workload describes, not while the scheduler is still taking in the
        pods created just before. The limit has no queue: nothing to wait for.
        """
        if self.contender.family == "limit":
            return
        deadline = time.monotonic() + phase_timeout(count)
        held = 0.0
        while time.monotonic() < deadline:
            self.contender.ensure_alive()
            metrics = await self.contender.metrics()
            if metrics is None:
                logger.warning("no metrics from %s; waiting 5 s for %s instead", self.contender.label, what)
                await asyncio.sleep(5)
                return
            held = metrics.get("pending_gated", 0) + metrics.get("pending_unschedulable", 0)
            if held >= count:
                return
            await asyncio.sleep(0.5)
        raise TimeoutError(f"only {held:g} of {count} {what}")


# --------------------------------------------------------------------------- the whole benchmark


def _measured_commit() -> str:
    """The commit measured; "-dirty" when usher's or the harness's code differs from it (not the results files,
    which every run rewrites)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False).stdout

    changed = git(
        "status", "--porcelain", "--", "operator", "bench",
        ":(exclude)bench/results", ":(exclude)bench/RESULTS.md", ":(exclude)bench/*.png",
    )  # fmt: skip
    return git("rev-parse", "--short", "HEAD").strip() + ("-dirty" if changed.strip() else "")


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory_gib = 0.0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                memory_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    commit = _measured_commit()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": memory_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
        # Other work on the machine skews every number; this says how busy it was.
        "load_average_1m": round(os.getloadavg()[0], 2),
        "usher_commit": commit,
    }


def run_plan(
    workload: Workload, keys: list[str], repetitions: int, limit_repetitions: int, *, planned: bool, lead: int
) -> list[tuple[str, int]]:
    """(contender, repetition) in running order (``upstream.run_order``): ``repetitions`` rounds, the bind limit
    in the first ``limit_repetitions``; with ``planned``, each contender the workload's ``runs`` names in as
    many rounds as it says (none: left out)."""
    from bench.upstream import run_order

    fewer = {"limit": limit_repetitions, **(dict(workload.runs) if planned else {})}
    return run_order([k for k in keys if fewer.get(k, repetitions) > 0], repetitions, fewer, lead=lead)


async def run_workload(
    workload: Workload,
    contenders: list[Contender],
    base: Path,
    profile_dir: Path | None,
    keep: bool,
    *,
    repetitions: int = 1,
    limit_repetitions: int = 1,
    lead: int = 0,
    planned: bool = True,
) -> dict[str, Any]:
    """Every contender's runs of one workload, interleaved as scheduler_perf's are (``upstream.run_order``,
    ``lead`` its); returns the workload's result document, ``runs`` holding each contender's runs in order.
    ``planned``: the workload's own ``runs`` apply (not when the caller named the contenders)."""
    by_contender = {c.key: c for c in contenders}
    order = [
        Run(workload, by_contender[key], base / workload.name / f"{key}-{repetition}", profile_dir, repetition)
        for key, repetition in run_plan(
            workload, list(by_contender), repetitions, limit_repetitions, planned=planned, lead=lead
        )
    ]
    runs: dict[str, list[dict[str, Any]]] = {run.contender.key: [] for run in order}
    async for run, result in overlapped(order, keep=keep):
        runs[run.contender.key].append(result)
    return {
        "workload": {
            "name": workload.name,
            "kind": str(workload.kind),
            "nodes": workload.nodes,
            "init_pods": workload.init_pods,
            "measured_pods": workload.measured_pods,
            "devices_per_node": workload.devices_per_node,
            "gated_pods": workload.gated_pods,
            "ungate": workload.ungate,
            "ungate_batch": workload.ungate_batch,
            "ungate_every_s": workload.ungate_every_s,
            "description": workload.description,
        },
        "apiserver_args": list(APISERVER_ARGS),
        "repetitions": {key: len(done) for key, done in runs.items()},
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "runs": runs,
    }


def suites(args: argparse.Namespace) -> tuple[bool, bool]:
    """(run the hand-written workloads, run scheduler_perf's): ``-w``/``-u`` pick, otherwise ``--suite``."""
    if args.workload or args.upstream:
        return bool(args.workload), bool(args.upstream)
    return args.suite in {"all", "hand-written"}, args.suite in {"all", "upstream"}


def upstream_options(args: argparse.Namespace) -> upstream_module.Options:
    """The scheduler_perf suite's options from the command line (smoke: one run each, planes started ahead)."""
    from bench import upstream

    keys = [k for k in args.contender or [] if k in upstream.CONTENDER_KEYS]
    # --repetitions (and smoke's one run) hold for every workload, short ones too.
    given = args.repetitions if args.repetitions is not None else (1 if args.smoke else None)
    return upstream.Options(
        smoke=bool(args.smoke),
        repetitions=given if given is not None else upstream.REPETITIONS,
        short_repetitions=given if given is not None else upstream.SHORT_REPETITIONS,
        limit_repetitions=(
            args.limit_repetitions if args.limit_repetitions is not None else upstream.LIMIT_REPETITIONS
        ),
        contenders=keys if args.contender else upstream.CONTENDER_KEYS,
        max_nodes=args.upstream_max_nodes,
        max_pods=args.upstream_max_pods,
        keep=bool(args.keep),
        names=args.upstream or [],
        tiers=perfconfig.TIERS if args.tier == "all" else (args.tier,),
        prestart=bool(args.smoke),
        profile_dir=Path(args.out) / "profiles" if args.profile else None,
    )


async def main_async(args: argparse.Namespace) -> int:
    from bench import upstream

    if args.list_upstream:
        print(upstream.table(upstream_options(args), Path(args.out) / upstream.RESULTS_DIRNAME))
        return 0
    hand_written, upstream_suite = suites(args)
    hand_known = {c.key for c in by_key(None)}
    known = hand_known | set(upstream.CONTENDER_KEYS)
    unknown = sorted(set(args.contender or []) - known)
    if unknown:
        raise ValueError(f"unknown contender(s) {unknown}; choose from {sorted(known)}")
    # "limit" names the bind limit in both suites.
    hand_keys = [k for k in args.contender or [] if k in hand_known]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="usher-bench-"))
    profile_dir = out / "profiles" if args.profile else None
    failed = 0
    options = upstream_options(args)
    if hand_written and (hand_keys or not args.contender):
        workloads = by_name(args.workload)
        if args.smoke:
            workloads = [w.scaled(nodes=SMOKE_NODES, pods=SMOKE_PODS) for w in workloads]
        contenders = by_key(hand_keys or None)
        for position, workload in enumerate(workloads):
            document = await run_workload(
                workload,
                contenders,
                base,
                profile_dir,
                args.keep,
                repetitions=options.repetitions,
                limit_repetitions=options.limit_repetitions,
                lead=position,
                planned=not hand_keys,
            )
            document["smoke"] = bool(args.smoke)
            (out / f"{workload.name}.json").write_text(json.dumps(document, indent=1) + "\n")
            failed += sum(1 for done in document["runs"].values() for r in done if r["status"] != "ok")
    if upstream_suite and options.contenders:
        failed += await upstream.run_all(options, out / upstream.RESULTS_DIRNAME, base)
    if args.report:
        report.write(out, Path(args.report_md), Path(args.chart))
    if not args.keep and failed == 0:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{failed} run(s) failed; results in {out}" if failed else f"all runs completed; results in {out}")
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.runner", description=__doc__.split("\n\n")[0])
    parser.add_argument("-w", "--workload", action="append", help="run only this workload (repeatable)")
    parser.add_argument("-c", "--contender", action="append", help="run only this contender (repeatable)")
    parser.add_argument("--smoke", action="store_true", help=f"tiny sizes ({SMOKE_NODES} nodes, {SMOKE_PODS} pods)")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="directory of the <workload>.json results")
    parser.add_argument("--report", action="store_true", help="also write RESULTS.md and the chart")
    parser.add_argument("--report-md", default=str(REPO / "bench" / "RESULTS.md"))
    parser.add_argument("--chart", default=str(REPO / "bench" / "throughput.png"))
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy usher's measured phases (upstream: each metrics collection) into OUT/profiles/",
    )
    parser.add_argument("--workdir", help="where control planes live (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep every run's work directory (logs)")
    upstream = parser.add_argument_group(
        "scheduler_perf's workloads (performance-config.yaml of the pinned Kubernetes module; bench/README.md)"
    )
    upstream.add_argument(
        "--suite",
        choices=("all", "hand-written", "upstream"),
        default="all",
        help="which workloads when no -w/-u names them (default: all)",
    )
    upstream.add_argument(
        "--tier",
        choices=("all", *perfconfig.TIERS),
        default="all",
        help="which sizes when no -u names them: standard (make bench), large (make bench-large), all (default)",
    )
    upstream.add_argument(
        "-u",
        "--upstream",
        action="append",
        metavar="TESTCASE[/WORKLOAD]",
        help="run only this upstream test case (its chosen workload, or the one named); repeatable",
    )
    upstream.add_argument(
        "--repetitions", type=int, help="runs per contender and upstream workload, interleaved (default 3; smoke 1)"
    )
    upstream.add_argument(
        "--limit-repetitions",
        type=int,
        help="runs of the bind limit per workload, in the first rounds (default 1)",
    )
    upstream.add_argument(
        "--upstream-max-nodes", type=int, default=UPSTREAM_MAX_NODES, help="largest workload run: nodes (%(default)s)"
    )
    upstream.add_argument(
        "--upstream-max-pods", type=int, default=UPSTREAM_MAX_PODS, help="largest workload run: pods (%(default)s)"
    )
    upstream.add_argument(
        "--list-upstream", action="store_true", help="print every upstream test case, its workload or why none; exit"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
