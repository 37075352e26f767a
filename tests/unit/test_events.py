"""ClusterEvent matching and update splitting, as kube-scheduler defines them."""

from __future__ import annotations

import pytest

from tests.builders import make_node, make_pod
from usher.core.events import ActionType as A
from usher.core.events import ClusterEvent, Resource, node_update_events, pod_update_events

R = Resource
WILDCARD = ClusterEvent(R.WILDCARD, A.ALL)


@pytest.mark.parametrize(
    ("registered", "incoming", "matches"),
    [
        pytest.param(ClusterEvent(R.NODE, A.ADD), ClusterEvent(R.NODE, A.ADD), True, id="same event"),
        pytest.param(ClusterEvent(R.NODE, A.ADD), ClusterEvent(R.NODE, A.DELETE), False, id="other action"),
        pytest.param(ClusterEvent(R.NODE, A.ADD), ClusterEvent(R.POD, A.ADD), False, id="other resource"),
        pytest.param(
            ClusterEvent(R.NODE, A.UPDATE),
            ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL),
            True,
            id="a specific update matches a broad Update registration",
        ),
        pytest.param(
            ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL),
            ClusterEvent(R.NODE, A.UPDATE),
            False,
            id="a broad incoming Update does not match a narrow registration",
        ),
        pytest.param(
            ClusterEvent(R.POD, A.ADD), ClusterEvent(R.ASSIGNED_POD, A.ADD), True, id="Pod covers assigned pods"
        ),
        pytest.param(
            ClusterEvent(R.POD, A.DELETE),
            ClusterEvent(R.UNSCHEDULED_POD, A.DELETE),
            True,
            id="Pod covers unscheduled pods",
        ),
        pytest.param(
            ClusterEvent(R.ASSIGNED_POD, A.ADD),
            ClusterEvent(R.UNSCHEDULED_POD, A.ADD),
            False,
            id="AssignedPod does not cover unscheduled pods",
        ),
        pytest.param(WILDCARD, ClusterEvent(R.NODE, A.ADD), True, id="a wildcard registration matches anything"),
        pytest.param(
            ClusterEvent(R.NODE, A.ALL), WILDCARD, False, id="an incoming wildcard matches no specific registration"
        ),
        pytest.param(
            ClusterEvent(R.NODE, A.ADD | A.UPDATE_NODE_TAINT),
            ClusterEvent(R.NODE, A.UPDATE_NODE_TAINT),
            True,
            id="one of several registered bits",
        ),
    ],
)
def test_event_matching(registered: ClusterEvent, incoming: ClusterEvent, matches: bool) -> None:
    assert registered.matches(incoming) is matches


@pytest.mark.parametrize(
    ("event", "label"),
    [
        (ClusterEvent(R.NODE, A.ADD), "NodeAdd"),
        (ClusterEvent(R.ASSIGNED_POD, A.DELETE), "AssignedPodDelete"),
        (ClusterEvent(R.UNSCHEDULED_POD, A.UPDATE), "UnscheduledPodUpdate"),
        (ClusterEvent(R.NODE, A.UPDATE_NODE_LABEL), "NodeUpdateNodeLabel"),
        (ClusterEvent(R.WILDCARD, A.ALL, "UnschedulableTimeout"), "UnschedulableTimeout"),
    ],
)
def test_event_labels(event: ClusterEvent, label: str) -> None:
    assert event.label == label


def _node(**changes: object) -> dict[str, object]:
    node = make_node().name("n").label("zone", "a").condition("Ready", "True", "t1").obj()
    for path, value in changes.items():
        section, key = path.split("__")
        node[section][key] = value  # type: ignore[index]
    return node


@pytest.mark.parametrize(
    ("new", "actions"),
    [
        pytest.param(
            _node(status__conditions=[{"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"}]),
            [],
            id="a heartbeat is no event",
        ),
        pytest.param(_node(metadata__labels={"zone": "b"}), [A.UPDATE_NODE_LABEL], id="labels"),
        pytest.param(_node(spec__taints=[{"key": "k", "effect": "NoSchedule"}]), [A.UPDATE_NODE_TAINT], id="taints"),
        pytest.param(_node(status__allocatable={"cpu": "8"}), [A.UPDATE_NODE_ALLOCATABLE], id="allocatable"),
        pytest.param(
            _node(status__conditions=[{"type": "Ready", "status": "False"}]),
            [A.UPDATE_NODE_CONDITION],
            id="a condition that changed status",
        ),
        pytest.param(
            _node(metadata__labels={}, status__allocatable={"cpu": "1"}),
            [A.UPDATE_NODE_ALLOCATABLE, A.UPDATE_NODE_LABEL],
            id="two changes, two events",
        ),
    ],
)
def test_node_updates_split_into_one_event_per_change(new: dict[str, object], actions: list[A]) -> None:
    assert [e.action for e in node_update_events(_node(), new)] == actions


def test_uncordoning_is_a_taint_event_and_cordoning_is_none() -> None:
    cordoned = _node(spec__unschedulable=True)
    assert [e.action for e in node_update_events(cordoned, _node())] == [A.UPDATE_NODE_TAINT]
    assert node_update_events(_node(), cordoned) == []


def test_pod_updates_split_into_one_event_per_change() -> None:
    old = make_pod().name("p").gates("g").obj()
    new = make_pod().name("p").obj()
    new["metadata"]["labels"] = {"app": "x"}
    events = pod_update_events(old, new, assigned=False)
    assert [e.label for e in events] == [
        "UnscheduledPodUpdatePodLabel",
        "UnscheduledPodUpdatePodSchedulingGatesEliminated",
    ]


def test_a_pod_update_of_nothing_tracked_is_a_generic_update() -> None:
    pod = make_pod().name("p").obj()
    assert [e.label for e in pod_update_events(pod, pod, assigned=True)] == ["AssignedPodUpdate"]


def test_an_assigned_pod_that_shrinks_is_a_scale_down() -> None:
    old = make_pod().name("p").node("n").req(cpu="2").obj()
    new = make_pod().name("p").node("n").req(cpu="1").obj()
    assert [e.action for e in pod_update_events(old, new, assigned=True)] == [A.UPDATE_POD_SCALE_DOWN]
