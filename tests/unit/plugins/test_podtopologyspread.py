"""PodTopologySpread against kube-scheduler's semantics (score vectors are kube's own test cases)."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.core.cache import Cache, NodeInfo
from usher.core.framework.args import PluginArgsError
from usher.core.framework.cycle_state import CycleState
from usher.core.plugins.podtopologyspread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
    new,
    parse_args,
)
from usher.core.plugins.podtopologyspread.filtering import compute_pre_filter_state
from usher.core.plugins.podtopologyspread.scoring import compute_pre_score_state, score_node
from usher.core.types import Code, NodeName, PodInfo, PodKey, QueueingHint, Status

HOST = "kubernetes.io/hostname"
ZONE = "zone"
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
NO_SCHEDULE = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


# -- builders -------------------------------------------------------------------


def node(name: str, *, zone: str | None = None, host: bool = True, taints: Sequence[Any] = (), **labels: str) -> Any:
    builder = make_node().name(name)
    if host:
        builder.label(HOST, name)
    if zone is not None:
        builder.label(ZONE, zone)
    for key, value in labels.items():
        builder.label(key, value)
    obj = builder.obj()
    if taints:
        obj["spec"]["taints"] = list(taints)
    return obj


def pod(
    name: str = "p",
    *,
    on: str | None = None,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    spread: Sequence[dict[str, Any]] = (),
    terminating: bool = False,
    uid: str | None = None,
    **spec: Any,
) -> Any:
    builder = make_pod().name(name).namespace(namespace)
    if uid is not None:
        builder.uid(uid)
    if on is not None:
        builder.node(on)
    obj = builder.obj()
    obj["metadata"]["labels"] = dict(labels if labels is not None else {"foo": ""})
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if spread:
        obj["spec"]["topologySpreadConstraints"] = list(spread)
    obj["spec"].update(spec)
    return obj


def hard(max_skew: int, key: str, selector: Any = FOO, **extra: Any) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector,
    } | (extra)


def soft(max_skew: int, key: str, selector: Any = FOO, **extra: Any) -> dict[str, Any]:
    return hard(max_skew, key, selector, **extra) | {"whenUnsatisfiable": "ScheduleAnyway"}


def cluster(nodes: Sequence[Any], pods: Sequence[Any] = ()) -> list[NodeInfo]:
    cache = Cache()
    for raw in nodes:
        cache.add_or_update_node(raw)
    for raw in pods:
        cache.add_or_update_pod(PodInfo.from_api(raw))
    return cache.node_infos()


def filter_all(plugin: PodTopologySpread, incoming: Any, nodes: list[NodeInfo]) -> dict[str, Status]:
    """Every node's Filter verdict, after PreFilter (a Skip means Filter is never called)."""
    state, info = CycleState(), PodInfo.from_api(incoming)
    _, status = plugin.pre_filter(state, info, nodes)
    if status.code is Code.SKIP:
        return {n.name: Status() for n in nodes}
    assert status.ok, status
    one_by_one = {n.name: plugin.filter(state, info, n) for n in nodes}
    batch = plugin.filter_nodes(state, info, nodes)
    assert batch == [None if verdict.ok else verdict for verdict in one_by_one.values()]
    return one_by_one


def feasible(plugin: PodTopologySpread, incoming: Any, nodes: list[NodeInfo]) -> set[str]:
    return {name for name, status in filter_all(plugin, incoming, nodes).items() if status.ok}


def scores(
    plugin: PodTopologySpread, incoming: Any, nodes: list[NodeInfo], candidates: Sequence[str] | None = None
) -> dict[str, int] | None:
    """Normalised scores of the candidate nodes (all by default); None when PreScore skips."""
    state, info = CycleState(), PodInfo.from_api(incoming)
    plugin.pre_filter(state, info, nodes)
    scored = [n for n in nodes if candidates is None or n.name in candidates]
    status = plugin.pre_score(state, info, scored)
    if status.code is Code.SKIP:
        return None
    assert status.ok, status
    result: dict[NodeName, int] = {}
    for n in scored:
        value, score_status = plugin.score(state, info, n)
        assert score_status.ok
        result[n.name] = value
    batch, batch_status = plugin.score_nodes(state, info, scored)
    assert batch_status.ok and batch == list(result.values())
    assert plugin.normalize_scores(state, info, result).ok
    return {str(name): value for name, value in result.items()}


