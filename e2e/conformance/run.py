"""Run Kubernetes' own e2e specs against usher and/or kube-scheduler, and compare.

``python -m e2e.conformance.run --suite scheduling|dra|dra-kubelet --scheduler usher|kube-scheduler|both``

The suites (`SUITES`): ``scheduling``, every sig-scheduling spec (test/e2e/scheduling) on kwok nodes;
``dra``, the DRA specs that need no kubelet (test/e2e/dra "control plane", "CRUD Tests", "ResourceSlice
Controller") on kwok nodes; ``dra-kubelet``, the DRA specs that need a kubelet with its plugin registration and
CDI, on one real node (e2e.node: kubelet and containerd, no kwok nodes) running upstream's test driver, whose
kubelet plugin runs inside e2e.test behind a proxy pod (e2e/dra-proxy). Alpha and off-by-default gates, [Serial]
and [Slow] specs are left out of the DRA suites, as on a default 1.37 cluster.

For each scheduler: a fresh local control plane (e2e/conformance/cluster.py:
feature gates, zones, node addresses, the allocatable mirror; or the real
node), the scheduler as the cluster's only scheduler under the name
``default-scheduler`` (usher with one profile of that name; kube-scheduler
v1.37 with its built-in profile), then ``e2e.test`` (``bash
e2e/build-binaries.sh e2e-test``) with the suite's focus, label filter and
skips, and a JUnit report.

Artifacts (``--artifacts``, default ``$USHER_ARTIFACTS/conformance-<time>``):
``results.md`` and ``results.json`` (spec, kube-scheduler, usher, why; with
``--readme`` the table also replaces the suite's table in README.md), and
per scheduler ``junit.xml``, ``e2e.log``, the control plane's component logs
(``control-plane/logs``: kube-scheduler.log, allocatable-mirror.log, ...) and
``usher.log``.

Exit status 1 when usher fails a spec not on the suite's expected-failure list
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
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from e2e.conformance.cluster import (
    REPO,
    Cluster,
    RealNodeCluster,
    binary_path,
    node_specs,
    start_cluster,
    start_real_node_cluster,
)
from e2e.conformance.expected_failures import (
    DRA_EXPECTED_FAILURES,
    DRA_PASSES_BY_CHANCE,
    EXPECTED_FAILURES,
    PASSES_BY_CHANCE,
)
from e2e.usher_process import UsherProcess

SCHEDULERS = ("kube-scheduler", "usher")
#: The specs of the scheduling suite (all of test/e2e/scheduling).
DEFAULT_FOCUS = r"\[sig-scheduling\]"
#: The name every e2e pod uses (spec.schedulerName unset): the scheduler under test must own it.
SCHEDULER_NAME = "default-scheduler"
TEST_BINARY = "e2e.test"
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

#: The DRA specs that need two real nodes ("kubelet ... on multiple nodes"): they skip themselves on the one real
#: node. Their control-plane twins run in the ``dra`` suite on kwok nodes.
DRA_NEEDS_TWO_NODES = "needs 2 real nodes (the harness has one); its control-plane twin runs on kwok nodes"
DRA_HARNESS_CANNOT_PASS: dict[str, str] = {
    "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] on multiple nodes with different ResourceSlices "
    "keeps pod pending because of CEL runtime errors": DRA_NEEDS_TWO_NODES,
    "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] on multiple nodes with node-local resources "
    "uses all resources": DRA_NEEDS_TWO_NODES,
}

#: The dra-kubelet specs CI runs (the whole suite takes about 45 minutes a scheduler; these about 5): one or more
#: of each scheduling and allocation feature, most with network-attached devices (about 10 s each), a few
#: node-local ones (about 40 s each: the kubelet waits 30 s before wiping a stopped driver's slices). `make
#: dra-conformance` runs them all.
DRA_KUBELET_CI_FOCUS = "|".join(
    (
        r"\[FeatureGate:DRADeviceTaints\] (NoSchedule|NoExecute|DeviceTaintRule)",
        r"\[FeatureGate:DRAPrioritizedList\] selects the first subrequest that can be satisfied",
        r"\[FeatureGate:DRAPartitionableDevices\]",
        r"\[FeatureGate:DRAConsumableCapacity\]",
        r"on single node (supports claim and class parameters|supports sharing a claim concurrently)",
        r"must run a pod with implicit extended resource with one container one resource",
        r"must prevent overcommitment of extended resources",
    )
)  # fmt: skip

#: Label filter of both DRA suites: what a default Kubernetes 1.37 cluster has (no alpha or off-by-default gate),
#: without [Serial] specs (they deploy the sample device plugin, whose image is not built here) and [Slow] ones.
_DRA_DEFAULTS = "DRA && !Alpha && !Feature: containsAny OffByDefault && !Serial && !Slow"


@dataclass(frozen=True)
class Suite:
    """A set of upstream specs, the harness they run on and what is known about them there."""

    name: str
    marker: str
    """Only JUnit entries whose name holds this count (suite-level nodes do not)."""
    focus: str
    label_filter: str = ""
    real_node: bool = False
    """One real node (kubelet, containerd) instead of kwok nodes."""
    expected_failures: Mapping[str, str] = field(default_factory=dict)
    passes_by_chance: frozenset[str] = frozenset()
    harness_cannot_pass: Mapping[str, str] = field(default_factory=dict)
    """Specs no scheduler can pass on this harness, with why: skipped in CI, shown in the table."""
    slow_and_uninformative: Mapping[str, str] = field(default_factory=dict)
    """Specs CI also skips, though both schedulers pass them, with why."""
    ci_focus: str = ""
    """The subset CI runs (RE2, "" for all), when the whole suite takes too long for it."""
    readme_table: str = ""
    """The name of the suite's table in README.md (between ``<!-- conformance-table:NAME -->`` markers)."""


