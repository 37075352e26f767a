"""The composition root: builds every part of a running usher and names every task.

    connect -> metrics, API client, dispatcher, leader elector (on an API client of its own)
            -> discover the optional APIs (PodGroups and Workloads: gang support)
            -> build_scheduler: cache, DRA state, frameworks, queue, reporters,
               scheduling, pod-group and binding cycles, watch sink, loop
    tasks: kopf operator (login), watch streams (kopf's), initial sync (LISTs), then missed-deletion
           reconciliation (LISTs),
           leader election, scheduling loop, HTTP server (/metrics, /healthz, /readyz)

Only this module (and ``__main__``) creates adapters; every run-time piece in
``usher.scheduling`` receives its ports here, so ``build_scheduler`` also
builds a whole scheduler over fakes for unit tests.

SIGINT/SIGTERM stop the operator, cancel the loop, let in-flight API calls
finish briefly, and close every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import random
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import kopf

from usher.adapters import watching
from usher.adapters.binding import DispatcherBinder
from usher.adapters.claims import DispatcherClaimWriter
from usher.adapters.connecting import connect, kopf_connection_info
from usher.adapters.dispatching import Dispatcher
from usher.adapters.kubeapi import KubeApi
from usher.adapters.leading import LEASE_CONNECTIONS, KubeLeases, LeaderElector, LeaseSettings
from usher.adapters.metrics import Metrics
from usher.adapters.serving import DebugSource, HealthSource, build_app, serve
from usher.adapters.volumes import DispatcherVolumeWriter
from usher.adapters.watching import Vault
from usher.config import SchedulerConfig
from usher.core.cache import Cache, DisruptionBudget, NodeInfo
from usher.core.clock import Clock, MonotonicClock
from usher.core.cycle import NodeSampler
from usher.core.dra.ports import ClaimWriter
from usher.core.dra.state import DraState
from usher.core.framework.building import build_framework
from usher.core.framework.interface import Binder, PreemptionsInFlight
from usher.core.framework.registry import Registry
from usher.core.framework.runtime import FrameworkRecorder
from usher.core.handling import EventHandlers
from usher.core.plugins.registry import in_tree_registry
from usher.core.podgroups import PodGroupStates
from usher.core.queue import Nominator, QueueOptions, SchedulingQueue
from usher.core.queue.queueing import QueueRecorder
from usher.core.types import PodInfo, PodKey, pod_key
from usher.core.volumes.ports import VolumeWriter
from usher.core.volumes.state import VolumeState
from usher.explaining import explain, queue_summary
from usher.features import FeatureGates
from usher.scheduling.attempts import Attempts
from usher.scheduling.binding_cycle import BindingCycle
from usher.scheduling.eventhandling import ClusterEvents
from usher.scheduling.failures import FailureReporter, SchedulingFailures
from usher.scheduling.gang_binding import GangCommits
from usher.scheduling.group_cycle import PodGroupCycle
from usher.scheduling.loop import SchedulingLoop, Wakeup
from usher.scheduling.notready import DEFAULT_DELAY, NotReadyReporter
from usher.scheduling.podevents import PodEvents
from usher.scheduling.podgroup_conditions import PodGroupConditions
from usher.scheduling.ports import ApiWriter, SchedulingRecorder
from usher.scheduling.preemption import Evictions, Preemptor
from usher.scheduling.scheduler import Scheduler
from usher.scheduling.scheduling_cycle import SchedulingCycle
from usher.scheduling.stopping import stop_writing
from usher.scheduling.waiting_pods import WaitingPods

logger = logging.getLogger(__name__)


class LeadershipLostError(RuntimeError):
    """The lease was lost: this instance must stop (and be restarted as a follower)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """Everything ``usher run`` was told, validated by the CLI before anything connects."""

    config: SchedulerConfig
    gates: FeatureGates
    kubeconfig: str | None = None
    metrics_bind_address: str = "127.0.0.1:10251"
    seed: int | None = None
    status_delay: float = 5.0
    debug_endpoints: bool = False
    lease: LeaseSettings | None = None
    """Leader election on this Lease; None: this instance always schedules."""


