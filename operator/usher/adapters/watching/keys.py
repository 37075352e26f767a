"""How the watches tell objects apart: by uid against usher's LISTs, by namespace/name as the sink does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Identity = tuple[str, str]
"""(namespace, name): how the sink tells objects apart, whatever their uid."""


def identity(meta: Mapping[str, Any]) -> Identity:
    return (meta.get("namespace") or "", meta.get("name") or "")


def object_key(meta: Mapping[str, Any]) -> str:
    """What identifies one object across usher's LIST and kopf's events: its uid (never reused)."""
    uid = meta.get("uid")
    return str(uid) if uid else f"{meta.get('namespace') or ''}/{meta.get('name')}"
