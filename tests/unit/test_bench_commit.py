"""The commit a benchmark result is labelled with: dirty only when the measured code differs from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import runner


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for path in ("operator/usher/app.py", "bench/runner.py", "bench/results/upstream/A.json", "bench/RESULTS.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    monkeypatch.setattr(runner, "REPO", tmp_path)
    return tmp_path


def test_results_written_by_the_run_itself_leave_the_commit_clean(repo: Path) -> None:
    (repo / "bench/results/upstream/A.json").write_text("2\n")
    (repo / "bench/results/upstream/B.json").write_text("new\n")
    (repo / "bench/RESULTS.md").write_text("2\n")
    assert not runner.machine()["usher_commit"].endswith("-dirty")


@pytest.mark.parametrize("changed", ["operator/usher/app.py", "bench/runner.py"])
def test_changed_usher_or_harness_code_marks_the_commit_dirty(repo: Path, changed: str) -> None:
    (repo / changed).write_text("2\n")
    assert runner.machine()["usher_commit"].endswith("-dirty")