# -- Filter ---------------------------------------------------------------------

ZONES = [node("a", zone="z1"), node("b", zone="z1"), node("x", zone="z2")]
THREE_ZONES_SSD = [node("a", zone="z1", disk="ssd"), node("x", zone="z2", disk="ssd"), node("c", zone="z3")]
THREE_ZONES_TAINTED = [node("a", zone="z1"), node("x", zone="z2"), node("c", zone="z3", taints=[NO_SCHEDULE])]
ONE_IN_A = [pod("e1", on="a")]
ONE_IN_A_AND_X = [pod("e1", on="a"), pod("e2", on="x")]
TOLERATE_GPU = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
SSD_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]
        }
    }
}


@pytest.mark.parametrize(
    ("nodes", "existing", "incoming", "expected"),
    [
        pytest.param(ZONES, ONE_IN_A, pod(spread=[hard(1, ZONE)]), {"x"}, id="maxSkew 1 admits only the emptier zone"),
        pytest.param(
            ZONES, ONE_IN_A, pod(spread=[hard(2, ZONE)]), {"a", "b", "x"}, id="maxSkew 2 tolerates a skew of 2"
        ),
        pytest.param(
            ZONES,
            ONE_IN_A,
            pod(labels={}, spread=[hard(1, ZONE)]),
            {"a", "b", "x"},
            id="a pod its own selector does not match does not count itself",
        ),
        pytest.param(
            ZONES, ONE_IN_A_AND_X, pod(spread=[hard(1, ZONE)]), {"a", "b", "x"}, id="equal zones admit every node"
        ),
        pytest.param(
            ZONES,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE, minDomains=3)]),
            set(),
            id="fewer eligible domains than minDomains make the global minimum 0",
        ),
        pytest.param(
            ZONES,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE, minDomains=2)]),
            {"a", "b", "x"},
            id="enough eligible domains for minDomains keep the real global minimum",
        ),
        pytest.param(ZONES, ONE_IN_A, pod(spread=[soft(1, ZONE)]), {"a", "b", "x"}, id="ScheduleAnyway never filters"),
        pytest.param(
            ZONES,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE), hard(1, HOST)]),
            {"b"},
            id="a zone and a hostname constraint must both hold",
        ),
        pytest.param(
            ZONES,
            ONE_IN_A,
            pod(spread=[hard(1, ZONE, BAR), hard(1, ZONE)]),
            {"x"},
            id="two constraints on the same key are counted separately",
        ),
        pytest.param(
            ZONES,
            [pod("e1", on="a", labels={"foo": "", "version": "v1"})],
            pod(labels={"foo": "", "version": "v2"}, spread=[hard(1, ZONE)]),
            {"x"},
            id="without matchLabelKeys pods of every version count",
        ),
        pytest.param(
            ZONES,
            [pod("e1", on="a", labels={"foo": "", "version": "v1"})],
            pod(labels={"foo": "", "version": "v2"}, spread=[hard(1, ZONE, matchLabelKeys=["version"])]),
            {"a", "b", "x"},
            id="matchLabelKeys count only pods with the incoming pod's value",
        ),
        pytest.param(
            ZONES,
            [pod("e1", on="a", labels={"foo": "", "version": "v2"})],
            pod(labels={"foo": "", "version": "v2"}, spread=[hard(1, ZONE, matchLabelKeys=["version"])]),
            {"x"},
            id="matchLabelKeys still count pods with the same value",
        ),
        pytest.param(
            THREE_ZONES_SSD,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE)], nodeSelector={"disk": "ssd"}),
            {"a", "x", "c"},
            id="nodeAffinityPolicy Honor leaves out domains outside the pod's nodeSelector",
        ),
        pytest.param(
            THREE_ZONES_SSD,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE)], affinity=SSD_AFFINITY),
            {"a", "x", "c"},
            id="nodeAffinityPolicy Honor leaves out domains outside the pod's required node affinity",
        ),
        pytest.param(
            THREE_ZONES_SSD,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE, nodeAffinityPolicy="Ignore")], nodeSelector={"disk": "ssd"}),
            {"c"},
            id="nodeAffinityPolicy Ignore counts every domain",
        ),
        pytest.param(
            THREE_ZONES_TAINTED,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE)]),
            {"c"},
            id="nodeTaintsPolicy Ignore counts domains of tainted nodes",
        ),
        pytest.param(
            THREE_ZONES_TAINTED,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")]),
            {"a", "x", "c"},
            id="nodeTaintsPolicy Honor leaves out nodes with untolerated NoSchedule taints",
        ),
        pytest.param(
            THREE_ZONES_TAINTED,
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")], tolerations=TOLERATE_GPU),
            {"c"},
            id="nodeTaintsPolicy Honor counts nodes whose taints the pod tolerates",
        ),
        pytest.param(
            [
                node("a", zone="z1"),
                node("x", zone="z2"),
                node("c", zone="z3", taints=[NO_SCHEDULE | {"effect": "PreferNoSchedule"}]),
            ],
            ONE_IN_A_AND_X,
            pod(spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")]),
            {"c"},
            id="nodeTaintsPolicy Honor ignores PreferNoSchedule taints",
        ),
        pytest.param(
            ZONES,
            [pod("e1", on="a", namespace="other")],
            pod(spread=[hard(1, ZONE)]),
            {"a", "b", "x"},
            id="pods of other namespaces are not counted",
        ),
        pytest.param(
            ZONES,
            [pod("e1", on="a", terminating=True)],
            pod(spread=[hard(1, ZONE)]),
            {"a", "b", "x"},
            id="terminating pods are not counted",
        ),
        pytest.param(
            [*ZONES, node("n", zone=None)],
            [pod("e1", on="n"), pod("e2", on="n")],
            pod(spread=[hard(1, ZONE)]),
            {"a", "b", "x"},
            id="pods on nodes missing the topology key are not counted and those nodes are rejected",
        ),
        pytest.param(
            ZONES, ONE_IN_A, pod(spread=[hard(1, ZONE, None)]), {"a", "b", "x"}, id="a null labelSelector counts no pod"
        ),
        pytest.param(
            ZONES,
            ONE_IN_A,
            pod(spread=[hard(1, ZONE, {})]),
            {"a", "b", "x"},
            id="an empty labelSelector counts no pod, as in kube-scheduler",
        ),
    ],
)
def test_filter(nodes: list[Any], existing: list[Any], incoming: Any, expected: set[str]) -> None:
    assert feasible(PodTopologySpread(), incoming, cluster(nodes, existing)) == expected


