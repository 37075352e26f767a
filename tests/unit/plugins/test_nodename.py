"""NodeName: a pod that names its node fits only that node."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache, NodeInfo
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import nodename
from usher.core.plugins.nodename import REASON, NodeName, added_node_is_the_requested_one
from usher.core.types import Code, PodInfo, QueueingHint


def node_info(node: dict[str, Any]) -> NodeInfo:
    cache = Cache()
    return cache.add_or_update_node(node)


def pod_asking_for(node_name: str) -> PodInfo:
    pod = make_pod().obj()
    if node_name:
        pod["spec"]["nodeName"] = node_name
    return PodInfo.from_api(pod)


@pytest.mark.parametrize(
    ("requested", "node", "fits"),
    [
        pytest.param("", "n1", True, id="a pod naming no node fits any node"),
        pytest.param("n1", "n1", True, id="a pod fits the node it names"),
        pytest.param("n1", "n2", False, id="a pod does not fit another node"),
    ],
)
def test_filter(requested: str, node: str, fits: bool) -> None:
    status = NodeName().filter(CycleState(), pod_asking_for(requested), node_info(make_node().name(node).obj()))
    assert status.ok is fits
    if not fits:
        assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.message == REASON == "node(s) didn't match the requested node name"


@pytest.mark.parametrize(
    ("requested", "added", "hint"),
    [
        pytest.param("n1", "n1", QueueingHint.QUEUE, id="the requested node was added"),
        pytest.param("n1", "n2", QueueingHint.QUEUE_SKIP, id="another node was added"),
        pytest.param("", "n2", QueueingHint.QUEUE, id="any added node helps a pod naming none"),
    ],
)
def test_node_add_hint(requested: str, added: str, hint: QueueingHint) -> None:
    assert added_node_is_the_requested_one(pod_asking_for(requested), None, make_node().name(added).obj()) is hint


def test_registers_only_node_add() -> None:
    events = [e.event for e in NodeName().events_to_register()]
    assert events == [ClusterEvent(Resource.NODE, ActionType.ADD)]
    assert events[0].label == "NodeAdd"


def test_factory_takes_no_args() -> None:
    assert nodename.new({}, FakeHandle()).name == "NodeName"
    with pytest.raises(PluginArgsError) as raised:
        nodename.new({"nodeName": "x"}, FakeHandle())
    assert raised.value.field == "nodeName"
