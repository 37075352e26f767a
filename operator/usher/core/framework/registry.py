"""The plugin registry: name -> factory. Duplicate names fail loudly. Pure.

The framework builder takes a ``Registry``; ``usher.core.plugins.registry``
fills one with the in-tree plugins (out-of-tree registries fill their own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from usher.core.framework.interface import Handle, Plugin

PluginFactory = Callable[[Mapping[str, Any], Handle], Plugin]


class Registry:
    """Plugin name -> factory, filled literally by ``in_tree_registry``; a name registered twice is an error."""

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"a plugin named {name!r} is already registered")
        self._factories[name] = factory

    def factory(self, name: str) -> PluginFactory:
        return self._factories[name]

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)
