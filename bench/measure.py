"""Measuring the scheduler_perf way: a watch counts pods gaining a nodeName, sampled every second.

scheduler_perf's throughput collector ignores samples until the first
measured pod is scheduled and drops the first non-zero sample (it covers a
partial second); average and percentiles are taken over the remaining
per-second rates. CPU seconds and peak RSS of a process come from /proc, so
the same numbers are read for usher (Python) and kube-scheduler (Go).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.kube import Api, ApiError, cancel
from bench.workloads import PHASE_LABEL

logger = logging.getLogger(__name__)

SAMPLE_INTERVAL = 1.0
PROFILE_RATE = 200
"""py-spy samples per second."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # After the command: state(0) ppid(1) ... utime(11) stime(12).
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def peak_rss_mib(pid: int) -> float:
    """The process's high-water resident set (VmHWM) in MiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting for I/O) since boot.

    Why: minus the CPU of the processes the benchmark knows, it shows how
    much other work shared the machine during a measurement.
    """
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user).
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


# --------------------------------------------------------------------------- throughput


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile, as scheduler_perf's collector computes it."""
    if not sorted_values:
        return 0.0
    rank = max(0, math.ceil(q / 100 * len(sorted_values)) - 1)
    return sorted_values[min(rank, len(sorted_values) - 1)]


def throughput_stats(samples: list[tuple[float, int]], total: int, elapsed: float) -> dict[str, Any]:
    """Per-second rates from cumulative ``(t, count)`` samples, the scheduler_perf way.

    Samples before the first scheduled pod are ignored and the first non-zero
    sample is dropped. When that leaves nothing (a run shorter than about two
    seconds, e.g. the smoke sizes), the average falls back to
    ``total / elapsed`` and the percentiles to that same value, and
    ``samples_used`` says 0.
    """
    rates: list[float] = []
    started = False
    dropped_first = False
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if not started:
            if c1 == 0:
                continue
            started = True
        if not dropped_first:
            dropped_first = True
            continue
        if t1 - t0 >= SAMPLE_INTERVAL / 2:  # a short tail (the last partial second) is too noisy to rate
            rates.append((c1 - c0) / (t1 - t0))
    overall = total / elapsed if elapsed > 0 else 0.0
    ordered = sorted(rates)
    return {
        "average": sum(rates) / len(rates) if rates else overall,
        "p50": percentile(ordered, 50) if rates else overall,
        "p90": percentile(ordered, 90) if rates else overall,
        "p99": percentile(ordered, 99) if rates else overall,
        "overall": overall,
        "samples_used": len(rates),
        "rates": [round(r, 2) for r in rates],
    }


async def list_and_watch(
    api: Api,
    path: str,
    on_event: Callable[[str, dict[str, Any]], None],
    synced: asyncio.Event,
    on_list: Callable[[list[dict[str, Any]]], None] | None = None,
) -> None:
    """List ``path``, then watch it from the list's resourceVersion, forever; list again when the watch ends.

    Every listed item is passed to ``on_event`` as "ADDED" (``on_list`` gets the whole
    listing first, so a caller can forget what disappeared meanwhile), every watch event
    with its type. ``synced`` is set after the first listing.
    """
    while True:
        listing = await api.request("GET", path)
        if on_list is not None:
            on_list(listing["items"])
        for item in listing["items"]:
            on_event("ADDED", item)
        synced.set()
        version = listing["metadata"]["resourceVersion"]
        try:
            async for event in api.watch(path, version):
                kind = event.get("type")
                if kind == "BOOKMARK":
                    continue
                if kind == "ERROR":
                    break  # e.g. 410 Gone: list again
                on_event(str(kind), event["object"])
        except (ApiError, OSError, TimeoutError) as error:
            logger.warning("watch of %s ended (%s); listing again", path, error)


def scheduling_throughput(ticks: list[tuple[float, int]]) -> dict[str, Any]:
    """scheduler_perf's SchedulingThroughput from the collector's 1 s ticks ``(t, pods scheduled since start)``.

    As its throughputCollector: ticks before the first scheduled pod are ignored and the
    first tick with pods only starts the clock; a tick that saw no new pod is skipped and the
    next rate (pods over the whole span) is recorded once per skipped tick too, so
    percentiles stay time-weighted. Average and nearest-rank Perc50/90/95/99 of the rates;
    empty (``samples_used`` 0, no statistics) when the phase took under about two seconds.
    """
    rates: list[float] = []
    started = False
    skipped = 0
    last_count = 0
    last_time = 0.0
    for t, scheduled in ticks:
        if scheduled == 0:
            continue
        if not started:
            started, last_count, last_time = True, scheduled, t
            continue
        new = scheduled - last_count
        if new == 0:
            skipped += 1
            continue
        rates.extend([new / (t - last_time)] * (skipped + 1))
        last_count, last_time, skipped = scheduled, t, 0
    ordered = sorted(rates)
    out: dict[str, Any] = {"samples_used": len(rates), "rates": [round(r, 2) for r in rates]}
    if rates:
        out["average"] = sum(rates) / len(rates)
        for name, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
            out[name] = percentile(ordered, q)
    return out


