"""InterPodAffinity against kube-scheduler's semantics: filter, score, args and QueueingHints."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import make_node, make_pod
from tests.frameworks import FakeHandle
from usher.config import parse_config
from usher.core.cache import Cache, NodeInfo
from usher.core.framework.args import PluginArgsError
from usher.core.framework.building import build_framework
from usher.core.framework.cycle_state import CycleState
from usher.core.framework.interface import EnqueueExtensions
from usher.core.plugins import interpodaffinity
from usher.core.plugins.interpodaffinity import (
    AFFINITY_RULES_NOT_MATCH,
    ANTI_AFFINITY_RULES_NOT_MATCH,
    EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
    InterPodAffinityArgs,
    parse_args,
)
from usher.core.plugins.interpodaffinity.filtering import compute_state
from usher.core.plugins.interpodaffinity.hints import assigned_pod_changed, node_changed, own_labels_changed
from usher.core.plugins.interpodaffinity.scoring import topology_scores
from usher.core.plugins.interpodaffinity.terms import NamespaceLabelsCache, TermsCache, pod_terms
from usher.core.plugins.registry import in_tree_registry
from usher.core.types import Code, NodeName, PodInfo, PodKey, QueueingHint

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
QUEUE = QueueingHint.QUEUE
SKIP = QueueingHint.QUEUE_SKIP

# -- builders --------------------------------------------------------------------


def term(
    key: str = ZONE,
    *,
    namespaces: list[str] | None = None,
    namespace_selector: dict[str, Any] | None = None,
    match_label_keys: list[str] | None = None,
    mismatch_label_keys: list[str] | None = None,
    **labels: str,
) -> dict[str, Any]:
    """A PodAffinityTerm selecting pods with ``labels`` (underscores in keys mean dashes)."""
    result: dict[str, Any] = {
        "labelSelector": {"matchLabels": {k.replace("_", "-"): v for k, v in labels.items()}},
        "topologyKey": key,
    }
    if namespaces is not None:
        result["namespaces"] = namespaces
    if namespace_selector is not None:
        result["namespaceSelector"] = namespace_selector
    if match_label_keys is not None:
        result["matchLabelKeys"] = match_label_keys
    if mismatch_label_keys is not None:
        result["mismatchLabelKeys"] = mismatch_label_keys
    return result


def pod(
    name: str,
    *,
    node: str = "",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    affinity: Sequence[dict[str, Any]] = (),
    anti: Sequence[dict[str, Any]] = (),
    preferred: Sequence[tuple[int, dict[str, Any]]] = (),
    preferred_anti: Sequence[tuple[int, dict[str, Any]]] = (),
) -> dict[str, Any]:
    builder = make_pod().name(name).uid(f"uid-{namespace}-{name}").namespace(namespace)
    if node:
        builder = builder.node(node)
    raw = builder.obj()
    raw["metadata"]["labels"] = dict(labels or {})
    spec_affinity: dict[str, Any] = {}
    if affinity or preferred:
        section = spec_affinity["podAffinity"] = {}
        if affinity:
            section["requiredDuringSchedulingIgnoredDuringExecution"] = list(affinity)
        if preferred:
            section["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred
            ]
    if anti or preferred_anti:
        section = spec_affinity["podAntiAffinity"] = {}
        if anti:
            section["requiredDuringSchedulingIgnoredDuringExecution"] = list(anti)
        if preferred_anti:
            section["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred_anti
            ]
    if spec_affinity:
        raw["spec"]["affinity"] = spec_affinity
    return raw


def node(name: str, **labels: str) -> dict[str, Any]:
    """A node labelled with its hostname and the given labels (``zone=`` means the zone label)."""
    builder = make_node().name(name).label(HOST, name)
    for key, value in labels.items():
        builder = builder.label(ZONE if key == "zone" else key, value)
    return builder.obj()


# Three nodes in two zones: n1 and n2 in zone a, n3 in zone b; n4 has no zone label.
NODES = (node("n1", zone="a"), node("n2", zone="a"), node("n3", zone="b"), node("n4"))


@dataclass
class Cluster:
    nodes: Sequence[dict[str, Any]] = NODES
    pods: Sequence[dict[str, Any]] = ()
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)

    def node_infos(self) -> list[NodeInfo]:
        cache = Cache()
        for raw in self.nodes:
            cache.add_or_update_node(raw)
        for raw in self.pods:
            cache.add_or_update_pod(PodInfo.from_api(raw))
        return cache.node_infos()

    def plugin(self, **args: Any) -> InterPodAffinity:
        return interpodaffinity.new(args, FakeHandle(namespaces=self.namespaces))


def filter_all(cluster: Cluster, incoming: dict[str, Any], **args: Any) -> dict[str, str]:
    """node -> "fits" or "<code>: <reason>" for every node of the cluster."""
    plugin = cluster.plugin(**args)
    infos = cluster.node_infos()
    state = CycleState()
    info = PodInfo.from_api(incoming)
    _, status = plugin.pre_filter(state, info, infos)
    if status.code is Code.SKIP:
        return {n.name: "fits" for n in infos}
    assert status.ok, status
    result: dict[str, str] = {}
    verdicts = [plugin.filter(state, info, n) for n in infos]
    for n, verdict in zip(infos, verdicts, strict=True):
        result[n.name] = "fits" if verdict.ok else f"{verdict.code.name}: {verdict.message}"
    assert plugin.filter_nodes(state, info, infos) == [None if v.ok else v for v in verdicts], "batch = per node"
    return result


AFF = f"UNSCHEDULABLE_AND_UNRESOLVABLE: {AFFINITY_RULES_NOT_MATCH}"
ANTI = f"UNSCHEDULABLE: {ANTI_AFFINITY_RULES_NOT_MATCH}"
EXISTING = f"UNSCHEDULABLE: {EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH}"
OK = "fits"

WEB_IN_A = pod("web", node="n1", labels={"app": "web"})
DB_IN_B = pod("db", node="n3", labels={"app": "db"})

# -- Filter ----------------------------------------------------------------------

FILTER_CASES = [
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", affinity=[term(app="web")]),
        {"n1": OK, "n2": OK, "n3": AFF, "n4": AFF},
        id="zone affinity admits every node of the zone holding a matching pod and rejects the others",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", affinity=[term(HOST, app="web")]),
        {"n1": OK, "n2": AFF, "n3": AFF, "n4": AFF},
        id="hostname affinity admits only the node holding the matching pod",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A, DB_IN_B]),
        pod("p", affinity=[term(app="web"), term(HOST, app="db")]),
        {"n1": AFF, "n2": AFF, "n3": AFF, "n4": AFF},
        id="all affinity terms must be met by one pod, not by different pods",
    ),
    pytest.param(
        Cluster(pods=[pod("x", node="n3", labels={"app": "web", "tier": "db"})]),
        pod("p", affinity=[term(app="web"), term(HOST, tier="db")]),
        {"n1": AFF, "n2": AFF, "n3": OK, "n4": AFF},
        id="one pod matching all affinity terms satisfies each term in its own domain",
    ),
    pytest.param(
        Cluster(pods=[DB_IN_B]),
        pod("p", labels={"app": "web"}, affinity=[term(app="web")]),
        {"n1": OK, "n2": OK, "n3": OK, "n4": AFF},
        id="the first pod of a group that matches its own affinity fits any node with the topology key",
    ),
    pytest.param(
        Cluster(pods=[DB_IN_B]),
        pod("p", labels={"app": "other"}, affinity=[term(app="web")]),
        {"n1": AFF, "n2": AFF, "n3": AFF, "n4": AFF},
        id="the first pod rule does not apply to a pod that does not match its own affinity",
    ),
    pytest.param(
        Cluster(pods=[pod("w", node="n4", labels={"app": "web"})]),
        pod("p", labels={"app": "web"}, affinity=[term(app="web")]),
        {"n1": OK, "n2": OK, "n3": OK, "n4": AFF},
        id="a matching pod on a node without the topology key does not count so the first pod rule still applies",
    ),
    pytest.param(
        Cluster(pods=[pod("w", node="n3", labels={"app": "web"})]),
        pod("p", labels={"app": "web"}, affinity=[term(app="web")]),
        {"n1": AFF, "n2": AFF, "n3": OK, "n4": AFF},
        id="once a pod of the group runs the first pod rule no longer applies",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", anti=[term(app="web")]),
        {"n1": ANTI, "n2": ANTI, "n3": OK, "n4": OK},
        id="zone anti-affinity rejects the zone holding a matching pod and admits nodes without the key",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", anti=[term(HOST, app="web")]),
        {"n1": ANTI, "n2": OK, "n3": OK, "n4": OK},
        id="hostname anti-affinity rejects only the node holding the matching pod",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A, DB_IN_B]),
        pod("p", anti=[term(app="web"), term(app="db")]),
        {"n1": ANTI, "n2": ANTI, "n3": ANTI, "n4": OK},
        id="any one anti-affinity term matched in the domain rejects the node",
    ),
    pytest.param(
        Cluster(pods=[pod("guard", node="n1", labels={"app": "guard"}, anti=[term(app="web")])]),
        pod("p", labels={"app": "web"}),
        {"n1": EXISTING, "n2": EXISTING, "n3": OK, "n4": OK},
        id="an existing pod's zone anti-affinity keeps a matching incoming pod out of its zone",
    ),
    pytest.param(
        Cluster(pods=[pod("guard", node="n1", labels={"app": "guard"}, anti=[term(HOST, app="web")])]),
        pod("p", labels={"app": "web"}),
        {"n1": EXISTING, "n2": OK, "n3": OK, "n4": OK},
        id="an existing pod's hostname anti-affinity keeps a matching incoming pod off its node only",
    ),
    pytest.param(
        Cluster(pods=[pod("guard", node="n1", labels={"app": "guard"}, anti=[term(app="web")])]),
        pod("p", labels={"app": "api"}),
        {"n1": OK, "n2": OK, "n3": OK, "n4": OK},
        id="an existing pod's anti-affinity ignores an incoming pod it does not select",
    ),
    pytest.param(
        Cluster(pods=[pod("guard", node="n1", namespace="other", labels={"app": "guard"}, anti=[term(app="web")])]),
        pod("p", labels={"app": "web"}),
        {"n1": OK, "n2": OK, "n3": OK, "n4": OK},
        id="an existing pod's anti-affinity defaults to its own namespace",
    ),
    pytest.param(
        Cluster(pods=[pod("guard", node="n1", labels={"app": "web"}, anti=[term(app="web")])]),
        pod("p", labels={"app": "web"}, affinity=[term(app="web")]),
        {"n1": EXISTING, "n2": EXISTING, "n3": AFF, "n4": AFF},
        id="affinity is checked first and an existing pod's anti-affinity then closes the only zone it could join",
    ),
    pytest.param(
        Cluster(pods=[pod("w", node="n1", namespace="other", labels={"app": "web"})]),
        pod("p", affinity=[term(app="web")]),
        {"n1": AFF, "n2": AFF, "n3": AFF, "n4": AFF},
        id="affinity terms default to the incoming pod's own namespace",
    ),
    pytest.param(
        Cluster(pods=[pod("w", node="n1", namespace="other", labels={"app": "web"})]),
        pod("p", affinity=[term(app="web", namespaces=["other"])]),
        {"n1": OK, "n2": OK, "n3": AFF, "n4": AFF},
        id="a namespaces list selects pods in the listed namespaces",
    ),
    pytest.param(
        Cluster(
            pods=[pod("w", node="n1", namespace="team-a", labels={"app": "web"})],
            namespaces={"team-a": {"team": "a"}, "default": {}},
        ),
        pod("p", affinity=[term(app="web", namespace_selector={"matchLabels": {"team": "a"}})]),
        {"n1": OK, "n2": OK, "n3": AFF, "n4": AFF},
        id="a namespaceSelector selects pods in namespaces whose labels match",
    ),
    pytest.param(
        Cluster(
            pods=[pod("w", node="n1", namespace="team-b", labels={"app": "web"})],
            namespaces={"team-b": {"team": "b"}},
        ),
        pod("p", anti=[term(app="web", namespace_selector={"matchLabels": {"team": "a"}})]),
        {"n1": OK, "n2": OK, "n3": OK, "n4": OK},
        id="a namespaceSelector ignores pods in namespaces whose labels do not match",
    ),
    pytest.param(
        Cluster(pods=[pod("w", node="n1", namespace="unknown", labels={"app": "web"})]),
        pod(
            "p",
            anti=[term(app="web", namespace_selector={"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})],
        ),
        {"n1": OK, "n2": OK, "n3": OK, "n4": OK},
        id="a namespaceSelector never selects a namespace usher has not seen",
    ),
    pytest.param(
        Cluster(pods=[pod("w", node="n3", namespace="anywhere", labels={"app": "web"})]),
        pod("p", anti=[term(app="web", namespace_selector={})]),
        {"n1": OK, "n2": OK, "n3": ANTI, "n4": OK},
        id="an empty namespaceSelector selects every namespace",
    ),
    pytest.param(
        Cluster(
            pods=[
                pod(
                    "guard",
                    node="n3",
                    namespace="infra",
                    labels={"app": "guard"},
                    anti=[term(app="web", namespace_selector={"matchLabels": {"env": "prod"}})],
                )
            ],
            namespaces={"shop": {"env": "prod"}},
        ),
        pod("p", namespace="shop", labels={"app": "web"}),
        {"n1": OK, "n2": OK, "n3": EXISTING, "n4": OK},
        id="an existing pod's namespaceSelector is matched against the incoming pod's namespace labels",
    ),
    pytest.param(
        Cluster(
            pods=[
                pod("v1", node="n1", labels={"app": "web", "version": "1"}),
                pod("v2", node="n3", labels={"app": "web", "version": "2"}),
            ]
        ),
        pod("p", labels={"version": "2"}, affinity=[term(app="web", match_label_keys=["version"])]),
        {"n1": AFF, "n2": AFF, "n3": OK, "n4": AFF},
        id="matchLabelKeys narrows affinity to pods with the incoming pod's value of the key",
    ),
    pytest.param(
        Cluster(
            pods=[
                pod("t1", node="n1", labels={"app": "web", "tenant": "x"}),
                pod("t2", node="n3", labels={"app": "web", "tenant": "y"}),
            ]
        ),
        pod("p", labels={"tenant": "x"}, anti=[term(app="web", mismatch_label_keys=["tenant"])]),
        {"n1": OK, "n2": OK, "n3": ANTI, "n4": OK},
        id="mismatchLabelKeys limits anti-affinity to pods with another value of the key",
    ),
    pytest.param(
        Cluster(pods=[pod("v1", node="n1", labels={"app": "web", "version": "1"})]),
        pod("p", affinity=[term(app="web", match_label_keys=["version"])]),
        {"n1": OK, "n2": OK, "n3": AFF, "n4": AFF},
        id="matchLabelKeys the incoming pod has no label for are ignored",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p"),
        {"n1": OK, "n2": OK, "n3": OK, "n4": OK},
        id="a pod without terms fits everywhere when no existing pod has anti-affinity",
    ),
]


@pytest.mark.parametrize(("cluster", "incoming", "expected"), FILTER_CASES)
def test_filter(cluster: Cluster, incoming: dict[str, Any], expected: dict[str, str]) -> None:
    assert filter_all(cluster, incoming) == expected


def test_pods_removed_in_a_dry_run_open_their_domains_again() -> None:
    """Preemption's dry run removes victims (``remove_pod``): their counts drop to 0, and neither the per-node
    nor the batch filter still keeps the pod out of their domains."""
    web = pod("web", node="n1", labels={"app": "web"})
    guard = pod("guard", node="n3", labels={"app": "guard"}, anti=[term(HOST, app="web")])
    cluster = Cluster(pods=[web, guard])
    plugin, infos = cluster.plugin(), cluster.node_infos()
    incoming = PodInfo.from_api(pod("new", labels={"app": "web"}, anti=[term(ZONE, app="web")]))
    state = CycleState()
    assert plugin.pre_filter(state, incoming, infos)[1].ok

    def verdicts() -> dict[str, str]:
        one_by_one = [plugin.filter(state, incoming, n) for n in infos]
        assert plugin.filter_nodes(state, incoming, infos) == [None if v.ok else v for v in one_by_one]
        return {n.name: OK if v.ok else f"{v.code.name}: {v.message}" for n, v in zip(infos, one_by_one, strict=True)}

    assert verdicts() == {"n1": ANTI, "n2": ANTI, "n3": EXISTING, "n4": OK}
    on = {n.name: n for n in infos}
    plugin.remove_pod(state, incoming, PodInfo.from_api(web), on["n1"])
    plugin.remove_pod(state, incoming, PodInfo.from_api(guard), on["n3"])
    assert verdicts() == {"n1": OK, "n2": OK, "n3": OK, "n4": OK}


def test_pre_filter_skips_when_nothing_is_enforced() -> None:
    cluster = Cluster(pods=[WEB_IN_A])
    _, status = cluster.plugin().pre_filter(CycleState(), PodInfo.from_api(pod("p")), cluster.node_infos())
    assert status.code is Code.SKIP


def test_pre_filter_rejects_a_pod_with_an_invalid_selector_as_unresolvable() -> None:
    bad = term(app="web")
    bad["labelSelector"] = {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}
    cluster = Cluster()
    _, status = cluster.plugin().pre_filter(
        CycleState(), PodInfo.from_api(pod("p", affinity=[bad])), cluster.node_infos()
    )
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.message.startswith("parsing pod: ")


def test_existing_pod_terms_are_parsed_once_per_pod_version() -> None:
    cluster = Cluster(pods=[pod("guard", node="n1", anti=[term(app="web")])])
    plugin = cluster.plugin()
    infos = cluster.node_infos()
    for _ in range(3):
        plugin.pre_filter(CycleState(), PodInfo.from_api(pod("p", labels={"app": "web"})), infos)
    cache = plugin._terms
    assert isinstance(cache, TermsCache) and len(cache) == 1


# -- Score -----------------------------------------------------------------------


def scores(
    cluster: Cluster, incoming: dict[str, Any], *, feasible: Sequence[str] | None = None, **args: Any
) -> dict[str, int] | None:
    """Normalised scores of the feasible nodes, or None when PreScore skips."""
    plugin = cluster.plugin(**args)
    infos = cluster.node_infos()
    state = CycleState()
    info = PodInfo.from_api(incoming)
    plugin.pre_filter(state, info, infos)
    chosen = [n for n in infos if feasible is None or n.name in feasible]
    status = plugin.pre_score(state, info, chosen)
    if status.code is Code.SKIP:
        return None
    assert status.ok, status
    raw: dict[NodeName, int] = {}
    for n in chosen:
        value, score_status = plugin.score(state, info, n)
        assert score_status.ok
        raw[n.name] = value
    assert plugin.normalize_scores(state, info, raw).ok
    return {str(name): value for name, value in raw.items()}


SCORE_CASES = [
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", preferred=[(5, term(app="web"))]),
        {},
        {"n1": 100, "n2": 100, "n3": 0, "n4": 0},
        id="preferred zone affinity scores the zone holding a matching pod highest",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", preferred_anti=[(5, term(app="web"))]),
        {},
        {"n1": 0, "n2": 0, "n3": 100, "n4": 100},
        id="preferred zone anti-affinity scores the zone holding a matching pod lowest",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A, DB_IN_B]),
        pod("p", preferred=[(10, term(app="web")), (5, term(app="db"))]),
        {},
        {"n1": 100, "n2": 100, "n3": 50, "n4": 0},
        id="weights add up per domain and normalise from the lowest to the highest node",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A, DB_IN_B]),
        pod("p", preferred=[(8, term(app="web"))], preferred_anti=[(2, term(app="db"))]),
        {},
        {"n1": 100, "n2": 100, "n3": 0, "n4": 20},
        id="anti-affinity weights are negative and the minimum maps to zero",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A, pod("w2", node="n1", labels={"app": "web"}), DB_IN_B]),
        pod("p", preferred=[(3, term(HOST, app="web")), (3, term(app="db"))]),
        {},
        {"n1": 100, "n2": 0, "n3": 50, "n4": 0},
        id="every matching pod counts and hostname terms score only their node",
    ),
    pytest.param(
        Cluster(pods=[pod("fan", node="n3", labels={"app": "fan"}, preferred=[(7, term(app="web"))])]),
        pod("p", labels={"app": "web"}),
        {},
        {"n1": 0, "n2": 0, "n3": 100, "n4": 0},
        id="an existing pod's preferred affinity for the incoming pod draws it to its zone",
    ),
    pytest.param(
        Cluster(
            pods=[
                pod("fan", node="n3", labels={"app": "fan"}, preferred=[(7, term(app="web"))]),
                pod("foe", node="n1", labels={"app": "foe"}, preferred_anti=[(7, term(app="web"))]),
            ]
        ),
        pod("p", labels={"app": "web"}),
        {},
        {"n1": 0, "n2": 0, "n3": 100, "n4": 50},
        id="an existing pod's preferred anti-affinity against the incoming pod pushes it from its zone",
    ),
    pytest.param(
        Cluster(pods=[pod("needy", node="n3", labels={"app": "needy"}, affinity=[term(app="web")])]),
        pod("p", labels={"app": "web"}),
        {},
        {"n1": 0, "n2": 0, "n3": 100, "n4": 0},
        id="an existing pod's required affinity for the incoming pod scores with hardPodAffinityWeight",
    ),
    pytest.param(
        Cluster(
            pods=[
                pod("needy", node="n3", labels={"app": "needy"}, affinity=[term(app="web")]),
                pod("fan", node="n1", labels={"app": "fan"}, preferred=[(4, term(app="web"))]),
            ]
        ),
        pod("p", labels={"app": "web"}),
        {"hardPodAffinityWeight": 8},
        {"n1": 50, "n2": 50, "n3": 100, "n4": 0},
        id="hardPodAffinityWeight scales existing pods required affinity against preferred weights",
    ),
    pytest.param(
        Cluster(pods=[pod("needy", node="n3", labels={"app": "needy"}, affinity=[term(app="web")])]),
        pod("p", labels={"app": "web"}),
        {"hardPodAffinityWeight": 0},
        None,
        id="hardPodAffinityWeight zero ignores existing pods required affinity and skips scoring",
    ),
    pytest.param(
        Cluster(pods=[pod("fan", node="n3", labels={"app": "fan"}, preferred=[(7, term(app="web"))])]),
        pod("p", labels={"app": "web"}),
        {"ignorePreferredTermsOfExistingPods": True},
        None,
        id="ignorePreferredTermsOfExistingPods skips scoring a pod without preferred terms",
    ),
    pytest.param(
        Cluster(pods=[pod("fan", node="n1", labels={"app": "fan"}, preferred=[(7, term(app="web"))]), DB_IN_B]),
        pod("p", labels={"app": "web"}, preferred=[(7, term(app="db"))]),
        {"ignorePreferredTermsOfExistingPods": True},
        {"n1": 100, "n2": 100, "n3": 100, "n4": 0},
        id="ignorePreferredTermsOfExistingPods still counts existing pods when the pod has preferred terms",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A]),
        pod("p", preferred=[(5, term(app="db"))]),
        {},
        None,
        id="scoring skips when no existing pod contributes",
    ),
    pytest.param(
        Cluster(pods=[WEB_IN_A, pod("w2", node="n3", labels={"app": "web"})]),
        pod("p", preferred=[(5, term(app="web"))]),
        {},
        {"n1": 100, "n2": 100, "n3": 100, "n4": 0},
        id="equal domains score alike",
    ),
]


@pytest.mark.parametrize(("cluster", "incoming", "args", "expected"), SCORE_CASES)
def test_score(
    cluster: Cluster, incoming: dict[str, Any], args: dict[str, Any], expected: dict[str, int] | None
) -> None:
    assert scores(cluster, incoming, **args) == expected


def test_pods_on_infeasible_nodes_still_count_for_their_domain() -> None:
    # n1 is infeasible (say, full) but its pod still makes zone a attractive.
    cluster = Cluster(pods=[WEB_IN_A])
    result = scores(cluster, pod("p", preferred=[(5, term(app="web"))]), feasible=["n2", "n3"])
    assert result == {"n2": 100, "n3": 0}


def test_all_nodes_scoring_the_same_normalise_to_zero() -> None:
    cluster = Cluster(nodes=[node("n1", zone="a"), node("n2", zone="a")], pods=[WEB_IN_A])
    assert scores(cluster, pod("p", preferred=[(5, term(app="web"))])) == {"n1": 0, "n2": 0}


def test_in_a_framework_with_weight_two() -> None:
    """Wired through the real framework: the filter rejects, scores are normalised and weighted."""
    registry = in_tree_registry()
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "usher",
                "plugins": {
                    "multiPoint": {
                        "disabled": [{"name": "*"}],
                        "enabled": [
                            {"name": "PrioritySort"},
                            {"name": "DefaultBinder"},
                            {"name": "InterPodAffinity", "weight": 2},
                        ],
                    }
                },
                "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 3}}],
            }
        ],
    }
    profile = parse_config(config, registry=registry).profiles[0]
    fw = build_framework(profile, registry=registry, handle=FakeHandle())
    cluster = Cluster(pods=[WEB_IN_A, DB_IN_B])
    infos = cluster.node_infos()
    incoming = PodInfo.from_api(pod("p", anti=[term(app="db")], preferred=[(5, term(app="web"))]))
    state = CycleState()
    assert fw.run_pre_filter(state, incoming, infos).status.ok
    feasible = [n for n in infos if fw.run_filter(state, incoming, n).ok]
    assert [n.name for n in feasible] == ["n1", "n2", "n4"]
    rejected = fw.run_filter(state, incoming, infos[2])
    assert rejected.plugin == "InterPodAffinity" and rejected.message == ANTI_AFFINITY_RULES_NOT_MATCH
    totals, status = fw.run_score(state, incoming, feasible)
    assert status.ok
    assert totals == {"n1": 200, "n2": 200, "n4": 0}, "normalised to 0..100, then weighted by 2"


# -- Args ------------------------------------------------------------------------


def test_args_default() -> None:
    assert parse_args({}) == InterPodAffinityArgs(1, False)
    assert parse_args({"hardPodAffinityWeight": None}) == InterPodAffinityArgs(1, False)
    assert parse_args({"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": True}) == (
        InterPodAffinityArgs(100, True)
    )


@pytest.mark.parametrize(
    ("args", "field_name"),
    [
        ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight"),
        ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight"),
        ({"hardPodAffinityWeight": "5"}, "hardPodAffinityWeight"),
        ({"hardPodAffinityWeight": True}, "hardPodAffinityWeight"),
        ({"ignorePreferredTermsOfExistingPods": "yes"}, "ignorePreferredTermsOfExistingPods"),
        ({"hardPodAfinityWeight": 5}, "hardPodAfinityWeight"),
    ],
    ids=[
        "a negative hard weight is rejected",
        "a hard weight above 100 is rejected",
        "a hard weight given as a string is rejected",
        "a boolean hard weight is rejected",
        "a non-boolean ignorePreferredTermsOfExistingPods is rejected",
        "a misspelt field is rejected by name",
    ],
)
def test_args_rejected(args: dict[str, Any], field_name: str) -> None:
    with pytest.raises(PluginArgsError) as caught:
        parse_args(args)
    assert caught.value.field == field_name


# -- Events and QueueingHints ----------------------------------------------------


def test_registers_kubes_events() -> None:
    plugin = Cluster().plugin()
    assert isinstance(plugin, EnqueueExtensions)
    labels = sorted(e.event.label for e in plugin.events_to_register())
    assert labels == ["AssignedPodAdd|Delete|UpdatePodLabel", "NodeAdd|UpdateNodeLabel", "UnscheduledPodUpdatePodLabel"]
    assert all(e.hint is not None for e in plugin.events_to_register())


WANTS_WEB = pod("p", labels={"app": "p"}, affinity=[term(app="web")])
HATES_DB = pod("p", labels={"app": "p"}, anti=[term(app="db")])


def relabel(raw: dict[str, Any], **labels: str) -> dict[str, Any]:
    copy = {**raw, "metadata": {**raw["metadata"], "labels": labels}}
    return copy


POD_HINT_CASES = [
    pytest.param(
        WANTS_WEB, None, pod("w", node="n1", labels={"app": "web"}), QUEUE, id="adding a pod the affinity wants queues"
    ),
    pytest.param(WANTS_WEB, None, pod("w", node="n1", labels={"app": "db"}), SKIP, id="adding an unrelated pod skips"),
    pytest.param(
        WANTS_WEB, None, pod("w", labels={"app": "web"}), SKIP, id="a matching pod that is not assigned skips"
    ),
    pytest.param(
        WANTS_WEB,
        None,
        pod("w", node="n1", namespace="other", labels={"app": "web"}),
        SKIP,
        id="adding a matching pod in another namespace skips",
    ),
    pytest.param(
        pod("p", affinity=[term(app="web", namespace_selector={"matchLabels": {"team": "a"}})]),
        None,
        pod("w", node="n1", namespace="other", labels={"app": "web"}),
        QUEUE,
        id="a namespaceSelector term counts any namespace in hints so they err towards queueing",
    ),
    pytest.param(
        HATES_DB,
        None,
        pod("d", node="n1", labels={"app": "db"}),
        SKIP,
        id="adding a pod only anti-affinity names skips",
    ),
    pytest.param(
        WANTS_WEB,
        pod("w", node="n1", labels={"app": "db"}),
        pod("w", node="n1", labels={"app": "web"}),
        QUEUE,
        id="relabelling a pod to match the affinity queues",
    ),
    pytest.param(
        WANTS_WEB,
        pod("w", node="n1", labels={"app": "web"}),
        pod("w", node="n1", labels={"app": "web", "x": "y"}),
        SKIP,
        id="relabelling a pod that already matched the affinity skips",
    ),
    pytest.param(
        HATES_DB,
        pod("d", node="n1", labels={"app": "db"}),
        pod("d", node="n1", labels={"app": "cache"}),
        QUEUE,
        id="relabelling a pod out of the anti-affinity queues",
    ),
    pytest.param(
        HATES_DB,
        pod("d", node="n1", labels={"app": "cache"}),
        pod("d", node="n1", labels={"app": "db"}),
        SKIP,
        id="relabelling a pod into the anti-affinity skips",
    ),
    pytest.param(
        HATES_DB,
        pod("d", node="n1", labels={"app": "db"}),
        None,
        QUEUE,
        id="deleting a pod the anti-affinity names queues",
    ),
    pytest.param(
        WANTS_WEB, pod("w", node="n1", labels={"app": "web"}), None, SKIP, id="deleting a pod the affinity wants skips"
    ),
    pytest.param(
        pod("p", labels={"app": "web"}),
        pod("guard", node="n1", anti=[term(app="web")]),
        None,
        QUEUE,
        id="deleting a pod whose anti-affinity names the pod queues",
    ),
    pytest.param(
        pod("p", labels={"app": "api"}),
        pod("guard", node="n1", anti=[term(app="web")]),
        None,
        SKIP,
        id="deleting a pod whose anti-affinity names other pods skips",
    ),
]


@pytest.mark.parametrize(("target", "old", "new", "hint"), POD_HINT_CASES)
def test_assigned_pod_hint(
    target: dict[str, Any], old: dict[str, Any] | None, new: dict[str, Any] | None, hint: QueueingHint
) -> None:
    assert assigned_pod_changed(PodInfo.from_api(target), old, new) is hint


def test_own_label_change_queues_only_the_pod_itself() -> None:
    target = PodInfo.from_api(HATES_DB)
    assert own_labels_changed(target, HATES_DB, relabel(HATES_DB, app="q")) is QUEUE
    assert own_labels_changed(target, WEB_IN_A, relabel(WEB_IN_A, app="q")) is SKIP


ZONE_AFFINITY = pod("p", affinity=[term(app="web")])
ZONE_ANTI = pod("p", anti=[term(app="db")])

NODE_HINT_CASES = [
    pytest.param(
        ZONE_AFFINITY, None, node("n9", zone="c"), QUEUE, id="an added node with the affinity topology key queues"
    ),
    pytest.param(ZONE_AFFINITY, None, node("n9"), SKIP, id="an added node without the affinity topology key skips"),
    pytest.param(ZONE_AFFINITY, node("n9"), node("n9", zone="c"), QUEUE, id="a node gaining the affinity key queues"),
    pytest.param(
        ZONE_AFFINITY, node("n9", zone="a"), node("n9", zone="b"), QUEUE, id="a node moving to another domain queues"
    ),
    pytest.param(ZONE_AFFINITY, node("n9", zone="a"), node("n9"), SKIP, id="a node losing the affinity key skips"),
    pytest.param(
        ZONE_AFFINITY,
        node("n9", zone="a"),
        node("n9", zone="a", rack="r1"),
        SKIP,
        id="an unrelated label change skips",
    ),
    pytest.param(ZONE_ANTI, None, node("n9"), QUEUE, id="any added node queues a pod with anti-affinity"),
    pytest.param(ZONE_ANTI, node("n9", zone="a"), node("n9"), QUEUE, id="a node losing the anti-affinity key queues"),
    pytest.param(ZONE_ANTI, node("n9"), node("n9", zone="a"), SKIP, id="a node gaining the anti-affinity key skips"),
    pytest.param(
        ZONE_ANTI, node("n9", zone="a"), node("n9", zone="b"), QUEUE, id="a node leaving an anti-affinity domain queues"
    ),
    pytest.param(pod("p"), None, node("n9", zone="a"), SKIP, id="a pod without terms skips node events"),
]


@pytest.mark.parametrize(("target", "old", "new", "hint"), NODE_HINT_CASES)
def test_node_hint(
    target: dict[str, Any], old: dict[str, Any] | None, new: dict[str, Any] | None, hint: QueueingHint
) -> None:
    assert node_changed(PodInfo.from_api(target), old, new) is hint


# -- score shares kept across cycles ----------------------------------------------


def _random_pod(rnd: random.Random, name: str, node_name: str = "") -> dict[str, Any]:
    colours = ["red", "blue"]
    keys = [HOST, ZONE]

    def random_term() -> dict[str, Any]:
        if rnd.random() < 0.3:  # namespaces by their labels (which change between cycles)
            return term(rnd.choice(keys), namespace_selector={"matchLabels": {"team": "b"}}, color=rnd.choice(colours))
        return term(rnd.choice(keys), color=rnd.choice(colours))

    kwargs: dict[str, Any] = {}
    if rnd.random() < 0.5:
        kwargs["preferred"] = [(rnd.randint(1, 5), random_term())]
    if rnd.random() < 0.3:
        kwargs["preferred_anti"] = [(rnd.randint(1, 5), random_term())]
    if rnd.random() < 0.3:
        kwargs["affinity"] = [random_term()]
    if rnd.random() < 0.2:
        kwargs["anti"] = [random_term()]
    namespace = rnd.choice(["default", "other", "third"])
    return pod(name, node=node_name, namespace=namespace, labels={"color": rnd.choice(colours)}, **kwargs)


@pytest.mark.parametrize("seed", range(12))
def test_shares_kept_across_cycles_equal_a_fresh_walk_while_the_cluster_changes(seed: int) -> None:
    """Pods, nodes, node labels and namespace labels come, change and go between cycles; incoming pods of a few
    kinds repeat, each with labels of its own. The counts PreFilter and the sums PreScore keep per node
    (``NodeShares``) must equal a walk of every pod, cycle after cycle."""
    rnd = random.Random(seed)
    cache = Cache()
    cache.set_namespace("default", {})
    cache.set_namespace("other", {"team": "b"})
    plugin = interpodaffinity.new({}, FakeHandle(cache=cache))
    names = [f"n{i}" for i in range(6)]
    for name in names[:4]:
        cache.add_or_update_node(node(name, zone=rnd.choice("ab")))
    incoming_kinds = [_random_pod(random.Random(seed * 100 + k), f"in{k}") for k in range(3)]
    placed: list[str] = []
    for step in range(120):
        action = rnd.random()
        present = [n.name for n in cache.node_infos()]
        if action < 0.45 and present:
            raw = _random_pod(rnd, f"p{step}", rnd.choice(present))
            cache.add_or_update_pod(PodInfo.from_api(raw))
            placed.append(f"{raw['metadata']['namespace']}/p{step}")
        elif action < 0.55 and placed:  # a placed pod changes (labels, terms): a new PodInfo, the same key
            key = rnd.choice(placed)
            namespace, name = key.split("/")
            held = cache.node_of_pod(PodKey(key))
            assert held is not None
            raw = _random_pod(rnd, name, held.name)
            raw["metadata"]["namespace"] = namespace
            cache.add_or_update_pod(PodInfo.from_api(raw))
        elif action < 0.65 and placed:
            cache.remove_pod(PodKey(placed.pop(rnd.randrange(len(placed)))))
        elif action < 0.8:
            name = rnd.choice(names)
            cache.add_or_update_node(node(name, zone=rnd.choice("abc")))  # added, or relabelled
        elif action < 0.9 and present:
            cache.remove_node(rnd.choice(present))
        elif action < 0.97:  # a namespace relabelled, added or deleted: no node changes
            namespace = rnd.choice(["default", "other", "third"])
            if rnd.random() < 0.2:
                cache.remove_namespace(namespace)
            else:
                cache.set_namespace(namespace, rnd.choice([{}, {"team": "b"}, {"team": "c"}]))
        raw_incoming = copy.deepcopy(rnd.choice(incoming_kinds))
        # Every pod its own "signature" label (as scheduler_perf's), and now and then another colour.
        raw_incoming["metadata"]["labels"]["signature"] = f"s{step}"
        if rnd.random() < 0.3:
            raw_incoming["metadata"]["labels"]["color"] = rnd.choice(["red", "blue", "green"])
        incoming = PodInfo.from_api(raw_incoming)
        nodes = cache.node_infos()
        state = CycleState()
        plugin.pre_filter(state, incoming, nodes)
        counted = compute_state(
            incoming, pod_terms(incoming), nodes, TermsCache(), NamespaceLabelsCache(plugin._handle.namespace_labels)
        )
        kept_counts = state.get(interpodaffinity.PRE_FILTER_STATE_KEY)
        if counted.has_work:
            assert kept_counts.affinity_counts == counted.affinity_counts, f"step {step}"
            assert kept_counts.anti_affinity_counts == counted.anti_affinity_counts, f"step {step}"
            assert kept_counts.existing_anti_affinity_counts == counted.existing_anti_affinity_counts
            one_by_one = [plugin.filter(state, incoming, n) for n in nodes]
            batch = plugin.filter_nodes(state, incoming, nodes)
            assert batch == [None if v.ok else v for v in one_by_one], f"step {step}"
        else:
            assert kept_counts is None, f"step {step}"
        status = plugin.pre_score(state, incoming, nodes)
        fresh = topology_scores(
            incoming,
            pod_terms(incoming),
            nodes,
            TermsCache(),
            NamespaceLabelsCache(plugin._handle.namespace_labels),
            hard_pod_affinity_weight=plugin.args.hard_pod_affinity_weight,
        )
        if fresh is None:
            assert status.code is Code.SKIP, f"step {step}"
        else:
            assert status.ok, f"step {step}: {status}"
            kept = state.get(interpodaffinity.PRE_SCORE_STATE_KEY)
            assert kept.topology_score == fresh.topology_score, f"step {step}"
