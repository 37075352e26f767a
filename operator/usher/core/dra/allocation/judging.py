"""Running a request's selectors on a device, and the two ways an allocation stops early. Pure.

The first descent (:mod:`.descent`) and the search (:mod:`.search`) judge devices alike: class
selectors, then request selectors, each answer kept in the request's memo so that no device is
judged twice, and the deadline checked before a selector runs. A selector that fails takes the
memo's answers that relied on it along and raises ``AbortError``, which the descent and the
search also raise for an invalid pool or an impossible claim (an Error outcome: no node can do
better); a passed deadline is ``TimedOutError`` (Unschedulable). :func:`.allocating.allocate`
turns both into outcomes.
"""

from __future__ import annotations

from collections.abc import Callable

from usher.core.dra.allocation.planning import ClaimPlan, MatchMemo, PlannedRequest
from usher.core.dra.allocation.pools import Candidate
from usher.core.dra.model import Device
from usher.core.dra.taints import untolerated

Evaluate = Callable[[str, Device, str], bool]
"""``evaluate(expression, device, driver)``: a CEL selector's result; raises for a CEL error."""


class AbortError(Exception):
    """Allocation cannot continue anywhere: an Error outcome."""


class TimedOutError(Exception):
    """The deadline passed: this node is Unschedulable, others may still be tried."""


class Judge:
    """Runs a request's selectors on a device the request has no answer for yet."""

    __slots__ = ("deadline", "evaluate", "memo", "now")

    def __init__(self, evaluate: Evaluate, memo: MatchMemo, deadline: float | None, now: Callable[[], float]) -> None:
        self.evaluate = evaluate
        self.memo = memo
        self.deadline = deadline
        self.now = now

    def check_deadline(self) -> None:
        if self.deadline is not None and self.now() > self.deadline:
            raise TimedOutError

    def selectable(self, claim: ClaimPlan, request: PlannedRequest, candidate: Candidate) -> bool:
        """Class selectors, then request selectors (cached per device for the request, as kube does), then, but
        not for an ``All`` request, the device's taints: kube's allocator checks them after the selectors, so a
        tainted device still meets a selector's error, and for an ExactCount request an untolerated taint only
        passes the device over."""
        cached = request.matches.get(candidate)
        if cached is not None:
            return cached
        device = candidate.device
        matches = not device.unselectable
        if matches:
            self.check_deadline()
        driver = candidate.id.driver
        # The class's selectors first, then the request's: the first false one decides.
        for of_class, selectors in ((True, request.class_.selectors), (False, request.selectors)):
            if not matches:
                break
            for i, expression in enumerate(selectors):
                try:
                    if device.unsupported_attribute:  # kube's DeviceMatches cannot give the device to CEL
                        raise ValueError(f"attribute {device.unsupported_attribute}: unsupported attribute value")
                    if not self.evaluate(expression, device, driver):
                        matches = False
                        break
                except Exception as exc:
                    self.memo.forget(expression)
                    where = (
                        f"class {request.class_.name}"
                        if of_class
                        else f"claim {claim.claim.key}, request {request.name}"
                    )
                    raise AbortError(
                        f"{where}: selector #{i} {expression!r} on device {candidate.id}: CEL runtime error: {exc}"
                    ) from exc
        if matches and device.taints and not request.all_mode and untolerated(device.taints, request.tolerations):
            matches = False
        request.matches[candidate] = matches
        return matches
