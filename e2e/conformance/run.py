"""Run Kubernetes' sig-scheduling e2e specs against usher and/or kube-scheduler, and compare.

``python -m e2e.conformance.run --scheduler usher|kube-scheduler|both``

For each scheduler: a fresh local control plane (e2e/conformance/cluster.py:
feature gates, zones, node addresses, the allocatable mirror), the scheduler
as the cluster's only scheduler under the name ``default-scheduler`` (usher
with one profile of that name; kube-scheduler v1.37 with its built-in
profile), then ``e2e-scheduling.test`` (``bash e2e/build-binaries.sh
e2e-test``) with ``--ginkgo.focus``/``--ginkgo.skip`` and a JUnit report.

Artifacts (``--artifacts``, default ``$USHER_ARTIFACTS/conformance-<time>``):
``results.md`` and ``results.json`` (spec, kube-scheduler, usher, why), and
per scheduler ``junit.xml``, ``e2e.log``, the control plane's component logs
(``control-plane/logs``: kube-scheduler.log, allocatable-mirror.log, ...) and
``usher.log``.

Exit status 1 when usher fails a spec not on the expected-failure list
(expected_failures.py) that kube-scheduler passes on this harness (or, run
alone, that is not a known harness limit), when usher passes a spec that is
on the list (remove it), or when kube-scheduler fails a spec that is not a
known harness limit (the harness regressed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from e2e.conformance.cluster import REPO, Cluster, binary_path, node_specs, start_cluster
from e2e.conformance.expected_failures import EXPECTED_FAILURES, PASSES_BY_CHANCE
from e2e.usher_process import UsherProcess

SCHEDULERS = ("kube-scheduler", "usher")
#: The specs of this suite (all of test/e2e/scheduling).
DEFAULT_FOCUS = r"\[sig-scheduling\]"
#: The name every e2e pod uses (spec.schedulerName unset): the scheduler under test must own it.
SCHEDULER_NAME = "default-scheduler"
TEST_BINARY = "e2e-scheduling.test"
BUILD_COMMAND = ["bash", str(REPO / "e2e" / "build-binaries.sh"), "e2e-test"]

#: Specs no scheduler can pass on a kwok cluster, with why (they need a real kubelet or
#: more than the harness provides). Skipped for both schedulers in CI; shown in the table.
HARNESS_CANNOT_PASS: dict[str, str] = {}

#: Specs `--skip-known` (CI) also skips, though both schedulers pass them, with why.
SLOW_AND_UNINFORMATIVE: dict[str, str] = {
    "[sig-scheduling] SchedulerPredicates validates that there exists conflict between pods with same hostPort "
    "and protocol but one using 0.0.0.0 hostIP [Conformance] [Serial]": (
        "waits the framework's fixed 5 min for the conflicting pod to leave Pending, then ignores the result "
        "(createHostPortPodOnNode with expectScheduled=false): 5 min that check nothing a scheduler does"
    ),
}

_LABELS = re.compile(r" \[sig-scheduling(?:, [^\]]*)?\]$")


@dataclass
class SpecResult:
    """One spec's outcome: passed, failed, skipped (by focus/skip or by the spec itself)."""

    status: str
    seconds: float = 0.0
    message: str = ""


@dataclass
class SchedulerRun:
    scheduler: str
    results: dict[str, SpecResult] = field(default_factory=dict)
    suite_seconds: float = 0.0
    cluster_seconds: float = 0.0
    exit_code: int | None = None
    artifacts: str = ""


def spec_name(junit_name: str) -> str:
    """``[It] [sig-scheduling] X y [Serial] [sig-scheduling, Serial]`` -> ``[sig-scheduling] X y [Serial]``."""
    name = junit_name.removeprefix("[It] ")
    return _LABELS.sub("", name)


def parse_junit(path: Path) -> dict[str, SpecResult]:
    """The sig-scheduling specs of a ginkgo JUnit report (suite-level nodes are left out)."""
    results: dict[str, SpecResult] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        raw = case.get("name") or ""
        if "[sig-scheduling]" not in raw:
            continue
        status = case.get("status") or "passed"
        message = ""
        for child in case:
            if child.tag in {"failure", "error", "skipped"}:
                message = child.get("message") or (child.text or "")
        if status in {"timedout", "interrupted", "aborted", "panicked", "error"}:
            status = "failed"
            message = message or status
        results[spec_name(raw)] = SpecResult(status, round(float(case.get("time") or 0), 1), message.strip())
    return results


