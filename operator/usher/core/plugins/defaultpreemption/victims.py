"""Which pods to evict on one node, and which node's eviction costs least. Pure.

kube-scheduler's ``SelectVictimsOnNode`` and ``pickOneNodeForPreemption``,
for single pods (gang victims come with PodGroups):

- every pod of lower priority than the preemptor is a potential victim; if
  the preemptor does not fit once all of them are gone (nominated pods of
  its priority or higher counted), the node is no candidate;
- the potential victims, most important first (higher priority, then
  earlier start), are split into those whose eviction would break a
  PodDisruptionBudget and the rest; each is then given back to the node
  ("reprieved") if the preemptor still fits with it, budget-breaking ones
  first, so as few budgets as possible break and the most important pods
  stay;
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
from usher.core.types import Code, NodeName, PodInfo, Status

NO_VICTIMS = "No preemption victims found for incoming pod"
MAX_INT32 = 2**31 - 1


class Trial(Protocol):
    """A copy of one node (with a clone of the cycle state) to remove and add pods on, and the
    preemptor's Filter on it: None if it fits, else the rejection."""

    def remove(self, pod: PodInfo) -> None: ...

    def add(self, pod: PodInfo) -> None: ...

    def fits(self) -> Status | None: ...


Budgets = Callable[[str], Sequence[DisruptionBudget]]
"""A namespace's PodDisruptionBudgets."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` (most important first) are evicted."""

    node: NodeName
    victims: tuple[PodInfo, ...]
    budget_violations: int


def start_key(pod: PodInfo) -> tuple[int, str]:
    """Sortable start time; a pod not started yet counts as starting now, after every started one."""
    return (0, pod.start_time) if pod.start_time else (1, "")


def importance(pod: PodInfo) -> tuple[int, tuple[int, str]]:
    """Sort key putting the more important victim first: higher priority, then the one started earlier."""
    return (-pod.priority, start_key(pod))


def split_by_budgets(victims: Sequence[PodInfo], budgets: Budgets) -> tuple[list[tuple[PodInfo, int]], list[PodInfo]]:
    """(victims whose eviction breaks a budget, each with its count of broken pods, 1; the others).

    A budget's ``disruptionsAllowed`` is spent by each victim it selects, in
    order; a victim that finds one overspent breaks it. Pods the budget
    already counts as disrupted spend nothing. Pods without labels match no
    budget.
    """
    allowed: dict[tuple[str, str], int] = {}
    violating: list[tuple[PodInfo, int]] = []
    rest: list[PodInfo] = []
    for pod in victims:
        breaks = False
        if pod.labels:
            for budget in budgets(pod.namespace):
                if budget.namespace != pod.namespace or not budget.selects(pod.labels):
                    continue
                if pod.name in budget.disrupted_pods:
                    continue
                key = (budget.namespace, budget.name)
                left = allowed.get(key, budget.disruptions_allowed) - 1
                allowed[key] = left
                if left < 0:
                    breaks = True
                    break
        if breaks:
            violating.append((pod, 1))
        else:
            rest.append(pod)
    return violating, rest


def select_victims(
    preemptor: PodInfo, node: NodeInfo, new_trial: Callable[[], Trial], budgets: Budgets
) -> tuple[Candidate | None, Status | None]:
    """The fewest, least important victims on ``node`` (a candidate), or why preemption cannot help there.

    ``new_trial`` copies the node and the cycle state: called only for a node with possible victims, so
    a node without any (the common case among equal priorities) costs no copy."""
    possible = sorted((p for p in node.pods.values() if p.priority < preemptor.priority), key=importance)
    if not possible:
        return None, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (NO_VICTIMS,))
    trial = new_trial()
    for pod in possible:
        trial.remove(pod)
    rejection = trial.fits()
    if rejection is not None:
        return None, rejection
    violating, rest = split_by_budgets(possible, budgets)
    victims: list[PodInfo] = []

    def reprieve(pod: PodInfo) -> bool:
        trial.add(pod)
        if trial.fits() is None:
            return True
        trial.remove(pod)
        victims.append(pod)
        return False

    violations = 0
    for pod, count in violating:
        if not reprieve(pod):
            violations += count
    for pod in rest:
        reprieve(pod)
    if violating and rest:
        victims.sort(key=importance)
    if not victims:  # cannot happen: the pod did not fit with every possible victim there
        return None, Status(Code.ERROR, (f"expected at least one victim pod on node {node.name!r}",))
    return Candidate(node.name, tuple(victims), violations), None


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
