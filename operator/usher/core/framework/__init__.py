"""The scheduling framework: plugin protocols, plugin args, cycle state, profiles, building and running them. Pure."""
