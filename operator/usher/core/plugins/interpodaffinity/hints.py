"""InterPodAffinity's QueueingHints, after kube-scheduler's. Pure.

Only required terms can reject a pod, so only they are consulted. A hint has
no namespace labels: a term with a non-empty ``namespaceSelector`` counts as
matching any namespace, which errs towards Queue (kube-scheduler's hints
would count it as matching none). A term that cannot be parsed answers Queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from usher.core.plugins.interpodaffinity.terms import AffinityTerm, PodTerms, parse_terms, pod_terms
from usher.core.selectors import SelectorError
from usher.core.types import PodInfo, QueueingHint

QUEUE = QueueingHint.QUEUE
SKIP = QueueingHint.QUEUE_SKIP


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw.get("metadata") or {}


def _namespace(raw: Mapping[str, Any]) -> str:
    return str(_meta(raw).get("namespace") or "default")


def _labels(raw: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(raw).get("labels") or {}


def _placed(raw: Mapping[str, Any]) -> bool:
    """Bound, or at least nominated: kube's hint ignores pods that are neither."""
    return bool((raw.get("spec") or {}).get("nodeName") or (raw.get("status") or {}).get("nominatedNodeName"))


def _all(terms: tuple[AffinityTerm, ...], raw: Mapping[str, Any]) -> bool:
    if not terms:
        return False
    namespace, labels = _namespace(raw), _labels(raw)
    return all(t.matches(namespace, labels, None) for t in terms)


def _any(terms: tuple[AffinityTerm, ...], raw: Mapping[str, Any]) -> bool:
    namespace, labels = _namespace(raw), _labels(raw)
    return any(t.matches(namespace, labels, None) for t in terms)


def assigned_pod_changed(
    pod: PodInfo, old: Any, new: Any, terms_of: Callable[[PodInfo], PodTerms] = pod_terms
) -> QueueingHint:
    """An assigned pod was added, relabelled or deleted: may ``pod`` fit now?

    Add: the new pod matches all of ``pod``'s affinity terms. Label update: it now matches
    them and did not before, or it matched one of ``pod``'s anti-affinity terms and no longer
    does. Delete: it matched one of ``pod``'s anti-affinity terms, or ``pod`` matches one of its
    anti-affinity terms.
    """
    if (new is not None and not _placed(new)) or (old is not None and not _placed(old)):
        return SKIP
    try:
        terms = terms_of(pod)  # parsed once per pod version when the plugin passes its cache
    except SelectorError:
        return QUEUE
    affinity, anti_affinity = terms.required_affinity, terms.required_anti_affinity
    if old is not None and new is not None:
        if not _all(affinity, old) and _all(affinity, new):
            return QUEUE
        if _any(anti_affinity, old) and not _any(anti_affinity, new):
            return QUEUE
        return SKIP
    if new is not None:
        return QUEUE if _all(affinity, new) else SKIP
    if old is None:
        return QUEUE
    if _any(anti_affinity, old):
        return QUEUE
    theirs = parse_terms(old, _namespace(old), _labels(old), strict=False).required_anti_affinity
    return QUEUE if any(t.matches_pod(pod, None) for t in theirs) else SKIP


def own_labels_changed(pod: PodInfo, old: Any, new: Any) -> QueueingHint:
    """The pod's own labels changed: an existing pod's anti-affinity may no longer match it."""
    return QUEUE if new is not None and _meta(new).get("uid") == pod.uid else SKIP


def node_changed(pod: PodInfo, old: Any, new: Any, terms_of: Callable[[PodInfo], PodTerms] = pod_terms) -> QueueingHint:
    """A node was added or relabelled (kube's isSchedulableAfterNodeChange).

    Affinity: the added node has a term's topology key, or an update added the key or moved the
    node to another domain. Anti-affinity: any added node (a node without the key takes the pod),
    or an update removed the key or moved the node to another domain.
    """
    if new is None:
        return SKIP
    try:
        terms = terms_of(pod)  # parsed once per pod version when the plugin passes its cache
    except SelectorError:
        return QUEUE
    new_labels = _labels(new)
    old_labels = None if old is None else _labels(old)
    for term in terms.required_affinity:
        key = term.topology_key
        if old_labels is None:
            if key in new_labels:
                return QUEUE
            continue
        if key in new_labels and (key not in old_labels or old_labels[key] != new_labels[key]):
            return QUEUE
    for term in terms.required_anti_affinity:
        key = term.topology_key
        if old_labels is None:
            return QUEUE
        if key in old_labels and (key not in new_labels or old_labels[key] != new_labels[key]):
            return QUEUE
    return SKIP
