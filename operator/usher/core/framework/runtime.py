"""Framework: one profile's plugins, run extension point by extension point. Pure.

Runs plugins in their configured order and stops at the first rejection
where kube-scheduler does (PreEnqueue, PreFilter, Filter, Reserve, Permit,
PreBind); scores are normalised per plugin, multiplied by the plugin's
weight and summed. Timing goes to a ``FrameworkRecorder`` (the metrics
adapter), never from plugins themselves; per-plugin timings are sampled on a
share of cycles to keep their cost bounded, as kube-scheduler does.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import (
    MAX_NODE_SCORE,
    MIN_NODE_SCORE,
    NODE_ONLY,
    BatchFilterPlugin,
    BatchScoreNormalizer,
    BatchScorePlugin,
    BindPlugin,
    EnqueueExtensions,
    FilterPlugin,
    NominatedPods,
    PermitPlugin,
    PlacementFeasiblePlugin,
    PlacementProgress,
    PlacementScorePlugin,
    Plugin,
    PodGroupPostFilterPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterExtensions,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    QueueSortPlugin,
    QuickFilterPlugin,
    ReservePlugin,
    ScoreNormalizer,
    ScorePlugin,
)
from usher.core.framework.names import NO_NODES_AVAILABLE
from usher.core.hints import ClusterEventWithHint
from usher.core.types import SUCCESS, Code, NodeName, PodInfo, Status, error

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.podgroups import PodGroup

RECORD_PLUGIN_METRICS = "usher.io/record-plugin-metrics"

T = TypeVar("T")


class FrameworkRecorder(Protocol):
    """Where the framework reports extension-point and plugin timings (the metrics adapter)."""

    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None: ...

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None: ...


class _Silent:
    def extension_point(self, point: str, status: str, profile: str, seconds: float) -> None:
        pass

    def plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        pass


def status_label(status: Status) -> str:
    """Status codes as kube-scheduler's metrics spell them."""
    return _STATUS_LABELS[status.code]


_STATUS_LABELS = {
    Code.SUCCESS: "Success",
    Code.ERROR: "Error",
    Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    Code.WAIT: "Wait",
    Code.SKIP: "Skip",
    Code.PENDING: "Pending",
}


@dataclass(slots=True)
class PluginSet:
    """The enabled plugins of one profile, per extension point, in order (and score weights)."""

    pre_enqueue: list[PreEnqueuePlugin] = field(default_factory=list)
    queue_sort: QueueSortPlugin | None = None
    pre_filter: list[PreFilterPlugin] = field(default_factory=list)
    filter: list[FilterPlugin] = field(default_factory=list)
    post_filter: list[PostFilterPlugin] = field(default_factory=list)
    pre_score: list[PreScorePlugin] = field(default_factory=list)
    score: list[tuple[ScorePlugin, int]] = field(default_factory=list)
    reserve: list[ReservePlugin] = field(default_factory=list)
    permit: list[PermitPlugin] = field(default_factory=list)
    pre_bind: list[PreBindPlugin] = field(default_factory=list)
    bind: list[BindPlugin] = field(default_factory=list)
    post_bind: list[PostBindPlugin] = field(default_factory=list)
    placement_feasible: list[PlacementFeasiblePlugin] = field(default_factory=list)
    placement_score: list[tuple[PlacementScorePlugin, int]] = field(default_factory=list)
    pod_group_pods_count: bool = True
    """PodGroupPodsCount scores placements (weight 1; off when disabled at multiPoint or placementScore)."""
    pod_group_post_filter: list[PodGroupPostFilterPlugin] = field(default_factory=list)
    """Pod-group cycles only; enabled through multiPoint."""
    all: list[Plugin] = field(default_factory=list)
    """Every enabled plugin (each once), for EnqueueExtensions."""


@dataclass(slots=True)
class PermitOutcome:
    """Permit's combined answer: the status, and for Wait the plugins waited on and the timeout."""

    status: Status
    timeout: float = 0.0
    waiting: set[str] = field(default_factory=set)


