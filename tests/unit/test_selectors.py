"""Selector and toleration semantics, as the Kubernetes API defines them."""

from __future__ import annotations

from typing import Any

import pytest

from usher.core.selectors import (
    SelectorError,
    label_selector_matches,
    node_selector_matches,
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
