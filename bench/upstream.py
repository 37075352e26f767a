"""scheduler_perf's own workloads against usher, kube-scheduler and the bind limit, each run repeatedly.

For every upstream test case `bench.perfconfig.select` picks a workload (or
says why none); this module runs it, ``repetitions`` times per contender in
interleaved order (round r runs the contenders rotated by r, so drift over a
long benchmark hits every contender alike), each run on a fresh control
plane, and writes one JSON document per test case into ``results/upstream/``
(also for test cases it does not run, with the reason, so the report lists
every upstream test case).

Both schedulers get the test case's configuration: its scheduler config file
(or a default profile), with the client connection and no leader election
added, and its feature gates merged with the workload's. kube-scheduler and
the control plane (kube-apiserver, kube-controller-manager) get every gate, as
scheduler_perf sets them process-wide. usher gets the gates it knows; a gate
it does not know but whose value is kube-scheduler's default is dropped (and
listed); any other gate, or a configuration usher's parser refuses, makes the
test case "usher refuses: ..." and it is not run.

The API server runs as scheduler_perf starts it: no inflight limits, no
priority and fairness, the ServiceAccount, TaintNodesByCondition and
Priority admission plugins off (its pod templates set ``priority`` directly
and its nodes have no not-ready taint to lift), and the resource.k8s.io and
scheduling.k8s.io/v1beta1 APIs enabled when DRA or GenericWorkload is. The
controller manager runs (garbage collector and resourceclaim controller,
client QPS 5000) only for DRA or GenericWorkload test cases.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import perfconfig
from bench.contenders import (
    ATTEMPT_DURATION,
    Contender,
    gates_flag,
    histogram,
    histogram_delta,
    histogram_quantile,
    scheduler_configuration,
    upstream_contenders,
)
from bench.executor import ClusterPods, Executor
from bench.kube import Api
from bench.measure import CpuMeter, cpu_seconds, peak_rss_mib, start_profiler, stop_profiler
from bench.perfconfig import Selection, TestCase, Workload
from bench.runner import (
    APISERVER_ARGS,
    KCM_ARGS,
    STOP_GRACE_SECONDS,
    component_pids,
    machine,
    overlapped,
    phase_timeout,
    run_header,
    settled,
    with_scheduler,
)
from e2e.controlplane import ControlPlane, start

logger = logging.getLogger("bench.upstream")

REPETITIONS = 3
#: A phase under SHORT_PHASE_SECONDS (100 pods in 0.3 s) rests on the pipeline's fill and drain: the same usher's
#: rows moved 0.84x-1.14x between make bench runs. Runs of such a workload cost about 4 s, so usher and
#: kube-scheduler run it SHORT_REPETITIONS times. Only a workload measuring fewer than SHORT_PODS pods outside a
#: steady state can be that short, and whether it is shows in its first SHORT_DECIDED_AFTER rounds: 100 pods that
#: preempt take 2-5 s (GangPreemption*), and two more rounds of those would only cost make bench time.
SHORT_PODS = 200
SHORT_PHASE_SECONDS = 1.0
SHORT_DECIDED_AFTER = 2
SHORT_REPETITIONS = 5
#: The bind limit's runs per workload: it is the ceiling the schedulers are read against, not a contender
#: compared by its median, and one run of it per workload keeps ``make bench`` under 45 minutes.
LIMIT_REPETITIONS = 1
#: Under the runner's --out directory.
RESULTS_DIRNAME = "upstream"
CONTENDER_KEYS = ("usher", "kube-scheduler", "limit")
#: As scheduler_perf's test API server (mustSetupCluster).
DISABLED_ADMISSION = "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition,Priority"
DRA_APIS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1", "resource.k8s.io/v1alpha3")
WORKLOAD_APIS = ("scheduling.k8s.io/v1beta1",)
KCM_CONTROLLERS = ("garbage-collector-controller", "resourceclaim-controller")
#: scheduler_perf's per-workload timeout; a run that takes longer is recorded as timed out.
RUN_TIMEOUT_SECONDS = 30 * 60


#: Test cases usher cannot schedule (measured at their smallest sizes: every pod stays pending) or schedules by
#: other rules than kube-scheduler's, and the feature it lacks. They are not run (a run would only wait for its
#: timeout, or compare different placements); naming one with ``-u`` runs it.
USHER_LACKS: dict[str, str] = {}

# --------------------------------------------------------------------------- what each scheduler gets


@dataclass(frozen=True)
class Setup:
    """How one upstream workload runs: the gates and configuration each scheduler gets, or why it does not."""

    selection: Selection
    workload: Workload
    gates: dict[str, bool]
    usher_gates: dict[str, bool]
    dropped_for_usher: tuple[str, ...]
    config: dict[str, Any] | None
    status: str
    """"ok", or why the workload is not run: "unsupported: <op>", "usher refuses: ...", "usher lacks: ...",
    "left out: ..."."""

    @property
    def test_case(self) -> TestCase:
        return self.selection.test_case

    @property
    def needs_kcm(self) -> bool:
        return bool(self.gates.get("DynamicResourceAllocation") or self.gates.get("GenericWorkload"))

    def apiserver_args(self) -> list[str]:
        args = [*APISERVER_ARGS, DISABLED_ADMISSION]
        if self.gates:
            args.append(f"--feature-gates={gates_flag(self.gates)}")
        apis = (DRA_APIS if self.gates.get("DynamicResourceAllocation") else ()) + (
            WORKLOAD_APIS if self.gates.get("GenericWorkload") else ()
        )
        if apis:
            args.append("--runtime-config=" + ",".join(f"{api}=true" for api in apis))
        return args

    def kcm_args(self) -> list[str]:
        return [*KCM_ARGS, *((f"--feature-gates={gates_flag(self.gates)}",) if self.gates else ())]


def usher_gates(gates: Mapping[str, bool]) -> tuple[dict[str, bool], list[str], str | None]:
    """(the gates usher gets, the ones dropped for it, why usher refuses the rest or None).

    A gate usher does not know is dropped when the test case sets it to kube-scheduler's
    default at the pinned version (DynamicResourceAllocation=true: usher always has DRA);
    otherwise usher lacks the feature and refuses.
    """
    from usher.config import ConfigError
    from usher.features import FeatureGates, by_name, parse_feature_gates

    known = set(by_name(FeatureGates()))
    defaults = perfconfig.feature_defaults()
    kept: dict[str, bool] = {}
    dropped: list[str] = []
    for name, value in sorted(gates.items()):
        if name in known:
            kept[name] = value
        elif name in defaults and defaults[name].default == value:
            dropped.append(f"{name}={str(value).lower()}")
        else:
            default = f"default {str(defaults[name].default).lower()}" if name in defaults else "unknown to kube"
            return (
                kept,
                dropped,
                f"usher has no feature gate {name} "
                f"(the test case sets {str(value).lower()}, kube-scheduler's {default})",
            )
    try:
        parse_feature_gates(gates_flag(kept))
    except ConfigError as error:
        return kept, dropped, str(error)
    return kept, dropped, None


def usher_config_refusal(config: Mapping[str, Any] | None) -> str | None:
    """Why usher's own parser refuses the configuration both schedulers get, or None."""
    from usher.config import ConfigError, parse_config
    from usher.core.plugins.registry import in_tree_registry

    try:
        parse_config(scheduler_configuration(config, Path("kubeconfig")), registry=in_tree_registry())
    except ConfigError as error:
        return str(error)
    return None