SUITES: dict[str, Suite] = {
    "scheduling": Suite(
        "scheduling", "[sig-scheduling]", DEFAULT_FOCUS, expected_failures=EXPECTED_FAILURES,
        passes_by_chance=PASSES_BY_CHANCE, harness_cannot_pass=HARNESS_CANNOT_PASS,
        slow_and_uninformative=SLOW_AND_UNINFORMATIVE,
    ),
    "dra": Suite(
        "dra", "[DRA]", r"\[sig-node\] \[DRA\] (control plane|CRUD Tests|ResourceSlice Controller)",
        label_filter=f"{_DRA_DEFAULTS} && !Feature: containsAny DynamicResourceAllocation",
        expected_failures=DRA_EXPECTED_FAILURES, passes_by_chance=DRA_PASSES_BY_CHANCE, readme_table="dra",
    ),
    "dra-kubelet": Suite(
        "dra-kubelet", "[DRA]", r"\[sig-node\] \[DRA\]",
        label_filter=f"{_DRA_DEFAULTS} && Feature: containsAny DynamicResourceAllocation", real_node=True,
        expected_failures=DRA_EXPECTED_FAILURES, passes_by_chance=DRA_PASSES_BY_CHANCE,
        harness_cannot_pass=DRA_HARNESS_CANNOT_PASS, ci_focus=DRA_KUBELET_CI_FOCUS, readme_table="dra-kubelet",
    ),
}  # fmt: skip

#: A ginkgo label list at the end of a JUnit name (``[sig-node, DRA, ...]``), then the kubelet version
#: constraint some DRA specs add (`` [kubelet: [>=1.34]]``).
_LABELS = re.compile(r" \[sig-[a-z-]+(?:, [^\]]*)?\]( \[kubelet: \[[^\]]*\]\])?$")


@dataclass
class SpecResult:
    """One spec's outcome: passed, failed, skipped (by focus/skip or by the spec itself)."""

    status: str
    seconds: float = 0.0
    message: str = ""


