"""Pod (anti-)affinity terms, parsed once from the raw pod and matched against pods. Pure.

A term selects pods by labels (``labelSelector``, with ``matchLabelKeys`` /
``mismatchLabelKeys`` merged in from the owner's labels) in a set of
namespaces (``namespaces``; ``namespaceSelector``; neither means the owner's
own namespace; an empty ``namespaceSelector`` ``{}`` means every namespace),
and names the node label (``topologyKey``) whose value is the domain.

Where the namespace labels come from depends on whose term it is, as in
kube-scheduler: the incoming pod's terms resolve ``namespaceSelector`` with
the namespaces usher knows (an unknown namespace never matches a non-empty
selector); an existing pod's terms are matched against the incoming pod with
the incoming pod's namespace labels (empty when unknown); a QueueingHint has
no namespace labels at all and counts a non-empty selector as matching, so it
errs towards Queue.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from usher.core.selectors import SelectorError, label_selector_matches, match_label_pairs, pairs_match
from usher.core.types import PodInfo, PodKey

NamespaceLabelsOf = Callable[[str], Mapping[str, str] | None]
"""namespace -> its labels, or None when unknown."""

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One pod (anti-)affinity term, parsed: selector, namespaces, topology key."""

    selector: Mapping[str, Any] | None
    """The label selector with matchLabelKeys / mismatchLabelKeys merged; None matches nothing."""
    namespaces: frozenset[str]
    namespace_selector: Mapping[str, Any] | None
    """None: no selector (only ``namespaces`` count)."""
    all_namespaces: bool
    """An empty ``namespaceSelector``: every namespace."""
    topology_key: str
    _pairs: tuple[tuple[str, Any], ...] | None = field(init=False, repr=False, compare=False)
    """``selector`` as ``match_label_pairs`` (None: matched by ``label_selector_matches``)."""
    _namespace_pairs: tuple[tuple[str, Any], ...] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Terms are matched against every pod of the nodes a cycle walks: most select by matchLabels only.
        object.__setattr__(self, "_pairs", match_label_pairs(self.selector))
        object.__setattr__(self, "_namespace_pairs", match_label_pairs(self.namespace_selector))

    def matches(self, namespace: str, labels: Mapping[str, str], ns_labels_of: NamespaceLabelsOf | None) -> bool:
        """Does a pod in ``namespace`` with ``labels`` fall under this term?

        ``ns_labels_of`` None (QueueingHints) counts a non-empty namespaceSelector as matching.
        """
        if not (self.all_namespaces or namespace in self.namespaces):
            if self.namespace_selector is None:
                return False
            if ns_labels_of is not None:
                ns_labels = ns_labels_of(namespace)
                if ns_labels is None:
                    return False
                pairs = self._namespace_pairs
                if not (
                    label_selector_matches(self.namespace_selector, ns_labels)
                    if pairs is None
                    else pairs_match(pairs, ns_labels)
                ):
                    return False
        pairs = self._pairs
        return label_selector_matches(self.selector, labels) if pairs is None else pairs_match(pairs, labels)

    def matches_pod(self, pod: PodInfo, ns_labels_of: NamespaceLabelsOf | None) -> bool:
        return self.matches(pod.namespace, pod.labels, ns_labels_of)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    """A preferred term with its weight."""

    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class PodTerms:
    """A pod's required and preferred pod affinity and anti-affinity terms."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()
    selector_keys: frozenset[str] = field(init=False, repr=False, compare=False)
    """The label keys any of these terms' selectors read from a pod."""

    @property
    def has_required(self) -> bool:
        return bool(self.required_affinity or self.required_anti_affinity)

    @property
    def has_preferred(self) -> bool:
        return bool(self.preferred_affinity or self.preferred_anti_affinity)

    def __post_init__(self) -> None:
        keys: set[str] = set()
        every = (
            *self.required_affinity,
            *self.required_anti_affinity,
            *(w.term for w in self.preferred_affinity),
            *(w.term for w in self.preferred_anti_affinity),
        )
        for term in every:
            selector = term.selector or {}
            keys.update(selector.get("matchLabels") or {})
            keys.update(str(e.get("key")) for e in selector.get("matchExpressions") or [])
        object.__setattr__(self, "selector_keys", frozenset(keys))


NO_TERMS = PodTerms()


