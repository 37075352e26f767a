"""Topology spread constraints as PodTopologySpread reads them: parsed, merged, defaulted. Pure.

A pod's ``spec.topologySpreadConstraints`` are parsed once per use into
``Constraint`` records: ``matchLabelKeys`` are merged into the selector as
``key In (the pod's value)`` requirements (what kube-apiserver itself does
since 1.34, so doing it again is harmless), ``minDomains`` defaults to 1,
``nodeAffinityPolicy`` to Honor and ``nodeTaintsPolicy`` to Ignore.

A pod without constraints of its own gets the plugin's default constraints
(with ``defaultingType: System``, kube-scheduler's: hostname maxSkew 3 and
zone maxSkew 5, both ScheduleAnyway) with a selector deduced from the pod, as
kube-scheduler's ``helper.DefaultSelector`` does: the selectors of the
Services of its namespace that select it, merged, and the selector of its
controlling ReplicaSet / ReplicationController / StatefulSet. usher watches
Services but not those controllers, so for them ``default_selector``
approximates: the pod's own labels minus the labels its controller stamps on
each pod individually. A pod with neither gets no default constraints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from usher.core.selectors import SelectorError, label_selector_matches, node_selector_matches, untolerated_taint

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.types import PodInfo

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"
DO_NOT_SCHEDULE_TAINT_EFFECTS = ("NoSchedule", "NoExecute")

DEFAULT_SELECTOR_OWNER_KINDS = frozenset({"ReplicaSet", "ReplicationController", "StatefulSet"})
PER_POD_LABELS = frozenset(
    {"statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index", "controller-revision-hash"}
)
"""Labels a controller sets differently on each of its pods; never part of its selector."""

SYSTEM_DEFAULT_CONSTRAINTS: tuple[Mapping[str, Any], ...] = (
    {"topologyKey": LABEL_HOSTNAME, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 3},
    {"topologyKey": LABEL_ZONE, "whenUnsatisfiable": SCHEDULE_ANYWAY, "maxSkew": 5},
)
"""kube-scheduler's ``systemDefaultConstraints`` (defaultingType: System)."""

ServiceSelectors = Callable[[str], Sequence[Mapping[str, str]]]
"""Namespace -> the ``spec.selector`` of each of its Services that has one."""

_OPERATORS_WITH_VALUES = ("In", "NotIn")
_OPERATORS_WITHOUT_VALUES = ("Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class Constraint:
    """One parsed constraint. ``selector`` None matches no pod (a constraint without labelSelector)."""

    max_skew: int
    topology_key: str
    selector: Mapping[str, Any] | None
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE

    def matches(self, labels: Mapping[str, str]) -> bool:
        return label_selector_matches(self.selector, labels)

    @property
    def counts_pods(self) -> bool:
        """kube-scheduler counts no pod for an empty selector (``{}``) though the pod itself matches it."""
        return self.selector is not None and bool(
            self.selector.get("matchLabels") or self.selector.get("matchExpressions")
        )


def _check_selector(selector: Mapping[str, Any]) -> None:
    """The checks ``metav1.LabelSelectorAsSelector`` makes; raises SelectorError."""
    for expression in selector.get("matchExpressions") or []:
        operator = expression.get("operator")
        values = expression.get("values") or []
        if operator in _OPERATORS_WITH_VALUES:
            if not values:
                raise SelectorError(f"for 'in', 'notin' operators, values set can't be empty ({expression!r})")
        elif operator in _OPERATORS_WITHOUT_VALUES:
            if values:
                raise SelectorError(f"values set must be empty for exists and does not exist ({expression!r})")
        else:
            raise SelectorError(f"{operator!r} is not a valid label selector operator")


def merge_match_label_keys(
    selector: Mapping[str, Any] | None, keys: Iterable[str], pod_labels: Mapping[str, str]
) -> Mapping[str, Any] | None:
    """AND ``key In (pod's value)`` for every key the pod carries; a null selector stays null."""
    if selector is None:
        return None
    added = [{"key": key, "operator": "In", "values": [pod_labels[key]]} for key in keys if key in pod_labels]
    if not added:
        return selector
    return {
        "matchLabels": dict(selector.get("matchLabels") or {}),
        "matchExpressions": [*(selector.get("matchExpressions") or []), *added],
    }


def parse_constraint(raw: Mapping[str, Any], pod_labels: Mapping[str, str]) -> Constraint:
    """A pod's constraint (validated by the API server; only selector operators are re-checked)."""
    selector = raw.get("labelSelector")
    if selector is not None:
        _check_selector(selector)
    selector = merge_match_label_keys(selector, raw.get("matchLabelKeys") or (), pod_labels)
    min_domains = raw.get("minDomains")
    return Constraint(
        max_skew=int(raw.get("maxSkew") or 0),
        topology_key=str(raw.get("topologyKey") or ""),
        selector=selector,
        min_domains=1 if min_domains is None else int(min_domains),
        node_affinity_policy=str(raw.get("nodeAffinityPolicy") or HONOR),
        node_taints_policy=str(raw.get("nodeTaintsPolicy") or IGNORE),
    )


def default_selector(pod: PodInfo, services: Sequence[Mapping[str, str]] = ()) -> Mapping[str, Any] | None:
    """kube-scheduler's ``helper.DefaultSelector`` (see the module docstring); None when it would be empty."""
    merged: dict[str, str] = {}
    for selector in services:
        if all(pod.labels.get(key) == value for key, value in selector.items()):
            merged.update(selector)
    owners = (pod.raw.get("metadata") or {}).get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), None)
    if controller is not None and controller.get("kind") in DEFAULT_SELECTOR_OWNER_KINDS:
        merged.update({k: v for k, v in pod.labels.items() if k not in PER_POD_LABELS})
    return {"matchLabels": merged} if merged else None


