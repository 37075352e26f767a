"""PrioritySort: higher ``spec.priority`` first; equal priority, earlier queue timestamp first. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from usher.core.framework.args import reject_unknown_args
from usher.core.framework.interface import Handle, QueueSortPlugin
from usher.core.framework.names import PRIORITY_SORT
from usher.core.queue.queuedpod import QueuedPod

NAME = PRIORITY_SORT


class PrioritySort:
    """activeQ order: higher priority first, then earlier arrival."""

    name = NAME

    def sort_key(self, queued: QueuedPod) -> tuple[int, float]:
        return (-queued.pod.priority, queued.timestamp)


def new(args: Mapping[str, Any], handle: Handle) -> PrioritySort:
    reject_unknown_args(args, set())
    return PrioritySort()


_check: type[QueueSortPlugin] = PrioritySort
