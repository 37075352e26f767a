"""Plugin protocols for every extension point, as in kube-scheduler's scheduling framework.

Pure. A plugin is an object with a ``name`` that implements any subset of
these protocols; the runtime finds out which by ``isinstance`` checks
(the protocols are runtime-checkable). The hints an ``EnqueueExtensions``
plugin registers are in ``usher.core.hints``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from usher.core.hints import ClusterEventWithHint
from usher.core.types import NodeName, PodInfo, PodKey, Status

if TYPE_CHECKING:
    from usher.core.cache import DisruptionBudget, NodeInfo
    from usher.core.dra.ports import ClaimWriter
    from usher.core.dra.state import DraState
    from usher.core.framework.cycle_state import CycleState
    from usher.core.podgroups import PodGroup, PodGroupStates
    from usher.core.queue.queuedpod import QueuedPod
    from usher.core.volumes.ports import VolumeWriter
    from usher.core.volumes.state import VolumeState


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """A PreFilter may narrow the nodes worth filtering (None = all)."""

    node_names: frozenset[str] | None = None


MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


@runtime_checkable
class Plugin(Protocol):
    """Every plugin has a name; what else it implements is found by ``isinstance`` on the protocols below."""

    @property
    def name(self) -> str: ...


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    """Decides whether a pod may enter activeQ at all (gates, missing claims)."""

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """May this pod enter the active queue at all? A rejection parks it as gated."""
        ...


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    """Orders activeQ."""

    def sort_key(self, queued: QueuedPod) -> tuple[Any, ...]:
        """Pods with smaller keys pop first (kube-scheduler's ``Less`` as a key)."""
        ...


@runtime_checkable
class EnqueueExtensions(Plugin, Protocol):
    """Registers the cluster events that may make a pod this plugin rejected schedulable."""

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        """Cluster events that may make a pod this plugin rejected schedulable."""
        ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    """Computes per-pod state once per cycle and may narrow the nodes worth filtering."""

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]: ...


@runtime_checkable
class PreFilterExtensions(Protocol):
    """A PreFilter plugin whose cycle state counts other pods: it updates that state when a dry run
    (preemption, nominated pods) adds or removes a pod on a node (kube-scheduler's PreFilterExtensions)."""

    def add_pod(self, state: CycleState, pod: PodInfo, added: PodInfo, node: NodeInfo) -> None: ...

    def remove_pod(self, state: CycleState, pod: PodInfo, removed: PodInfo, node: NodeInfo) -> None: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    """Decides whether the pod fits one node."""

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status: ...


@runtime_checkable
class BatchFilterPlugin(FilterPlugin, Protocol):
    """A Filter that decides many nodes in one call; must answer exactly as ``filter`` per node."""

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """``filter`` for many nodes in one call: None where it would succeed, else its Status.

        Optional. The cycle's hot loop is nodes x filter plugins; a plugin that
        works out the pod's side once per call (and skips nodes with nothing to
        check) saves a Python call and a Status per node. Must agree with
        ``filter`` node for node.
        """
        ...


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """PostFilter's answer (kube-scheduler's PostFilterResult + Status).

    ``status`` Success with ``nominated_node``: the pod fits there once ``victims``
    are gone; the caller nominates it and evicts them. Unschedulable: preemption
    cannot help (the message says why, kube-scheduler's ``preemption: ...``).
    """

    status: Status
    nominated_node: NodeName | None = None
    victims: tuple[PodInfo, ...] = ()
    clear_nomination: bool = False
    """No node can take the pod even with preemption: drop its nomination (kube's ModeOverride with "")."""
    budget_violations: int = 0
    """Victims whose eviction breaks a PodDisruptionBudget (scheduler_preemption_pdb_violations_total)."""


class NominatedPods(Protocol):
    """Pods preemption nominated to nodes, not bound yet (kube-scheduler's PodNominator, read side)."""

    def any(self) -> bool:
        """Whether any pod is nominated anywhere (the common answer, no, costs nothing)."""
        ...

    def nominated_pods(self, node: str) -> Sequence[PodInfo]:
        """The pods nominated to ``node``."""
        ...

    def nodes(self) -> Collection[str]:
        """The nodes some pod is nominated to (a Filter pass looks at the others once)."""
        ...


class PreemptionsInFlight(Protocol):
    """What the scheduler is evicting right now (kube-scheduler's preemption Executor, read side)."""

    def running(self, uid: str) -> bool:
        """Whether the eviction calls of this preemptor's last preemption are still in flight."""
        ...

    def evicting(self, key: PodKey) -> bool:
        """Whether this pod is a victim the scheduler asked to evict and has not seen gone yet."""
        ...


