"""Device selector results, remembered for as long as the devices live. Pure.

A CEL selector's answer depends only on the expression and the device it sees
(driver, attributes, capacity). Devices are frozen records that a
ResourceSlice change replaces, so the answers are kept per device identity
and expression text, across scheduling cycles, until the inventory the
devices came from is rebuilt (:meth:`SelectorResults.forget_devices`). A
DeviceClass change needs no invalidation: a changed selector is a different
text, a different key.

Errors are never remembered, so a broken selector keeps failing on every
device. An expression the evaluator refuses after an evaluation over its CPU
limit loses its remembered answers too, so it is refused everywhere from then
on, as without this cache.
"""

from __future__ import annotations

from typing import Final, Protocol

from usher.core.dra.cel import CelError, DeviceInput, SelectorEvaluator
from usher.core.dra.model import Device

__all__ = ["DEFAULT_MAX_RESULTS", "Evaluator", "SelectorResults"]

DEFAULT_MAX_RESULTS: Final = 1 << 18
"""Devices plus answers held at most (some tens of MB) before everything is forgotten."""


class Evaluator(Protocol):
    """What :class:`~usher.core.dra.cel.SelectorEvaluator` does: raises CelError for a broken selector."""

    def matches(self, expression: str, device: DeviceInput) -> bool: ...


class _DeviceEntry:
    """One device's CEL input (built once) and its selector results so far.

    Holding ``device`` keeps it alive, so no other object can take its ``id()`` while the entry exists.
    """

    __slots__ = ("device", "driver", "input", "results")

    def __init__(self, device: Device, driver: str) -> None:
        self.device = device
        self.driver = driver
        self.input = DeviceInput(
            driver=driver,
            attributes=device.attributes,
            capacity=device.capacity,
            allow_multiple_allocations=device.allow_multiple,
        )
        self.results: dict[str, bool] = {}


class SelectorResults:
    """``evaluate(expression, device, driver)`` for the allocator, remembering each answer.

    Not thread-safe. ``max_results`` bounds the memory: when the devices plus answers held reach
    it, everything is forgotten and built again as needed.
    """

    def __init__(self, evaluator: Evaluator | None = None, *, max_results: int = DEFAULT_MAX_RESULTS) -> None:
        self._cel = evaluator if evaluator is not None else SelectorEvaluator()
        self._devices: dict[int, _DeviceEntry] = {}
        self._max = max(1, max_results)
        self._size = 0
        """Devices plus answers held."""

    @property
    def held(self) -> int:
        """Devices plus answers held (what ``max_results`` bounds)."""
        return self._size

    def forget_devices(self) -> None:
        """The devices were replaced (a slice changed): what was learnt about the old ones is useless."""
        self._devices = {}
        self._size = 0

    def __call__(self, expression: str, device: Device, driver: str) -> bool:
        entry = self._devices.get(id(device))
        if entry is None or entry.driver != driver:
            entry = self._hold(_DeviceEntry(device, driver))
        result = entry.results.get(expression)
        if result is not None:
            return result
        try:
            result = self._cel.matches(expression, entry.input)
        except Exception as exc:
            self._forget_expression(expression)
            if isinstance(exc, CelError):
                raise
            raise CelError(str(exc)) from exc  # the CEL library's own failures are still the selector's fault
        if self._size >= self._max:
            entry = self._hold(_DeviceEntry(device, driver))
        entry.results[expression] = result
        self._size += 1
        return result

    def _hold(self, entry: _DeviceEntry) -> _DeviceEntry:
        if self._size >= self._max:
            self.forget_devices()
        old = self._devices.get(id(entry.device))
        if old is not None:
            self._size -= 1 + len(old.results)
        self._devices[id(entry.device)] = entry
        self._size += 1
        return entry

    def _forget_expression(self, expression: str) -> None:
        for entry in self._devices.values():
            if entry.results.pop(expression, None) is not None:
                self._size -= 1
