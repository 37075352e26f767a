"""The in-tree registry: every plugin usher ships, registered by name. Pure."""

from __future__ import annotations

from usher.core.framework.registry import Registry


def in_tree_registry() -> Registry:
    """Every plugin usher ships, registered literally (no import-time side effects)."""
    from usher.core.plugins import (
        defaultbinder,
        defaultpreemption,
        dynamicresources,
        gangscheduling,
        imagelocality,
        interpodaffinity,
        nodeaffinity,
        nodename,
        nodeports,
        noderesources,
        nodeunschedulable,
        nodevolumelimits,
        podtopologyspread,
        queuesort,
        schedulinggates,
        tainttoleration,
        volumebinding,
        volumerestrictions,
        volumezone,
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
        volumerestrictions,
        nodevolumelimits,
        volumebinding,
        volumezone,
        podtopologyspread,
        interpodaffinity,
        dynamicresources,
        defaultpreemption,
        balanced,
        imagelocality,
        defaultbinder,
        gangscheduling,
    ):
        registry.register(module.NAME, module.new)
    return registry
