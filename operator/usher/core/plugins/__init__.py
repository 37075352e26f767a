"""In-tree plugins, one directory each. Pure."""
