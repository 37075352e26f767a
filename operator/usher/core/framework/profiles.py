"""A profile as KubeSchedulerConfiguration describes it: the plain data a framework is built from. Pure.

``usher.config`` reads these from the ``--config`` file and checks names and
types; ``building`` instantiates the plugins and sorts them into extension
points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PluginRef:
    """One entry of an ``enabled`` or ``disabled`` list."""

    name: str
    """A plugin name; in ``disabled`` lists ``*`` stands for every default plugin."""
    weight: int | None = None
    """Score weight (1..100); None: the default profile's weight, else 1."""


@dataclass(frozen=True, slots=True)
class PluginList:
    """The ``enabled`` and ``disabled`` lists of one extension point, or of ``multiPoint``."""

    enabled: tuple[PluginRef, ...] = ()
    disabled: tuple[PluginRef, ...] = ()


@dataclass(frozen=True, slots=True)
class PluginArgs:
    """One ``pluginConfig`` entry for a plugin usher implements."""

    args: Mapping[str, Any]
    """The entry's ``args``, as written (each plugin's factory parses and checks them)."""
    path: str
    """Where the entry was written (``profiles[0].pluginConfig[2]``), for error messages."""


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """One ``profiles[]`` entry: the pods with this ``schedulerName`` are scheduled with these plugins."""

    scheduler_name: str
    plugins: Mapping[str, PluginList] = field(default_factory=dict)
    """``multiPoint`` and extension point names (as the configuration spells them) -> enabled/disabled lists."""
    plugin_config: Mapping[str, PluginArgs] = field(default_factory=dict)
    """Plugin name -> its args; only plugins usher implements."""
    percentage_of_nodes_to_score: int | None = None
    """None: the top-level ``percentageOfNodesToScore`` applies."""
    path: str = "profiles[0]"
    """Where the profile was written, for error messages."""