def terms_signature(terms: Sequence[AffinityTerm], namespaces: int | None = None) -> Hashable | None:
    """The terms as a value: equal for terms that select the same pods in the same domains (matchLabelKeys are
    merged into the selectors already).

    A term that selects namespaces by their labels selects other pods when any namespace changes, without any
    node changing: its signature carries ``namespaces``, the cache's namespace generation, so what was derived
    from it is kept only while no namespace changed (None without a generation: nothing may be kept)."""
    parts: list[Hashable] = []
    for term in terms:
        selector = json.dumps(term.selector, sort_keys=True)
        if term.namespace_selector is not None and not term.all_namespaces:
            if namespaces is None:
                return None
            by_labels = json.dumps(term.namespace_selector, sort_keys=True)
            parts.append((selector, tuple(sorted(term.namespaces)), by_labels, namespaces, term.topology_key))
            continue
        parts.append((selector, tuple(sorted(term.namespaces)), term.all_namespaces, term.topology_key))
    return tuple(parts)


def matches_all(terms: tuple[AffinityTerm, ...], pod: PodInfo, ns_labels_of: NamespaceLabelsOf | None) -> bool:
    """kube's podMatchesAllAffinityTerms: an empty list matches nothing."""
    if not terms:
        return False
    return all(t.matches_pod(pod, ns_labels_of) for t in terms)


# ------------------------------------------------------------------ parsing


def _validate_selector(selector: Any, where: str) -> None:
    """Reject what metav1.LabelSelectorAsSelector rejects (operators and value counts)."""
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        raise SelectorError(f"{where}: must be an object")
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"{where}.matchLabels: must be an object")
    for i, expression in enumerate(selector.get("matchExpressions") or []):
        if not isinstance(expression, Mapping):
            raise SelectorError(f"{where}.matchExpressions[{i}]: must be an object")
        operator = expression.get("operator")
        values = expression.get("values") or []
        if operator not in _OPERATORS:
            raise SelectorError(f"{where}.matchExpressions[{i}]: {operator!r} is not a valid label selector operator")
        if operator in ("In", "NotIn") and not values:
            raise SelectorError(
                f"{where}.matchExpressions[{i}]: for 'in', 'notin' operators, values set can't be empty"
            )
        if operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(
                f"{where}.matchExpressions[{i}]: values set must be empty for 'exists', 'doesnotexist' operators"
            )


def _merged_selector(raw: Mapping[str, Any], owner_labels: Mapping[str, str]) -> Mapping[str, Any] | None:
    """labelSelector plus ``key In (owner's value)`` per matchLabelKeys and ``NotIn`` per mismatchLabelKeys.

    The API server merges these at pod creation (MatchLabelKeysInPodAffinity); a key whose
    expression is already in the selector is taken as merged, so this is idempotent and keeps the
    value the pod was created with. Keys the owner has no label for are ignored, and a null
    selector stays null (it matches nothing anyway), as in kube-apiserver.
    """
    selector = raw.get("labelSelector")
    match_keys = raw.get("matchLabelKeys") or []
    mismatch_keys = raw.get("mismatchLabelKeys") or []
    if selector is None or not isinstance(selector, Mapping) or not (match_keys or mismatch_keys):
        return selector
    expressions = list(selector.get("matchExpressions") or [])
    present = {(e.get("key"), e.get("operator")) for e in expressions if isinstance(e, Mapping)}
    for keys, operator in ((match_keys, "In"), (mismatch_keys, "NotIn")):
        for key in keys:
            if key in owner_labels and (key, operator) not in present:
                expressions.append({"key": key, "operator": operator, "values": [owner_labels[key]]})
    return {**selector, "matchExpressions": expressions}


def parse_term(raw: Any, owner_namespace: str, owner_labels: Mapping[str, str], where: str) -> AffinityTerm:
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{where}: must be an object")
    selector = _merged_selector(raw, owner_labels)
    _validate_selector(selector, f"{where}.labelSelector")
    namespace_selector = raw.get("namespaceSelector")
    _validate_selector(namespace_selector, f"{where}.namespaceSelector")
    namespaces = raw.get("namespaces") or []
    if not isinstance(namespaces, list):
        raise SelectorError(f"{where}.namespaces: must be a list")
    if not namespaces and namespace_selector is None:
        namespaces = [owner_namespace]
    all_namespaces = namespace_selector is not None and not (
        namespace_selector.get("matchLabels") or namespace_selector.get("matchExpressions")
    )
    return AffinityTerm(
        selector=selector,
        namespaces=frozenset(str(n) for n in namespaces),
        namespace_selector=namespace_selector,
        all_namespaces=all_namespaces,
        topology_key=str(raw.get("topologyKey") or ""),
    )


