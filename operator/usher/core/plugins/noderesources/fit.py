"""NodeResourcesFit: the pod's requests must fit in what the node has left; score by allocation. Pure.

Filter: one more pod must fit under the node's pod capacity, and every
requested resource (cpu, memory, ephemeral-storage, extended resources) must
fit in allocatable minus the requests of the pods already counted on the
node, whoever placed them. A node short of a resource is Unschedulable, or
UnschedulableAndUnresolvable when the pod asks for more than the node's
allocatable (kube-scheduler v1.37: preemption leaves such a node out). A
resource a DeviceClass serves is left to DynamicResources on a node whose
allocatable has none of it. Score: ``LeastAllocated`` (spread, the default),
``MostAllocated`` (pack) or ``RequestedToCapacityRatio`` (a custom
utilisation -> score curve) over the configured resources and weights; pods
that request no cpu or memory count as 100m / 200Mi for scoring, as in
kube-scheduler, so empty pods still spread. An extended resource the pod does
not ask for is not scored; one a DeviceClass serves is scored by the class's
devices on a node whose allocatable has none of it (`usher.core.dra.capacity`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from usher.core.cache.nodeinfo import non_zero_requests
from usher.core.dra.extended import IMPLICIT_PREFIX, served_resources
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.framework.interface import MAX_NODE_SCORE, BatchFilterPlugin, BatchScorePlugin, Handle
from usher.core.framework.names import NODE_RESOURCES_FIT
from usher.core.hints import ClusterEventWithHint, this_pod_changed
from usher.core.plugins.noderesources.allocatable import allocatable_and_requested
from usher.core.plugins.nodeshares import PerNodeByKind
from usher.core.plugins.shapes import Shape, parse_shape, shape_score
from usher.core.resources import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, resource_list
from usher.core.types import SUCCESS, PodInfo, QueueingHint, Status, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState
    from usher.core.podgroups import PodGroup

NAME = NODE_RESOURCES_FIT
TOO_MANY_PODS = "Too many pods"
LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)


Scores = PerNodeByKind[tuple[int, int]]
"""Per (cpu, memory) request: node name -> (the node's generation, its score). A score holds while the node's
generation does (a burst of pods from one template rescoring 230 nodes each finds all but the last pod's node
unchanged)."""


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


@dataclass(frozen=True, slots=True)
class FitArgs:
    """NodeResourcesFitArgs of kubescheduler.config.k8s.io/v1."""

    strategy: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1))
    ignored_resources: frozenset[str] = frozenset()
    ignored_groups: frozenset[str] = frozenset()
    shape: Shape = ()
    """RequestedToCapacityRatio: (utilization %, score 0-10) points, increasing utilization."""


def parse_args(args: Mapping[str, Any]) -> FitArgs:
    reject_unknown_args(args, {"scoringStrategy", "ignoredResources", "ignoredResourceGroups"})
    strategy_args = args.get("scoringStrategy") or {}
    if not isinstance(strategy_args, Mapping):
        raise PluginArgsError("scoringStrategy", "must be an object")
    for key in strategy_args:
        if key not in ("type", "resources", "requestedToCapacityRatio"):
            raise PluginArgsError(
                f"scoringStrategy.{key}", "unknown field (known: requestedToCapacityRatio, resources, type)"
            )
    strategy = strategy_args.get("type", LEAST_ALLOCATED)
    if strategy not in STRATEGIES:
        supported = ", ".join(STRATEGIES)
        raise PluginArgsError("scoringStrategy.type", f"{strategy!r} is not supported (supported: {supported})")
    shape = _parse_shape(strategy_args.get("requestedToCapacityRatio"), strategy)
    resources: list[tuple[str, int]] = []
    for i, item in enumerate(
        strategy_args.get("resources") or [{"name": CPU, "weight": 1}, {"name": MEMORY, "weight": 1}]
    ):
        if not isinstance(item, Mapping) or not item.get("name"):
            raise PluginArgsError(f"scoringStrategy.resources[{i}].name", "required")
        weight = item.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= 100:
            raise PluginArgsError(
                f"scoringStrategy.resources[{i}].weight", f"must be an integer in 1..100, got {weight!r}"
            )
        resources.append((str(item["name"]), weight))
    ignored = args.get("ignoredResources") or []
    groups = args.get("ignoredResourceGroups") or []
    for field_name, values in (("ignoredResources", ignored), ("ignoredResourceGroups", groups)):
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise PluginArgsError(field_name, "must be a list of strings")
    return FitArgs(strategy, tuple(resources), frozenset(ignored), frozenset(groups), shape)


def _parse_shape(raw: Any, strategy: str) -> Shape:
    path = "scoringStrategy.requestedToCapacityRatio"
    if strategy != REQUESTED_TO_CAPACITY_RATIO:
        if raw is not None:
            raise PluginArgsError(path, f"only allowed with type {REQUESTED_TO_CAPACITY_RATIO}")
        return ()
    return parse_shape(raw.get("shape") if isinstance(raw, Mapping) else None, f"{path}.shape")


_CPU_MEMORY_PODS = frozenset({CPU, MEMORY, PODS})


class NodeResourcesFit:
    """The pod's requests must fit the node's allocatable; scores by the configured scoring strategy."""

    name = NAME

    def __init__(self, args: FitArgs, handle: Handle | None = None) -> None:
        self.args = args
        self._handle = handle
        self._dra = handle.dra if handle is not None else None
        """For scored resources a DeviceClass serves (DRAExtendedResource)."""
        self._plain = not (self._ignored(CPU) or self._ignored(MEMORY))
        """cpu and memory are checked (not in ``ignoredResources``): ``filter``'s scalar fast path applies."""
        self._scores_for: Scores = PerNodeByKind()
        """The default path's scores per node, for recent (cpu, memory) requests of incoming pods."""

    def _ignored(self, resource: str) -> bool:
        if resource in self.args.ignored_resources:
            return True
        group = resource.split("/", 1)[0] if "/" in resource else ""
        return bool(group) and group in self.args.ignored_groups

    def _checks(self, pod: PodInfo) -> list[tuple[str, int, str, bool]]:
        """`_checks` with the pod's resources a DeviceClass serves (DRAExtendedResource) marked delegable."""
        served = (
            served_resources(pod.requests, self._handle.dra.class_of_resource)
            if self._handle is not None
            else frozenset()
        )
        return _checks(pod, self._ignored, served)

    def fits(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> bool:
        """``filter(...).ok`` without the reasons (preemption's dry runs ask this thousands of times)."""
        requests = pod.requests
        if self._plain and requests.keys() <= _CPU_MEMORY_PODS:
            cpu, memory = requests.get(CPU), requests.get(MEMORY)
            return (
                node.requested_pods < node.allocatable_pods
                and (cpu is None or cpu <= node.allocatable_cpu - node.requested_cpu)
                and (memory is None or memory <= node.allocatable_memory - node.requested_memory)
            )
        return not _shortfalls(node, self._checks(pod))[0]

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        requests = pod.requests
        if self._plain and requests.keys() <= _CPU_MEMORY_PODS and node.requested_pods < node.allocatable_pods:
            # The common pod, as in ``filter_nodes``: NodeInfo's scalar copies; the reasons only on failure.
            cpu, memory = requests.get(CPU), requests.get(MEMORY)
            if (cpu is None or cpu <= node.allocatable_cpu - node.requested_cpu) and (
                memory is None or memory <= node.allocatable_memory - node.requested_memory
            ):
                return SUCCESS
        return _status(*_shortfalls(node, self._checks(pod)))

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """A few comparisons per node; ``filter`` (with its reasons) only for nodes that fail."""
        wanted = {r: amount for r, amount in pod.requests.items() if r != PODS and not self._ignored(r)}
        results: list[Status | None] = []
        if wanted.keys() <= {CPU, MEMORY}:
            # The common pod (cpu and memory at most): NodeInfo's scalar copies, no dict lookups.
            # A resource the pod does not request is not checked at all (an overcommitted node
            # still takes a pod that asks for none of it): -inf passes every comparison.
            # A node that fails does so on pods, cpu, memory or some of them, and the reasons say just which:
            # one Status per combination serves every node failing alike (a full cluster fails 1000 alike).
            cpu, memory = wanted.get(CPU, -math.inf), wanted.get(MEMORY, -math.inf)
            failures: dict[tuple[bool, bool, bool, bool], Status] = {}
            for node in nodes:
                if cpu <= node.free_cpu and memory <= node.free_memory and node.free_pods > 0:
                    results.append(None)
                    continue
                # Whether the node could ever hold the pod decides the code (`_shortfalls`): part of the key.
                room = (
                    node.free_pods > 0,
                    cpu <= node.free_cpu,
                    memory <= node.free_memory,
                    cpu <= node.allocatable_cpu and memory <= node.allocatable_memory,
                )
                status = failures.get(room)
                if status is None:
                    status = failures[room] = self.filter(state, pod, node)
                results.append(status)
            return results
        # Extended resources: ``_checks`` made once per pod, and one Status per combination of
        # reasons, as above (a pod asking for a resource one node in 500 has fails 499 alike).
        ordered = self._checks(pod)
        by_reasons: dict[tuple[tuple[str, ...], bool], Status] = {}
        for node in nodes:
            shortfalls = _shortfalls(node, ordered)
            if not shortfalls[0]:
                results.append(None)
                continue
            status = by_reasons.get(shortfalls)
            if status is None:
                status = by_reasons[shortfalls] = _status(*shortfalls)
            results.append(status)
        return results

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        return self._node_score(node, self._pod_amounts(pod)), SUCCESS

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        """``score`` per node; the default (LeastAllocated over cpu and memory) takes an unrolled path."""
        amounts = self._pod_amounts(pod)
        if self.args.strategy != LEAST_ALLOCATED or len(amounts) != 2 or not (amounts[0][3] and amounts[1][3]):
            return [self._node_score(node, amounts) for node in nodes], SUCCESS
        by_name = {resource: (weight, want) for resource, weight, want, _ in amounts}
        if set(by_name) != {CPU, MEMORY}:
            return [self._node_score(node, amounts) for node in nodes], SUCCESS
        (weight_cpu, want_cpu), (weight_memory, want_memory) = by_name[CPU], by_name[MEMORY]
        weights = weight_cpu + weight_memory
        memo = self._scores_for((want_cpu, want_memory))
        scores: list[int] = []
        for node in nodes:
            kept = memo.get(node.name)
            if kept is not None and kept[0] == node.generation:
                scores.append(kept[1])
                continue
            capacity_cpu = node.allocatable_cpu
            capacity_memory = node.allocatable_memory
            if capacity_cpu <= 0 or capacity_memory <= 0:
                score = self._node_score(node, amounts)
            else:
                free_cpu = capacity_cpu - node.non_zero_cpu - want_cpu
                free_memory = capacity_memory - node.non_zero_memory - want_memory
                total = (free_cpu * MAX_NODE_SCORE // capacity_cpu if free_cpu > 0 else 0) * weight_cpu
                total += (free_memory * MAX_NODE_SCORE // capacity_memory if free_memory > 0 else 0) * weight_memory
                score = total // weights
            memo[node.name] = (node.generation, score)
            scores.append(score)
        return scores, SUCCESS

    def _node_score(self, node: NodeInfo, amounts: list[tuple[str, int, int, bool]]) -> int:
        """kube's calculateNodeAllocatableRequest, then the strategy's scorer: a resource the node has none of is
        left out, and so is an extended resource the pod does not ask for; one a DeviceClass serves counts the
        class's devices on a node without it in allocatable (`usher.core.dra.capacity`)."""
        total = weights = 0
        for resource, weight, amount, non_zero in amounts:
            by_pods = node.non_zero_requested if non_zero else node.requested
            capacity, used = allocatable_and_requested(node, resource, amount, by_pods, self._dra)
            if capacity <= 0:
                continue
            requested = used + amount
            if self.args.strategy == LEAST_ALLOCATED:
                value = max(0, capacity - requested) * MAX_NODE_SCORE // capacity
            elif self.args.strategy == MOST_ALLOCATED:
                value = min(requested, capacity) * MAX_NODE_SCORE // capacity
            else:
                value = shape_score(self.args.shape, min(requested, capacity) * 100 // capacity)
            total += value * weight
            weights += weight
        return total // weights if weights else 0

    def _pod_amounts(self, pod: PodInfo) -> list[tuple[str, int, int, bool]]:
        """(resource, weight, the pod's request for scoring, counted in non_zero_requested) per scored resource."""
        cpu, memory = non_zero_requests(pod)
        amounts = []
        for resource, weight in self.args.resources:
            if resource == CPU:
                amounts.append((resource, weight, cpu, True))
            elif resource == MEMORY:
                amounts.append((resource, weight, memory, True))
            else:
                amounts.append((resource, weight, pod.requests.get(resource, 0), False))
        return amounts

    def score_placement(self, group: PodGroup, pods: Sequence[PodInfo], nodes: Sequence[NodeInfo]) -> int:
        """kube-scheduler's Fit.ScorePlacement: MostAllocated, whatever the node scoring strategy, over the
        configured resources, summed across the placement's nodes with the proposed members' requests added,
        so a domain the group fills more scores higher (TopologyAwareWorkloadScheduling packs gangs)."""
        resources = self.args.resources
        requested = [0] * len(resources)
        for pod in pods:
            cpu, memory = non_zero_requests(pod)
            for i, (resource, _) in enumerate(resources):
                requested[i] += (
                    cpu if resource == CPU else memory if resource == MEMORY else pod.requests.get(resource, 0)
                )
        allocatable = [0] * len(resources)
        for node in nodes:
            for i, (resource, _) in enumerate(resources):
                if resource in (CPU, MEMORY):
                    capacity, used = node.allocatable.get(resource, 0), node.non_zero_requested.get(resource, 0)
                elif resource == EPHEMERAL_STORAGE or (requested[i] and resource != PODS):
                    # kube skips an extended resource nobody in the group asks for, and "pods" (not scalar)
                    capacity, used = node.allocatable.get(resource, 0), node.requested.get(resource, 0)
                else:
                    continue
                if capacity:
                    allocatable[i] += capacity
                    requested[i] += used
        total = weights = 0
        for (_, weight), want, capacity in zip(resources, requested, allocatable, strict=True):
            if capacity:
                total += min(want, capacity) * MAX_NODE_SCORE // capacity * weight
                weights += weight
        return total // weights if weights else 0

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE), hint=self._node_fits
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN),
                hint=self._room_freed,
                alike=self._room_freed_alike,
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.UPDATE_POD_SCALE_DOWN), hint=this_pod_changed
            ),
            # A pod may wait for a DeviceClass to serve one of its extended resources (DRAExtendedResource).
            ClusterEventWithHint(
                ClusterEvent(Resource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE), hint=_class_serves_pod
            ),
        ]

    def _room_freed(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue only if the pod now fits on the node the deleted (or shrunk) pod freed room on.

        kube-scheduler queues on any assigned pod's deletion; usher looks at that node as cached now
        (the event's change applied, assumed pods counted) with the room held for nominated pods of
        equal or higher priority, as Filter's second pass counts it. Nothing else changed on any
        other node, so a pod that still does not fit there gains nothing from a retry: with many
        preemptors waiting for their victims, each victim's deletion no longer retries all of them.
        """
        name = _freed_node(old, new)
        if not name:
            return QueueingHint.QUEUE_SKIP  # kube-scheduler: an unscheduled, unnominated pod held no room
        node = self._handle.node_info(name) if self._handle is not None else None
        if node is None:
            return QueueingHint.QUEUE
        requested = dict(node.requested)
        for held in self._handle.nominated_pods(node.name) if self._handle is not None else ():
            # A nominee already assumed or bound there is counted in ``requested`` (it keeps its nomination
            # until its binding returns): as in Filter's second pass, it is not counted twice.
            if held.uid != pod.uid and held.priority >= pod.priority and held.key not in node.pods:
                requested[PODS] = requested.get(PODS, 0) + 1
                for resource, amount in held.requests.items():
                    requested[resource] = requested.get(resource, 0) + amount
        if requested.get(PODS, 0) + 1 > node.allocatable.get(PODS, 0):
            return QueueingHint.QUEUE_SKIP
        for resource, amount in pod.requests.items():
            if resource == PODS or self._ignored(resource):
                continue
            if amount > node.allocatable.get(resource, 0) - requested.get(resource, 0):
                return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE

    def _room_freed_alike(self, old: Any, new: Any) -> Callable[[PodInfo], Hashable]:
        """``_room_freed`` answers alike for pods of the same priority and requests, unless the pod is one
        of the nominees of the freed node (its own nomination is not held against it): then the pod itself."""
        name = _freed_node(old, new)
        nominees = {held.uid for held in self._handle.nominated_pods(name)} if name and self._handle else set()

        def key(pod: PodInfo) -> Hashable:
            if pod.uid in nominees:
                return pod.key
            # Unsorted: pods whose requests list in another order get different keys, which only costs a hint.
            return (pod.priority, *pod.requests.items())

        return key

    def _node_fits(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue only if the new or grown node could hold the pod were it empty."""
        allocatable = resource_list(((new or {}).get("status") or {}).get("allocatable"))
        if allocatable.get(PODS, 0) < 1:
            return QueueingHint.QUEUE_SKIP
        for resource, amount in pod.requests.items():
            if resource != PODS and not self._ignored(resource) and amount > allocatable.get(resource, 0):
                return QueueingHint.QUEUE_SKIP
        return QueueingHint.QUEUE


def _class_serves_pod(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """kube-scheduler's isSchedulableAfterDeviceClassEvent: a class added that serves one of the pod's
    resources by its implicit name, or added or updated to serve one by ``spec.extendedResourceName`` (an
    update that keeps the name changes nothing here)."""
    served = ((new or {}).get("spec") or {}).get("extendedResourceName")
    if old is not None:
        if ((old.get("spec") or {}).get("extendedResourceName")) == served:
            return QueueingHint.QUEUE_SKIP
    elif IMPLICIT_PREFIX + str(((new or {}).get("metadata") or {}).get("name")) in pod.requests:
        return QueueingHint.QUEUE
    return QueueingHint.QUEUE if served is not None and served in pod.requests else QueueingHint.QUEUE_SKIP


def _freed_node(old: Any, new: Any) -> str:
    """The node a deleted (or shrunk) pod held room on: where it was bound, else where it was nominated."""
    gone = old if old is not None else new
    spec, status = (gone or {}).get("spec") or {}, (gone or {}).get("status") or {}
    return str(spec.get("nodeName") or status.get("nominatedNodeName") or "")


_CHECK_ORDER = {CPU: 0, MEMORY: 1, EPHEMERAL_STORAGE: 2}
"""kube-scheduler's fitsRequest checks cpu, memory and ephemeral-storage in this order, then the others (in
Go's map order: usher takes them by name)."""


def _checks(pod: PodInfo, ignored: Any, served: frozenset[str]) -> list[tuple[str, int, str, bool]]:
    """(resource, the pod's request, the reason if short, delegable) of each resource checked, in
    kube-scheduler's order. Delegable: a resource a DeviceClass serves (``served``), which DynamicResources
    allocates on a node whose allocatable has none of it (kube-scheduler's shouldDelegateResourceToDRA)."""
    return [
        (resource, amount, insufficient(resource), resource in served)
        for resource, amount in sorted(pod.requests.items(), key=lambda item: (_CHECK_ORDER.get(item[0], 3), item[0]))
        if resource != PODS and not (ignored is not None and ignored(resource))
    ]


def _shortfalls(node: NodeInfo, checks: list[tuple[str, int, str, bool]]) -> tuple[tuple[str, ...], bool]:
    """The reasons ``node`` lacks room for one more pod with these ``checks`` (empty: it fits), and whether
    the pod asks for more of some resource than the node has at all (then no eviction can make room)."""
    allocatable, used = node.allocatable, node.requested
    reasons: tuple[str, ...] = () if used.get(PODS, 0) < allocatable.get(PODS, 0) else (TOO_MANY_PODS,)
    never = False
    for resource, amount, reason, delegable in checks:
        total = allocatable.get(resource, 0)
        if delegable and total == 0:
            continue  # DynamicResources allocates it here
        if amount > total - used.get(resource, 0):
            reasons += (reason,)
            never = never or amount > total
    return reasons, never


def _status(reasons: tuple[str, ...], never: bool) -> Status:
    """kube-scheduler's Filter result: UnschedulableAndUnresolvable when a request exceeds the node's
    allocatable (fitsRequest's ``Unresolvable``: DefaultPreemption leaves the node out), else Unschedulable
    (evicting pods may make room; "Too many pods" always may)."""
    return unschedulable(*reasons, resolvable=not never) if reasons else SUCCESS


def new(args: Mapping[str, Any], handle: Handle) -> NodeResourcesFit:
    return NodeResourcesFit(parse_args(args), handle)


_check_filter: type[BatchFilterPlugin] = NodeResourcesFit
_check_score: type[BatchScorePlugin] = NodeResourcesFit
