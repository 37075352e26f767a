"""Kubernetes' own DRA e2e specs (test/e2e/dra) against usher, in CI.

Two suites of e2e/conformance/run.py, each on a fresh harness with usher as the cluster's only scheduler:

- ``dra``: every spec that needs no kubelet ("control plane", "CRUD Tests", "ResourceSlice Controller") of a
  default 1.37 cluster (no alpha or off-by-default gate), on four kwok nodes. About 5 minutes.
- ``dra-kubelet``: 12 scheduling and allocation specs that need a kubelet (`run.DRA_KUBELET_CI_FOCUS`), on one
  real node: kubelet and containerd with CDI, upstream's test driver registered through its kubelet plugin (run
  inside e2e.test behind the proxy pod, e2e/dra-proxy), test pods in busybox. About 5 minutes. `make
  dra-conformance` runs the whole suite against both schedulers and writes README's tables.

Any spec usher fails that is not on `DRA_EXPECTED_FAILURES` (empty) fails the test; a spec that skips itself is
reported as skipped, never as passed, and the run must have run specs. The test binary and the images are
built by ``make test``'s prerequisites (``bash e2e/build-binaries.sh e2e-test``, ``make image``); a failed
build fails the test, it is never skipped.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from e2e.conformance import run as conformance
from e2e.conformance.expected_failures import DRA_EXPECTED_FAILURES, DRA_MAX_ENTRIES, DRA_PASSES_BY_CHANCE
from e2e.image import archive

DRA = conformance.SUITES["dra"]
DRA_KUBELET = conformance.SUITES["dra-kubelet"]


@pytest.fixture(scope="module")
def e2e_binary() -> Path:
    return conformance.ensure_binary()


def dry_run(binary: Path, suite: conformance.Suite, focus: str, junit: Path) -> dict[str, conformance.SpecResult]:
    """The specs a run of ``suite`` with ``focus`` would run, by name."""
    subprocess.run(
        [str(binary), "--provider=skeleton", "--ginkgo.dry-run", f"--ginkgo.focus={focus}",
         f"--ginkgo.label-filter={suite.label_filter}", f"--ginkgo.junit-report={junit}"],
        capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    return {k: v for k, v in conformance.parse_junit(junit, suite.marker).items() if v.status != "skipped"}


def test_dra_expected_failures_only_shrink() -> None:
    assert len(DRA_EXPECTED_FAILURES) <= DRA_MAX_ENTRIES, (
        "DRA_EXPECTED_FAILURES grew: a spec usher newly fails is a bug to fix, not an entry to add"
    )
    for spec, reason in DRA_EXPECTED_FAILURES.items():
        assert spec.startswith("[sig-node] [DRA] "), spec
        assert reason.strip(), f"{spec}: give the missing feature in plain words"
    assert DRA_PASSES_BY_CHANCE.issubset(DRA_EXPECTED_FAILURES)


@pytest.mark.e2e
def test_the_dra_suites_hold_the_specs_they_name(e2e_binary: Path, tmp_path: Path) -> None:
    """The suites select what they say (a rename upstream cannot silently drop specs), and every listed name is a
    spec of the pinned suite."""
    control_plane = dry_run(e2e_binary, DRA, DRA.focus, tmp_path / "dra.xml")
    kubelet = dry_run(e2e_binary, DRA_KUBELET, DRA_KUBELET.focus, tmp_path / "dra-kubelet.xml")
    ci = dry_run(e2e_binary, DRA_KUBELET, DRA_KUBELET.ci_focus, tmp_path / "dra-kubelet-ci.xml")
    assert len(control_plane) >= 25, sorted(control_plane)
    assert len(kubelet) >= 60, sorted(kubelet)
    assert not set(control_plane) & set(kubelet), "a spec in both suites"
    assert all("kubelet" not in spec and "Feature:DynamicResourceAllocation" not in spec for spec in control_plane)
    assert not [s for s in {**control_plane, **kubelet} if "[Alpha]" in s or "[Serial]" in s or "[Slow]" in s]
    assert set(ci) <= set(kubelet) and len(ci) == 12, sorted(ci)
    assert "[sig-node] [DRA] control plane with different ResourceSlices keeps pod pending because of CEL runtime " \
        "errors" in control_plane  # fmt: skip
    listed = set(DRA_EXPECTED_FAILURES) | set(conformance.DRA_HARNESS_CANNOT_PASS)
    unknown = listed - set(control_plane) - set(kubelet)
    assert not unknown, f"not specs of the DRA suites: {sorted(unknown)}"


def _run_usher(suite: conformance.Suite, focus: str, outdir: Path, binary: Path) -> None:
    run = conformance.run_scheduler(
        "usher", outdir, binary=binary, focus=focus, suite=suite, nodes=4, timeout_minutes=25, seed=1,
        skip=conformance.skips_for("usher", "", skip_known=True, suite=suite),
    )  # fmt: skip
    runs = {"usher": run}
    found = conformance.problems(runs, suite)
    conformance.write_report(outdir.parent, runs, found, suite)
    ran = [spec for spec, result in run.results.items() if result.status != "skipped"]
    assert ran, f"no spec ran; see {outdir / 'e2e.log'}"
    # A spec that skipped itself (too few nodes, say) ran and proved nothing: not a pass.
    skipped = sorted(
        s for s, result in run.results.items() if result.status == "skipped" and conformance.selected(result)
    )
    assert not skipped, f"specs skipped themselves (not a pass): {skipped}; see {outdir / 'e2e.log'}"
    assert not found, "\n".join([*found, f"artifacts: {outdir}"])


@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_usher_passes_the_dra_control_plane_specs(e2e_binary: Path, artifacts_dir: Path) -> None:
    _run_usher(DRA, DRA.focus, artifacts_dir / "conformance-dra" / "usher", e2e_binary)


@pytest.mark.e2e
@pytest.mark.timeout(1800)
def test_usher_passes_the_dra_kubelet_specs_on_the_real_node(e2e_binary: Path, artifacts_dir: Path) -> None:
    for name in ("pause", "hostpathplugin", "busybox"):
        assert archive(name).is_file(), f"{archive(name)} missing: build it with `make image`"
    _run_usher(DRA_KUBELET, DRA_KUBELET.ci_focus, artifacts_dir / "conformance-dra-kubelet" / "usher", e2e_binary)


# --------------------------------------------------------------------------- the runner's own logic


def test_dra_spec_names_drop_the_label_list_and_the_kubelet_version() -> None:
    raw = (
        "[It] [sig-node] [DRA] [FeatureGate:DRAExtendedResource] [Feature:DynamicResourceAllocation] must run "
        "[KubeletMinVersion:1.34] [FeatureGate:DynamicResourceAllocation] [sig-node, DRA, "
        "FeatureGate:DRAExtendedResource, KubeletMinVersion:1.34] [kubelet: [>=1.34]]"
    )
    assert conformance.spec_name(raw) == (
        "[sig-node] [DRA] [FeatureGate:DRAExtendedResource] [Feature:DynamicResourceAllocation] must run "
        "[KubeletMinVersion:1.34] [FeatureGate:DynamicResourceAllocation]"
    )
    assert conformance.spec_name("[It] [sig-node] [DRA] control plane x [sig-node, DRA]") == (
        "[sig-node] [DRA] control plane x"
    )


def test_a_dra_spec_usher_fails_is_a_problem_unless_kube_scheduler_fails_it_too() -> None:
    def run(scheduler: str, **statuses: str) -> conformance.SchedulerRun:
        results = {f"[sig-node] [DRA] {k}": conformance.SpecResult(v, message="boom") for k, v in statuses.items()}
        return conformance.SchedulerRun(scheduler, results=results, exit_code=0)

    runs = {
        "kube-scheduler": run("kube-scheduler", a="passed", b="failed"),
        "usher": run("usher", a="failed", b="failed"),
    }
    found = conformance.problems(runs, DRA)
    assert found == [
        "kube-scheduler fails '[sig-node] [DRA] b' (the harness regressed?): boom",
        "usher fails '[sig-node] [DRA] a': boom",
    ]
    rows = conformance.table(runs, DRA)
    assert [(r["spec"], r["kube-scheduler"], r["usher"]) for r in rows] == [
        ("[sig-node] [DRA] a", "passed", "failed"),
        ("[sig-node] [DRA] b", "failed", "failed"),
    ]
    assert "| a | passed | failed | usher: boom |" in conformance.markdown(runs, rows)


def test_the_readme_table_is_replaced_between_its_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(
        "intro\n<!-- conformance-table:dra generated by old -->\n| old |\n<!-- /conformance-table:dra -->\nafter\n"
    )
    conformance.replace_readme_table(readme, "dra", "| new |\n", "abc1234")
    assert readme.read_text() == (
        "intro\n<!-- conformance-table:dra generated by python -m e2e.conformance.run --readme at abc1234 -->\n"
        "| new |\n<!-- /conformance-table:dra -->\nafter\n"
    )
    with pytest.raises(ValueError, match="no <!-- conformance-table:dra-kubelet -->"):
        conformance.replace_readme_table(readme, "dra-kubelet", "| new |\n", "abc1234")
