"""The benchmark's smoke test (``make bench-smoke``, and part of ``make test``): every workload at tiny sizes.

Why: the full benchmark takes most of an hour, so CI cannot run it; this
proves every workload (the hand-written ones, and every scheduler_perf
workload the benchmark runs, at its smallest size) still completes against
usher, kube-scheduler and the bind limit and that every number the report
needs is produced. scheduler_perf's workloads run against usher, and one of
them against every contender (the contenders' machinery is shared; each
workload's operations are what the executor must handle), which keeps CI
minutes for tests. It asserts no timing at all: on a shared CI machine a
timing would be noise.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import report, runner, upstream
from bench.workloads import WORKLOADS

pytestmark = pytest.mark.e2e

#: kube-scheduler with PreQueueingHints off is left out of the smoke run: it is the same binary with one gate
#: flipped, the gate is kube-scheduler's business, and its runs cost CI a minute; `make bench` runs it.
CONTENDERS = ("usher-pqh-on", "usher-pqh-off", "kube-scheduler-pqh-on", "limit")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_phase(where: str, phase: dict[str, Any], *, scheduler: bool, hints: bool) -> None:
    assert phase["status"] == "ok", where
    assert phase["bound"] == phase["pods"] > 0, where
    for key in ("elapsed_s", "average", "p50", "p90", "p99", "overall", "apiserver_cpu_s", "etcd_cpu_s"):
        assert _number(phase[key]), f"{where}: {key} = {phase.get(key)!r}"
    assert phase["overall"] > 0, where
    # The collection before the phase is checked where it is made: `Api.collect_garbage` fails the run when the
    # API server's count of collections did not move.
    assert isinstance(phase["apiserver_gc_cycles"], int) and phase["apiserver_gc_cycles"] >= 0, where
    assert phase["samples"] and phase["samples"][-1][1] == phase["pods"], where
    if scheduler:
        assert _number(phase["scheduler_cpu_s"]), where
    if hints:
        assert isinstance(phase["hint_invocations"], int), where
        assert isinstance(phase["pre_hint_evaluations"], int), where


@pytest.mark.timeout(900)
async def test_every_workload_completes_against_every_contender_and_produces_numbers(tmp_path: Path) -> None:
    out = tmp_path / "results"
    args = runner.parse_args(
        [
            *("--smoke", "--suite", "hand-written", "--out", str(out), "--workdir", str(tmp_path / "planes")),
            *(arg for contender in CONTENDERS for arg in ("-c", contender)),
            *("--report", "--report-md", str(tmp_path / "RESULTS.md"), "--chart", str(tmp_path / "throughput.png")),
        ]
    )
    failed = await runner.main_async(args)

    documents = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    errors = {
        f"{name}/{key}": run.get("error")
        for name, doc in documents.items()
        for key, runs in doc["runs"].items()
        for run in runs
        if run["status"] != "ok"
    }
    assert failed == 0 and not errors, errors
    assert set(documents) == {w.name for w in WORKLOADS}
    for name, doc in documents.items():
        assert doc["smoke"] is True
        assert set(doc["runs"]) == set(CONTENDERS), name
        assert doc["repetitions"] == dict.fromkeys(CONTENDERS, 1), "smoke runs each contender once"
        for key, (run,) in doc["runs"].items():
            where = f"{name}/{key}"
            is_scheduler = run["family"] != "limit"
            if doc["workload"]["measured_pods"]:
                _check_phase(where, run["measured"], scheduler=is_scheduler, hints=is_scheduler)
            if doc["workload"]["ungate"]:
                _check_phase(f"{where}/ungate", run["ungate"], scheduler=is_scheduler, hints=is_scheduler)
                assert all(_number(v) for v in run["ungate"]["latency_s"].values()), where
            if is_scheduler:
                assert run["scheduler"]["peak_rss_mib"] > 0 and run["scheduler"]["cpu_s_total"] > 0, where
            elif doc["workload"]["kind"] == "gated":
                _check_phase(f"{where}/bind_only", run["bind_only"], scheduler=False, hints=False)

    markdown = (tmp_path / "RESULTS.md").read_text()
    for workload in WORKLOADS:
        assert f"## {workload.name}" in markdown
    assert "| usher (PreQueueingHints on) |" in markdown and "usher >= 0.7x the bind limit" in markdown
    assert (tmp_path / "throughput.png").stat().st_size > 10_000
    assert report.load(out), "the report reads back what the runner wrote"


#: The numbers of each run's measured op the report needs (scheduler_perf's statistics need 2 s of samples).
UPSTREAM_PHASE_NUMBERS = (
    "scheduled",
    "elapsed_s",
    "overall",
    "apiserver_cpu_s",
    "etcd_cpu_s",
    "harness_cpu_s",
    "apiserver_gc_cycles",
)
NOT_RUN = ("unsupported: ", "usher refuses: ", "usher lacks: ", "left out: ")


#: The upstream test case every contender runs in the smoke test; the others run against usher alone (the
#: contenders' machinery is the same for every case, the workloads' operations are not).
ALL_CONTENDERS_CASE = "SchedulingBasic"


@pytest.mark.timeout(1800)
async def test_every_supported_upstream_workload_runs_at_its_smallest_size_and_produces_numbers(tmp_path: Path) -> None:
    out = tmp_path / "results"
    args = runner.parse_args(
        [
            *("--smoke", "--suite", "upstream", "-c", "usher", "--out", str(out)),
            *("--workdir", str(tmp_path / "planes")),
        ]
    )
    failed = await runner.main_async(args)

    documents = {p.stem: json.loads(p.read_text()) for p in (out / upstream.RESULTS_DIRNAME).glob("*.json")}
    selections = upstream.selections(upstream.Options(smoke=True))
    assert set(documents) == {s.key for s in selections}, "a document for every upstream test case"
    expected = {s.key for s in selections if upstream.setup(s, smoke=True).status == "ok"}
    ran = {name: doc for name, doc in documents.items() if doc["status"] == "ok"}
    assert set(ran) == expected and len(ran) >= 20 and ALL_CONTENDERS_CASE in ran
    for name, doc in documents.items():
        assert doc["status"] == "ok" or doc["status"].startswith(NOT_RUN), (name, doc["status"])
    _check_upstream_runs(ran, failed, contenders={"usher"})

    # One case against every contender, and the report with its ratios.
    both = tmp_path / "both"
    args = runner.parse_args(
        [
            *("--smoke", "-u", ALL_CONTENDERS_CASE, "--out", str(both), "--workdir", str(tmp_path / "planes-all")),
            *("--report", "--report-md", str(tmp_path / "RESULTS.md"), "--chart", str(tmp_path / "throughput.png")),
        ]
    )
    failed = await runner.main_async(args)
    (path,) = (both / upstream.RESULTS_DIRNAME).glob("*.json")
    doc = json.loads(path.read_text())
    _check_upstream_runs({path.stem: doc}, failed, contenders=set(upstream.CONTENDER_KEYS))
    markdown = (tmp_path / "RESULTS.md").read_text()
    assert "## scheduler_perf's workloads" in markdown and "### Targets (scheduler_perf's workloads)" in markdown
    assert f"| {path.stem} ({doc['group']}) |" in markdown
    assert report.upstream_ratio(doc, "rate") is not None
    # CPU is read in clock ticks (10 ms): at smoke size kube-scheduler may use less than one, and a ratio
    # over 0 is no number (the report says n/a). Either way the report follows the measured values.
    kube_cpu = doc["summary"]["kube-scheduler"]["cpu_s_per_1000_pods"]["median"]
    assert (report.upstream_ratio(doc, "cpu") is not None) == (kube_cpu > 0), kube_cpu
    assert (tmp_path / report.UPSTREAM_CHART).stat().st_size > 5_000


def _check_upstream_runs(ran: dict[str, Any], failed: int, *, contenders: set[str]) -> None:
    errors = {
        f"{name}/{key}": run.get("error")
        for name, doc in ran.items()
        for key, runs in doc["runs"].items()
        for run in runs
        if run["status"] != "ok"
    }
    assert failed == 0 and not errors, errors
    for name, doc in ran.items():
        assert doc["smoke"] is True and doc["workload"]["name"] in {w.name for w in _smallest(name)}
        assert set(doc["runs"]) == contenders, name
        for key, (run,) in doc["runs"].items():
            where = f"{name}/{key}"
            (phase,) = run["phases"]
            for number in UPSTREAM_PHASE_NUMBERS:
                assert _number(phase[number]), f"{where}: {number} = {phase.get(number)!r}"
            assert phase["scheduled"] > 0 and phase["overall"] > 0, where
            assert phase["samples"][-1][1] == phase["scheduled"], where
            if key == "limit":
                assert "scheduler_cpu_s" not in phase and "scheduler" not in run, where
                continue
            assert _number(phase["scheduler_cpu_s"]), where
            assert run["scheduler"]["peak_rss_mib"] > 0, where
            attempts = phase["attempt_duration_ms"]["scheduled"]
            assert attempts["count"] > 0 and _number(attempts["p50"]) and _number(attempts["p99"]), (where, attempts)
            summary = doc["summary"][key]
            for number in ("overall", "cpu_s_per_1000_pods", "peak_rss_mib", "attempt_p50_ms", "attempt_p99_ms"):
                assert summary[number] is not None and _number(summary[number]["median"]), (where, number)


def _smallest(test_case: str) -> tuple[Any, ...]:
    """The equally small workloads of a test case (the smoke test runs one of them)."""
    (selection,) = upstream.selections(upstream.Options(smoke=True, names=[test_case]))
    return selection.smallest


def test_the_cycle_micro_benchmark_places_every_pod_within_capacity() -> None:
    from bench import cycle

    cache = cycle.run(nodes=120, init=30, pods=40, profile=False)
    infos = cache.node_infos()
    assert sum(info.requested_pods for info in infos) == 70
    assert all(info.requested_cpu <= info.allocatable_cpu for info in infos)
