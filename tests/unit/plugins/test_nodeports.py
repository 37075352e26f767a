"""NodePorts: a pod's host ports must be free on the node."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache, NodeInfo
from usher.core.events import ActionType, ClusterEvent, Resource
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins import nodeports
from usher.core.plugins.nodeports import PRE_FILTER_KEY, REASON, NodePorts, deleted_pod_freed_a_port
from usher.core.types import Code, HostPort, PodInfo, QueueingHint

Port = tuple[int, str, str]  # (hostPort, protocol, hostIP); "" means the API default


def with_ports(pod: dict[str, Any], *ports: Port, init: bool = False) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for host_port, protocol, host_ip in ports:
        entry: dict[str, Any] = {"containerPort": 80, "hostPort": host_port}
        if protocol:
            entry["protocol"] = protocol
        if host_ip:
            entry["hostIP"] = host_ip
        entries.append(entry)
    if init:
        pod["spec"]["initContainers"] = [{"name": "init", "image": "i", "restartPolicy": "Always", "ports": entries}]
    else:
        pod["spec"]["containers"][0]["ports"] = entries
    return pod


def node_with(*taken: Port) -> NodeInfo:
    cache = Cache()
    info = cache.add_or_update_node(make_node().name("n1").obj())
    if taken:
        cache.add_or_update_pod(PodInfo.from_api(with_ports(make_pod().node("n1").obj(), *taken)))
    return info


def run(pod: PodInfo, node: NodeInfo) -> tuple[Code, str]:
    plugin, state = NodePorts(), CycleState()
    _, pre = plugin.pre_filter(state, pod, [node])
    if pre.code is Code.SKIP:
        return Code.SKIP, ""
    status = plugin.filter(state, pod, node)
    return status.code, status.message


def test_prefilter_skips_pods_without_host_ports() -> None:
    pod = PodInfo.from_api(with_ports(make_pod().obj()))
    state = CycleState()
    result, status = NodePorts().pre_filter(state, pod, [])
    assert result is None and status.code is Code.SKIP
    assert state.get(PRE_FILTER_KEY) is None


def test_prefilter_keeps_the_host_ports_for_filter() -> None:
    pod = PodInfo.from_api(with_ports(make_pod().obj(), (8080, "", "")))
    state = CycleState()
    result, status = NodePorts().pre_filter(state, pod, [])
    assert result is None and status.ok
    assert state.read(PRE_FILTER_KEY) == (HostPort("TCP", "", 8080),)


@pytest.mark.parametrize(
    ("wanted", "taken", "conflict"),
    [
        pytest.param([(8080, "", "")], [], False, id="a free node has every port"),
        pytest.param([(8080, "", "")], [(8080, "", "")], True, id="the same port on all IPs conflicts"),
        pytest.param([(8080, "", "")], [(9090, "", "")], False, id="another port does not conflict"),
        pytest.param([(8080, "UDP", "")], [(8080, "TCP", "")], False, id="the same port over another protocol is free"),
        pytest.param([(8080, "UDP", "")], [(8080, "UDP", "")], True, id="the same port over UDP conflicts"),
        pytest.param([(8080, "", "")], [(8080, "TCP", "")], True, id="an unset protocol means TCP"),
        pytest.param(
            [(8080, "", "0.0.0.0")], [(8080, "", "10.0.0.1")], True, id="0.0.0.0 conflicts with a specific IP in use"
        ),
        pytest.param(
            [(8080, "", "10.0.0.1")], [(8080, "", "0.0.0.0")], True, id="a specific IP conflicts with 0.0.0.0 in use"
        ),
        pytest.param([(8080, "", "10.0.0.1")], [(8080, "", "")], True, id="an unset host IP in use means 0.0.0.0"),
        pytest.param([(8080, "", "10.0.0.1")], [(8080, "", "10.0.0.2")], False, id="two specific IPs do not conflict"),
        pytest.param([(8080, "", "10.0.0.1")], [(8080, "", "10.0.0.1")], True, id="the same specific IP conflicts"),
        pytest.param(
            [(9090, "", ""), (8080, "", "")], [(8080, "", "")], True, id="one conflicting port of several is enough"
        ),
    ],
)
def test_filter(wanted: list[Port], taken: list[Port], conflict: bool) -> None:
    pod = PodInfo.from_api(with_ports(make_pod().obj(), *wanted))
    code, message = run(pod, node_with(*taken))
    if conflict:
        assert code is Code.UNSCHEDULABLE
        assert message == REASON == "node(s) didn't have free ports for the requested pod ports"
    else:
        assert code is Code.SUCCESS


def test_ports_of_sidecar_init_containers_count() -> None:
    pod = PodInfo.from_api(with_ports(make_pod().obj(), (8080, "", ""), init=True))
    assert run(pod, node_with((8080, "", "")))[0] is Code.UNSCHEDULABLE


def test_filter_without_prefilter_uses_the_pods_ports() -> None:
    pod = PodInfo.from_api(with_ports(make_pod().obj(), (8080, "", "")))
    assert NodePorts().filter(CycleState(), pod, node_with((8080, "", ""))).code is Code.UNSCHEDULABLE


def deleted(*ports: Port, node: str = "n1", nominated: str = "") -> dict[str, Any]:
    pod = with_ports(make_pod().obj(), *ports)
    if node:
        pod["spec"]["nodeName"] = node
    if nominated:
        pod["status"]["nominatedNodeName"] = nominated
    return pod


@pytest.mark.parametrize(
    ("gone", "hint"),
    [
        pytest.param(deleted((8080, "", "")), QueueingHint.QUEUE, id="a bound pod holding our port was deleted"),
        pytest.param(deleted((9090, "", "")), QueueingHint.QUEUE_SKIP, id="a bound pod holding another port"),
        pytest.param(deleted(), QueueingHint.QUEUE_SKIP, id="a bound pod without host ports"),
        pytest.param(
            deleted((8080, "UDP", "")), QueueingHint.QUEUE_SKIP, id="a bound pod holding our port over another protocol"
        ),
        pytest.param(
            deleted((8080, "", ""), node=""), QueueingHint.QUEUE_SKIP, id="an unscheduled pod never held a port"
        ),
        pytest.param(
            deleted((8080, "", ""), node="", nominated="n1"),
            QueueingHint.QUEUE,
            id="a pod nominated to a node held its port there",
        ),
    ],
)
def test_pod_delete_hint(gone: dict[str, Any], hint: QueueingHint) -> None:
    pod = PodInfo.from_api(with_ports(make_pod().obj(), (8080, "", "")))
    assert deleted_pod_freed_a_port(pod, gone, None) is hint


def test_registers_pod_delete_and_node_add() -> None:
    registered = {e.event: e.hint for e in NodePorts().events_to_register()}
    assert set(registered) == {
        ClusterEvent(Resource.POD, ActionType.DELETE),
        ClusterEvent(Resource.NODE, ActionType.ADD),
    }
    assert registered[ClusterEvent(Resource.NODE, ActionType.ADD)] is None  # a new node has every port free
    assert ClusterEvent(Resource.POD, ActionType.DELETE).matches(ClusterEvent(Resource.ASSIGNED_POD, ActionType.DELETE))


def test_factory_takes_no_args() -> None:
    assert nodeports.new({}, FakeHandle()).name == "NodePorts"
    with pytest.raises(PluginArgsError):
        nodeports.new({"ports": []}, FakeHandle())