def selected(result: SpecResult) -> bool:
    """Whether the spec was run: ginkgo reports one left out by focus, skip or label filter as skipped with the
    message "skipped", one that skipped itself as "skipped - <why>" (it ran, and proved nothing)."""
    return not (result.status == "skipped" and result.message in ("", "skipped"))


@dataclass
class SchedulerRun:
    scheduler: str
    results: dict[str, SpecResult] = field(default_factory=dict)
    suite_seconds: float = 0.0
    cluster_seconds: float = 0.0
    exit_code: int | None = None
    artifacts: str = ""


def spec_name(junit_name: str) -> str:
    """``[It] [sig-scheduling] X y [Serial] [sig-scheduling, Serial]`` -> ``[sig-scheduling] X y [Serial]``;
    ``[It] [sig-node] [DRA] X [sig-node, DRA] [kubelet: [>=1.34]]`` -> ``[sig-node] [DRA] X``."""
    name = junit_name.removeprefix("[It] ")
    return _LABELS.sub("", name)


def parse_junit(path: Path, marker: str = "[sig-scheduling]") -> dict[str, SpecResult]:
    """The specs of a ginkgo JUnit report whose names hold ``marker`` (suite-level nodes are left out)."""
    results: dict[str, SpecResult] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        raw = case.get("name") or ""
        if marker not in raw:
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
    """Build (or find cached) e2e.test; a failure raises with the build's output."""
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
    binary: Path,
    cluster: Cluster | RealNodeCluster,
    outdir: Path,
    *,
    focus: str,
    skip: str,
    timeout_minutes: int,
    seed: int,
    label_filter: str = "",
) -> tuple[int, float]:
    """Run the e2e binary against the cluster; return (exit code, seconds). Output goes to e2e.log."""
    argv = [
        str(binary),
        f"--kubeconfig={cluster.kubeconfig}",
        "--provider=skeleton",
        "--minStartupPods=0",
        f"--e2e-output-dir={outdir}",
        *cluster.e2e_args,
        f"--ginkgo.focus={focus}",
        f"--ginkgo.junit-report={outdir / 'junit.xml'}",
        f"--ginkgo.timeout={timeout_minutes}m",
        f"--ginkgo.seed={seed}",
        "--ginkgo.no-color",
        "--ginkgo.v",
    ]
    if skip:
        argv.append(f"--ginkgo.skip={skip}")
    if label_filter:
        argv.append(f"--ginkgo.label-filter={label_filter}")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    t0 = time.monotonic()
    with (outdir / "e2e.log").open("w") as log:
        log.write(" ".join(argv) + "\n\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=outdir)
        _RUNNING.add(proc)
        try:
            proc.wait(timeout=timeout_minutes * 60 + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        finally:
            _RUNNING.discard(proc)
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
    suite: Suite | None = None,
    log: Any = sys.stderr,
) -> SchedulerRun:
    """One scheduler's whole run of ``suite`` (default: scheduling) on a fresh control plane; artifacts under
    ``outdir``. ``nodes``: kwok nodes, for a suite without a real node."""
    suite = suite or SUITES["scheduling"]
    outdir.mkdir(parents=True, exist_ok=True)
    run = SchedulerRun(scheduler, artifacts=str(outdir))
    print(f"[conformance] {scheduler}: starting a control plane in {outdir / 'control-plane'}", file=log, flush=True)
    kube_scheduler = scheduler == "kube-scheduler"
    cluster: Cluster | RealNodeCluster
    with _STARTING:  # parallel runs: one harness starts at a time (ports, the real node's subnet)
        if suite.real_node:
            cluster = start_real_node_cluster(outdir / "control-plane", kube_scheduler=kube_scheduler)
        else:
            cluster = start_cluster(outdir / "control-plane", kube_scheduler=kube_scheduler, nodes=node_specs(nodes))
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
            binary, cluster, outdir, focus=focus, skip=skip, timeout_minutes=timeout_minutes, seed=seed,
            label_filter=suite.label_filter,
        )  # fmt: skip
        junit = outdir / "junit.xml"
        if junit.is_file():
            run.results = parse_junit(junit, suite.marker)
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


