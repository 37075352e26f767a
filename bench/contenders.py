"""The contenders of every workload: usher and kube-scheduler (PreQueueingHints on and off), and the limit.

Each contender is started on a fresh control plane before any node exists
(as scheduler_perf starts its scheduler): kube-scheduler as a component of the
plane, usher right after the plane is up (`Contender.launch`), both while the
previous run works. Each exposes the pid whose CPU and RSS
are measured, and its Prometheus metrics (QueueingHint and PreQueueingHint
invocation counts, pending pods per queue).
"""

from __future__ import annotations

import copy
import json
import math
import signal
import ssl
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.kube import Api
from bench.limit import SCHEDULER_NAME as LIMIT_SCHEDULER_NAME
from bench.limit import ClusterLimitBinder, LimitBinder
from e2e.controlplane import ControlPlane
from e2e.usher_process import UsherProcess

USHER_SCHEDULER_NAME = "usher-bench"
KUBE_SCHEDULER_NAME = "kube-bench"
#: Client rate limits lifted as scheduler_perf lifts them (usher has none to lift).
KUBE_SCHEDULER_QPS = 5000

HINTS = "scheduler_queueing_hint_execution_duration_seconds_count"
PRE_HINTS = "scheduler_pre_queueing_hint_evaluations_total"
PENDING = "scheduler_pending_pods"


def parse_metrics(text: str) -> dict[str, float]:
    """The counters the report needs, summed over labels (pre-hints also per result, pending per queue)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        # A family that is declared counts from 0 (usher declares them up front); one that is
        # absent stays absent (kube-scheduler v1.37.1 exports no hint metrics): "n/a", not 0.
        if family.name == HINTS.removesuffix("_count"):
            out.setdefault("hint_invocations", 0.0)
        elif family.name == PRE_HINTS.removesuffix("_total"):
            out.setdefault("pre_hint_evaluations", 0.0)
        for sample in family.samples:
            if sample.name == HINTS:
                out["hint_invocations"] = out.get("hint_invocations", 0.0) + sample.value
            elif sample.name == PRE_HINTS:
                out["pre_hint_evaluations"] = out.get("pre_hint_evaluations", 0.0) + sample.value
                key = f"pre_hint_{sample.labels.get('result', '')}"
                out[key] = out.get(key, 0.0) + sample.value
            elif sample.name == PENDING:
                key = f"pending_{sample.labels.get('queue', '')}"
                out[key] = out.get(key, 0.0) + sample.value
    return out


class Contender(ABC):
    """One scheduler (or the limit) under test."""

    key: str
    label: str
    family: str
    scheduler_name: str
    pre_queueing_hints: bool | None

    def plane_kwargs(self, workdir: Path) -> dict[str, Any]:
        """Extra arguments for `e2e.controlplane.start` (kube-scheduler runs as a control-plane component)."""
        return {}

    def launch(self, plane: ControlPlane) -> None:
        """Start the scheduler process on ``plane`` as soon as it is up (blocking: called in the thread that
        started the plane, while another run works); `start` adopts it. kube-scheduler needs none of this: it
        starts as one of the plane's components."""
        return None

    def discard(self, plane: ControlPlane) -> None:
        """Stop what `launch` started on ``plane`` if `start` never adopted it (the run failed before)."""
        return None

    @abstractmethod
    async def start(self, plane: ControlPlane, api: Api, namespace: str, nodes: list[str], devices: int) -> None:
        """Start scheduling pods of ``scheduler_name`` (or adopt what `launch` started); return once ready."""

    @property
    def pid(self) -> int | None:
        """The process whose CPU and RSS are measured (None: the limit runs inside the harness)."""
        return None

    async def metrics(self) -> dict[str, float] | None:
        """Hint and queue metrics, or None when this contender has none."""
        return None

    async def scrape(self) -> str | None:
        """The scheduler's /metrics text, or None when this contender has none."""
        return None

    def ensure_alive(self) -> None:
        """Raise with the log's tail if the scheduler process has exited (a crash must not look like a stall)."""
        return None

    @abstractmethod
    async def stop(self) -> None:
        """Stop scheduling; the control plane is stopped by the caller."""


