"""Prometheus metrics with kube-scheduler's names, types, labels and buckets.

Each ``Metrics`` owns its own registry, so several schedulers (tests) can
live in one process. Plugins and the core never touch this module: the core
reports through small recorder protocols (QueueRecorder, FrameworkRecorder,
the dispatcher's CallObserver, the watch's DeletionRecorder, the elector's
LeaderRecorder) that this class implements, and the queue's
gauges are read from the queue when Prometheus scrapes, costing nothing per
event.

Like kube-scheduler, usher exports no ``_created`` series: its registry drops
the samples prometheus_client adds to counters, histograms and summaries
(scoped to this registry, unlike ``disable_created_metrics()``, which is
process-wide).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

M = TypeVar("M", bound=MetricWrapperBase)


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


class QueueState(Protocol):
    """What the scheduling queue exposes for its gauges, read at scrape time."""

    def pending(self) -> dict[str, int]: ...

    def unschedulable_by_plugin(self) -> Mapping[tuple[str, str], int]: ...

    def in_flight_event_counts(self) -> Mapping[str, int]: ...


class CacheState(Protocol):
    """What the scheduler cache exposes for scheduler_cache_size, read at scrape time."""

    def sizes(self) -> dict[str, int]: ...


class _QueueCollector(Collector):
    def __init__(self) -> None:
        self.queues: list[QueueState] = []
        self.caches: list[CacheState] = []

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means "
            "number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods that the "
            "scheduler attempted to schedule and failed; 'gated' is the number of unschedulable pods that the "
            "scheduler never attempted to schedule because they are gated.",
            labels=["queue"],
        )
        totals = {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
        by_plugin: dict[tuple[str, str], int] = {}
        inflight: dict[str, int] = {}
        for queue in self.queues:
            for name, count in queue.pending().items():
                totals[name] = totals.get(name, 0) + count
            for key, count in queue.unschedulable_by_plugin().items():
                by_plugin[key] = by_plugin.get(key, 0) + count
            for event, count in queue.in_flight_event_counts().items():
                inflight[event] = inflight.get(event, 0) + count
        for name, count in totals.items():
            pending.add_metric([name], count)
        yield pending
        unschedulable = GaugeMetricFamily(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all "
            "plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            labels=["plugin", "profile"],
        )
        for (plugin, profile), count in sorted(by_plugin.items()):
            unschedulable.add_metric([plugin, profile], count)
        yield unschedulable
        events = GaugeMetricFamily(
            "scheduler_inflight_events",
            "Number of events currently tracked in the scheduling queue.",
            labels=["event"],
        )
        for event, count in sorted(inflight.items()):
            events.add_metric([event], count)
        yield events
        if self.caches:
            sizes = GaugeMetricFamily(
                "scheduler_cache_size",
                "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
                labels=["type"],
            )
            totals = {"assumed_pods": 0, "pods": 0, "nodes": 0}
            for cache in self.caches:
                for kind, count in cache.sizes().items():
                    totals[kind] = totals.get(kind, 0) + count
            for kind, count in totals.items():
                sizes.add_metric([kind], count)
            yield sizes


_CREATED_TYPES = frozenset({"counter", "histogram", "summary"})


class _HotHistogram(Collector):
    """A histogram for the hottest paths (a QueueingHint per pod and event, each extension point per cycle):
    one ``bisect`` and two additions per observation, no lock (usher observes from its one event loop),
    exposed as prometheus_client's Histogram would expose it (cumulative ``le`` buckets, ``_sum``,
    ``_count``). prometheus_client's own ``observe`` takes two locks and walks the buckets in Python."""

    def __init__(
        self, name: str, documentation: str, labelnames: list[str], buckets: list[float], registry: CollectorRegistry
    ) -> None:
        self._name = name.removesuffix("_total")
        self._documentation = documentation
        self._labelnames = labelnames
        self._bounds = [float(b) for b in buckets]
        self._les = [floatToGoString(b) for b in self._bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._series: dict[tuple[str, ...], list[float]] = {}
        """labels -> [count per bucket (the last: above every bound)..., sum]."""
        registry.register(self)

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self._bounds) + 2)
        series[bisect_left(self._bounds, value)] += 1
        series[-1] += value

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        for labels, series in self._series.items():
            cumulative, buckets = 0.0, []
            for le, count in zip(self._les, series[:-1], strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(labels), buckets, series[-1])
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)