class CpuMeter:
    """CPU seconds of named processes, the harness and the whole machine between `start` and `stop`.

    ``other_cpu_s`` is what the machine spent on anything else (another user's work): noise.
    """

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self._before: dict[str, float] = {}
        self._machine = 0.0
        self._harness = 0.0

    def start(self) -> None:
        self._before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._machine = busy_cpu_seconds()
        self._harness = time.process_time()

    def stop(self) -> dict[str, float]:
        """``<name>_cpu_s`` per process, ``harness_cpu_s`` and ``other_cpu_s``."""
        out = {f"{name}_cpu_s": round(cpu_seconds(pid) - self._before[name], 2) for name, pid in self.pids.items()}
        out["harness_cpu_s"] = round(time.process_time() - self._harness, 2)
        known = sum(out.values())
        out["other_cpu_s"] = round(max(0.0, busy_cpu_seconds() - self._machine - known), 2)
        return out


async def wait_until(
    changed: asyncio.Event,
    condition: Callable[[], bool],
    seconds: float,
    what: str,
    check: Callable[[], None] | None = None,
    *,
    settle: float = 0.0,
) -> None:
    """Wait until ``condition`` holds, re-checking whenever ``changed`` is set (and at least every second).

    ``check`` runs at every re-check and may raise (the scheduler died): fail at once, not at
    the timeout. ``settle`` waits that long after a change before re-checking, so a burst of
    changes costs one check. TimeoutError names ``what``.
    """
    deadline = time.monotonic() + seconds
    while not condition():
        if check is not None:
            check()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"timed out after {seconds:g} s waiting for {what}")
        changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(1.0, remaining))
        if settle:
            await asyncio.sleep(min(settle, max(0.0, deadline - time.monotonic())))


@dataclass
class PodWatcher:
    """Watches every pod of one namespace and remembers when each first had a nodeName.

    Why one watch for the whole run: a LIST per sample would cost the API
    server more than the scheduler under test, and a watch sees every
    binding within milliseconds.
    """

    api: Api
    namespace: str
    bound_at: dict[str, float] = field(default_factory=dict)
    phase_of: dict[str, str] = field(default_factory=dict)
    bound_by_phase: dict[str, int] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _synced: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pod-watcher")
        await self._synced.wait()

    async def stop(self) -> None:
        await cancel([self._task])

    def _see(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        if name not in self.phase_of:
            self.phase_of[name] = (meta.get("labels") or {}).get(PHASE_LABEL, "")
        if name not in self.bound_at and pod.get("spec", {}).get("nodeName"):
            self.bound_at[name] = time.monotonic()
            phase = self.phase_of[name]
            self.bound_by_phase[phase] = self.bound_by_phase.get(phase, 0) + 1
            self._changed.set()

    async def _run(self) -> None:
        await list_and_watch(
            self.api, f"/api/v1/namespaces/{self.namespace}/pods", lambda _kind, pod: self._see(pod), self._synced
        )

    def bound(self, phase: str) -> int:
        return self.bound_by_phase.get(phase, 0)

    async def wait(
        self, condition: Callable[[], bool], seconds: float, what: str, check: Callable[[], None] | None = None
    ) -> None:
        """Wait until ``condition`` holds, re-checking on every binding (and at least every second).

        ``check`` runs at every re-check and may raise (the scheduler died): fail at once, not at the timeout.
        """
        await wait_until(self._changed, condition, seconds, what, check)


class Sampler:
    """Samples a cumulative count every second, from a start until stopped."""

    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count
        self.samples: list[tuple[float, int]] = []
        self.started = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.started = time.monotonic()
        self.samples = [(0.0, self._count())]
        self._task = asyncio.create_task(self._run(), name="sampler")

    async def _run(self) -> None:
        tick = self.started
        while True:
            tick += SAMPLE_INTERVAL
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
            self.samples.append((time.monotonic() - self.started, self._count()))

    async def stop(self) -> None:
        """Stop and take a last sample, so the final partial second is counted as scheduler_perf does."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.samples.append((time.monotonic() - self.started, self._count()))


def start_profiler(pid: int, out: Path, log: Path) -> subprocess.Popen[bytes]:
    """py-spy on process ``pid`` into ``out`` (collapsed stacks, for ``bench.profile``) until ``stop_profiler``."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--rate", str(PROFILE_RATE), "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    """Stop py-spy; it writes its file on SIGINT."""
    if profiler is None:
        return
    profiler.send_signal(signal.SIGINT)
    try:
        profiler.wait(timeout=30)
    except subprocess.TimeoutExpired:
        profiler.kill()
