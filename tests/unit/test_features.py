"""Feature gates: kube-scheduler's names on the command line, typed attributes in the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from usher.config import ConfigError
from usher.features import FeatureGates, by_name, parse_feature_gates

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_gate_defaults_on_but_the_alpha_ones_kube_scheduler_leaves_off() -> None:
    assert parse_feature_gates(None) == parse_feature_gates("") == FeatureGates()
    assert {name for name, on in by_name(FeatureGates()).items() if not on} == {
        "DRADeviceCompatibilityGroups",
        "DRAListTypeAttributes",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SchedulerQueueingHints=false", FeatureGates(queueing_hints=False)),
        ("SchedulerPreQueueingHints=false", FeatureGates(pre_queueing_hints=False)),
        ("SchedulerPopFromBackoffQ=False", FeatureGates(pop_from_backoff_q=False)),
        (
            " SchedulerAsyncAPICalls=false , SchedulerPreEnqueuePodStatus=false ",
            FeatureGates(async_api_calls=False, pre_enqueue_pod_status=False),
        ),
        ("SchedulerQueueingHints=false,SchedulerQueueingHints=true", FeatureGates()),
    ],
    ids=["queueing hints off", "pre-queueing hints off", "case-insensitive value", "both API gates off", "last wins"],
)
def test_a_gate_turns_off_its_attribute_only(text: str, expected: FeatureGates) -> None:
    assert parse_feature_gates(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Bogus=true", "unknown feature gate 'Bogus'"),
        ("queueing_hints=false", "unknown feature gate 'queueing_hints'"),
        ("SchedulerQueueingHints=yes", "SchedulerQueueingHints needs =true or =false"),
        ("SchedulerQueueingHints", "SchedulerQueueingHints needs =true or =false"),
        (
            "SchedulerAsyncAPICalls=false,SchedulerPreEnqueuePodStatus=true",
            "SchedulerPreEnqueuePodStatus=true requires SchedulerAsyncAPICalls=true",
        ),
        (
            "GenericWorkload=false,TopologyAwareWorkloadScheduling=true",
            "TopologyAwareWorkloadScheduling=true requires GenericWorkload=true",
        ),
        (
            "GenericWorkload=false,DRAWorkloadResourceClaims=true",
            "DRAWorkloadResourceClaims=true requires GenericWorkload=true (it reserves claims for PodGroups)",
        ),
        (
            "DRAExtendedResource=false",
            "cannot set feature gate DRAExtendedResource to false, feature is locked to true",
        ),
        (
            "DRADeviceTaints=false",
            "DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]",
        ),
        (
            "DRAConsumableCapacity=false",
            "DRAFractionalCapacityRange is enabled, but depends on features that are disabled: [DRAConsumableCapacity]",
        ),
    ],
    ids=[
        "unknown name",
        "attribute name",
        "not a boolean",
        "no value",
        "PreEnqueuePodStatus needs AsyncAPICalls",
        "TopologyAware needs GenericWorkload",
        "DRAWorkloadResourceClaims needs GenericWorkload",
        "a GA gate locked on, as in kube-scheduler",
        "DRADeviceTaintRules on needs DRADeviceTaints, in kube-scheduler's words",
        "DRAFractionalCapacityRange on needs DRAConsumableCapacity",
    ],
)
def test_bad_feature_gates_stop_start_up(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_feature_gates(text)


def test_a_locked_gate_may_be_set_to_its_own_value() -> None:
    """Configurations written for kube-scheduler name GA gates (scheduler_perf sets DRAExtendedResource=true)."""
    assert parse_feature_gates("DRAExtendedResource=true") == FeatureGates()


def test_the_readme_table_lists_every_gate_with_its_default() -> None:
    section = README.read_text().split("### Feature gates", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (on|off) \|", section, re.MULTILINE)
    assert {name: default == "on" for name, default in rows} == by_name(FeatureGates())


def test_kube_schedulers_default_for_async_api_calls_turns_usher_s_dependent_gate_off() -> None:
    # A configuration written for kube-scheduler v1.37 (SchedulerAsyncAPICalls=false is its default) is
    # accepted: usher's own SchedulerPreEnqueuePodStatus, unset, follows it off.
    gates = parse_feature_gates("SchedulerAsyncAPICalls=false")
    assert (gates.async_api_calls, gates.pre_enqueue_pod_status) == (False, False)


def test_turning_gang_scheduling_off_turns_its_topology_placement_and_shared_claims_off() -> None:
    gates = parse_feature_gates("GenericWorkload=false")
    assert (gates.generic_workload, gates.topology_aware_workload_scheduling, gates.dra_workload_resource_claims) == (
        False,
        False,
        False,
    )
    assert parse_feature_gates("TopologyAwareWorkloadScheduling=false").generic_workload is True
    assert parse_feature_gates("DRAWorkloadResourceClaims=false").generic_workload is True


def test_device_taints_can_be_turned_off_with_their_rules() -> None:
    gates = parse_feature_gates("DRADeviceTaints=false,DRADeviceTaintRules=false")
    assert (gates.dra_device_taints, gates.dra_device_taint_rules) == (False, False)
    assert parse_feature_gates("DRADeviceTaintRules=false").dra_device_taints is True


def test_consumable_capacity_can_be_turned_off_with_fractional_ranges() -> None:
    gates = parse_feature_gates("DRAConsumableCapacity=false,DRAFractionalCapacityRange=false")
    assert (gates.dra_consumable_capacity, gates.dra_fractional_capacity_range) == (False, False)
    assert parse_feature_gates("DRAFractionalCapacityRange=false").dra_consumable_capacity is True
