"""Utilisation-to-score shapes, as kube-scheduler's BuildBrokenLinearFunction computes them."""

from __future__ import annotations

import pytest

from usher.core.framework.args import PluginArgsError
from usher.core.plugins.shapes import parse_shape, shape_score


@pytest.mark.parametrize(
    ("shape", "utilization", "score"),
    [
        (((0, 10), (100, 0)), 0, 100),
        (((0, 10), (100, 0)), 33, 67),
        (((0, 10), (100, 0)), 100, 0),
        (((10, 0), (50, 10)), 0, 0),
        (((10, 0), (50, 10)), 90, 100),
        # A falling segment whose slope does not divide evenly truncates toward zero, as Go does:
        # 100 + (-100 * 1) / 3 = 100 - 33 = 67 (floor division would give 66).
        (((0, 10), (3, 0)), 1, 67),
        (((0, 0), (3, 10)), 1, 33),
    ],
    ids=[
        "at the first point",
        "between points, falling",
        "at the last point",
        "below the first point: flat",
        "beyond the last point: flat",
        "a falling slope truncates toward zero",
        "a rising slope truncates toward zero",
    ],
)
def test_shape_score_is_kube_schedulers_broken_linear_function(
    shape: tuple[tuple[int, int], ...], utilization: int, score: int
) -> None:
    assert shape_score(shape, utilization) == score


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "shape"),
        ([{"utilization": 101, "score": 1}], "shape[0].utilization"),
        ([{"utilization": 0, "score": 11}], "shape[0].score"),
        ([{"utilization": 50, "score": 1}, {"utilization": 50, "score": 2}], "shape[1].utilization"),
    ],
    ids=["empty", "utilization above 100", "score above 10", "utilization not increasing"],
)
def test_an_invalid_shape_names_the_field(raw: list[dict[str, int]], field: str) -> None:
    with pytest.raises(PluginArgsError) as caught:
        parse_shape(raw, "shape")
    assert caught.value.field == field
