"""Which PersistentVolumeClaims a pod uses: its ``persistentVolumeClaim`` volumes and its generic
ephemeral volumes (whose claim kube-controller-manager creates as ``<pod>-<volume>``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from usher.core.volumes.model import Claim


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One volume of a pod that is backed by a PersistentVolumeClaim."""

    volume: str
    """The pod's volume name."""
    claim: str
    """The PVC's name, in the pod's namespace."""
    ephemeral: bool
    read_only: bool = False


def pod_claim_refs(pod_raw: Mapping[str, Any]) -> list[PodClaimRef]:
    """The pod's claims, in volume order (component-helpers' ephemeral.VolumeClaimName for ephemerals)."""
    pod_name = str((pod_raw.get("metadata") or {}).get("name") or "")
    refs: list[PodClaimRef] = []
    for volume in (pod_raw.get("spec") or {}).get("volumes") or ():
        name = str(volume.get("name") or "")
        pvc = volume.get("persistentVolumeClaim")
        if pvc is not None:
            refs.append(PodClaimRef(name, str(pvc.get("claimName") or ""), False, bool(pvc.get("readOnly"))))
        elif volume.get("ephemeral") is not None:
            refs.append(PodClaimRef(name, f"{pod_name}-{name}", True))
    return refs


def ephemeral_owner_error(pod_raw: Mapping[str, Any], claim: Claim) -> str:
    """component-helpers' ephemeral.VolumeIsForPod: "" if the pod controls the claim, else why not."""
    meta = pod_raw.get("metadata") or {}
    if claim.controller_uid == meta.get("uid"):
        return ""
    return (
        f"PVC {claim.namespace}/{claim.name} was not created for pod "
        f"{meta.get('namespace')}/{meta.get('name')} (pod is not owner)"
    )
