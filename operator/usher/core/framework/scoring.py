"""Score helpers shared by score plugins. Pure."""

from __future__ import annotations

from usher.core.framework.interface import MAX_NODE_SCORE
from usher.core.types import NodeName


def default_normalize(scores: dict[NodeName, int], *, reverse: bool = False) -> None:
    """kube-scheduler's DefaultNormalizeScore: scale to 0..100 by the highest score, optionally reversed.

    All zero: every node scores 0, or 100 when reversed (nothing to avoid anywhere).
    """
    highest = max(scores.values(), default=0)
    if highest == 0:
        if reverse:
            for name in scores:
                scores[name] = MAX_NODE_SCORE
        return
    for name, value in scores.items():
        scaled = MAX_NODE_SCORE * value // highest
        scores[name] = MAX_NODE_SCORE - scaled if reverse else scaled