class Recorder(SchedulingRecorder, QueueRecorder, FrameworkRecorder, Protocol):
    """Every recorder a scheduler reports to (``Metrics`` implements them all)."""


@dataclass(frozen=True, slots=True)
class PluginHandle:
    """What plugin factories get (the framework ``Handle``): ports and shared state, built here."""

    binder: Binder
    waiting_pods: WaitingPods
    cache: Cache
    dra: DraState
    claims: ClaimWriter
    preemptions: PreemptionsInFlight
    volumes: VolumeState
    volume_writer: VolumeWriter
    nominator: Nominator

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.cache.namespace_labels(namespace)

    def namespace_generation(self) -> int:
        return self.cache.namespace_generation()

    def disruption_budgets(self, namespace: str) -> Sequence[DisruptionBudget]:
        return self.cache.disruption_budgets(namespace)

    def service_selectors(self, namespace: str) -> Sequence[Mapping[str, str]]:
        return self.cache.service_selectors(namespace)

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        info = self.cache.node(node)
        return info.labels if info is not None else None

    def node_info(self, node: str) -> NodeInfo | None:
        return self.cache.node(node)

    def image(self, name: str) -> tuple[int, int] | None:
        return self.cache.image(name)

    def node_count(self) -> int:
        return len(self.cache.node_infos())

    def nominated_pods(self, node: str) -> Sequence[PodInfo]:
        return self.nominator.nominated_pods(node)

    def node_of_pod(self, key: PodKey) -> NodeInfo | None:
        return self.cache.node_of_pod(key)

    @property
    def pod_groups(self) -> PodGroupStates:
        return self.cache.pod_groups