def _re2_escape(text: str) -> str:
    """Escape for Go's RE2 (Python's re.escape escapes spaces, which RE2 rejects)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", text)


def skip_regex(names: Iterable[str]) -> str:
    """A ``--ginkgo.skip`` value matching exactly these spec names ("" for none)."""
    return "|".join(_re2_escape(n) for n in sorted(names))


def first_line(message: str, limit: int = 200) -> str:
    """The first informative line of a failure message, for the table."""
    for line in message.splitlines():
        stripped = line.strip()
        if stripped:
            return stripped if len(stripped) <= limit else stripped[: limit - 3] + "..."
    return ""


# --------------------------------------------------------------------------- running


def ensure_binary() -> Path:
    """Build (or find cached) e2e-scheduling.test; a failure raises with the build's output."""
    proc = subprocess.run(BUILD_COMMAND, capture_output=True, text=True, check=False, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(BUILD_COMMAND)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    path = binary_path(TEST_BINARY)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} missing after {' '.join(BUILD_COMMAND)}")
    return path


def usher_config(path: Path) -> Path:
    """usher's configuration: one profile answering to ``default-scheduler``, everything else default."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": SCHEDULER_NAME}],
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def run_specs(
    binary: Path, cluster: Cluster, outdir: Path, *, focus: str, skip: str, timeout_minutes: int, seed: int
) -> tuple[int, float]:
    """Run the e2e binary against the cluster; return (exit code, seconds). Output goes to e2e.log."""
    argv = [
        str(binary),
        f"--kubeconfig={cluster.kubeconfig}",
        "--provider=skeleton",
        "--minStartupPods=0",
        f"--e2e-output-dir={outdir}",
        f"--ginkgo.focus={focus}",
        f"--ginkgo.junit-report={outdir / 'junit.xml'}",
        f"--ginkgo.timeout={timeout_minutes}m",
        f"--ginkgo.seed={seed}",
        "--ginkgo.no-color",
        "--ginkgo.v",
    ]
    if skip:
        argv.append(f"--ginkgo.skip={skip}")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    t0 = time.monotonic()
    with (outdir / "e2e.log").open("w") as log:
        log.write(" ".join(argv) + "\n\n")
        log.flush()
        proc = subprocess.run(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=outdir, check=False,
            timeout=timeout_minutes * 60 + 120,
        )  # fmt: skip
    return proc.returncode, round(time.monotonic() - t0, 1)


def run_scheduler(
    scheduler: str,
    outdir: Path,
    *,
    binary: Path,
    focus: str,
    skip: str,
    nodes: int,
    timeout_minutes: int,
    seed: int,
    log: Any = sys.stderr,
) -> SchedulerRun:
    """One scheduler's whole run on a fresh control plane; artifacts under ``outdir``."""
    outdir.mkdir(parents=True, exist_ok=True)
    run = SchedulerRun(scheduler, artifacts=str(outdir))
    print(f"[conformance] {scheduler}: starting a control plane in {outdir / 'control-plane'}", file=log, flush=True)
    cluster = start_cluster(outdir / "control-plane", kube_scheduler=scheduler == "kube-scheduler",
                            nodes=node_specs(nodes))  # fmt: skip
    run.cluster_seconds = cluster.started_seconds
    usher: UsherProcess | None = None
    try:
        if scheduler == "usher":
            usher = UsherProcess(
                kubeconfig=cluster.kubeconfig,
                scheduler_name=SCHEDULER_NAME,
                log_path=outdir / "usher.log",
                extra_args=("--config", str(usher_config(outdir / "usher-config.json"))),
            ).start()
        print(f"[conformance] {scheduler}: running {TEST_BINARY} (log: {outdir / 'e2e.log'})", file=log, flush=True)
        run.exit_code, run.suite_seconds = run_specs(
            binary, cluster, outdir, focus=focus, skip=skip, timeout_minutes=timeout_minutes, seed=seed
        )
        junit = outdir / "junit.xml"
        if junit.is_file():
            run.results = parse_junit(junit)
        with contextlib.suppress(Exception):
            (outdir / "cluster-state.yaml").write_text(cluster.kubectl("get", "nodes,pods", "-A", "-o", "yaml"))
    finally:
        if usher is not None:
            with contextlib.suppress(Exception):
                usher.terminate()
            usher.__exit__(None, None, None)
        cluster.stop()
        # etcd preallocates ~60 MB of WAL; the logs are what a post-mortem reads.
        shutil.rmtree(outdir / "control-plane" / "etcd", ignore_errors=True)
    counts = _counts(run.results)
    print(f"[conformance] {scheduler}: {counts} in {run.suite_seconds:.0f} s (exit {run.exit_code})", file=log,
          flush=True)  # fmt: skip
    return run