class Usher(Contender):
    """usher as users run it: ``python -m usher run`` in its own process."""

    family = "usher"
    scheduler_name = USHER_SCHEDULER_NAME

    def __init__(self, pre_queueing_hints: bool) -> None:
        self.pre_queueing_hints = pre_queueing_hints
        state = "on" if pre_queueing_hints else "off"
        self.key = f"usher-pqh-{state}"
        self.label = f"usher (PreQueueingHints {state})"
        self.process: UsherProcess | None = None
        # By plane: the next run's usher is launched while this run's (the same contender) still works.
        self._launched: dict[Path, UsherProcess] = {}

    def usher_args(self, plane: ControlPlane) -> tuple[str, ...]:
        """Flags after ``usher run --kubeconfig --scheduler-name --metrics-bind-address``."""
        return ("--feature-gates", f"SchedulerPreQueueingHints={str(self.pre_queueing_hints).lower()}")

    def _started(self, plane: ControlPlane) -> UsherProcess:
        """usher started on ``plane`` and ready (blocking)."""
        return UsherProcess(
            kubeconfig=plane.kubeconfig,
            scheduler_name=self.scheduler_name,
            log_path=plane.logs_dir / "usher.log",
            extra_args=self.usher_args(plane),
        ).start()

    def launch(self, plane: ControlPlane) -> None:
        self._launched[plane.workdir] = self._started(plane)

    def discard(self, plane: ControlPlane) -> None:
        process = self._launched.pop(plane.workdir, None)
        if process is not None:
            process.kill()

    async def start(self, plane: ControlPlane, api: Api, namespace: str, nodes: list[str], devices: int) -> None:
        launched = self._launched.pop(plane.workdir, None)
        self.process = launched if launched is not None else self._started(plane)

    @property
    def pid(self) -> int | None:
        return self.process.process.pid if self.process and self.process.process else None

    def ensure_alive(self) -> None:
        if self.process is not None and self.process.process is not None and self.process.process.poll() is not None:
            tail = self.process.log_path.read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError(f"usher exited with {self.process.process.returncode}: " + " | ".join(tail))

    async def scrape(self) -> str | None:
        if self.process is None:
            return None
        async with aiohttp.ClientSession() as session, session.get(f"{self.process.url}/metrics") as response:
            return await response.text()

    async def metrics(self) -> dict[str, float] | None:
        text = await self.scrape()
        return None if text is None else parse_metrics(text)

    async def stop(self) -> None:
        # SIGKILL: a clean shutdown (queued writes get 5 s) is the e2e suite's business, and the
        # control plane is thrown away right after.
        if self.process is not None and self.process.process is not None and self.process.process.poll() is None:
            self.process.kill()


