"""Selector and toleration semantics, as the Kubernetes API defines them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from usher.core.selectors import (
    SelectorError,
    label_selector_matches,
    match_label_pairs,
    node_selector_matches,
    pairs_match,
    tolerates,
    untolerated_taint,
)

LABELS = {"app": "web", "tier": "front", "cores": "8"}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param(None, False, id="a null selector matches nothing"),
        pytest.param({}, True, id="an empty selector matches everything"),
        pytest.param({"matchLabels": {"app": "web"}}, True, id="matchLabels equal"),
        pytest.param({"matchLabels": {"app": "db"}}, False, id="matchLabels differ"),
        pytest.param({"matchExpressions": [expr("app", "In", "web", "api")]}, True, id="In"),
        pytest.param({"matchExpressions": [expr("app", "NotIn", "web")]}, False, id="NotIn"),
        pytest.param({"matchExpressions": [expr("missing", "NotIn", "x")]}, True, id="NotIn on a missing key"),
        pytest.param({"matchExpressions": [expr("tier", "Exists")]}, True, id="Exists"),
        pytest.param({"matchExpressions": [expr("tier", "DoesNotExist")]}, False, id="DoesNotExist"),
        pytest.param(
            {"matchLabels": {"app": "web"}, "matchExpressions": [expr("tier", "In", "back")]},
            False,
            id="labels and expressions are ANDed",
        ),
    ],
)
def test_label_selectors(selector: dict[str, Any] | None, matches: bool) -> None:
    assert label_selector_matches(selector, LABELS) is matches


SELECTOR_LABELS = st.dictionaries(
    st.sampled_from(["app", "tier", "zone"]), st.sampled_from(["web", "db", ""]), max_size=3
)


@given(
    match_labels=st.none() | SELECTOR_LABELS,
    expressions=st.none() | st.just([expr("tier", "Exists")]),
    null=st.booleans(),
    labels=SELECTOR_LABELS,
)
def test_a_selector_as_label_pairs_answers_as_the_selector_does(
    match_labels: dict[str, str] | None, expressions: list[dict[str, Any]] | None, null: bool, labels: dict[str, str]
) -> None:
    selector: dict[str, Any] | None = None if null else {}
    if selector is not None and match_labels is not None:
        selector["matchLabels"] = match_labels
    if selector is not None and expressions is not None:
        selector["matchExpressions"] = expressions
    pairs = match_label_pairs(selector)
    if selector is None or expressions:
        assert pairs is None, "only a selector of matchLabels alone becomes pairs"
    else:
        assert pairs is not None
        assert pairs_match(pairs, labels) == label_selector_matches(selector, labels)


@pytest.mark.parametrize(
    ("terms", "matches"),
    [
        pytest.param([{"matchExpressions": [expr("cores", "Gt", "4")]}], True, id="Gt"),
        pytest.param([{"matchExpressions": [expr("cores", "Lt", "4")]}], False, id="Lt"),
        pytest.param([{"matchExpressions": [expr("app", "Gt", "4")]}], False, id="Gt on a non-number label"),
        pytest.param(
            [{"matchExpressions": [expr("app", "In", "db")]}, {"matchExpressions": [expr("tier", "Exists")]}],
            True,
            id="terms are ORed",
        ),
        pytest.param([{}], False, id="an empty term matches nothing"),
        pytest.param([{"matchFields": [expr("metadata.name", "In", "node-1")]}], True, id="matchFields by name"),
        pytest.param([{"matchFields": [expr("metadata.name", "NotIn", "node-1")]}], False, id="matchFields NotIn"),
    ],
)
def test_node_selector_terms(terms: list[dict[str, Any]], matches: bool) -> None:
    assert node_selector_matches({"nodeSelectorTerms": terms}, LABELS, "node-1") is matches


def test_bad_selectors_raise_a_clear_error() -> None:
    with pytest.raises(SelectorError, match="unknown operator 'Near'"):
        label_selector_matches({"matchExpressions": [expr("a", "Near")]}, LABELS)
    with pytest.raises(SelectorError, match="integer value"):
        node_selector_matches({"nodeSelectorTerms": [{"matchExpressions": [expr("cores", "Gt", "x")]}]}, LABELS, "n")


TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        pytest.param(
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True, id="exact"
        ),
        pytest.param({"key": "dedicated", "value": "gpu"}, True, id="Equal by default, any effect"),
        pytest.param({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False, id="other value"),
        pytest.param({"key": "dedicated", "operator": "Exists"}, True, id="Exists ignores the value"),
        pytest.param({"operator": "Exists"}, True, id="empty key with Exists tolerates everything"),
        pytest.param({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False, id="other effect"),
        pytest.param({"key": "other", "operator": "Exists"}, False, id="other key"),
    ],
)
def test_tolerations(toleration: dict[str, str], ok: bool) -> None:
    assert tolerates(toleration, TAINT) is ok


def test_only_the_named_effects_count() -> None:
    prefer = {"key": "soft", "effect": "PreferNoSchedule"}
    assert untolerated_taint([prefer, TAINT], [], ["NoSchedule", "NoExecute"]) == TAINT
    assert untolerated_taint([prefer], [], ["NoSchedule", "NoExecute"]) is None