def test_filter_reasons_are_kube_schedulers() -> None:
    nodes = cluster([*ZONES, node("n")], ONE_IN_A)
    statuses = filter_all(PodTopologySpread(), pod(spread=[hard(1, ZONE)]), nodes)
    assert statuses["a"].code is Code.UNSCHEDULABLE
    assert (
        statuses["a"].message
        == ERR_REASON_CONSTRAINTS_NOT_MATCH
        == "node(s) didn't match pod topology spread constraints"
    )
    assert statuses["n"].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert statuses["n"].message == ERR_REASON_NODE_LABEL_NOT_MATCH
    assert (
        ERR_REASON_NODE_LABEL_NOT_MATCH
        == "node(s) didn't match pod topology spread constraints (missing required label)"
    )


def test_pre_filter_skips_pods_without_hard_constraints() -> None:
    plugin, nodes = PodTopologySpread(), cluster(ZONES)
    for incoming in (pod(), pod(spread=[soft(1, ZONE)])):
        _, status = plugin.pre_filter(CycleState(), PodInfo.from_api(incoming), nodes)
        assert status.code is Code.SKIP


def test_pre_filter_reports_a_bad_selector_as_an_error() -> None:
    bad = {"matchExpressions": [{"key": "foo", "operator": "Near"}]}
    _, status = PodTopologySpread().pre_filter(CycleState(), PodInfo.from_api(pod(spread=[hard(1, ZONE, bad)])), [])
    assert status.code is Code.ERROR


# -- Score ----------------------------------------------------------------------


def hosts(*names: str) -> list[Any]:
    return [node(n) for n in names]


def foo_pods(**per_node: int) -> list[Any]:
    return [pod(f"e-{n}-{i}", on=n) for n, count in per_node.items() for i in range(count)]


