"""The exposition's shape: kube-scheduler's series and nothing prometheus_client adds on its own."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from usher.adapters.metrics import Metrics


def used_metrics() -> Metrics:
    metrics = Metrics()
    metrics.child(metrics.schedule_attempts, "scheduled", "usher").inc()
    metrics.child(metrics.scheduling_attempt_duration, "scheduled", "usher").observe(0.01)
    metrics.pod_scheduled_after_flush.inc()
    metrics.call_finished("pod_binding", "success", 0.02)
    metrics.missed_deletion("pods")
    return metrics


def test_no_created_series_are_exported() -> None:
    text = used_metrics().exposition().decode()
    assert "scheduler_schedule_attempts_total{" in text, "counters are there"
    assert "scheduler_scheduling_attempt_duration_seconds_bucket{" in text, "histograms are there"
    assert [line for line in text.splitlines() if "_created" in line] == []


def test_the_leader_gauge_follows_the_elector() -> None:
    metrics = Metrics()

    def status() -> dict[str, float]:
        return {
            s.labels["name"]: s.value
            for family in text_string_to_metric_families(metrics.exposition().decode())
            for s in family.samples
            if s.name == "leader_election_master_status"
        }

    assert status() == {}
    metrics.leading_changed("usher", False)
    assert status() == {"usher": 0.0}
    metrics.leading_changed("usher", True)
    assert status() == {"usher": 1.0}
    metrics.leading_changed("usher", False)
    assert status() == {"usher": 0.0}
