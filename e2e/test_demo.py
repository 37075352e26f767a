"""The README's demo command keeps working: it schedules its sample pods and exits cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent


def test_the_demo_schedules_every_sample_pod_on_a_local_control_plane() -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PYTHONPATH"] = f"{REPO / 'operator'}:{REPO}"
    result = subprocess.run(
        [sys.executable, "-m", "e2e.demo", "--exit"],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "10 pods scheduled" in result.stdout
    placed = [line for line in result.stdout.splitlines() if " -> demo-node-" in line]
    assert len(placed) == 10, result.stdout
    assert 'scheduler_schedule_attempts_total{result="scheduled"} = 10' in result.stdout
