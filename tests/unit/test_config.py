"""KubeSchedulerConfiguration: kube-scheduler's files load unchanged, usher applies what it can, errors name a field."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.contenders import KubeScheduler
from tests.frameworks import FakeHandle
from usher.config import ConfigError, SchedulerConfig, load_config, parse_config
from usher.core.framework import names
from usher.core.framework.building import build_framework
from usher.core.plugins.registry import in_tree_registry
from usher.features import parse_feature_gates

HEADER = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
NOT_IMPLEMENTED = sorted(names.IN_TREE - set(in_tree_registry()))


def parse(text: str) -> SchedulerConfig:
    return parse_config(yaml.safe_load(HEADER + text), registry=in_tree_registry())


def ignored_paths(config: SchedulerConfig) -> list[str]:
    return [field.path for field in config.ignored]


def test_no_profiles_means_one_default_profile_named_usher() -> None:
    config = parse("")
    assert config.scheduler_names == ["usher"]
    assert config.pod_initial_backoff_seconds == 1 and config.pod_max_backoff_seconds == 10
    assert config.ignored == () and config.metrics_bind_address is None and config.client_connection.kubeconfig == ""


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


def test_the_configuration_the_benchmark_gives_kube_scheduler_loads_unchanged(tmp_path: Path) -> None:
    kwargs = KubeScheduler(pre_queueing_hints=True).plane_kwargs(tmp_path)
    data = json.loads((tmp_path / "kube-scheduler-config.json").read_text())
    config = parse_config(data, registry=in_tree_registry())
    assert config.scheduler_names == ["kube-bench"]
    assert config.client_connection.kubeconfig == str(tmp_path.resolve() / "scheduler" / "kubeconfig")
    assert not config.leader_election.leader_elect
    assert ignored_paths(config) == ["clientConnection.qps", "clientConnection.burst"]
    (gates,) = (a.removeprefix("--feature-gates=") for a in kwargs["extra_scheduler_args"] if "feature-gates" in a)
    assert parse_feature_gates(gates).pre_queueing_hints


FULL_KUBE_SCHEDULER_CONFIGURATION = """
parallelism: 16
leaderElection:
  leaderElect: true
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 2s
  resourceLock: leases
  resourceName: kube-scheduler
  resourceNamespace: kube-system
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
  acceptContentTypes: ""
  contentType: application/vnd.kubernetes.protobuf
  qps: 50
  burst: 100
healthzBindAddress: 0.0.0.0:10251
metricsBindAddress: 0.0.0.0:10259
enableProfiling: true
enableContentionProfiling: true
percentageOfNodesToScore: 0
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 10
extenders: []
delayCacheUntilActive: false
profiles:
- schedulerName: default-scheduler
  percentageOfNodesToScore: 50
  plugins:
    preEnqueue: {}
    queueSort: {}
    preFilter: {}
    filter: {}
    postFilter: {disabled: [{name: DefaultPreemption}]}
    preScore: {}
    score: {enabled: [{name: NodeResourcesFit, weight: 2}], disabled: [{name: ImageLocality}]}
    reserve: {}
    permit: {}
    preBind: {}
    bind: {}
    postBind: {}
    placementGenerate: {disabled: [{name: TopologyPlacementGenerator}]}
    placementScore: {}
    podGroupPostFilter: {}
    multiPoint:
      enabled:
      - {name: PrioritySort}
      - {name: NodeResourcesFit, weight: 1}
      - {name: DefaultBinder}
      disabled:
      - {name: VolumeBinding}
      - {name: VolumeZone}
      - {name: VolumeRestrictions}
      - {name: NodeVolumeLimits}
      - {name: DefaultPreemption}
      - {name: ImageLocality}
      - {name: GangScheduling}
  pluginConfig:
  - name: DefaultPreemption
    args: {minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100}
  - name: InterPodAffinity
    args: {hardPodAffinityWeight: 1}
  - name: NodeAffinity
    args: {}
  - name: NodeResourcesBalancedAllocation
    args: {resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]}
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: LeastAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
  - name: PodTopologySpread
    args: {defaultingType: System}
  - name: VolumeBinding
    args: {bindTimeoutSeconds: 600}
