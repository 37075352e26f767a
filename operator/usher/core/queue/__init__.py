"""The scheduling queue. Pure."""

from usher.core.queue.queueing import QueuedPod, SchedulingQueue

__all__ = ["QueuedPod", "SchedulingQueue"]
