"""NodeAffinity: a pod runs only on nodes its nodeSelector and required node affinity select. Pure.

PreFilter reads the pod's ``spec.nodeSelector`` (every label must be equal)
and ``requiredDuringSchedulingIgnoredDuringExecution`` (terms ORed,
expressions of a term ANDed) once per cycle; when every term pins node names
(``matchFields`` ``metadata.name`` In) it narrows the nodes worth filtering to
those names, as kube-scheduler does. Filter rejects nodes that do not match;
labels are the administrator's, so preemption cannot resolve it. Score sums
the weights of the matching ``preferredDuringSchedulingIgnoredDuringExecution``
terms; NormalizeScore scales the best node to 100. Filter's answers are kept
per node for pods with the same selector and required affinity (a burst from
one template), for as long as the node's labels are the same object (every
Node update makes new ones), so the terms are not matched again for each pod.

The profile's ``addedAffinity`` applies to every pod: its required selector is
checked before the pod's own (with its own reason), its preferred terms add to
every pod's score. Matching follows ``usher.core.selectors``. A malformed term
(unknown operator, non-integer Gt/Lt value, a bad matchFields requirement) is
dropped as kube-scheduler drops it, so it matches no node and never raises;
if it leaves a required affinity with no usable term, PreFilter rejects the pod
with a message naming the bad field. Malformed preferred terms fail PreScore
with an Error, as in kube-scheduler; malformed ``addedAffinity`` fails at
configuration time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError, reject_unknown_args
from usher.core.framework.interface import (
    BatchScoreNormalizer,
    EnqueueExtensions,
    FilterPlugin,
    Handle,
    PreFilterPlugin,
    PreFilterResult,
    PreScorePlugin,
    ScorePlugin,
)
from usher.core.framework.names import NODE_AFFINITY
from usher.core.framework.scoring import DefaultNormalized
from usher.core.hints import ClusterEventWithHint
from usher.core.plugins.nodeshares import PerNodeByKind
from usher.core.selectors import SelectorError, node_selector_term_matches
from usher.core.types import SUCCESS, Code, PodInfo, QueueingHint, Status, error, unschedulable

if TYPE_CHECKING:
    from usher.core.cache import NodeInfo
    from usher.core.framework.cycle_state import CycleState

NAME = NODE_AFFINITY
REASON_POD = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
REASON_CONFLICT = "pod affinity terms conflict"
REASON_INVALID = "pod's required node affinity has no valid term"
PRE_FILTER_KEY = "PreFilter" + NAME
PRE_SCORE_KEY = "PreScore" + NAME
VERDICTS_KEY = "Verdicts" + NAME

Verdicts = dict[str, tuple[Mapping[str, str], bool]]
"""Node name -> (the node's labels object when matched, whether the required affinity matched)."""

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_POD_PATH = "spec.affinity.nodeAffinity"
_SKIP = Status(Code.SKIP)
# One Status each for every node that fails alike (Status is immutable; the runtime names it once).
_POD_MISMATCH = unschedulable(REASON_POD, resolvable=False)
_ENFORCED_MISMATCH = unschedulable(REASON_ENFORCED, resolvable=False)

Term = Mapping[str, Any]
WeightedTerm = tuple[int, Term]


# -- parsing ----------------------------------------------------------------------


def term_errors(term: Term, path: str) -> list[tuple[str, str]]:
    """(field, message) for everything kube-scheduler would fail to parse in one node selector term.

    Matching itself is ``usher.core.selectors``; this only finds the terms it
    would raise on, so they can be dropped (or rejected in configuration).
    """
    found: list[tuple[str, str]] = []
    for i, expression in enumerate(term.get("matchExpressions") or []):
        field = f"{path}.matchExpressions[{i}]"
        if not isinstance(expression, Mapping):
            found.append((field, "must be an object"))
            continue
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            found.append((f"{field}.values", f"operator {operator} needs at least one value"))
        elif operator in ("Exists", "DoesNotExist") and values:
            found.append((f"{field}.values", f"operator {operator} takes no values"))
        else:
            try:
                node_selector_term_matches({"matchExpressions": [expression]}, {}, "")
            except SelectorError as exc:
                found.append((field, str(exc)))
    for i, requirement in enumerate(term.get("matchFields") or []):
        field = f"{path}.matchFields[{i}]"
        if not isinstance(requirement, Mapping):
            found.append((field, "must be an object"))
        elif requirement.get("operator") not in ("In", "NotIn"):
            found.append((f"{field}.operator", f"{requirement.get('operator')!r} not supported (supported: In, NotIn)"))
        elif len(requirement.get("values") or []) != 1:
            found.append((f"{field}.values", "must have one element"))
        else:
            try:
                node_selector_term_matches({"matchFields": [requirement]}, {}, "")
            except SelectorError as exc:
                found.append((field, str(exc)))
    return found


def _describe(errors: Sequence[tuple[str, str]]) -> str:
    return "; ".join(f"{field}: {message}" for field, message in errors)


def _is_empty(term: Term) -> bool:
    return not term.get("matchExpressions") and not term.get("matchFields")


def _matches_any(terms: Sequence[Term], labels: Mapping[str, str], name: str) -> bool:
    """ORed terms; the terms were checked by term_errors, so matching cannot raise."""
    return any(node_selector_term_matches(term, labels, name) for term in terms)


@dataclass(frozen=True, slots=True)
class RequiredAffinity:
    """A pod's nodeSelector AND its required node affinity, with malformed terms dropped."""

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    """The usable terms (ORed); None when the pod has no required node affinity."""
    errors: tuple[tuple[str, str], ...] = ()
    """(field, message) of each malformed requirement, for the rejection message."""

    @property
    def unsatisfiable(self) -> bool:
        """Malformed terms left nothing that could ever match."""
        return bool(self.errors) and not self.terms

    def matches(self, labels: Mapping[str, str], name: str) -> bool:
        if any(labels.get(key) != value for key, value in self.node_selector):
            return False
        return self.terms is None or _matches_any(self.terms, labels, name)

    def signature(self) -> str:
        """Equal for pods whose selector and required terms are equal (whatever else differs)."""
        return json.dumps([self.node_selector, self.terms], sort_keys=True)

    def node_names(self) -> frozenset[str] | None:
        """The only nodes the terms can match when each pins names (metadata.name In); None: any node."""
        if not self.terms:
            return None
        names: set[str] = set()
        for term in self.terms:
            pinned: set[str] | None = None
            for requirement in term.get("matchFields") or []:
                if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
                    values = {str(v) for v in requirement.get("values") or []}
                    pinned = values if pinned is None else pinned & values
            if pinned is None:
                return None  # this term allows any node, and terms are ORed
            names |= pinned
        return frozenset(names)


def _node_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity")) or {}


def required_affinity(pod: Mapping[str, Any]) -> RequiredAffinity:
    """Parse a pod's (raw API dict) nodeSelector and required node affinity."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    node_selector = tuple((str(k), str(v)) for k, v in selector.items())
    required = _node_affinity(pod).get(REQUIRED)
    if required is None:
        return RequiredAffinity(node_selector)
    terms: list[Term] = []
    errors: list[tuple[str, str]] = []
    for i, term in enumerate(required.get("nodeSelectorTerms") or []):
        found = term_errors(term, f"{_POD_PATH}.{REQUIRED}.nodeSelectorTerms[{i}]")
        if found:
            errors.extend(found)
        else:
            terms.append(term)
    return RequiredAffinity(node_selector, tuple(terms), tuple(errors))


def preferred_terms(
    items: Sequence[Mapping[str, Any]], path: str
) -> tuple[tuple[WeightedTerm, ...], list[tuple[str, str]]]:
    """Weighted terms worth scoring (weight 0 and empty preferences are skipped, as in kube), and parse errors."""
    terms: list[WeightedTerm] = []
    errors: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        weight = int(item.get("weight") or 0)
        preference = item.get("preference") or {}
        if weight == 0 or _is_empty(preference):
            continue
        found = term_errors(preference, f"{path}[{i}].preference")
        if found:
            errors.extend(found)
        else:
            terms.append((weight, preference))
    return tuple(terms), errors


def score_terms(terms: Sequence[WeightedTerm], labels: Mapping[str, str], name: str) -> int:
    return sum(weight for weight, term in terms if node_selector_term_matches(term, labels, name))


# -- args -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AffinityArgs:
    """``addedAffinity``: a required selector (None: none) and preferred terms for every pod of the profile."""

    required: tuple[Term, ...] | None = None
    preferred: tuple[WeightedTerm, ...] = ()


def _object(value: Any, path: str, known: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PluginArgsError(path, "must be an object")
    for key in value:
        if key not in known:
            raise PluginArgsError(f"{path}.{key}", f"unknown field (known: {', '.join(sorted(known))})")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PluginArgsError(path, "must be a list")
    return value


def _check_term(term: Any, path: str) -> Term:
    checked = _object(term, path, {"matchExpressions", "matchFields"})
    for list_name in ("matchExpressions", "matchFields"):
        for j, requirement in enumerate(_list(checked.get(list_name), f"{path}.{list_name}")):
            field = f"{path}.{list_name}[{j}]"
            _object(requirement, field, {"key", "operator", "values"})
            if not isinstance(requirement.get("key"), str) or not requirement["key"]:
                raise PluginArgsError(f"{field}.key", "required")
            values = _list(requirement.get("values"), f"{field}.values")
            if not all(isinstance(v, str) for v in values):
                raise PluginArgsError(f"{field}.values", "must be a list of strings")
    found = term_errors(checked, path)
    if found:
        raise PluginArgsError(*found[0])
    return checked


def parse_args(args: Mapping[str, Any]) -> AffinityArgs:
    reject_unknown_args(args, {"addedAffinity"})
    if args.get("addedAffinity") is None:
        return AffinityArgs()
    added = _object(args["addedAffinity"], "addedAffinity", {REQUIRED, PREFERRED})
    required: tuple[Term, ...] | None = None
    if added.get(REQUIRED) is not None:
        path = f"addedAffinity.{REQUIRED}"
        selector = _object(added[REQUIRED], path, {"nodeSelectorTerms"})
        terms = _list(selector.get("nodeSelectorTerms"), f"{path}.nodeSelectorTerms")
        if not terms:
            raise PluginArgsError(f"{path}.nodeSelectorTerms", "must have at least one term")
        required = tuple(_check_term(t, f"{path}.nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
    preferred: list[WeightedTerm] = []
    path = f"addedAffinity.{PREFERRED}"
    for i, item in enumerate(_list(added.get(PREFERRED), path)):
        entry = _object(item, f"{path}[{i}]", {"weight", "preference"})
        weight = entry.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 100:
            raise PluginArgsError(f"{path}[{i}].weight", f"must be an integer in 0..100, got {weight!r}")
        preference = _check_term(entry.get("preference") or {}, f"{path}[{i}].preference")
        if weight and not _is_empty(preference):
            preferred.append((weight, preference))
    return AffinityArgs(required, tuple(preferred))


# -- plugin -----------------------------------------------------------------------


def _labels_and_name(node: Mapping[str, Any] | None) -> tuple[Mapping[str, str], str]:
    meta = (node or {}).get("metadata") or {}
    return meta.get("labels") or {}, str(meta.get("name") or "")


class NodeAffinity(DefaultNormalized):
    """nodeSelector and required node affinity filter; preferred node affinity scores."""

    name = NAME
    filter_reads_node_pods = False
    """Its Filter answer depends on the pod and the node object only (never on the node's pods)."""

    def __init__(self, args: AffinityArgs) -> None:
        self.args = args
        self._verdicts_for: PerNodeByKind[tuple[Mapping[str, str], bool]] = PerNodeByKind()
        """Filter's answers per node, for recent kinds of required affinity (``RequiredAffinity.signature``)."""

    def _enforced(self, labels: Mapping[str, str], name: str) -> bool:
        return self.args.required is None or _matches_any(self.args.required, labels, name)

    def pre_filter(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> tuple[PreFilterResult | None, Status]:
        spec = pod.raw.get("spec") or {}
        if (
            _node_affinity(pod.raw).get(REQUIRED) is None
            and self.args.required is None
            and not spec.get("nodeSelector")
        ):
            return None, _SKIP
        required = required_affinity(pod.raw)
        state.write(PRE_FILTER_KEY, required)
        state.write(VERDICTS_KEY, self._verdicts_for(required.signature()))
        if required.unsatisfiable:
            return None, unschedulable(f"{REASON_INVALID}: {_describe(required.errors)}", resolvable=False)
        names = required.node_names()
        if names is None:
            return None, SUCCESS
        if not names:
            return None, unschedulable(REASON_CONFLICT, resolvable=False)
        return PreFilterResult(node_names=names), SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not self._enforced(node.labels, node.name):
            return _ENFORCED_MISMATCH
        required: RequiredAffinity | None = state.get(PRE_FILTER_KEY)
        if required is None:  # PreFilter disabled in this profile
            required = required_affinity(pod.raw)
        verdicts: Verdicts | None = state.get(VERDICTS_KEY)
        labels = node.labels
        kept = verdicts.get(node.name) if verdicts is not None else None
        if kept is not None and kept[0] is labels:
            matches = kept[1]
        else:
            matches = required.matches(labels, node.name)
            if verdicts is not None:
                verdicts[node.name] = (labels, matches)
        return SUCCESS if matches else _POD_MISMATCH

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        terms, errors = preferred_terms(_node_affinity(pod.raw).get(PREFERRED) or [], f"{_POD_PATH}.{PREFERRED}")
        if errors:
            return error(f"invalid preferred node affinity: {_describe(errors)}")
        if not terms and not self.args.preferred:
            return _SKIP
        state.write(PRE_SCORE_KEY, terms)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> tuple[int, Status]:
        terms: tuple[WeightedTerm, ...] | None = state.get(PRE_SCORE_KEY)
        if terms is None:  # PreScore disabled in this profile
            terms, errors = preferred_terms(_node_affinity(pod.raw).get(PREFERRED) or [], f"{_POD_PATH}.{PREFERRED}")
            if errors:
                return 0, error(f"invalid preferred node affinity: {_describe(errors)}")
        total = score_terms(self.args.preferred, node.labels, node.name) + score_terms(terms, node.labels, node.name)
        return total, SUCCESS

    def events_to_register(self) -> Sequence[ClusterEventWithHint]:
        # Taints, allocatable or conditions never change whether a node's labels match.
        return [
            ClusterEventWithHint(
                ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL), hint=self.node_now_matches
            )
        ]

    def node_now_matches(self, pod: PodInfo, old: Any, new: Any) -> QueueingHint:
        """Queue when an added node matches, or an updated node went from not matching to matching.

        "Matching" covers both the profile's addedAffinity and the pod's own
        nodeSelector and required affinity.
        """
        labels, name = _labels_and_name(new)
        required = required_affinity(pod.raw)
        if not (self._enforced(labels, name) and required.matches(labels, name)):
            return QueueingHint.QUEUE_SKIP
        if old is None:
            return QueueingHint.QUEUE
        old_labels, old_name = _labels_and_name(old)
        matched_before = self._enforced(old_labels, old_name) and required.matches(old_labels, old_name)
        return QueueingHint.QUEUE_SKIP if matched_before else QueueingHint.QUEUE


def new(args: Mapping[str, Any], handle: Handle) -> NodeAffinity:
    return NodeAffinity(parse_args(args))


_check_pre_filter: type[PreFilterPlugin] = NodeAffinity
_check_filter: type[FilterPlugin] = NodeAffinity
_check_pre_score: type[PreScorePlugin] = NodeAffinity
_check_score: type[ScorePlugin] = NodeAffinity
_check_normalizer: type[BatchScoreNormalizer] = NodeAffinity
_check_events: type[EnqueueExtensions] = NodeAffinity
