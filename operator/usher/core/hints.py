"""What a plugin registers for cluster events, and the hints that decide whether an event can help a pod. Pure.

kube-scheduler's ``ClusterEventWithHint``, ``QueueingHintFn`` and (KEP-6132)
the PreQueueingHint. The queue calls them; plugins declare them in
``events_to_register``. They must be pure and fast: they run on every matching
cluster event.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from usher.core.events import ClusterEvent
from usher.core.types import PodInfo, PodKey, QueueingHint

QueueingHintFn = Callable[[PodInfo, Any, Any], QueueingHint]
"""``(pod, old, new) -> Queue | QueueSkip``: may this event make ``pod`` schedulable?
``old`` is None for an Add, ``new`` is None for a Delete. An exception counts as Queue."""


def this_pod_changed(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The QueueingHint of a plugin that only the pod's own update can help (its scale-down,
    tolerations, generated claims): Queue for this pod's event, skip every other pod's."""
    return QueueingHint.QUEUE if pod.is_same_pod(new) else QueueingHint.QUEUE_SKIP


@dataclass(frozen=True, slots=True)
class PreQueueingHintResult:
    """Which unschedulable pods a cluster event can concern at all (KEP-6132)."""

    all_pods: bool = True
    pods: frozenset[PodKey] = frozenset()


ALL_PODS = PreQueueingHintResult()


def only(*keys: PodKey) -> PreQueueingHintResult:
    """The event concerns these pods and no other."""
    return PreQueueingHintResult(all_pods=False, pods=frozenset(keys))


AlikeFn = Callable[[Any, Any], Callable[[PodInfo], Hashable]]
"""``(old, new) -> (pod -> key)``: called once per event, it gives the key of pods the hint answers alike for
that event (``ClusterEventWithHint.alike``)."""

PreQueueingHintFn = Callable[[Any, Any], PreQueueingHintResult]
"""``(old, new) -> all pods | these pods``; called once per event before the per-pod hints."""


@dataclass(frozen=True, slots=True)
class ClusterEventWithHint:
    """A cluster event a plugin registers, with the hints that decide whether it can help a rejected pod."""

    event: ClusterEvent
    hint: QueueingHintFn | None = None
    pre_hint: PreQueueingHintFn | None = None
    alike: AlikeFn | None = None
    """``(old, new) -> (pod -> key)``: pods with equal keys get the same ``hint`` answer for one event, so the
    queue asks the hint once per key and event (a burst of victim deletions with a thousand preemptors
    waiting costs a thousand cheap keys per deletion, not a thousand hints). Whatever the key needs from the
    event is read once, outside the key function. None: ask for every pod."""
