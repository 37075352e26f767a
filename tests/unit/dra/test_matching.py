"""Selector answers remembered per device: what is kept, what is forgotten and when."""

from __future__ import annotations

import pytest

from tests.unit.dra.builders import DRIVER, make_slice
from usher.core.dra.cel import CelError, DeviceInput, SelectorEvaluator
from usher.core.dra.matching import SelectorResults
from usher.core.dra.model import Device, parse_slice

A100 = f'device.attributes["{DRIVER}"].model == "a100"'


class CountingCel:
    """The real evaluator, counting evaluations; ``failing`` expressions raise as a refused one does."""

    def __init__(self) -> None:
        self.cel = SelectorEvaluator()
        self.calls = 0
        self.failing: set[str] = set()

    def matches(self, expression: str, device: DeviceInput) -> bool:
        self.calls += 1
        if expression in self.failing:
            raise CelError("refused: an earlier evaluation took too long")
        return self.cel.matches(expression, device)


def devices(*models: str) -> tuple[Device, ...]:
    builder = make_slice().node("n1")
    for i, model in enumerate(models):
        builder.device(f"d{i}", model=model)
    return parse_slice(builder.obj()).devices


def test_each_expression_is_evaluated_once_per_device() -> None:
    cel = CountingCel()
    results = SelectorResults(cel)
    a100, h100 = devices("a100", "h100")
    for _ in range(3):
        assert results(A100, a100, DRIVER) is True
        assert results(A100, h100, DRIVER) is False
        assert results("true", a100, DRIVER) is True
    assert cel.calls == 3


def test_replaced_devices_are_judged_again_after_forget_devices() -> None:
    cel = CountingCel()
    results = SelectorResults(cel)
    [old] = devices("h100")
    assert results(A100, old, DRIVER) is False
    # The slice changed: the plugin rebuilds its inventory (new Device objects) and forgets the old ones.
    [new] = devices("a100")
    results.forget_devices()
    assert results(A100, new, DRIVER) is True
    assert results.held == 2  # the new device and its one answer
    assert cel.calls == 2


def test_another_driver_for_the_same_device_is_judged_again() -> None:
    results = SelectorResults(CountingCel())
    [device] = devices("a100")
    assert results(f'device.driver == "{DRIVER}"', device, DRIVER) is True
    assert results(f'device.driver == "{DRIVER}"', device, "other.io") is False


def test_errors_are_not_remembered_and_take_the_expressions_answers_along() -> None:
    cel = CountingCel()
    results = SelectorResults(cel)
    first, second = devices("a100", "a100")
    assert results(A100, first, DRIVER) is True
    cel.failing = {A100}
    with pytest.raises(CelError, match="refused"):
        results(A100, second, DRIVER)
    with pytest.raises(CelError, match="refused"):
        results(A100, first, DRIVER)  # refused everywhere from then on, as without the cache
    assert cel.calls == 3


def test_library_failures_become_cel_errors() -> None:
    class Broken:
        def matches(self, expression: str, device: DeviceInput) -> bool:
            raise OverflowError("int too big")

    [device] = devices("a100")
    with pytest.raises(CelError, match="int too big"):
        SelectorResults(Broken())("true", device, DRIVER)


@pytest.mark.parametrize("limit", [1, 2, 5, 8])
def test_memory_is_bounded(limit: int) -> None:
    cel = CountingCel()
    results = SelectorResults(cel, max_results=limit)
    many = devices(*("a100" for _ in range(6)))
    for device in many:
        for expression in ("true", "false", A100):
            assert results(expression, device, DRIVER) is (expression != "false")
            assert results.held <= max(limit, 2)
    assert cel.calls == 18
