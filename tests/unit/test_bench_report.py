"""The hand-written workloads' report: each contender's repeated runs read as medians."""

from __future__ import annotations

from typing import Any

from bench import report


def _run(key: str, overall: float, cpu: float, hints: int, p50: float, *, status: str = "ok") -> dict[str, Any]:
    phase = {
        "status": status,
        "pods": 100,
        "bound": 100,
        "overall": overall,
        "scheduler_cpu_s": cpu,
        "hint_invocations": hints,
        "samples": [[0.0, 0], [1.0, int(overall)]],
        "latency_s": {"p50": p50, "p90": p50 * 2, "p99": p50 * 3, "max": p50 * 4},
    }
    family = "limit" if key == "limit" else key.split("-pqh", maxsplit=1)[0]
    return {
        "contender": key,
        "label": key,
        "family": family,
        "status": status,
        "measured": phase,
        "ungate": phase,
        "scheduler": {"peak_rss_mib": cpu * 100, "cpu_s_total": cpu * 2},
    }


def _doc(runs: dict[str, Any]) -> dict[str, Any]:
    return {
        "workload": {"name": "W", "kind": "gated", "ungate": 100, "measured_pods": 100, "description": "w"},
        "runs": runs,
    }


def test_each_number_is_the_median_over_the_runs_and_the_chart_keeps_the_median_runs_samples() -> None:
    doc = _doc(
        {
            "usher-pqh-on": [
                _run("usher-pqh-on", 300.0, 1.0, 7, 0.5),
                _run("usher-pqh-on", 100.0, 3.0, 5, 0.9),
                _run("usher-pqh-on", 200.0, 2.0, 6, 0.1),
            ],
            "kube-scheduler-pqh-on": [_run("kube-scheduler-pqh-on", 150.0, 2.5, 4, 0.4)],
        }
    )
    view = report.median_view(doc)
    usher = view["runs"]["usher-pqh-on"]
    assert usher["n"] == 3
    measured = usher["measured"]
    assert measured["overall"] == 200.0
    assert measured["overall_stat"] == {"median": 200.0, "min": 100.0, "max": 300.0, "n": 3}
    assert measured["scheduler_cpu_s"] == 2.0
    assert measured["hint_invocations"] == 6 and isinstance(measured["hint_invocations"], int)
    # Each quantile on its own: the p50s are 0.5, 0.9, 0.1.
    assert measured["latency_s"]["p50"] == 0.5 and measured["latency_s"]["max"] == 2.0
    assert measured["samples"] == [[0.0, 0], [1.0, 200]], "the samples of the run with the median pods/s"
    assert usher["scheduler"] == {"peak_rss_mib": 200.0, "cpu_s_total": 4.0}
    assert view["runs"]["kube-scheduler-pqh-on"]["measured"]["overall_stat"]["n"] == 1
    assert doc["runs"]["usher-pqh-on"][0]["measured"]["overall"] == 300.0, "the document is left as it was"

    table = "\n".join(report.phase_table(view, "measured"))
    assert "| usher-pqh-on | 3 | 200.0 (100.0-300.0) |" in table
    assert "| kube-scheduler-pqh-on | 1 | 150.0 |" in table
    assert "1.33x" in table, "usher/kube-scheduler from the medians"
    assert "| usher-pqh-on | 0.500 | 1.000 | 1.500 | 2.000 |" in "\n".join(report.phase_table(view, "ungate"))


def test_a_contender_with_a_failed_run_shows_the_failure_not_a_median() -> None:
    doc = _doc(
        {
            "usher-pqh-on": [
                _run("usher-pqh-on", 300.0, 1.0, 7, 0.5),
                {**_run("usher-pqh-on", 10.0, 1.0, 7, 0.5, status="timeout"), "error": "only 10 of 100 bound"},
            ],
            "kube-scheduler-pqh-on": [_run("kube-scheduler-pqh-on", 150.0, 2.5, 4, 0.4)],
        }
    )
    view = report.median_view(doc)
    assert view["runs"]["usher-pqh-on"]["status"] == "timeout" and view["runs"]["usher-pqh-on"]["n"] == 2
    assert report._rate(view, "usher-pqh-on", "measured") is None, "no ratio or target from a failed contender"
    assert not any("usher >= 1.3x kube-scheduler" in line for line in report.targets([view]))


