"""Consumable capacity (DRAConsumableCapacity, DRAFractionalCapacityRange): what a request takes of a device. Pure.

A device with ``allowMultipleAllocations`` is shared between claims: each allocation takes part
of its ``capacity``, recorded in the result as ``consumedCapacity`` with a ``shareID``, and the
device is given out again while what its allocations took fits. What a request takes of one
capacity, as kube's allocator (``structured/internal/incubating/consumable_capacity.go``) works
it out:

- not named in the request's ``capacity.requests``: the policy's ``default``, else all of it;
- named, with no ``requestPolicy``: the amount asked;
- with ``validRange``: at least ``min``, rounded up to ``min`` plus a multiple of ``step``
  (in thousandths when DRAFractionalCapacityRange is on and every bound has an exact milli
  value, else in whole units, each bound rounded up as ``Quantity.Value()`` does);
- with ``validValues``: the first valid value at least the amount asked (else the amount).

A device fits a request when every capacity the request names exists, no amount breaks the
policy (over ``max``, off the step, not a valid value; the default always passes), and every
capacity's allocations, plus this search's, plus this request's, stay within its value. The
check runs on every device a request looks at, shared or not, as kube's does. An amount that
cannot be represented (past 2^63-1 in its units) or a negative one is an error that stops
allocation (:class:`CapacityError`), never a device passed over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import NamedTuple

from usher.core.resources import canonical_quantity

__all__ = [
    "Amount",
    "CapacityError",
    "CapacityPolicy",
    "DeviceCapacity",
    "consumed_capacity",
    "fits",
    "to_api",
]

_INT64_MAX = 2**63 - 1
_MILLI = Decimal(1000)


class Amount(NamedTuple):
    """A quantity: its exact value, and whether it was written in binary units (``Gi``), as results keep it."""

    value: Decimal
    binary: bool = False

    def __str__(self) -> str:
        return canonical_quantity(self.value, binary=self.binary)


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """A device capacity's ``requestPolicy``: at most one of ``valid_values`` and a range (``valid_min``...)."""

    default: Amount | None = None
    valid_values: tuple[Amount, ...] | None = None
    """Ascending (the API validates it)."""
    valid_min: Amount | None = None
    """``validRange.min``; a range has one."""
    valid_max: Amount | None = None
    valid_step: Amount | None = None
    has_range: bool = False


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    """One entry of a device's ``capacity``, under the name the slice gives it (requests match it exactly)."""

    name: str
    value: Amount
    policy: CapacityPolicy | None = None


class CapacityError(Exception):
    """A capacity amount allocation cannot work with; allocation stops (kube's errCapacityRequestNotRepresentable)."""


_NOT_REPRESENTABLE = "capacity request cannot be represented in the device's range arithmetic"


Consumed = dict[str, Amount]
"""Capacity name -> what one allocation takes of it."""


# ---------------------------------------------------------------- integer arithmetic as Quantity does it


def _scaled(value: Decimal, factor: Decimal) -> int:
    """``Quantity.Value()`` (factor 1) or ``MilliValue()`` (factor 1000): rounded up."""
    return int((value * factor).to_integral_value(rounding=ROUND_CEILING))


def _exact_milli(value: Decimal) -> int | None:
    """The milli value if it is exact and fits in 64 bits (kube's safeMilliValue), else None."""
    milli = value * _MILLI
    if milli != milli.to_integral_value() or abs(milli) > _INT64_MAX:
        return None
    return int(milli)


def _use_milli(policy: CapacityPolicy, fractional: bool) -> bool:
    """Milli arithmetic: DRAFractionalCapacityRange on, every bound exact in milli, and a step of at least 1m."""
    if not fractional:
        return False
    for bound in (policy.valid_min, policy.valid_max, policy.valid_step):
        if bound is not None and _exact_milli(bound.value) is None:
            return False
    step = policy.valid_step
    return step is None or _scaled(step.value, _MILLI) >= 1


