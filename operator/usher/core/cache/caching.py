"""The cache: nodes, every pod assigned to them (whoever scheduled it), and assumed pods.

Pure. Lifecycle of a pod the scheduler places:

    assume(pod, node)      -- counted on the node at once, before the API call
    add_or_update_pod(pod) -- the watch shows it bound: confirmed, no longer assumed
    remove_pod(key)        -- the watch shows it deleted (or terminal): uncounted
    forget(key)            -- the binding failed: uncounted again

An assumed pod never expires, as in kube-scheduler (v1.37's cache.New takes
no TTL and has no expiry at all): however late the watch is, the pod is
counted on its node until the watch confirms or deletes it. Expiring it while
the watch lags would under-count the node and place one pod too many there.
A deletion missed during a watch gap reaches the cache through the watch
reconciler, never through time.

Pods that are terminal (Succeeded/Failed) free their node's resources, as in
kube-scheduler. Pods of a pod group are also tracked in ``pod_groups`` as
unscheduled, assumed or assigned members: assume, forget, a pod seen bound and
a pod gone move them there too, so GangScheduling's counts follow every step
above. A pod seen on a node the watch has not listed yet is kept on
a placeholder NodeInfo so it is counted once the node appears.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from usher.core.cache.budgets import DisruptionBudget
from usher.core.cache.nodeinfo import Journal, NodeInfo
from usher.core.podgroups import Member, PodGroupStates
from usher.core.types import NodeName, PodInfo, PodKey


class NodeList(list[NodeInfo]):
    """The cycle's nodes, in name order, plus which of them hold pods with (anti-)affinity terms.

    kube-scheduler's snapshot keeps the same two lists (HavePodsWithAffinityList,
    HavePodsWithRequiredAntiAffinityList) so InterPodAffinity's per-cycle work
    is O(nodes with such pods), not O(nodes): with 5000 nodes and no affinity
    anywhere, a cycle no longer walks 5000 nodes to find nothing. The two
    mappings are the cache's own, kept current as pods come and go.
    """

    with_affinity: Mapping[NodeName, NodeInfo]
    with_required_anti_affinity: Mapping[NodeName, NodeInfo]
    claim_refs: Mapping[str, int]
    """``namespace/claim`` -> how many counted pods (on any node, listed or not) use that claim."""
    journal: Journal | None = None
    """The cache's record of which nodes changed, on the cache's own list only (the same list object means
    the same nodes: the cache builds a new one when a node appears or goes)."""

    @property
    def origin(self) -> NodeList:
        """The cache's list these nodes are (all of)."""
        return self

    def includes(self, node: NodeInfo) -> bool:
        """Whether an existing node of ``origin`` is one of these: all are."""
        return True


class NodeSubset(list[NodeInfo]):
    """The nodes of a cache's `NodeList` that ``includes`` picks: a plugin that keeps per-node work
    (`NodeShares`) follows it through the journal, as it follows the whole list."""

    def __init__(self, origin: NodeList, includes: Callable[[NodeInfo], bool], nodes: Iterable[NodeInfo]) -> None:
        super().__init__(nodes)
        self.origin = origin
        self.journal = origin.journal
        self.includes = includes


def _has_affinity_pods(node: NodeInfo) -> bool:
    return node.exists and node.pods_with_affinity > 0


def _has_required_anti_affinity_pods(node: NodeInfo) -> bool:
    return node.exists and node.pods_with_required_anti_affinity > 0


def nodes_with_affinity_pods(nodes: Sequence[NodeInfo]) -> Sequence[NodeInfo]:
    """The nodes of ``nodes`` holding a pod with any affinity or anti-affinity term."""
    if isinstance(nodes, NodeList):
        return NodeSubset(nodes, _has_affinity_pods, (n for n in nodes.with_affinity.values() if n.exists))
    return [node for node in nodes if node.pods_with_affinity > 0]


