"""Plugin args: the error every plugin's args parsing raises, and the unknown-field check. Pure.

Apart from the registry on purpose: the registry imports every plugin, so a
plugin importing anything from it would close a cycle. This module imports
nothing from usher.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?$")


def go_duration(value: Any) -> float | None:
    """A Go duration as ``metav1.Duration`` writes it (``15s``, ``1m30s``, ``500ms``) in seconds; None if it is
    not one."""
    match = _DURATION.match(value) if isinstance(value, str) and value else None
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


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