@pytest.mark.parametrize(
    ("nodes", "existing", "incoming", "candidates", "expected"),
    [
        pytest.param(
            hosts("a", "b"),
            [],
            pod(spread=[soft(1, HOST)]),
            None,
            {"a": 100, "b": 100},
            id="no pods score 100 everywhere",
        ),
        pytest.param(
            hosts("a", "b", "c", "d"),
            foo_pods(a=2, b=1, d=3),
            pod(spread=[soft(1, HOST)]),
            None,
            {"a": 20, "b": 60, "c": 100, "d": 0},
            id="less loaded nodes score higher",
        ),
        pytest.param(
            hosts("a", "b", "c", "d"),
            foo_pods(a=2, b=1, d=3),
            pod(spread=[soft(2, HOST)]),
            None,
            {"a": 33, "b": 66, "c": 100, "d": 16},
            id="maxSkew 2 waters the differences down",
        ),
        pytest.param(
            hosts("a", "b", "c", "d"),
            foo_pods(a=4, b=3, c=2, d=1),
            pod(spread=[soft(3, HOST)]),
            None,
            {"a": 44, "b": 66, "c": 77, "d": 100},
            id="maxSkew 3 waters them down further",
        ),
        pytest.param(
            hosts("a", "b", "c", "d"),
            foo_pods(a=2, b=1, d=3),
            pod(spread=[soft(1, HOST, None)]),
            None,
            {"a": 100, "b": 100, "c": 100, "d": 100},
            id="a null selector scores every node 100",
        ),
        pytest.param(
            hosts("a", "b", "x", "y"),
            foo_pods(a=4, b=2, x=1, y=3),
            pod(spread=[soft(1, HOST)]),
            ["a", "b", "x"],
            {"a": 33, "b": 83, "x": 100},
            id="only feasible nodes are scored",
        ),
        pytest.param(
            [node("a"), node("b", host=False, n="b"), node("x"), node("y")],
            foo_pods(a=4, b=2, x=1, y=3),
            pod(spread=[soft(1, HOST)]),
            ["a", "b", "x"],
            {"a": 16, "b": 0, "x": 100},
            id="a feasible node missing the topology key scores 0",
        ),
        pytest.param(
            [node("a", zone="z1"), node("b", zone="z1"), node("x", zone="z2"), node("y", zone="z2")],
            foo_pods(a=4, b=2, x=1, y=3),
            pod(spread=[soft(1, ZONE)]),
            ["a", "b", "x"],
            {"a": 75, "b": 75, "x": 100},
            id="a less loaded zone scores higher, counting pods on infeasible nodes",
        ),
        pytest.param(
            [node("a", zone="z1"), node("b", zone="z1"), node("x", zone="z2"), node("y", zone="z2")],
            foo_pods(a=2, b=1, x=2, y=4),
            pod(spread=[soft(1, ZONE), soft(1, HOST)]),
            ["a", "x"],
            {"a": 100, "x": 63},
            id="zone and hostname constraints add up",
        ),
        pytest.param(
            [node("a", zone="z1"), node("b", zone="z1"), node("x", zone="z2"), node("y", zone="z2")],
            [
                pod("e1", on="a"),
                pod("e2", on="b", labels={"foo": "", "bar": ""}),
                pod("e3", on="y"),
                pod("e4", on="y", labels={"bar": ""}),
            ],
            pod(labels={"foo": "", "bar": ""}, spread=[soft(1, ZONE, FOO), soft(1, HOST, BAR)]),
            None,
            {"a": 60, "b": 20, "x": 100, "y": 60},
            id="constraints with different selectors count different pods",
        ),
        pytest.param(
            hosts("a", "b"),
            [pod("e1", on="a", namespace="ns1"), *foo_pods(a=1, b=2)],
            pod(spread=[soft(1, HOST)]),
            None,
            {"a": 100, "b": 33},
            id="pods of other namespaces do not count",
        ),
        pytest.param(
            hosts("a", "b"),
            [pod("e1", on="a", terminating=True), *foo_pods(b=1)],
            pod(spread=[soft(1, HOST)]),
            None,
            {"a": 100, "b": 0},
            id="terminating pods do not count",
        ),
        pytest.param(
            [node("a", zone="z1"), node("x", zone="z2"), node("c", zone="z3", taints=[NO_SCHEDULE])],
            foo_pods(a=1, c=3),
            pod(spread=[soft(1, ZONE, nodeTaintsPolicy="Honor")]),
            None,
            {"a": 0, "x": 100, "c": 100},
            id="nodeTaintsPolicy Honor does not count pods on tainted nodes",
        ),
    ],
)
def test_score(
    nodes: list[Any], existing: list[Any], incoming: Any, candidates: list[str] | None, expected: dict[str, int]
) -> None:
    assert scores(PodTopologySpread(), incoming, cluster(nodes, existing), candidates) == expected