def build_scheduler(
    config: SchedulerConfig,
    gates: FeatureGates,
    *,
    clock: Clock,
    recorder: Recorder,
    writer: ApiWriter,
    binder: Binder,
    claim_writer: ClaimWriter,
    volume_writer: VolumeWriter,
    leading: asyncio.Event,
    volumes: VolumeState | None = None,
    registry: Registry | None = None,
    seed: int | None = None,
    status_delay: float = DEFAULT_DELAY,
    pod_groups_served: bool = True,
) -> Scheduler:
    """Every piece of one scheduler, wired to the given ports; ``leading`` gates the loop.

    Gang support is on when the GenericWorkload gate is and the API server serves PodGroups
    (``pod_groups_served``, from `watching.discover`).
    """
    gangs = gates.generic_workload and pod_groups_served
    cache = Cache(pod_groups=PodGroupStates(enabled=gangs, topology=gates.topology_aware_workload_scheduling))
    waiting_pods = WaitingPods()
    nominator = Nominator()
    dra = DraState(
        workload_claims=gangs and gates.dra_workload_resource_claims,
        partitionable=gates.dra_partitionable_devices,
        device_taints=gates.dra_device_taints,
        taint_rules=gates.dra_device_taint_rules,
        consumable=gates.dra_consumable_capacity,
        fractional=gates.dra_fractional_capacity_range,
        binding_conditions=gates.dra_device_binding_conditions and gates.dra_resource_claim_device_status,
        compatibility_groups=gates.dra_device_compatibility_groups,
        list_attributes=gates.dra_list_type_attributes,
    )
    volumes = volumes or VolumeState()
    evictions = Evictions()
    handle = PluginHandle(
        binder=binder,
        waiting_pods=waiting_pods,
        cache=cache,
        dra=dra,
        claims=claim_writer,
        preemptions=evictions,
        volumes=volumes,
        volume_writer=volume_writer,
        nominator=nominator,
    )
    registry = registry or in_tree_registry()
    frameworks = {
        profile.scheduler_name: build_framework(
            profile, registry=registry, handle=handle, recorder=recorder, nominated=nominator
        )
        for profile in config.profiles
    }
    first = frameworks[config.profiles[0].scheduler_name]
    assert first.plugins.queue_sort is not None
    events = PodEvents(writer)
    queue = SchedulingQueue(
        clock,
        nominator=nominator,
        profiles=frameworks,
        sort_key=first.plugins.queue_sort.sort_key,
        options=QueueOptions(
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            queueing_hints=gates.queueing_hints,
            pre_queueing_hints=gates.pre_queueing_hints,
            pop_from_backoff_q=gates.pop_from_backoff_q,
            pod_groups=gangs,
        ),
        recorder=recorder,
        reporter=(NotReadyReporter(writer, events, delay=status_delay) if gates.pre_enqueue_pod_status else None),
    )
    wakeup = Wakeup()
    synced = asyncio.Event()
    attempts = Attempts()
    failures = SchedulingFailures(
        queue=queue,
        reporter=FailureReporter(writer, events, clock),
        attempts=attempts,
        recorder=recorder,
        clock=clock,
        wake=wakeup,
    )
    rng = random.Random(seed)
    preemptor = Preemptor(
        writer=writer,
        events=events,
        queue=queue,
        waiting_pods=waiting_pods,
        recorder=recorder,
        evictions=evictions,
        wake=wakeup,
    )
    sampler = NodeSampler(config.percentage_of_nodes_to_score)
    scheduling = SchedulingCycle(
        frameworks=frameworks,
        cache=cache,
        queue=queue,
        waiting_pods=waiting_pods,
        failures=failures,
        preemptor=preemptor,
        recorder=recorder,
        sampler=sampler,
        rng=rng,
    )
    gang_commits = GangCommits(waiting_pods)
    groups = (
        PodGroupCycle(
            frameworks=frameworks,
            cache=cache,
            queue=queue,
            waiting_pods=waiting_pods,
            failures=failures,
            preemptor=preemptor,
            conditions=PodGroupConditions(writer),
            gangs=gang_commits,
            recorder=recorder,
            sampler=sampler,
            rng=rng,
            topology=gates.topology_aware_workload_scheduling,
        )
        if gangs
        else None
    )
    binding = BindingCycle(
        cache=cache,
        queue=queue,
        waiting_pods=waiting_pods,
        failures=failures,
        gangs=gang_commits,
        events=events,
        recorder=recorder,
        clock=clock,
        wake=wakeup,
    )
    cluster_events = ClusterEvents(
        handlers=EventHandlers(cache, queue, set(frameworks), dra=dra, volumes=volumes),
        cache=cache,
        writer=writer,
        failures=failures,
        evictions=evictions,
        gangs=gang_commits,
        recorder=recorder,
        synced=synced,
        wake=wakeup,
    )
    loop = SchedulingLoop(
        queue=queue,
        scheduling=scheduling,
        binding=binding,
        clock=clock,
        synced=synced,
        leading=leading,
        wakeup=wakeup,
        groups=groups,
    )
    return Scheduler(
        clock=clock,
        cache=cache,
        queue=queue,
        frameworks=frameworks,
        attempts=attempts,
        events=cluster_events,
        loop=loop,
        evictions=evictions,
        volumes=volumes,
        dra=dra,
        synced=synced,
    )


class _Health(HealthSource):
    def __init__(self, scheduler: Scheduler, loop_task: asyncio.Task[None]) -> None:
        self._scheduler = scheduler
        self._loop_task = loop_task

    def healthy(self) -> tuple[bool, str]:
        if self._loop_task.done():
            return False, "scheduling loop stopped"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        if not self._scheduler.synced.is_set():
            return False, "cache not synced yet"
        return self.healthy()


class _Debug(DebugSource):
    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def queue(self) -> dict[str, Any]:
        return queue_summary(self._scheduler)

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return explain(self._scheduler, pod_key(namespace, name))


GC_THRESHOLDS = (50_000, 50, 10)
"""CPython's cyclic collector thresholds for usher (the defaults are 700, 10, 10).

usher's heap is mostly long-lived and acyclic: parsed API objects in the cache
and the queue, freed by reference counting. With the defaults, the collector
ran a gen-0 pass every 700 net allocations and, while the heap grew (pods
arriving), full passes over every object: measured 20-28 % of usher's CPU on
the 5000-node and 5000-gated-pod benchmarks, 0.1-0.2 s per full pass. With
these, full passes are rare and the collector costs about 5 %; memory is
unchanged (bench/NOTES.md).
"""


