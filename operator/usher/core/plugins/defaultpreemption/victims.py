"""Which pods to evict on one node, and which node's eviction costs least. Pure.

kube-scheduler's ``SelectVictimsOnNode`` and ``pickOneNodeForPreemption``:

- a victim is what is evicted as one (kube's Victim): a pod, or every
  scheduled pod of a PodGroup whose ``disruptionMode`` is All, wherever they
  run (``units`` builds them for a node's pods); its priority is its
  PodGroup's, else the pod's;
- every victim of lower priority than the preemptor is a potential one; if
  the preemptor does not fit once all of them are gone (nominated pods of
  its priority or higher counted), the node is no candidate; a victim's pods
  on other nodes leave only the cycle state's counts (PodTopologySpread's,
  InterPodAffinity's), not those nodes, whose Filter is not run;
- the potential victims, most important first (higher priority; a PodGroup's
  before a lone pod's; the larger group; the earlier start), are split into
  those whose eviction would break a PodDisruptionBudget (any of its pods
  does) and the rest; each is then given back ("reprieved") if the preemptor
  still fits with it, budget-breaking ones first, so as few budgets as
  possible break and the most important victims stay;
- of the candidate nodes, the one with the fewest budget violations wins,
  then the lowest highest victim priority, the lowest sum of priorities,
  the fewest victims, and the latest start among its highest-priority
  victims; the first of any remaining tie.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from usher.core.cache import DisruptionBudget, NodeInfo
from usher.core.podgroups import PodGroupStates
from usher.core.types import Code, NodeName, PodGroupKey, PodInfo, PodKey, Status

NO_VICTIMS = "No preemption victims found for incoming pod"
MAX_INT32 = 2**31 - 1


class Trial(Protocol):
    """A copy of one node (with a clone of the cycle state) to remove and add pods on, and the
    preemptor's Filter on it: None if it fits, else the rejection. A pod of another node changes
    only the cycle state."""

    def remove(self, pod: PodInfo) -> None: ...

    def add(self, pod: PodInfo) -> None: ...

    def fits(self) -> Status | None: ...

    def fits_again(self) -> bool:
        """``fits() is None`` after a victim was given back to a node the pod fitted without it."""
        ...


Budgets = Callable[[str], Sequence[DisruptionBudget]]
"""A namespace's PodDisruptionBudgets."""


POD_RANK = 1
GROUP_RANK = 2
"""kube's victimRank: a victim of a PodGroup outranks a lone pod's (GenericWorkload on)."""


@dataclass(frozen=True, slots=True)
class Victim:
    """What preemption evicts as one: a pod, or every scheduled pod of a PodGroup disrupted together."""

    pods: tuple[PodInfo, ...]
    priority: int
    rank: int = POD_RANK

    @classmethod
    def single(cls, pod: PodInfo) -> Victim:
        return cls((pod,), pod.priority)

    @property
    def start(self) -> tuple[int, str]:
        return min(start_key(p) for p in self.pods)


Units = Callable[[NodeInfo], Sequence[Victim]]
"""The victims a node's pods belong to, each once."""


def single_pods(node: NodeInfo) -> list[Victim]:
    """Each pod its own victim (GenericWorkload off: pod groups are not known)."""
    return [Victim.single(pod) for pod in node.pods.values()]


