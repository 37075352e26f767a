"""TaintToleration: untolerated NoSchedule/NoExecute taints reject a node; PreferNoSchedule ones lower its score."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache, NodeInfo
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import tainttoleration
from usher.core.plugins.tainttoleration import (
    TaintToleration,
    node_taints_now_tolerated,
    own_tolerations_changed,
)
from usher.core.types import Code, NodeName, PodInfo, QueueingHint

Taint = dict[str, str]
Toleration = dict[str, str]


def taint(key: str, effect: str, value: str = "") -> Taint:
    result = {"key": key, "effect": effect}
    if value:
        result["value"] = value
    return result


def node(name: str, *taints: Taint) -> dict[str, Any]:
    raw = make_node().name(name).obj()
    if taints:
        raw["spec"]["taints"] = list(taints)
    return raw


def node_info(raw: dict[str, Any]) -> NodeInfo:
    return Cache().add_or_update_node(raw)


def pod(*tolerations: Toleration, uid: str = "") -> PodInfo:
    builder = make_pod()
    if uid:
        builder.uid(uid)
    raw = builder.obj()
    if tolerations:
        raw["spec"]["tolerations"] = list(tolerations)
    return PodInfo.from_api(raw)


GPU = taint("dedicated", "NoSchedule", "gpu")


@pytest.mark.parametrize(
    ("taints", "tolerations", "reason"),
    [
        pytest.param([], [], None, id="an untainted node takes any pod"),
        pytest.param([GPU], [], "{dedicated: gpu}", id="an untolerated NoSchedule taint rejects"),
        pytest.param(
            [taint("evict", "NoExecute")], [], "{evict: }", id="an untolerated NoExecute taint rejects, empty value"
        ),
        pytest.param([taint("soft", "PreferNoSchedule")], [], None, id="a PreferNoSchedule taint never rejects"),
        pytest.param(
            [GPU],
            [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            None,
            id="Equal with the same value tolerates",
        ),
        pytest.param(
            [GPU],
            [{"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}],
            "{dedicated: gpu}",
            id="Equal with another value does not tolerate",
        ),
        pytest.param(
            [GPU], [{"key": "dedicated", "value": "gpu"}], None, id="an unset operator means Equal, unset effect all"
        ),
        pytest.param([GPU], [{"key": "dedicated", "operator": "Exists"}], None, id="Exists tolerates any value"),
        pytest.param([GPU], [{"operator": "Exists"}], None, id="Exists with no key tolerates every taint"),
        pytest.param(
            [GPU],
            [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}],
            "{dedicated: gpu}",
            id="a toleration for another effect does not tolerate",
        ),
        pytest.param(
            [GPU], [{"key": "other", "operator": "Exists"}], "{dedicated: gpu}", id="a toleration for another key"
        ),
        pytest.param(
            [GPU, taint("evict", "NoExecute", "now")],
            [{"key": "dedicated", "operator": "Exists"}],
            "{evict: now}",
            id="the first untolerated taint is named",
        ),
    ],
)
def test_filter(taints: list[Taint], tolerations: list[Toleration], reason: str | None) -> None:
    status = TaintToleration().filter(CycleState(), pod(*tolerations), node_info(node("n1", *taints)))
    if reason is None:
        assert status.ok
    else:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.message == f"node(s) had untolerated taint {reason}"


def scores(tolerations: list[Toleration], nodes: dict[str, list[Taint]]) -> dict[str, int]:
    plugin, state, subject = TaintToleration(), CycleState(), pod(*tolerations)
    infos = [node_info(node(name, *taints)) for name, taints in nodes.items()]
    assert plugin.pre_score(state, subject, infos).ok
    raw: dict[NodeName, int] = {}
    for info in infos:
        value, status = plugin.score(state, subject, info)
        assert status.ok
        raw[info.name] = value
    assert plugin.normalize_scores(state, subject, raw).ok
    return dict(raw)


SOFT_A = taint("a", "PreferNoSchedule")
SOFT_B = taint("b", "PreferNoSchedule")


@pytest.mark.parametrize(
    ("tolerations", "nodes", "expected"),
    [
        pytest.param(
            [],
            {"clean": [], "one": [SOFT_A], "two": [SOFT_A, SOFT_B]},
            {"clean": 100, "one": 50, "two": 0},
            id="fewer untolerated PreferNoSchedule taints score higher",
        ),
        pytest.param(
            [],
            {"x": [], "y": []},
            {"x": 100, "y": 100},
            id="no soft taint anywhere scores every node 100",
        ),
        pytest.param(
            [{"key": "a", "operator": "Exists", "effect": "PreferNoSchedule"}],
            {"clean": [], "one": [SOFT_A], "two": [SOFT_A, SOFT_B]},
            {"clean": 100, "one": 100, "two": 0},
            id="a PreferNoSchedule toleration removes its taint from the count",
        ),
        pytest.param(
            [{"key": "a", "operator": "Exists"}],
            {"one": [SOFT_A], "two": [SOFT_A, SOFT_B]},
            {"one": 100, "two": 0},
            id="a toleration with no effect also tolerates PreferNoSchedule",
        ),
        pytest.param(
            [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}],
            {"clean": [], "one": [SOFT_A]},
            {"clean": 100, "one": 0},
            id="a NoSchedule toleration does not tolerate PreferNoSchedule",
        ),
        pytest.param(
            [],
            {"clean": [], "hard": [GPU], "three": [SOFT_A, SOFT_B, taint("c", "PreferNoSchedule")]},
            {"clean": 100, "hard": 100, "three": 0},
            id="hard taints do not count for the score",
        ),
        pytest.param(
            [],
            {"one": [SOFT_A], "three": [SOFT_A, SOFT_B, taint("c", "PreferNoSchedule")]},
            {"one": 67, "three": 0},
            id="normalisation rounds 100*1/3 down before reversing",
        ),
    ],
)
def test_score(tolerations: list[Toleration], nodes: dict[str, list[Taint]], expected: dict[str, int]) -> None:
    assert scores(tolerations, nodes) == expected


def test_score_without_prescore_computes_the_tolerations() -> None:
    value, status = TaintToleration().score(CycleState(), pod(), node_info(node("n", SOFT_A, SOFT_B)))
    assert status.ok and value == 2


@pytest.mark.parametrize(
    ("old", "new", "hint"),
    [
        pytest.param(None, [], QueueingHint.QUEUE, id="an untainted node was added"),
        pytest.param(None, [GPU], QueueingHint.QUEUE_SKIP, id="a node with an untolerated taint was added"),
        pytest.param(
            None, [taint("soft", "PreferNoSchedule")], QueueingHint.QUEUE, id="a node with only a soft taint was added"
        ),
        pytest.param(
            None, [taint("ok", "NoSchedule")], QueueingHint.QUEUE, id="a node with a tolerated taint was added"
        ),
        pytest.param([GPU], [], QueueingHint.QUEUE, id="the untolerated taint was removed"),
        pytest.param(
            [GPU],
            [taint("ok", "NoSchedule")],
            QueueingHint.QUEUE,
            id="the untolerated taint was replaced by a tolerated one",
        ),
        pytest.param([GPU], [GPU, SOFT_A], QueueingHint.QUEUE_SKIP, id="the untolerated taint stays"),
        pytest.param([], [SOFT_A], QueueingHint.QUEUE_SKIP, id="the node was already acceptable"),
        pytest.param([], [GPU], QueueingHint.QUEUE_SKIP, id="an untolerated taint was added"),
    ],
)
def test_node_hint(old: list[Taint] | None, new: list[Taint], hint: QueueingHint) -> None:
    subject = pod({"key": "ok", "operator": "Exists"})
    old_node = None if old is None else node("n", *old)
    assert node_taints_now_tolerated(subject, old_node, node("n", *new)) is hint


@pytest.mark.parametrize(
    ("updated_uid", "hint"),
    [
        pytest.param("me", QueueingHint.QUEUE, id="this pod's tolerations changed"),
        pytest.param("other", QueueingHint.QUEUE_SKIP, id="another pod's tolerations changed"),
    ],
)
def test_toleration_update_hint(updated_uid: str, hint: QueueingHint) -> None:
    updated = make_pod().uid(updated_uid).obj()
    updated["spec"]["tolerations"] = [{"operator": "Exists"}]
    assert own_tolerations_changed(pod(uid="me"), make_pod().uid(updated_uid).obj(), updated) is hint


def test_registered_events() -> None:
    registered = [e.event for e in TaintToleration().events_to_register()]
    assert registered == [
        ClusterEvent(Resource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT),
        ClusterEvent(Resource.POD, ActionType.UPDATE_POD_TOLERATION),
    ]
    assert not registered[0].matches(ClusterEvent(Resource.NODE, ActionType.UPDATE_NODE_LABEL))
    assert registered[1].matches(ClusterEvent(Resource.UNSCHEDULED_POD, ActionType.UPDATE_POD_TOLERATION))


def test_factory_takes_no_args() -> None:
    assert tainttoleration.new({}, FakeHandle()).name == "TaintToleration"
    with pytest.raises(PluginArgsError):
        tainttoleration.new({"weight": 3}, FakeHandle())
