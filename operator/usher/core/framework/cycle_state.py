"""CycleState: per-attempt scratch space plugins share (PreFilter computes, Filter reads). Pure."""

from __future__ import annotations

from typing import Any


class CycleState:
    """Per-attempt scratch space plugins share between extension points (kube-scheduler's CycleState)."""

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter_plugins: set[str] = set()
        self.skip_score_plugins: set[str] = set()

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value a plugin wrote earlier in this cycle; KeyError if none did."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def clone(self) -> CycleState:
        """A copy for a dry run (preemption): a value with a ``clone()`` method is cloned, so PreFilter
        extensions may change it; any other value is shared and must not be modified."""
        copy = CycleState()
        copy._data = {k: v.clone() if hasattr(v, "clone") else v for k, v in self._data.items()}
        copy.skip_filter_plugins = set(self.skip_filter_plugins)
        copy.skip_score_plugins = set(self.skip_score_plugins)
        return copy