class FilterRunner(Protocol):
    """The profile's Filter plugins on one node, for PostFilter's dry runs."""

    def filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status | None:
        """None if ``pod`` fits ``node`` (a modified copy, victims removed) with the nominated pods of
        equal or higher priority on it counted too (kube-scheduler's RunFilterPluginsWithNominatedPods);
        else the first rejection."""
        ...

    def fits_again(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> bool:
        """``filter_node(...) is None`` for a node that passed every Filter plugin with fewer pods on it
        (preemption giving a victim back): plugins that never look at the node's pods are not asked
        again, and the others answer yes or no (``QuickFilterPlugin``) without their reasons."""
        ...

    def add_pod(self, state: CycleState, pod: PodInfo, added: PodInfo, node: NodeInfo) -> None:
        """Tell the PreFilter extensions ``added`` now counts on ``node`` (a copy) in ``state`` (a clone)."""
        ...

    def remove_pod(self, state: CycleState, pod: PodInfo, removed: PodInfo, node: NodeInfo) -> None:
        """Tell the PreFilter extensions ``removed`` no longer counts on ``node`` in ``state``."""
        ...


@runtime_checkable
class QuickFilterPlugin(Protocol):
    """A Filter plugin that can answer yes or no more cheaply than with a Status and its reasons."""

    def fits(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> bool:
        """``filter(state, pod, node).ok``."""
        ...


NODE_ONLY = "filter_reads_node_pods"
"""A Filter plugin's class attribute: False when its answer depends on the pod and the node object only,
never on the pods on the node (NodeName, NodeUnschedulable, TaintToleration, NodeAffinity), so giving a
victim back in a dry run cannot change it. Absent means True."""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    """Runs when no node fits (preemption's extension point)."""

    def post_filter(
        self,
        state: CycleState,
        pod: PodInfo,
        statuses: Mapping[str, Status],
        nodes: Sequence[NodeInfo],
        filters: FilterRunner,
    ) -> PostFilterResult:
        """``statuses``: each rejected node's status (nodes absent were not evaluated); ``nodes``: the
        cycle's snapshot, never to be modified (clone a NodeInfo to dry-run on it)."""
        ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    """Computes per-pod state once before scoring the feasible nodes."""

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status: ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    """Scores one feasible node; higher is better."""

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]: ...


@runtime_checkable
class BatchScorePlugin(ScorePlugin, Protocol):
    """A Score that scores many nodes in one call; must answer exactly as ``score`` per node."""

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[list[int], Status]:
        """``score`` for many nodes in one call: the scores in ``nodes``' order, or the first failure.

        Optional, for the same reason as ``BatchFilterPlugin.filter_nodes``;
        must agree with ``score`` node for node.
        """
        ...


@runtime_checkable
class ScoreNormalizer(Plugin, Protocol):
    """Rescales a plugin's raw scores of all nodes to 0..MAX_NODE_SCORE."""

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]) -> Status:
        """Rescale this plugin's raw scores to 0..MAX_NODE_SCORE in place."""
        ...


@runtime_checkable
class BatchScoreNormalizer(ScoreNormalizer, Protocol):
    """A NormalizeScore that rescales the scores as the runtime holds them: a list in the nodes' order."""

    def normalize_score_list(
        self, state: CycleState, pod: PodInfo, names: Sequence[NodeName], scores: list[int]
    ) -> Status:
        """``normalize_scores`` on ``scores`` (``names[i]``'s at ``i``) in place, without a dict built and read
        back per plugin and pod (33 us at 500 nodes); must rescale exactly as ``normalize_scores``."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    """Claims resources for the pod on the chosen node in usher's state; Unreserve gives them back."""

    def reserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> None: ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    """Approves, rejects or holds (Wait) the pod before its binding cycle."""

    def permit(self, state: CycleState, pod: PodInfo, node: NodeName) -> tuple[Status, float]:
        """Success, a rejection, or Wait with a timeout in seconds."""
        ...


@dataclass(frozen=True, slots=True)
class PlacementProgress:
    """How far a pod-group cycle got (kube-scheduler's PlacementProgress): members still to try, and members
    scheduled (assumed or bound before the cycle, plus those placed in it so far)."""

    remaining: int
    scheduled: int


@runtime_checkable
class PlacementFeasiblePlugin(Plugin, Protocol):
    """Decides, during a pod-group cycle, whether the group can still meet its constraints (GangScheduling).

    Enabled through ``multiPoint`` only, as in kube-scheduler (no configuration point of its own).
    """

    def placement_feasible(self, group: PodGroup, progress: PlacementProgress) -> Status:
        """Success: the constraints are met. Wait: not yet, more members may meet them. Unschedulable: they
        cannot be met any more, the cycle ends early."""
        ...