def nodes_with_required_anti_affinity_pods(nodes: Sequence[NodeInfo]) -> Sequence[NodeInfo]:
    """The nodes of ``nodes`` holding a pod with a required anti-affinity term."""
    if isinstance(nodes, NodeList):
        picked = (n for n in nodes.with_required_anti_affinity.values() if n.exists)
        return NodeSubset(nodes, _has_required_anti_affinity_pods, picked)
    return [node for node in nodes if node.pods_with_required_anti_affinity > 0]


def pod_claim_keys(pod: PodInfo) -> list[str]:
    """``namespace/claimName`` of each ``persistentVolumeClaim`` volume of the pod (kube-scheduler's
    PodPVCKeys: generic ephemeral volumes are not counted)."""
    volumes = (pod.raw.get("spec") or {}).get("volumes")
    if not volumes:
        return []
    return [
        f"{pod.namespace}/{pvc.get('claimName') or ''}"
        for volume in volumes
        if (pvc := volume.get("persistentVolumeClaim")) is not None
    ]


def claims_in_use(nodes: Sequence[NodeInfo]) -> Mapping[str, int]:
    """``namespace/claim`` -> how many pods use it (kube-scheduler's snapshot-wide usedPVCRefCounts, read by
    VolumeRestrictions): the cache's running count for a cycle's NodeList (O(1); pods on nodes the watch
    has not listed count too, as in kube-scheduler's snapshot), else counted over ``nodes``' pods."""
    if isinstance(nodes, NodeList):
        return nodes.claim_refs
    counts: dict[str, int] = {}
    for node in nodes:
        for pod in node.pods.values():
            for key in pod_claim_keys(pod):
                counts[key] = counts.get(key, 0) + 1
    return counts


@dataclass(frozen=True, slots=True)
class SetAside:
    """A pod taken off its node by `Cache.set_aside`."""

    pod: PodInfo
    node: NodeName
    assumed: bool


