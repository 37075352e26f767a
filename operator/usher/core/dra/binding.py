"""Binding conditions (DRADeviceBindingConditions): when a pod whose devices need preparing may be bound. Pure.

A device published with ``bindingConditions`` (a fabric-attached GPU, a composable device) is
allocated like any other, and the conditions are copied into its allocation result. After
PreBind has written the allocation and the reservation, the pod is bound only once every one
of those condition types is true in the claim's ``status.devices`` entry for the device (its
driver or controller sets them), as kube-scheduler's ``isClaimReadyForBinding`` decides. A true
``bindingFailureConditions`` entry fails the binding at once; so does waiting longer than
DynamicResources' ``bindingTimeout`` since the claim's ``allocationTimestamp``. Either way the
pod goes back to the queue, and the next attempt finds the claim unavailable on every node, so
PostFilter deallocates it and the pod gets devices anew.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from usher.core.dra.model import Claim

BINDING_FAILED: Final = "device binding failed"
BINDING_TIMEOUT: Final = "device binding timeout"
DEFAULT_BINDING_TIMEOUT: Final = 600.0
"""DynamicResources' ``bindingTimeout`` when not set, in seconds (kube's DynamicResourcesBindingTimeoutDefault)."""


def _results(claim: Claim) -> Sequence[Mapping[str, Any]]:
    return [r for r in ((claim.allocation or {}).get("devices") or {}).get("results") or [] if isinstance(r, Mapping)]


def has_binding_conditions(claim: Claim) -> bool:
    """Whether a device of the claim's allocation has binding conditions to wait for."""
    return any(r.get("bindingConditions") for r in _results(claim))


def _device_status(claim: Claim, result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    devices = (claim.raw.get("status") or {}).get("devices") or []
    for device in devices:
        if isinstance(device, Mapping) and all(device.get(k) == result.get(k) for k in ("driver", "pool", "device")):
            return device
    return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def binding_failure(claim: Claim) -> str:
    """The error of a true ``bindingFailureConditions`` entry of an allocated device, in kube's words, or ""."""
    for result in _results(claim):
        if not result.get("bindingConditions"):
            continue
        status = _device_status(claim, result)
        if status is None:
            continue
        for kind in result.get("bindingFailureConditions") or []:
            condition = _condition(status, kind)
            if condition is not None and condition.get("status") == "True":
                return (
                    f"{BINDING_FAILED}: claim={claim.name}, reason={condition.get('reason', '')}, "
                    f'message="{condition.get("message", "")}"'
                )
    return ""


def ready_for_binding(claim: Claim) -> bool:
    """Whether every binding condition of every allocated device is true (so with none, when allocated).

    A failure condition makes it not ready; :func:`binding_failure` says why."""
    if claim.allocation is None or binding_failure(claim):
        return False
    for result in _results(claim):
        if not result.get("bindingConditions"):
            continue
        status = _device_status(claim, result)
        if status is None:
            return False
        for kind in result["bindingConditions"]:
            condition = _condition(status, kind)
            if condition is None or condition.get("status") != "True":
                return False
    return True


def _allocated_at(claim: Claim) -> float | None:
    stamp = (claim.allocation or {}).get("allocationTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def binding_timed_out(claim: Claim, timeout: float, now: float) -> bool:
    """Whether the claim has waited for its binding conditions longer than ``timeout`` seconds since its
    ``allocationTimestamp`` (``now``: wall-clock seconds since the epoch); never without a timestamp."""
    allocated_at = _allocated_at(claim)
    if allocated_at is None or not has_binding_conditions(claim):
        return False
    return allocated_at + timeout < now


def pending_conditions(claim: Claim) -> str:
    """kube's one-line summary of the devices still waiting (``<driver=d, pool=p> dev pending=[a,b]``)."""
    parts: list[str] = []
    for result in _results(claim):
        conditions = result.get("bindingConditions") or []
        if not conditions:
            continue
        status = _device_status(claim, result) or {}
        failed = [
            kind
            for kind in result.get("bindingFailureConditions") or []
            if (_condition(status, kind) or {}).get("status") == "True"
        ]
        pending = [kind for kind in conditions if (_condition(status, kind) or {}).get("status") != "True"]
        line = f"<driver={result.get('driver')}, pool={result.get('pool')}> {result.get('device')}"
        if failed:
            line += f" failed=[{','.join(failed)}]"
        if pending:
            line += f" pending=[{','.join(pending)}]"
        parts.append(line)
    return "; ".join(parts)
