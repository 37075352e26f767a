"""A real Prometheus for the e2e tests: started on a configuration, queried with PromQL.

The binary is Prometheus' own release built from the Go module proxy with its Kubernetes service
discovery (``bash e2e/build-binaries.sh prometheus``): Debian's package leaves Kubernetes discovery out.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane import cache_dir, free_ports, read_versions, wait_for

__all__ = ["Prometheus", "prometheus_binary"]


def prometheus_binary() -> Path:
    """Where ``e2e/build-binaries.sh prometheus`` puts the pinned Prometheus."""
    return cache_dir() / "bin" / f"prometheus-{read_versions()['PROMETHEUS_VERSION']}" / "prometheus"


@dataclass
class Prometheus:
    """A Prometheus server listening on the loopback; `start` it, `query` it, `stop` it."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, scrape_configs: list[dict[str, Any]], workdir: Path, log: Path) -> Prometheus:
        """Scrape ``scrape_configs`` every second; the TSDB and configuration live under ``workdir``."""
        binary = prometheus_binary()
        if not binary.is_file():
            raise RuntimeError(f"{binary} is missing: run `bash e2e/build-binaries.sh prometheus` (or `make binaries`)")
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": scrape_configs}
            )
        )
        prometheus = cls(free_ports(1)[0])
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prometheus.port}",
        ]
        with log.open("ab") as out:
            prometheus.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for(prometheus.ready, 60, "Prometheus ready")
        except BaseException:
            prometheus.stop()
            raise
        return prometheus

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None

    def vector(self, expression: str) -> list[tuple[dict[str, str], float]]:
        """The instant vector of ``expression``: each series' labels and value."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=5) as response:
            data = json.loads(response.read())
        return [(dict(r["metric"]), float(r["value"][1])) for r in data["data"]["result"]]

    def query(self, expression: str) -> float | None:
        """The value of the first series of ``expression``, None when there is none."""
        result = self.vector(expression)
        return result[0][1] if result else None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False
