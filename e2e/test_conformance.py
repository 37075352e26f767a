"""Kubernetes' own sig-scheduling e2e specs against usher, in CI.

usher runs as the cluster's only scheduler (profile ``default-scheduler``) on
the conformance harness (e2e/conformance/cluster.py), and
``e2e.test`` runs every sig-scheduling spec except the ones listed
as known: harness limits (no scheduler passes them on kwok; none today), one
spec that spends 5 minutes checking nothing (run.SLOW_AND_UNINFORMATIVE) and
usher's expected failures (e2e/conformance/expected_failures.py, missing
features). About 2.5 minutes.
Any other spec usher fails fails this test: kube-scheduler passes all of them
on this harness (``make conformance`` checks that side, and whether usher
passes a listed spec now).

The test binary is built by ``bash e2e/build-binaries.sh e2e-test`` (cached by
version: seconds when warm, about 2 minutes after the control-plane binaries'
build); a failed build fails the test, it is never skipped.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.conformance import run as conformance
from e2e.conformance.cluster import allocatable_patch
from e2e.conformance.expected_failures import EXPECTED_FAILURES, MAX_ENTRIES, PASSES_BY_CHANCE


@pytest.fixture(scope="module")
def e2e_binary() -> Path:
    return conformance.ensure_binary()


def test_expected_failures_only_shrink() -> None:
    assert len(EXPECTED_FAILURES) <= MAX_ENTRIES, (
        "e2e/conformance/expected_failures.py grew: a spec usher newly fails is a bug to fix, not an entry to add"
    )
    for spec, reason in EXPECTED_FAILURES.items():
        assert spec.startswith("[sig-scheduling] "), spec
        assert reason.strip(), f"{spec}: give the missing feature in plain words"
    assert PASSES_BY_CHANCE.issubset(EXPECTED_FAILURES), "PASSES_BY_CHANCE names specs off the list"
    overlap = set(EXPECTED_FAILURES) & set(conformance.HARNESS_CANNOT_PASS)
    assert not overlap, f"a spec is either a harness limit or an usher gap, not both: {overlap}"


@pytest.mark.e2e
def test_listed_specs_exist(e2e_binary: Path, tmp_path: Path) -> None:
    """Every listed name is a spec of the pinned suite, so a rename cannot silently unskip or hide one."""
    junit = tmp_path / "dry-run.xml"
    subprocess.run(
        [str(e2e_binary), "--provider=skeleton", "--ginkgo.dry-run", f"--ginkgo.focus={conformance.DEFAULT_FOCUS}",
         f"--ginkgo.junit-report={junit}"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    specs = set(conformance.parse_junit(junit))
    assert len(specs) >= 30, sorted(specs)
    listed = set(EXPECTED_FAILURES) | set(conformance.HARNESS_CANNOT_PASS) | set(conformance.SLOW_AND_UNINFORMATIVE)
    unknown = listed - specs
    assert not unknown, f"not specs of {conformance.TEST_BINARY}: {sorted(unknown)}"


@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_usher_passes_the_specs_kube_scheduler_passes(e2e_binary: Path, artifacts_dir: Path) -> None:
    outdir = artifacts_dir / "conformance" / "usher"
    run = conformance.run_scheduler(
        "usher", outdir, binary=e2e_binary, focus=conformance.DEFAULT_FOCUS,
        skip=conformance.skips_for("usher", "", skip_known=True), nodes=4, timeout_minutes=25, seed=1,
    )  # fmt: skip
    runs = {"usher": run}
    conformance.write_report(outdir.parent, runs, conformance.problems(runs))
    ran = [spec for spec, result in run.results.items() if result.status != "skipped"]
    assert ran, f"no spec ran; see {outdir / 'e2e.log'}"
    found = conformance.problems(runs)
    assert not found, "\n".join([*found, f"artifacts: {outdir}"])


# --------------------------------------------------------------------------- the runner's own logic


def test_spec_names_drop_the_ginkgo_prefix_and_label_list() -> None:
    raw = "[It] [sig-scheduling] LimitRange should list, patch and delete [Conformance] [sig-scheduling, Conformance]"
    assert conformance.spec_name(raw) == "[sig-scheduling] LimitRange should list, patch and delete [Conformance]"
    assert conformance.spec_name("[It] [sig-scheduling] X y [sig-scheduling]") == "[sig-scheduling] X y"


def test_skip_regex_is_re2_safe() -> None:
    regex = conformance.skip_regex(["[sig-scheduling] A (b) c [Serial]"])
    assert regex == r"\[sig-scheduling\] A \(b\) c \[Serial\]"


def test_allocatable_mirror_copies_extended_resources_only() -> None:
    node = {
        "status": {
            "capacity": {"cpu": "4", "example.com/beardsecond": "1k", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": "3900m", "node.kubernetes.io/foo": "5", "example.com/gone": "1"},
        }
    }
    assert allocatable_patch(node) == {"example.com/beardsecond": "1k", "example.com/gone": None}


def _run(scheduler: str, **statuses: str) -> conformance.SchedulerRun:
    results = {f"[sig-scheduling] {k}": conformance.SpecResult(v, message="boom") for k, v in statuses.items()}
    return conformance.SchedulerRun(scheduler, results=results, exit_code=0)


def test_usher_failing_what_kube_scheduler_passes_is_a_problem() -> None:
    runs = {"kube-scheduler": _run("kube-scheduler", a="passed", b="failed"), "usher": _run("usher", a="failed")}
    found = conformance.problems(runs)
    assert any("usher fails '[sig-scheduling] a'" in p for p in found)
    assert any("kube-scheduler fails '[sig-scheduling] b'" in p for p in found)


def test_a_listed_spec_usher_passes_must_leave_the_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXPECTED_FAILURES, "[sig-scheduling] a", "no preemption yet")
    runs = {"usher": _run("usher", a="passed")}
    assert conformance.problems(runs) == [
        "usher passes '[sig-scheduling] a': remove it from e2e/conformance/expected_failures.py"
    ]
    runs = {"usher": _run("usher", a="failed")}
    assert conformance.problems(runs) == []