def test_results_of_the_older_shape_read_as_one_run_each() -> None:
    view = report.median_view(_doc({"usher-pqh-on": _run("usher-pqh-on", 120.0, 1.0, 3, 0.2)}))
    assert view["runs"]["usher-pqh-on"]["n"] == 1
    assert view["runs"]["usher-pqh-on"]["measured"]["overall"] == 120.0


def test_a_paced_gate_removal_is_judged_by_its_latency_and_reads_no_ratio_from_its_pace() -> None:
    doc = _doc(
        {
            "usher-pqh-on": [_run("usher-pqh-on", 50.0, 1.0, 7, 0.2), _run("usher-pqh-on", 50.0, 1.0, 7, 0.3)],
            "kube-scheduler-pqh-on": [_run("kube-scheduler-pqh-on", 49.0, 2.5, 4, 0.25)],
        }
    )
    doc["workload"].update(name="G", measured_pods=0, ungate_batch=100, ungate_every_s=2.0)
    view = report.median_view(doc)
    assert report._phases(view) == [("ungate", "G")]
    targets = "\n".join(report.targets([view]))
    assert "kube-scheduler |" not in targets.replace("kube-scheduler's", ""), "no throughput target for a pace"
    # usher's medians: p50 0.25, p99 0.75; kube-scheduler's: 0.25 and 0.75.
    latency = "| G: gate removal to binding, usher p50 and p99 <= kube-scheduler's |"
    assert f"{latency} p50 250 vs 250 ms; p99 750 vs 750 ms | yes |" in targets
    table = "\n".join(report.phase_table(view, "ungate"))
    assert "1.02x" not in table and "| usher-pqh-on | 2 | 50.0 |" in table


def test_where_a_workload_runs_kube_scheduler_as_it_ships_only_usher_is_compared_with_that_run() -> None:
    doc = _doc(
        {
            "usher-pqh-on": [_run("usher-pqh-on", 300.0, 1.0, 7, 0.5)],
            "kube-scheduler-pqh-off": [_run("kube-scheduler-pqh-off", 200.0, 2.5, 4, 0.4)],
        }
    )
    view = report.median_view(doc)
    assert "| usher-pqh-on | 1 | 300.0 |" in "\n".join(report.phase_table(view, "measured"))
    assert "1.50x" in "\n".join(report.phase_table(view, "measured")), "usher (on) against kube-scheduler (off)"
    assert any("1.50x (300 vs 200 pods/s, kube-scheduler-pqh-off)" in line for line in report.targets([view]))


def test_the_runs_line_names_each_plan_with_its_workloads() -> None:
    gated = _doc({"usher-pqh-on": [_run("usher-pqh-on", 1.0, 1.0, 1, 0.1)] * 3, "limit": [_run("limit", 1, 1, 1, 1)]})
    burst = _doc({"usher-pqh-on": [_run("usher-pqh-on", 1.0, 1.0, 1, 0.1)]})
    burst["workload"] = {**burst["workload"], "name": "B"}
    views = [report.median_view(gated), report.median_view(burst)]
    assert report._runs_text(views) == ("usher-pqh-on 3 times, limit 1 time (W); usher-pqh-on 1 time (B)")


def test_a_make_bench_result_of_a_size_make_bench_no_longer_runs_reads_as_bench_large() -> None:
    def doc(test_case: str, size: str, tier: str) -> dict[str, Any]:
        return {"test_case": test_case, "workload": {"size": size}, "tier": tier}

    assert report._tier(doc("Partitionable", "1000 nodes, 10 pods, 10 s steady state", "standard")) == "large"
    assert report._tier(doc("SchedulingBasic", "500 nodes, 1500 pods", "standard")) == "standard"
    assert report._tier(doc("GangScheduling", "5000 nodes, 3000 pods", "standard")) == "standard", (
        "run whatever its size"
    )
    assert report._tier(doc("FirstAvailable", "2 nodes, 10 pods", "large")) == "large", "a stand-in without performance"
    assert report._tier(doc("X", "invalid upstream: bad", "standard")) == "standard"