def test_pre_score_skips_pods_without_soft_constraints() -> None:
    assert scores(PodTopologySpread(), pod(spread=[hard(1, ZONE)]), cluster(ZONES)) is None
    assert scores(PodTopologySpread(), pod(), cluster(ZONES)) is None


# -- default constraints ------------------------------------------------------------

LIST_DEFAULTS = {
    "defaultingType": "List",
    "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
}


def owned(name: str, kind: str = "ReplicaSet", *, on: str | None = None, **labels: str) -> Any:
    obj = pod(name, on=on, labels={"app": "web", **labels})
    obj["metadata"]["ownerReferences"] = [{"kind": kind, "name": "web", "controller": True, "uid": "rs"}]
    return obj


def with_spread(obj: Any, *constraints: dict[str, Any]) -> Any:
    obj["spec"]["topologySpreadConstraints"] = list(constraints)
    return obj


@pytest.mark.parametrize(
    ("args", "existing", "incoming", "expected"),
    [
        pytest.param(
            LIST_DEFAULTS, [owned("e1", on="a")], owned("p"), {"x"}, id="List defaults spread a ReplicaSet's pods"
        ),
        pytest.param(
            LIST_DEFAULTS,
            [owned("e1", "StatefulSet", on="a", **{"statefulset.kubernetes.io/pod-name": "web-0"})],
            owned("p", "StatefulSet", **{"statefulset.kubernetes.io/pod-name": "web-1"}),
            {"x"},
            id="List defaults ignore the per-pod labels of a StatefulSet",
        ),
        pytest.param(
            LIST_DEFAULTS,
            [owned("e1", on="a")],
            owned("p", "Job"),
            {"a", "b", "x"},
            id="List defaults leave pods of other controllers alone",
        ),
        pytest.param(
            LIST_DEFAULTS,
            [owned("e1", on="a")],
            with_spread(owned("p"), soft(1, ZONE)),
            {"a", "b", "x"},
            id="a pod's own constraints replace the defaults",
        ),
        pytest.param(
            {},
            [owned("e1", on="a")],
            owned("p"),
            {"a", "b", "x"},
            id="System defaults only score (ScheduleAnyway): every node stays feasible",
        ),
    ],
)
def test_default_constraints(args: dict[str, Any], existing: list[Any], incoming: Any, expected: set[str]) -> None:
    plugin = new(args, FakeHandle())
    assert feasible(plugin, incoming, cluster(ZONES, existing)) == expected


SYSTEM_ZONES = [
    node("a", **{"topology.kubernetes.io/zone": "z1"}),
    node("b", **{"topology.kubernetes.io/zone": "z1"}),
    node("x", **{"topology.kubernetes.io/zone": "z2"}),
]


def test_system_defaults_spread_a_replica_sets_pods_over_hosts_and_zones() -> None:
    existing = [owned("e1", on="a"), owned("e2", on="a"), owned("e3", on="b")]
    result = scores(new({}, FakeHandle()), owned("p"), cluster(SYSTEM_ZONES, existing))
    assert result is not None
    assert result["x"] == 100 and result["a"] < result["b"] < result["x"]


def test_system_defaults_spread_the_pods_a_service_selects() -> None:
    web = {"app": "web"}
    existing = [pod("e1", on="a", labels=web), pod("e2", on="b", labels=web)]
    handle = FakeHandle(services={"default": [{"app": "web"}, {"app": "db"}]})
    result = scores(new({}, handle), pod("p", labels=web), cluster(SYSTEM_ZONES, existing))
    assert result is not None and result["x"] == 100 and result["a"] < 100
    # No Service selects it and no controller owns it: no default constraint, PreScore skips.
    assert scores(new({}, FakeHandle()), pod("p", labels=web), cluster(SYSTEM_ZONES, existing)) is None
    other = FakeHandle(services={"default": [{"app": "db"}], "elsewhere": [web]})
    assert scores(new({}, other), pod("p", labels=web), cluster(SYSTEM_ZONES, existing)) is None


# -- args -------------------------------------------------------------------------