- schedulerName: packed
  plugins:
    score:
      disabled: [{name: "*"}]
      enabled: [{name: NodeResourcesFit, weight: 5}]
"""


def test_a_full_kube_scheduler_configuration_loads_applying_what_usher_can() -> None:
    config = parse(FULL_KUBE_SCHEDULER_CONFIGURATION)
    assert config.scheduler_names == ["default-scheduler", "packed"]
    assert config.client_connection.kubeconfig == "/etc/kubernetes/scheduler.conf"
    assert config.metrics_bind_address == "0.0.0.0:10259"
    assert config.leader_election.leader_elect and config.leader_election.resource_namespace == "kube-system"
    assert ignored_paths(config) == [
        "parallelism",
        "healthzBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "delayCacheUntilActive",
        "clientConnection.acceptContentTypes",
        "clientConnection.contentType",
        "clientConnection.qps",
        "clientConnection.burst",
    ]
    fw = build_framework(config.profiles[0], registry=in_tree_registry(), handle=FakeHandle())
    assert fw.percentage_of_nodes_to_score == 50
    assert ("NodeResourcesFit", 2) in [(p.name, w) for p, w in fw.plugins.score]


@pytest.mark.parametrize("name", sorted(names.IN_TREE))
def test_every_kube_scheduler_plugin_may_be_disabled(name: str) -> None:
    config = parse(
        f"profiles:\n- schedulerName: a\n  plugins:\n    multiPoint: {{disabled: [{{name: {name}}}]}}\n"
        f"    filter: {{disabled: [{{name: {name}}}]}}\n    queueSort: {{enabled: [{{name: PrioritySort}}]}}\n"
        f"    bind: {{enabled: [{{name: DefaultBinder}}]}}"
    )
    fw = build_framework(config.profiles[0], registry=in_tree_registry(), handle=FakeHandle())
    assert name not in [p.name for p in fw.plugins.filter]


@pytest.mark.parametrize("name", NOT_IMPLEMENTED)
def test_enabling_a_kube_scheduler_plugin_usher_lacks_is_refused_by_name(name: str) -> None:
    with pytest.raises(
        ConfigError,
        match="^" + re.escape(f"profiles[0].plugins.multiPoint.enabled[0].name: {name} is a kube-scheduler plugin "),
    ) as raised:
        parse(f"profiles: [{{schedulerName: a, plugins: {{multiPoint: {{enabled: [{{name: {name}}}]}}}}}}]")
    assert "not implemented by usher" in str(raised.value)


@pytest.mark.parametrize("name", NOT_IMPLEMENTED)
def test_args_of_a_kube_scheduler_plugin_usher_lacks_are_accepted_and_reported_ignored(name: str) -> None:
    config = parse(f"profiles: [{{schedulerName: a, pluginConfig: [{{name: {name}, args: {{anything: 1}}}}]}}]")
    assert [str(f) for f in config.ignored] == [
        f"profiles[0].pluginConfig[0]: accepted and ignored by usher "
        f"({name} is a kube-scheduler plugin usher does not implement)"
    ]
    assert config.profiles[0].plugin_config == {}


def test_plugin_args_keep_their_own_index_after_args_usher_ignores() -> None:
    with pytest.raises(ConfigError, match="^" + re.escape("profiles[0].pluginConfig[1].args.scoringStrategy.type:")):
        parse(
            "profiles: [{schedulerName: a, pluginConfig: [{name: NodeDeclaredFeatures, args: {}},"
            " {name: NodeResourcesFit, args: {scoringStrategy: {type: Bogus}}}]}]"
        )


def test_args_of_a_plugin_the_profile_does_not_enable_are_still_checked() -> None:
    with pytest.raises(ConfigError, match="^" + re.escape("profiles[0].pluginConfig[0].args.hardPodAffinityWeight")):
        parse(
            "profiles: [{schedulerName: a, plugins: {multiPoint: {disabled: [{name: InterPodAffinity}]}},"
            " pluginConfig: [{name: InterPodAffinity, args: {hardPodAffinityWeight: 1000}}]}]"
        )


def test_null_fields_are_unset_as_in_kube_scheduler() -> None:
    config = parse("parallelism: null\nleaderElection: {resourceName: null}\nclientConnection: {kubeconfig: null}\n")
    assert config.ignored == () and config.leader_election.resource_name == ""


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
            "profiles[0].schedulerName: must be a DNS-1123 subdomain",
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
            "profiles: [{schedulerName: a, plugins: {filter: {disabled: [{name: Nope}]}}}]",
            "profiles[0].plugins.filter.disabled[0].name: unknown plugin 'Nope'",
            id="unknown plugin disabled",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, pluginConfig: [{name: Nope, args: {}}]}]",
            "profiles[0].pluginConfig[0].name: unknown plugin 'Nope'",
            id="args of an unknown plugin",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {sort: {}}}]",
            "profiles[0].plugins.sort: unknown extension point",
            id="unknown extension point",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {placementScore: {enabled: [{name: NodeResourcesFit}]}}}]",
            "profiles[0].plugins.placementScore.enabled: usher has no placementScore extension point",
            id="enabled at an extension point usher does not run",
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
            "podInitialBackoffSeconds: 0",
            "podInitialBackoffSeconds: must be an integer greater than 0, got 0",
            id="zero backoff",
        ),
        pytest.param(
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2",
            "podMaxBackoffSeconds: must be an integer greater than or equal to podInitialBackoffSeconds (5), got 2",
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
            "leaderElection: {leaderElect: yes please}",
            "leaderElection.leaderElect: must be true or false",
            id="leaderElect not a boolean",
        ),
        pytest.param(
            "leaderElection: {resourceName: 7}",
            "leaderElection.resourceName: must be a string",
            id="lease name not a string",
        ),
        pytest.param(
            "parallelism: 0",
            "parallelism: should be an integer value greater than zero",
            id="zero parallelism",
        ),
        pytest.param(
            "parallelism: '16'",
            "parallelism: should be an integer value greater than zero",
            id="parallelism as a string",
        ),
        pytest.param("clientConnection: {burst: -1}", "clientConnection.burst: must be non-negative", id="bad burst"),
        pytest.param("clientConnection: {qps: fast}", "clientConnection.qps: must be a number", id="bad qps"),
        pytest.param(
            "clientConnection: {kubeconfig: [a]}", "clientConnection.kubeconfig: must be a string", id="bad kubeconfig"
        ),
        pytest.param(
            "clientConnection: {proxy: x}", "clientConnection.proxy: unknown field", id="unknown client field"
        ),
        pytest.param("enableProfiling: 'yes'", "enableProfiling: must be true or false", id="profiling not a boolean"),
        pytest.param(
            "delayCacheUntilActive: 1", "delayCacheUntilActive: must be true or false", id="delayCache not a boolean"
        ),
        pytest.param("metricsBindAddress: 10259", "metricsBindAddress: must be a string", id="port as a number"),
        pytest.param(
            "extenders: [{urlPrefix: 'http://127.0.0.1:8888/', filterVerb: filter}]",
            "extenders: usher does not call scheduler extenders",
            id="extenders",
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
        pytest.param(
            "profiles: [{schedulerName: a}, {schedulerName: b, pluginConfig: [{name: NodeResourcesFit,"
            " args: {scoringStrategy: {type: Bogus}}}]}]",
            "profiles[1].pluginConfig[0].args.scoringStrategy.type: 'Bogus' is not supported",
            id="bad args in the second profile",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {filter: {enabled: [{name: PrioritySort}]}}}]",
            "profiles[0].plugins.filter: plugin PrioritySort does not implement filter",
            id="a plugin enabled at a point it does not implement",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {multiPoint: {disabled: [{name: DefaultBinder}]}}}]",
            "profiles[0].plugins.bind: a bind plugin is required",
            id="no bind plugin",
        ),
    ],
)
def test_invalid_configuration_is_refused_when_parsed_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        parse(text)


LEADING = "leaderElection: {leaderElect: true, "
"""The start of a leaderElection section that turns leader election on (its timings are only checked then)."""
ARGS = "profiles: [{schedulerName: a, pluginConfig: [{name: "
"""The start of a profile with one plugin's args."""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "podInitialBackoffSeconds: .nan",
            "podInitialBackoffSeconds: must be an integer greater than 0, got nan",
            id="podInitialBackoffSeconds nan",
        ),
        pytest.param(
            "podInitialBackoffSeconds: .inf",
            "podInitialBackoffSeconds: must be an integer greater than 0, got inf",
            id="podInitialBackoffSeconds infinite",
        ),
        pytest.param(
            "podInitialBackoffSeconds: -1",
            "podInitialBackoffSeconds: must be an integer greater than 0, got -1",
            id="podInitialBackoffSeconds negative",
        ),
        pytest.param(
            "podInitialBackoffSeconds: 1.5",
            "podInitialBackoffSeconds: must be an integer greater than 0, got 1.5",
            id="podInitialBackoffSeconds a fraction (an int64 in kube-scheduler)",
        ),
        pytest.param(
            "podInitialBackoffSeconds: 9223372036854775808\npodMaxBackoffSeconds: 9223372036854775808",
            "podInitialBackoffSeconds: out of range for an int64, got 9223372036854775808",
            id="podInitialBackoffSeconds beyond int64",
        ),
        pytest.param(
            "podMaxBackoffSeconds: .inf",
            "podMaxBackoffSeconds: must be an integer greater than or equal to podInitialBackoffSeconds (1), got inf",
            id="podMaxBackoffSeconds infinite",
        ),
        pytest.param(
            "percentageOfNodesToScore: .nan",
            "percentageOfNodesToScore: must be an integer in 0..100, got nan",
            id="percentageOfNodesToScore nan",
        ),
        pytest.param(
            "percentageOfNodesToScore: -1",
            "percentageOfNodesToScore: must be an integer in 0..100, got -1",
            id="percentageOfNodesToScore negative",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, percentageOfNodesToScore: 100.5}]",
            "profiles[0].percentageOfNodesToScore: must be an integer in 0..100, got 100.5",
            id="profiles[].percentageOfNodesToScore a fraction",
        ),
        pytest.param(
            "parallelism: -16",
            "parallelism: should be an integer value greater than zero, got -16",
            id="parallelism negative",
        ),
        pytest.param(
            "parallelism: 2147483648",
            "parallelism: out of range for an int32, got 2147483648",
            id="parallelism beyond int32",
        ),
        pytest.param(
            "clientConnection: {qps: .nan}",
            "clientConnection.qps: must be a finite number within float32's range, got nan",
            id="clientConnection.qps nan",
        ),
        pytest.param(
            "clientConnection: {qps: -.inf}",
            "clientConnection.qps: must be a finite number within float32's range, got -inf",
            id="clientConnection.qps infinite",
        ),
        pytest.param(
            "clientConnection: {qps: 1.0e+39}",
            "clientConnection.qps: must be a finite number within float32's range, got 1e+39",
            id="clientConnection.qps beyond float32",
        ),
        pytest.param(
            "clientConnection: {burst: 2147483648}",
            "clientConnection.burst: out of range for an int32, got 2147483648",
            id="clientConnection.burst beyond int32",
        ),
        pytest.param(
            "profiles: [{schedulerName: a, plugins: {score: {enabled: [{name: NodeResourcesFit, weight: .nan}]}}}]",
            "profiles[0].plugins.score.enabled[0].weight: must be an integer in 1..100, got nan",
            id="plugins.*.enabled[].weight nan",
        ),
        pytest.param(
            LEADING + "retryPeriod: 0s}",
            "leaderElection.retryPeriod: must be greater than zero, got 0s",
            id="leaderElection.retryPeriod zero",
        ),
        pytest.param(
            LEADING + "retryPeriod: -2s}",
            "leaderElection.retryPeriod: must be greater than zero, got -2s",
            id="leaderElection.retryPeriod negative",
        ),
        pytest.param(
            LEADING + "renewDeadline: 0s}",
            "leaderElection.renewDeadline: must be greater than zero, got 0s",
            id="leaderElection.renewDeadline zero",
        ),
        pytest.param(
            LEADING + "leaseDuration: -15s}",
            "leaderElection.leaseDuration: must be greater than zero, got -15s",
            id="leaderElection.leaseDuration negative",
        ),
        pytest.param(
            LEADING + "leaseDuration: 5s}",
            "leaderElection.leaseDuration: must be greater than leaderElection.renewDeadline (10s), got 5s",
            id="leaderElection.leaseDuration not above renewDeadline",
        ),
        pytest.param(
            LEADING + "renewDeadline: 2.2s}",
            "leaderElection.renewDeadline: must be greater than leaderElection.retryPeriod x 1.2 (2.4s), got 2.2s",
            id="leaderElection.renewDeadline not above 1.2 x retryPeriod",
        ),
        pytest.param(
            LEADING + "leaseDuration: 1000000h}",
            "leaderElection.leaseDuration: must be at most 2147483647s (the Lease's leaseDurationSeconds is an int32)",
            id="leaderElection.leaseDuration beyond the Lease's int32",
        ),
        pytest.param(
            "leaderElection: {leaseDuration: 2562048h}",
            "leaderElection.leaseDuration: must be a duration like '15s' or '1m30s', got '2562048h'",
            id="leaderElection.leaseDuration beyond Go's durations",
        ),
        pytest.param(
            LEADING + "resourceName: Usher_Lease}",
            "leaderElection.resourceName: the Lease's name must be a DNS-1123 subdomain",
            id="leaderElection.resourceName not a DNS-1123 subdomain",
        ),
        pytest.param(
            LEADING + "resourceNamespace: kube.system}",
            "leaderElection.resourceNamespace: must be a DNS-1123 label",
            id="leaderElection.resourceNamespace not a DNS-1123 label",
        ),
        pytest.param(
            "profiles: [{schedulerName: 'usher\\n'}]",
            "profiles[0].schedulerName: must be a DNS-1123 subdomain",
            id="profiles[].schedulerName with a trailing newline",
        ),
        pytest.param(
            "profiles: [{schedulerName: usher..packed}]",
            "profiles[0].schedulerName: must be a DNS-1123 subdomain",
            id="profiles[].schedulerName with an empty dot-separated part",
        ),
        pytest.param(
            "profiles: [{schedulerName: usher.-packed}]",
            "profiles[0].schedulerName: must be a DNS-1123 subdomain",
            id="profiles[].schedulerName with a part starting with a dash",
        ),
        pytest.param(
            f"profiles: [{{schedulerName: {'a' * 254}}}]",
            "profiles[0].schedulerName: must be a DNS-1123 subdomain",
            id="profiles[].schedulerName longer than 253",
        ),
        pytest.param(
            "profiles: [{schedulerName: ''}]",
            "profiles[0].schedulerName: must be a DNS-1123 subdomain",
            id="profiles[].schedulerName empty",
        ),
        pytest.param(
            ARGS + "DynamicResources, args: {filterTimeout: '-1s'}}]}]",
            "profiles[0].pluginConfig[0].args.filterTimeout: must be zero or positive, got '-1s'",
            id="DynamicResources filterTimeout negative",
        ),
        pytest.param(
            ARGS + "DynamicResources, args: {filterTimeout: .inf}}]}]",
            "profiles[0].pluginConfig[0].args.filterTimeout: must be a finite number, got inf",
            id="DynamicResources filterTimeout infinite",
        ),
        pytest.param(
            ARGS + "DynamicResources, args: {bindingTimeout: '-10m'}}]}]",
            "profiles[0].pluginConfig[0].args.bindingTimeout: must be at least 1 second, got '-10m'",
            id="DynamicResources bindingTimeout negative",
        ),
        pytest.param(
            ARGS + f"VolumeBinding, args: {{bindTimeoutSeconds: 1{'0' * 400}}}}}]}}]",
            "profiles[0].pluginConfig[0].args.bindTimeoutSeconds: out of range for an int64",
            id="VolumeBinding bindTimeoutSeconds beyond int64",
        ),
        pytest.param(
            ARGS + "DefaultPreemption, args: {minCandidateNodesPercentage: .nan}}]}]",
            "profiles[0].pluginConfig[0].args.minCandidateNodesPercentage: must be a finite number, got nan",
            id="DefaultPreemption minCandidateNodesPercentage nan",
        ),
        pytest.param(
            ARGS + "NodeResourcesFit, args: {scoringStrategy: {resources: [{name: cpu, weight: .inf}]}}}]}]",
            "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight: must be a finite number, got inf",
            id="NodeResourcesFit scoringStrategy.resources[].weight infinite",
        ),
    ],
)
def test_every_number_and_name_is_checked_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        parse(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("leaderElection: {retryPeriod: -1s, leaseDuration: 0s}", id="timings of an election that is off"),
        pytest.param("podInitialBackoffSeconds: 2.0\npodMaxBackoffSeconds: 4.0", id="whole numbers written as floats"),
        pytest.param(f"profiles: [{{schedulerName: {'a' * 64}}}]", id="a scheduler name longer than a label"),
        pytest.param("profiles: [{schedulerName: usher.example.com}]", id="a dotted scheduler name"),
        pytest.param(LEADING + "leaseDuration: 1m30s, renewDeadline: 1m, retryPeriod: 49.9s}", id="long timings"),
        pytest.param(ARGS + "DynamicResources, args: {filterTimeout: '0'}}]}]", id="a filter timeout of 0"),
    ],
)
def test_values_kube_scheduler_accepts_are_accepted(text: str) -> None:
    parse(text)


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