@runtime_checkable
class PlacementScorePlugin(Plugin, Protocol):
    """Scores, during a pod-group cycle with a topology constraint, each feasible placement (one domain) by
    the members the cycle proposes there and the domain's nodes, 0-100 (kube-scheduler's
    PlacementScorePlugin, NodeResourcesFit's ScorePlacement). Weighted by the plugin's multiPoint weight.

    Enabled through ``multiPoint`` only, like PlacementFeasible.
    """

    def score_placement(self, group: PodGroup, pods: Sequence[PodInfo], nodes: Sequence[NodeInfo]) -> int:
        """``pods``: the members proposed for the placement; ``nodes``: its nodes, without them."""
        ...


@runtime_checkable
class PodGroupPostFilterPlugin(Plugin, Protocol):
    """Runs when a pod-group cycle placed nobody, to make a later cycle succeed (DynamicResources releases
    the claims the group holds). Workload-aware preemption, kube-scheduler's other PodGroupPostFilter, is
    the scheduler's own (``Preemptor.group_post_filter``).

    Enabled through ``multiPoint`` only, like PlacementFeasible.
    """

    def pod_group_post_filter(self, group: PodGroup, members: Sequence[tuple[PodInfo, CycleState]]) -> Status:
        """``members``: the members the cycle tried, with their cycle states. Success: something changed that
        lets the group fit; Unschedulable (with what was done, if anything): it stays unschedulable for now."""
        ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    """Writes what must exist before the binding (claim allocations), in the binding cycle."""

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status: ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    """Binds the pod to the node (or Skips to let the next bind plugin do it)."""

    async def bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        """Bind, or return a Skip status to let the next bind plugin do it."""
        ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    """Informational: the pod was bound."""

    def post_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> None: ...


class Binder(Protocol):
    """The port through which bind plugins reach the API server (implemented by the adapters)."""

    async def bind(self, pod: PodInfo, node: NodeName) -> Status: ...


class WaitingPods(Protocol):
    """Pods held at Permit: a plugin that answered Wait lets them go (or rejects them) later."""

    def allow(self, key: PodKey, plugin: str) -> None: ...

    def reject(self, key: PodKey, plugin: str, message: str) -> None: ...


class Handle(Protocol):
    """What the framework gives plugin factories."""

    @property
    def binder(self) -> Binder: ...

    @property
    def waiting_pods(self) -> WaitingPods: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """Labels of a namespace (for namespaceSelector terms); None if usher has not seen it."""
        ...

    def namespace_generation(self) -> int:
        """Renewed whenever any namespace comes, goes or changes its labels."""
        ...

    @property
    def dra(self) -> DraState:
        """ResourceClaims, slices, classes, in-flight allocations (DynamicResources)."""
        ...

    @property
    def claims(self) -> ClaimWriter:
        """The port for ResourceClaim writes (DynamicResources' PreBind)."""
        ...

    def service_selectors(self, namespace: str) -> Sequence[Mapping[str, str]]:
        """The ``spec.selector`` of each Service of a namespace that has one (PodTopologySpread's defaults)."""
        ...

    def disruption_budgets(self, namespace: str) -> Sequence[DisruptionBudget]:
        """The PodDisruptionBudgets of a namespace, as last watched (DefaultPreemption)."""
        ...

    @property
    def preemptions(self) -> PreemptionsInFlight:
        """Evictions in flight (DefaultPreemption's PreEnqueue gate and eligibility)."""
        ...

    @property
    def volumes(self) -> VolumeState:
        """PVCs, PVs, storage classes and CSI objects as watched or assumed (the volume plugins)."""
        ...

    @property
    def volume_writer(self) -> VolumeWriter:
        """The port for PV and PVC writes (VolumeBinding's PreBind)."""
        ...

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        """A node's labels as cached; None when usher has not seen it (VolumeBinding's PreBind)."""
        ...

    def node_info(self, node: str) -> NodeInfo | None:
        """A node as cached now, assumed pods included; None when usher has not seen it (QueueingHints)."""
        ...

    def image(self, name: str) -> tuple[int, int] | None:
        """(size in bytes, nodes that have it) of an image some node's ``status.images`` names (ImageLocality)."""
        ...

    def node_count(self) -> int:
        """How many nodes the cycle's snapshot holds (ImageLocality's spread of an image)."""
        ...

    def nominated_pods(self, node: str) -> Sequence[PodInfo]:
        """The pods nominated to a node (QueueingHints that must count the room held for them)."""
        ...

    def node_of_pod(self, key: PodKey) -> NodeInfo | None:
        """The node a pod is counted on, bound or assumed; None when it is on none (DefaultPreemption's
        victims of a PodGroup, whose pods run on several nodes)."""
        ...

    @property
    def pod_groups(self) -> PodGroupStates:
        """Pod groups and their members' states, as cached and assumed (GangScheduling)."""
        ...


EXTENSION_POINTS: dict[str, Any] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}
"""Extension point names as KubeSchedulerConfiguration spells them -> protocol."""