def setup(selection: Selection, *, smoke: bool, force: bool = False) -> Setup:
    """The workload to run for ``selection`` (its smallest one when ``smoke``), and whether it can run.

    Among equally small workloads (they differ in feature gates: SchedulingBasic's 5Nodes turns
    SchedulerAsyncAPICalls off, 5Nodes_AsyncAPICallsEnabled on) the smoke test takes the first
    usher accepts: it tests the machinery, not usher's gates.
    """
    tc = selection.test_case
    workload = selection.bench
    if workload is None:
        workload = selection.smoke or tc.workloads[0]
        return Setup(selection, workload, tc.gates(workload), {}, (), None, f"left out: {selection.reason}")
    if smoke:
        bench = setup(selection, smoke=False, force=force)
        if bench.status != "ok":
            return bench  # the smoke test runs what the benchmark runs
        accepted = [w for w in selection.smallest if usher_gates(tc.gates(w))[2] is None]
        workload = accepted[0] if accepted else selection.smoke or workload
    gates = tc.gates(workload)
    config = tc.scheduler_config()
    kept, dropped, refusal = usher_gates(gates)
    status = "ok"
    if selection.unsupported:
        status = "; ".join(selection.unsupported)
    elif refusal is not None:
        status = f"usher refuses: {refusal}"
    elif tc.name in USHER_LACKS and not force:
        status = f"usher lacks: {USHER_LACKS[tc.name]}"
    else:
        refused_config = usher_config_refusal(config)
        if refused_config is not None:
            status = f"usher refuses: {refused_config}"
    return Setup(selection, workload, gates, kept, tuple(dropped), config, status)


