"""Kubernetes resource quantities and pod requests, computed as kube-scheduler does.

Pure. Quantities are parsed into integers: cpu in millicores, everything else
in base units rounded up (like ``resource.Quantity.Value()``), so fit checks
are exact integer comparisons. An amount beyond int64, where kube-scheduler's
arithmetic overflows, is a QuantityError like any malformed quantity.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, localcontext
from typing import Any

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
"""``resource.ParseQuantity``'s grammar: a signed decimal number, then one suffix: binary (``Ki``), decimal SI
(``m``, ``G``) or a decimal exponent (``e3``), never two."""
_MAX_EXPONENT = 2**31
"""A quantity keeps its exponent in an int32: Go wraps a larger one around (its value is then garbage)."""
_MAX_DIGITS = 100_000
"""Digits before the point a quantity may have: Go's take up to 2^31, but usher computes in Decimal's default
context, which stops at 10^999999 (sums and the x1000 of millis must not overflow it). Nothing real comes near."""
_MAX_AMOUNT = 2**63 - 1
"""kube-scheduler counts every resource in an int64 (millicores for cpu)."""

ResourceList = dict[str, int]
"""Resource name -> amount (cpu in millicores, others in base units)."""


class QuantityError(ValueError):
    """A quantity string the API server would not have accepted."""


def parse_quantity(value: str | int | float) -> Decimal:
    """Parse a Kubernetes quantity (``"100m"``, ``"1Gi"``, ``"1e3"``, ``2``) into an exact Decimal.

    Accepts what ``resource.ParseQuantity`` accepts, except an exponent beyond its int32 and numbers of more than
    `_MAX_DIGITS` digits; raises QuantityError, and nothing else, for anything else (a bool, nan, ``1e3Ki``)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"invalid quantity {_shown(value)}")
    if isinstance(value, int):
        if value.bit_length() > 4 * _MAX_DIGITS:  # more digits than that, converting it would be slow
            raise QuantityError(f"quantity {_shown(value)} is out of range: more than {_MAX_DIGITS} digits")
        return _bounded(Decimal(value), value, 0)
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"invalid quantity {_shown(value)}")
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None or not (match.group(2) or match.group(3)):
        raise QuantityError(f"invalid quantity {_shown(value)}")
    sign, whole, fraction, suffix = match.group(1), match.group(2), match.group(3) or "", match.group(4) or ""
    exponent = 0
    if suffix[:1] in ("e", "E") and suffix not in _BINARY_SUFFIXES and len(suffix) > 1:
        digits = suffix[1:].lstrip("+-").lstrip("0")
        exponent = int(suffix[1:]) if len(digits) <= 10 else _MAX_EXPONENT
        if not -_MAX_EXPONENT <= exponent < _MAX_EXPONENT:
            raise QuantityError(f"invalid quantity {_shown(value)}: exponent out of range")
        suffix = ""
    elif suffix in _DECIMAL_SUFFIXES:
        exponent, suffix = _DECIMAL_SUFFIXES[suffix].adjusted(), ""
    # Built from its digits, not by arithmetic in a context: exact whatever its size (no overflow, no rounding).
    amount = _bounded(Decimal(f"{sign}{whole or 0}.{fraction}E{exponent}"), value, 19 if suffix else 0)
    if not suffix:
        return amount
    with localcontext() as exact:
        exact.prec = len(whole) + len(fraction) + 20  # enough for the exact product
        return amount * _BINARY_SUFFIXES[suffix]


def _bounded(amount: Decimal, value: object, headroom: int) -> Decimal:
    """``amount``, unless it has `_MAX_DIGITS` digits before the point (with ``headroom`` more to come: 2**60, the
    largest binary suffix, has 19)."""
    if amount and amount.adjusted() + headroom >= _MAX_DIGITS:
        raise QuantityError(f"quantity {_shown(value)} is out of range: more than {_MAX_DIGITS} digits")
    return amount


def _shown(value: object, limit: int = 40) -> str:
    """A quantity in a message: a long one cut short (the message lands in a pod's condition and an Event)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        return f"<a {value.bit_length()}-bit integer>"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def to_amount(name: str, value: object) -> int:
    """A quantity as the integer usher compares: millicores for cpu, rounded-up units otherwise.

    Anything but a finite string or number quantity is a QuantityError (a ValueError), never another
    exception: a malformed pod is reported on that pod."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"invalid quantity {_shown(value)}")
    return _amount(name, value)


@functools.lru_cache(maxsize=4096, typed=True)
def _amount(name: str, value: str | int | float) -> int:
    """Kept per (name, quantity): every watch event of a pod parses its requests again, and a cluster's pods
    use few distinct quantities ("100m", "500Mi"), so a parse (a regex and Decimal arithmetic) is mostly a
    dictionary lookup. A malformed quantity raises every time (exceptions are not kept)."""
    quantity = parse_quantity(value)
    unit = "millicores" if name == CPU else "units"
    if quantity.copy_abs() > _MAX_AMOUNT:  # before any arithmetic: 1e999999 is a quantity too
        raise QuantityError(f"quantity {_shown(value)} is out of range: more than {_MAX_AMOUNT} {unit}")
    if name == CPU:
        sign, digits, exponent = quantity.as_tuple()
        assert isinstance(exponent, int)  # finite: parse_quantity makes no nan or infinity
        quantity = Decimal((sign, digits, exponent + 3))  # x 1000, exactly
    amount = math.ceil(quantity)
    if abs(amount) > _MAX_AMOUNT:
        raise QuantityError(f"quantity {_shown(value)} is out of range: more than {_MAX_AMOUNT} {unit}")
    return amount