def _counts(results: Mapping[str, SpecResult]) -> str:
    by: dict[str, int] = {}
    for result in results.values():
        by[result.status] = by.get(result.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(by.items())) or "no results"


# --------------------------------------------------------------------------- judging and reporting


def _result(runs: Mapping[str, SchedulerRun], scheduler: str, spec: str) -> SpecResult | None:
    run = runs.get(scheduler)
    return run.results.get(spec) if run else None


def why(spec: str, runs: Mapping[str, SchedulerRun]) -> str:
    """The table's explanation for a spec either scheduler failed (or that usher skipped by the list)."""
    reasons: list[str] = []
    if spec in HARNESS_CANNOT_PASS:
        reasons.append(f"harness: {HARNESS_CANNOT_PASS[spec]}")
    usher = _result(runs, "usher", spec)
    kube = _result(runs, "kube-scheduler", spec)
    if spec in EXPECTED_FAILURES and (usher is None or usher.status != "passed"):
        reasons.append(f"usher: {EXPECTED_FAILURES[spec]}")
    for name, result in (("kube-scheduler", kube), ("usher", usher)):
        if result is not None and result.status == "failed" and spec not in HARNESS_CANNOT_PASS:
            if name == "usher" and spec in EXPECTED_FAILURES:
                continue
            reasons.append(f"{name}: {first_line(result.message)}")
    return "; ".join(reasons)


def problems(runs: Mapping[str, SchedulerRun]) -> list[str]:
    """Everything that makes the run fail (see the module docstring); empty when all is well."""
    found: list[str] = []
    usher = runs.get("usher")
    kube = runs.get("kube-scheduler")
    for run in runs.values():
        if run.exit_code is not None and not run.results:
            found.append(f"{run.scheduler}: no JUnit results (e2e exit {run.exit_code}); see {run.artifacts}/e2e.log")
    if kube is not None:
        for spec, result in sorted(kube.results.items()):
            if result.status == "failed" and spec not in HARNESS_CANNOT_PASS:
                found.append(f"kube-scheduler fails {spec!r} (the harness regressed?): {first_line(result.message)}")
    if usher is not None:
        for spec, result in sorted(usher.results.items()):
            baseline = kube.results.get(spec) if kube is not None else None
            if result.status == "failed":
                if spec in EXPECTED_FAILURES or spec in HARNESS_CANNOT_PASS:
                    continue
                if baseline is not None and baseline.status != "passed":
                    continue  # kube-scheduler does not pass it here either
                found.append(f"usher fails {spec!r}: {first_line(result.message)}")
            elif result.status == "passed" and spec in EXPECTED_FAILURES and spec not in PASSES_BY_CHANCE:
                found.append(f"usher passes {spec!r}: remove it from e2e/conformance/expected_failures.py")
    return found


def _cell(result: SpecResult | None, spec: str, scheduler: str) -> str:
    if result is None:
        return "not run"
    if result.status != "skipped":
        return result.status
    if scheduler == "usher" and spec in EXPECTED_FAILURES:
        return "skipped (expected failure)"
    if spec in SLOW_AND_UNINFORMATIVE:
        return "skipped (slow, checks nothing)"
    return "skipped"


def table(runs: Mapping[str, SchedulerRun]) -> list[dict[str, str]]:
    specs = sorted({spec for run in runs.values() for spec in run.results})
    rows = []
    for spec in specs:
        rows.append({
            "spec": spec,
            "kube-scheduler": _cell(_result(runs, "kube-scheduler", spec), spec, "kube-scheduler")
            if "kube-scheduler" in runs else "not run",
            "usher": _cell(_result(runs, "usher", spec), spec, "usher") if "usher" in runs else "not run",
            "why": why(spec, runs),
        })  # fmt: skip
    return rows


