"""A real Prometheus scrapes usher; PromQL sees the metrics move as pods are scheduled."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes.client
import pytest

from e2e.controlplane import Cluster, wait_for
from e2e.prometheus import Prometheus
from e2e.test_scheduling import pod_manifest
from e2e.usher_process import UsherProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def prometheus_for(control_plane: Cluster, tmp_path: Path) -> Iterator[Callable[[UsherProcess], Prometheus]]:
    started: list[Prometheus] = []

    def start(usher: UsherProcess) -> Prometheus:
        scrape = [{"job_name": "usher", "static_configs": [{"targets": [f"127.0.0.1:{usher.port}"]}]}]
        started.append(Prometheus.start(scrape, tmp_path / "prometheus", control_plane.logs_dir / "prometheus.log"))
        return started[-1]

    yield start
    for prometheus in started:
        prometheus.stop()


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