def is_scalar(name: str) -> bool:
    """kube's ``IsScalarResourceName``: an extended resource (a domain-prefixed name outside ``kubernetes.io``,
    not a quota ``requests.`` name), a ``kubernetes.io/``-prefixed native resource, hugepages or an attachable
    volume count; not cpu, memory, ephemeral-storage or pods. Scoring leaves such a resource out for a pod that
    does not ask for it. (kube also requires the name to be a qualified name; the API server's validation of
    requests and of scheduler configuration already does.)"""
    if name.startswith(("hugepages-", "attachable-volumes-")):
        return True
    if "/" not in name:
        return False
    return "kubernetes.io/" in name or not name.startswith("requests.")


def resource_list(raw: Mapping[str, Any] | None) -> ResourceList:
    """Convert a ``{name: quantity}`` mapping from the API into a ResourceList."""
    if not raw:
        return {}
    return {name: to_amount(name, value) for name, value in raw.items()}


def add_into(total: ResourceList, other: Mapping[str, int]) -> None:
    """total += other, in place."""
    for name, amount in other.items():
        total[name] = total.get(name, 0) + amount


def max_into(total: ResourceList, other: Mapping[str, int]) -> None:
    """total = elementwise max(total, other), in place."""
    for name, amount in other.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _container_requests(container: Mapping[str, Any]) -> ResourceList:
    resources = container.get("resources") or {}
    requests = resource_list(resources.get("requests"))
    # The API server defaults requests to limits when only limits are given.
    for name, amount in resource_list(resources.get("limits")).items():
        requests.setdefault(name, amount)
    return requests


def _sum_requests(containers: Iterable[Mapping[str, Any]]) -> ResourceList:
    total: ResourceList = {}
    for container in containers:
        add_into(total, _container_requests(container))
    return total


def pod_requests(pod: Mapping[str, Any]) -> ResourceList:
    """The resources a pod occupies on a node, as kube-scheduler's ``PodRequests`` counts them.

    Regular containers are summed; sidecars (init containers with
    ``restartPolicy: Always``) run alongside them and are added; each
    ordinary init container runs alone next to the sidecars started before it,
    so the pod needs the maximum of the two phases. Pod-level
    ``spec.resources.requests`` override cpu/memory when set, and
    ``spec.overhead`` is added on top.
    """
    spec = pod.get("spec") or {}
    requests = _sum_requests(spec.get("containers") or [])
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for init in spec.get("initContainers") or []:
        init_requests = _container_requests(init)
        if init.get("restartPolicy") == "Always":
            add_into(requests, init_requests)
            add_into(sidecars, init_requests)
            phase = dict(sidecars)
        else:
            phase = dict(init_requests)
            add_into(phase, sidecars)
        max_into(init_peak, phase)
    max_into(requests, init_peak)
    pod_level = resource_list((spec.get("resources") or {}).get("requests"))
    for name in (CPU, MEMORY):
        if name in pod_level:
            requests[name] = pod_level[name]
    add_into(requests, resource_list(spec.get("overhead")))
    return {name: amount for name, amount in requests.items() if amount}


def format_amount(name: str, amount: int) -> str:
    """Render an amount back in a human unit for messages (``1500m``, ``2Gi``)."""
    if name == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    for suffix, factor in reversed(_BINARY_SUFFIXES.items()):
        if amount and amount % factor == 0:
            return f"{amount // factor}{suffix}"
    return str(amount)


_NANO = Decimal("1e-9")
_DECIMAL_EXPONENTS = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_NAMES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def canonical_quantity(amount: Decimal, *, binary: bool = False) -> str:
    """A quantity's canonical text, as ``resource.Quantity`` writes it (``12Gi``, ``300m``, ``1500``, ``12G``).

    Rounded up to nano units, the finest a quantity has. ``binary`` is the BinarySI format (the value was written
    with ``Ki``...``Ei``): kept for integers of at least 1024, written in DecimalSI otherwise, as Kubernetes does.
    """
    with localcontext() as exact:
        exact.prec = 80  # quantize must not run out of digits on a 64-bit amount with nine decimals
        amount = amount.quantize(_NANO, rounding="ROUND_CEILING")
    if not amount:
        return "0"
    sign = "-" if amount < 0 else ""
    magnitude = abs(amount)
    if binary and magnitude >= 1024 and magnitude == magnitude.to_integral_value():
        number, power = int(magnitude), 0
        while number % 1024 == 0 and power < len(_BINARY_NAMES) - 1:
            number //= 1024
            power += 1
        return f"{sign}{number}{_BINARY_NAMES[power]}"
    _, digits, exponent = magnitude.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{sign}{mantissa}{_DECIMAL_EXPONENTS[exponent]}"
