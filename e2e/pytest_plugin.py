"""pytest plugin: one real cluster per test session, one fresh namespace per test.

Register it with ``pytest_plugins = ["e2e.pytest_plugin"]`` in the root conftest.

The ``control_plane`` fixture is an `e2e.controlplane.Cluster`: a local
control plane started for the session, or the existing cluster that
``USHER_KUBECONFIG`` names. Tests that restart components ask for
``restartable_control_plane`` instead, which is skipped on an external cluster.

Why session-scoped: the control plane starts in a few seconds, but that is
still too slow to pay per test; tests stay independent through their own
namespaces (and their own node names, see `unique_name`).

Artifacts: everything of a run lives in
``${USHER_ARTIFACTS:-/tmp/usher-artifacts}/run-<timestamp>-<pid>/`` (the
control plane's work directory, with component logs, is ``control-plane/``
inside it; other fixtures may add theirs via ``artifacts_dir``). When any
test fails the directory is kept (minus etcd's data, ~60 MB of preallocated
WAL), failing tests' namespaces are dumped into it, and the terminal summary
prints its path; when all pass it is deleted. ``USHER_KEEP_ARTIFACTS=1``
keeps all of it regardless.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from e2e import controlplane
from e2e.conformance.cluster import ALPHA_BETA_APIS, FEATURE_GATES
from e2e.controlplane import Cluster, ControlPlane, ExternalCluster, RestartableControlPlane

ARTIFACTS_ENV = "USHER_ARTIFACTS"
KEEP_ENV = "USHER_KEEP_ARTIFACTS"
#: Reserved for running the suite against an existing cluster (kind, a cloud
#: cluster). Deliberately not ``KUBECONFIG``: developers often have that set
#: for unrelated clusters, and the suite must never touch them by accident.
EXTERNAL_KUBECONFIG_ENV = "USHER_KUBECONFIG"

_NAMESPACE_DUMP_KINDS = (
    "all,events,resourceclaims,resourceclaimtemplates,configmaps,serviceaccounts,persistentvolumeclaims"
)

#: Cluster-scoped state dumped when a test failed; the storage kinds are e2e/storage.py's.
_CLUSTER_DUMP_KINDS = (
    "nodes,leases,deviceclasses,priorityclasses,persistentvolumes,storageclasses,csidrivers,csinodes,"
    "csistoragecapacities"
)

#: The session's API server serves PodGroups and Workloads (GenericWorkload, scheduling.k8s.io/v1beta1), as
#: the conformance harness's does: usher's gang scheduling needs them (e2e/test_gangs.py), and what else the
#: gate turns on (an optional pod field, two beta APIs) changes nothing for the other tests.
#: TopologyAwareWorkloadScheduling too: the API server keeps a PodGroup's schedulingConstraints only with it;
#: and DRAWorkloadResourceClaims, without which it drops a PodGroup's resourceClaims.
API_SERVER_ARGS = (
    f"--feature-gates={FEATURE_GATES},TopologyAwareWorkloadScheduling=true,DRAWorkloadResourceClaims=true",
    f"--runtime-config={ALPHA_BETA_APIS}",
)
#: DRAWorkloadResourceClaims on kube-controller-manager too: its resourceclaim controller makes a PodGroup's
#: claims from templates and records them in the PodGroup's and its pods' status (e2e/test_gangs.py).
KCM_ARGS = ("--feature-gates=GenericWorkload=true,DRAWorkloadResourceClaims=true",)

_RUN_DIR = pytest.StashKey[Path]()
_PLANE = pytest.StashKey[Cluster]()
#: What the session started (a local control plane), closed by the fixture or, failing that, at session end.
_STARTED = pytest.StashKey[contextlib.ExitStack]()
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``e2e`` marker so the plugin works without the project's ini too."""
    config.addinivalue_line("markers", "e2e: needs the real local control plane (kube-apiserver, etcd, kcm, kwok)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report on the item, so fixtures can tell whether their test failed."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def run_dir(config: pytest.Config) -> Path:
    """This session's artifacts directory, created on first use."""
    if _RUN_DIR not in config.stash:
        root = Path(os.environ.get(ARTIFACTS_ENV) or "/tmp/usher-artifacts")
        path = root / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        path.mkdir(parents=True, exist_ok=False)
        config.stash[_RUN_DIR] = path
    return config.stash[_RUN_DIR]


def unique_name(prefix: str, hint: str = "") -> str:
    """A DNS-1123 label (<= 63 chars) unique per call: ``<prefix>-<hint>-<6 hex>``."""
    slug = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-")
    stem = f"{prefix}-{slug}"[:55].rstrip("-") if slug else prefix[:55]
    return f"{stem}-{secrets.token_hex(3)}"


@pytest.fixture(scope="session")
def artifacts_dir(request: pytest.FixtureRequest) -> Path:
    """The session's artifacts directory (kept when a test fails, deleted otherwise)."""
    return run_dir(request.config)


def _open_cluster(workdir: Path, started: contextlib.ExitStack) -> Cluster:
    """The session's cluster: the one ``USHER_KUBECONFIG`` names (e.g. kind via e2e/kind.sh), used as it
    is, or else a local control plane that ``started`` stops."""
    external = os.environ.get(EXTERNAL_KUBECONFIG_ENV)
    if external:
        return ExternalCluster.from_kubeconfig(Path(external), workdir)
    return started.enter_context(
        controlplane.running(workdir, extra_apiserver_args=API_SERVER_ARGS, extra_kcm_args=KCM_ARGS)
    )


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest, artifacts_dir: Path) -> Iterator[Cluster]:
    """The session's cluster: a real local control plane (etcd, kube-apiserver, kcm, kwok), or the
    external cluster of ``USHER_KUBECONFIG``."""
    started = request.config.stash[_STARTED] = contextlib.ExitStack()
    with started:
        plane = _open_cluster(artifacts_dir / "control-plane", started)
        request.config.stash[_PLANE] = plane
        yield plane
        if request.session.testsfailed:
            # Cluster-wide state next to the logs: often why a pod did not schedule.
            with contextlib.suppress(Exception):
                (artifacts_dir / "cluster-state.yaml").write_text(
                    plane.kubectl("get", _CLUSTER_DUMP_KINDS, "-A", "-o", "yaml")
                )