def tune_garbage_collection() -> None:
    gc.set_threshold(*GC_THRESHOLDS)


async def warm_connections(api: KubeApi, leading: asyncio.Event, count: int) -> None:
    """Once this instance leads, open the connections a burst of writes uses (``KubeApi.warm``).

    kube-scheduler's client multiplexes every call over one HTTP/2 connection it keeps. usher's client
    holds one call per connection: without this, the first burst after start opened them on its own
    path, 45 TLS handshakes within 150 ms for a burst of 100 pods (each a millisecond of CPU here and
    at the API server, and loop turns of that binding's latency). Best effort: a failure only logs."""
    await leading.wait()
    try:
        opened = await api.warm(count)
    except Exception as error:  # best effort: the calls open their own connections, and report what fails
        logger.info("opening connections to the API server ahead of time failed: %s", error)
        return
    logger.debug("%d connections to the API server opened ahead of time", opened)


def freeze_synced_heap() -> None:
    """Once the initial listing is in the cache: collect once, then leave what survives out of future passes.

    Everything alive now (the cluster as listed, the plugins, kopf) lives as long
    as usher does; ``gc.freeze`` keeps full passes from walking it again.
    """
    gc.collect()
    gc.freeze()


async def run(options: RunOptions) -> None:
    tune_garbage_collection()
    logger.info("event loop: %s", type(asyncio.get_running_loop()).__module__.partition(".")[0])
    connection = await connect(options.kubeconfig)
    logger.info("connecting to %s (%s)", connection.async_config.host, connection.source)
    metrics = Metrics()
    api = KubeApi(connection.async_config)
    stop = asyncio.Event()
    lost = False

    def on_lost() -> None:
        nonlocal lost
        lost = True
        # Fencing: not one more write leaves, not even a queued binding while kopf shuts down.
        dispatcher.halt()
        stop.set()

    elector: LeaderElector | None = None
    lease_api: KubeApi | None = None
    if options.lease is not None:
        # Renewals on connections of their own: bindings holding every connection of `api` cannot delay one.
        lease_api = KubeApi(connection.async_config, connections=LEASE_CONNECTIONS)
        leases = KubeLeases(lease_api, namespace=options.lease.namespace, name=options.lease.name)
        elector = LeaderElector(options.lease, leases, on_lost, clock=MonotonicClock(), recorder=metrics)
    dispatcher = Dispatcher(api, observer=metrics, leads=elector.holds if elector is not None else lambda: True)
    # DRADeviceTaintRules on implies DRADeviceTaints (parse_feature_gates refuses it otherwise).
    wanted = [
        *(watching.WORKLOAD_KINDS if options.gates.generic_workload else ()),
        *((watching.DEVICE_TAINT_RULES,) if options.gates.dra_device_taint_rules else ()),
    ]
    served = await watching.discover(api, wanted) if wanted else ()
    if options.gates.dra_device_taint_rules and watching.DEVICE_TAINT_RULES not in served:
        logger.info("the API server does not serve resource.k8s.io/v1 DeviceTaintRules: running without them")
    if watching.POD_GROUPS in served:
        logger.info(
            "gang scheduling on: watching %s",
            ", ".join(f"{g}/{p}" for g, p in served if (g, p) in watching.WORKLOAD_KINDS),
        )
    elif options.gates.generic_workload:
        logger.info(
            "the API server does not serve scheduling.k8s.io/v1beta1 PodGroups: running without gang scheduling "
            "(pods' spec.schedulingGroup is ignored)"
        )
    always = asyncio.Event()
    always.set()
    leading = elector.leading if elector is not None else always
    volumes = VolumeState()
    volume_writer = DispatcherVolumeWriter(dispatcher)
    volumes.on_change(volume_writer.notify)
    claim_writer = DispatcherClaimWriter(dispatcher, api)
    scheduler = build_scheduler(
        options.config,
        options.gates,
        clock=MonotonicClock(),
        recorder=metrics,
        writer=dispatcher,
        binder=DispatcherBinder(dispatcher, api),
        claim_writer=claim_writer,
        volume_writer=volume_writer,
        volumes=volumes,
        leading=leading,
        seed=options.seed,
        status_delay=options.status_delay,
        pod_groups_served=watching.POD_GROUPS in served,
    )
    scheduler.dra.claim_listeners.append(claim_writer.notify)
    metrics.watch_queue(scheduler.queue)
    metrics.watch_cache(scheduler.cache)

    registry = kopf.OperatorRegistry()
    settings = kopf.OperatorSettings()
    watching.configure(settings)

    @kopf.on.login(registry=registry)
    def login(**_: object) -> kopf.ConnectionInfo:
        return kopf_connection_info(connection.sync_config)

    watches = watching.register(scheduler.events, optional=served, recorder=metrics)
    vault = Vault()  # kopf's login fills it; the watch streams read their credentials from it

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    dispatcher.start()
    leader_task: asyncio.Task[None] | None = None
    if elector is not None:
        leader_task = asyncio.create_task(elector.run(), name="leader-election")
    else:
        # Without leader election this instance always leads, and says so as kube-scheduler's gauge would.
        metrics.leading_changed(options.config.scheduler_names[0], True)
    loop_task = asyncio.create_task(scheduler.loop.run(), name="scheduling-loop")
    warm_task = asyncio.create_task(warm_connections(api, leading, dispatcher.workers), name="warm-connections")
    debug = _Debug(scheduler) if options.debug_endpoints else None
    runner, port = await serve(build_app(metrics, _Health(scheduler, loop_task), debug), options.metrics_bind_address)
    logger.info("serving /metrics, /healthz and /readyz on port %d", port)
    operator_stop: asyncio.Future[None] = loop.create_future()
    operator_task = asyncio.create_task(
        kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=True,
            stop_flag=operator_stop,
            vault=vault,
        ),
        name="kopf-operator",
    )
    streams_task = asyncio.create_task(watches.streams.run(settings, vault), name="watch-streams")
    # Marks the scheduler synced once kopf has delivered everything usher's own LIST saw.
    lister = watching.api_lister(api)
    sync_task = asyncio.create_task(watches.sync.run(lister), name="initial-sync")
    reconcile_task: asyncio.Task[None] | None = None
    stop_task = asyncio.create_task(stop.wait(), name="stop-signal")
    try:
        watched: set[asyncio.Task[Any]] = {stop_task, loop_task, operator_task, streams_task, sync_task}
        while True:
            done, watched = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            # The initial sync ends once synced: only its failure (a bug) stops usher.
            if done != {sync_task} or sync_task.exception() is not None:
                break
            freeze_synced_heap()
            # Runs until stopped; like the loop, it ends only by a bug, which stops usher.
            reconcile_task = asyncio.create_task(watches.reconciler.run(lister), name="missed-deletions")
            watched.add(reconcile_task)
        # kopf handles SIGINT/SIGTERM itself (replacing our handlers): its clean exit is a stop request.
        for task in done:
            if task is not stop_task and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        logger.info("stopping")
        if not operator_stop.done():
            operator_stop.set_result(None)
        loop_task.cancel()
        warm_task.cancel()
        streams_task.cancel()
        sync_task.cancel()
        if reconcile_task is not None:
            reconcile_task.cancel()
        stop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop_task
        # The elector keeps renewing meanwhile: every write leaves (or is dropped) before the Lease is released,
        # in usher.scheduling.stopping's order, which is the fencing argument of a shutdown.
        with contextlib.suppress(Exception):
            await stop_writing(
                bindings=scheduler.loop.bindings_in_flight(), writes=dispatcher, lease=elector, lost=lost
            )
        if leader_task is not None:
            leader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await leader_task
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(operator_task, timeout=10)
        await dispatcher.stop()
        await runner.cleanup()
        await api.close()
        if lease_api is not None:  # after the release above
            await lease_api.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if lost:
        raise LeadershipLostError(
            f"lease {options.lease.namespace}/{options.lease.name} lost" if options.lease else "lease lost"
        )
