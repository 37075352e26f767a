"""Score helpers shared by score plugins. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from usher.core.framework.interface import MAX_NODE_SCORE, BatchScoreNormalizer
from usher.core.types import SUCCESS, NodeName, PodInfo, Status

if TYPE_CHECKING:
    from usher.core.framework.cycle_state import CycleState


def default_normalize(scores: list[int], *, reverse: bool = False) -> None:
    """kube-scheduler's DefaultNormalizeScore, in place: scale to 0..100 by the highest score, optionally
    reversed.

    All zero: every node scores 0, or 100 when reversed (nothing to avoid anywhere).
    """
    highest = max(scores, default=0)
    if highest == 0:
        if reverse:
            scores[:] = [MAX_NODE_SCORE] * len(scores)
        return
    if reverse:
        scores[:] = [MAX_NODE_SCORE - MAX_NODE_SCORE * value // highest for value in scores]
    else:
        scores[:] = [MAX_NODE_SCORE * value // highest for value in scores]


def normalize_mapping(
    normalizer: BatchScoreNormalizer, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]
) -> Status:
    """``normalize_scores`` of a plugin that rescales lists (``normalize_score_list``): the same on a dict."""
    names = list(scores)
    values = list(scores.values())
    status = normalizer.normalize_score_list(state, pod, names, values)
    if status.ok:
        scores.update(zip(names, values, strict=True))
    return status


class DefaultNormalized:
    """A score plugin's NormalizeScore as kube-scheduler's ``helper.DefaultNormalizeScore``: scaled to 0..100 by
    the highest score, reversed when ``reverse_scores`` (a high raw score is a node to avoid)."""

    reverse_scores: ClassVar[bool] = False

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: dict[NodeName, int]) -> Status:
        names, values = list(scores), list(scores.values())
        default_normalize(values, reverse=self.reverse_scores)
        scores.update(zip(names, values, strict=True))
        return SUCCESS

    def normalize_score_list(
        self, state: CycleState, pod: PodInfo, names: Sequence[NodeName], scores: list[int]
    ) -> Status:
        default_normalize(scores, reverse=self.reverse_scores)
        return SUCCESS