class _Registry(CollectorRegistry):
    """A registry whose exposition has no ``<name>_created`` samples (kube-scheduler exports none)."""

    def collect(self) -> Iterator[Metric]:
        for metric in super().collect():
            if metric.type in _CREATED_TYPES:
                created = metric.name + "_created"
                metric.samples = [s for s in metric.samples if s.name != created]
            yield metric


class Metrics:
    """usher's metrics registry; implements every recorder protocol the core and the run-time pieces use."""

    def __init__(self) -> None:
        self.registry: CollectorRegistry = _Registry(auto_describe=True)
        r = self.registry
        self._queues = _QueueCollector()
        r.register(self._queues)
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
        self.scheduling_algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.pod_scheduling_sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might "
            "involve multiple scheduling attempts.",
            ["attempts"],
            buckets=exponential_buckets(0.01, 2, 20),
            registry=r,
        )
        self.pod_scheduling_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=exponential_buckets(1, 2, 5),
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            registry=r,
        )
        self.podgroup_schedule_attempts = Counter(
            "scheduler_podgroup_schedule_attempts",
            "Number of attempts to schedule pod group, by the result. 'unschedulable' means a pod group could not "
            "be scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.podgroup_scheduling_attempt_duration = Histogram(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Pod group scheduling attempt latency in seconds",
            ["result", "profile"],
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.podgroup_scheduling_algorithm_duration = Histogram(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            "Pod group scheduling algorithm latency in seconds",
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.generated_placements = Counter(
            "scheduler_generated_placements",
            "Number of candidate placements generated when scheduling pod groups.",
            ["profile"],
            registry=r,
        )
        self.placement_evaluations = Counter(
            "scheduler_placement_evaluations",
            "Number of candidate placements evaluated when scheduling pod groups, by result. 'feasible' means the "
            "pod group fit into the placement, while 'infeasible' means it did not.",
            ["result", "profile"],
            registry=r,
        )
        self.placement_evaluation_duration = Histogram(
            "scheduler_placement_evaluation_duration_seconds",
            "Latency in seconds of evaluating a single candidate placement when scheduling pod groups, by result. "
            "'feasible' means the pod group fit into the placement, while 'infeasible' means it did not.",
            ["result", "profile"],
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.workload_preemption_attempts = Counter(
            "scheduler_workload_preemption_attempts",
            "Total preemption attempts initiated by workload (including pod groups) in the cluster till now.",
            ["result"],
            registry=r,
        )
        self.workload_preemption_victims = Histogram(
            "scheduler_workload_preemption_victims",
            "Number of pod preemption victims caused by workload preemption.",
            buckets=exponential_buckets(1, 2, 11),
            registry=r,
        )
        self.permit_wait_duration = Histogram(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            ["result"],
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.preemption_pdb_violations = Counter(
            "scheduler_preemption_pdb_violations",
            "Total number of pod disruption budget violations caused by preemption.",
            ["preemptor"],
            registry=r,
        )
        self.preemption_workload_disruptions = Histogram(
            "scheduler_preemption_workload_disruptions",
            "Number of workload preemption units being preempted. A single preemption unit can be all pods in a "
            "pod group (in case of DisruptionMode=all), or a single pod (in case of DisruptionMode=single).",
            ["preemptor"],
            buckets=exponential_buckets(1, 2, 11),
            registry=r,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims for preemption initiated by a single pod",
            buckets=exponential_buckets(1, 2, 7),
            registry=r,
        )
        self.preemption_goroutines_duration = Histogram(
            "scheduler_preemption_goroutines_duration_seconds",
            "Duration in seconds for running goroutines for the preemption.",
            ["result"],
            buckets=exponential_buckets(0.01, 2, 20),
            registry=r,
        )
        self.preemption_goroutines_execution = Counter(
            "scheduler_preemption_goroutines_execution",
            "Number of preemption goroutines executed.",
            ["result"],
            registry=r,
        )
        self.preemption_evaluation_duration = Histogram(
            "scheduler_preemption_evaluation_duration_seconds",
            "Duration in seconds for identifying the target preemption victims.",
            ["preemptor", "result"],
            buckets=exponential_buckets(0.001, 2, 16),
            registry=r,
        )
        self.preemption_execution_duration = Histogram(
            "scheduler_preemption_execution_duration_seconds",
            "Duration in seconds for preempting the target preemption victims. With async preemption enabled, "
            "preemption execution does not block the scheduling of other pods.",
            ["preemptor", "result"],
            buckets=exponential_buckets(0.001, 2, 16),
            registry=r,
        )
        self.queue_incoming_pods = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self.event_handling_duration = Histogram(
            "scheduler_event_handling_duration_seconds",
            "Event handling latency in seconds.",
            ["event"],
            buckets=exponential_buckets(0.0001, 2, 12),
            registry=r,
        )
        self.queueing_hint_duration = _HotHistogram(
            "scheduler_queueing_hint_execution_duration_seconds",
            "Duration for running a queueing hint function of a plugin.",
            ["plugin", "event", "hint"],
            buckets=exponential_buckets(0.00001, 1.5, 20),
            registry=r,
        )
        self.pre_queueing_hint_evaluations = Counter(
            "scheduler_pre_queueing_hint_evaluations",
            "Number of PreQueueingHint evaluations, by whether the plugin narrowed the pods to check.",
            ["plugin", "result"],
            registry=r,
        )
        self.pod_scheduled_after_flush = Counter(
            "scheduler_pod_scheduled_after_flush",
            "Number of pods scheduled after being moved by the unschedulable-pods flush rather than by an event: "
            "a sign of a missing QueueingHint or PreQueueingHint event.",
            registry=r,
        )
        self.framework_extension_point_duration = _HotHistogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=exponential_buckets(0.0001, 2, 12),
            registry=r,
        )
        self.plugin_execution_duration = _HotHistogram(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            ["plugin", "extension_point", "status"],
            buckets=exponential_buckets(0.00001, 1.5, 20),
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
        self.missed_deletions = Counter(
            "usher_missed_deletions",
            "Number of objects found deleted though the watch never reported their deletion (kopf re-listed "
            "after an expired watch), by kind; usher then handled them as deleted. Not a kube-scheduler metric.",
            ["kind"],
            registry=r,
        )

        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates "
            "master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            ["name"],
            registry=r,
        )

        # Labelled children by label values: ``labels()`` costs more than the observation itself,
        # and these are recorded on every event and (sampled) plugin call.
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}

    def child(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, cached (a labelled child has its parent's type)."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child  # type: ignore[return-value]

    def watch_queue(self, queue: QueueState) -> None:
        """Report this queue's gauges (pending_pods, unschedulable_pods, inflight_events) at scrape time."""
        self._queues.queues.append(queue)

    def watch_cache(self, cache: CacheState) -> None:
        """Report the cache's sizes (scheduler_cache_size) at scrape time."""
        self._queues.caches.append(cache)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # -- SchedulingRecorder (usher.scheduling) -----------------------------------

    def algorithm_finished(self, seconds: float) -> None:
        self.scheduling_algorithm_duration.observe(seconds)

    def attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        self.child(self.schedule_attempts, result, profile).inc()
        self.child(self.scheduling_attempt_duration, result, profile).observe(seconds)

    def preemption_attempted(self) -> None:
        self.preemption_attempts.inc()

    def preemption_victims_chosen(self, count: int) -> None:
        self.preemption_victims.observe(count)

    def preemption_evaluated(self, preemptor: str, result: str, seconds: float) -> None:
        self.child(self.preemption_evaluation_duration, preemptor, result).observe(seconds)

    def preemption_finished(self, preemptor: str, result: str, seconds: float) -> None:
        self.preemption_goroutines_execution.labels(result).inc()
        self.preemption_goroutines_duration.labels(result).observe(seconds)
        self.child(self.preemption_execution_duration, preemptor, result).observe(seconds)

    def permit_waited(self, result: str, seconds: float) -> None:
        self.child(self.permit_wait_duration, result).observe(seconds)

    def preemption_disruptions(self, preemptor: str, budget_violations: int, group_disruptions: int) -> None:
        if budget_violations > 0:
            self.preemption_pdb_violations.labels(preemptor).inc(budget_violations)
        if group_disruptions > 0:
            self.preemption_workload_disruptions.labels(preemptor).observe(group_disruptions)

    def pod_group_attempt_finished(self, result: str, profile: str, seconds: float) -> None:
        self.child(self.podgroup_schedule_attempts, result, profile).inc()
        self.child(self.podgroup_scheduling_attempt_duration, result, profile).observe(seconds)

    def pod_group_algorithm_finished(self, seconds: float) -> None:
        self.podgroup_scheduling_algorithm_duration.observe(seconds)

    def placements_evaluated(self, profile: str, generated: int, feasible: int) -> None:
        self.generated_placements.labels(profile).inc(generated)
        if feasible:
            self.placement_evaluations.labels("feasible", profile).inc(feasible)
        if generated - feasible:
            self.placement_evaluations.labels("infeasible", profile).inc(generated - feasible)

    def placement_timed(self, result: str, profile: str, seconds: float) -> None:
        self.child(self.placement_evaluation_duration, result, profile).observe(seconds)

    def workload_preemption_attempted(self, result: str, victims: int) -> None:
        self.workload_preemption_attempts.labels(result).inc()
        if victims:
            self.workload_preemption_victims.observe(victims)

    def pod_scheduled(self, *, attempts: int, sli_seconds: float | None, flushed: bool) -> None:
        if sli_seconds is not None:
            self.child(self.pod_scheduling_sli_duration, str(attempts)).observe(sli_seconds)
        self.pod_scheduling_attempts.observe(attempts)
        if flushed:
            self.pod_scheduled_after_flush.inc()

    def event_handled(self, event: str, seconds: float) -> None:
        self.child(self.event_handling_duration, event).observe(seconds)

    # -- QueueRecorder ---------------------------------------------------------

    def incoming(self, queue: str, event: str) -> None:
        self.child(self.queue_incoming_pods, queue, event).inc()

    def hint_evaluated(self, plugin: str, event: str, hint: str, seconds: float) -> None:
        self.queueing_hint_duration.observe((plugin, event, hint), seconds)

    def pre_hint_evaluated(self, plugin: str, result: str) -> None:
        self.child(self.pre_queueing_hint_evaluations, plugin, result).inc()

    # -- FrameworkRecorder -----------------------------------------------------

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        self.framework_extension_point_duration.observe((point, status, profile), seconds)

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        self.plugin_execution_duration.observe((plugin, point, status), seconds)

    # -- the dispatcher's CallObserver -------------------------------------------

    def call_finished(self, call_type: str, result: str, seconds: float) -> None:
        self.child(self.async_api_call_execution, call_type, result).inc()
        self.child(self.async_api_call_duration, call_type, result).observe(seconds)

    def call_dropped(self, call_type: str) -> None:
        self.child(self.async_api_call_execution, call_type, "dropped").inc()

    def pending_changed(self, call_type: str, delta: int) -> None:
        self.child(self.pending_async_api_calls, call_type).inc(delta)

    # -- the watch's DeletionRecorder ---------------------------------------------

    def missed_deletion(self, kind: str) -> None:
        self.child(self.missed_deletions, kind).inc()

    # -- the elector's LeaderRecorder ---------------------------------------------

    def leading_changed(self, lease: str, leading: bool) -> None:
        self.child(self.leader_election_master_status, lease).set(1 if leading else 0)