def test_args_default_to_system_defaulting() -> None:
    assert parse_args({}).defaulting_type == "System"
    assert parse_args(LIST_DEFAULTS).default_constraints[0]["topologyKey"] == ZONE


DEFAULT = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        pytest.param({"defaultingType": "Sometimes"}, "defaultingType", id="an unknown defaultingType"),
        pytest.param({"defaultConstraints": [DEFAULT]}, "defaultingType", id="System defaulting with constraints"),
        pytest.param(
            {"defaultConstraints": {}, "defaultingType": "List"}, "defaultConstraints", id="constraints not a list"
        ),
        pytest.param({"extra": 1}, "extra", id="an unknown field"),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"maxSkew": 0}]},
            "defaultConstraints[0].maxSkew",
            id="maxSkew 0",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"topologyKey": ""}]},
            "defaultConstraints[0].topologyKey",
            id="an empty topologyKey",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"topologyKey": "-bad-"}]},
            "defaultConstraints[0].topologyKey",
            id="an invalid topologyKey",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"whenUnsatisfiable": "Maybe"}]},
            "defaultConstraints[0].whenUnsatisfiable",
            id="an unknown whenUnsatisfiable",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"labelSelector": {}}]},
            "defaultConstraints[0].labelSelector",
            id="a labelSelector",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"minDomains": 2}]},
            "defaultConstraints[0].minDomains",
            id="minDomains with ScheduleAnyway",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"nodeTaintsPolicy": "Sometimes"}]},
            "defaultConstraints[0].nodeTaintsPolicy",
            id="an unknown inclusion policy",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT | {"weight": 2}]},
            "defaultConstraints[0].weight",
            id="an unknown constraint field",
        ),
        pytest.param(
            {"defaultingType": "List", "defaultConstraints": [DEFAULT, DEFAULT | {"maxSkew": 3}]},
            "defaultConstraints[1]",
            id="a repeated topologyKey and whenUnsatisfiable",
        ),
    ],
)
def test_invalid_args_name_the_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginArgsError) as caught:
        new(args, FakeHandle())
    assert caught.value.field == field


# -- events and queueing hints --------------------------------------------------------


def test_registers_kube_schedulers_events() -> None:
    labels = [e.event.label for e in PodTopologySpread().events_to_register()]
    assert labels == [
        "PodAdd|Delete|UpdatePodLabel|UpdatePodToleration",
        "NodeAdd|Delete|UpdateNodeLabel|UpdateNodeTaint",
    ]


