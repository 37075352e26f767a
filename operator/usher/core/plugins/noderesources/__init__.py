"""Resource plugins: NodeResourcesFit (filter + allocation score) and NodeResourcesBalancedAllocation. Pure."""

from usher.core.plugins.noderesources.balanced import NodeResourcesBalancedAllocation
from usher.core.plugins.noderesources.fit import NAME, FitArgs, NodeResourcesFit, new, parse_args

__all__ = ["NAME", "FitArgs", "NodeResourcesBalancedAllocation", "NodeResourcesFit", "new", "parse_args"]