def test_the_readme_example_configuration_loads() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    example = readme.split("## Configuration file", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    config = parse_config(yaml.safe_load(example), registry=in_tree_registry())
    assert config.scheduler_names == ["usher", "usher-packed"]
    assert config.metrics_bind_address == "0.0.0.0:10251" and config.ignored == ()


def test_typed_plugin_args_as_kube_scheduler_dumps_them_are_accepted() -> None:
    """kube-scheduler's own defaulted configuration carries apiVersion and kind in every plugin's args."""
    typed = parse(
        "profiles: [{schedulerName: a, pluginConfig: [{name: NodeResourcesFit, args: "
        "{apiVersion: kubescheduler.config.k8s.io/v1, kind: NodeResourcesFitArgs, "
        "scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 1}]}}}]}]"
    )
    plain = parse(
        "profiles: [{schedulerName: a, pluginConfig: [{name: NodeResourcesFit, args: "
        "{scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 1}]}}}]}]"
    )
    assert (
        typed.profiles[0].plugin_config["NodeResourcesFit"].args
        == plain.profiles[0].plugin_config["NodeResourcesFit"].args
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            "{apiVersion: kubescheduler.config.k8s.io/v1, kind: InterPodAffinityArgs}",
            "profiles[0].pluginConfig[0]: args for plugin DefaultPreemption were not of type "
            "DefaultPreemptionArgs.kubescheduler.config.k8s.io, got InterPodAffinityArgs.kubescheduler.config.k8s.io",
            id="another plugin's kind (upstream's scheme test)",
        ),
        pytest.param(
            "{apiVersion: kubescheduler.config.k8s.io/v1beta3, kind: DefaultPreemptionArgs}",
            "profiles[0].pluginConfig[0].args.apiVersion: must be 'kubescheduler.config.k8s.io/v1' (or left out), "
            "got 'kubescheduler.config.k8s.io/v1beta3'",
            id="a version 1.37 does not serve",
        ),
    ],
)
def test_typed_plugin_args_of_another_type_are_refused_naming_it(args: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        parse(f"profiles: [{{schedulerName: a, pluginConfig: [{{name: DefaultPreemption, args: {args}}}]}}]")
