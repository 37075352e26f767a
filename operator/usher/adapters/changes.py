"""Waiting for the next watched change: what a PreBind that waits on other components is woken by.

A writer port whose PreBind waits (VolumeBinding for the PV controller, DynamicResources for binding
conditions) inherits :class:`Changes`; the state it watches calls ``notify`` on every change, and
``changed`` wakes every waiter then, so a wait costs nothing while nothing happens, and nothing polls.
"""

from __future__ import annotations

import asyncio


class Changes:
    """``notify`` on each watched change; ``changed(within)`` waits for the next one."""

    def __init__(self) -> None:
        self._changed: asyncio.Event | None = None

    def notify(self) -> None:
        """Something the waiters watch changed: wake every one."""
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self, within: float) -> bool:
        """Wait until the next change (True) or ``within`` seconds pass (False)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), within)
        except TimeoutError:
            return False
        return True