# --------------------------------------------------------------------------- one run


@dataclass
class RunHooks:
    """What a metrics collection measures besides throughput: CPU, the scheduler's attempt durations and the API
    server's garbage collections (it collects once before the phase: `Api.collect_garbage`)."""

    plane: ControlPlane
    api: Api
    contender: Contender
    kcm: bool
    profile: Path | None = None
    """Where py-spy writes usher's stacks over the collection (None: not profiled; never kube-scheduler)."""
    settle: list[asyncio.Future[Any]] = field(default_factory=list)
    """What the first collection waits for (another run's plane starting or stopping); failures are theirs."""
    _meter: CpuMeter | None = None
    _before: str | None = None
    _gc_cycles: int = 0
    _profiler: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        await settled(self.settle)
        self.settle = []
        self._gc_cycles = await self.api.collect_garbage()
        self._before = await self.contender.scrape()
        self._meter = CpuMeter(component_pids(self.plane, kcm=self.kcm, scheduler=self.contender.pid))
        self._meter.start()
        pid = self.contender.pid
        if self.profile is not None and pid is not None and self.contender.family == "usher":
            self._profiler = start_profiler(pid, self.profile, self.profile.with_suffix(".log"))

    async def stop(self) -> dict[str, Any]:
        assert self._meter is not None
        out: dict[str, Any] = dict(self._meter.stop())
        stop_profiler(self._profiler)
        self._profiler = None
        out["apiserver_gc_cycles"] = await self.api.gc_cycles() - self._gc_cycles
        after = await self.contender.scrape()
        if after is not None and self._before is not None:
            out["attempt_duration_ms"] = attempt_durations(self._before, after)
        return out


def attempt_durations(before: str, after: str) -> dict[str, Any]:
    """p50/p99 (ms) and count of ``scheduler_scheduling_attempt_duration_seconds`` between two scrapes.

    Per result (``scheduled``, ``unschedulable``, ``error``) and over all of them, as
    scheduler_perf's metrics collector reports the histogram.
    """
    out: dict[str, Any] = {}
    for result in ("scheduled", "unschedulable", "error", None):
        labels = {"result": result} if result else {}
        delta = histogram_delta(
            histogram(after, ATTEMPT_DURATION, **labels), histogram(before, ATTEMPT_DURATION, **labels)
        )
        count = max(delta.values(), default=0.0)
        entry: dict[str, Any] = {"count": int(count)}
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            value = histogram_quantile(q, delta)
            entry[name] = None if value is None else round(value * 1000, 3)
        out[result or "all"] = entry
    return out