@dataclass(slots=True)
class PreFilterOutcome:
    """PreFilter's combined answer: the status, the node narrowing, and the plugins that rejected."""

    status: Status
    result: PreFilterResult | None = None
    rejectors: set[str] = field(default_factory=set)


class Framework:
    """One profile's plugins, run extension point by extension point, with timings recorded."""

    def __init__(
        self,
        scheduler_name: str,
        plugins: PluginSet,
        *,
        percentage_of_nodes_to_score: int | None = None,
        recorder: FrameworkRecorder | None = None,
        timer: Callable[[], float] = time.perf_counter,
        nominated: NominatedPods | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self._nominated = nominated
        self.plugins = plugins
        self.percentage_of_nodes_to_score = percentage_of_nodes_to_score
        self._recorder: FrameworkRecorder = recorder or _Silent()
        self._timer = timer
        self._filters = [
            (p.name, p.filter, p.filter_nodes if isinstance(p, BatchFilterPlugin) else None) for p in plugins.filter
        ]
        self._pod_filters = [
            (p.name, p.fits if isinstance(p, QuickFilterPlugin) else _passes(p.filter))
            for p in plugins.filter
            if getattr(p, NODE_ONLY, True)
        ]
        """(name, yes-or-no check) of the Filter plugins that look at a node's pods (``fits_again``)."""
        self._extensions = [p for p in plugins.pre_filter if isinstance(p, PreFilterExtensions)]
        self._scorers = [
            (
                p,
                w,
                _list_normalizer(p),
                p.score_nodes if isinstance(p, BatchScorePlugin) else None,
            )
            for p, w in plugins.score
        ]
        self._hints: dict[str, list[ClusterEventWithHint]] = {
            NO_NODES_AVAILABLE: [ClusterEventWithHint(ClusterEvent(Resource.NODE, ActionType.ADD))]
        }
        for plugin in plugins.all:
            if isinstance(plugin, EnqueueExtensions):
                self._hints[plugin.name] = list(plugin.events_to_register())

    @property
    def queueing_hints(self) -> Mapping[str, Sequence[ClusterEventWithHint]]:
        """Plugin name -> the cluster events (and hints) that may undo its rejections."""
        return self._hints

    # ------------------------------------------------------------------ queueing

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        started = self._timer()
        result = Status()
        for plugin in self.plugins.pre_enqueue:
            status = self._call(plugin.name, "PreEnqueue", True, plugin.pre_enqueue, pod)
            if not status.ok:
                result = status.with_plugin(plugin.name)
                break
        self._recorder.extension_point("PreEnqueue", status_label(result), self.scheduler_name, self._timer() - started)
        return result

    # ------------------------------------------------------------------ scheduling cycle

    def run_pre_filter(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> PreFilterOutcome:
        started = self._timer()
        outcome = PreFilterOutcome(status=Status())
        names: frozenset[str] | None = None
        sample = self._sampled(state)
        for plugin in self.plugins.pre_filter:
            result, status = self._call_pair(plugin.name, "PreFilter", sample, plugin.pre_filter, state, pod, nodes)
            if status.code is Code.SKIP:
                state.skip_filter_plugins.add(plugin.name)
                continue
            if not status.ok:
                outcome.status = status.with_plugin(plugin.name)
                if status.is_rejection:
                    outcome.rejectors.add(plugin.name)
                break
            if result is not None and result.node_names is not None:
                names = result.node_names if names is None else names & result.node_names
                outcome.rejectors.add(plugin.name)
        outcome.result = PreFilterResult(node_names=names)
        self._recorder.extension_point(
            "PreFilter", status_label(outcome.status), self.scheduler_name, self._timer() - started
        )
        return outcome

    def run_filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """The first plugin that rejects ``node`` (an ok Status when every plugin accepts it)."""
        return self.run_filter_nodes(state, pod, [node])[0] or SUCCESS

    def run_filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """Per node, None if every Filter plugin accepts it, with and without the nominated pods of equal or
        higher priority on it (kube-scheduler's two passes), else the first rejection (or error)."""
        results = self._run_filters(state, pod, nodes)
        if self._nominated is None or not self._nominated.any():
            return results
        held = self._nominated.nodes()
        for index, node in enumerate(nodes):
            if results[index] is None and node.name in held:
                results[index] = self._with_nominated(state, pod, node)
        return results

    def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """``FilterRunner`` for PostFilter's dry runs: one node, nominated pods counted, None if it fits.

        Preemption runs this thousands of times a cycle: each plugin's one-node ``filter`` is called
        directly (the same answers as the batched path, which the sampled cycles keep for their
        per-plugin timings)."""
        if self._sampled(state):
            return self.run_filter_nodes(state, pod, [node])[0]
        status = self._filter_one(state, pod, node)
        if status is None and self._nominated is not None and self._nominated.any():
            status = self._with_nominated(state, pod, node)
        return status

    def fits_again(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> bool:
        """``FilterRunner.fits_again``: the plugins that look at the node's pods, yes or no; then the
        nominated pods' pass. A plugin that raises counts as a rejection (the full pass would report it)."""
        if self._sampled(state):
            return self.filter_node(state, pod, node) is None
        skip = state.skip_filter_plugins
        for name, fits in self._pod_filters:
            if name in skip:
                continue
            try:
                if not fits(state, pod, node):
                    return False
            except Exception:
                return False
        if self._nominated is not None and self._nominated.any():
            return self._with_nominated(state, pod, node) is None
        return True

    def _filter_one(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """The first plugin that rejects the one ``node`` (None: every plugin accepts it)."""
        skip = state.skip_filter_plugins
        for name, check, _ in self._filters:
            if name in skip:
                continue
            status = _guarded(check, state, pod, node)
            # None means "passes" only from a batch: a per-node filter must say so with a Status.
            status = status if isinstance(status, Status) else error("filter returned no Status")
            if status.code is not Code.SUCCESS:
                return status.with_plugin(name)
        return None

    def add_pod(self, state: CycleState, pod: PodInfo, added: PodInfo, node: NodeInfo) -> None:
        for plugin in self._extensions:
            if plugin.name not in state.skip_filter_plugins:
                plugin.add_pod(state, pod, added, node)

    def remove_pod(self, state: CycleState, pod: PodInfo, removed: PodInfo, node: NodeInfo) -> None:
        for plugin in self._extensions:
            if plugin.name not in state.skip_filter_plugins:
                plugin.remove_pod(state, pod, removed, node)

    def _with_nominated(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """The pass with the nominated pods of ``pod``'s priority or higher added to a copy of ``node``."""
        assert self._nominated is not None
        ahead = [
            other
            for other in self._nominated.nominated_pods(node.name)
            if other.priority >= pod.priority and other.key != pod.key
        ]
        if not ahead:
            return None
        crowded = node.clone()
        if self._extensions:
            state = state.clone()
        for other in ahead:
            crowded.add_pod(other)
            self.add_pod(state, pod, other, crowded)
        if self._sampled(state):
            return self._run_filters(state, pod, [crowded])[0]
        return self._filter_one(state, pod, crowded)

    def _run_filters(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """Per node, None if every Filter plugin accepts it, else the first rejection (or error).

        The hot loop of a cycle (nodes x plugins), run plugin by plugin over the
        nodes still standing: a ``BatchFilterPlugin`` is called once for all of
        them, any other plugin once per node. A batch that raises is re-run node
        by node, so an error lands on the node that caused it. On sampled cycles
        each plugin's time is recorded as the mean per node, once per status it
        returned, so the histogram keeps kube-scheduler's per-node scale.
        """
        results: list[Status | None] = [None] * len(nodes)
        standing = list(range(len(nodes)))
        skip = state.skip_filter_plugins
        sampled = self._sampled(state)
        for name, check, batch in self._filters:
            if name in skip or not standing:
                continue
            subset = nodes if len(standing) == len(nodes) else [nodes[i] for i in standing]
            started = self._timer() if sampled else 0.0
            statuses = _filter_batch(batch, check, state, pod, subset)
            if sampled:
                self._record_batch(name, statuses, self._timer() - started)
            if not any(statuses):  # every node passed (None), the usual case: nothing to sort out
                continue
            still: list[int] = []
            named: dict[int, Status] = {}  # a batch often answers many nodes with one Status: name it once
            for index, status in zip(standing, statuses, strict=True):
                if status is None or status.code is Code.SUCCESS:
                    still.append(index)
                else:
                    with_name = named.get(id(status))
                    if with_name is None:
                        with_name = named[id(status)] = status.with_plugin(name)
                    results[index] = with_name
            standing = still
        return results

    def _record_batch(self, plugin: str, statuses: Sequence[Status | None], seconds: float) -> None:
        counts: dict[str, int] = {}
        for status in statuses:
            label = "Success" if status is None else status_label(status)
            counts[label] = counts.get(label, 0) + 1
        per_node = seconds / max(1, len(statuses))
        for label in counts:
            self._recorder.plugin(plugin, "Filter", label, per_node)

    def run_post_filter(
        self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status], nodes: Sequence[NodeInfo]
    ) -> PostFilterResult:
        """The first PostFilter plugin that nominates a node (or errs) decides; else the last one's answer."""
        started = self._timer()
        result = PostFilterResult(Status(Code.UNSCHEDULABLE))
        # As kube-scheduler's RunPostFilterPlugins: the first Success, UnschedulableAndUnresolvable or error
        # decides; else the rejections' reasons are joined, first rejector named, last nomination kept.
        reasons: list[str] = []
        rejector: str | None = None
        for plugin in self.plugins.post_filter:
            plugin_started = self._timer()
            try:
                answer = plugin.post_filter(state, pod, statuses, nodes, self)
            except Exception as exc:  # a plugin bug fails this pod's attempt, never the scheduler
                answer = PostFilterResult(error(f"{type(exc).__name__}: {exc}"))
            self._recorder.plugin(
                plugin.name, "PostFilter", status_label(answer.status), self._timer() - plugin_started
            )
            if answer.status.ok or answer.status.code in (Code.ERROR, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
                result = replace(answer, status=answer.status.with_plugin(plugin.name))
                break
            reasons.extend(answer.status.reasons)
            rejector = rejector or plugin.name
            result = PostFilterResult(
                Status(answer.status.code, tuple(reasons), rejector),
                answer.nominated_node or result.nominated_node,
                answer.victims or result.victims,
                answer.clear_nomination or result.clear_nomination,
                answer.budget_violations or result.budget_violations,
            )
        label = status_label(result.status)
        self._recorder.extension_point("PostFilter", label, self.scheduler_name, self._timer() - started)
        return result

    def run_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[dict[NodeName, int], Status]:
        """Weighted, normalised total score per node."""
        started = self._timer()
        sample = self._sampled(state)
        totals: dict[NodeName, int] = {}
        status = Status()
        for pre_score in self.plugins.pre_score:
            status = self._call(pre_score.name, "PreScore", sample, pre_score.pre_score, state, pod, nodes)
            if status.code is Code.SKIP:
                state.skip_score_plugins.add(pre_score.name)
                status = Status()
            elif not status.ok:
                status = status.with_plugin(pre_score.name)
                break
        if status.ok:
            names = [node.name for node in nodes]
            summed = [0] * len(nodes)
            for plugin, weight, normalize, batch in self._scorers:
                if plugin.name in state.skip_score_plugins:
                    continue
                plugin_started = self._timer() if sample else 0.0
                scores, status = _score_batch(batch, plugin.score, state, pod, nodes)
                if sample:
                    per_node = (self._timer() - plugin_started) / max(1, len(nodes))
                    self._recorder.plugin(plugin.name, "Score", status_label(status), per_node)
                if not status.ok:
                    status = status.with_plugin(plugin.name)
                    break
                if normalize is not None:
                    scores = list(scores)  # a batch may hand out a list it keeps
                    status = normalize(state, pod, names, scores)
                    if not status.ok:
                        status = status.with_plugin(plugin.name)
                        break
                if scores and (min(scores) < 0 or max(scores) > MAX_NODE_SCORE):
                    bad = next(i for i, v in enumerate(scores) if not 0 <= v <= MAX_NODE_SCORE)
                    status = error(
                        f"plugin {plugin.name} scored node {names[bad]} {scores[bad]}, outside 0-{MAX_NODE_SCORE}"
                    )
                    break
                weighted = scores if weight == 1 else map(operator.mul, scores, itertools.repeat(weight))
                summed = list(map(operator.add, summed, weighted))  # C-level: nodes x score plugins
            totals = dict(zip(names, summed, strict=True))
        self._recorder.extension_point("Score", status_label(status), self.scheduler_name, self._timer() - started)
        return totals, status

    def run_reserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        started = self._timer()
        result = Status()
        for plugin in self.plugins.reserve:
            status = self._call(plugin.name, "Reserve", self._sampled(state), plugin.reserve, state, pod, node)
            if not status.ok:
                result = status.with_plugin(plugin.name)
                break
        self._point("Reserve", result, started)
        return result

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> None:
        """Undo every Reserve, in reverse order; a plugin that raises does not stop the others."""
        for plugin in reversed(self.plugins.reserve):
            _guarded(_unreserve, plugin, state, pod, node)

    def run_permit(self, state: CycleState, pod: PodInfo, node: NodeName) -> PermitOutcome:
        """Success, a rejection, or Wait (for the listed plugins) with the shortest timeout asked for."""
        started = self._timer()
        outcome = PermitOutcome(Status())
        wait: float | None = None
        for plugin in self.plugins.permit:
            answer, status = self._call_pair(
                plugin.name, "Permit", self._sampled(state), _permit, plugin, state, pod, node
            )
            if status.code is Code.WAIT:
                timeout = answer if answer is not None else 0.0
                wait = timeout if wait is None else min(wait, timeout)
                outcome.waiting.add(plugin.name)
            elif not status.ok:
                outcome = PermitOutcome(status.with_plugin(plugin.name))
                break
        else:
            if wait is not None:
                outcome.status = Status(Code.WAIT)
                outcome.timeout = wait
        self._point("Permit", outcome.status, started)
        return outcome

    def run_placement_score(
        self, group: PodGroup, placements: Sequence[tuple[Sequence[PodInfo], Sequence[NodeInfo]]]
    ) -> tuple[list[int], Status]:
        """kube-scheduler's RunPlacementScorePlugins for the plugins usher has (NodeResourcesFit; the
        PodGroupPodsCount score is the group cycle's own): each placement's weighted sum of the plugins'
        scores, or an error naming the plugin that failed or scored outside 0-100."""
        started = self._timer()
        totals = [0] * len(placements)
        status = SUCCESS
        for plugin, weight in self.plugins.placement_score:
            try:
                scores = [plugin.score_placement(group, pods, nodes) for pods, nodes in placements]
            except Exception as exc:  # a plugin bug fails this group's attempt, never the scheduler
                status = error(f"running PlacementScore plugins: {type(exc).__name__}: {exc}").with_plugin(plugin.name)
                break
            bad = next((v for v in scores if not MIN_NODE_SCORE <= v <= MAX_NODE_SCORE), None)
            if bad is not None:
                status = error(
                    f"plugin {plugin.name!r} returns an invalid score {bad}, it should in the range of "
                    f"[{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing"
                ).with_plugin(plugin.name)
                break
            for i, score in enumerate(scores):
                totals[i] += score * weight
        self._point("PlacementScore", status, started)
        return totals, status

    def run_placement_feasible(self, group: PodGroup, progress: PlacementProgress) -> Status:
        """kube-scheduler's RunPlacementFeasiblePlugins: the first Unschedulable or error ends it, a Wait is
        remembered (the last one wins) while the others are asked, Success when every plugin agrees."""
        started = self._timer()
        result = Status()
        for plugin in self.plugins.placement_feasible:
            status = _guarded(plugin.placement_feasible, group, progress)
            if status.ok:
                continue
            if status.code is Code.WAIT:
                result = status.with_plugin(plugin.name)
                continue
            if status.code is Code.ERROR:
                result = error(f"running PlacementFeasible plugin: {status.message}").with_plugin(plugin.name)
            elif status.code is Code.UNSCHEDULABLE:
                result = status.with_plugin(plugin.name)
            else:
                message = f"unexpected status from PlacementFeasible plugin: {_STATUS_LABELS[status.code]}"
                result = error(message).with_plugin(plugin.name)
            break
        self._point("PlacementFeasible", result, started)
        return result

    def run_pod_group_post_filter(self, group: PodGroup, members: Sequence[tuple[PodInfo, CycleState]]) -> Status:
        """Every PodGroupPostFilter plugin in turn until one makes the group schedulable (Success); an error
        ends it. Unschedulable statuses are merged (what each did, for the log)."""
        started = self._timer()
        reasons: list[str] = []
        result = Status(Code.UNSCHEDULABLE)
        for plugin in self.plugins.pod_group_post_filter:
            status = _guarded(plugin.pod_group_post_filter, group, members)
            if status.ok or status.code is Code.ERROR:
                result = status.with_plugin(plugin.name)
                break
            reasons.extend(status.reasons)
        else:
            result = Status(Code.UNSCHEDULABLE, tuple(reasons))
        self._point("PodGroupPostFilter", result, started)
        return result

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        started = self._timer()
        result = Status()
        for plugin in self.plugins.pre_bind:
            status = await _guarded_async(plugin.pre_bind(state, pod, node))
            if not status.ok:
                result = status.with_plugin(plugin.name)
                break
        self._point("PreBind", result, started)
        return result

    async def run_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        started = self._timer()
        result = error("no bind plugin bound the pod")
        for plugin in self.plugins.bind:
            status = await _guarded_async(plugin.bind(state, pod, node))
            if status.code is Code.SKIP:
                continue
            result = status.with_plugin(plugin.name)
            break
        self._point("Bind", result, started)
        return result

    def run_post_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> None:
        started = self._timer()
        for plugin in self.plugins.post_bind:
            _guarded(_post_bind, plugin, state, pod, node)
        self._point("PostBind", Status(), started)

    # ------------------------------------------------------------------ helpers

    def _point(self, point: str, status: Status, started: float) -> None:
        self._recorder.extension_point(point, status_label(status), self.scheduler_name, self._timer() - started)

    @staticmethod
    def _sampled(state: CycleState) -> bool:
        return bool(state.get(RECORD_PLUGIN_METRICS, False))

    def _call(self, plugin: str, point: str, record: bool, call: Callable[..., Status], *args: Any) -> Status:
        if not record:
            return _guarded(call, *args)
        started = self._timer()
        status = _guarded(call, *args)
        self._recorder.plugin(plugin, point, status_label(status), self._timer() - started)
        return status

    def _call_pair(
        self, plugin: str, point: str, record: bool, call: Callable[..., tuple[T, Status]], *args: Any
    ) -> tuple[T | None, Status]:
        started = self._timer() if record else 0.0
        try:
            value, status = call(*args)
        except Exception as exc:  # a plugin bug fails this pod's attempt, never the scheduler
            value, status = None, error(f"{type(exc).__name__}: {exc}")
        if record:
            self._recorder.plugin(plugin, point, status_label(status), self._timer() - started)
        return value, status


FilterOne = Callable[["CycleState", PodInfo, "NodeInfo"], Status]
FilterMany = Callable[["CycleState", PodInfo, Sequence["NodeInfo"]], list[Status | None]]
ScoreOne = Callable[["CycleState", PodInfo, "NodeInfo"], tuple[int, Status]]
ScoreMany = Callable[["CycleState", PodInfo, Sequence["NodeInfo"]], tuple[list[int], Status]]


def _filter_batch(
    batch: FilterMany | None, check: FilterOne, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
) -> Sequence[Status | None]:
    if batch is not None:
        try:
            statuses = batch(state, pod, nodes)
        except Exception:  # redo node by node: the error belongs to the node that raised it
            pass
        else:
            if len(statuses) == len(nodes):
                return statuses
    checked: list[Status | None] = []
    for node in nodes:
        status = _guarded(check, state, pod, node)
        # None means "passes" only from a batch: a per-node filter must say so with a Status.
        checked.append(status if isinstance(status, Status) else error("filter returned no Status"))
    return checked


ListNormalizer = Callable[[CycleState, PodInfo, Sequence[NodeName], list[int]], Status]


def _list_normalizer(plugin: object) -> ListNormalizer | None:
    """A Score plugin's NormalizeScore over the scores in the nodes' order, in place (None: it has none)."""
    if isinstance(plugin, BatchScoreNormalizer):
        return plugin.normalize_score_list
    if not isinstance(plugin, ScoreNormalizer):
        return None
    by_mapping = plugin.normalize_scores

    def normalize(state: CycleState, pod: PodInfo, names: Sequence[NodeName], scores: list[int]) -> Status:
        by_node = dict(zip(names, scores, strict=True))
        status = by_mapping(state, pod, by_node)
        if status.ok:
            scores[:] = [by_node[name] for name in names]
        return status

    return normalize


def _score_batch(
    batch: ScoreMany | None, score: ScoreOne, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
) -> tuple[list[int], Status]:
    if batch is not None:
        try:
            scores, status = batch(state, pod, nodes)
        except Exception as exc:  # a plugin bug fails this pod's attempt, never the scheduler
            return [], error(f"{type(exc).__name__}: {exc}")
        if not status.ok or len(scores) == len(nodes):
            return scores, status
        return [], error(f"scored {len(scores)} of {len(nodes)} nodes")
    values: list[int] = []
    for node in nodes:
        try:
            value, status = score(state, pod, node)
        except Exception as exc:  # a plugin bug fails this pod's attempt, never the scheduler
            return values, error(f"{type(exc).__name__}: {exc}")
        if status.code is not Code.SUCCESS:
            return values, status
        values.append(int(value or 0))
    return values, SUCCESS


def _passes(check: FilterOne) -> Callable[[CycleState, PodInfo, NodeInfo], bool]:
    """A Filter plugin's ``filter`` as a yes-or-no check."""

    def passes(state: CycleState, pod: PodInfo, node: NodeInfo) -> bool:
        return check(state, pod, node).code is Code.SUCCESS

    return passes


def _guarded(call: Callable[..., Status], *args: Any) -> Status:
    try:
        return call(*args)
    except Exception as exc:  # a plugin bug fails this pod's attempt, never the scheduler
        return error(f"{type(exc).__name__}: {exc}")


async def _guarded_async(call: Awaitable[Status]) -> Status:
    try:
        return await call
    except Exception as exc:  # a plugin bug fails this pod's binding, never the scheduler
        return error(f"{type(exc).__name__}: {exc}")


def _unreserve(plugin: ReservePlugin, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
    plugin.unreserve(state, pod, node)
    return Status()


def _post_bind(plugin: PostBindPlugin, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
    plugin.post_bind(state, pod, node)
    return Status()


def _permit(plugin: PermitPlugin, state: CycleState, pod: PodInfo, node: NodeName) -> tuple[float, Status]:
    status, timeout = plugin.permit(state, pod, node)
    return timeout, status
