"""A real Prometheus (Debian's package) scrapes usher; PromQL sees the metrics move as pods are scheduled."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes.client
import pytest
import yaml

from e2e.controlplane import Cluster, free_ports, wait_for
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e


class Prometheus:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def query(self, expression: str) -> float | None:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        with urllib.request.urlopen(url, timeout=5) as response:
            data = json.loads(response.read())
        result = data["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


@pytest.fixture
def prometheus_for(control_plane: Cluster, tmp_path: Path) -> Iterator[Callable[[UsherProcess], Prometheus]]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: `make test` installs Debian's prometheus package")
    processes: list[subprocess.Popen[bytes]] = []

    def start(usher: UsherProcess) -> Prometheus:
        port = free_ports(1)[0]
        config = tmp_path / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "scrape_configs": [
                        {"job_name": "usher", "static_configs": [{"targets": [f"127.0.0.1:{usher.port}"]}]}
                    ],
                }
            )
        )
        log = (control_plane.logs_dir / "prometheus.log").open("ab")
        processes.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
        prometheus = Prometheus(port)
        wait_for(prometheus.ready, 60, "Prometheus ready")
        return prometheus

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=30)


def test_prometheus_sees_the_scheduler_work(
    core_api: kubernetes.client.CoreV1Api,
    namespace: str,
    kwok_nodes: Callable[..., str],
    usher: Callable[..., UsherProcess],
    prometheus_for: Callable[[UsherProcess], Prometheus],
) -> None:
    kwok_nodes("n", cpu="4")
    scheduler = usher()
    prometheus = prometheus_for(scheduler)
    wait_for(lambda: prometheus.query('up{job="usher"}') == 1, 60, "usher scraped")
    core_api.create_namespaced_pod(namespace, pod_manifest("too-big", scheduler.scheduler_name, cpu="100"))
    for i in range(10):
        core_api.create_namespaced_pod(namespace, pod_manifest(f"p{i}", scheduler.scheduler_name))
    wait_for(
        lambda: prometheus.query('sum(scheduler_schedule_attempts_total{job="usher", result="scheduled"})') == 10,
        60,
        "PromQL: 10 scheduled attempts",
    )
    wait_for(
        lambda: prometheus.query('scheduler_pending_pods{job="usher", queue="unschedulable"}') == 1,
        60,
        "PromQL: one unschedulable pod pending",
    )
    assert prometheus.query('sum(scheduler_queue_incoming_pods_total{job="usher", event="PodAdd"})') == 11
    assert prometheus.query('scheduler_unschedulable_pods{job="usher", plugin="NodeResourcesFit"}') == 1
    p99 = prometheus.query(
        'histogram_quantile(0.99, sum by (le) (scheduler_scheduling_attempt_duration_seconds_bucket{job="usher"}))'
    )
    assert p99 is not None and p99 > 0