TARGET = pod("target", uid="target-uid", spread=[hard(1, ZONE)])
TARGET_HONORING_TAINTS = pod("target", uid="target-uid", spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")])


@pytest.mark.parametrize(
    ("target", "old", "new_", "hint"),
    [
        pytest.param(TARGET, None, pod("e", on="a"), QueueingHint.QUEUE, id="a matching assigned pod added queues"),
        pytest.param(TARGET, pod("e", on="a"), None, QueueingHint.QUEUE, id="a matching assigned pod deleted queues"),
        pytest.param(
            TARGET,
            None,
            pod("e", on="a", namespace="other"),
            QueueingHint.QUEUE_SKIP,
            id="a pod of another namespace is skipped",
        ),
        pytest.param(TARGET, None, pod("e"), QueueingHint.QUEUE_SKIP, id="an unassigned pod is skipped"),
        pytest.param(
            TARGET,
            None,
            pod("e", on="a", labels={"bar": ""}),
            QueueingHint.QUEUE_SKIP,
            id="an assigned pod no selector matches is skipped",
        ),
        pytest.param(
            TARGET,
            pod("e", on="a", labels={}),
            pod("e", on="a"),
            QueueingHint.QUEUE,
            id="a label change that makes a pod match queues",
        ),
        pytest.param(
            TARGET,
            pod("e", on="a"),
            pod("e", on="a", labels={"foo": "", "tier": "x"}),
            QueueingHint.QUEUE_SKIP,
            id="a label change that keeps the match is skipped",
        ),
        pytest.param(
            TARGET_HONORING_TAINTS,
            pod("target", uid="target-uid", spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")]),
            pod("target", uid="target-uid", spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")], tolerations=TOLERATE_GPU),
            QueueingHint.QUEUE,
            id="a new toleration of the pod itself queues when a constraint honors taints",
        ),
        pytest.param(
            TARGET,
            pod("target", uid="target-uid", spread=[hard(1, ZONE)]),
            pod("target", uid="target-uid", spread=[hard(1, ZONE)], tolerations=TOLERATE_GPU),
            QueueingHint.QUEUE_SKIP,
            id="a new toleration is skipped when taints are ignored",
        ),
    ],
)
def test_pod_change_hint(target: Any, old: Any, new_: Any, hint: QueueingHint) -> None:
    assert PodTopologySpread().pod_change_hint(PodInfo.from_api(target), old, new_) is hint


def tainted(obj: Any) -> Any:
    return {**obj, "spec": {**obj["spec"], "taints": [NO_SCHEDULE]}}


@pytest.mark.parametrize(
    ("old", "new_", "hint"),
    [
        pytest.param(None, node("n", zone="z1"), QueueingHint.QUEUE, id="a node with every topology key added queues"),
        pytest.param(None, node("n"), QueueingHint.QUEUE_SKIP, id="a node missing a topology key added is skipped"),
        pytest.param(
            node("n", zone="z1"), None, QueueingHint.QUEUE, id="a node with every topology key deleted queues"
        ),
        pytest.param(node("n"), None, QueueingHint.QUEUE_SKIP, id="a node missing a topology key deleted is skipped"),
        pytest.param(node("n"), node("n", zone="z1"), QueueingHint.QUEUE, id="a node gaining the topology key queues"),
        pytest.param(node("n", zone="z1"), node("n"), QueueingHint.QUEUE, id="a node losing the topology key queues"),
        pytest.param(
            node("n", zone="z1"), node("n", zone="z2"), QueueingHint.QUEUE, id="a changed topology value queues"
        ),
        pytest.param(
            node("n", zone="z1"),
            node("n", zone="z1", tier="x"),
            QueueingHint.QUEUE_SKIP,
            id="an unrelated label change is skipped",
        ),
        pytest.param(
            node("n", zone="z1"),
            tainted(node("n", zone="z1")),
            QueueingHint.QUEUE,
            id="a taint change on a node with the topology keys queues",
        ),
        pytest.param(
            node("n"),
            tainted(node("n")),
            QueueingHint.QUEUE_SKIP,
            id="a taint change on a node without them is skipped",
        ),
    ],
)
def test_node_change_hint(old: Any, new_: Any, hint: QueueingHint) -> None:
    assert PodTopologySpread().node_change_hint(PodInfo.from_api(TARGET), old, new_) is hint


def test_hints_use_default_constraints_for_pods_without_their_own() -> None:
    plugin = new(LIST_DEFAULTS, FakeHandle())
    target = PodInfo.from_api(owned("p"))
    assert plugin.node_change_hint(target, None, node("n")) is QueueingHint.QUEUE_SKIP
    assert plugin.node_change_hint(target, None, node("n", zone="z1")) is QueueingHint.QUEUE
    assert plugin.pod_change_hint(target, None, owned("e", on="a")) is QueueingHint.QUEUE
    assert plugin.pod_change_hint(target, None, pod("e", on="a", labels={"app": "db"})) is QueueingHint.QUEUE_SKIP


def test_filter_reads_only_what_pre_filter_counted() -> None:
    """PreFilter counts once per cycle; Filter is O(constraints) per node and never walks pods again."""
    plugin, nodes = PodTopologySpread(), cluster(ZONES, ONE_IN_A)
    state, info = CycleState(), PodInfo.from_api(pod(spread=[hard(1, ZONE)]))
    plugin.pre_filter(state, info, nodes)
    for n in nodes:
        n.pods.clear()
    assert {n.name for n in nodes if plugin.filter(state, info, n).ok} == {"x"}


def test_pre_score_without_pre_filter_counts_the_feasible_nodes_only() -> None:
    plugin, nodes = PodTopologySpread(), cluster(hosts("a", "b"), foo_pods(a=1))
    state, info = CycleState(), PodInfo.from_api(pod(spread=[soft(1, HOST)]))
    assert plugin.pre_score(state, info, nodes).ok
    result = {n.name: plugin.score(state, info, n)[0] for n in nodes}
    assert plugin.normalize_scores(state, info, result).ok
    assert result == {"a": 0, "b": 100}


# -- counts kept across cycles ----------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_counts_kept_across_cycles_equal_a_fresh_count_while_the_cluster_changes(seed: int) -> None:
    """Pods (some terminating, some in another namespace), nodes, node labels and taints come and go between
    cycles; incoming pods of a few kinds (constraints, inclusion policies, tolerations) repeat, each with
    labels of its own. The counts PreFilter and PreScore keep per node must equal a fresh count, cycle after
    cycle (PreScore's over a random share of the nodes as the feasible ones)."""
    rnd = random.Random(seed)
    cache = Cache()
    plugin = new({}, FakeHandle())
    names = [f"n{i}" for i in range(6)]

    def random_node(name: str) -> Any:
        taints = [NO_SCHEDULE] if rnd.random() < 0.3 else []
        return node(name, zone=rnd.choice(["a", "b", None]), taints=taints, tier=rnd.choice(["x", "y"]))

    for name in names[:4]:
        cache.add_or_update_node(random_node(name))
    kinds = [
        pod("k0", spread=[hard(1, ZONE)]),
        pod("k1", spread=[hard(1, HOST, BAR), hard(2, ZONE)], nodeSelector={"tier": "x"}),
        pod("k2", spread=[hard(1, ZONE, nodeTaintsPolicy="Honor")], tolerations=[]),
        pod("k3", spread=[soft(1, ZONE), soft(2, HOST, BAR)]),
        pod("k4", spread=[soft(1, ZONE, nodeAffinityPolicy="Ignore"), hard(3, ZONE)], nodeSelector={"tier": "x"}),
        pod("k5", spread=[soft(2, ZONE, nodeTaintsPolicy="Honor")]),
    ]
    placed: list[str] = []
    for step in range(60):
        action = rnd.random()
        present = [n.name for n in cache.node_infos()]
        if action < 0.45 and present:
            labels = {k: "" for k in ("foo", "bar") if rnd.random() < 0.6}
            namespace = rnd.choice(["default", "default", "other"])
            raw = pod(f"p{step}", on=rnd.choice(present), labels=labels, namespace=namespace,
                      terminating=rnd.random() < 0.1, uid=f"u{step}")  # fmt: skip
            cache.add_or_update_pod(PodInfo.from_api(raw))
            placed.append(f"{namespace}/p{step}")
        elif action < 0.65 and placed:
            cache.remove_pod(PodKey(placed.pop(rnd.randrange(len(placed)))))
        elif action < 0.8:
            cache.add_or_update_node(random_node(rnd.choice(names)))  # added, or relabelled / retainted
        elif action < 0.9 and present:
            cache.remove_node(rnd.choice(present))
        raw_incoming = copy.deepcopy(rnd.choice(kinds))
        raw_incoming["metadata"]["name"] = f"in{step}"
        raw_incoming["metadata"]["labels"] = {"signature": f"s{step}", "foo": ""}
        incoming = PodInfo.from_api(raw_incoming)
        nodes = cache.node_infos()
        state = CycleState()
        _, status = plugin.pre_filter(state, incoming, nodes)
        constraints = plugin.source.for_pod(incoming, "DoNotSchedule")
        assert status.code is (Code.SUCCESS if constraints else Code.SKIP), status
        if constraints:
            fresh = compute_pre_filter_state(incoming, constraints, nodes)
            kept = state.get("PreFilterPodTopologySpread")
            assert kept.counts == fresh.counts and kept.min_match == fresh.min_match, f"step {step}"
        feasible = [n for n in nodes if rnd.random() < 0.7]
        soft_constraints = plugin.source.for_pod(incoming, "ScheduleAnyway")
        if not feasible or not soft_constraints:
            continue
        assert plugin.pre_score(state, incoming, feasible).ok
        fresh_score = compute_pre_score_state(incoming, soft_constraints, feasible, nodes, require_all_topologies=True)
        kept_score = state.get("PreScorePodTopologySpread")
        assert (kept_score.counts, kept_score.weights, kept_score.ignored, kept_score.host_constraints) == (
            fresh_score.counts,
            fresh_score.weights,
            fresh_score.ignored,
            fresh_score.host_constraints,
        ), f"step {step}"
        # Score's per-node hostname counts, kept across cycles, equal a fresh count too.
        kept_scores, status = plugin.score_nodes(state, incoming, feasible)
        assert status.ok and kept_scores == [score_node(fresh_score, n) for n in feasible], f"step {step}"
