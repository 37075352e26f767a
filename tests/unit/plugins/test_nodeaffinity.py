"""NodeAffinity: nodeSelector and required node affinity filter; preferred terms score; addedAffinity for all."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache, NodeInfo
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import nodeaffinity
from usher.core.plugins.nodeaffinity import (
    PRE_FILTER_KEY,
    REASON_CONFLICT,
    REASON_ENFORCED,
    REASON_POD,
    NodeAffinity,
    parse_args,
)
from usher.core.types import Code, NodeName, PodInfo, QueueingHint

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"

Term = dict[str, Any]


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    result: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        result["values"] = list(values)
    return result


def term(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> Term:
    result: Term = {}
    if expressions:
        result["matchExpressions"] = list(expressions)
    if fields:
        result["matchFields"] = fields
    return result


def name_in(*names: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": list(names)}


def pod(
    *terms: Term,
    selector: dict[str, str] | None = None,
    preferred: list[tuple[int, Term]] | None = None,
) -> PodInfo:
    raw = make_pod().obj()
    if selector is not None:
        raw["spec"]["nodeSelector"] = selector
    node_affinity: dict[str, Any] = {}
    if terms:
        node_affinity[REQUIRED] = {"nodeSelectorTerms": list(terms)}
    if preferred:
        node_affinity[PREFERRED] = [{"weight": w, "preference": t} for w, t in preferred]
    if node_affinity:
        raw["spec"]["affinity"] = {"nodeAffinity": node_affinity}
    return PodInfo.from_api(raw)


def raw_node(name: str = "n1", **labels: str) -> dict[str, Any]:
    builder = make_node().name(name)
    for key, value in labels.items():
        builder.label(key.replace("_", "-"), value)
    return builder.obj()


def node(name: str = "n1", **labels: str) -> NodeInfo:
    return Cache().add_or_update_node(raw_node(name, **labels))


def plugin(args: dict[str, Any] | None = None) -> NodeAffinity:
    return nodeaffinity.new(args or {}, FakeHandle())


def run_filter(subject: PodInfo, target: NodeInfo, args: dict[str, Any] | None = None) -> tuple[Code, str]:
    """PreFilter then Filter, as the framework does; a PreFilter Skip means the node is accepted."""
    affinity, state = plugin(args), CycleState()
    result, status = affinity.pre_filter(state, subject, [target])
    if status.code is Code.SKIP:
        return Code.SUCCESS, ""
    if not status.ok:
        return status.code, status.message
    if result is not None and result.node_names is not None and target.name not in result.node_names:
        return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "not in PreFilterResult"
    status = affinity.filter(state, subject, target)
    return status.code, status.message


ZONE_A = node(zone="a", cores="8", gpu="yes")


@pytest.mark.parametrize(
    ("subject", "fits"),
    [
        pytest.param(pod(), True, id="a pod without selector or affinity fits"),
        pytest.param(pod(selector={"zone": "a"}), True, id="nodeSelector matches an equal label"),
        pytest.param(pod(selector={"zone": "b"}), False, id="nodeSelector rejects another value"),
        pytest.param(pod(selector={"region": "a"}), False, id="nodeSelector rejects a missing label"),
        pytest.param(pod(selector={"zone": "a", "gpu": "no"}), False, id="every nodeSelector label must match"),
        pytest.param(pod(term(expr("zone", "In", "a", "b"))), True, id="In with the node's value"),
        pytest.param(pod(term(expr("zone", "In", "b", "c"))), False, id="In without the node's value"),
        pytest.param(pod(term(expr("zone", "NotIn", "b"))), True, id="NotIn without the node's value"),
        pytest.param(pod(term(expr("zone", "NotIn", "a"))), False, id="NotIn with the node's value"),
        pytest.param(pod(term(expr("region", "NotIn", "a"))), True, id="NotIn on a missing label matches"),
        pytest.param(pod(term(expr("gpu", "Exists"))), True, id="Exists on a present label"),
        pytest.param(pod(term(expr("tpu", "Exists"))), False, id="Exists on a missing label"),
        pytest.param(pod(term(expr("tpu", "DoesNotExist"))), True, id="DoesNotExist on a missing label"),
        pytest.param(pod(term(expr("gpu", "DoesNotExist"))), False, id="DoesNotExist on a present label"),
        pytest.param(pod(term(expr("cores", "Gt", "4"))), True, id="Gt below the node's value"),
        pytest.param(pod(term(expr("cores", "Gt", "8"))), False, id="Gt equal to the node's value"),
        pytest.param(pod(term(expr("cores", "Lt", "16"))), True, id="Lt above the node's value"),
        pytest.param(pod(term(expr("cores", "Lt", "8"))), False, id="Lt equal to the node's value"),
        pytest.param(pod(term(expr("ram", "Gt", "1"))), False, id="Gt on a missing label"),
        pytest.param(pod(term(expr("zone", "Gt", "1"))), False, id="Gt on a non-integer label"),
        pytest.param(
            pod(term(expr("zone", "In", "a"), expr("gpu", "In", "no"))), False, id="expressions of a term are ANDed"
        ),
        pytest.param(pod(term(expr("zone", "In", "b")), term(expr("gpu", "Exists"))), True, id="terms are ORed"),
        pytest.param(pod(term()), False, id="an empty term matches nothing"),
        pytest.param(
            pod(term(expr("zone", "In", "a")), selector={"gpu": "no"}),
            False,
            id="nodeSelector AND affinity: selector fails",
        ),
        pytest.param(
            pod(term(expr("zone", "In", "b")), selector={"gpu": "yes"}),
            False,
            id="nodeSelector AND affinity: affinity fails",
        ),
        pytest.param(
            pod(term(expr("zone", "In", "a")), selector={"gpu": "yes"}),
            True,
            id="nodeSelector AND affinity: both match",
        ),
        pytest.param(pod(term(fields=[name_in("n1")])), True, id="matchFields metadata.name In the node's name"),
        pytest.param(pod(term(fields=[name_in("n2")])), False, id="matchFields metadata.name In another name"),
        pytest.param(
            pod(term(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}])),
            True,
            id="matchFields metadata.name NotIn another name",
        ),
        pytest.param(
            pod(term(expr("zone", "In", "b"), fields=[name_in("n1")])),
            False,
            id="matchFields and matchExpressions of a term are ANDed",
        ),
    ],
)
def test_filter(subject: PodInfo, fits: bool) -> None:
    code, message = run_filter(subject, ZONE_A)
    if fits:
        assert code is Code.SUCCESS
    else:
        assert code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert message in (REASON_POD, "not in PreFilterResult")


def test_filter_reason_is_kubes() -> None:
    status = plugin().filter(CycleState(), pod(selector={"zone": "b"}), ZONE_A)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message == REASON_POD == "node(s) didn't match Pod's node affinity/selector"


@pytest.mark.parametrize(
    ("subject", "names", "message"),
    [
        pytest.param(pod(), None, "skip", id="a pod without selector or affinity skips the filter"),
        pytest.param(pod(selector={"zone": "a"}), None, "", id="a nodeSelector alone does not narrow"),
        pytest.param(pod(term(expr("zone", "In", "a"))), None, "", id="a term without matchFields does not narrow"),
        pytest.param(pod(term(fields=[name_in("n1")])), {"n1"}, "", id="metadata.name In narrows"),
        pytest.param(
            pod(term(expr("zone", "In", "a"), fields=[name_in("n2"), name_in("n2")])),
            {"n2"},
            "",
            id="requirements of a term intersect",
        ),
        pytest.param(
            pod(term(fields=[name_in("n1")]), term(fields=[name_in("n2")])), {"n1", "n2"}, "", id="terms unite"
        ),
        pytest.param(
            pod(term(fields=[name_in("n1")]), term(expr("zone", "In", "a"))),
            None,
            "",
            id="one term without names allows every node",
        ),
        pytest.param(
            pod(term(fields=[name_in("n1"), name_in("n2")])),
            None,
            REASON_CONFLICT,
            id="names that cannot all hold are a conflict",
        ),
    ],
)
def test_prefilter(subject: PodInfo, names: set[str] | None, message: str) -> None:
    state = CycleState()
    result, status = plugin().pre_filter(state, subject, [])
    if message == "skip":
        assert status.code is Code.SKIP and result is None
        return
    if message:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.message == message
        return
    assert status.ok
    assert state.get(PRE_FILTER_KEY) is not None
    assert (result.node_names if result else None) == (frozenset(names) if names is not None else None)


def test_conflict_reason_is_kubes() -> None:
    assert REASON_CONFLICT == "pod affinity terms conflict"


# -- malformed selectors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        pytest.param(expr("cores", "Gt", "eight"), "matchExpressions[0]", id="a non-integer Gt value"),
        pytest.param(expr("cores", "Lt", "1", "2"), "matchExpressions[0]", id="two Lt values"),
        pytest.param(expr("zone", "Near", "a"), "matchExpressions[0]", id="an unknown operator"),
        pytest.param(expr("zone", "In"), "matchExpressions[0].values", id="In without values"),
    ],
)
def test_a_malformed_required_term_alone_rejects_the_pod_at_prefilter(bad: dict[str, Any], field: str) -> None:
    subject = pod(term(bad))
    _, status = plugin().pre_filter(CycleState(), subject, [])
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "no valid term" in status.message and f"nodeSelectorTerms[0].{field}" in status.message
    # Filter alone (PreFilter disabled) must not raise either.
    assert plugin().filter(CycleState(), subject, ZONE_A).message == REASON_POD


@pytest.mark.parametrize(
    "bad_field",
    [
        pytest.param({"key": "metadata.uid", "operator": "In", "values": ["x"]}, id="an unsupported field"),
        pytest.param({"key": "metadata.name", "operator": "Exists"}, id="an unsupported field operator"),
        pytest.param(name_in("n1", "n2") | {"operator": "NotIn"}, id="NotIn with two names"),
    ],
)
def test_a_malformed_match_field_is_dropped_not_raised(bad_field: dict[str, Any]) -> None:
    subject = pod(term(fields=[bad_field]), term(expr("zone", "In", "a")))
    assert run_filter(subject, ZONE_A)[0] is Code.SUCCESS
    assert run_filter(subject, node("n2", zone="b"))[0] is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_a_malformed_term_is_dropped_and_the_others_still_match() -> None:
    subject = pod(term(expr("cores", "Gt", "eight")), term(expr("zone", "In", "a")))
    assert run_filter(subject, ZONE_A) == (Code.SUCCESS, "")
    assert run_filter(subject, node("n2", zone="b", cores="9")) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_POD)


def test_malformed_preferred_terms_fail_prescore_with_an_error() -> None:
    subject = pod(preferred=[(5, term(expr("cores", "Gt", "x")))])
    status = plugin().pre_score(CycleState(), subject, [ZONE_A])
    assert status.code is Code.ERROR and "preferredDuringSchedulingIgnoredDuringExecution[0]" in status.message
    _, score_status = plugin().score(CycleState(), subject, ZONE_A)
    assert score_status.code is Code.ERROR


# -- scoring -----------------------------------------------------------------------


def scores(subject: PodInfo, nodes: list[NodeInfo], args: dict[str, Any] | None = None) -> dict[str, int] | None:
    """Normalised scores, or None when PreScore skips the plugin."""
    affinity, state = plugin(args), CycleState()
    status = affinity.pre_score(state, subject, nodes)
    if status.code is Code.SKIP:
        return None
    assert status.ok
    raw: dict[NodeName, int] = {}
    for target in nodes:
        value, node_status = affinity.score(state, subject, target)
        assert node_status.ok
        raw[target.name] = value
    assert affinity.normalize_scores(state, subject, raw).ok
    return dict(raw)


NODES = [node("a", zone="a", disk="ssd"), node("b", zone="b", disk="ssd"), node("c", zone="c")]
SSD = term(expr("disk", "In", "ssd"))
IN_A = term(expr("zone", "In", "a"))


@pytest.mark.parametrize(
    ("subject", "args", "expected"),
    [
        pytest.param(pod(), None, None, id="no preferred terms skips scoring"),
        pytest.param(
            pod(preferred=[(20, SSD)]), None, {"a": 100, "b": 100, "c": 0}, id="a matching term scores its weight"
        ),
        pytest.param(
            pod(preferred=[(20, SSD), (60, IN_A)]),
            None,
            {"a": 100, "b": 25, "c": 0},
            id="weights of matching terms add up, then scale to the best node",
        ),
        pytest.param(
            pod(preferred=[(30, term(expr("zone", "In", "z")))]),
            None,
            {"a": 0, "b": 0, "c": 0},
            id="no node matching scores all zero",
        ),
        pytest.param(pod(preferred=[(0, SSD)]), None, None, id="a zero weight is ignored"),
        pytest.param(pod(preferred=[(10, term())]), None, None, id="an empty preference is ignored"),
        pytest.param(
            pod(),
            {"addedAffinity": {PREFERRED: [{"weight": 10, "preference": IN_A}]}},
            {"a": 100, "b": 0, "c": 0},
            id="addedAffinity preferred terms score pods without their own",
        ),
        pytest.param(
            pod(preferred=[(30, SSD)]),
            {"addedAffinity": {PREFERRED: [{"weight": 30, "preference": IN_A}]}},
            {"a": 100, "b": 50, "c": 0},
            id="addedAffinity preferred terms add to the pod's",
        ),
        pytest.param(
            pod(preferred=[(7, term(fields=[name_in("c")]))]),
            None,
            {"a": 0, "b": 0, "c": 100},
            id="a preference may name a node",
        ),
    ],
)
def test_score(subject: PodInfo, args: dict[str, Any] | None, expected: dict[str, int] | None) -> None:
    assert scores(subject, NODES, args) == expected


def test_normalisation_rounds_down() -> None:
    result = scores(pod(preferred=[(1, SSD), (2, IN_A)]), NODES)
    assert result == {"a": 100, "b": 33, "c": 0}


# -- addedAffinity ---------------------------------------------------------------------

ADDED_ZONE_A = {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": [IN_A]}}}


@pytest.mark.parametrize(
    ("subject", "target", "expected"),
    [
        pytest.param(pod(), node(zone="a"), (Code.SUCCESS, ""), id="a node matching addedAffinity takes a plain pod"),
        pytest.param(
            pod(),
            node(zone="b"),
            (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_ENFORCED),
            id="addedAffinity rejects even a pod without affinity",
        ),
        pytest.param(
            pod(selector={"zone": "c"}),
            node(zone="b"),
            (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_ENFORCED),
            id="addedAffinity is checked before the pod's own",
        ),
        pytest.param(
            pod(selector={"gpu": "yes"}),
            node(zone="a"),
            (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, REASON_POD),
            id="the pod's own selector still applies",
        ),
    ],
)
def test_added_required_affinity(subject: PodInfo, target: NodeInfo, expected: tuple[Code, str]) -> None:
    assert run_filter(subject, target, ADDED_ZONE_A) == expected
    assert REASON_ENFORCED == "node(s) didn't match scheduler-enforced node affinity"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        pytest.param({"addedAfinity": {}}, "addedAfinity", id="a misspelt top-level field"),
        pytest.param({"addedAffinity": []}, "addedAffinity", id="addedAffinity not an object"),
        pytest.param(
            {"addedAffinity": {"requiredDuringSchedulingRequiredDuringExecution": {}}},
            "addedAffinity.requiredDuringSchedulingRequiredDuringExecution",
            id="an unknown affinity field",
        ),
        pytest.param(
            {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": []}}},
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms",
            id="a required selector without terms",
        ),
        pytest.param(
            {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchLabels": {"a": "b"}}]}}},
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms[0].matchLabels",
            id="an unknown term field",
        ),
        pytest.param(
            {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": [term(expr("zone", "Near", "a"))]}}},
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]",
            id="an unknown operator",
        ),
        pytest.param(
            {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": [term(expr("cores", "Gt", "x"))]}}},
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]",
            id="a non-integer Gt value",
        ),
        pytest.param(
            {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": [term(expr("zone", "Exists", "a"))]}}},
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].values",
            id="Exists with values",
        ),
        pytest.param(
            {"addedAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"operator": "Exists"}]}]}}},
            f"addedAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].key",
            id="an expression without a key",
        ),
        pytest.param(
            {"addedAffinity": {PREFERRED: [{"weight": 101, "preference": IN_A}]}},
            f"addedAffinity.{PREFERRED}[0].weight",
            id="a weight above 100",
        ),
        pytest.param(
            {"addedAffinity": {PREFERRED: [{"weight": 1, "preference": IN_A, "extra": 1}]}},
            f"addedAffinity.{PREFERRED}[0].extra",
            id="an unknown preferred field",
        ),
        pytest.param(
            {"addedAffinity": {PREFERRED: [{"weight": 1, "preference": term(fields=[name_in("a", "b")])}]}},
            f"addedAffinity.{PREFERRED}[0].preference.matchFields[0].values",
            id="matchFields with two values",
        ),
    ],
)
def test_invalid_args_name_the_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginArgsError) as raised:
        parse_args(args)
    assert raised.value.field == field


def test_valid_args() -> None:
    parsed = parse_args(
        {
            "addedAffinity": {
                REQUIRED: {"nodeSelectorTerms": [IN_A]},
                PREFERRED: [{"weight": 5, "preference": SSD}, {"weight": 0, "preference": IN_A}],
            }
        }
    )
    assert parsed.required == (IN_A,)
    assert parsed.preferred == ((5, SSD),)
    assert parse_args({}).required is None and parse_args({"addedAffinity": None}).preferred == ()


# -- queueing hints --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "old", "new", "args", "hint"),
    [
        pytest.param(
            pod(selector={"zone": "a"}),
            None,
            raw_node(zone="a"),
            None,
            QueueingHint.QUEUE,
            id="a matching node was added",
        ),
        pytest.param(
            pod(selector={"zone": "a"}),
            None,
            raw_node(zone="b"),
            None,
            QueueingHint.QUEUE_SKIP,
            id="a node that does not match was added",
        ),
        pytest.param(
            pod(term(expr("zone", "In", "a"))),
            raw_node(zone="b"),
            raw_node(zone="a"),
            None,
            QueueingHint.QUEUE,
            id="an update made the node match",
        ),
        pytest.param(
            pod(term(expr("zone", "In", "a"))),
            raw_node(zone="a"),
            raw_node(zone="a", disk="ssd"),
            None,
            QueueingHint.QUEUE_SKIP,
            id="an update to a node that already matched",
        ),
        pytest.param(
            pod(term(expr("zone", "In", "a"))),
            raw_node(zone="a"),
            raw_node(zone="b"),
            None,
            QueueingHint.QUEUE_SKIP,
            id="an update made the node stop matching",
        ),
        pytest.param(
            pod(term(fields=[name_in("n1")])),
            None,
            raw_node("n1"),
            None,
            QueueingHint.QUEUE,
            id="the named node was added",
        ),
        pytest.param(
            pod(),
            None,
            raw_node(zone="b"),
            ADDED_ZONE_A,
            QueueingHint.QUEUE_SKIP,
            id="an added node outside addedAffinity",
        ),
        pytest.param(
            pod(),
            raw_node(zone="b"),
            raw_node(zone="a"),
            ADDED_ZONE_A,
            QueueingHint.QUEUE,
            id="an update brought the node inside addedAffinity",
        ),
        pytest.param(
            pod(term(expr("cores", "Gt", "x"))),
            None,
            raw_node(cores="9"),
            None,
            QueueingHint.QUEUE_SKIP,
            id="no node can help a pod whose only term is malformed",
        ),
    ],
)
def test_node_hint(
    subject: PodInfo, old: dict[str, Any] | None, new: dict[str, Any], args: dict[str, Any] | None, hint: QueueingHint
) -> None:
    assert plugin(args).node_now_matches(subject, old, new) is hint


def test_registered_events() -> None:
    registered = [e.event for e in plugin().events_to_register()]
    assert registered == [ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)]
    assert not registered[0].matches(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_TAINT))


@pytest.mark.parametrize("seed", range(8))
def test_answers_kept_across_cycles_equal_a_fresh_match_while_node_labels_change(seed: int) -> None:
    """Pods of a few kinds (nodeSelector, terms, both) each with labels of their own arrive while nodes are
    relabelled, added and deleted; Filter's kept answers must equal matching the terms afresh."""
    import random

    from usher.core.plugins.nodeaffinity import required_affinity

    rnd = random.Random(seed)
    cache = Cache()
    subject = plugin()
    names = [f"n{i}" for i in range(5)]

    def random_node(name: str) -> dict[str, Any]:
        labels = {k: rnd.choice(["a", "b"]) for k in ("zone", "tier") if rnd.random() < 0.7}
        return raw_node(name, **labels)

    for name in names[:3]:
        cache.add_or_update_node(random_node(name))
    kinds = [
        pod(term(expr("zone", "In", "a"))),
        pod(selector={"tier": "b"}),
        pod(term(expr("zone", "NotIn", "a"), expr("tier", "Exists")), term(fields=[name_in("n1", "n3")])),
        pod(term(expr("zone", "In", "a")), selector={"tier": "a"}),
    ]
    answers = set()
    for step in range(80):
        action = rnd.random()
        present = [n.name for n in cache.node_infos()]
        if action < 0.4:
            cache.add_or_update_node(random_node(rnd.choice(names)))
        elif action < 0.5 and present:
            cache.remove_node(rnd.choice(present))
        incoming = rnd.choice(kinds)
        raw = {**incoming.raw, "metadata": {**incoming.raw["metadata"], "name": f"p{step}", "labels": {"s": str(step)}}}
        info = PodInfo.from_api(raw)
        state = CycleState()
        subject.pre_filter(state, info, cache.node_infos())
        for target in cache.node_infos():
            code = subject.filter(state, info, target).code
            fresh = required_affinity(raw).matches(target.labels, target.name)
            assert (code is Code.SUCCESS) == fresh, f"step {step}, node {target.name}"
            answers.add(fresh)
    assert answers == {True, False}
