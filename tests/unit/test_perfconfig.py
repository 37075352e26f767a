"""The scheduler_perf executor's pure parts: reading the upstream performance-config files, params, templates.

Most tests read the real files of the pinned Kubernetes module (e2e/versions.env) from the Go
module cache, where ``e2e/build-binaries.sh`` puts it; they are skipped, saying so, when it was
never downloaded. Expected values are copied from the files at that version.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import gotemplate, perfconfig
from bench.contenders import histogram, histogram_delta, histogram_quantile
from bench.executor import ClusterPods, Executor, _Collector, base_node, base_pod
from bench.gotemplate import TemplateError, format_float, render
from bench.limit import ClusterLimitBinder
from bench.measure import scheduling_throughput
from bench.perfconfig import ConfigError, Params, enabled, parse_duration, render_object

try:
    PERF = perfconfig.scheduler_perf_dir()
except FileNotFoundError as missing:  # pragma: no cover - depends on the machine
    PERF = None
    MISSING = str(missing)
else:
    MISSING = ""

needs_module = pytest.mark.skipif(PERF is None, reason=f"Kubernetes module not downloaded: {MISSING}")


@functools.cache
def _all() -> list[perfconfig.TestCase]:
    return perfconfig.load_all()


def _cases() -> dict[str, perfconfig.TestCase]:
    return {tc.name: tc for tc in _all()}


def _ops(case: str, workload: str) -> list[perfconfig.Op]:
    tc = _cases()[case]
    ops, params = perfconfig.unroll(tc, tc.workload(workload))
    assert params.unused() == []
    return ops


# --------------------------------------------------------------------------- the upstream files


@needs_module
def test_every_upstream_file_parses_into_uniquely_named_test_cases_with_workloads() -> None:
    files = perfconfig.config_files()
    assert len(files) == 23
    cases = _all()
    assert len(cases) == 61
    assert len({tc.name for tc in cases}) == len(cases)
    assert all(tc.workloads and tc.ops for tc in cases)
    basic = _cases()["SchedulingBasic"]
    assert basic.group == "misc"
    assert basic.workload("500Nodes").params == {"initNodes": 500, "initPods": 500, "measurePods": 1000}
    assert basic.workload("5000Nodes_10000Pods").labels == ("performance",)
    assert basic.default_pod_template_path == PERF / "misc" / "../templates/pod-default.yaml"


@needs_module
def test_every_workload_uses_all_its_params_except_the_ones_upstream_itself_cannot_run() -> None:
    broken: dict[str, str] = {}
    for tc in _all():
        for workload in tc.workloads:
            try:
                _, params = perfconfig.unroll(tc, workload)
            except ConfigError as error:
                broken[f"{tc.name}/{workload.name}"] = str(error)
                continue
            if params.unused():
                broken[f"{tc.name}/{workload.name}"] = f"unused {params.unused()}"
    assert broken == {
        # Upstream bugs at v1.37.1: these workloads have no measurePods (and no labels, so CI never runs them).
        "SchedulingWithResourceClaimTemplate/empty_100nodes": "parameter measurePods is undefined",
        "SchedulingWithResourceClaimTemplate/empty_200nodes": "parameter measurePods is undefined",
        # Read by the Go hook of node_declared_features_test.go, not by any op.
        **{
            f"NodeDeclaredFeaturesEnabled/{name}": "unused ['numNodeDeclaredFeatures']"
            for name in (
                "5Nodes5DeclaredFeatures",
                "5000Nodes20DeclaredFeatures",
                "5000Nodes40DeclaredFeatures",
                "5000Nodes100DeclaredFeatures",
            )
        },
    }


@needs_module
def test_count_params_are_substituted_into_each_op() -> None:
    ops = _ops("SchedulingBasic", "500Nodes")
    assert [(op.opcode, op.count, bool(op.get("collectMetrics"))) for op in ops] == [
        ("createNodes", 500, False),
        ("createPods", 500, False),
        ("createPods", 1000, True),
    ]
    assert [op.index for op in ops] == [0, 1, 2]


@needs_module
def test_create_pod_sets_unroll_into_one_create_pods_per_namespace() -> None:
    ops = _ops("SchedulingRequiredPodAntiAffinityWithNSSelector", "500Nodes")
    pods = [op for op in ops if op.opcode == "createPods"]
    assert [(op.get("namespace"), op.count) for op in pods] == [
        *((f"init-ns-{i}", 4) for i in range(10)),
        ("measure-ns-0", 100),
    ]
    assert {op.index for op in pods[:10]} == {3}


@needs_module
def test_template_params_take_workload_params_or_their_yaml_defaults() -> None:
    ops = _ops("SchedulingWithResourceClaimTemplate", "5000pods_500nodes")
    slices, _, claims, _, template, pods = ops[2:]
    assert slices.get("templateParams") == {"numPCIRoots": 2, "numDevices": 10}  # "$numPCIRoots|2"
    assert (slices.count, claims.count, claims.get("namespace")) == (500, 2500, "init")
    assert template.get("templateParams") == {"numRequests": 1, "selectors": None, "constraints": None}
    assert (pods.count, pods.get("steadyState"), pods.get("duration")) == (2500, False, 0.0)
    match = _ops("SchedulingWithResourceClaimTemplate", "match_fast")[6]
    assert match.get("templateParams") == {
        "numRequests": 5,
        "selectors": None,
        "constraints": [{"matchAttribute": "resource.kubernetes.io/pciRoot"}],
    }


@needs_module
def test_steady_state_and_duration_params_become_a_boolean_and_seconds() -> None:
    pods = _ops("SchedulingWithResourceClaimTemplate", "empty_500nodes")[-1]
    assert (pods.count, pods.get("steadyState"), pods.get("duration"), pods.get("collectMetrics")) == (
        10,
        True,
        10.0,
        True,
    )


@needs_module
def test_signature_batch_size_defaults_to_one_and_takes_its_param() -> None:
    assert _ops("SchedulingBasic", "500Nodes")[-1].get("signatureBatchSize") == 1
    batched = _ops("HostPortConflict", "10Nodes_10Pods_10BatchSize")[-1]
    assert batched.get("signatureBatchSize") == 10


@needs_module
def test_every_upstream_opcode_is_run_by_the_executor_or_listed_unsupported() -> None:
    used = {op["opcode"] for tc in _all() for op in tc.ops}
    handled = set(Executor.handlers(Executor.__new__(Executor)))
    known = handled | set(perfconfig.UNSUPPORTED_OPCODES) | perfconfig.UNROLLED_OPCODES
    assert used <= known
    assert known == set(perfconfig.OPCODES)
    assert not handled & (set(perfconfig.UNSUPPORTED_OPCODES) | perfconfig.UNROLLED_OPCODES)


@needs_module
def test_selection_takes_fitting_performance_workloads_else_a_stand_in_and_says_why_not() -> None:
    chosen = {s.key: s for s in perfconfig.select(_all())}
    template = chosen["SchedulingWithResourceClaimTemplate"]
    assert template.bench is not None and template.bench.name == "5000pods_500nodes" and not template.stand_in
    basic = chosen["SchedulingBasic"]
    assert basic.bench is not None and basic.bench.name == "500Nodes" and basic.stand_in
    assert "smallest: 5000Nodes_10000Pods, 5000 nodes, 11000 pods" in basic.reason
    assert basic.smoke is not None and basic.smoke.name == "5Nodes"
    assert [w.name for w in basic.smallest] == ["5Nodes", "5Nodes_AsyncAPICallsEnabled"]
    # Without a performance workload, the largest that fits runs, at integration size, in make bench-large.
    taints = chosen["DeviceTaintToleration"]
    assert taints.bench is not None and taints.bench.name == "fast" and taints.stand_in and taints.integration_size
    assert taints.reason == "no workload labelled performance" and taints.tier == perfconfig.LARGE
    claims = chosen["SchedulingWithResourceClaim"]
    assert claims.bench is not None and claims.bench.name == "5000pods_500nodes" and claims.integration_size
    # The event-handling cases' 6000-7000 pods are allowed (LARGER_PODS); other test cases keep MAX_PODS.
    node_add = chosen["EventHandlingNodeAdd"]
    assert node_add.bench is not None and node_add.bench.name == "100Nodes_1000Pods" and not node_add.stand_in
    assert node_add.tier == perfconfig.LARGE
    gangs = chosen["GangScheduling"]
    assert gangs.bench is not None and perfconfig.size(gangs.test_case, gangs.bench).pods == 3000
    declared = chosen["NodeDeclaredFeaturesEnabled"]
    assert not declared.runnable and "WithNodeUpdateFn" in declared.unsupported[0]
    daemonset = chosen["SchedulingDaemonset"]
    assert daemonset.bench is None and "15000Nodes" in daemonset.reason
    wider = {s.key: s for s in perfconfig.select(_all(), max_nodes=5000, max_pods=11000)}
    assert wider["SchedulingBasic"].bench == basic.test_case.workload("5000Nodes_10000Pods")


@needs_module
def test_make_bench_runs_the_standard_sizes_and_bench_large_the_rest() -> None:
    from bench import upstream

    chosen = {s.key: s for s in perfconfig.select(_all())}
    assert chosen["SchedulingWithResourceClaimTemplate"].tier == perfconfig.STANDARD  # 500 nodes, 2500 pods
    assert chosen["SchedulingBasic"].tier == perfconfig.STANDARD
    assert chosen["GangScheduling"].tier == perfconfig.STANDARD  # 5000 nodes, but the gang workload of make bench
    for large in ("PreemptionBasic", "SharedPodGroupResourceClaim", "TopologyAwareScheduling", "EventHandlingPodAdd"):
        assert chosen[large].tier == perfconfig.LARGE, large
    for at_1000_nodes in ("Partitionable", "SchedulingWithMixedChurn", "SchedulingDeletedPodsWithFinalizers"):
        assert perfconfig.size(chosen[at_1000_nodes].test_case, chosen[at_1000_nodes].bench).nodes == 1000
        assert chosen[at_1000_nodes].tier == perfconfig.LARGE, at_1000_nodes
    standard = {s.key for s in upstream.selections(upstream.Options(tiers=(perfconfig.STANDARD,)))}
    larger = {s.key for s in upstream.selections(upstream.Options(tiers=(perfconfig.LARGE,)))}
    assert not standard & larger and standard | larger == set(chosen) | {"SchedulingBasic.5000Nodes_10000Pods"}
    assert "PreemptionAsync" in standard and "PreemptionBasic" in larger
    # SchedulingBasic at 5000 nodes and 10000 pods runs besides its 500-node stand-in, in the large tier only,
    # under a result name of its own, and never in the smoke test.
    every = upstream.selections(upstream.Options())
    extra = [s for s in every if s.extra]
    assert [(s.key, s.tier) for s in extra] == [("SchedulingBasic.5000Nodes_10000Pods", perfconfig.LARGE)]
    assert extra[0].bench is not None and perfconfig.size(extra[0].test_case, extra[0].bench).pods == 11000
    assert "SchedulingBasic.5000Nodes_10000Pods" in larger and "SchedulingBasic" in standard
    assert not [s for s in upstream.selections(upstream.Options(smoke=True)) if s.extra]
    # Naming a test case runs it whatever its tier.
    named = upstream.selections(upstream.Options(tiers=(perfconfig.STANDARD,), names=["PreemptionBasic"]))
    assert [s.key for s in named] == ["PreemptionBasic"]


@needs_module
def test_feature_defaults_come_from_the_pinned_kube_features() -> None:
    defaults = perfconfig.feature_defaults()
    assert defaults["DynamicResourceAllocation"] == perfconfig.GateSpec(True, "GA", True)
    assert defaults["SchedulerAsyncAPICalls"] == perfconfig.GateSpec(False, "Beta", False)
    assert defaults["SchedulerPreQueueingHints"] == perfconfig.GateSpec(False, "Alpha", False)
    assert defaults["GenericWorkload"].default is False


@needs_module
def test_gates_merge_the_workloads_over_the_test_cases() -> None:
    tc = _cases()["ConsumableCapacity"]
    assert tc.gates(tc.workload("fast_with_DRAPartitionableDevices")) == {
        "DynamicResourceAllocation": True,
        "DRAConsumableCapacity": True,
        "DRAPartitionableDevices": True,
        "DRAResourceClaimDeviceStatus": True,
    }


# --------------------------------------------------------------------------- templates


@needs_module
def test_the_resource_slice_template_renders_devices_with_cycling_pci_roots() -> None:
    slice_ = render_object(
        PERF / "dra/templates/resourceslice-basic-devices.yaml", {"Index": 3, "numDevices": 3, "numPCIRoots": 2}
    )
    assert slice_["metadata"]["name"] == "resourceslice-3"
    assert slice_["spec"]["nodeName"] == "scheduler-perf-dra-3"
    devices = slice_["spec"]["devices"]
    assert [d["name"] for d in devices] == ["basic-device-0", "basic-device-1", "basic-device-2"]
    assert [d["attributes"]["resource.kubernetes.io/pciRoot"]["string"] for d in devices] == [
        "pci0000:00",
        "pci0000:01",
        "pci0000:00",
    ]
    assert devices[1]["attributes"]["driverVersion"] == {"version": "1.2.3"}
    assert devices[0]["capacity"]["millicores"] == {"value": "1k"}


@needs_module
def test_the_claim_template_renders_requests_and_json_params() -> None:
    template = render_object(
        PERF / "dra/templates/resourceclaimtemplate.yaml",
        {"numRequests": 2, "selectors": None, "constraints": [{"matchAttribute": "x/y"}]},
    )
    devices = template["spec"]["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == ["req-0", "req-1"]
    assert devices["requests"][0]["exactly"] == {"deviceClassName": "test-class", "selectors": None}
    assert devices["constraints"] == [{"matchAttribute": "x/y"}]


@needs_module
def test_the_gang_pod_template_branches_on_its_params() -> None:
    path = PERF / "default_preemption/templates/gang-pod.yaml"
    plain = render_object(path, {"Index": 7, "podsPerGroup": 3, "disruptionMode": "", "cpuRequest": "300m"})
    assert plain["spec"]["priority"] == 1000 and "schedulingGroup" not in plain["spec"]
    assert plain["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "300m"
    grouped = render_object(path, {"Index": 7, "podsPerGroup": 3, "disruptionMode": "single", "priority": 5})
    assert grouped["spec"]["priority"] == 5
    assert grouped["spec"]["schedulingGroup"] == {"podGroupName": "gang-2"}
    assert grouped["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "50m"


@needs_module
def test_the_list_attributes_template_renders_nested_ranges_with_variables() -> None:
    slice_ = render_object(
        PERF / "dra/templates/resourceslice-list-attributes-devices.yaml",
        {"Index": 0, "numDevices": 3, "numListValues": 2, "numNonMatchingDevices": 2},
    )
    values = [d["attributes"]["dra.example.com/match"]["strings"] for d in slice_["spec"]["devices"]]
    assert values == [
        ["device-0-value-0", "device-0-value-1"],
        ["device-1-value-0", "device-1-value-1"],
        ["shared-value", "device-2-value-0", "device-2-value-1"],
    ]


@needs_module
def test_count_is_available_to_templates() -> None:
    pod = render_object(PERF / "event_handling/templates/podupdate-pod-noderesources.yaml", {"Index": 4, "Count": 300})
    assert pod["metadata"]["name"] == "pod-noderesources-4"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": 0.0001, "memory": "100Mi"}


def test_trim_markers_comments_and_else_if() -> None:
    text = "a {{- /* gone */ -}} b {{if .x}}X{{else if .y}}Y{{else}}Z{{end}}|{{if .z}}{{else}}none{{end}}"
    assert render(text, {"y": 1}) == "ab Y|none"
    assert render(text, {"x": "yes"}) == "ab X|none"


def test_range_over_integers_lists_and_maps_with_variables() -> None:
    assert render("{{range 3}}[{{.}}]{{end}}", {}) == "[0][1][2]"
    assert render("{{range $i, $v := .l}}{{$i}}={{$v}} {{end}}", {"l": ["a", "b"]}) == "0=a 1=b "
    assert render("{{range $k, $v := .m}}{{$k}}:{{$v}};{{end}}", {"m": {"b": 2, "a": 1}}) == "a:1;b:2;"
    assert render("{{range .l}}x{{else}}empty{{end}}", {"l": []}) == "empty"
    assert render("{{$n := 2}}{{range $i := $n}}{{$i}}{{$}}{{end}}", "d") == "0d1d"


def test_missing_keys_are_no_value_and_false() -> None:
    assert render("{{.missing}}", {}) == "<no value>"
    assert render("{{or .missing 64}}", {}) == "64"
    assert render("{{and .a .missing}}", {"a": 1}) == "<no value>"
    assert render("{{if not .missing}}off{{end}}", {}) == "off"


def test_pipelines_parentheses_and_comparisons() -> None:
    functions = {"Int": int, "AddInt": lambda *n: sum(int(v) for v in n)}
    assert render("{{(or .n 5) | Int}}", {}, functions) == "5"
    assert render("{{AddInt 1 (AddInt .a 2)}}", {"a": 3}, functions) == "6"
    assert render('{{if eq .c "x" "y"}}in{{end}}', {"c": "y"}) == "in"
    assert render("{{if ge .i 2}}big{{else}}small{{end}}", {"i": 1}) == "small"
    assert render('{{print "a" 1 true}}', {}) == "a1true"
    assert render("{{$x := 1}}{{$x = 2}}{{$x}}", {}) == "2"


def test_template_errors_name_what_is_wrong() -> None:
    with pytest.raises(TemplateError, match='function "Nope" not defined'):
        render("{{Nope 1}}", {})
    with pytest.raises(TemplateError, match="without"):
        render("{{if .a}}x", {})
    with pytest.raises(TemplateError, match="range can't iterate"):
        render("{{range .missing}}{{end}}", {})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (3.0, "3"),
        (0.5, "0.5"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (1e-4, "0.0001"),
        (1.5e-7, "1.5e-07"),
        (-2.25, "-2.25"),
        (0.0, "0"),
        (math.inf, "+Inf"),
    ],
)
def test_floats_print_as_go_prints_them(value: float, text: str) -> None:
    assert format_float(value) == text
    assert gotemplate.format_value(value) == text


def test_scheduler_perf_template_functions() -> None:
    functions = perfconfig.TEMPLATE_FUNCS
    assert functions["DivideInt"](7, 2) == 3 and functions["Mod"](7.0, 3) == 1
    assert functions["AddInt"](1, 2.5, "3") == 6 and functions["MultiplyInt"](2, 3.5) == 7
    assert functions["SubtractFloat"](1, 0.25) == 0.75 and functions["Int"]("12") == 12
    assert functions["JSON"]([{"b": 1.0, "a": "<x>"}]) == '[{"a":"<x>","b":1}]'
    assert functions["JSON"](None) == "null"
    with pytest.raises(ConfigError, match="division by zero"):
        functions["DivideInt"](1, 0)


# --------------------------------------------------------------------------- params


def test_template_params_resolve_references_defaults_and_mark_them_used() -> None:
    params = Params({"a": 5, "unused": 1})
    resolved = params.resolve_template_params({"x": "$a", "y": "$b|2", "z": "$c|", "w": "$d|text", "k": "plain"})
    assert resolved == {"x": 5, "y": 2, "z": None, "w": "text", "k": "plain"}
    assert params.unused() == ["unused"]
    with pytest.raises(ConfigError, match='parameter "missing" not found'):
        params.resolve_template_params({"x": "$missing"})


def test_params_have_go_types_no_conversion() -> None:
    params = Params({"n": 3, "f": 2.9, "s": "10s", "b": True})
    assert params.integer("$n") == 3 and params.integer("$f") == 2
    assert params.string("$s") == "10s" and params.boolean("$b") is True
    with pytest.raises(ConfigError, match="wrong type"):
        params.integer("$s")
    with pytest.raises(ConfigError, match="wrong type"):
        params.integer("$b")
    with pytest.raises(ConfigError, match="undefined"):
        params.integer("$nope")


def test_ops_are_validated_as_upstream_validates_them() -> None:
    params = Params({"n": 1})
    with pytest.raises(ConfigError, match="collectMetrics and skipWaitToCompletion"):
        perfconfig.patch(
            {"opcode": "createPods", "count": 1, "collectmetrics": True, "skipwaittocompletion": True}, 0, params
        )
    with pytest.raises(ConfigError, match="duration must be > 0"):
        perfconfig.patch({"opcode": "createPods", "count": 1, "steadystate": True}, 0, params)
    with pytest.raises(ConfigError, match="invalid StageRequirement"):
        perfconfig.patch({"opcode": "barrier", "stagerequirement": "Bound"}, 0, params)
    with pytest.raises(ConfigError, match="number must be > 0"):
        perfconfig.patch({"opcode": "churn", "mode": "recreate", "templatepaths": ["x"]}, 0, params)
    assert perfconfig.patch({"opcode": "barrier"}, 0, params).get("stageRequirement") == "Scheduled"


def test_unknown_fields_and_opcodes_are_errors(tmp_path: Path) -> None:
    cases = {
        r"unknown field\(s\) \['cont'\]": "- opcode: createPods\n    cont: 1",
        "unknown opcode 'teleport'": "- opcode: teleport",
        "no op in the workload template collects metrics": "- opcode: createPods\n    count: 1",
    }
    for i, (error, op) in enumerate(cases.items()):
        config = tmp_path / f"{i}.yaml"  # files are read once per path
        config.write_text(f"- name: T\n  workloadTemplate:\n  {op}\n  workloads: [{{name: w}}]\n")
        with pytest.raises(ConfigError, match=error):
            perfconfig.load_test_cases(config)


def test_field_names_match_case_insensitively_like_go_json(tmp_path: Path) -> None:
    config = tmp_path / "performance-config.yaml"
    config.write_text(
        "- Name: T\n  WorkloadTemplate:\n  - Opcode: createPods\n    CountParam: $n\n    CollectMetrics: true\n"
        "  Workloads: [{Name: w, Params: {n: 4}, Labels: [performance]}]\n"
    )
    (tc,) = perfconfig.load_test_cases(config)
    ops, _ = perfconfig.unroll(tc, tc.workload("w"))
    assert (ops[0].count, ops[0].get("collectMetrics")) == (4, True)
    assert tc.labels_of(tc.workload("w")) == ("performance",)


@pytest.mark.parametrize(
    ("selectors", "labels", "expected"),
    [
        (["performance"], ["performance", "short"], True),
        (["performance"], ["integration-test"], False),
        (["integration-test", "-performance"], ["integration-test", "short"], True),
        (["integration-test", "-performance"], ["integration-test", "performance"], False),
        (["+short", ""], ["short"], True),
        ([], [], True),
    ],
)
def test_label_filters_work_as_scheduler_perfs(selectors: list[str], labels: list[str], expected: bool) -> None:
    assert enabled(selectors, labels) is expected


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("1m30s", 90.0), ("250ms", 0.25), ("0s", 0.0), ("1h", 3600.0)]
)
def test_durations_parse_as_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_duration_without_unit_is_an_error() -> None:
    with pytest.raises(ConfigError, match="invalid duration"):
        parse_duration("10")


# --------------------------------------------------------------------------- measurement


def test_throughput_skips_until_the_first_pod_and_weights_skipped_ticks() -> None:
    ticks = [(1.0, 0), (2.0, 5), (3.0, 15), (4.0, 15), (5.0, 35), (6.0, 41)]
    stats = scheduling_throughput(ticks)
    # t=2 starts the clock; t=3: 10/s; t=4 no new pod (skipped); t=5: 20 pods over 2 s, counted twice; t=6: 6/s.
    assert stats["rates"] == [10.0, 10.0, 10.0, 6.0]
    assert stats["average"] == pytest.approx(9.0)
    assert (stats["p50"], stats["p90"], stats["p99"], stats["samples_used"]) == (10.0, 10.0, 10.0, 4)


def test_throughput_of_a_phase_too_short_to_sample_has_no_statistics() -> None:
    stats = scheduling_throughput([(1.0, 10)])
    assert stats == {"samples_used": 0, "rates": []}


async def test_a_phase_s_overall_rate_ends_at_its_last_binding_not_when_the_wait_noticed_it() -> None:
    now = [100.0]
    pods = ClusterPods(api=None)  # type: ignore[arg-type]  # the collector only listens
    collector = _Collector("m", ["ns"], {"app": "x"}, pods, clock=lambda: now[0])
    collector.start()
    for t, namespace, labels in ((100.2, "ns", {"app": "x"}), (100.4, "other", {"app": "x"}), (100.5, "ns", {})):
        now[0] = t
        for listener in pods.listeners:
            listener(namespace, "p", labels)
    now[0] = 100.4
    for listener in pods.listeners:
        listener("ns", "q", {"app": "x", "more": "y"})
    now[0] = 100.6  # the op's wait re-checked 0.2 s later
    phase = await collector.stop()
    # Two pods counted (the other namespace and the unmatched selector are not), the last at 0.4 s.
    assert (phase["scheduled"], phase["scheduling_s"], phase["elapsed_s"]) == (2, 0.4, 0.6)
    assert phase["overall"] == pytest.approx(5.0)
    assert pods.listeners == []


async def test_a_phase_that_scheduled_nothing_rates_zero_over_its_whole_time() -> None:
    now = [5.0]
    collector = _Collector("m", ["ns"], None, ClusterPods(api=None), clock=lambda: now[0])  # type: ignore[arg-type]
    collector.start()
    now[0] = 7.0
    phase = await collector.stop()
    assert (phase["scheduled"], phase["scheduling_s"], phase["overall"]) == (0, 2.0, 0.0)


METRICS_BEFORE = """# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.001"} 1
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.002"} 1
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.004"} 1
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="+Inf"} 1
scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="scheduled"} 1
scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="scheduled"} 0.0005
"""
METRICS_AFTER = """# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.001"} 1
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.002"} 11
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="0.004"} 21
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="scheduled",le="+Inf"} 21
scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="scheduled"} 21
scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="scheduled"} 0.05
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="unschedulable",le="0.001"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="unschedulable",le="0.002"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="unschedulable",le="0.004"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="p",result="unschedulable",le="+Inf"} 2
scheduler_scheduling_attempt_duration_seconds_count{profile="p",result="unschedulable"} 2
scheduler_scheduling_attempt_duration_seconds_sum{profile="p",result="unschedulable"} 20
"""


def test_histogram_quantiles_of_what_was_observed_between_two_scrapes() -> None:
    name = "scheduler_scheduling_attempt_duration_seconds"
    delta = histogram_delta(histogram(METRICS_AFTER, name, result="scheduled"), histogram(METRICS_BEFORE, name))
    assert delta == {0.001: 0.0, 0.002: 10.0, 0.004: 20.0, math.inf: 20.0}
    assert histogram_quantile(0.5, delta) == pytest.approx(0.002)
    assert histogram_quantile(0.99, delta) == pytest.approx(0.00396)
    unschedulable = histogram(METRICS_AFTER, name, result="unschedulable")
    assert histogram_quantile(0.5, unschedulable) == 0.004  # in +Inf: the highest finite bound
    assert histogram_quantile(0.5, {}) is None
    assert histogram(METRICS_AFTER, name)[math.inf] == 23.0


def test_attempt_durations_report_each_result_in_milliseconds() -> None:
    from bench.upstream import attempt_durations

    durations = attempt_durations(METRICS_BEFORE, METRICS_AFTER)
    assert durations["scheduled"] == {"count": 20, "p50": 2.0, "p99": 3.96}
    assert durations["unschedulable"] == {"count": 2, "p50": 4.0, "p99": 4.0}
    assert durations["error"] == {"count": 0, "p50": None, "p99": None}
    assert durations["all"]["count"] == 22


def _run(status: str, average: float | None, overall: float, cpu: float, scheduled: int, rss: float) -> dict[str, Any]:
    phase: dict[str, Any] = {"scheduled": scheduled, "overall": overall, "scheduler_cpu_s": cpu}
    if average is not None:
        phase.update(average=average, p50=average, p90=average, p99=average)
    phase["attempt_duration_ms"] = {"scheduled": {"p50": 1.0, "p99": 9.0}}
    return {"status": status, "phases": [phase], "scheduler": {"peak_rss_mib": rss}}


def test_a_phase_too_short_for_three_samples_is_rated_over_its_whole_time() -> None:
    """One or two 1 s samples of a 2.5 s phase rate where their windows fell: the report then uses pods over
    the phase, for both schedulers alike."""
    from bench import report
    from bench.upstream import summarize

    def doc(usher_samples: int, kube_samples: int) -> dict[str, Any]:
        usher = [_run("ok", 330.0, 410.0, 1.0, 1000, 100.0) for _ in range(3)]
        kube = [_run("ok", 380.0, 350.0, 2.0, 1000, 100.0) for _ in range(3)]
        for run in usher:
            run["phases"][0]["samples_used"] = usher_samples
        for run in kube:
            run["phases"][0]["samples_used"] = kube_samples
        runs = {"usher": usher, "kube-scheduler": kube}
        return {"runs": runs, "summary": {k: summarize(v) for k, v in runs.items()}}

    short = doc(1, 2)
    assert report.upstream_rate(short, "usher") == (410.0, "overall")
    assert report.upstream_rate(short, "kube-scheduler") == (350.0, "overall")
    assert report.upstream_ratio(short, "rate") == pytest.approx(410 / 350)
    long = doc(3, 4)
    assert report.upstream_rate(long, "usher") == (330.0, "average")
    assert report.upstream_ratio(long, "rate") == pytest.approx(330 / 380)
    # One run too short is enough: the average of the others would not be the same kind of number.
    mixed = doc(3, 3)
    mixed["runs"]["usher"][1]["phases"][0]["samples_used"] = 2
    assert report.upstream_rate(mixed, "usher")[1] == "overall"


def test_summaries_take_median_and_spread_of_completed_runs_only() -> None:
    from bench.upstream import summarize

    runs = [
        _run("ok", 100.0, 90.0, 2.0, 1000, 150.0),
        _run("ok", 300.0, 250.0, 1.0, 1000, 170.0),
        _run("ok", 200.0, 180.0, 1.5, 500, 160.0),
        _run("error", 999.0, 999.0, 9.0, 1000, 999.0),
    ]
    summary = summarize(runs)
    assert (summary["runs"], summary["completed"]) == (4, 3)
    assert summary["average"] == {"median": 200.0, "min": 100.0, "max": 300.0, "n": 3}
    assert summary["cpu_s_per_1000_pods"] == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert summary["peak_rss_mib"]["median"] == 160.0
    assert summary["attempt_p99_ms"]["median"] == 9.0


def test_the_report_compares_like_with_like_and_shows_why_a_test_case_did_not_run() -> None:
    from bench import report
    from bench.upstream import summarize

    usher = [_run("ok", 150.0, 140.0, 1.0, 1000, 200.0) for _ in range(3)]
    kube = [_run("ok", 100.0, 95.0, 2.0, 1000, 100.0) for _ in range(3)]
    short = [_run("ok", None, 50.0, 1.0, 10, 100.0)]
    doc = {
        "test_case": "T",
        "group": "misc",
        "status": "ok",
        "workload": {"name": "w", "size": "5 nodes, 15 pods", "stand_in": True},
        "runs": {"usher": usher, "kube-scheduler": kube, "limit": short},
        "summary": {"usher": summarize(usher), "kube-scheduler": summarize(kube), "limit": summarize(short)},
    }
    assert report.upstream_ratio(doc, "rate") == 1.5
    assert report.upstream_ratio(doc, "cpu") == 0.5
    mixed = {**doc, "summary": {**doc["summary"], "usher": summarize(short)}}
    assert report.upstream_ratio(mixed, "rate") == pytest.approx(50.0 / 95.0)  # overall for both
    refused = {**doc, "test_case": "R", "status": "usher refuses: no gate X", "runs": {}, "summary": {}}
    table = "\n".join(report.upstream_table([doc, refused]))
    assert "| T (misc) | w (stand-in): 5 nodes, 15 pods | ok | 150 | 100 | 50† | 1.50x |" in table
    assert "| R (misc) | w (stand-in): 5 nodes, 15 pods | usher refuses: no gate X |" in table


def test_runs_rotate_each_round_and_the_bind_limit_runs_in_the_first_rounds_only() -> None:
    from bench.upstream import run_order

    keys = ["usher", "kube-scheduler", "limit"]
    assert run_order(keys, 3, {"limit": 1}) == [
        ("usher", 0), ("kube-scheduler", 0), ("limit", 0),
        ("kube-scheduler", 1), ("usher", 1),
        ("usher", 2), ("kube-scheduler", 2),
    ]  # fmt: skip
    assert [k for k, _ in run_order(keys, 3, {"limit": 3})].count("limit") == 3
    assert run_order(["usher"], 2, {"limit": 1}) == [("usher", 0), ("usher", 1)]
    twice = run_order(["a", "b", "c"], 3, {"b": 2, "c": 1})
    assert [k for k, _ in twice] == ["a", "b", "c", "b", "a", "a"]


def test_a_hand_written_workload_runs_the_contenders_its_targets_compare_three_times_and_the_rest_less() -> None:
    from bench.runner import run_plan
    from bench.workloads import by_name

    every = ["usher-pqh-on", "usher-pqh-off", "kube-scheduler-pqh-on", "kube-scheduler-pqh-off", "limit"]
    gated, burst = by_name(["SchedulingGated_5000gated_1000pods", "ClaimBurst_2000"])

    def counts(plan: list[tuple[str, int]]) -> dict[str, int]:
        return {key: [k for k, _ in plan].count(key) for key in dict(plan)}

    assert counts(run_plan(gated, every, 3, 1, planned=True, lead=0)) == {
        "usher-pqh-on": 3, "kube-scheduler-pqh-off": 3, "limit": 1,
    }  # fmt: skip
    assert counts(run_plan(burst, every, 3, 1, planned=True, lead=1)) == {
        "usher-pqh-on": 3, "usher-pqh-off": 1, "kube-scheduler-pqh-on": 3, "kube-scheduler-pqh-off": 1, "limit": 1,
    }  # fmt: skip
    named = run_plan(gated, every, 1, 1, planned=False, lead=0)
    assert [k for k, _ in named] == every, "contenders named with -c all run, whatever the workload's plan"


@needs_module
def test_workloads_measuring_few_pods_may_run_more_times_unless_the_repetitions_are_given() -> None:
    from bench import upstream
    from bench.runner import parse_args, upstream_options

    chosen = {s.key: s for s in perfconfig.select(_all())}

    def may(key: str, options: upstream.Options) -> bool:
        selection = chosen[key]
        assert selection.bench is not None
        return upstream.may_be_short(perfconfig.size(selection.test_case, selection.bench), options)

    short = "SchedulingRequiredPodAntiAffinityWithNSSelector"
    sizes = {key: perfconfig.size(chosen[key].test_case, chosen[key].bench) for key in (short, "SchedulingBasic")}
    assert sizes[short].measured_pods == 100 and sizes["SchedulingBasic"].measured_pods == 1000
    default = upstream_options(parse_args([]))
    assert default.short_repetitions == upstream.SHORT_REPETITIONS > default.repetitions == 3
    assert may(short, default) and not may("SchedulingBasic", default)
    # A steady state measures few pods over many seconds: not short.
    steady = perfconfig.Size(nodes=10, pods=10, steady_seconds=10.0, measured_pods=10)
    assert not upstream.may_be_short(steady, default)
    # --repetitions and the smoke test hold for every workload.
    assert not may(short, upstream_options(parse_args(["--repetitions", "1"])))
    assert not may(short, upstream_options(parse_args(["--smoke"])))
    assert not may(short, upstream_options(parse_args(["--repetitions", "7"])))


def _timed_run(*seconds: float, status: str = "ok") -> dict[str, Any]:
    return {"status": status, "phases": [{"elapsed_s": s} for s in seconds]}


def test_phases_are_short_by_the_median_of_both_schedulers_first_rounds() -> None:
    from bench.upstream import SHORT_DECIDED_AFTER, short_phases

    assert SHORT_DECIDED_AFTER == 2
    quick, slow = _timed_run(0.3), _timed_run(3.6)
    # Undecided until usher and kube-scheduler have both run twice; the bind limit does not count.
    assert short_phases({"usher": [quick, quick], "kube-scheduler": [quick], "limit": [quick]}) is None
    assert short_phases({"usher": [quick, quick]}) is None
    assert short_phases({"usher": [quick, quick], "kube-scheduler": [quick, quick], "limit": [slow]}) is True
    # GangPreemption's 100 pods that preempt: 2-5 s.
    assert short_phases({"usher": [slow, slow], "kube-scheduler": [slow, slow], "limit": [quick]}) is False
    # The median over every measured phase of both: three of five under a second.
    mixed = {"usher": [_timed_run(0.4, 2.0), quick], "kube-scheduler": [_timed_run(0.9), slow]}
    assert short_phases(mixed) is True
    mixed["kube-scheduler"][0] = _timed_run(1.0)
    assert short_phases(mixed) is False
    # Failed runs measure nothing; with no completed phase at all, nothing is short.
    failed = _timed_run(0.1, status="timeout")
    assert short_phases({"usher": [failed, slow], "kube-scheduler": [failed, failed]}) is False
    assert short_phases({"usher": [failed, failed], "kube-scheduler": [failed, failed]}) is False


def test_the_report_says_which_workloads_ran_more_times_and_how_far_below_a_row_is() -> None:
    from bench import report

    assert report._short_of(0.8, 1.0) == "0.80x"
    assert report._short_of(0.997, 1.0) == "0.997x"  # below, though it rounds to 1.00

    assert report._repetitions_text([3, 3, 3]) == "3 time(s)"
    assert report._repetitions_text([3, 5, 3, 5]).startswith("3 time(s) (5 on 2 workload(s): ")


def test_the_api_server_s_garbage_collections_are_read_from_its_metrics() -> None:
    from bench.kube import gc_count

    metrics = (
        "# HELP go_gc_duration_seconds A summary of the wall-time pause (stop-the-world) duration in garbage "
        "collection cycles.\n"
        "# TYPE go_gc_duration_seconds summary\n"
        'go_gc_duration_seconds{quantile="0"} 2.1e-05\n'
        "go_gc_duration_seconds_sum 0.0123\n"
        "go_gc_duration_seconds_count 17\n"
        "go_goroutines 412\n"
    )
    assert gc_count(metrics) == 17
    with pytest.raises(ValueError, match="go_gc_duration_seconds_count"):
        gc_count("go_goroutines 412\n")


def test_the_report_counts_the_measured_phases_in_which_the_api_server_collected() -> None:
    from bench import report

    def run(*cycles: int | None) -> dict[str, Any]:
        return {"phases": [{} if c is None else {"apiserver_gc_cycles": c} for c in cycles]}

    docs = [
        {"runs": {"usher": [run(0), run(1)], "kube-scheduler": [run(0), run(2, None)]}},
        {"runs": {"usher": [run(0)]}},
    ]
    assert report._gc_text(docs) == (
        " The API server collected during 2 of the 5 measured phases (the longer ones: its heap grows with the pods)."
    )
    assert report._gc_text([{"runs": {"usher": [run(None)]}}]) == "", "results from before the count: nothing said"


def test_each_workload_s_first_run_goes_to_the_contender_its_position_names() -> None:
    from bench.upstream import run_order

    keys = ["usher", "kube-scheduler", "limit"]
    assert run_order(keys, 3, {"limit": 1}, lead=1) == [
        ("kube-scheduler", 0), ("limit", 0), ("usher", 0),
        ("usher", 1), ("kube-scheduler", 1),
        ("usher", 2), ("kube-scheduler", 2),
    ]  # fmt: skip
    firsts = [run_order(keys, 3, {"limit": 1}, lead=position)[0][0] for position in range(6)]
    assert firsts == keys + keys
    assert run_order(keys, 3, {"limit": 1}, lead=3) == run_order(keys, 3, {"limit": 1})
    # Rounds added once a workload's phases turn out short continue the order (`upstream.Case.record`).
    for lead in range(3):
        three = run_order(keys, 3, {"limit": 1}, lead=lead)
        assert run_order(keys, 5, {"limit": 1}, lead=lead)[: len(three)] == three


class _PlaneRun:
    """A run whose control plane is a name: what `bench.runner.overlapped` does around it is logged."""

    def __init__(self, name: str, base: Path, log: list[tuple[str, str]], status: str = "ok") -> None:
        self.name, self.log, self.status = name, log, status
        self.workdir = base / name
        (self.workdir / "etcd").mkdir(parents=True)
        self.stopping: asyncio.Task[None] | None = None
        self.waited: list[str | None] = []

    def start_plane(self) -> Any:  # in a thread, as the real one
        self.log.append(("starting", self.name))
        self.log.append(("up", self.name))
        return self.name

    async def execute(self, plane_task: Any = None, settle: Any = ()) -> dict[str, Any]:
        assert await plane_task == self.name
        if settle:
            await asyncio.wait(settle)
        self.waited = [future.result() for future in settle]  # a plane's name: its start; None: a stop
        self.log.append(("measuring", self.name))

        async def stop() -> None:
            self.log.append(("stopped", self.name))

        self.stopping = asyncio.create_task(stop())
        return {"status": self.status}


@pytest.mark.parametrize("prestart", [False, True], ids=["measured", "smoke (prestart)"])
async def test_planes_start_one_at_a_time_and_outside_measured_phases(tmp_path: Path, prestart: bool) -> None:
    from bench.runner import overlapped

    log: list[tuple[str, str]] = []
    order = [_PlaneRun("a", tmp_path, log), _PlaneRun("b", tmp_path, log, "error"), _PlaneRun("c", tmp_path, log)]
    seen = [(run.name, result) async for run, result in overlapped(order, keep=False, prestart=prestart)]
    assert seen == [
        ("a", {"status": "ok"}),
        ("b", {"status": "error", "workdir": str(tmp_path / "b")}),
        ("c", {"status": "ok"}),
    ]
    starts = [event for event in log if event[0] in ("starting", "up")]
    assert starts == [(e, n) for n in "abc" for e in ("starting", "up")]  # one plane starting at a time
    # Measured runs wait for the previous plane's stop (and clean-up) and the next one's start; smoke runs do not.
    if prestart:
        assert [run.waited for run in order] == [[], [], []]
    else:
        assert [run.waited for run in order] == [["b"], [None, "c"], [None]]
        assert log.index(("stopped", "a")) < log.index(("measuring", "b"))
    # A failed run's directory is kept (without etcd's data); the others are removed once stopped.
    assert [p.name for p in sorted(tmp_path.iterdir())] == ["b"]
    assert not (tmp_path / "b" / "etcd").exists()


async def test_runs_appended_during_the_runs_run_with_their_planes_started_meanwhile(tmp_path: Path) -> None:
    from bench.runner import overlapped

    log: list[tuple[str, str]] = []
    order = [_PlaneRun("a", tmp_path, log), _PlaneRun("b", tmp_path, log)]
    seen = []
    async for run, _ in overlapped(order, keep=False):
        seen.append(run.name)
        if run.name == "a":
            order.append(_PlaneRun("c", tmp_path, log))
    assert seen == ["a", "b", "c"]
    # c was appended before b started: its plane started during b, and b waited for it as for any next plane.
    assert order[1].waited == [None, "c"] and order[2].waited == [None]
    assert log.index(("up", "c")) < log.index(("measuring", "b"))


def test_a_plane_whose_scheduler_fails_to_launch_is_stopped() -> None:
    from bench.runner import with_scheduler

    class Plane:
        stops: list[float] = []

        def stop(self, grace: float) -> None:
            self.stops.append(grace)

    class Failing:
        def launch(self, plane: Any) -> None:
            raise RuntimeError("usher /readyz: timed out")

    class Launching:
        launched: list[Any] = []

        def launch(self, plane: Any) -> None:
            self.launched.append(plane)

    plane = Plane()
    assert with_scheduler(plane, Launching()) is plane  # type: ignore[arg-type]
    assert Launching.launched == [plane] and plane.stops == []
    with pytest.raises(RuntimeError, match="readyz"):
        with_scheduler(plane, Failing())  # type: ignore[arg-type]
    assert len(plane.stops) == 1, "the plane is stopped: no run will ever own it"


def test_the_report_judges_each_upstream_target_from_the_medians() -> None:
    from bench import report
    from bench.upstream import summarize

    def doc(
        name: str, group: str, usher_rate: float, usher_cpu: float, size: str, pods: int = 1000, **extra: Any
    ) -> dict[str, Any]:
        usher = [_run("ok", usher_rate, usher_rate, usher_cpu, pods, 300.0) for _ in range(3)]
        kube = [_run("ok", 100.0, 100.0, 2.0, pods, 100.0) for _ in range(3)]
        return {
            "test_case": name,
            "group": group,
            "status": "ok",
            "workload": {"name": "w", "size": size},
            "runs": {"usher": usher, "kube-scheduler": kube},
            "summary": {"usher": summarize(usher), "kube-scheduler": summarize(kube)},
            **extra,
        }

    docs = [
        doc("Fast", "misc", 120.0, 1.0, "500 nodes, 1500 pods"),
        doc("Slow", "misc", 80.0, 1.0, "500 nodes, 1500 pods"),
        doc("SchedulingWithResourceClaimTemplate", "dra", 125.0, 3.0, "500 nodes, 2500 pods"),
        doc("Big", "podgroup", 100.0, 1.0, "5000 nodes, 3000 pods", tier="large"),
        doc("Tiny", "dra", 100.0, 0.06, "2 nodes, 10 pods", pods=10),
        {"test_case": "L", "group": "dra", "status": "usher lacks: X", "workload": {"name": "w"}},
        {"test_case": "O", "group": "misc", "status": "left out: too large", "workload": {"name": "w"}},
    ]
    lines = "\n".join(report.upstream_targets(docs))
    assert "| 4 of 5 met; below: Slow 0.80x | no |" in lines
    assert "| SchedulingWithResourceClaimTemplate: usher >= 1.3x kube-scheduler | 1.25x | no, short by 4% |" in lines
    assert (
        "| SchedulingWithResourceClaimTemplate: usher's CPU per pod <= kube-scheduler's | 1.50x | no, over by 50% |"
        in (lines)
    )
    assert "Big (5000 nodes, 3000 pods): usher's peak RSS <= 2x kube-scheduler's | 3.00x (300 vs 100 MiB) | no" in lines
    assert "| Tiny: usher's CPU per pod <= kube-scheduler's | not compared: 10 pods measured" in lines
    assert "| 6 of 7 (86%) run here or fail only for a feature usher lacks" in lines and lines.endswith("| yes |")
    assert "w [bench-large]: 5000 nodes" in "\n".join(report.upstream_table(docs))


@needs_module
def test_usher_gets_the_gates_it_has_and_refuses_features_it_lacks() -> None:
    from bench.upstream import usher_gates
    from usher.features import FeatureGates, by_name

    usher = set(by_name(FeatureGates()))
    kube = perfconfig.feature_defaults()
    on_by_default = next(name for name, spec in sorted(kube.items()) if spec.default and name not in usher)
    off_by_default = next(name for name, spec in sorted(kube.items()) if not spec.default and name not in usher)
    assert usher_gates({on_by_default: True, "SchedulerAsyncAPICalls": True}) == (
        {"SchedulerAsyncAPICalls": True},
        [f"{on_by_default}=true"],
        None,
    )
    kept, _, refusal = usher_gates({off_by_default: True})
    assert kept == {} and refusal is not None and f"no feature gate {off_by_default}" in refusal
    # kube-scheduler's default, set explicitly (PreemptionBasic does): accepted, usher's dependent gate follows.
    assert usher_gates({"SchedulerAsyncAPICalls": False}) == ({"SchedulerAsyncAPICalls": False}, [], None)
    _, _, refusal = usher_gates({"SchedulerAsyncAPICalls": False, "SchedulerPreEnqueuePodStatus": True})
    assert refusal is not None and "SchedulerPreEnqueuePodStatus" in refusal


# --------------------------------------------------------------------------- executor pieces


def _pod(namespace: str, name: str, *, node: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]} if not node else {},
    }


def test_cluster_pods_count_scheduled_and_attempted_and_hear_each_binding_once() -> None:
    pods = ClusterPods(api=None)  # type: ignore[arg-type]
    heard: list[str] = []
    pods.listeners.append(lambda ns, name, labels: heard.append(f"{ns}/{name}"))
    pods._event("ADDED", _pod("a", "p1", labels={"type": "x"}))
    pods._event("ADDED", _pod("a", "p2"))
    pods._event("MODIFIED", _pod("a", "p1", node="n1", labels={"type": "x"}))
    pods._event("MODIFIED", _pod("a", "p1", node="n1", labels={"type": "x"}))
    pods._event("ADDED", _pod("b", "p3", node="n2"))
    assert heard == ["a/p1", "b/p3"]
    assert pods.count("a") == (1, 2)
    assert pods.count("a", {"type": "x"}) == (1, 1)
    pods._event("DELETED", _pod("a", "p1", node="n1"))
    assert pods.count("a") == (0, 1) and pods.names("a") == ["p2"]
    pods._listed([_pod("b", "p3", node="n2")])
    assert list(pods.pods) == [("b", "p3")]


def test_base_node_and_pod_are_scheduler_perfs() -> None:
    node = base_node("node-0-")
    assert node["metadata"] == {"generateName": "node-0-"}
    assert node["status"]["allocatable"] == {"pods": "110", "cpu": "4", "memory": "32Gi"}
    assert node["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    container = base_pod()["spec"]["containers"][0]
    assert container["resources"]["requests"] == container["resources"]["limits"] == {"cpu": "100m", "memory": "500Mi"}
    assert container["ports"] == [{"containerPort": 80}]


def test_the_cluster_limit_allocates_one_device_per_requested_device() -> None:
    binder = ClusterLimitBinder(api=None, scheduler_name="default-scheduler")  # type: ignore[arg-type]
    claim = {
        "spec": {
            "devices": {
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": "c", "count": 2}},
                    {"name": "b", "firstAvailable": [{"name": "big", "deviceClassName": "c"}, {"name": "small"}]},
                    {"name": "c", "exactly": {"deviceClassName": "c", "allocationMode": "All"}},
                ]
            }
        }
    }
    allocation = binder._allocation(claim, "node-1")
    assert [(r["request"], r["pool"], r["device"]) for r in allocation["devices"]["results"]] == [
        ("a", "node-1", "dev-0"),
        ("a", "node-1", "dev-1"),
        ("b/big", "node-1", "dev-2"),
        ("c", "node-1", "dev-3"),
    ]
    terms = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]


@needs_module
async def test_all_test_cases_run_as_one_stream_and_short_ones_get_their_rounds_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`upstream.run_all` with each plane a name in a log: the next test case's first plane starts during the
    last run of the one before, and rounds a short test case adds come right after its own runs."""
    from bench import upstream
    from bench.runner import parse_args, upstream_options

    log: list[tuple[str, str]] = []

    def name_of(run: Any) -> str:
        return f"{run.plan.test_case.name}/{run.contender.key}-{run.result['repetition']}"

    def start_plane(run: Any) -> str:
        log.append(("up", name_of(run)))
        return name_of(run)

    async def execute(run: Any, plane_task: Any = None, settle: Any = ()) -> dict[str, Any]:
        assert await plane_task == name_of(run)
        if settle:
            await asyncio.wait(settle)
        log.append(("measuring", name_of(run)))
        run.stopping = None
        short = run.plan.test_case.name == "SchedulingRequiredPodAntiAffinityWithNSSelector"
        phase = {"elapsed_s": 0.3 if short else 3.0, "scheduled": 100, "overall": 300.0}
        return {**run.result, "status": "ok", "phases": [phase]}

    monkeypatch.setattr(upstream.UpstreamRun, "start_plane", start_plane)
    monkeypatch.setattr(upstream.UpstreamRun, "execute", execute)
    options = upstream_options(
        parse_args(["-u", "SchedulingRequiredPodAntiAffinityWithNSSelector", "-u", "SchedulingBasic"])
    )
    assert await upstream.run_all(options, tmp_path / "out", tmp_path / "runs") == 0

    measured = [name for event, name in log if event == "measuring"]
    short, basic = "SchedulingRequiredPodAntiAffinityWithNSSelector", "SchedulingBasic"
    assert [n.split("/")[0] for n in measured] == [short] * 11 + [basic] * 7, "five rounds, then three"
    documents = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "out").iterdir()}
    assert documents[short]["repetitions"] == 5 and documents[basic]["repetitions"] == 3
    assert [len(documents[short]["runs"][k]) for k in ("usher", "kube-scheduler", "limit")] == [5, 5, 1]
    # SchedulingBasic's first plane was up before the short case's last run measured.
    assert log.index(("up", f"{basic}/{measured[11].split('/')[1]}")) < log.index(("measuring", measured[10]))