_STARTING = threading.Lock()
_RUNNING: set[subprocess.Popen[bytes]] = set()
"""e2e.test processes running (one per scheduler): stopped when the run is interrupted."""


def _counts(results: Mapping[str, SpecResult]) -> str:
    by: dict[str, int] = {}
    for result in results.values():
        status = result.status if selected(result) else "not selected"
        by[status] = by.get(status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(by.items())) or "no results"


# --------------------------------------------------------------------------- judging and reporting


def _result(runs: Mapping[str, SchedulerRun], scheduler: str, spec: str) -> SpecResult | None:
    run = runs.get(scheduler)
    return run.results.get(spec) if run else None


def why(spec: str, runs: Mapping[str, SchedulerRun], suite: Suite | None = None) -> str:
    """The table's explanation for a spec either scheduler failed (or that usher skipped by the list)."""
    suite = suite or SUITES["scheduling"]
    expected, harness = suite.expected_failures, suite.harness_cannot_pass
    reasons: list[str] = []
    if spec in harness:
        reasons.append(f"harness: {harness[spec]}")
    usher = _result(runs, "usher", spec)
    kube = _result(runs, "kube-scheduler", spec)
    if spec in expected and (usher is None or usher.status != "passed"):
        reasons.append(f"usher: {expected[spec]}")
    for name, result in (("kube-scheduler", kube), ("usher", usher)):
        if result is not None and result.status == "failed" and spec not in harness:
            if name == "usher" and spec in expected:
                continue
            reasons.append(f"{name}: {first_line(result.message)}")
    return "; ".join(reasons)


def problems(runs: Mapping[str, SchedulerRun], suite: Suite | None = None) -> list[str]:
    """Everything that makes the run fail (see the module docstring); empty when all is well."""
    suite = suite or SUITES["scheduling"]
    expected, harness = suite.expected_failures, suite.harness_cannot_pass
    found: list[str] = []
    usher = runs.get("usher")
    kube = runs.get("kube-scheduler")
    for run in runs.values():
        if run.exit_code is not None and not run.results:
            found.append(f"{run.scheduler}: no JUnit results (e2e exit {run.exit_code}); see {run.artifacts}/e2e.log")
    if kube is not None:
        for spec, result in sorted(kube.results.items()):
            if result.status == "failed" and spec not in harness:
                found.append(f"kube-scheduler fails {spec!r} (the harness regressed?): {first_line(result.message)}")
    if usher is not None:
        for spec, result in sorted(usher.results.items()):
            baseline = kube.results.get(spec) if kube is not None else None
            if result.status == "failed":
                if spec in expected or spec in harness:
                    continue
                if baseline is not None and baseline.status != "passed":
                    continue  # kube-scheduler does not pass it here either
                found.append(f"usher fails {spec!r}: {first_line(result.message)}")
            elif (
                result.status == "skipped" and selected(result) and baseline is not None and baseline.status == "passed"
            ):
                found.append(f"usher's run skips {spec!r}, which kube-scheduler passes: {first_line(result.message)}")
            elif result.status == "passed" and spec in expected and spec not in suite.passes_by_chance:
                found.append(f"usher passes {spec!r}: remove it from e2e/conformance/expected_failures.py")
    return found


def _cell(result: SpecResult | None, spec: str, scheduler: str, suite: Suite) -> str:
    if result is None:
        return "not run"
    if result.status != "skipped":
        return result.status
    if scheduler == "usher" and spec in suite.expected_failures:
        return "skipped (expected failure)"
    if spec in suite.slow_and_uninformative:
        return "skipped (slow, checks nothing)"
    return "skipped"


