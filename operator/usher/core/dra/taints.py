"""Device taints and tolerations (DRADeviceTaints, DRADeviceTaintRules), as kube-scheduler's allocator reads them. Pure.

A device is tainted by its driver (``spec.devices[].taints`` in a ResourceSlice) or by an admin
through a DeviceTaintRule, which adds its one taint to every device its selector names (driver,
pool and device, each optional; a rule without a selector names none). kube-scheduler applies the
rules to its copies of the slices (the resource slice tracker of ``k8s.io/dynamic-resource-allocation``)
and allocates from those; :func:`apply_rules` does the same here, so the allocator sees one list of
taints per device.

A NoSchedule or NoExecute taint keeps the device from every request that does not tolerate it;
any other effect (None, which marks a taint as informational, or one a newer API adds) keeps
nothing away. A toleration matches a taint as ``resourceclaim.ToleratesTaint`` decides: its effect
(if set) and key (if set) are the taint's, and then ``Exists`` matches any value, ``Equal`` (or no
operator) only the taint's own. The allocator checks taints after the selectors and before the
claim's constraints, so a tainted device still runs the selectors (and meets their errors), and an
``allocationMode: All`` request that selects a tainted device it does not tolerate fails on that
node rather than leaving the device out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from usher.core.dra.model import (
    BLOCKING_EFFECTS,
    Claim,
    Device,
    DeviceClass,
    DeviceTaint,
    DeviceToleration,
    ModelError,
    Slice,
    parse_taint,
)

EQUAL = "Equal"
EXISTS = "Exists"


def tolerates(toleration: DeviceToleration, taint: DeviceTaint) -> bool:
    """Whether one toleration matches one taint (``resourceclaim.ToleratesTaint``)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", EQUAL):
        return toleration.value == taint.value
    return toleration.operator == EXISTS


def untolerated(taints: Sequence[DeviceTaint], tolerations: Sequence[DeviceToleration]) -> DeviceTaint | None:
    """The first taint that keeps a device from a request with these tolerations, or None if it may have it."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True, slots=True)
class TaintRule:
    """A DeviceTaintRule: the taint it adds, and which devices get it."""

    name: str
    taint: DeviceTaint
    selects: bool
    """Whether ``spec.deviceSelector`` is set: a rule without one taints no device."""
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def applies_to(self, slice_: Slice) -> bool:
        """Whether the rule may taint devices of this slice (its driver and pool match)."""
        if not self.selects:
            return False
        return (self.driver is None or self.driver == slice_.driver) and (self.pool is None or self.pool == slice_.pool)


def _optional(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ModelError(f"{field}: must be a string, got {value!r}")
    return value


def parse_taint_rule(raw: Mapping[str, Any]) -> TaintRule:
    """A resource.k8s.io/v1 DeviceTaintRule; problems raise :class:`ModelError` naming the field."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        raise ModelError("spec: must be an object")
    selector = spec.get("deviceSelector")
    if selector is not None and not isinstance(selector, Mapping):
        raise ModelError("spec.deviceSelector: must be an object")
    selector = selector or {}
    return TaintRule(
        name=str(meta.get("name", "")),
        taint=parse_taint(spec.get("taint"), "spec.taint"),
        selects=spec.get("deviceSelector") is not None,
        driver=_optional(selector.get("driver"), "spec.deviceSelector.driver"),
        pool=_optional(selector.get("pool"), "spec.deviceSelector.pool"),
        device=_optional(selector.get("device"), "spec.deviceSelector.device"),
    )


def apply_rules(slice_: Slice, rules: Iterable[TaintRule]) -> Slice:
    """The slice with every rule's taint appended to the devices it selects (the slice itself if none does).

    Rules apply in the order given; kube's tracker applies them in its informer's order, which
    only changes the order of the taints, never whether a device may be allocated.
    """
    matching = [rule for rule in rules if rule.applies_to(slice_)]
    if not matching:
        return slice_
    devices = []
    changed = False
    for device in slice_.devices:
        added = tuple(rule.taint for rule in matching if rule.device is None or rule.device == device.name)
        if added:
            changed = True
            devices.append(replace(device, taints=device.taints + added))
        else:
            devices.append(device)
    return replace(slice_, devices=tuple(devices)) if changed else slice_


Evaluate = Callable[[str, Device, str], bool]
"""``evaluate(expression, device, driver)``, as the allocator judges selectors."""


def kept_off_by_taints(
    claims: Iterable[Claim],
    slices: Iterable[Slice],
    classes: Mapping[str, DeviceClass],
    evaluate: Evaluate,
    *,
    limit: int = 10,
) -> list[dict[str, str]]:
    """For ``usher explain``: the devices the claims' requests select but may not have for an untolerated taint.

    Each entry names the claim, the request (``req`` or ``req/sub``), the device and the taint. Selectors
    that fail are passed over (the attempt itself reports them); at most ``limit`` entries.
    """
    tainted = [
        (slice_, device)
        for slice_ in slices
        for device in slice_.devices
        if any(t.effect in BLOCKING_EFFECTS for t in device.taints)
    ]
    found: list[dict[str, str]] = []
    if not tainted:
        return found
    for claim in claims:
        if claim.allocation is not None:
            continue
        for request in claim.requests:
            for sub in request.alternatives:
                name = request.result_name(sub)
                class_ = classes.get(sub.class_name)
                if class_ is None:
                    continue
                for slice_, device in tainted:
                    taint = untolerated(device.taints, sub.tolerations)
                    if taint is None or not _selects(evaluate, (*class_.selectors, *sub.selectors), device, slice_):
                        continue
                    found.append(
                        {
                            "claim": claim.key,
                            "request": name,
                            "device": f"{slice_.driver}/{slice_.pool}/{device.name}",
                            "taint": str(taint),
                        }
                    )
                    if len(found) >= limit:
                        return found
    return found


def _selects(evaluate: Evaluate, expressions: Sequence[str], device: Device, slice_: Slice) -> bool:
    try:
        return all(evaluate(expression, device, slice_.driver) for expression in expressions)
    except Exception:  # a broken selector: the attempt reports it, this is only an explanation
        return False