class UpstreamRun:
    """One upstream workload against one contender on its own control plane."""

    def __init__(
        self,
        plan: Setup,
        contender: Contender,
        workdir: Path,
        repetition: int,
        timeout: Callable[[int], float] = phase_timeout,
        profile: Path | None = None,
    ) -> None:
        self.plan = plan
        self.timeout = timeout
        self.profile = profile
        self.stopping: asyncio.Task[None] | None = None
        """The plane's shutdown, in a thread: the next run may start meanwhile."""
        self.contender = contender
        self.workdir = workdir
        self.result: dict[str, Any] = {**run_header(contender), "repetition": repetition}

    def start_plane(self) -> ControlPlane:
        """This run's control plane, its scheduler launched (blocking: run it in a thread)."""
        plane = start(
            self.workdir,
            extra_apiserver_args=self.plan.apiserver_args(),
            kcm=self.plan.needs_kcm,
            kwok=False,
            controllers=KCM_CONTROLLERS,
            extra_kcm_args=self.plan.kcm_args(),
            **self.contender.plane_kwargs(self.workdir),
        )
        return with_scheduler(plane, self.contender)

    async def execute(
        self, plane_task: asyncio.Future[ControlPlane] | None = None, settle: Sequence[asyncio.Future[Any]] = ()
    ) -> dict[str, Any]:
        """Run the workload on the plane ``plane_task`` starts (one is started if None); the plane is stopped.

        ``settle``: work elsewhere on the machine (other planes starting or stopping) the first metrics
        collection waits for."""
        plan, contender = self.plan, self.contender
        logger.info("=== %s/%s / %s", plan.test_case.name, plan.workload.name, contender.label)
        started = time.monotonic()
        try:
            plane = await (plane_task if plane_task is not None else asyncio.to_thread(self.start_plane))
        except Exception as error:
            logger.exception("%s / %s: the control plane did not start", plan.test_case.name, contender.label)
            self.result.update(status="error", error=f"{type(error).__name__}: {error}", phases=[])
            return self.result
        try:
            await self._run(plane, settle)
        finally:
            self.contender.discard(plane)
            self.stopping = asyncio.create_task(asyncio.to_thread(plane.stop, STOP_GRACE_SECONDS))
        self.result["run_seconds"] = round(time.monotonic() - started, 1)
        return self.result

    async def _run(self, plane: ControlPlane, settle: Sequence[asyncio.Future[Any]]) -> None:
        plan, contender = self.plan, self.contender
        async with Api(plane, connections=48) as api:
            pods = ClusterPods(api)
            await pods.start()
            executor = Executor(
                api,
                pods,
                plan.test_case,
                plan.workload,
                hooks=RunHooks(plane, api, contender, plan.needs_kcm, self.profile, settle=list(settle)),
                check=contender.ensure_alive,
                timeout=self.timeout,
            )
            try:
                await contender.start(plane, api, "", [], 0)
                async with asyncio.timeout(RUN_TIMEOUT_SECONDS):
                    await executor.run()
                if not executor.phases:
                    raise RuntimeError("the workload collected no metrics")
            except Exception as error:  # recorded, so one failing run does not lose the others
                logger.exception("%s / %s failed", plan.test_case.name, contender.label)
                self.result["status"] = "timeout" if isinstance(error, TimeoutError) else "error"
                self.result["error"] = f"{type(error).__name__}: {error}"
            finally:
                self.result["phases"] = executor.phases
                pid = contender.pid
                if pid is not None:
                    self.result["scheduler"] = {
                        "peak_rss_mib": round(peak_rss_mib(pid), 1),
                        "cpu_s_total": round(cpu_seconds(pid), 2),
                    }
                await contender.stop()
                await pods.stop()


# --------------------------------------------------------------------------- summaries


