"""The scheduling queue. Pure."""

from usher.core.queue.nominator import Nominator
from usher.core.queue.queuedpod import QueuedPod, Where
from usher.core.queue.queueing import (
    PreEnqueueReporter,
    QueueOptions,
    QueueProfile,
    QueueRecorder,
    SchedulingQueue,
    Strategy,
)

__all__ = [
    "Nominator",
    "PreEnqueueReporter",
    "QueueOptions",
    "QueueProfile",
    "QueueRecorder",
    "QueuedPod",
    "SchedulingQueue",
    "Strategy",
    "Where",
]
