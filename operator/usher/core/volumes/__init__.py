"""Storage as the volume plugins see it: PVCs, PVs, classes, CSI objects, and the pods' claims. Pure."""