@pytest.fixture
def restartable_control_plane(control_plane: Cluster) -> RestartableControlPlane:
    """The session's cluster, for tests that restart its components; skipped on an external cluster."""
    if not isinstance(control_plane, RestartableControlPlane):
        pytest.skip(
            f"restarts control-plane processes, which only a local control plane lets the harness do; "
            f"{EXTERNAL_KUBECONFIG_ENV} points at the external cluster {control_plane.server}"
        )
    return control_plane


@pytest.fixture
def namespace(request: pytest.FixtureRequest, control_plane: Cluster) -> Iterator[str]:
    """A fresh namespace for one test (default ServiceAccount ready), deleted afterwards.

    When the test failed, its namespace's objects and events are first dumped
    to ``<artifacts>/namespaces/<name>.yaml``.
    """
    name = control_plane.create_namespace(unique_name("e2e", request.node.name))
    yield name
    reports = request.node.stash.get(_REPORTS, {})
    if any(r.failed for r in reports.values()):
        dump_dir = run_dir(request.config) / "namespaces"
        dump_dir.mkdir(exist_ok=True)
        with contextlib.suppress(Exception):
            (dump_dir / f"{name}.yaml").write_text(
                control_plane.kubectl("get", _NAMESPACE_DUMP_KINDS, "-n", name, "-o", "yaml")
            )
    # Pods go first and at once: many are bound to kwok nodes their test has already deleted, which
    # nothing would then terminate until the pod GC's 40 s orphan grace, and each late removal of a
    # bound pod would be an AssignedPodDelete event in whatever test runs then.
    with contextlib.suppress(Exception):
        control_plane.request("DELETE", f"/api/v1/namespaces/{name}/pods?gracePeriodSeconds=0")
    with contextlib.suppress(Exception):
        control_plane.request("DELETE", f"/api/v1/namespaces/{name}")


def _keep_artifacts(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> bool:
    if os.environ.get(KEEP_ENV, "") not in {"", "0"}:
        return True
    ok = exitstatus in {pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED}
    return bool(session.testsfailed) or not ok


def pytest_sessionfinish(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
    """Stop anything still running, then delete the artifacts unless something failed."""
    config = session.config
    started = config.stash.get(_STARTED, None)
    if started is not None:
        started.close()  # a no-op when the fixture's teardown already ran
    path = config.stash.get(_RUN_DIR, None)
    if path is None:
        return
    if not _keep_artifacts(session, exitstatus):
        shutil.rmtree(path, ignore_errors=True)
        del config.stash[_RUN_DIR]
    elif os.environ.get(KEEP_ENV, "") in {"", "0"}:
        # etcd preallocates ~60 MB of WAL; logs and dumps are what a post-mortem reads.
        shutil.rmtree(path / "control-plane" / "etcd", ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Point at the kept artifacts, and report how long the control plane took to start."""
    plane = config.stash.get(_PLANE, None)
    path = config.stash.get(_RUN_DIR, None)
    if plane is None and path is None:
        return
    terminalreporter.write_sep("-", "usher e2e")
    if isinstance(plane, ControlPlane) and plane.startup_seconds:
        terminalreporter.write_line(f"control plane started in {plane.startup_seconds:.1f} s {plane.timings}")
    if path is not None:
        terminalreporter.write_line(f"artifacts kept in {path} (component logs: {path / 'control-plane' / 'logs'})")
