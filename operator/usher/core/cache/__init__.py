"""The scheduler's view of nodes and of the pods on them, including pods it has assumed.

Pure.
"""

from usher.core.cache.caching import Cache
from usher.core.cache.nodeinfo import NodeInfo

__all__ = ["Cache", "NodeInfo"]
