"""Prometheus metrics with kube-scheduler's names, types, labels and buckets.

Each ``Metrics`` owns its own registry, so several schedulers (tests) can
live in one process. Plugins and the core never touch this module: the
runtime records what the core reports.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.scheduling_attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
            "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
            "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number "
            "of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            ["queue"],
            registry=r,
        )
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self.async_api_call_execution = Counter(
            "scheduler_async_api_call_execution",
            "Total number of API calls executed by the async dispatcher.",
            ["call_type", "result"],
            registry=r,
        )
        self.async_api_call_duration = Histogram(
            "scheduler_async_api_call_execution_duration_seconds",
            "Duration in seconds for executing API call in the async dispatcher.",
            ["call_type", "result"],
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.pending_async_api_calls = Gauge(
            "scheduler_pending_async_api_calls",
            "Number of API calls currently pending in the async queue.",
            ["call_type"],
            registry=r,
        )
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending_pods.labels(queue=queue).set(0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # -- the dispatcher's CallObserver ---------------------------------------

    def call_finished(self, call_type: str, result: str, seconds: float) -> None:
        self.async_api_call_execution.labels(call_type=call_type, result=result).inc()
        self.async_api_call_duration.labels(call_type=call_type, result=result).observe(seconds)

    def pending_changed(self, call_type: str, delta: int) -> None:
        self.pending_async_api_calls.labels(call_type=call_type).inc(delta)
