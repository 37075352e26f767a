"""What the scheduler knows of each pod group: its PodGroup object and its member pods by state. Pure.

kube-scheduler's podGroupState (backend/cache/podgroupstate.py): a group
exists as soon as a PodGroup object or one member pod is known, and is
forgotten when neither is left. A member is

    unscheduled  an unscheduled pod of one of our profiles (in the queue)
    assumed      placed by usher, its binding on the way
    assigned     bound to a node (by anyone)

and moves between those as the cache assumes, forgets and sees pods bound.
GangScheduling counts members (PreEnqueue: all of them, Permit: assumed and
assigned ones) without walking them: the counts are kept as they change.

Unscheduled pods of other schedulers and pods being deleted are not members,
as in kube-scheduler, which counts only the pods it is responsible for.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.podgroups.model import PodGroup, Workload
from usher.core.types import PodGroupKey, PodInfo, PodKey, pod_group_key


class Member(enum.Enum):
    """Where one member pod of a group stands."""

    UNSCHEDULED = "unscheduled"
    ASSUMED = "assumed"
    ASSIGNED = "assigned"


@dataclass(slots=True)
class GroupState:
    """One pod group: its PodGroup (None until watched) and its members, counted by state."""

    key: PodGroupKey
    pod_group: PodGroup | None = None
    members: dict[PodKey, tuple[str, Member]] = field(default_factory=dict)
    """Pod key -> (uid, state)."""
    counts: dict[Member, int] = field(default_factory=lambda: dict.fromkeys(Member, 0))

    @property
    def all_count(self) -> int:
        """Every member known (kube-scheduler's AllPodsCount): what PreEnqueue compares with minCount."""
        return len(self.members)

    @property
    def scheduled_count(self) -> int:
        """Assumed and assigned members (ScheduledPodsCount): what Permit compares with minCount."""
        return self.counts[Member.ASSUMED] + self.counts[Member.ASSIGNED]

    def keys(self, state: Member) -> list[PodKey]:
        """The members in ``state``, in key order."""
        return sorted(key for key, (_, member) in self.members.items() if member is state)

    def scheduled_keys(self) -> list[PodKey]:
        """The assumed members, then the assigned ones (ScheduledPods), each in key order."""
        return [*self.keys(Member.ASSUMED), *self.keys(Member.ASSIGNED)]

    @property
    def empty(self) -> bool:
        return self.pod_group is None and not self.members


class PodGroupStates:
    """Every pod group usher knows of, keyed ``namespace/name``; the Workloads, for ``usher explain``.

    ``enabled`` is False when gang support is off (the GenericWorkload gate, or an
    API server that does not serve scheduling.k8s.io/v1beta1): nothing is tracked
    and every pod is scheduled on its own, its ``spec.schedulingGroup`` ignored.
    """

    def __init__(self, *, enabled: bool = True, topology: bool = True) -> None:
        self.enabled = enabled
        self.topology = enabled and topology
        """TopologyAwareWorkloadScheduling: a PodGroup's ``schedulingConstraints.topology`` is honoured."""
        self._groups: dict[PodGroupKey, GroupState] = {}
        self._group_of: dict[PodKey, PodGroupKey] = {}
        self._workloads: dict[PodGroupKey, Workload] = {}

    # -- PodGroup objects ------------------------------------------------------

    def on_pod_group(self, deleted: bool, raw: Mapping[str, Any]) -> tuple[PodGroup | None, PodGroup | None]:
        """Apply one watch event of a PodGroup: (old, new) versions, both None when nothing changed."""
        meta = raw.get("metadata") or {}
        key = pod_group_key(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        state = self._groups.get(key)
        old = state.pod_group if state is not None else None
        if deleted:
            if state is None or old is None:
                return None, None
            state.pod_group = None
            self._drop_if_empty(state)
            return old, None
        new = PodGroup.from_api(raw)
        if old is not None and old.uid == new.uid and old.resource_version == new.resource_version:
            return None, None  # a re-delivery of what is held
        if state is None:
            state = self._groups[key] = GroupState(key)
        state.pod_group = new
        return old, new

    def pod_group(self, key: PodGroupKey) -> PodGroup | None:
        state = self._groups.get(key)
        return state.pod_group if state is not None else None

    def get(self, key: PodGroupKey) -> GroupState | None:
        return self._groups.get(key)

    def __iter__(self) -> Iterator[GroupState]:
        return iter(list(self._groups.values()))

    # -- member pods -------------------------------------------------------------

    def track(self, pod: PodInfo, member: Member) -> None:
        """``pod`` is a member of its group in state ``member`` (a no-op for pods of no group)."""
        key = pod.group_key
        if key is None or not self.enabled:
            return
        previous = self._group_of.get(pod.key)
        if previous is not None and previous != key:
            self.drop(pod.key)
        state = self._groups.get(key)
        if state is None:
            state = self._groups[key] = GroupState(key)
        held = state.members.get(pod.key)
        if held is not None:
            state.counts[held[1]] -= 1
        state.members[pod.key] = (pod.uid, member)
        state.counts[member] += 1
        self._group_of[pod.key] = key

    def drop(self, key: PodKey) -> None:
        """The pod is no member any more (deleted, terminal, another scheduler's)."""
        group = self._group_of.pop(key, None)
        if group is None:
            return
        state = self._groups[group]
        held = state.members.pop(key, None)
        if held is not None:
            state.counts[held[1]] -= 1
        self._drop_if_empty(state)

    def member(self, key: PodKey) -> Member | None:
        group = self._group_of.get(key)
        if group is None:
            return None
        held = self._groups[group].members.get(key)
        return held[1] if held is not None else None

    def _drop_if_empty(self, state: GroupState) -> None:
        if state.empty:
            del self._groups[state.key]

    # -- Workloads (for usher explain) -------------------------------------------

    def on_workload(self, deleted: bool, raw: Mapping[str, Any]) -> None:
        workload = Workload.from_api(raw)
        if deleted:
            self._workloads.pop(workload.key, None)
        else:
            self._workloads[workload.key] = workload

    def workload(self, namespace: str, name: str) -> Workload | None:
        return self._workloads.get(pod_group_key(namespace, name))