class ConstraintSource:
    """Which constraints apply to a pod: its own, else the plugin's defaults with a deduced selector."""

    def __init__(
        self,
        defaults: Sequence[Mapping[str, Any]] = (),
        *,
        system_defaulted: bool = False,
        services: ServiceSelectors = lambda namespace: (),
    ) -> None:
        self.defaults = tuple(defaults)
        self.system_defaulted = system_defaulted
        self._services = services

    def for_pod(self, pod: PodInfo, action: str) -> list[Constraint]:
        """The constraints with ``whenUnsatisfiable == action``. Raises SelectorError on a bad selector."""
        own = (pod.raw.get("spec") or {}).get("topologySpreadConstraints") or []
        if own:
            return [parse_constraint(c, pod.labels) for c in own if c.get("whenUnsatisfiable") == action]
        wanted = [c for c in self.defaults if c.get("whenUnsatisfiable") == action]
        if not wanted:
            return []
        selector = default_selector(pod, self._services(pod.namespace))
        if selector is None:
            return []
        return [
            Constraint(
                max_skew=int(c["maxSkew"]),
                topology_key=str(c["topologyKey"]),
                selector=selector,
                min_domains=int(c.get("minDomains") or 1),
                node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
                node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
            )
            for c in wanted
        ]

    def has_own(self, pod: PodInfo) -> bool:
        return bool((pod.raw.get("spec") or {}).get("topologySpreadConstraints"))


def has_all_topology_keys(node_labels: Mapping[str, str], constraints: Iterable[Constraint]) -> bool:
    return all(c.topology_key in node_labels for c in constraints)


def required_node_affinity_matches(pod: PodInfo, node: NodeInfo) -> bool:
    """``nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)``: nodeSelector AND required node affinity.

    A selector that fails to parse matches nothing, as kube-scheduler ignores the error and the match.
    """
    spec = pod.raw.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(key) != value:
            return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity")) or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    try:
        return node_selector_matches(required, node.labels, node.name)
    except SelectorError:
        return False


class Inclusion:
    """Per-node answers to the inclusion policies, each worked out at most once per node."""

    __slots__ = ("_need_affinity", "_need_taints", "_pod", "_tolerations")

    def __init__(self, pod: PodInfo, constraints: Sequence[Constraint]) -> None:
        self._pod = pod
        self._tolerations = tuple((pod.raw.get("spec") or {}).get("tolerations") or ())
        self._need_affinity = any(c.node_affinity_policy == HONOR for c in constraints)
        self._need_taints = any(c.node_taints_policy == HONOR for c in constraints)

    def for_node(self, node: NodeInfo) -> tuple[bool, bool]:
        """(matches the pod's required node affinity, has no untolerated NoSchedule/NoExecute taint)."""
        affinity = required_node_affinity_matches(self._pod, node) if self._need_affinity else True
        taints = (
            untolerated_taint(node.taints, self._tolerations, DO_NOT_SCHEDULE_TAINT_EFFECTS) is None
            if self._need_taints
            else True
        )
        return affinity, taints


def included(constraint: Constraint, affinity_ok: bool, taints_ok: bool) -> bool:
    """``matchNodeInclusionPolicies``: does this node count for this constraint?"""
    if constraint.node_affinity_policy == HONOR and not affinity_ok:
        return False
    return not (constraint.node_taints_policy == HONOR and not taints_ok)


def count_matching(pods: Iterable[PodInfo], constraint: Constraint, namespace: str) -> int:
    """Pods of ``namespace``, not terminating, that the constraint's selector matches."""
    if not constraint.counts_pods:
        return 0
    return sum(1 for p in pods if not p.deleting and p.namespace == namespace and constraint.matches(p.labels))
