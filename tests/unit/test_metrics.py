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


def test_the_hot_path_histograms_expose_what_prometheus_clients_histogram_would() -> None:
    """QueueingHint, plugin and extension-point durations use usher's lock-free histogram: the same
    series, buckets, counts and sums as prometheus_client's Histogram given the same observations."""
    from prometheus_client import CollectorRegistry, Histogram

    from usher.adapters.metrics import exponential_buckets

    metrics = Metrics()
    reference = CollectorRegistry()
    histogram = Histogram(
        "scheduler_queueing_hint_execution_duration_seconds",
        "Duration for running a queueing hint function of a plugin.",
        ["plugin", "event", "hint"],
        buckets=exponential_buckets(0.00001, 1.5, 20),
        registry=reference,
    )
    observations = [
        ("NodeResourcesFit", "AssignedPodDelete", "QueueSkip", 0.00001),  # exactly on a bound
        ("NodeResourcesFit", "AssignedPodDelete", "QueueSkip", 0.0000123),
        ("NodeResourcesFit", "AssignedPodDelete", "Queue", 0.004),
        ("InterPodAffinity", "AssignedPodAdd", "Queue", 7.0),  # above every bound
    ]
    for plugin, event, hint, seconds in observations:
        metrics.hint_evaluated(plugin, event, hint, seconds)
        histogram.labels(plugin, event, hint).observe(seconds)

    def samples(families: object) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
        return {
            (s.name, tuple(sorted(s.labels.items())), round(s.value, 12))
            for family in families  # type: ignore[attr-defined]
            if family.name == "scheduler_queueing_hint_execution_duration_seconds"
            for s in family.samples
            if not s.name.endswith("_created")
        }

    ours = samples(text_string_to_metric_families(metrics.exposition().decode()))
    theirs = samples(reference.collect())
    assert ours == theirs and len(ours) == 3 * (21 + 2)


def test_preemption_disruptions_and_permit_waits_are_recorded_under_kube_schedulers_names() -> None:
    metrics = Metrics()
    metrics.preemption_disruptions("pod", 0, 0)
    metrics.preemption_disruptions("pod", 2, 0)
    metrics.preemption_disruptions("podgroup", 1, 3)
    metrics.permit_waited("Success", 0.003)
    metrics.placement_timed("feasible", "usher", 0.002)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
    }
    assert samples[("scheduler_preemption_pdb_violations_total", (("preemptor", "pod"),))] == 2
    assert samples[("scheduler_preemption_pdb_violations_total", (("preemptor", "podgroup"),))] == 1
    assert samples[("scheduler_preemption_workload_disruptions_count", (("preemptor", "podgroup"),))] == 1
    assert samples[("scheduler_preemption_workload_disruptions_sum", (("preemptor", "podgroup"),))] == 3
    assert ("scheduler_preemption_workload_disruptions_count", (("preemptor", "pod"),)) not in samples
    assert samples[("scheduler_permit_wait_duration_seconds_count", (("result", "Success"),))] == 1
    placement = (
        "scheduler_placement_evaluation_duration_seconds_count",
        (("profile", "usher"), ("result", "feasible")),
    )
    assert samples[placement] == 1


def test_the_cache_size_gauge_reads_the_caches_nodes_pods_and_assumed_pods_at_scrape_time() -> None:
    from tests.builders import make_node, make_pod
    from usher.core.cache import Cache
    from usher.core.types import NodeName, PodInfo

    metrics = Metrics()
    cache = Cache()
    metrics.watch_cache(cache)

    def sizes() -> dict[str, float]:
        return {
            s.labels["type"]: s.value
            for family in text_string_to_metric_families(metrics.exposition().decode())
            for s in family.samples
            if s.name == "scheduler_cache_size"
        }

    assert sizes() == {"assumed_pods": 0, "pods": 0, "nodes": 0}
    cache.add_or_update_node(make_node().name("n1").obj())
    cache.add_or_update_pod(PodInfo.from_api(make_pod().name("bound").node("n1").obj()))
    cache.assume(PodInfo.from_api(make_pod().name("assumed").obj()), NodeName("n1"))
    assert sizes() == {"assumed_pods": 1, "pods": 2, "nodes": 1}


def test_a_dropped_event_counts_as_an_execution_with_result_dropped_and_no_duration() -> None:
    metrics = Metrics()
    metrics.call_dropped("event")
    samples = [s for family in text_string_to_metric_families(metrics.exposition().decode()) for s in family.samples]
    assert [(s.labels, s.value) for s in samples if s.name == "scheduler_async_api_call_execution_total"] == [
        ({"call_type": "event", "result": "dropped"}, 1.0)
    ]
    durations = [s for s in samples if s.name.startswith("scheduler_async_api_call_execution_duration")]
    assert durations == [], "nothing was sent, so no duration is observed"


def test_preemption_is_timed_under_kube_scheduler_s_names_and_labels() -> None:
    metrics = Metrics()
    metrics.preemption_evaluated("pod", "Success", 0.003)
    metrics.preemption_finished("podgroup", "error", 0.5)
    counts = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if s.name.endswith("_count")
    }
    assert (
        counts[
            ("scheduler_preemption_evaluation_duration_seconds_count", (("preemptor", "pod"), ("result", "Success")))
        ]
        == 1
    )
    assert (
        counts[
            ("scheduler_preemption_execution_duration_seconds_count", (("preemptor", "podgroup"), ("result", "error")))
        ]
        == 1
    )
    assert counts[("scheduler_preemption_goroutines_duration_seconds_count", (("result", "error"),))] == 1