class KubeScheduler(Contender):
    """The harness's kube-scheduler v1.37 with its own profile, started with the control plane."""

    family = "kube-scheduler"
    scheduler_name = KUBE_SCHEDULER_NAME

    def __init__(self, pre_queueing_hints: bool) -> None:
        self.pre_queueing_hints = pre_queueing_hints
        state = "on" if pre_queueing_hints else "off"
        self.key = f"kube-scheduler-pqh-{state}"
        self.label = f"kube-scheduler (PreQueueingHints {state})"
        self._plane: ControlPlane | None = None
        self._context = ssl.create_default_context()
        self._context.check_hostname = False
        self._context.verify_mode = ssl.CERT_NONE

    def configuration(self) -> dict[str, Any]:
        """The KubeSchedulerConfiguration without its client connection (added by `plane_kwargs`)."""
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": self.scheduler_name}],
        }

    def gates_flag(self) -> str:
        return f"SchedulerPreQueueingHints={str(self.pre_queueing_hints).lower()}"

    def plane_kwargs(self, workdir: Path) -> dict[str, Any]:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "kube-scheduler-config.json"
        document = self.configuration()
        # With --config, kube-scheduler ignores --kubeconfig: name the file the control plane writes.
        document["clientConnection"] = {
            **document.get("clientConnection", {}),
            "kubeconfig": str(workdir.resolve() / "scheduler" / "kubeconfig"),
            "qps": KUBE_SCHEDULER_QPS,
            "burst": KUBE_SCHEDULER_QPS,
        }
        config.write_text(json.dumps(document, indent=2))
        gates = self.gates_flag()
        args: Sequence[str] = (
            f"--config={config}",
            *((f"--feature-gates={gates}",) if gates else ()),
            # /metrics without a token: the harness reads hint counts like it reads usher's.
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        )
        return {"scheduler": True, "extra_scheduler_args": args}

    async def start(self, plane: ControlPlane, api: Api, namespace: str, nodes: list[str], devices: int) -> None:
        self._plane = plane

    @property
    def pid(self) -> int | None:
        return self._plane.component("kube-scheduler").process.pid if self._plane else None

    def ensure_alive(self) -> None:
        if self._plane is not None:
            self._plane.component("kube-scheduler").ensure_running()

    async def scrape(self) -> str | None:
        if self._plane is None:
            return None
        url = f"https://127.0.0.1:{self._plane.ports.scheduler}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url, ssl=self._context) as response:
            return await response.text() if response.status == 200 else None

    async def metrics(self) -> dict[str, float] | None:
        text = await self.scrape()
        if text is None:
            return None
        metrics = parse_metrics(text)
        # v1.37.1 declares a labelled family only once it has a sample, and counts every hint
        # call: absent means none yet.
        metrics.setdefault("hint_invocations", 0.0)
        metrics.setdefault("pre_hint_evaluations", 0.0)
        return metrics

    async def stop(self) -> None:
        if self._plane is not None:
            component = self._plane.component("kube-scheduler")
            if component.alive():
                component.process.send_signal(signal.SIGTERM)


class Limit(Contender):
    """`bench.limit.LimitBinder` inside the harness process."""

    key = "limit"
    label = "bind limit"
    family = "limit"
    scheduler_name = LIMIT_SCHEDULER_NAME
    pre_queueing_hints = None

    def __init__(self) -> None:
        self.binder: LimitBinder | ClusterLimitBinder | None = None

    async def start(self, plane: ControlPlane, api: Api, namespace: str, nodes: list[str], devices: int) -> None:
        self.binder = LimitBinder(api, namespace, nodes, devices_per_node=devices)
        await self.binder.start()

    async def stop(self) -> None:
        if self.binder is not None:
            await self.binder.stop()


# --------------------------------------------------------------------------- upstream workloads

#: scheduler_perf's pods name no scheduler: each run has one scheduler, under kube's default name.
DEFAULT_SCHEDULER_NAME = "default-scheduler"
ATTEMPT_DURATION = "scheduler_scheduling_attempt_duration_seconds"


def scheduler_configuration(config: Mapping[str, Any] | None, kubeconfig: Path) -> dict[str, Any]:
    """A test case's KubeSchedulerConfiguration (or the default one) as both schedulers get it.

    Added to what the test case wrote: the client connection (this control plane's
    kubeconfig, client QPS and burst lifted as scheduler_perf lifts them) and no leader
    election (one scheduler per cluster; kube-scheduler's default would add lease writes).
    """
    document: dict[str, Any] = (
        copy.deepcopy(dict(config))
        if config
        else {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "profiles": [{"schedulerName": DEFAULT_SCHEDULER_NAME}],
        }
    )
    document["leaderElection"] = {**document.get("leaderElection", {}), "leaderElect": False}
    document["clientConnection"] = {
        **document.get("clientConnection", {}),
        "kubeconfig": str(kubeconfig),
        "qps": KUBE_SCHEDULER_QPS,
        "burst": KUBE_SCHEDULER_QPS,
    }
    return document