def _required(
    section: Mapping[str, Any], namespace: str, labels: Mapping[str, str], where: str, *, strict: bool
) -> tuple[AffinityTerm, ...]:
    terms: list[AffinityTerm] = []
    for i, raw in enumerate(section.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
        try:
            terms.append(
                parse_term(raw, namespace, labels, f"{where}.requiredDuringSchedulingIgnoredDuringExecution[{i}]")
            )
        except SelectorError:
            if strict:
                raise
    return tuple(terms)


def _preferred(
    section: Mapping[str, Any], namespace: str, labels: Mapping[str, str], where: str, *, strict: bool
) -> tuple[WeightedTerm, ...]:
    terms: list[WeightedTerm] = []
    for i, raw in enumerate(section.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        path = f"{where}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
        try:
            if not isinstance(raw, Mapping):
                raise SelectorError(f"{path}: must be an object")
            weight = raw.get("weight") or 0
            if not isinstance(weight, int) or isinstance(weight, bool):
                raise SelectorError(f"{path}.weight: must be an integer")
            term = parse_term(raw.get("podAffinityTerm"), namespace, labels, f"{path}.podAffinityTerm")
            terms.append(WeightedTerm(weight, term))
        except SelectorError:
            if strict:
                raise
    return tuple(terms)


def parse_terms(
    raw_pod: Mapping[str, Any], namespace: str, labels: Mapping[str, str], *, strict: bool = True
) -> PodTerms:
    """All pod (anti-)affinity terms of a raw pod.

    ``strict`` raises SelectorError on a term the API server would have rejected (the incoming
    pod: kube fails its PreFilter); otherwise such a term is dropped (an existing pod's).
    """
    affinity = (raw_pod.get("spec") or {}).get("affinity") or {}
    pod_affinity = affinity.get("podAffinity") or {}
    anti_affinity = affinity.get("podAntiAffinity") or {}
    if not pod_affinity and not anti_affinity:
        return NO_TERMS
    return PodTerms(
        required_affinity=_required(pod_affinity, namespace, labels, "podAffinity", strict=strict),
        required_anti_affinity=_required(anti_affinity, namespace, labels, "podAntiAffinity", strict=strict),
        preferred_affinity=_preferred(pod_affinity, namespace, labels, "podAffinity", strict=strict),
        preferred_anti_affinity=_preferred(anti_affinity, namespace, labels, "podAntiAffinity", strict=strict),
    )


def pod_terms(pod: PodInfo, *, strict: bool = True) -> PodTerms:
    if not pod.has_pod_affinity:
        return NO_TERMS
    return parse_terms(pod.raw, pod.namespace, pod.labels, strict=strict)


class TermsCache:
    """Parsed terms of pods (existing ones, or with ``strict`` the ones being scheduled), reused while the
    same PodInfo object comes back.

    Bounded: cleared wholesale once it holds ``limit`` pods (a miss only costs a re-parse).
    """

    def __init__(self, limit: int = 65536, *, strict: bool = False) -> None:
        """``strict``: parse as for the incoming pod (a bad selector raises SelectorError, never kept)."""
        self._entries: dict[PodKey, tuple[PodInfo, PodTerms]] = {}
        self._limit = limit
        self._strict = strict

    def get(self, pod: PodInfo) -> PodTerms:
        if not pod.has_pod_affinity:
            return NO_TERMS
        entry = self._entries.get(pod.key)
        if entry is not None and entry[0] is pod:
            return entry[1]
        terms = pod_terms(pod, strict=self._strict)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[pod.key] = (pod, terms)
        return terms

    def __len__(self) -> int:
        return len(self._entries)


class NamespaceLabelsCache:
    """One cycle's view of namespace labels: each namespace looked up once."""

    def __init__(self, lookup: NamespaceLabelsOf) -> None:
        self._lookup = lookup
        self._seen: dict[str, Mapping[str, str] | None] = {}

    def __call__(self, namespace: str) -> Mapping[str, str] | None:
        try:
            return self._seen[namespace]
        except KeyError:
            labels = self._seen[namespace] = self._lookup(namespace)
            return labels
