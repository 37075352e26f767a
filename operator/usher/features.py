"""Feature gates (``--feature-gates Name=true,Other=false``), by kube-scheduler's gate names.

Code reads a gate as a typed attribute (``gates.queueing_hints``), so a
misspelt gate is a type error; users write kube-scheduler's names, each
declared once beside its attribute. Unknown names, values other than
true/false, and gate combinations kube-scheduler refuses stop start-up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from usher.config import ConfigError


def _gate(name: str, *, default: bool, stage: str, description: str, locked: bool = False) -> Any:
    """``locked``: GA and locked to its default, as in kube-scheduler, which refuses the other value."""
    metadata = {"name": name, "stage": stage, "description": description, "locked": locked}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True, kw_only=True)
class FeatureGates:
    """Every gate usher knows, on or off. Defaults as in kube-scheduler v1.37 (README's table), except
    GenericWorkload, TopologyAwareWorkloadScheduling and DRAWorkloadResourceClaims (usher schedules gangs by default,
    kube-scheduler only when told to) and
    SchedulerPreQueueingHints and SchedulerAsyncAPICalls (off in kube-scheduler; usher's queue and
    dispatcher are built around them)."""

    queueing_hints: bool = _gate(
        "SchedulerQueueingHints",
        default=True,
        stage="GA",
        description="ask QueueingHints whether an event may help a rejected pod",
    )
    pre_queueing_hints: bool = _gate(
        "SchedulerPreQueueingHints",
        default=True,
        stage="Beta",
        description="let plugins narrow the pods a cluster event is checked against (KEP-6132)",
    )
    async_api_calls: bool = _gate(
        "SchedulerAsyncAPICalls",
        default=True,
        stage="Beta",
        description="send API calls through the asynchronous dispatcher",
    )
    pre_enqueue_pod_status: bool = _gate(
        "SchedulerPreEnqueuePodStatus",
        default=True,
        stage="Alpha",
        description="report PreEnqueue rejections as PodScheduled=False/NotReadyForScheduling (KEP-5501)",
    )
    pop_from_backoff_q: bool = _gate(
        "SchedulerPopFromBackoffQ",
        default=True,
        stage="Beta",
        description="pop backed-off pods early when activeQ is empty",
    )
    generic_workload: bool = _gate(
        "GenericWorkload",
        default=True,
        stage="Beta",
        description=(
            "gang scheduling of scheduling.k8s.io/v1beta1 PodGroups (on in usher; off by default in kube-scheduler)"
        ),
    )
    topology_aware_workload_scheduling: bool = _gate(
        "TopologyAwareWorkloadScheduling",
        default=True,
        stage="Alpha",
        description=(
            "place a PodGroup with schedulingConstraints.topology in one domain of its key (needs GenericWorkload; "
            "on in usher, off by default in kube-scheduler)"
        ),
    )
    dra_partitionable_devices: bool = _gate(
        "DRAPartitionableDevices",
        default=True,
        stage="Beta",
        description=(
            "allocate devices that consume a pool's shared counters (sharedCounters, consumesCounters) while the "
            "counters last, and honour per-device node selection; off: such slices are ignored"
        ),
    )
    dra_device_taints: bool = _gate(
        "DRADeviceTaints",
        default=True,
        stage="GA",
        description=(
            "a device tainted NoSchedule or NoExecute (in its ResourceSlice) is allocated only to requests that "
            "tolerate the taint; off: device taints are ignored"
        ),
    )
    dra_device_taint_rules: bool = _gate(
        "DRADeviceTaintRules",
        default=True,
        stage="GA",
        description=(
            "DeviceTaintRules (resource.k8s.io/v1) add their taint to the devices they select (needs DRADeviceTaints)"
        ),
    )
    dra_consumable_capacity: bool = _gate(
        "DRAConsumableCapacity",
        default=True,
        stage="Beta",
        description=(
            "devices with allowMultipleAllocations are shared by claims while their capacity lasts: requests ask "
            "for capacity.requests, rounded by the device's requestPolicy, results carry consumedCapacity and a "
            "shareID, and distinctAttribute constraints hold; off: every device is allocated whole"
        ),
    )
    dra_fractional_capacity_range: bool = _gate(
        "DRAFractionalCapacityRange",
        default=True,
        stage="Beta",
        description=(
            "a capacity requestPolicy.validRange with fractional min, max or step rounds requests in thousandths "
            "(needs DRAConsumableCapacity); off: in whole units"
        ),
    )
    dra_device_binding_conditions: bool = _gate(
        "DRADeviceBindingConditions",
        default=True,
        stage="Beta",
        description=(
            "devices with bindingConditions are allocated, and PreBind waits (up to DynamicResources' "
            "bindingTimeout) until the conditions are true in the claim's status.devices; a failure condition or "
            "the timeout sends the pod back and the claim is deallocated (needs DRAResourceClaimDeviceStatus); "
            "off: such devices are never allocated"
        ),
    )
    dra_resource_claim_device_status: bool = _gate(
        "DRAResourceClaimDeviceStatus",
        default=True,
        stage="GA",
        locked=True,
        description="drivers report per-device status (status.devices) in ResourceClaims; binding conditions read it",
    )
    dra_device_compatibility_groups: bool = _gate(
        "DRADeviceCompatibilityGroups",
        default=False,
        stage="Alpha",
        description=(
            "devices that consume one counter set are co-allocated only while their consumesCounters"
            "[].compatibilityGroups intersect (needs DRAPartitionableDevices); off: slices naming groups are "
            "left out, which leaves their pool incomplete"
        ),
    )
    dra_list_type_attributes: bool = _gate(
        "DRAListTypeAttributes",
        default=False,
        stage="Alpha",
        description=(
            "device attributes may be lists (ints, bools, strings, versions): selectors see CEL lists, "
            "matchAttribute wants the devices to share an element and distinctAttribute wants them disjoint; "
            "off: constraints compare scalars only, and a list value agrees with no other device"
        ),
    )
    dra_extended_resource: bool = _gate(
        "DRAExtendedResource",
        default=True,
        stage="GA",
        locked=True,
        description=(
            "extended resources a DeviceClass serves (spec.extendedResourceName, or "
            "deviceclass.resource.kubernetes.io/<class>) are allocated as devices on nodes whose allocatable lacks "
            "them, through a claim the scheduler makes for the pod"
        ),
    )
    dra_workload_resource_claims: bool = _gate(
        "DRAWorkloadResourceClaims",
        default=True,
        stage="Beta",
        description=(
            "a PodGroup's spec.resourceClaims are shared by its pods and reserved for the group (needs "
            "GenericWorkload; on in usher, off by default in kube-scheduler)"
        ),
    )


_ATTRIBUTES = {f.metadata["name"]: f.name for f in fields(FeatureGates)}
"""kube-scheduler gate name -> attribute; the only place names become attributes."""
_NAMES = {attribute: name for name, attribute in _ATTRIBUTES.items()}
_LOCKED = {f.name: f.default for f in fields(FeatureGates) if f.metadata["locked"]}
"""Attribute -> the only value kube-scheduler accepts for it."""

_NEED_GENERIC_WORKLOAD = {
    "topology_aware_workload_scheduling": "it places PodGroups",
    "dra_workload_resource_claims": "it reserves claims for PodGroups",
}
"""Gates that depend on GenericWorkload (and follow it off unless set) -> why."""


_DEPENDENCIES = {
    "dra_device_taint_rules": ("dra_device_taints",),
    "dra_fractional_capacity_range": ("dra_consumable_capacity",),
    "dra_device_binding_conditions": ("dra_resource_claim_device_status",),
    "dra_device_compatibility_groups": ("dra_partitionable_devices",),
}
"""Gate -> the gates it needs, refused as kube-scheduler refuses them (``pkg/features``' dependencies)."""


def by_name(gates: FeatureGates) -> dict[str, bool]:
    """kube-scheduler gate name -> whether it is on (for logs and documentation checks)."""
    values = asdict(gates)
    return {name: values[attribute] for name, attribute in _ATTRIBUTES.items()}


def parse_feature_gates(text: str | None) -> FeatureGates:
    """``Name=true,Other=false`` -> gates; unknown names, non-boolean values and invalid combinations are errors."""
    values: dict[str, bool] = {}
    for raw_item in (text or "").split(","):
        item = raw_item.strip()
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if name not in _ATTRIBUTES:
            raise ConfigError(
                f"--feature-gates: unknown feature gate {name!r} (known: {', '.join(sorted(_ATTRIBUTES))})"
            )
        if not sep or raw.strip().lower() not in ("true", "false"):
            raise ConfigError(f"--feature-gates: {name} needs =true or =false, got {item!r}")
        value = raw.strip().lower() == "true"
        if _LOCKED.get(_ATTRIBUTES[name], value) != value:
            raise ConfigError(
                f"--feature-gates: cannot set feature gate {name} to {str(value).lower()}, "
                f"feature is locked to {str(not value).lower()}"
            )
        values[_ATTRIBUTES[name]] = value
    if values.get("async_api_calls") is False and "pre_enqueue_pod_status" not in values:
        # kube-scheduler's own default is SchedulerAsyncAPICalls=false, and its configurations say so;
        # usher's SchedulerPreEnqueuePodStatus (not a kube-scheduler gate) then follows it off rather
        # than refusing a configuration kube-scheduler accepts.
        values["pre_enqueue_pod_status"] = False
    for dependent in _NEED_GENERIC_WORKLOAD:
        if values.get("generic_workload") is False and dependent not in values:
            values[dependent] = False  # it depends on GenericWorkload, as in kube-scheduler
    gates = FeatureGates(**values)
    for dependent, what in _NEED_GENERIC_WORKLOAD.items():
        if getattr(gates, dependent) and not gates.generic_workload:
            name = _NAMES[dependent]
            raise ConfigError(
                f"--feature-gates: {name}=true requires GenericWorkload=true ({what}); "
                f"disable {name} too, or keep GenericWorkload on"
            )
    for dependent, dependencies in _DEPENDENCIES.items():
        disabled = [_NAMES[d] for d in dependencies if not getattr(gates, d)]
        if getattr(gates, dependent) and disabled:
            # kube-scheduler's own words (component-base featuregate), so a gate list it refuses fails alike.
            raise ConfigError(
                f"--feature-gates: {_NAMES[dependent]} is enabled, but depends on features that are disabled: "
                f"[{' '.join(disabled)}]"
            )
    if gates.pre_enqueue_pod_status and not gates.async_api_calls:
        raise ConfigError(
            "--feature-gates: SchedulerPreEnqueuePodStatus=true requires SchedulerAsyncAPICalls=true "
            "(the status patches are delayed calls of the asynchronous dispatcher); "
            "disable SchedulerPreEnqueuePodStatus too, or keep SchedulerAsyncAPICalls on"
        )
    return gates
