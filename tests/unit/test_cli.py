"""The CLI refuses bad start-up options before touching the cluster, naming what is wrong."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from usher.__main__ import _parser, run_options
from usher.config import ConfigError

REPO = Path(__file__).resolve().parents[2]

UNREACHABLE_KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
"""A cluster at a documentation-only address (RFC 5737): any connection attempt would hang or fail."""

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def usher(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "usher", "run", *args],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "operator"), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--feature-gates", "SchedulerAsyncAPICalls=false,SchedulerPreEnqueuePodStatus=true"),
            "SchedulerPreEnqueuePodStatus=true requires",
        ),
        (("--feature-gates", "NoSuchGate=true"), "unknown feature gate 'NoSuchGate'"),
        (("--config", "/nonexistent/usher.yaml"), "--config /nonexistent/usher.yaml: No such file"),
        (("--metrics-bind-address", "nowhere"), "--metrics-bind-address 'nowhere': expected HOST:PORT"),
        (
            ("--leader-elect", "--leader-elect-retry-period", "-1"),
            "usher: invalid configuration: --leader-elect-retry-period: must be greater than zero, got -1s",
        ),
        (
            ("--leader-elect", "--leader-elect-lease-duration", "inf"),
            "usher: invalid configuration: --leader-elect-lease-duration: must be a finite duration, got inf",
        ),
        (("--scheduler-name", "Usher"), "usher: invalid configuration: --scheduler-name: must be a DNS-1123 subdomain"),
    ],
    ids=[
        "invalid gate combination",
        "unknown gate",
        "missing config",
        "bad bind address",
        "negative retry period",
        "infinite lease duration",
        "bad scheduler name",
    ],
)
def test_invalid_start_up_options_stop_usher_with_a_message(args: tuple[str, ...], message: str) -> None:
    result = usher("--kubeconfig", "/dev/null", *args)
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    ("config", "message"),
    [
        pytest.param(
            "profiles:\n- schedulerName: usher\n  pluginConfig:\n  - name: NodeResourcesFit\n"
            "    args: {scoringStrategy: {type: Bogus}}\n",
            "usher: invalid configuration: profiles[0].pluginConfig[0].args.scoringStrategy.type: 'Bogus'",
            id="bad plugin args",
        ),
        pytest.param(
            "profiles:\n- schedulerName: usher\n- schedulerName: packed\n  plugins:\n"
            "    multiPoint: {disabled: [{name: DefaultBinder}]}\n",
            "usher: invalid configuration: profiles[1].plugins.bind: a bind plugin is required",
            id="a profile that cannot bind",
        ),
        pytest.param(
            "metricsBindAddress: nowhere\n",
            "usher: invalid configuration: metricsBindAddress: expected HOST:PORT, got 'nowhere'",
            id="bad metricsBindAddress",
        ),
        pytest.param(
            "podInitialBackoffSeconds: .nan\n",
            "usher: invalid configuration: podInitialBackoffSeconds: must be an integer greater than 0, got nan",
            id="nan podInitialBackoffSeconds",
        ),
        pytest.param(
            "leaderElection: {leaderElect: true, retryPeriod: 0s}\n",
            "usher: invalid configuration: leaderElection.retryPeriod: must be greater than zero, got 0s",
            id="zero retryPeriod",
        ),
        pytest.param(
            "profiles:\n- schedulerName: usher\n  pluginConfig:\n  - name: DynamicResources\n"
            "    args: {filterTimeout: -1s}\n",
            "usher: invalid configuration: profiles[0].pluginConfig[0].args.filterTimeout: must be zero or positive",
            id="negative filterTimeout",
        ),
    ],
)
def test_a_bad_configuration_file_exits_2_before_connecting(tmp_path: Path, config: str, message: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    (tmp_path / "usher.yaml").write_text(HEADER + config)
    result = usher("--kubeconfig", str(kubeconfig), "--config", str(tmp_path / "usher.yaml"), timeout=30)
    assert (result.returncode, result.stderr.strip()[: len(message)]) == (2, message)
    assert "Traceback" not in result.stderr and "connecting to" not in result.stderr


def test_fields_usher_ignores_are_logged_once_at_start_up(tmp_path: Path) -> None:
    (tmp_path / "usher.yaml").write_text(
        HEADER + "parallelism: 8\nclientConnection: {kubeconfig: /nonexistent/kubeconfig, qps: 100}\n"
        "profiles:\n- schedulerName: usher\n  pluginConfig: [{name: NodeDeclaredFeatures, args: {}}]\n"
    )
    result = usher("--config", str(tmp_path / "usher.yaml"))
    ignored = [line.split(": ", 2)[2] for line in result.stderr.splitlines() if "accepted and ignored" in line]
    assert [line.split(":")[0] for line in ignored] == [
        "parallelism",
        "clientConnection.qps",
        "profiles[0].pluginConfig[0]",
    ]
    assert all(" INFO usher: configuration: " in line for line in result.stderr.splitlines() if "ignored" in line)
    # clientConnection.kubeconfig was the one to connect with: its absence is what stops usher.
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        2,
        "usher: --kubeconfig /nonexistent/kubeconfig: no such file",
    )


def options(tmp_path: Path, config: str, *flags: str) -> tuple[str | None, str]:
    (tmp_path / "usher.yaml").write_text(HEADER + config)
    result = run_options(_parser().parse_args(["run", "--config", str(tmp_path / "usher.yaml"), *flags]))
    return result.kubeconfig, result.metrics_bind_address


@pytest.mark.parametrize(
    ("config", "flags", "expected"),
    [
        ("", (), (None, "127.0.0.1:10251")),
        (
            "clientConnection: {kubeconfig: /etc/k.conf}\nmetricsBindAddress: 0.0.0.0:10259\n",
            (),
            ("/etc/k.conf", "0.0.0.0:10259"),
        ),
        (
            "clientConnection: {kubeconfig: /etc/k.conf}\nmetricsBindAddress: 0.0.0.0:10259\n",
            ("--kubeconfig", "/mine", "--metrics-bind-address", "127.0.0.1:0"),
            ("/mine", "127.0.0.1:0"),
        ),
    ],
    ids=["neither: built-in defaults", "the file's values", "flags win over the file"],
)
def test_the_config_files_kubeconfig_and_metrics_address_are_defaults_for_the_flags(
    tmp_path: Path, config: str, flags: tuple[str, ...], expected: tuple[str | None, str]
) -> None:
    assert options(tmp_path, config, *flags) == expected


def lease(config: str | None, *flags: str, tmp_path: Path) -> Any:
    """The leader-election settings ``usher run`` would use with this --config file (None: no file) and flags."""
    arguments = ["run", *flags]
    if config is not None:
        (tmp_path / "usher.yaml").write_text(HEADER + config)
        arguments += ["--config", str(tmp_path / "usher.yaml")]
    return run_options(_parser().parse_args(arguments)).lease


ON = "leaderElection: {leaderElect: true}\n"


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-retry-period", "0"),
            "--leader-elect-retry-period: must be greater than zero, got 0s",
            id="--leader-elect-retry-period zero (was taken as unset)",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-retry-period", "-1"),
            "--leader-elect-retry-period: must be greater than zero, got -1s",
            id="--leader-elect-retry-period negative",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-retry-period", "nan"),
            "--leader-elect-retry-period: must be a finite duration, got nan",
            id="--leader-elect-retry-period nan",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-renew-deadline", "-5"),
            "--leader-elect-renew-deadline: must be greater than zero, got -5s",
            id="--leader-elect-renew-deadline negative",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-lease-duration", "inf"),
            "--leader-elect-lease-duration: must be a finite duration, got inf",
            id="--leader-elect-lease-duration infinite",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-lease-duration", "3e9"),
            "--leader-elect-lease-duration: must be at most 2147483647s",
            id="--leader-elect-lease-duration beyond the Lease's int32",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-lease-duration", "10"),
            "--leader-elect-lease-duration: must be greater than leaderElection.renewDeadline (10s), got 10s",
            id="--leader-elect-lease-duration not above the renew deadline",
        ),
        pytest.param(
            "leaderElection: {leaderElect: true, retryPeriod: 3s}\n",
            ("--leader-elect-renew-deadline", "3.5"),
            "--leader-elect-renew-deadline: must be greater than leaderElection.retryPeriod x 1.2 (3.6s), got 3.5s",
            id="--leader-elect-renew-deadline against the file's retryPeriod",
        ),
        pytest.param(
            "leaderElection: {retryPeriod: -1s}\n",
            ("--leader-elect",),
            "leaderElection.retryPeriod: must be greater than zero, got -1s",
            id="leaderElection.retryPeriod of an election --leader-elect turns on",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-resource-name", "Usher"),
            "--leader-elect-resource-name: the Lease's name must be a DNS-1123 subdomain",
            id="--leader-elect-resource-name",
        ),
        pytest.param(
            None,
            ("--leader-elect", "--leader-elect-resource-namespace", "usher.system"),
            "--leader-elect-resource-namespace: must be a DNS-1123 label",
            id="--leader-elect-resource-namespace",
        ),
        pytest.param(
            None,
            ("--scheduler-name", "usher\n"),
            "--scheduler-name: must be a DNS-1123 subdomain",
            id="--scheduler-name with a trailing newline",
        ),
        pytest.param(
            None,
            ("--scheduler-name", "usher_packed"),
            "--scheduler-name: must be a DNS-1123 subdomain",
            id="--scheduler-name with an underscore",
        ),
        pytest.param(
            None,
            ("--pre-enqueue-status-delay", "nan"),
            "--pre-enqueue-status-delay: must be a finite number of seconds >= 0, got nan",
            id="--pre-enqueue-status-delay nan",
        ),
        pytest.param(
            None,
            ("--pre-enqueue-status-delay", "inf"),
            "--pre-enqueue-status-delay: must be a finite number of seconds >= 0, got inf",
            id="--pre-enqueue-status-delay infinite",
        ),
        pytest.param(
            None,
            ("--pre-enqueue-status-delay", "-1"),
            "--pre-enqueue-status-delay: must be a finite number of seconds >= 0, got -1.0",
            id="--pre-enqueue-status-delay negative",
        ),
    ],
)
def test_bad_start_up_flags_are_refused_naming_the_flag_or_field(
    tmp_path: Path, config: str | None, flags: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        lease(config, *flags, tmp_path=tmp_path)


def test_leader_election_flags_win_over_the_file_and_zero_is_a_value(tmp_path: Path) -> None:
    settings = lease(
        ON + "profiles: [{schedulerName: usher.example.com}]\n",
        "--leader-elect-lease-duration=30",
        "--leader-elect-renew-deadline=20",
        "--leader-elect-retry-period=0.5",
        "--leader-elect-resource-namespace=usher-system",
        tmp_path=tmp_path,
    )
    assert (settings.name, settings.namespace) == ("usher.example.com", "usher-system")
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (30, 20, 0.5)
    assert lease(ON, "--no-leader-elect", "--leader-elect-retry-period=-1", tmp_path=tmp_path) is None


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_usher_runs_on_the_event_loop_it_is_told(loop: str) -> None:
    result = usher("--kubeconfig", "/nonexistent/kubeconfig", "--event-loop", loop)
    # Logged from inside the running loop, by its type: the loop usher really ran on.
    assert f" INFO usher.app: event loop: {loop}" in result.stderr
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        2,
        "usher: --kubeconfig /nonexistent/kubeconfig: no such file",
    )


def test_uvloop_is_the_default_event_loop() -> None:
    result = usher("--kubeconfig", "/nonexistent/kubeconfig")
    assert " INFO usher.app: event loop: uvloop" in result.stderr
