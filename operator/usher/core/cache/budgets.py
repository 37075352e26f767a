"""PodDisruptionBudgets (policy/v1) as preemption reads them. Pure.

kube-scheduler's DefaultPreemption counts, per victim, the budgets of its
namespace whose selector matches it: a budget with no disruption left makes
the victim a violating one, unless the pod is already in the budget's
``status.disruptedPods`` (its eviction was counted before). Only the fields
that decision reads are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.selectors import label_selector_matches


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """One PodDisruptionBudget: its selector, the disruptions it allows now, and the pods already disrupted."""

    namespace: str
    name: str
    selector: Mapping[str, Any] | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = field(default_factory=frozenset)
    """Names of pods whose disruption the budget has counted already."""

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> DisruptionBudget:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            selector=spec.get("selector"),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            disrupted_pods=frozenset((status.get("disruptedPods") or {}).keys()),
        )

    def selects(self, labels: Mapping[str, str]) -> bool:
        """kube-scheduler: a nil or empty selector selects nothing (unlike a pod's label selector)."""
        selector = self.selector
        if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            return False
        return label_selector_matches(selector, labels)
