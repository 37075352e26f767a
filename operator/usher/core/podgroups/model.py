"""PodGroups and Workloads (scheduling.k8s.io/v1beta1) as the scheduler reads them. Pure.

A PodGroup is parsed once per watch event. Parsing never raises: a PodGroup
usher cannot read (no policy, both policies, a minCount that is not a
positive integer, a priority that is not an integer) is kept with an
``error``, so the pods it blocks are told why (GangScheduling's PreEnqueue
reports it on each of them) and the scheduler goes on with everything else.
The API server's validation makes such objects rare, not impossible (a newer
API version's field, a hand-edited etcd).

A Workload only matters for ``usher explain``: which template of which
workload a PodGroup was made from, and what controls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.types import PodGroupKey, pod_group_key

INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
"""The PodGroup condition the scheduler owns (scheduling.k8s.io/v1beta1 PodGroupInitiallyScheduled)."""
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"
REASON_SCHEDULED = "Scheduled"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """``spec.workloadRef``: the Workload and the template within it a PodGroup was made from."""

    workload: str
    template: str


@dataclass(frozen=True, slots=True)
class GroupClaim:
    """One entry of ``spec.resourceClaims`` (DRAWorkloadResourceClaims): a claim the group's pods share.

    A pod uses it by naming a claim of its own with the same name and the same reference; such a claim
    is reserved for the PodGroup instead of for each pod.
    """

    name: str
    claim_name: str | None
    """``resourceClaimName``: an existing claim."""
    template_name: str | None
    """``resourceClaimTemplateName``: kube-controller-manager makes one claim for the group from it."""

    def matches(self, entry: Mapping[str, Any]) -> bool:
        """Whether a pod's ``spec.resourceClaims`` entry is this claim (same name, same reference)."""
        return (
            entry.get("name") == self.name
            and entry.get("resourceClaimName") == self.claim_name
            and entry.get("resourceClaimTemplateName") == self.template_name
        )


@dataclass(frozen=True, slots=True)
class PodGroup:
    """One version of a PodGroup: its scheduling policy, priority and the condition usher writes."""

    key: PodGroupKey
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    min_count: int | None
    """The gang policy's ``minCount``; None for the basic policy (each pod on its own, minCount 1 in effect)."""
    priority: int
    """``spec.priority`` (filled in by the Priority admission plugin from ``priorityClassName``), else 0."""
    workload: WorkloadRef | None
    error: str
    """Why usher cannot schedule this PodGroup's pods ("" when it is well-formed)."""
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    disrupted_together: bool = False
    """``spec.disruptionMode.all``: preemption evicts all its scheduled pods or none (else one by one)."""
    topology_key: str = ""
    """``spec.schedulingConstraints.topology[0].key``: all its pods in one domain of that node label."""
    claims: tuple[GroupClaim, ...] = ()
    """``spec.resourceClaims``: claims shared by its pods and reserved for the group."""

    def claim_for(self, entry: Mapping[str, Any]) -> GroupClaim | None:
        """The group's claim a pod's ``spec.resourceClaims`` entry refers to, or None (the pod's own)."""
        for claim in self.claims:
            if claim.matches(entry):
                return claim
        return None

    def generated_claim(self, name: str) -> str | None:
        """The name kube-controller-manager gave the claim made from the template of group claim ``name``
        (``status.resourceClaimStatuses``), or None while it has not."""
        for status in (self.raw.get("status") or {}).get("resourceClaimStatuses") or ():
            if isinstance(status, Mapping) and status.get("name") == name:
                generated = status.get("resourceClaimName")
                return str(generated) if generated else None
        return None

    def resolved_claim(self, claim: GroupClaim) -> str | None:
        """The name of the ResourceClaim a group claim stands for: the one it names, else the one made from its
        template (None while there is none)."""
        return claim.claim_name or self.generated_claim(claim.name)

    @property
    def gang(self) -> bool:
        """All-or-nothing: the gang policy (``minCount`` pods together, or none)."""
        return self.min_count is not None

    @property
    def policy(self) -> str:
        return "gang" if self.gang else "basic"

    @property
    def quorum(self) -> int:
        """How many pods must be scheduled together: ``minCount``, 1 for the basic policy."""
        return self.min_count if self.min_count is not None else 1

    @property
    def problem(self) -> str:
        """Why its pods cannot be scheduled as it stands ("" when they can): what they are told."""
        return f"PodGroup {self.key} cannot be scheduled: {self.error}" if self.error else ""

    def condition(self, kind: str = INITIALLY_SCHEDULED) -> Mapping[str, Any] | None:
        for condition in (self.raw.get("status") or {}).get("conditions") or ():
            if isinstance(condition, Mapping) and condition.get("type") == kind:
                return condition
        return None

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> PodGroup:
        """Parse a PodGroup as served by the API server; never raises (see the module docstring)."""
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        min_count, error = _policy(spec.get("schedulingPolicy"))
        priority = spec.get("priority")
        if priority is None:
            priority = 0
        elif isinstance(priority, bool) or not isinstance(priority, int):
            error = error or f"spec.priority: must be an integer, got {priority!r}"
            priority = 0
        ref = spec.get("workloadRef")
        workload = (
            WorkloadRef(str(ref.get("workloadName") or ""), str(ref.get("templateName") or ""))
            if isinstance(ref, Mapping)
            else None
        )
        generation = meta.get("generation")
        return cls(
            key=pod_group_key(namespace, name),
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
            min_count=min_count,
            priority=priority,
            workload=workload,
            error=error,
            raw=raw,
            disrupted_together=isinstance(mode := spec.get("disruptionMode"), Mapping) and mode.get("all") is not None,
            topology_key=_topology_key(spec.get("schedulingConstraints")),
            claims=_group_claims(spec.get("resourceClaims")),
        )


