"""Run usher as its own process against a control plane, as a user would run it.

The e2e suite starts ``python -m usher run`` (the real CLI, not an import),
waits for /readyz, reads /metrics, and stops it with SIGTERM (checking a
clean exit) or SIGKILL (a crash).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

from e2e.controlplane import free_ports, wait_for

REPO = Path(__file__).resolve().parent.parent


class UsherProcess:
    def __init__(
        self,
        *,
        kubeconfig: Path,
        scheduler_name: str,
        log_path: Path,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ):
        self.kubeconfig = kubeconfig
        self.scheduler_name = scheduler_name
        self.log_path = log_path
        self.extra_args = extra_args
        self.env = env or {}
        self.port = free_ports(1)[0]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait_ready: bool = True, ready_timeout: float = 60) -> UsherProcess:
        """Start usher; with ``wait_ready``, wait for /readyz. An usher that never gets ready is killed before
        the error is raised: the caller never saw the process to stop it."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = dict(os.environ, PYTHONPATH=str(REPO / "operator"), PYTHONUNBUFFERED="1", **self.env)
        name_args = [] if "--config" in self.extra_args else ["--scheduler-name", self.scheduler_name]
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "usher",
                "run",
                "--kubeconfig",
                str(self.kubeconfig),
                *name_args,
                "--metrics-bind-address",
                f"127.0.0.1:{self.port}",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        log.close()
        if wait_ready:
            try:
                wait_for(self._ready, ready_timeout, f"usher /readyz (log: {self.log_path})")
            except BaseException:
                self.kill()
                raise
        return self

    def _ready(self) -> bool:
        self._check_alive()
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"usher exited with {self.process.returncode}:\n{tail}")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def metric(self, name: str, /, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels`` (0 when absent)."""
        status, text = self.get("/metrics")
        assert status == 200, text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def terminate(self, timeout: float = 20) -> int:
        """SIGTERM and wait: the exit code of a clean shutdown."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to clean up."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def __enter__(self) -> UsherProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()
