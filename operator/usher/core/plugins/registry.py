"""The plugin registry: name -> factory. Duplicate names fail loudly. Pure."""

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


def in_tree_registry() -> Registry:
    """Every plugin usher ships, registered literally (no import-time side effects)."""
    from usher.core.plugins import (
        defaultbinder,
        dynamicresources,
        interpodaffinity,
        nodeaffinity,
        nodename,
        nodeports,
        noderesources,
        nodeunschedulable,
        podtopologyspread,
        queuesort,
        schedulinggates,
        tainttoleration,
    )
    from usher.core.plugins.noderesources import balanced

    registry = Registry()
    for module in (
        schedulinggates,
        queuesort,
        nodeunschedulable,
        nodename,
        tainttoleration,
        nodeaffinity,
        nodeports,
        noderesources,
        podtopologyspread,
        interpodaffinity,
        dynamicresources,
        balanced,
        defaultbinder,
    ):
        registry.register(module.NAME, module.new)
    return registry
