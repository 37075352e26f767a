"""The CLI refuses bad start-up options before touching the cluster, naming what is wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from usher.__main__ import _parser, run_options

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
    ],
    ids=["invalid gate combination", "unknown gate", "missing config", "bad bind address"],
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