def gates_flag(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{name}={str(value).lower()}" for name, value in sorted(gates.items()))


def histogram(text: str, name: str, **labels: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts (upper bound -> count), summed over the series matching ``labels``."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == f"{name}_bucket" and all(sample.labels.get(k) == v for k, v in labels.items()):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


def histogram_delta(after: Mapping[float, float], before: Mapping[float, float]) -> dict[float, float]:
    """What a histogram observed between two scrapes."""
    return {bound: count - before.get(bound, 0.0) for bound, count in after.items()}


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus's histogram_quantile: linear within the bucket holding the rank (None without observations).

    A rank in the +Inf bucket answers the highest finite bound, as Prometheus does.
    """
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


class UpstreamUsher(Usher):
    """usher on a scheduler_perf workload: the test case's configuration file and the gates usher has."""

    scheduler_name = DEFAULT_SCHEDULER_NAME

    def __init__(self, gates: Mapping[str, bool], config: Mapping[str, Any] | None) -> None:
        super().__init__(pre_queueing_hints=gates.get("SchedulerPreQueueingHints", True))
        self.key = "usher"
        self.label = "usher"
        self.gates = dict(gates)
        self.config = config

    def usher_args(self, plane: ControlPlane) -> tuple[str, ...]:
        path = plane.workdir / "usher-config.json"
        path.write_text(json.dumps(scheduler_configuration(self.config, plane.kubeconfig), indent=2))
        gates = gates_flag(self.gates)
        return ("--config", str(path), *(("--feature-gates", gates) if gates else ()))


class UpstreamKubeScheduler(KubeScheduler):
    """kube-scheduler v1.37 on a scheduler_perf workload: the test case's configuration file and feature gates."""

    scheduler_name = DEFAULT_SCHEDULER_NAME

    def __init__(self, gates: Mapping[str, bool], config: Mapping[str, Any] | None) -> None:
        super().__init__(pre_queueing_hints=gates.get("SchedulerPreQueueingHints", False))
        self.key = "kube-scheduler"
        self.label = "kube-scheduler"
        self.gates = dict(gates)
        self.config = config

    def configuration(self) -> dict[str, Any]:
        return scheduler_configuration(self.config, Path("unused"))

    def gates_flag(self) -> str:
        return gates_flag(self.gates)


class UpstreamLimit(Limit):
    """The bind limit on a scheduler_perf workload: every namespace, the nodes as they appear, any claim shape."""

    scheduler_name = DEFAULT_SCHEDULER_NAME

    async def start(self, plane: ControlPlane, api: Api, namespace: str, nodes: list[str], devices: int) -> None:
        binder = ClusterLimitBinder(api, scheduler_name=self.scheduler_name)
        self.binder = binder
        await binder.start()


def upstream_contenders(
    usher_gates: Mapping[str, bool], kube_gates: Mapping[str, bool], config: Mapping[str, Any] | None
) -> list[Contender]:
    """usher, kube-scheduler and the bind limit, as they run a scheduler_perf workload."""
    return [UpstreamUsher(usher_gates, config), UpstreamKubeScheduler(kube_gates, config), UpstreamLimit()]


def all_contenders() -> list[Contender]:
    """Every contender, in the order they run and appear in tables."""
    return [Usher(True), Usher(False), KubeScheduler(True), KubeScheduler(False), Limit()]


def by_key(keys: list[str] | None) -> list[Contender]:
    """The named contenders (all when empty); unknown keys are an error naming the choices."""
    contenders = all_contenders()
    if not keys:
        return contenders
    known = {c.key: c for c in contenders}
    missing = [k for k in keys if k not in known]
    if missing:
        raise ValueError(f"unknown contender(s) {missing}; choose from {list(known)}")
    return [known[k] for k in keys]
