"""The CLI refuses bad start-up options before touching the cluster, naming what is wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--feature-gates", "SchedulerAsyncAPICalls=false"), "SchedulerPreEnqueuePodStatus=true requires"),
        (("--feature-gates", "NoSuchGate=true"), "unknown feature gate 'NoSuchGate'"),
        (("--config", "/nonexistent/usher.yaml"), "--config /nonexistent/usher.yaml: No such file"),
        (("--metrics-bind-address", "nowhere"), "--metrics-bind-address 'nowhere': expected HOST:PORT"),
    ],
    ids=["invalid gate combination", "unknown gate", "missing config", "bad bind address"],
)
def test_invalid_start_up_options_stop_usher_with_a_message(args: tuple[str, ...], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "usher", "run", "--kubeconfig", "/dev/null", *args],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO / "operator"), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr
