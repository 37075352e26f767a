"""Plugin args: the error every plugin's args parsing raises, the unknown-field check, and Go durations. Pure.

Apart from the registry on purpose: the registry imports every plugin, so a
plugin importing anything from it would close a cycle. This module imports
nothing from usher.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

_UNIT_NANOSECONDS = {
    "ns": 1,
    "us": 10**3,
    "\u00b5s": 10**3,  # µ: MICRO SIGN
    "\u03bcs": 10**3,  # μ: GREEK SMALL LETTER MU
    "ms": 10**6,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_DURATION_PART = re.compile(r"([0-9]*)(\.[0-9]*)?([^0-9.]*)")
_MAX_NANOSECONDS = 2**63
"""A ``time.Duration`` is an int64 of nanoseconds: at most 2^63 - 1 of them, or 2^63 negative."""
_MAX_DIGITS = 20
"""More integer digits than this is beyond any int64, whatever the unit (and keeps ``int()`` cheap)."""
_FRACTION_DIGITS = 30
"""Digits of a fraction that can still change a nanosecond; Go reads the rest and drops them."""


def go_duration(value: Any) -> float | None:
    """A Go duration as ``time.ParseDuration`` reads it (``metav1.Duration``: ``15s``, ``1m30s``, ``1.5h``,
    ``500ms``, ``-1s``, ``0``) in seconds; None where Go refuses it: not a string, a missing or unknown unit, or
    beyond the ±292 years an int64 of nanoseconds holds. The sign is kept: each caller checks its own range."""
    if not isinstance(value, str):
        return None
    text = value
    negative = text.startswith("-")
    if text[:1] in ("-", "+"):
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        return None
    nanoseconds = 0
    while text:
        match = _DURATION_PART.match(text)
        assert match is not None  # every part of the pattern may be empty
        whole, fraction, unit = match.group(1), (match.group(2) or ".")[1:], match.group(3)
        if (not whole and not fraction) or unit not in _UNIT_NANOSECONDS:
            return None
        significant = whole.lstrip("0")
        if len(significant) > _MAX_DIGITS:
            return None
        scale = _UNIT_NANOSECONDS[unit]
        digits = fraction[:_FRACTION_DIGITS]
        nanoseconds += int(significant or 0) * scale + math.floor(Fraction(int(digits or 0) * scale, 10 ** len(digits)))
        if nanoseconds > _MAX_NANOSECONDS:
            return None
        text = text[match.end() :]
    if not negative and nanoseconds == _MAX_NANOSECONDS:
        return None
    seconds = float(Fraction(nanoseconds, 10**9))
    return -seconds if negative else seconds


class PluginArgsError(ValueError):
    """Invalid pluginConfig args; ``field`` is the path inside ``args`` (``scoringStrategy.type``), or empty."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


def reject_unknown_args(args: Mapping[str, Any], known: set[str]) -> None:
    """Refuse any key of ``args`` outside ``known``, as kube-scheduler's strict decoding of its Args types does."""
    for key in args:
        if key not in known:
            raise PluginArgsError(key, f"unknown field (known: {', '.join(sorted(known)) or 'none'})")
