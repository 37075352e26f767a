"""KubeSchedulerConfiguration and feature gates: what users write is what runs, and mistakes name their field."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.frameworks import FakeHandle
from usher.config import ConfigError, build_framework, load_config, parse_config, parse_feature_gates
from usher.core.plugins.registry import Registry, in_tree_registry

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def parse(text: str) -> Any:
    return parse_config(yaml.safe_load(HEADER + text), registry=in_tree_registry())


def test_no_profiles_means_one_default_profile_named_usher() -> None:
    config = parse("")
    assert config.scheduler_names == ["usher"]
    assert config.pod_initial_backoff_seconds == 1 and config.pod_max_backoff_seconds == 10


def test_a_full_configuration_is_read() -> None:
    config = parse(
        """
percentageOfNodesToScore: 30
podInitialBackoffSeconds: 2
podMaxBackoffSeconds: 20
leaderElection: {leaderElect: true, leaseDuration: 20s, renewDeadline: 15s, retryPeriod: 3s,
                 resourceName: usher, resourceNamespace: usher-system}
profiles:
- schedulerName: usher
- schedulerName: usher-packed
  percentageOfNodesToScore: 100
  plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated}}
"""
    )
    assert config.scheduler_names == ["usher", "usher-packed"]
    assert config.percentage_of_nodes_to_score == 30
    assert config.leader_election.leader_elect and config.leader_election.lease_duration == 20
    packed = build_framework(config.profiles[1], registry=in_tree_registry(), handle=FakeHandle())
    assert [(p.name, w) for p, w in packed.plugins.score] == [("NodeResourcesFit", 5)]
    assert packed.plugins.score[0][0].args.strategy == "MostAllocated"  # type: ignore[attr-defined]
    assert packed.percentage_of_nodes_to_score == 100


def test_the_default_profile_has_kube_schedulers_plugins_in_order() -> None:
    fw = build_framework(parse("").profiles[0], registry=in_tree_registry(), handle=FakeHandle())
    assert [p.name for p in fw.plugins.pre_enqueue] == ["SchedulingGates", "DynamicResources"]
    assert fw.plugins.queue_sort is not None and fw.plugins.queue_sort.name == "PrioritySort"
    assert [p.name for p in fw.plugins.filter] == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
    ]
    assert [(p.name, w) for p, w in fw.plugins.score] == [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
    ]
    assert [p.name for p in fw.plugins.bind] == ["DefaultBinder"]
    assert "NoNodesAvailable" in fw.queueing_hints and "SchedulingGates" in fw.queueing_hints


def test_disabling_a_plugin_at_one_extension_point_keeps_it_elsewhere() -> None:
    config = parse("profiles:\n- schedulerName: usher\n  plugins: {score: {disabled: [{name: NodeResourcesFit}]}}")
    fw = build_framework(config.profiles[0], registry=in_tree_registry(), handle=FakeHandle())
    assert "NodeResourcesFit" not in [p.name for p, _ in fw.plugins.score]
    assert "NodeResourcesFit" in [p.name for p in fw.plugins.filter]


def test_multipoint_star_disables_every_default() -> None:
    config = parse(
        "profiles:\n- schedulerName: usher\n  plugins:\n    multiPoint:\n"
        "      disabled: [{name: '*'}]\n      enabled: [{name: PrioritySort}, {name: DefaultBinder}]"
    )
    fw = build_framework(config.profiles[0], registry=in_tree_registry(), handle=FakeHandle())
    assert fw.plugins.filter == [] and fw.plugins.pre_enqueue == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("bogus: 1", "bogus: unknown field", id="unknown top-level field"),
        pytest.param(
            "profiles: [{schedulerName: usher, extra: 1}]",
            "profiles[0].extra: unknown field",
            id="unknown profile field",
        ),
        pytest.param(
            "profiles: [{schedulerName: Usher_1}]",
            "profiles[0].schedulerName: must be a DNS-1123 name",
            id="bad scheduler name",
        ),
        pytest.param(
            "profiles: [{schedulerName: a}, {schedulerName: a}]",
            "profiles[1].schedulerName: duplicate",
            id="duplicate scheduler name",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {filter: {enabled: [{name: Nope}]}}}]",
            "profiles[0].plugins.filter.enabled[0].name: unknown plugin 'Nope'",
            id="unknown plugin",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {sort: {}}}]",
            "profiles[0].plugins.sort: unknown extension point",
            id="unknown extension point",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {score: {enabled: [{name: NodeResourcesFit, weight: 0}]}}}]",
            "profiles[0].plugins.score.enabled[0].weight: must be an integer in 1..100",
            id="zero weight",
        ),
        pytest.param(
            "percentageOfNodesToScore: 101",
            "percentageOfNodesToScore: must be an integer in 0..100",
            id="percentage over 100",
        ),
        pytest.param(
            "podInitialBackoffSeconds: 0", "podInitialBackoffSeconds: must be a number >= 1", id="zero backoff"
        ),
        pytest.param(
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2",
            "podMaxBackoffSeconds: must be >=",
            id="max below initial",
        ),
        pytest.param(
            "leaderElection: {leaseDuration: soon}",
            "leaderElection.leaseDuration: must be a duration",
            id="bad duration",
        ),
        pytest.param(
            "leaderElection: {resourceLock: endpoints}",
            "leaderElection.resourceLock: only 'leases'",
            id="unsupported lock",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, pluginConfig: [{name: NodeResourcesFit,"
            " args: {scoringStrategy: {type: Fancy}}}]}]",
            "profiles[0].pluginConfig[0].args.scoringStrategy.type: 'Fancy' is not supported",
            id="bad plugin args name their field",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, pluginConfig: [{name: SchedulingGates, args: {x: 1}}]}]",
            "profiles[0].pluginConfig[0].args.x: unknown field",
            id="args for a plugin that takes none",
        ),
    ],
)
def test_invalid_configuration_names_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        config = parse(text)
        for profile in config.profiles:
            build_framework(profile, registry=in_tree_registry(), handle=FakeHandle())


def test_wrong_api_version_is_refused() -> None:
    with pytest.raises(ConfigError, match=re.escape("apiVersion: must be 'kubescheduler.config.k8s.io/v1'")):
        parse_config({"apiVersion": "v1beta3", "kind": "KubeSchedulerConfiguration"}, registry=in_tree_registry())


def test_a_missing_file_and_bad_yaml_are_clear(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match=r"--config .*nope\.yaml: No such file"):
        load_config(tmp_path / "nope.yaml", registry=in_tree_registry())
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad, registry=in_tree_registry())


def test_feature_gates_default_on_and_can_be_turned_off() -> None:
    gates = parse_feature_gates(None)
    assert all(
        gates.enabled(n) for n in ("SchedulerQueueingHints", "SchedulerPreQueueingHints", "SchedulerAsyncAPICalls")
    )
    assert not parse_feature_gates("SchedulerQueueingHints=false").enabled("SchedulerQueueingHints")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Bogus=true", "unknown feature gate 'Bogus'"),
        ("SchedulerQueueingHints=yes", "SchedulerQueueingHints needs =true or =false"),
        ("SchedulerAsyncAPICalls=false", "SchedulerPreEnqueuePodStatus=true requires SchedulerAsyncAPICalls=true"),
    ],
)
def test_bad_feature_gates_stop_start_up(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_feature_gates(text)


def test_both_gates_off_is_a_valid_combination() -> None:
    gates = parse_feature_gates("SchedulerAsyncAPICalls=false,SchedulerPreEnqueuePodStatus=false")
    assert not gates.enabled("SchedulerAsyncAPICalls")


def test_the_registry_refuses_duplicate_names() -> None:
    registry = Registry()
    registry.register("A", lambda args, handle: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="already registered"):
        registry.register("A", lambda args, handle: None)  # type: ignore[arg-type,return-value]