def markdown(runs: Mapping[str, SchedulerRun], rows: Sequence[Mapping[str, str]]) -> str:
    lines = ["| spec | kube-scheduler | usher | why (for a spec either fails) |", "|---|---|---|---|"]
    for row in rows:
        spec = row["spec"].removeprefix("[sig-scheduling] ").replace("|", "\\|")
        cells = [spec, row["kube-scheduler"], row["usher"], row["why"].replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for run in runs.values():
        lines.append(f"- {run.scheduler}: {_counts(run.results)}; specs ran in {run.suite_seconds:.0f} s "
                     f"(control plane + nodes ready in {run.cluster_seconds:.0f} s)")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(artifacts: Path, runs: Mapping[str, SchedulerRun], found: Sequence[str]) -> Path:
    rows = table(runs)
    data = {
        "commit": _git_commit(),
        "runs": {name: asdict(run) for name, run in runs.items()},
        "table": rows,
        "problems": list(found),
    }
    (artifacts / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    path = artifacts / "results.md"
    path.write_text(markdown(runs, rows))
    return path


def _git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                          check=False)  # fmt: skip
    return proc.stdout.strip()


# --------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m e2e.conformance.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheduler", choices=[*SCHEDULERS, "both"], default="both")
    parser.add_argument("--artifacts", type=Path, help="output dir (default: $USHER_ARTIFACTS/conformance-<time>)")
    parser.add_argument("--focus", default=DEFAULT_FOCUS, help="--ginkgo.focus (default: all sig-scheduling specs)")
    parser.add_argument("--skip", default="", help="extra --ginkgo.skip regex (RE2)")
    parser.add_argument(
        "--skip-known", action="store_true",
        help="skip known harness limits, SLOW_AND_UNINFORMATIVE specs and, for usher, its expected failures (CI)",
    )  # fmt: skip
    parser.add_argument("--nodes", type=int, default=4, help="kwok nodes (alternating between two zones)")
    parser.add_argument("--timeout-minutes", type=int, default=60, help="--ginkgo.timeout per scheduler")
    parser.add_argument("--seed", type=int, default=1, help="--ginkgo.seed (spec order is randomized)")
    return parser.parse_args(argv)


def skips_for(scheduler: str, extra: str, *, skip_known: bool) -> str:
    """The ``--ginkgo.skip`` regex for one scheduler's run."""
    parts = [extra] if extra else []
    if skip_known:
        known = set(HARNESS_CANNOT_PASS) | set(SLOW_AND_UNINFORMATIVE)
        if scheduler == "usher":
            known |= set(EXPECTED_FAILURES)
        if known:
            parts.append(skip_regex(known))
    return "|".join(parts)


def _stop_on_sigterm() -> None:
    """SIGTERM (CI timeouts, ``kill``) unwinds like Ctrl-C, so usher and the control plane are stopped."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    # A background job of a non-interactive shell starts with SIGINT ignored; take it back.
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _stop_on_sigterm()
    root = Path(os.environ.get("USHER_ARTIFACTS") or "/tmp/usher-artifacts")
    artifacts: Path = args.artifacts or root / f"conformance-{time.strftime('%Y%m%d-%H%M%S')}"
    artifacts.mkdir(parents=True, exist_ok=True)
    binary = ensure_binary()
    schedulers = SCHEDULERS if args.scheduler == "both" else (args.scheduler,)
    runs: dict[str, SchedulerRun] = {}
    for scheduler in schedulers:
        runs[scheduler] = run_scheduler(
            scheduler, artifacts / scheduler, binary=binary, focus=args.focus,
            skip=skips_for(scheduler, args.skip, skip_known=args.skip_known), nodes=args.nodes,
            timeout_minutes=args.timeout_minutes, seed=args.seed,
        )  # fmt: skip
    found = problems(runs)
    report = write_report(artifacts, runs, found)
    print(report.read_text())
    for problem in found:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    print(f"[conformance] artifacts in {artifacts}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