def run_numbers(run: Mapping[str, Any]) -> dict[str, float | None]:
    """The numbers of one run the report compares (its first metrics collection; scheduler_perf has one)."""
    phases = run.get("phases") or []
    if run.get("status") != "ok" or not phases:
        return {}
    phase = phases[0]
    scheduled = phase.get("scheduled") or 0
    cpu = phase.get("scheduler_cpu_s")
    attempts = (phase.get("attempt_duration_ms") or {}).get("scheduled") or {}
    return {
        "average": phase.get("average"),
        "p50": phase.get("p50"),
        "p90": phase.get("p90"),
        "p99": phase.get("p99"),
        "overall": phase.get("overall"),
        "cpu_s_per_1000_pods": (cpu / scheduled * 1000) if cpu is not None and scheduled else None,
        "peak_rss_mib": (run.get("scheduler") or {}).get("peak_rss_mib"),
        "attempt_p50_ms": attempts.get("p50"),
        "attempt_p99_ms": attempts.get("p99"),
    }


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Median, min and max of every number over a contender's completed runs."""
    numbers = [run_numbers(r) for r in runs]
    numbers = [n for n in numbers if n]
    out: dict[str, Any] = {"runs": len(runs), "completed": len(numbers)}
    for key in (
        "average",
        "p50",
        "p90",
        "p99",
        "overall",
        "cpu_s_per_1000_pods",
        "peak_rss_mib",
        "attempt_p50_ms",
        "attempt_p99_ms",
    ):
        values = [float(v) for n in numbers if (v := n.get(key)) is not None]
        out[key] = (
            {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
            if values
            else None
        )
    return out


# --------------------------------------------------------------------------- the whole suite


@dataclass
class Options:
    smoke: bool = False
    repetitions: int = REPETITIONS
    short_repetitions: int = SHORT_REPETITIONS
    """The repetitions of a workload whose phases turn out short (`may_be_short`, `short_phases`)."""
    limit_repetitions: int = LIMIT_REPETITIONS
    """The bind limit runs in the first ``min(repetitions, limit_repetitions)`` rounds only."""
    contenders: Sequence[str] = CONTENDER_KEYS
    max_nodes: int = perfconfig.MAX_NODES
    max_pods: int = perfconfig.MAX_PODS
    keep: bool = False
    names: Sequence[str] = field(default_factory=list)
    tiers: Sequence[str] = perfconfig.TIERS
    """Which sizes run when ``names`` is empty: ``standard`` (``make bench``), ``large`` (``make bench-large``)."""
    prestart: bool = False
    """Start the next run's control plane while a run works, and stop planes in the background (smoke only)."""
    profile_dir: Path | None = None
    """py-spy usher over each metrics collection, into ``<TestCase>.<workload>.usher-<repetition>.txt`` here."""

    def timeout(self, pods: int) -> float:
        """How long one wait for ``pods`` may take before the run is recorded as timed out (never a pass/fail).

        Smoke sizes schedule in a second or two: a minute means the scheduler does not schedule them.
        """
        return 60.0 + 0.5 * pods if self.smoke else phase_timeout(pods)


def selections(options: Options) -> list[Selection]:
    """Every upstream test case with its chosen workload; ``names`` (``TestCase`` or ``TestCase/workload``) filter.

    Naming a workload runs it even when the size limits would leave it out.
    """
    test_cases = perfconfig.load_all()
    chosen = perfconfig.select(test_cases, max_nodes=options.max_nodes, max_pods=options.max_pods)
    if not options.names:
        extras = [] if options.smoke else perfconfig.extras(test_cases)
        return [s for s in (*chosen, *extras) if s.tier in options.tiers]
    by_name = {s.key: s for s in chosen}
    out: list[Selection] = []
    for name in options.names:
        case, _, workload = name.partition("/")
        if case not in by_name:
            raise ValueError(f"unknown upstream test case {case!r}; choose from {sorted(by_name)}")
        selection = by_name[case]
        if workload:
            picked = selection.test_case.workload(workload)
            selection = Selection(
                selection.test_case, picked, picked, unsupported=selection.unsupported, smallest=(picked,)
            )
        out.append(selection)
    return out


def may_be_short(size: perfconfig.Size, options: Options) -> bool:
    """Whether a workload of ``size`` runs more rounds if its phases turn out short (`short_phases`)."""
    return options.short_repetitions > options.repetitions and (
        size.measured_pods < SHORT_PODS and not size.steady_seconds
    )


def short_phases(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> bool | None:
    """Whether usher's and kube-scheduler's measured phases last under ``SHORT_PHASE_SECONDS`` (the median of all
    their completed runs' measured phases); None until each has run ``SHORT_DECIDED_AFTER`` times."""
    schedulers = [runs.get(key, ()) for key in ("usher", "kube-scheduler")]
    if any(len(done) < SHORT_DECIDED_AFTER for done in schedulers):
        return None
    seconds = [
        phase["elapsed_s"]
        for done in schedulers
        for run in done
        if run.get("status") == "ok"
        for phase in run.get("phases") or ()
        if phase.get("elapsed_s") is not None
    ]
    return bool(seconds) and statistics.median(seconds) < SHORT_PHASE_SECONDS


def run_order(
    keys: Sequence[str], repetitions: int, fewer: Mapping[str, int], *, lead: int = 0
) -> list[tuple[str, int]]:
    """(contender, repetition) in running order: round r runs the contenders rotated by ``lead`` + r, so slow
    drift hits each alike; a contender ``fewer`` names (the bind limit) runs in its first ``fewer[key]`` rounds
    only. A workload's first run is the one whose control plane starts with nothing prestarted; the runner
    passes each workload its position as ``lead``, so that first run is not always the same contender's."""
    order = []
    for repetition in range(repetitions):
        turn = (lead + repetition) % len(keys)
        for key in [*keys[turn:], *keys[:turn]]:
            if repetition < fewer.get(key, repetitions):
                order.append((key, repetition))
    return order


class Case:
    """One test case's runs (every contender, interleaved: `run_order` with ``lead``) and its result document."""

    def __init__(self, selection: Selection, options: Options, base: Path, *, lead: int = 0) -> None:
        self.options, self.base, self.lead = options, base, lead
        self.plan = plan = setup(selection, smoke=options.smoke, force=bool(options.names))
        tc = plan.test_case
        self.document: dict[str, Any] = {
            "kind": "upstream",
            "test_case": tc.name,
            "group": tc.group,
            "file": str(tc.file.relative_to(perfconfig.module_dir().parent)),
            "workload": {
                "name": plan.workload.name,
                "params": dict(plan.workload.params),
                "labels": list(tc.labels_of(plan.workload)),
                "stand_in": selection.stand_in and not options.smoke,
                "size": _size(tc, plan.workload),
            },
            "reason": selection.reason,
            "tier": selection.tier,
            "feature_gates": plan.gates,
            "usher_feature_gates": plan.usher_gates,
            "dropped_for_usher": list(plan.dropped_for_usher),
            "scheduler_config": plan.config,
            "status": plan.status,
            "smoke": options.smoke,
            "repetitions": options.repetitions,
            "limit_repetitions": min(options.repetitions, options.limit_repetitions),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            "runs": {},
            "summary": {},
        }
        self.keys = [k for k in CONTENDER_KEYS if k in options.contenders]
        self.runs: dict[str, list[dict[str, Any]]] = {k: [] for k in self.keys}
        self.repetitions = options.repetitions
        self.undecided = plan.status == "ok" and may_be_short(perfconfig.size(tc, plan.workload), options)
        self.order: list[UpstreamRun] = self.planned(self.repetitions) if plan.status == "ok" else []
        if plan.status != "ok":
            logger.info("--- %s: %s", tc.name, plan.status)

    def planned(self, rounds: int) -> list[UpstreamRun]:
        """The runs of ``rounds`` rounds, in running order (those of fewer rounds are its beginning)."""
        plan, options = self.plan, self.options
        tc = plan.test_case
        contenders = {c.key: c for c in upstream_contenders(plan.usher_gates, plan.gates, plan.config)}
        out = []
        for key, repetition in run_order(self.keys, rounds, {"limit": options.limit_repetitions}, lead=self.lead):
            profile = (
                options.profile_dir / f"{tc.name}.{plan.workload.name}.{key}-{repetition}.txt"
                if options.profile_dir is not None
                else None
            )
            workdir = self.base / tc.name / f"{key}-{repetition}"
            out.append(UpstreamRun(plan, contenders[key], workdir, repetition, options.timeout, profile))
        return out

    @property
    def remaining(self) -> int:
        return len(self.order) - sum(len(done) for done in self.runs.values())

    def record(self, run: UpstreamRun, result: dict[str, Any]) -> list[UpstreamRun]:
        """Keep a run's result; returns the runs of the rounds it adds, once the phases turn out short
        (decided before the last round starts, so their planes start during runs as usual)."""
        self.runs[run.contender.key].append(result)
        if self.undecided and (short := short_phases(self.runs)) is not None:
            self.undecided = False
            if short:
                added = self.planned(self.options.short_repetitions)[len(self.order) :]
                self.order += added
                self.repetitions = self.options.short_repetitions
                return added
        return []

    def finish(self) -> dict[str, Any]:
        """The result document, with every run and the summaries."""
        if self.plan.status == "ok":
            self.document["repetitions"] = self.repetitions
            self.document["runs"] = self.runs
            self.document["summary"] = {key: summarize(r) for key, r in self.runs.items()}
        return self.document


async def run_all(options: Options, out: Path, base: Path) -> int:
    """Run every selected upstream test case; write ``out/<TestCase>.json`` each; returns the failed runs.

    The runs of all test cases are one stream (`overlapped`): a test case's runs are added when the one before
    has a single run left, so the first plane of each test case starts during the last run of the one before
    (about 3 s a test case saved), and nothing measured overlaps a plane's start or stop.
    """
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    waiting = iter(enumerate(selections(options)))
    order: list[UpstreamRun] = []
    cases: dict[int, Case] = {}  # id(plan) -> its test case, for the runs in ``order``
    last = -1  # id(plan) of the case whose runs were added last: only it adds the next

    def finish(case: Case) -> None:
        nonlocal failed
        document = case.finish()
        (out / result_name(case.plan.selection.key)).write_text(json.dumps(document, indent=1) + "\n")
        failed += sum(1 for runs in document["runs"].values() for r in runs if r["status"] != "ok")

    def add_next() -> None:
        nonlocal last
        for position, selection in waiting:
            case = Case(selection, options, base, lead=position)
            if case.order:
                cases[id(case.plan)] = case
                order.extend(case.order)
                last = id(case.plan)
                return
            finish(case)  # nothing to run: its document says why

    add_next()
    # Nothing measured overlaps another plane's start or stop (about 3 s a run saved, `overlapped`); smoke runs
    # start the next plane and measure at once.
    async for run, result in overlapped(order, keep=options.keep, prestart=options.prestart):
        case = cases[id(run.plan)]
        # Rounds a case adds are decided with two rounds left, before the next case's runs are added.
        order += case.record(run, result)
        if case.remaining <= 1 and last == id(case.plan):
            add_next()
        if case.remaining == 0:
            finish(case)
            del cases[id(case.plan)]
    return failed


def _size(test_case: TestCase, workload: Workload) -> str:
    try:
        return perfconfig.describe(test_case, workload)
    except perfconfig.ConfigError as error:
        return f"invalid upstream: {error}"


def result_name(test_case: str) -> str:
    return f"{test_case}.json"


#: Per run, besides scheduling: a control plane started and stopped, the scheduler started (5-7 s measured).
RUN_OVERHEAD_SECONDS = 6.5
#: The same with the next control plane started during a run (smoke only; 3 s measured).
PRESTARTED_OVERHEAD_SECONDS = 3.0
#: Pods per second a run sustains, roughly (scheduler_perf's workloads on this machine, both schedulers).
PLAIN_PODS_PER_SECOND = 400.0
CLAIM_PODS_PER_SECOND = 150.0
PREEMPTING_PODS_PER_SECOND = 30.0


def previous_run_seconds(plan: Setup, results: Path) -> dict[str, float]:
    """Each contender's mean run seconds in ``results``' last document of this test case and workload, if any."""
    path = results / result_name(plan.selection.key)
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if document.get("smoke") or document.get("workload", {}).get("name") != plan.workload.name:
        return {}
    out: dict[str, float] = {}
    for key, runs in document.get("runs", {}).items():
        seconds = [r["run_seconds"] for r in runs if r.get("status") == "ok" and r.get("run_seconds")]
        if seconds:
            out[key] = statistics.fmean(seconds)
    return out


def estimate_seconds(plan: Setup, options: Options, previous: Mapping[str, float] | None = None) -> float:
    """A rough duration of a test case's runs (all contenders and repetitions), for planning only.

    A contender's ``previous`` mean run seconds (the committed results) count where known, a formula otherwise.
    """
    if plan.status != "ok":
        return 0.0
    previous = previous or {}
    size = perfconfig.size(plan.test_case, plan.workload)
    formula = _formula_seconds(plan, options, size)
    short = may_be_short(size, options) and size.measured_pods / _measured_rate(plan) < SHORT_PHASE_SECONDS
    repetitions = options.short_repetitions if short else options.repetitions
    return sum(
        previous.get(key, formula)
        * (min(options.repetitions, options.limit_repetitions) if key == "limit" else repetitions)
        for key in options.contenders
    )


def _rate(plan: Setup) -> float:
    return CLAIM_PODS_PER_SECOND if plan.gates.get("DynamicResourceAllocation") else PLAIN_PODS_PER_SECOND


def _measured_rate(plan: Setup) -> float:
    return PREEMPTING_PODS_PER_SECOND if "Preemption" in plan.test_case.name else _rate(plan)


def _formula_seconds(plan: Setup, options: Options, size: perfconfig.Size) -> float:
    measured = size.measured_pods
    pods = (size.pods - measured) / _rate(plan) + measured / _measured_rate(plan)
    overhead = PRESTARTED_OVERHEAD_SECONDS if options.prestart else RUN_OVERHEAD_SECONDS
    return overhead + size.nodes / 500 + pods + size.steady_seconds


def table(options: Options, results: Path) -> str:
    """What `--list-upstream` prints: every test case, the workload chosen and its size, or why none.

    The estimates use the run seconds in ``results`` (the last benchmark's) where a document is there.
    """
    lines = []
    total = 0.0
    for selection in selections(options):
        plan = setup(selection, smoke=options.smoke, force=bool(options.names))
        size = _size(selection.test_case, plan.workload)
        note = " (stand-in)" if selection.stand_in and not options.smoke else ""
        previous = {} if options.smoke else previous_run_seconds(plan, results)
        seconds = estimate_seconds(plan, options, previous)
        total += seconds
        lines.append(
            f"{selection.test_case.group:28} {selection.key:52} {plan.workload.name + note:42} {size:40} "
            f"{selection.tier if selection.runnable else '':9}{f'~{seconds / 60:.1f} min' if seconds else '':9} "
            f"{plan.status}"
        )
    runnable = sum(1 for line in lines if line.endswith(" ok"))
    lines.append(
        f"{runnable} test cases run, {options.repetitions} repetition(s) of {len(options.contenders)} contender(s) "
        f"(up to {max(options.repetitions, options.short_repetitions)} of usher and kube-scheduler where under "
        f"{SHORT_PODS} pods are measured, if their phases last under {SHORT_PHASE_SECONDS:g} s): "
        f"about {total / 60:.0f} min (the last results' run times where known, else a rough formula: "
        f"{PRESTARTED_OVERHEAD_SECONDS if options.prestart else RUN_OVERHEAD_SECONDS:g} s per run besides scheduling)"
    )
    return "\n".join(lines)
