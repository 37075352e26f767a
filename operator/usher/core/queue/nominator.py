"""Nominated pods: where preemption made room for a pod that is not bound yet (kube-scheduler's nominator). Pure.

A pod is nominated when DefaultPreemption chose victims for it (usher records
it at once, before its ``status.nominatedNodeName`` patch comes back) or when
the API server shows an unscheduled pod of ours with a nominatedNodeName.
Filter counts the nominated pods of equal or higher priority on a node
(``Framework.run_filter_nodes``), so a lower-priority pod never takes the room
freed for a preemptor. A pod's nomination ends when it is bound, deleted, or
nominated elsewhere. When it ends anywhere but on its own node (the pod bound
elsewhere, deleted, cleared, moved) the room it held is free again:
``on_release`` is told, and the queue treats it as kube-scheduler treats a
changed or deleted nominatedNodeName (an AssignedPodDelete for pods of lower or
equal priority). kube-scheduler does not do this when a nominated pod is bound
to another node (kubernetes/kubernetes#134859); waiting pods then sit in the
pool until some unrelated event or the 5-minute flush.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from usher.core.types import PodInfo, PodKey


class Nominator:
    """Node -> the pods nominated to it; pod -> its node."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[PodKey, PodInfo]] = {}
        self._node_of: dict[PodKey, str] = {}
        self.on_release: Callable[[PodInfo, str], None] | None = None
        """Told (pod, node) when room held for a pod on a node is freed (set by the queue)."""

    def any(self) -> bool:
        return bool(self._node_of)

    def nominated_pods(self, node: str) -> Sequence[PodInfo]:
        pods = self._by_node.get(node)
        return list(pods.values()) if pods else []

    def nodes(self) -> Collection[str]:
        """The nodes some pod is nominated to (a live view)."""
        return self._by_node.keys()

    def node_of(self, key: PodKey) -> str | None:
        return self._node_of.get(key)

    def nominate(self, pod: PodInfo, node: str) -> None:
        """Record ``pod`` as nominated to ``node`` (replacing any earlier nomination)."""
        self.forget(pod.key, kept_on=node)
        self._by_node.setdefault(node, {})[pod.key] = pod
        self._node_of[pod.key] = node

    def update(self, pod: PodInfo, previous: PodInfo | None = None) -> None:
        """A newer version of an unscheduled pod (kube-scheduler's updateNominatedPod): its API nomination
        wins; one the API removed (``previous`` had it) is dropped; with none before or after, ours stays
        (the patch that writes it may still be in flight)."""
        if pod.nominated_node_name:
            self.nominate(pod, pod.nominated_node_name)
        elif previous is not None and previous.nominated_node_name:
            self.forget(pod.key)
        elif pod.key in self._node_of:
            self.nominate(pod, self._node_of[pod.key])

    def forget(self, key: PodKey, *, kept_on: str | None = None) -> None:
        """The pod was bound, deleted, or no longer ours: no room is held for it. ``kept_on``: the node
        the pod now takes (bound or nominated there); room held on that node is not freed."""
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._by_node[node]
        pod = pods.pop(key)
        if not pods:
            del self._by_node[node]
        if node != kept_on and self.on_release is not None:
            self.on_release(pod, node)
