"""The scheduling framework: plugin protocols, cycle state, registry, runtime and profiles. Pure."""
