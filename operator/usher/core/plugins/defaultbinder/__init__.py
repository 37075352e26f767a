"""DefaultBinder: bind the pod to the chosen node through the Binder port (pods/binding). Pure.

The API call itself is the adapter's: the dispatcher retries it on 429/5xx
and reports a pod already bound as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import BindPlugin, Handle
from usher.core.framework.names import DEFAULT_BINDER
from usher.core.types import NodeName, PodInfo, Status

if TYPE_CHECKING:
    from usher.core.framework.cycle_state import CycleState

NAME = DEFAULT_BINDER


class DefaultBinder:
    """Binds through the Binder port (pods/binding)."""

    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    async def bind(self, state: CycleState, pod: PodInfo, node: NodeName) -> Status:
        return await self._handle.binder.bind(pod, node)


def new(args: Mapping[str, Any], handle: Handle) -> DefaultBinder:
    reject_unknown_args(args, set())
    return DefaultBinder(handle)


_check: type[BindPlugin] = DefaultBinder
