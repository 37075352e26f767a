"""Utilisation-to-score shapes (kube-scheduler's ``helper.FunctionShape``), for the scoring args of
NodeResourcesFit (RequestedToCapacityRatio) and VolumeBinding. Pure."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from usher.core.framework.args import PluginArgsError
from usher.core.framework.interface import MAX_NODE_SCORE

MAX_CUSTOM_PRIORITY_SCORE = 10
"""The highest ``score`` a shape point may give (kube-scheduler's MaxCustomPriorityScore)."""

Shape = tuple[tuple[int, int], ...]
"""(utilization 0..100, score 0..10) points, utilization increasing."""


def parse_shape(raw: Any, path: str) -> Shape:
    """Validated as kube-scheduler's validateFunctionShape: a non-empty list, each point in range,
    utilization strictly increasing. ``path`` names the field in errors."""
    if not isinstance(raw, list) or not raw:
        raise PluginArgsError(path, "required: a non-empty list of {utilization, score} points")
    points: list[tuple[int, int]] = []
    for i, point in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(point, dict):
            raise PluginArgsError(where, "must be an object with utilization and score")
        utilization, score = point.get("utilization"), point.get("score")
        if not isinstance(utilization, int) or isinstance(utilization, bool) or not 0 <= utilization <= 100:
            raise PluginArgsError(f"{where}.utilization", f"must be an integer in 0..100, got {utilization!r}")
        if not isinstance(score, int) or isinstance(score, bool) or not 0 <= score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise PluginArgsError(f"{where}.score", f"must be an integer in 0..10, got {score!r}")
        if points and utilization <= points[-1][0]:
            raise PluginArgsError(f"{where}.utilization", "utilization values must increase")
        points.append((utilization, score))
    return tuple(points)


def _div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as Go's."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


def shape_score(shape: Sequence[tuple[int, int]], utilization: int) -> int:
    """kube-scheduler's BuildBrokenLinearFunction over the points scaled to 0..100: piecewise linear,
    flat beyond the first and last points, integer arithmetic truncating as Go's."""
    scaled = [(u, s * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for u, s in shape]
    if utilization <= scaled[0][0]:
        return scaled[0][1]
    for (u0, s0), (u1, s1) in itertools.pairwise(scaled):
        if utilization <= u1:
            return s0 + _div((s1 - s0) * (utilization - u0), u1 - u0)
    return scaled[-1][1]
