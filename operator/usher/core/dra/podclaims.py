"""Which ResourceClaims a pod needs, and the index from claims back to the pods that need them. Pure.

A pod names its claims in ``spec.resourceClaims``: directly
(``resourceClaimName``) or through a template (``resourceClaimTemplateName``),
in which case kube-controller-manager creates the claim and records its
generated name in ``status.resourceClaimStatuses``. Until that status entry
exists the claim is "not created yet"; an entry whose name is null means the
claim is not needed.

The index ``namespace/claim -> pods`` answers the PreQueueingHint for claim
events in O(pods referencing the claim) instead of O(all pending pods)
(KEP-6132). Generated names are only known once the pod's status names
them, so the index follows both spec and status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from usher.core.types import PodKey


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One claim a pod needs: the claim's name, and whether a template made it."""

    claim_name: str
    from_template: bool
    entry: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The pod's ``spec.resourceClaims`` entry (a PodGroup's claim is one its pods name the same way)."""


@dataclass(frozen=True, slots=True)
class Resolution:
    """The claims a pod needs, as far as they can be named yet, and why not all of them if not."""

    claims: tuple[PodClaim, ...]
    problem: str = ""
    """Why the pod's claims cannot be resolved yet (a PreEnqueue message); empty when resolved."""


def resolve_pod_claims(pod: Mapping[str, Any]) -> Resolution:
    meta = pod.get("metadata") or {}
    statuses = {
        s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    claims: list[PodClaim] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("name", "")
        if entry.get("resourceClaimName"):
            claims.append(PodClaim(entry["resourceClaimName"], from_template=False, entry=entry))
        elif entry.get("resourceClaimTemplateName"):
            if name not in statuses:
                pod_ref = f"{meta.get('namespace')}/{meta.get('name')}"
                return Resolution(tuple(claims), f'pod "{pod_ref}": ResourceClaim not created yet')
            generated = statuses[name]
            if generated:
                claims.append(PodClaim(generated, from_template=True, entry=entry))
        else:
            return Resolution(tuple(claims), "none of the supported fields are set")
    return Resolution(tuple(claims))


def referenced_claim_names(pod: Mapping[str, Any]) -> set[str]:
    """Every claim name the pod refers to, directly or through its status (for the index)."""
    names = {
        e["resourceClaimName"]
        for e in (pod.get("spec") or {}).get("resourceClaims") or []
        if e.get("resourceClaimName")
    }
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("resourceClaimName"):
            names.add(status["resourceClaimName"])
    return names


class ClaimIndex:
    """``namespace/claim -> keys of the pods that reference it``, kept in step with pod watch events."""

    def __init__(self) -> None:
        self._pods_by_claim: dict[str, set[PodKey]] = {}
        self._claims_by_pod: dict[PodKey, set[str]] = {}

    def update_pod(self, key: PodKey, namespace: str, pod: Mapping[str, Any] | None) -> None:
        """Index (or, with ``pod`` None, unindex) one pod."""
        new = {f"{namespace}/{name}" for name in referenced_claim_names(pod)} if pod is not None else set()
        old = self._claims_by_pod.get(key, set())
        if new == old:
            return
        for claim in old - new:
            pods = self._pods_by_claim.get(claim)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._pods_by_claim[claim]
        for claim in new - old:
            self._pods_by_claim.setdefault(claim, set()).add(key)
        if new:
            self._claims_by_pod[key] = new
        else:
            self._claims_by_pod.pop(key, None)

    def pods_for(self, claim_key: str) -> frozenset[PodKey]:
        return frozenset(self._pods_by_claim.get(claim_key, ()))
