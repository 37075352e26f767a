"""DynamicResources: pods get devices from ResourceSlices through their ResourceClaims. Pure.

- PreEnqueue: every claim of the pod must resolve (direct name, or a template
  whose generated name the pod's status records), exist, not be being
  deleted, and, if a template made it, be owned by the pod. Until then the pod
  is held back (gated) and comes back on the claim's or its own status event.
- PreFilter: claims already allocated pin the pod to their
  ``allocation.nodeSelector``; unallocated claims must not be in flight for
  another pod and their device classes must exist. The slice inventory is
  rebuilt only when a slice changed. The claims are planned here, once for
  every node (nothing in a plan depends on the node).
- Filter: allocate all unallocated claims of the pod together on the node
  (structured parameters, see core/dra/allocation/), devices taken by any
  claim (whoever allocated it) or in flight excluded. Selector results are
  remembered per device until a slice changes (core/dra/matching.py). In
  batches, a node with too few free matching devices is rejected without a
  search, from counts kept per pool until one of its devices is taken or
  freed (the same answer the search would give). Likewise the first free
  matching devices of each pool are kept per pool until one of its devices is
  taken or freed, so a plain claim's search costs a lookup on a pool nothing
  changed in since an earlier cycle.
- Score (DRAPrioritizedList, weight 2): a node whose allocation picks an
  earlier alternative of a ``firstAvailable`` request scores higher (8 for
  the first, 1 for the eighth, summed over the pod's claims and scaled to
  0-100 by the best node), as kube-scheduler scores it; skipped at PreScore
  for pods with no such request.
- Reserve: the chosen node's allocation is recorded in flight, so the next
  pod sees its devices taken and a pod sharing the claim waits.
- PreBind: for each claim not yet reserved for the pod, add the
  delete-protection finalizer and write ``status.allocation`` (when this pod
  allocates) and append the pod to ``status.reservedFor``, with the claim's
  resourceVersion as precondition, re-reading on conflict. Unreserve undoes
  the in-flight state and removes reservations PreBind already made.
- Events: claim add/update/delete with a PreQueueingHint that narrows to the
  pods referencing the claim (all pods on deallocation: freed devices may
  help anyone; none when only the claim's metadata changed or an unallocated
  claim went, as kube-scheduler skips them), the pod's own
  resourceClaimStatuses, device classes, slices, and nodes. A claim usher
  wrote raises its event when the write is assumed (``DraState.on_assumed``).

- Extended resources backed by DeviceClasses (DRAExtendedResource,
  core/dra/extended.py): a pod asking for one is handled here on every node
  whose allocatable lacks it. Filter plans a claim of the pod's own for those
  resources (one per set of resources nodes leave to DRA) beside its other
  claims; Reserve holds its devices in flight; PreBind creates it (named
  ``<pod>-extended-resources-*``, the pod its controller, with the finalizer),
  writes its allocation and reservation, and records it in the pod's
  ``status.extendedResourceClaimStatus``; Unreserve deletes it. A claim an
  earlier attempt made (usher stopped in between) rejects every node until
  PostFilter has deleted it, as in kube-scheduler.

A malformed selector (CEL error) or object is reported on the pods it
blocks (UnschedulableAndUnresolvable with the error) and never stops the
scheduler.

Every rejection is UnschedulableAndUnresolvable, as kube-scheduler's
statusUnschedulable makes them (a claim allocated elsewhere, in flight or
being deallocated, devices short on the node): evicting pods frees no device
in a dry run, so DefaultPreemption leaves these nodes out instead of trying
each. An allocation that times out (``filterTimeout``) is an Error, as in
kube-scheduler: the attempt ends and the pod is retried after its backoff.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from usher.core.dra.allocation import (
    REASON_CANNOT_ALLOCATE,
    REASON_TIMED_OUT,
    Allocation,
    AllocationOutcome,
    ClaimsPlan,
    Inventory,
    MatchMemo,
    VisiblePool,
    allocate,
    plan_claims,
    remembered_outcome,
    surely_unsatisfiable,
)
from usher.core.dra.binding import (
    BINDING_TIMEOUT,
    DEFAULT_BINDING_TIMEOUT,
    binding_failure,
    binding_timed_out,
    has_binding_conditions,
    pending_conditions,
    ready_for_binding,
)
from usher.core.dra.extended import RequestMapping, claim_object, extended_requests, served_resources
from usher.core.dra.model import FINALIZER, SCHEDULING_GROUP, Claim, DeviceId, parse_claim
from usher.core.dra.podclaims import PodClaim, referenced_claim_names, resolve_pod_claims
from usher.core.dra.ports import ClaimWriter
from usher.core.dra.state import DraState, InFlight, claim_key
from usher.core.dra.taints import kept_off_by_taints
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError, go_duration, reject_unknown_args
from usher.core.framework.interface import (
    BatchFilterPlugin,
    FilterPlugin,
    FilterRunner,
    PodGroupPostFilterPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreFilterResult,
    ReservePlugin,
)
from usher.core.framework.names import DYNAMIC_RESOURCES
from usher.core.framework.scoring import DefaultNormalized
from usher.core.hints import ALL_PODS, ClusterEventWithHint, PreQueueingHintResult, only, this_pod_changed
from usher.core.selectors import SelectorError, node_selector_matches
from usher.core.types import (
    SUCCESS,
    Code,
    NodeName,
    PodGroupKey,
    PodInfo,
    QueueingHint,
    Status,
    error,
    unschedulable,
)

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState
    from usher.core.podgroups import PodGroup, PodGroupStates

NAME = DYNAMIC_RESOURCES
STATE_KEY = "DynamicResources/state"
MAX_WRITE_ATTEMPTS = 5
DEFAULT_FILTER_TIMEOUT = 10.0
FIRST_AVAILABLE_MAX = 8
"""``firstAvailable`` lists at most this many alternatives (the API's FirstAvailableDeviceRequestMaxSize): the
first scores 8, the last 1."""
_CANNOT_ALLOCATE = unschedulable(REASON_CANNOT_ALLOCATE, resolvable=False)
_STALE = unschedulable("cannot schedule extended resource claim", resolvable=False)
"""Every node, while a claim an earlier attempt made for the pod's extended resources exists (PostFilter
deletes it; kube-scheduler's filterExtendedResources)."""


def _rejection(outcome: AllocationOutcome, node: NodeInfo) -> Status:
    """Why a node is rejected when allocation on it failed."""
    if outcome.error:
        # kube-scheduler: something is wrong with the claim or class (a CEL error, an impossible request), not
        # with this node, so an Error that ends the whole attempt, on whichever node meets it first; the pod is
        # retried after its backoff.
        return error(outcome.error)
    if outcome.reason == REASON_TIMED_OUT:
        # kube-scheduler: a timeout may be transient, so an Error: the attempt ends and the pod is retried
        # after its backoff instead of waiting in the unschedulable queue for a cluster event.
        return error(f"node {node.name}: {REASON_TIMED_OUT}")
    # Every other failure, as each of kube-scheduler's: statusUnschedulable, which preemption cannot help.
    if outcome.reason == REASON_CANNOT_ALLOCATE:
        return _CANNOT_ALLOCATE
    return unschedulable(outcome.reason, resolvable=False)


class DraHandle(Protocol):
    """What the plugin needs from the framework handle."""

    @property
    def dra(self) -> DraState: ...

    @property
    def claims(self) -> ClaimWriter: ...

    @property
    def pod_groups(self) -> PodGroupStates: ...


@dataclass(frozen=True, slots=True)
class _ExtendedPlan:
    """A pod's extended-resource claim for one set of resources, and the plan of all its unallocated claims."""

    claim: Claim
    mappings: tuple[RequestMapping, ...]
    plan: ClaimsPlan


@dataclass(slots=True)
class _CycleData:
    claims: list[tuple[PodClaim, Claim]]
    bindings: Mapping[str, Mapping[str, str]]
    """claim key -> the ``status.reservedFor`` entry it gets: the pod, or its PodGroup for a group's claim."""
    allocated: list[Claim]
    pending: list[tuple[Claim, InFlight]]
    """Claims whose allocation another pod of the same PodGroup reserved and nobody has written yet."""
    unallocated: list[Claim]
    inventory: Inventory
    plan: ClaimsPlan
    """The unallocated claims, planned for every node of the cycle."""
    in_use: Mapping[DeviceId, int]
    """Devices in use when the cycle began (a copy)."""
    use_version: int
    """The in-use version ``in_use`` was copied at."""
    shared: Mapping[DeviceId, Mapping[str, Decimal]] = field(default_factory=dict)
    """Devices shared when the cycle began, and what their shares take (a copy; DRAConsumableCapacity)."""
    shared_pools: frozenset[tuple[str, str]] = frozenset()
    """The pools of the devices in ``shared``."""
    outcomes: dict[str, AllocationOutcome] = field(default_factory=dict)
    reserved: list[str] = field(default_factory=list)
    """Claims PreBind reserved for the pod (undone by Unreserve)."""
    unavailable: set[str] = field(default_factory=set)
    """Allocated (or pending) claims whose allocation kept the pod off some node (for PostFilter)."""
    pinned: list[tuple[Claim, Mapping[str, Any] | None]] = field(default_factory=list)
    """The allocated and pending claims with the node selector of their allocation: they keep the pod there."""
    extended: frozenset[str] = frozenset()
    """The pod's extended resources a DeviceClass serves (DRAExtendedResource): allocated here on a node
    whose allocatable has none of them."""
    stale: Claim | None = None
    """A claim an earlier attempt made for the pod's extended resources: no node passes until PostFilter
    has deleted it (kube-scheduler cannot tell whether its allocation still holds either)."""
    extended_plans: dict[frozenset[str], _ExtendedPlan] = field(default_factory=dict)
    """The extended resources a node leaves to DRA -> the claim for them, planned with the unallocated ones."""
    extended_on: dict[NodeName, _ExtendedPlan] = field(default_factory=dict)
    """The plan each node that passed Filter used, where it allocated extended resources."""
    extended_chosen: _ExtendedPlan | None = None
    """The chosen node's (Reserve), until Unreserve."""
    extended_created: Claim | None = None
    """The pod's extended-resource claim once PreBind created it (Unreserve deletes it)."""
    unready: list[Claim] = field(default_factory=list)
    """Allocated claims whose devices failed their binding conditions or timed out waiting: on no node."""

    def searched(self) -> None:
        """The node is chosen: drop what only the search needed. A pod waits in PreBind for its writes, and
        a thousand pods waiting there each held a copy of the devices in use (5,000 devices: about 0.3 MB)."""
        self.in_use = {}
        self.shared = {}
        self.outcomes.clear()
        self.extended_plans.clear()
        self.extended_on.clear()

    def __post_init__(self) -> None:
        self.pinned = [(claim, (claim.allocation or {}).get("nodeSelector")) for claim in self.allocated]
        self.pinned += [(claim, in_flight.allocation.node_selector) for claim, in_flight in self.pending]


@dataclass(frozen=True, slots=True)
class DynamicResourcesArgs:
    """DynamicResourcesArgs, as kube-scheduler reads and validates them."""

    filter_timeout: float = DEFAULT_FILTER_TIMEOUT
    """``filterTimeout``: seconds Filter may spend allocating on one node (0: no limit)."""
    binding_timeout: float = DEFAULT_BINDING_TIMEOUT
    """``bindingTimeout``: seconds PreBind waits for binding conditions (at least 1)."""


def parse_args(args: Mapping[str, Any], *, binding_conditions: bool = True) -> DynamicResourcesArgs:
    """``binding_conditions``: DRADeviceBindingConditions and DRAResourceClaimDeviceStatus; without both,
    ``bindingTimeout`` is refused, as kube-scheduler refuses it."""
    reject_unknown_args(args, {"filterTimeout", "bindingTimeout"})
    filter_timeout = DEFAULT_FILTER_TIMEOUT
    raw = args.get("filterTimeout")
    if raw is not None:
        seconds = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else go_duration(raw)
        if seconds is None or not math.isfinite(seconds):
            raise PluginArgsError("filterTimeout", f"must be a duration like '10s' (0 disables the limit), got {raw!r}")
        if seconds < 0:
            raise PluginArgsError("filterTimeout", f"must be zero or positive, got {raw!r}")
        filter_timeout = seconds
    binding_timeout = DEFAULT_BINDING_TIMEOUT
    raw = args.get("bindingTimeout")
    if raw is not None:
        if not binding_conditions:
            raise PluginArgsError(
                "bindingTimeout", "DRADeviceBindingConditions or DRAResourceClaimDeviceStatus feature gate is disabled"
            )
        seconds = go_duration(raw)
        if seconds is None:
            raise PluginArgsError("bindingTimeout", f"must be a duration like '600s', got {raw!r}")
        if seconds < 1:
            raise PluginArgsError("bindingTimeout", f"must be at least 1 second, got {raw!r}")
        binding_timeout = seconds
    return DynamicResourcesArgs(filter_timeout, binding_timeout)


class DynamicResources(DefaultNormalized):
    """Structured-parameters DRA: claims must exist, devices are allocated in Filter, written in PreBind."""

    name = NAME

    def __init__(
        self,
        handle: DraHandle,
        *,
        filter_timeout: float = DEFAULT_FILTER_TIMEOUT,
        binding_timeout: float = DEFAULT_BINDING_TIMEOUT,
        now: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """``now``: the clock ``filterTimeout`` and PreBind's wait are measured on; ``wall``: seconds since the
        epoch, to compare with a claim's ``allocationTimestamp`` (tests inject both)."""
        self._dra = handle.dra
        self._writer = handle.claims
        self._groups = handle.pod_groups
        self._filter_timeout = filter_timeout
        self._binding_timeout = binding_timeout
        self._now = now
        self._wall = wall
        self._inventory: Inventory | None = None
        """The inventory ``_matches`` is about (`DraState.inventory`, shared with scoring)."""
        self._matches = MatchMemo()
        """Devices of the current inventory each combination of class and request selectors accepts."""

    # ------------------------------------------------------------------ PreEnqueue

    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not (pod.raw.get("spec") or {}).get("resourceClaims"):
            return SUCCESS
        _, status = self._resolve(pod)
        return status

    def _resolve(self, pod: PodInfo) -> tuple[list[tuple[PodClaim, Claim]], Status]:
        resolution = resolve_pod_claims(pod.raw)
        if resolution.problem:
            return [], unschedulable(resolution.problem, resolvable=False)
        found: list[tuple[PodClaim, Claim]] = []
        for pod_claim in resolution.claims:
            key = claim_key(pod.namespace, pod_claim.claim_name)
            broken = self._dra.broken.get(key)
            if broken:
                return [], unschedulable(broken, resolvable=False)
            claim = self._dra.claim(key)
            if claim is None:
                return [], unschedulable(
                    f'resourceclaim.resource.k8s.io "{pod_claim.claim_name}" not found', resolvable=False
                )
            if claim.deleting:
                return [], unschedulable(f'resourceclaim "{pod_claim.claim_name}" is being deleted', resolvable=False)
            if pod_claim.from_template and claim.owner_uid != pod.uid:
                if not (self._dra.workload_claims and pod.pod_group):
                    return [], unschedulable(
                        f"ResourceClaim {key} was not created for pod {pod.key} (pod is not owner)", resolvable=False
                    )
                if claim.owner_group != pod.pod_group:
                    return [], unschedulable(
                        f"ResourceClaim {key} was not created for pod {pod.key} "
                        f"(neither pod nor PodGroup {pod.pod_group} is the owner)",
                        resolvable=False,
                    )
            found.append((pod_claim, claim))
        return found, SUCCESS

    def _bindings(
        self, pod: PodInfo, claims: Sequence[tuple[PodClaim, Claim]]
    ) -> tuple[dict[str, dict[str, str]], Status]:
        """Who each claim is reserved for: the pod, or (DRAWorkloadResourceClaims) its PodGroup when the
        PodGroup's ``spec.resourceClaims`` has the same entry (kube-scheduler's resourceclaim.BindTo)."""
        own = {"resource": "pods", "name": pod.name, "uid": pod.uid}
        key = pod.group_key
        if not self._dra.workload_claims or key is None or not self._groups.enabled:
            return {claim.key: own for _, claim in claims}, SUCCESS
        group = self._groups.pod_group(key)
        if group is None:
            return {}, unschedulable(f'podgroup.scheduling.k8s.io "{pod.pod_group}" not found', resolvable=False)
        for group_claim in group.claims:
            if (group_claim.claim_name is None) == (group_claim.template_name is None):
                return {}, unschedulable(
                    f"PodGroup {group.key} claim {group_claim.name}: none of the supported fields are set",
                    resolvable=False,
                )
        reference = {"apiGroup": SCHEDULING_GROUP, "resource": "podgroups", "name": group.name, "uid": group.uid}
        return {
            claim.key: reference if group.claim_for(pod_claim.entry) is not None else own for pod_claim, claim in claims
        }, SUCCESS

    # ------------------------------------------------------------------ PreFilter / Filter

    def _extended(self, pod: PodInfo) -> frozenset[str]:
        """The pod's extended resources a DeviceClass serves (DRAExtendedResource)."""
        return served_resources(pod.requests, self._dra.class_of_resource)

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        extended = self._extended(pod)
        if not (pod.raw.get("spec") or {}).get("resourceClaims"):
            if not extended:
                return None, Status(Code.SKIP)
            claims: list[tuple[PodClaim, Claim]] = []
            bindings: dict[str, dict[str, str]] = {}
        else:
            claims, status = self._resolve(pod)
            if not status.ok:
                return None, status
            bindings, status = self._bindings(pod, claims)
            if not status.ok:
                return None, status
        allocated: list[Claim] = []
        pending: list[tuple[Claim, InFlight]] = []
        unallocated: list[Claim] = []
        unready: list[Claim] = []
        for _, claim in claims:
            key = claim.key
            if self._dra.deallocating(key):
                return None, unschedulable(f"resource claim {key} is being deallocated", resolvable=False)
            if claim.allocation is not None:
                allocated.append(claim)
                if self._dra.binding_conditions and (
                    binding_failure(claim)
                    or (not ready_for_binding(claim) and binding_timed_out(claim, self._binding_timeout, self._wall()))
                ):
                    # Its devices failed to bind, or never did in time: no node will do, and PostFilter
                    # deallocates it so the next attempt gets other devices (kube's unavailableClaims).
                    unready.append(claim)
                continue
            in_flight = self._dra.in_flight.get(key)
            if in_flight is not None and not self._dra.holds(key, pod.key):
                if in_flight.group is not None and in_flight.group == self._group_of(pod):
                    # Another pod of the same PodGroup reserved it: share the allocation before it is written.
                    pending.append((claim, in_flight))
                    continue
                return None, unschedulable(
                    f"resource claim {key} is in the process of being allocated", resolvable=False
                )
            for request in claim.requests:
                for sub in request.alternatives:
                    if sub.class_name not in self._dra.classes:
                        broken = self._dra.broken.get(f"class/{sub.class_name}")
                        return None, unschedulable(
                            broken or f"request {request.name}: device class {sub.class_name} does not exist",
                            resolvable=False,
                        )
            unallocated.append(claim)
        if not claims and not extended:
            return None, Status(Code.SKIP)
        inventory = self._current_inventory()
        state.write(
            STATE_KEY,
            _CycleData(
                claims,
                bindings,
                allocated,
                pending,
                unallocated,
                inventory,
                self._plan(unallocated),
                # A dict copy keeps the keys' hashes: no device id is hashed again.
                dict(self._dra.in_use()) if unallocated or extended else {},
                self._dra.use_version,
                shared=dict(self._dra.shared_use()) if unallocated or extended else {},
                shared_pools=frozenset(self._dra.shared_pools()) if unallocated or extended else frozenset(),
                extended=extended,
                stale=self._dra.extended_claim(pod.uid) if extended else None,
                unready=unready,
            ),
        )
        return None, SUCCESS

    def _plan_on(self, data: _CycleData, pod: PodInfo, node: NodeInfo) -> tuple[ClaimsPlan, _ExtendedPlan | None]:
        """The plan of the pod's unallocated claims on ``node``: with its extended-resource claim for the
        resources the node's allocatable lacks (kube-scheduler's filterExtendedResources)."""
        if not data.extended:
            return data.plan, None
        allocatable = node.allocatable
        leftover = frozenset(r for r in data.extended if not allocatable.get(r, 0))
        if not leftover:
            return data.plan, None  # a device plugin serves them all here: NodeResourcesFit's to check
        extended = data.extended_plans.get(leftover)
        if extended is None:
            requests, mappings = extended_requests(pod.raw, leftover, self._dra.class_of_resource)
            claim = parse_claim(claim_object(pod.raw, requests))
            plan = self._plan([*data.unallocated, claim])
            extended = data.extended_plans[leftover] = _ExtendedPlan(claim, tuple(mappings), plan)
        return extended.plan, extended

    def _plan(self, claims: Sequence[Claim]) -> ClaimsPlan:
        dra = self._dra
        return plan_claims(
            claims,
            dra.classes,
            memo=self._matches,
            consumable=dra.consumable,
            fractional=dra.fractional,
            list_attributes=dra.list_attributes,
        )

    def _group_of(self, pod: PodInfo) -> PodGroupKey | None:
        """The pod's PodGroup when gangs are on (its pods may share an allocation in flight), else None."""
        return pod.group_key if self._groups.enabled else None

    def _current_inventory(self) -> Inventory:
        inventory = self._dra.inventory()
        if inventory is not self._inventory:
            self._inventory = inventory
            self._matches.clear()
        return inventory

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return SUCCESS
        if data.stale is not None:
            return _STALE
        rejected = self._pinned_elsewhere(data, node)
        if rejected is None:
            plan, extended = self._plan_on(data, pod, node)
            if plan.claims:
                rejected = self._allocate_on(data, plan, node, None, self._use_versions(data))
                if rejected is None and extended is not None:
                    data.extended_on[node.name] = extended
        return SUCCESS if rejected is None else rejected

    def filter_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[Status | None]:
        """``filter`` for many nodes; a node surely short of devices, or served from memory, is not searched."""
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return [None] * len(nodes)
        if data.stale is not None:
            return [_STALE] * len(nodes)
        if not data.unallocated and not data.extended:
            return [self._pinned_elsewhere(data, node) for node in nodes]
        inventory = data.inventory
        in_use = data.in_use
        versions = self._use_versions(data)
        outcomes = data.outcomes
        fixed = None if data.extended else (data.plan, None)
        results: list[Status | None] = []
        for node in nodes:
            rejected = self._pinned_elsewhere(data, node) if data.pinned else None
            if rejected is None:
                plan, extended = fixed or self._plan_on(data, pod, node)
                if not plan.claims:
                    results.append(None)
                    continue
                if extended is not None:
                    data.extended_on[node.name] = extended  # read only where the node passes
                # What memory tells holds for the live in-use versions: only if nothing changed since PreFilter.
                known = versions if plan.plain or plan.checkable else None
                pools = None
                if known is not None:
                    try:
                        pools = inventory.visible_pools(node.name, node.labels)
                    except SelectorError:
                        pass  # the search reports it
                    else:
                        if plan.plain:
                            outcome = remembered_outcome(plan, pools, known, data.shared_pools, node_name=node.name)
                            if outcome is not None:
                                if outcome.ok:
                                    outcomes[node.name] = outcome
                                results.append(None if outcome.ok else _rejection(outcome, node))
                                continue
                        elif surely_unsatisfiable(plan, pools, in_use, known, data.shared_pools):
                            results.append(_CANNOT_ALLOCATE)
                            continue
                rejected = self._allocate_on(data, plan, node, pools, versions)
            results.append(rejected)
        return results

    def _use_versions(self, data: _CycleData) -> Mapping[tuple[str, str], int] | None:
        """The pools' in-use versions ``data.in_use`` was copied at, if nothing changed since PreFilter (else None).

        Counts and first free devices kept per pool and version hold for these only.
        """
        return self._dra.pool_use_versions if data.use_version == self._dra.use_version else None

    def _pinned_elsewhere(self, data: _CycleData, node: NodeInfo) -> Status | None:
        """Why an allocated claim (or one whose allocation is in flight) keeps the pod off the node, or None."""
        if data.unready:
            data.unavailable.update(claim.key for claim in data.unready)
            return unschedulable("resourceclaim not available on the node", resolvable=False)
        for claim, selector in data.pinned:
            try:
                available = node_selector_matches(selector, node.labels, node.name)
            except SelectorError as exc:
                return unschedulable(
                    f"resourceclaim {claim.name}: invalid allocation.nodeSelector: {exc}", resolvable=False
                )
            if not available:
                data.unavailable.add(claim.key)
                return unschedulable("resourceclaim not available on the node", resolvable=False)
        return None

    def _allocate_on(
        self,
        data: _CycleData,
        plan: ClaimsPlan,
        node: NodeInfo,
        pools: Sequence[VisiblePool] | None,
        use_versions: Mapping[tuple[str, str], int] | None,
    ) -> Status | None:
        """Allocate the claims ``plan`` holds on the node: None (and the outcome kept) or why not."""
        outcome = allocate(
            plan,
            node_name=node.name,
            node_labels=node.labels,
            inventory=data.inventory,
            in_use=data.in_use,
            evaluate=self._dra.selectors,
            timeout=self._filter_timeout if self._filter_timeout > 0 else None,
            now=self._now,
            pools=pools,
            use_versions=use_versions,
            shared=data.shared,
            shared_pools=data.shared_pools,
        )
        if outcome.ok:
            data.outcomes[node.name] = outcome
            return None
        return _rejection(outcome, node)

    # ------------------------------------------------------------------ PreScore / Score (DRAPrioritizedList)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Skip unless a claim of the pod has ``firstAvailable`` alternatives: every node would score 0 (kube
        scores them all 0, which adds nothing either)."""
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None or not any(r.first_available for _, c in data.claims for r in c.requests):
            return Status(Code.SKIP)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        """kube-scheduler's Score: per ``firstAvailable`` request, ``8 - i`` for the ``i``-th alternative the
        node's allocation picked, over the pod's claims (allocated ones by their allocation). A node Filter
        allocated nothing on scores 0."""
        data: _CycleData | None = state.get(STATE_KEY)
        outcome = data.outcomes.get(node.name) if data is not None else None
        if data is None or outcome is None:
            return 0, SUCCESS
        pending = {claim.key: in_flight.allocation.results for claim, in_flight in data.pending}
        total = 0
        for _, claim in data.claims:
            if not any(r.first_available for r in claim.requests):
                continue
            if claim.key in pending:
                results: Sequence[Mapping[str, Any]] = pending[claim.key]
            elif claim.allocation is not None:
                results = (claim.allocation.get("devices") or {}).get("results") or ()
            else:
                allocation = outcome.allocations.get(claim.uid)
                results = allocation.results if allocation is not None else ()
            picked = {str(r.get("request")) for r in results}
            for request in claim.requests:
                for i, sub in enumerate(request.first_available):
                    if f"{request.name}/{sub.name}" in picked:
                        total += FIRST_AVAILABLE_MAX - i
        return total, SUCCESS

    # ------------------------------------------------------------------ Reserve / Unreserve

    def reserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return SUCCESS
        for claim, _ in data.pending:
            if not self._dra.share_in_flight(claim.key, pod.key):
                return unschedulable(
                    f"resource claim {claim.key} is in the process of being allocated", resolvable=False
                )
        extended = data.extended_on.get(node)
        if not data.unallocated and extended is None:
            return SUCCESS
        outcome = data.outcomes.get(node)
        if outcome is None:
            return error(f"no allocation computed for node {node}")
        group = self._group_of(pod)
        for claim in data.unallocated:
            allocation = outcome.allocations[claim.uid]
            self._dra.add_in_flight(
                claim.key,
                InFlight(pod.key, claim.uid, allocation, allocation.devices(), group, allocation.shares),
            )
        if extended is not None:
            claim = extended.claim
            allocation = outcome.allocations[claim.uid]
            self._dra.add_in_flight(
                claim.key, InFlight(pod.key, claim.uid, allocation, allocation.devices(), shares=allocation.shares)
            )
            data.extended_chosen = extended
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node: NodeName) -> None:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return
        for claim in [*data.unallocated, *(claim for claim, _ in data.pending)]:
            self._dra.release_in_flight(claim.key, pod.key)
        created = data.extended_created
        if data.extended_chosen is not None:
            self._dra.release_in_flight((created or data.extended_chosen.claim).key, pod.key)
            data.extended_chosen = None
        for key in data.reserved:
            reserved = self._dra.claim(key)
            if reserved is not None and (created is None or key != created.key):
                self._writer.remove_reservation(reserved.namespace, reserved.name, reserved.uid, pod.uid)
        data.reserved.clear()
        if created is not None:
            # Made for this attempt only: kube-scheduler's unreserveExtendedResourceClaim deletes it.
            self._writer.delete_claim(created.namespace, created.name, created.uid)
            data.extended_created = None

    # ------------------------------------------------------------------ PreBind

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        data: _CycleData | None = state.get(STATE_KEY)
        if data is None:
            return SUCCESS
        data.searched()
        keys = [claim_key(claim.namespace, claim.name) for _, claim in data.claims]
        for key in keys:
            status = await self._reserve_for(pod, key, data)
            if not status.ok:
                return status
        if data.extended_chosen is not None:
            status = await self._bind_extended(pod, data.extended_chosen, data)
            if not status.ok:
                return status
            if data.extended_created is not None:
                keys.append(data.extended_created.key)
        if not self._dra.binding_conditions:
            return SUCCESS
        return await self._wait_for_binding_conditions(keys)

    async def _wait_for_binding_conditions(self, keys: Sequence[str]) -> Status:
        """Wait until every binding condition of the claims' devices is true in their ``status.devices``, as kube's
        PreBind does (it polls its claim cache every 5 s; here each claim change wakes the wait). A failure
        condition or the binding timeout is an error: the pod goes back to the queue, and its next attempt finds
        the claim unavailable, so PostFilter deallocates it."""
        claims = [c for c in (self._dra.claim(k) for k in keys) if c is not None]
        if not any(has_binding_conditions(c) for c in claims):
            return SUCCESS
        deadline = self._now() + self._binding_timeout
        while True:
            waiting = ""
            for key in keys:
                claim = self._dra.claim(key)
                if claim is None:
                    return error(f"resourceclaim {key} was deleted while waiting for its binding conditions")
                failure = binding_failure(claim)
                if failure:
                    return error(f"{failure} ({pending_conditions(claim)})")
                if not ready_for_binding(claim):
                    if binding_timed_out(claim, self._binding_timeout, self._wall()):
                        return error(f"{BINDING_TIMEOUT}: claim={claim.name} ({pending_conditions(claim)})")
                    waiting = waiting or pending_conditions(claim)
            if not waiting:
                return SUCCESS
            left = deadline - self._now()
            if left <= 0 or not await self._writer.changed(left):
                return error(f"{BINDING_TIMEOUT}: context deadline exceeded ({waiting})")

    async def _bind_extended(self, pod: PodInfo, extended: _ExtendedPlan, data: _CycleData) -> Status:
        """Create the pod's extended-resource claim (with the delete-protection finalizer), write its allocation
        and reservation as any other's, then record it in the pod's ``status.extendedResourceClaimStatus``
        (kube-scheduler's bindClaim and patchPodExtendedResourceClaimStatus)."""
        claim = data.extended_created
        if claim is None:
            raw = copy.deepcopy(dict(extended.claim.raw))
            meta = raw["metadata"]
            del meta["name"], meta["uid"]
            meta["finalizers"] = [FINALIZER]
            created = await self._writer.create(raw)
            if not created.ok:
                return error(f"creating the claim for the pod's extended resources: {created.message}")
            claim = data.extended_created = self._dra.assume(created.body)
            self._dra.move_in_flight(extended.claim.key, claim.key)
            data.bindings = {**data.bindings, claim.key: {"resource": "pods", "name": pod.name, "uid": pod.uid}}
        status = await self._reserve_for(pod, claim.key, data)
        if not status.ok:
            return status
        written = await self._writer.set_extended_claim_status(
            pod.namespace,
            pod.name,
            pod.uid,
            {"requestMappings": [m.to_api() for m in extended.mappings], "resourceClaimName": claim.name},
        )
        if not written.ok:
            return error(f"recording the extended resource claim {claim.name} in the pod's status: {written.message}")
        return SUCCESS

    async def _reserve_for(self, pod: PodInfo, key: str, data: _CycleData) -> Status:
        namespace, name = key.split("/", 1)
        binding = data.bindings[key]
        current = self._dra.claim(key)
        for _ in range(MAX_WRITE_ATTEMPTS):
            if current is None:
                return unschedulable(f'resourceclaim "{name}" was deleted while the pod was being bound')
            if binding["uid"] in current.reserved_for:
                self._done(key, pod, binding, data)
                return SUCCESS
            if current.deleting:
                return unschedulable(f'resourceclaim "{name}" is being deleted')
            raw = copy.deepcopy(dict(current.raw))
            in_flight = self._dra.in_flight.get(key) if self._dra.holds(key, pod.key) else None
            if in_flight is not None and current.allocation is not None:
                if not _same_allocation(current.allocation, in_flight.allocation):
                    return unschedulable(f"resource claim {key} got allocated elsewhere in the meantime")
                # Another pod of its PodGroup wrote the allocation they share: only the reservation is left.
            elif in_flight is not None:
                finalizers = raw.setdefault("metadata", {}).setdefault("finalizers", [])
                if FINALIZER not in finalizers:
                    finalizers.append(FINALIZER)
                    written = await self._writer.update(raw)
                    if written.conflict:
                        current = await self._reread(namespace, name)
                        continue
                    if not written.ok:
                        return error(f"adding the finalizer to resourceclaim {key}: {written.message}")
                    raw = copy.deepcopy(dict(written.body))
                raw.setdefault("status", {})["allocation"] = in_flight.allocation.status_allocation()
            elif current.allocation is None:
                return unschedulable(f"resource claim {key} is no longer allocated")
            status = raw.setdefault("status", {})
            status["reservedFor"] = [*(status.get("reservedFor") or []), dict(binding)]
            allocation = status.get("allocation")
            if self._dra.binding_conditions and allocation and not allocation.get("allocationTimestamp"):
                # When the binding timeout starts, for this scheduler and any other (kube's bindClaim sets it).
                allocation["allocationTimestamp"] = _rfc3339(self._wall())
            written = await self._writer.update_status(raw)
            if written.conflict:
                current = await self._reread(namespace, name)
                continue
            if not written.ok:
                return error(f"reserving resourceclaim {key} for the pod: {written.message}")
            self._dra.assume(written.body)
            self._done(key, pod, binding, data)
            return SUCCESS
        return error(f"resourceclaim {key} kept changing: gave up after {MAX_WRITE_ATTEMPTS} conflicts")

    async def _reread(self, namespace: str, name: str) -> Claim | None:
        read = await self._writer.get(namespace, name)
        if not read.ok:
            return None
        return self._dra.assume(read.body)

    def _done(self, key: str, pod: PodInfo, binding: Mapping[str, str], data: _CycleData) -> None:
        if self._dra.holds(key, pod.key):
            self._dra.remove_in_flight(key)  # written: the claim's allocation takes its devices from now on
        if binding["uid"] == pod.uid:
            data.reserved.append(key)  # a PodGroup's reservation outlives the pod's binding (others share it)

    # ------------------------------------------------------------------ PostFilter, PodGroupPostFilter

    def post_filter(
        self,
        state: CycleState,
        pod: PodInfo,
        statuses: Mapping[str, Status],
        nodes: Sequence[NodeInfo],
        filters: FilterRunner,
    ) -> PostFilterResult:
        """No node fits: give back one allocated claim of the pod's that kept it off a node and that nobody
        else holds, so the next attempt may allocate it anew (kube-scheduler's PostFilter; it runs before
        DefaultPreemption: better an idle claim deallocated than a pod evicted)."""
        data: _CycleData | None = state.get(STATE_KEY)
        message = ""
        if data is not None and data.stale is not None:
            stale = data.stale
            self._writer.delete_claim(stale.namespace, stale.name, stale.uid)
            message = f"deletion of ResourceClaim {stale.key} requested"
        elif data is not None:
            message = self._deallocate_unavailable(data, pod.uid)
            if not message and data.unallocated:
                message = self._taints_in_the_way(data.unallocated)
        return PostFilterResult(Status(Code.UNSCHEDULABLE, (message,) if message else ()))

    def _taints_in_the_way(self, claims: Sequence[Claim]) -> str:
        """Which taints keep the claims' requests from devices they select (usher's addition to FailedScheduling:
        kube-scheduler says only "cannot allocate all claims"), or ""."""
        dra = self._dra
        if not dra.device_taints:
            return ""
        found = kept_off_by_taints(claims, dra.slices.values(), dra.classes, dra.selectors, limit=3)
        if not found:
            return ""
        listed = "; ".join(
            f"claim {f['claim']} request {f['request']}: device {f['device']} has taint {f['taint']}" for f in found
        )
        return f"untolerated device taints: {listed}"

    def pod_group_post_filter(self, group: PodGroup, members: Sequence[tuple[PodInfo, CycleState]]) -> Status:
        """A pod group that placed nobody (kube-scheduler's PodGroupPostFilter): first each member's own
        PostFilter; then, if some member had nothing to give back and none of the group's pods is scheduled,
        one allocated claim that kept a member off a node and is held by nobody or this group only is
        deallocated, or else the group's reservation of its own claims is removed (a claim held by nobody
        is deallocated on a later attempt that finds it in the way). Not for topology placements."""
        if self._groups.topology and group.topology_key:
            return Status(Code.UNSCHEDULABLE)
        done: list[str] = []
        unreserve = False
        for pod, state in members:
            data: _CycleData | None = state.get(STATE_KEY)
            if data is None:
                continue
            message = self._deallocate_unavailable(data, pod.uid)
            if message:
                done.append(message)
            else:
                unreserve = True
        if unreserve and self._dra.workload_claims and members:
            message = self._release_group_claims(group, members)
            if message:
                done.append(message)
        return Status(Code.UNSCHEDULABLE, tuple(done))

    def _deallocate_unavailable(self, data: _CycleData, holder: str) -> str:
        """Deallocate one claim that kept the pod off a node and is reserved for nobody or for ``holder``
        only (the pod's or its group's uid); what was done, "" if nothing."""
        for key in sorted(data.unavailable):
            claim = self._dra.claim(key)
            if claim is None or claim.allocation is None or self._dra.deallocating(key):
                continue
            if not claim.reserved_for or claim.reserved_for == (holder,):
                self._deallocate(claim)
                return f"deallocation of ResourceClaim {key} requested"
        return ""

    def _release_group_claims(self, group: PodGroup, members: Sequence[tuple[PodInfo, CycleState]]) -> str:
        members_state = self._groups.get(group.key)
        if members_state is not None and members_state.scheduled_count > 0:
            return ""  # its scheduled pods use the claims
        for _, state in members:
            data: _CycleData | None = state.get(STATE_KEY)
            if data is not None:
                message = self._deallocate_unavailable(data, group.uid)
                if message:
                    return message
        for group_claim in group.claims:
            name = group.resolved_claim(group_claim)
            claim = self._dra.claim(claim_key(group.namespace, name)) if name else None
            if claim is None or claim.allocation is None or group.uid not in claim.reserved_for:
                continue
            if group_claim.template_name is not None and claim.owner_group != group.name:
                continue
            self._writer.remove_reservation(claim.namespace, claim.name, claim.uid, group.uid)
            return f"ResourceClaim {claim.key} unreserved for PodGroup {group.key}"
        return ""

    def _deallocate(self, claim: Claim) -> None:
        """Ask for the claim's deallocation; until the outcome is seen, no pod may use or allocate it."""
        key, version = claim.key, claim.resource_version
        self._dra.start_deallocating(claim)
        self._writer.deallocate(
            claim.namespace, claim.name, claim.uid, version, lambda: self._dra.deallocation_failed(key, version)
        )

    # ------------------------------------------------------------------ events

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        claim_changes = ActionType.ADD | ActionType.UPDATE | ActionType.DELETE
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.RESOURCE_CLAIM, claim_changes),
                hint=self._claim_hint,
                pre_hint=self._claim_pre_hint,
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.POD, ActionType.UPDATE_POD_GENERATED_RESOURCE_CLAIM), hint=this_pod_changed
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.DEVICE_CLASS, ActionType.ADD | ActionType.UPDATE), hint=self._class_hint
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.RESOURCE_SLICE, ActionType.ADD | ActionType.UPDATE), hint=self._uses_devices
            ),
            ClusterEventWithHint(
                ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL), hint=self._uses_devices
            ),
        ]

    def _claim_pre_hint(self, old: Any, new: Any) -> PreQueueingHintResult:
        if _deallocated(old, new):
            return ALL_PODS  # freed devices may help any pod waiting for one
        if _nothing_to_wait_for(old, new):
            return only()
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        return only(*self._dra.index.pods_for(claim_key(str(meta.get("namespace")), str(meta.get("name")))))

    def _claim_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """kube-scheduler's isSchedulableAfterClaimChange: a deallocation helps anyone; otherwise only a claim
        of the pod's that was created or whose status changed (not, say, its finalizer added)."""
        if _deallocated(old, new):
            return QueueingHint.QUEUE
        if _nothing_to_wait_for(old, new):
            return QueueingHint.QUEUE_SKIP
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        if meta.get("namespace") != pod.namespace:
            return QueueingHint.QUEUE_SKIP
        # The same names the claim -> pods index (the PreQueueingHint) follows.
        wanted = referenced_claim_names(pod.raw)
        return QueueingHint.QUEUE if meta.get("name") in wanted else QueueingHint.QUEUE_SKIP

    def _uses_devices(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Whether the pod waits for devices at all: it has claims, or extended resources a class serves."""
        if (pod.raw.get("spec") or {}).get("resourceClaims") or self._extended(pod):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP

    def _class_hint(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        name = ((new or old or {}).get("metadata") or {}).get("name")
        served = self._dra.class_of_resource
        if any(served.get(resource) == name for resource in self._extended(pod)):
            return QueueingHint.QUEUE
        for pod_claim in resolve_pod_claims(pod.raw).claims:
            claim = self._dra.claim(claim_key(pod.namespace, pod_claim.claim_name))
            if claim is None:
                continue
            for request in claim.requests:
                if any(s.class_name == name for s in request.alternatives):
                    return QueueingHint.QUEUE
        return QueueingHint.QUEUE_SKIP


def _same_allocation(written: Mapping[str, Any], chosen: Allocation) -> bool:
    """Whether the claim's ``status.allocation`` is the in-flight one (another sharer wrote it): the same
    devices for the same requests (adminAccess ones too) and the same node selector."""

    def results(allocation: Mapping[str, Any]) -> set[tuple[Any, ...]]:
        return {
            (r.get("request"), r.get("driver"), r.get("pool"), r.get("device"), bool(r.get("adminAccess")))
            for r in (allocation.get("devices") or {}).get("results") or []
        }

    mine = chosen.status_allocation()
    return results(written) == results(mine) and written.get("nodeSelector") == mine.get("nodeSelector")


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _deallocated(old: Any, new: Any) -> bool:
    """An allocation went away: cleared, or the allocated claim deleted."""
    was = bool(((old or {}).get("status") or {}).get("allocation"))
    now = bool(((new or {}).get("status") or {}).get("allocation")) if new is not None else False
    return was and not now


def _nothing_to_wait_for(old: Any, new: Any) -> bool:
    """A claim deleted without an allocation, or changed with its status as before (kube-scheduler's
    QueueSkip for both: what a waiting pod needs is the claim created, allocated or reserved)."""
    if new is None:
        return not ((old or {}).get("status") or {}).get("allocation")
    return old is not None and (old.get("status") or {}) == (new.get("status") or {})


def new(args: Mapping[str, Any], handle: Any) -> DynamicResources:
    parsed = parse_args(args, binding_conditions=handle.dra.binding_conditions)
    return DynamicResources(handle, filter_timeout=parsed.filter_timeout, binding_timeout=parsed.binding_timeout)


_check_pre_enqueue: type[PreEnqueuePlugin] = DynamicResources
_check_pre_filter: type[PreFilterPlugin] = DynamicResources
_check_filter: type[FilterPlugin] = DynamicResources
_check_batch_filter: type[BatchFilterPlugin] = DynamicResources
_check_reserve: type[ReservePlugin] = DynamicResources
_check_pre_bind: type[PreBindPlugin] = DynamicResources
_check_pod_group_post_filter: type[PodGroupPostFilterPlugin] = DynamicResources
_check_post_filter: type[PostFilterPlugin] = DynamicResources