def _round_up_range(requested: Amount, policy: CapacityPolicy, fractional: bool) -> Amount:
    minimum = policy.valid_min
    assert minimum is not None
    if requested.value < minimum.value:
        return minimum
    step = policy.valid_step
    if step is None:
        return requested
    if _use_milli(policy, fractional):
        asked = _exact_milli(requested.value)
        if asked is None:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {requested} is not a representable milli value")
        step_units, min_units, factor = _scaled(step.value, _MILLI), _scaled(minimum.value, _MILLI), _MILLI
    else:
        if requested.value > _INT64_MAX:
            raise CapacityError(f"{_NOT_REPRESENTABLE}: request {requested} exceeds MaxInt64")
        asked = _scaled(requested.value, Decimal(1))
        step_units, min_units, factor = _scaled(step.value, Decimal(1)), _scaled(minimum.value, Decimal(1)), Decimal(1)
    if step_units <= 0:
        return requested  # validation forbids a step of zero; kube would divide by it
    steps = -(-(asked - min_units) // step_units)
    rounded = min_units + step_units * steps
    # kube's integer path leaves a negative min (outside the API's contract) to wrap; its milli path does not.
    if (factor == _MILLI or min_units >= 0) and rounded > _INT64_MAX:
        raise CapacityError(f"{_NOT_REPRESENTABLE}: rounding request {requested} up to the next step passes MaxInt64")
    return Amount(Decimal(rounded) / factor, step.binary)


def _violates(amount: Amount, policy: CapacityPolicy | None, fractional: bool) -> bool:
    """Whether an amount breaks the policy (kube's violatesPolicy): the default never does."""
    if policy is None:
        return False
    if policy.default is not None and amount.value == policy.default.value:
        return False
    if policy.has_range:
        if policy.valid_max is not None and amount.value > policy.valid_max.value:
            return True
        step, minimum = policy.valid_step, policy.valid_min
        if step is not None and minimum is not None:
            if _use_milli(policy, fractional):
                asked = _exact_milli(amount.value)
                if asked is None:
                    return True
                units, step_units, min_units = asked, _scaled(step.value, _MILLI), _scaled(minimum.value, _MILLI)
            else:
                one = Decimal(1)
                units, step_units, min_units = (
                    _scaled(amount.value, one),
                    _scaled(step.value, one),
                    _scaled(minimum.value, one),
                )
            return step_units > 0 and (units - min_units) % step_units != 0
        return False
    if policy.valid_values:
        return all(amount.value != valid.value for valid in policy.valid_values)
    return False


def _take(requested: Amount | None, capacity: DeviceCapacity, fractional: bool) -> Amount:
    """What one request takes of one capacity (kube's calculateConsumedCapacity)."""
    policy = capacity.policy
    if requested is None:
        return policy.default if policy is not None and policy.default is not None else capacity.value
    if policy is None:
        return requested
    if policy.has_range and policy.valid_min is not None:
        return _round_up_range(requested, policy, fractional)
    if policy.valid_values is not None:
        for valid in policy.valid_values:
            if requested.value <= valid.value:
                return valid
    return requested


# ---------------------------------------------------------------- the two questions the allocator asks


def consumed_capacity(
    requests: Mapping[str, Amount] | None, capacities: Sequence[DeviceCapacity], *, fractional: bool
) -> Consumed:
    """What a request takes of each of a device's capacities. Raises :class:`CapacityError`."""
    consumed: Consumed = {}
    for capacity in capacities:
        try:
            amount = _take(requests.get(capacity.name) if requests else None, capacity, fractional)
        except CapacityError as exc:
            raise CapacityError(f"capacity {capacity.name!r}: {exc}") from None
        if amount.value < 0:
            raise CapacityError(f"capacity {capacity.name!r}: capacity value is negative")
        consumed[capacity.name] = amount
    return consumed


_NOTHING: Mapping[str, Decimal] = {}


def fits(
    requests: Mapping[str, Amount] | None,
    capacities: Sequence[DeviceCapacity],
    *,
    allocated: Mapping[str, Decimal] = _NOTHING,
    allocating: Mapping[str, Decimal] = _NOTHING,
    fractional: bool,
) -> Consumed | None:
    """What the request would take of the device, if it fits beside ``allocated`` (other claims) and ``allocating``
    (this search); None if it does not (kube's CmpRequestOverCapacity). An amount that cannot be represented raises
    :class:`CapacityError` whatever else fails, so the outcome does not depend on the order of the capacities."""
    if requests:
        names = {c.name for c in capacities}
        if any(name not in names for name in requests):
            return None  # another device may have it
    consumed = consumed_capacity(requests, capacities, fractional=fractional)
    for capacity in capacities:
        amount = consumed[capacity.name]
        if _violates(amount, capacity.policy, fractional):
            return None
        total = amount.value + allocated.get(capacity.name, 0) + allocating.get(capacity.name, 0)
        if total > capacity.value.value:
            return None
    return consumed


def to_api(consumed: Mapping[str, Amount]) -> dict[str, str]:
    """``consumedCapacity`` as a result writes it."""
    return {name: str(amount) for name, amount in consumed.items()}
