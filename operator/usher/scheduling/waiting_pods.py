"""Pods held at Permit: the one owner of every Permit wait (kube-scheduler's waiting_pods_map.go).

A pod whose Permit plugins answered Wait is held here between its scheduling
cycle and its binding cycle. Each plugin that answered Wait must allow it;
one rejection, or the timeout the binding cycle applies, ends the wait. The
binding cycle awaits the future ``hold`` returns and releases the pod when
the wait ends, however it ends.
"""

from __future__ import annotations

import asyncio

from usher.core.types import Code, PodKey, Status


class WaitingPods:
    """Pods waiting at Permit, each with the plugins that have not allowed it yet."""

    def __init__(self) -> None:
        self._pods: dict[PodKey, tuple[asyncio.Future[Status], set[str]]] = {}

    def hold(self, key: PodKey, plugins: set[str]) -> asyncio.Future[Status]:
        """Start waiting for ``plugins``; the future resolves with Success or the first rejection."""
        future: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        self._pods[key] = (future, set(plugins))
        return future

    def release(self, key: PodKey, future: asyncio.Future[Status]) -> None:
        """The wait behind ``future`` ended; a later pod of the same name waiting under the key stays."""
        held = self._pods.get(key)
        if held is not None and held[0] is future:
            del self._pods[key]

    def allow(self, key: PodKey, plugin: str) -> None:
        held = self._pods.get(key)
        if held is None or held[0].done():
            return
        held[1].discard(plugin)
        if not held[1]:
            held[0].set_result(Status())

    def reject(self, key: PodKey, plugin: str, message: str) -> None:
        held = self._pods.get(key)
        if held is not None and not held[0].done():
            held[0].set_result(Status(Code.UNSCHEDULABLE, (message,), plugin))

    def __contains__(self, key: object) -> bool:
        return key in self._pods