class Cache:
    """Nodes and the pods counted on them (bound or assumed), as the scheduling cycle sees them. Pure."""

    def __init__(self, *, pod_groups: PodGroupStates | None = None) -> None:
        self.pod_groups = pod_groups if pod_groups is not None else PodGroupStates()
        """Pod groups and their members' states (kube-scheduler's podGroupStates)."""
        self._nodes: dict[NodeName, NodeInfo] = {}
        self._pod_nodes: dict[PodKey, NodeName] = {}
        self._assumed: set[PodKey] = set()
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._namespace_generation = 0
        self._budgets: dict[str, dict[str, DisruptionBudget]] = {}
        self._services: dict[str, dict[str, Mapping[str, str]]] = {}
        self._node_list: NodeList | None = None
        """Existing nodes in name order, rebuilt only when a node appears or goes."""
        self._journal = Journal()
        self._with_affinity: dict[NodeName, NodeInfo] = {}
        self._with_required_anti_affinity: dict[NodeName, NodeInfo] = {}
        self._claim_refs: dict[str, int] = {}
        """``namespace/claim`` -> counted pods using it (kube-scheduler's usedPVCRefCounts)."""
        self._images: dict[str, tuple[int, set[NodeName]]] = {}
        """Image name -> (its size, the nodes whose ``status.images`` name it)."""

    # -- nodes ---------------------------------------------------------------

    def add_or_update_node(self, raw: Mapping[str, Any]) -> NodeInfo:
        name = NodeName(str((raw.get("metadata") or {}).get("name") or ""))
        info = self._nodes.get(name)
        if info is None:
            info = self._nodes[name] = NodeInfo(name=name, journal=self._journal)
        if not info.exists:
            self._node_list = None
        self._forget_images(info)
        info.set_node(raw)
        self._learn_images(info)
        return info

    def remove_node(self, name: str) -> None:
        info = self._nodes.get(NodeName(name))
        if info is None:
            return
        self._node_list = None
        self._forget_images(info)
        if info.pods:
            # Keep counting its pods: they may still be running until deleted.
            info.node_gone()
        else:
            del self._nodes[NodeName(name)]
            self._journal.forget(NodeName(name))

    # -- images (ImageLocality) ------------------------------------------------

    def image(self, name: str) -> tuple[int, int] | None:
        """(size in bytes, how many nodes have it) of an image named in some node's ``status.images``, else None.

        As kube-scheduler's image states: the size is the one the first node to report the name gave, kept while
        any node still has it."""
        state = self._images.get(name)
        return (state[0], len(state[1])) if state is not None else None

    def _forget_images(self, info: NodeInfo) -> None:
        for name in info.images:
            state = self._images.get(name)
            if state is not None:
                state[1].discard(info.name)
                if not state[1]:
                    del self._images[name]

    def _learn_images(self, info: NodeInfo) -> None:
        for name, size in info.images.items():
            state = self._images.get(name)
            if state is None:
                self._images[name] = (size, {info.name})
            else:
                state[1].add(info.name)

    # -- namespaces (for namespaceSelector terms) ------------------------------

    def set_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        if self._namespaces.get(name) != labels:
            self._namespace_generation += 1
        self._namespaces[name] = dict(labels)

    def remove_namespace(self, name: str) -> None:
        if self._namespaces.pop(name, None) is not None:
            self._namespace_generation += 1

    def namespace_generation(self) -> int:
        """Renewed whenever a namespace comes, goes or changes its labels: what is derived from namespace
        labels (namespaceSelector terms) holds while it does."""
        return self._namespace_generation

    def set_disruption_budget(self, budget: DisruptionBudget) -> None:
        self._budgets.setdefault(budget.namespace, {})[budget.name] = budget

    def remove_disruption_budget(self, namespace: str, name: str) -> None:
        budgets = self._budgets.get(namespace)
        if budgets is not None:
            budgets.pop(name, None)
            if not budgets:
                del self._budgets[namespace]

    def disruption_budgets(self, namespace: str) -> list[DisruptionBudget]:
        return list((self._budgets.get(namespace) or {}).values())

    def set_service(self, namespace: str, name: str, selector: Mapping[str, str] | None) -> None:
        """A Service's selector; one without (``None``) selects no pod and is not kept."""
        if selector is None:
            self.remove_service(namespace, name)
            return
        self._services.setdefault(namespace, {})[name] = dict(selector)

    def remove_service(self, namespace: str, name: str) -> None:
        services = self._services.get(namespace)
        if services is not None:
            services.pop(name, None)
            if not services:
                del self._services[namespace]

    def service_selectors(self, namespace: str) -> list[Mapping[str, str]]:
        return list((self._services.get(namespace) or {}).values())

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self._namespaces.get(name)

    # -- assigned pods -------------------------------------------------------

    def add_or_update_pod(self, pod: PodInfo) -> None:
        """Reflect a pod the watch shows as bound (or no longer bound, or terminal)."""
        self._assumed.discard(pod.key)
        if not pod.assigned or pod.terminal:
            self.remove_pod(pod.key)
            return
        self._place(pod, NodeName(pod.node_name))
        self.pod_groups.track(pod, Member.ASSIGNED)

    def remove_pod(self, key: PodKey) -> None:
        """The pod is gone (deleted, terminal): uncounted on its node and in its pod group."""
        self._unplace(key)
        self.pod_groups.drop(key)

    def _unplace(self, key: PodKey) -> None:
        self._assumed.discard(key)
        node = self._pod_nodes.pop(key, None)
        if node is None:
            return
        info = self._nodes.get(node)
        if info is None:
            return
        removed = info.remove_pod(key)
        if removed is not None:
            self._count_claims(removed, -1)
        self._track_affinity(info)
        if not info.exists and not info.pods:
            del self._nodes[node]
            self._journal.forget(node)

    def _place(self, pod: PodInfo, node: NodeName) -> None:
        previous = self._pod_nodes.get(pod.key)
        if previous is not None and previous != node:
            self._unplace(pod.key)
        info = self._nodes.get(node)
        if info is None:
            info = self._nodes[node] = NodeInfo(name=node, journal=self._journal)
        replaced = info.pods.get(pod.key)
        if replaced is not None:
            self._count_claims(replaced, -1)
        info.add_pod(pod)
        self._count_claims(pod, 1)
        self._track_affinity(info)
        self._pod_nodes[pod.key] = node

    def _count_claims(self, pod: PodInfo, delta: int) -> None:
        refs = self._claim_refs
        for key in pod_claim_keys(pod):
            count = refs.get(key, 0) + delta
            if count > 0:
                refs[key] = count
            else:
                refs.pop(key, None)

    def _track_affinity(self, info: NodeInfo) -> None:
        for index, count in (
            (self._with_affinity, info.pods_with_affinity),
            (self._with_required_anti_affinity, info.pods_with_required_anti_affinity),
        ):
            if count > 0:
                index[info.name] = info
            else:
                index.pop(info.name, None)

    # -- assumed pods --------------------------------------------------------

    def assume(self, pod: PodInfo, node: NodeName) -> None:
        """Count ``pod`` on ``node`` before the binding reaches the API server."""
        if pod.key in self._pod_nodes:
            raise ValueError(f"pod {pod.key} is already counted on node {self._pod_nodes[pod.key]}")
        self._place(pod, node)
        self._assumed.add(pod.key)
        self.pod_groups.track(pod, Member.ASSUMED)

    def forget(self, pod: PodInfo) -> None:
        """Uncount an assumed pod whose binding failed (an unscheduled member of its group again); a
        confirmed pod, or a later pod of the same name, stays."""
        if pod.key in self._assumed:
            counted = self.pod(pod.key)
            if counted is None or counted.uid == pod.uid:
                self._unplace(pod.key)
                self.pod_groups.track(pod, Member.UNSCHEDULED)

    def set_aside(self, key: PodKey) -> SetAside | None:
        """Take a counted pod off its node for a dry run (workload-aware preemption's victims), its
        pod-group membership untouched; `put_back` restores it as it was. None if it is not counted."""
        node = self._pod_nodes.get(key)
        pod = self.pod(key)
        if node is None or pod is None:
            return None
        assumed = key in self._assumed
        self._unplace(key)
        return SetAside(pod, node, assumed)

    def put_back(self, aside: SetAside) -> None:
        self._place(aside.pod, aside.node)
        if aside.assumed:
            self._assumed.add(aside.pod.key)

    def is_assumed(self, key: PodKey) -> bool:
        return key in self._assumed

    # -- reading -------------------------------------------------------------

    def node_infos(self) -> NodeList:
        """Existing nodes, in name order (a stable base for sampling and tie-breaks).

        This is the cycle's snapshot: the cycle runs synchronously on the event
        loop, so no watch event changes a NodeInfo while a pod is being placed.
        """
        if self._node_list is None:
            nodes = NodeList(sorted((i for i in self._nodes.values() if i.exists), key=lambda i: i.name))
            nodes.with_affinity = self._with_affinity
            nodes.with_required_anti_affinity = self._with_required_anti_affinity
            nodes.claim_refs = self._claim_refs
            nodes.journal = self._journal
            self._node_list = nodes
        return self._node_list

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(NodeName(name))

    def pod(self, key: PodKey) -> PodInfo | None:
        """The counted (bound or assumed) version of a pod."""
        node = self._pod_nodes.get(key)
        info = self._nodes.get(node) if node is not None else None
        return info.pods.get(key) if info is not None else None

    def node_of(self, key: PodKey) -> NodeName | None:
        return self._pod_nodes.get(key)

    def node_of_pod(self, key: PodKey) -> NodeInfo | None:
        """The node a pod is counted on, bound or assumed; None when it is on none."""
        node = self._pod_nodes.get(key)
        return self._nodes.get(node) if node is not None else None

    def sizes(self) -> dict[str, int]:
        """kube-scheduler's scheduler_cache_size: nodes (with placeholders for deleted nodes that still count
        pods), pods counted (bound or assumed), and of those the assumed."""
        return {"assumed_pods": len(self._assumed), "pods": len(self._pod_nodes), "nodes": len(self._nodes)}

    @property
    def node_count(self) -> int:
        return sum(1 for i in self._nodes.values() if i.exists)