def group_units(groups: PodGroupStates, node_of_pod: Callable[[PodKey], NodeInfo | None]) -> Units:
    """Victims as kube-scheduler builds them with pod groups known (getCrossNodesVictims): a pod of a
    PodGroup disrupted together brings every bound or assumed pod of its group, wherever it runs;
    a pod of a group counts at the group's priority."""

    def members(key: PodGroupKey, pod: PodInfo) -> tuple[PodInfo, ...]:
        state = groups.get(key)
        found: list[PodInfo] = []
        for member in state.scheduled_keys() if state is not None else ():
            node = node_of_pod(member)
            counted = node.pods.get(member) if node is not None else None
            if counted is not None:
                found.append(counted)
        return tuple(found) if any(m.key == pod.key for m in found) else (pod,)

    def units(node: NodeInfo) -> list[Victim]:
        out: list[Victim] = []
        seen: set[PodGroupKey] = set()
        for pod in node.pods.values():
            key = pod.group_key
            group = groups.pod_group(key) if key is not None else None
            if key is None or group is None:
                out.append(Victim.single(pod) if key is None else Victim((pod,), pod.priority, GROUP_RANK))
            elif not group.disrupted_together:
                out.append(Victim((pod,), group.priority, GROUP_RANK))
            elif key not in seen:
                seen.add(key)
                out.append(Victim(members(key, pod), group.priority, GROUP_RANK))
        return out

    return units


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` (most important first) are evicted."""

    node: NodeName
    victims: tuple[PodInfo, ...]
    budget_violations: int


def start_key(pod: PodInfo) -> tuple[int, str]:
    """Sortable start time; a pod not started yet counts as starting now, after every started one."""
    return (0, pod.start_time) if pod.start_time else (1, "")


def importance(victim: Victim) -> tuple[int, int, int, tuple[int, str]]:
    """Sort key putting the more important victim first (kube's MoreImportantVictim): higher priority,
    a PodGroup's before a lone pod's, more pods, then the one started earlier."""
    return (-victim.priority, -victim.rank, -len(victim.pods), victim.start)


def split_by_budgets(victims: Sequence[Victim], budgets: Budgets) -> tuple[list[tuple[Victim, int]], list[Victim]]:
    """(victims whose eviction breaks a budget, each with its count of budget-breaking pods; the others).

    A budget's ``disruptionsAllowed`` is spent by each pod it selects, in
    order; a pod that finds one overspent breaks it, and so does the victim it
    belongs to, as a whole. Pods the budget already counts as disrupted spend
    nothing. Pods without labels match no budget.
    """
    allowed: dict[tuple[str, str], int] = {}

    def breaks(pod: PodInfo) -> bool:
        if not pod.labels:
            return False
        for budget in budgets(pod.namespace):
            if budget.namespace != pod.namespace or not budget.selects(pod.labels):
                continue
            if pod.name in budget.disrupted_pods:
                continue
            key = (budget.namespace, budget.name)
            left = allowed.get(key, budget.disruptions_allowed) - 1
            allowed[key] = left
            if left < 0:
                return True
        return False

    violating: list[tuple[Victim, int]] = []
    rest: list[Victim] = []
    for victim in victims:
        count = sum(1 for pod in victim.pods if breaks(pod))
        if count:
            violating.append((victim, count))
        else:
            rest.append(victim)
    return violating, rest


def select_victims(
    preemptor: PodInfo,
    node: NodeInfo,
    new_trial: Callable[[], Trial],
    budgets: Budgets,
    units: Units = single_pods,
) -> tuple[Candidate | None, Status | None]:
    """The fewest, least important victims on ``node`` (a candidate), or why preemption cannot help there.

    ``new_trial`` copies the node and the cycle state: called only for a node with possible victims, so
    a node without any (the common case among equal priorities) costs no copy."""
    if not any(p.priority < preemptor.priority for p in node.pods.values()):
        return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_VICTIMS,))
    possible = sorted((v for v in units(node) if v.priority < preemptor.priority), key=importance)
    if not possible:
        return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_VICTIMS,))
    trial = new_trial()
    for victim in possible:
        for pod in victim.pods:
            trial.remove(pod)
    rejection = trial.fits()
    if rejection is not None:
        return None, rejection
    violating, rest = split_by_budgets(possible, budgets)
    evicted: list[Victim] = []

    def reprieve(victim: Victim) -> bool:
        for pod in victim.pods:
            trial.add(pod)
        if trial.fits_again():
            return True
        for pod in victim.pods:
            trial.remove(pod)
        evicted.append(victim)
        return False

    violations = 0
    for victim, count in violating:
        if not reprieve(victim):
            violations += count
    for victim in rest:
        reprieve(victim)
    if violating and rest:
        evicted.sort(key=importance)
    if not evicted:  # cannot happen: the pod did not fit with every possible victim there
        return None, Status(Code.ERROR, (f"expected at least one victim pod on node {node.name!r}",))
    return Candidate(node.name, tuple(pod for victim in evicted for pod in victim.pods), violations), None


def pick_one(candidates: Sequence[Candidate]) -> Candidate:
    """The candidate whose eviction costs least (kube-scheduler's score functions, in order)."""
    criteria: tuple[Callable[[Candidate], object], ...] = (
        lambda c: -c.budget_violations,
        lambda c: -c.victims[0].priority,
        lambda c: -sum(p.priority + MAX_INT32 + 1 for p in c.victims),
        lambda c: -len(c.victims),
        _latest_start,
    )
    standing = list(candidates)
    for score in criteria:
        scores = [score(c) for c in standing]
        best = max(scores)  # type: ignore[type-var]
        standing = [c for c, s in zip(standing, scores, strict=True) if s == best]
        if len(standing) == 1:
            break
    return standing[0]


def _latest_start(candidate: Candidate) -> tuple[int, str]:
    """The earliest start among the node's highest-priority victims: the later, the better."""
    top = candidate.victims[0].priority
    return min(start_key(p) for p in candidate.victims if p.priority == top)