def _group_claims(entries: Any) -> tuple[GroupClaim, ...]:
    if not isinstance(entries, list):
        return ()
    return tuple(
        GroupClaim(
            str(entry.get("name") or ""),
            str(entry["resourceClaimName"]) if entry.get("resourceClaimName") else None,
            str(entry["resourceClaimTemplateName"]) if entry.get("resourceClaimTemplateName") else None,
        )
        for entry in entries
        if isinstance(entry, Mapping)
    )


def _topology_key(constraints: Any) -> str:
    """The first topology constraint's key, as kube-scheduler's TopologyPlacementGenerator reads it."""
    topology = constraints.get("topology") if isinstance(constraints, Mapping) else None
    first = topology[0] if isinstance(topology, list) and topology else None
    key = first.get("key") if isinstance(first, Mapping) else None
    return key if isinstance(key, str) else ""


def _policy(policy: Any) -> tuple[int | None, str]:
    """(minCount or None for basic, error)."""
    if not isinstance(policy, Mapping):
        return None, "spec.schedulingPolicy: exactly one of basic and gang must be set, got none"
    basic, gang = policy.get("basic"), policy.get("gang")
    if (basic is None) == (gang is None):
        got = "both" if basic is not None else "none"
        return None, f"spec.schedulingPolicy: exactly one of basic and gang must be set, got {got}"
    if gang is None:
        return None, ""
    min_count = gang.get("minCount") if isinstance(gang, Mapping) else None
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        return 1, f"spec.schedulingPolicy.gang.minCount: must be a positive integer, got {min_count!r}"
    return min_count, ""


@dataclass(frozen=True, slots=True)
class Workload:
    """A Workload as ``usher explain`` shows it: what controls it, and its PodGroup templates' policies."""

    key: PodGroupKey
    """``namespace/name`` (Workloads and PodGroups share the key shape)."""
    controller: str
    """``spec.controllerRef`` as ``group/Kind name`` (``Kind name`` in the core group); "" when unset."""
    templates: Mapping[str, str]
    """Template name -> its policy, as ``gang (minCount 8)`` or ``basic``."""

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Workload:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        ref = spec.get("controllerRef")
        controller = ""
        if isinstance(ref, Mapping):
            kind = f"{ref.get('apiGroup')}/{ref.get('kind')}" if ref.get("apiGroup") else str(ref.get("kind") or "")
            controller = f"{kind} {ref.get('name') or ''}".strip()
        templates: dict[str, str] = {}
        for template in spec.get("podGroupTemplates") or ():
            if not isinstance(template, Mapping):
                continue
            min_count, error = _policy(template.get("schedulingPolicy"))
            policy = "malformed" if error else "basic" if min_count is None else f"gang (minCount {min_count})"
            templates[str(template.get("name") or "")] = policy
        return cls(
            key=pod_group_key(str(meta.get("namespace") or "default"), str(meta.get("name") or "")),
            controller=controller,
            templates=templates,
        )