def table(runs: Mapping[str, SchedulerRun], suite: Suite | None = None) -> list[dict[str, str]]:
    suite = suite or SUITES["scheduling"]
    listed = {*suite.expected_failures, *suite.harness_cannot_pass, *suite.slow_and_uninformative}
    # Specs no run selected (another suite's, or left out by the label filter) have no row unless a list names them.
    specs = sorted(
        {spec for run in runs.values() for spec, result in run.results.items() if selected(result) or spec in listed}
    )
    rows = []
    for spec in specs:
        rows.append({
            "spec": spec,
            "kube-scheduler": _cell(_result(runs, "kube-scheduler", spec), spec, "kube-scheduler", suite)
            if "kube-scheduler" in runs else "not run",
            "usher": _cell(_result(runs, "usher", spec), spec, "usher", suite) if "usher" in runs else "not run",
            "why": why(spec, runs, suite),
        })  # fmt: skip
    return rows


_SPEC_PREFIX = re.compile(r"^\[sig-scheduling\] |^\[sig-node\] \[DRA\] ")


def markdown(runs: Mapping[str, SchedulerRun], rows: Sequence[Mapping[str, str]]) -> str:
    lines = ["| spec | kube-scheduler | usher | why (for a spec either fails) |", "|---|---|---|---|"]
    for row in rows:
        spec = _SPEC_PREFIX.sub("", row["spec"]).replace("|", "\\|")
        cells = [spec, row["kube-scheduler"], row["usher"], row["why"].replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for run in runs.values():
        lines.append(f"- {run.scheduler}: {_counts(run.results)}; specs ran in {run.suite_seconds:.0f} s "
                     f"(control plane + nodes ready in {run.cluster_seconds:.0f} s)")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(
    artifacts: Path,
    runs: Mapping[str, SchedulerRun],
    found: Sequence[str],
    suite: Suite | None = None,
    *,
    commit: str | None = None,
) -> Path:
    """``results.json`` and ``results.md``; ``commit``: what was measured (default: the tree now)."""
    suite = suite or SUITES["scheduling"]
    rows = table(runs, suite)
    data = {
        "suite": suite.name,
        "commit": commit or _git_commit(),
        "runs": {name: asdict(run) for name, run in runs.items()},
        "table": rows,
        "problems": list(found),
    }
    (artifacts / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    path = artifacts / "results.md"
    path.write_text(markdown(runs, rows))
    return path


def replace_readme_table(readme: Path, name: str, table_text: str, commit: str) -> None:
    """Put ``table_text`` between ``<!-- conformance-table:NAME ... -->`` and ``<!-- /conformance-table:NAME -->``
    in ``readme``, with the commit it was made at; the markers must be there."""
    text = readme.read_text()
    start = re.search(rf"^<!-- conformance-table:{re.escape(name)}\b.*-->$", text, re.MULTILINE)
    end = re.search(rf"^<!-- /conformance-table:{re.escape(name)} -->$", text, re.MULTILINE)
    if start is None or end is None or end.start() < start.end():
        raise ValueError(f"{readme}: no <!-- conformance-table:{name} --> ... <!-- /conformance-table:{name} --> pair")
    head = f"<!-- conformance-table:{name} generated by python -m e2e.conformance.run --readme at {commit} -->"
    readme.write_text(text[: start.start()] + head + "\n" + table_text + text[end.start() :])


def _git_commit() -> str:
    """The commit the run measures, ``+changes`` when the tree differs from it (then the table says so); README.md,
    which ``--readme`` itself rewrites (``make dra-conformance`` runs two suites in turn), does not count."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                          check=False).stdout.strip()  # fmt: skip
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!README.md"],
                             capture_output=True, text=True, cwd=REPO, check=False).stdout.strip()  # fmt: skip
    return f"{head}+changes" if head and changed else head


# --------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m e2e.conformance.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=list(SUITES), default="scheduling", help="which specs (see SUITES)")
    parser.add_argument("--scheduler", choices=[*SCHEDULERS, "both"], default="both")
    parser.add_argument("--artifacts", type=Path, help="output dir (default: $USHER_ARTIFACTS/conformance-<time>)")
    parser.add_argument("--focus", help="--ginkgo.focus (default: the suite's; --ci: the subset CI runs)")
    parser.add_argument("--ci", action="store_true", help="only the suite's CI subset (see Suite.ci_focus)")
    parser.add_argument(
        "--parallel", action="store_true",
        help="run both schedulers at once, each on its own harness (the DRA kubelet specs mostly wait)",
    )  # fmt: skip
    parser.add_argument(
        "--readme", action="store_true",
        help="write the table into README.md in place of the suite's (both schedulers, whole suite only)",
    )  # fmt: skip
    parser.add_argument("--skip", default="", help="extra --ginkgo.skip regex (RE2)")
    parser.add_argument(
        "--skip-known", action="store_true",
        help="skip known harness limits, SLOW_AND_UNINFORMATIVE specs and, for usher, its expected failures (CI)",
    )  # fmt: skip
    parser.add_argument("--nodes", type=int, default=4, help="kwok nodes (alternating between two zones)")
    parser.add_argument("--timeout-minutes", type=int, default=60, help="--ginkgo.timeout per scheduler")
    parser.add_argument("--seed", type=int, default=1, help="--ginkgo.seed (spec order is randomized)")
    return parser.parse_args(argv)


def skips_for(scheduler: str, extra: str, *, skip_known: bool, suite: Suite | None = None) -> str:
    """The ``--ginkgo.skip`` regex for one scheduler's run."""
    suite = suite or SUITES["scheduling"]
    parts = [extra] if extra else []
    if skip_known:
        known = set(suite.harness_cannot_pass) | set(suite.slow_and_uninformative)
        if scheduler == "usher":
            known |= set(suite.expected_failures)
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
    suite = SUITES[args.suite]
    name = "conformance" if suite.name == "scheduling" else f"conformance-{suite.name}"
    artifacts: Path = args.artifacts or root / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    artifacts.mkdir(parents=True, exist_ok=True)
    focus = args.focus or (suite.ci_focus if args.ci and suite.ci_focus else suite.focus)
    if args.readme and (args.scheduler != "both" or focus != suite.focus or args.skip or args.skip_known):
        print("--readme takes the whole suite against both schedulers", file=sys.stderr)
        return 2
    if args.readme and not suite.readme_table:
        print(f"the {suite.name} suite has no generated table in README.md", file=sys.stderr)
        return 2
    commit = _git_commit()  # at the start: what the schedulers and the harness were started from
    binary = ensure_binary()
    schedulers = SCHEDULERS if args.scheduler == "both" else (args.scheduler,)

    def one(scheduler: str) -> SchedulerRun:
        return run_scheduler(
            scheduler, artifacts / scheduler, binary=binary, focus=focus,
            skip=skips_for(scheduler, args.skip, skip_known=args.skip_known, suite=suite), nodes=args.nodes,
            timeout_minutes=args.timeout_minutes, seed=args.seed, suite=suite,
        )  # fmt: skip

    pool = ThreadPoolExecutor(max_workers=len(schedulers) if args.parallel else 1)
    try:
        runs: dict[str, SchedulerRun] = dict(zip(schedulers, pool.map(one, schedulers), strict=True))
    except BaseException:  # Ctrl-C, SIGTERM: end the e2e runs, so each thread stops its harness and returns
        for running in list(_RUNNING):
            running.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    found = problems(runs, suite)
    report = write_report(artifacts, runs, found, suite, commit=commit)
    print(report.read_text())
    if args.readme:
        replace_readme_table(REPO / "README.md", suite.readme_table, report.read_text(), commit)
        print(f"[conformance] README.md: the {suite.readme_table} table replaced", file=sys.stderr)
    for problem in found:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    print(f"[conformance] artifacts in {artifacts}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
