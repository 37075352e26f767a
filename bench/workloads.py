"""The benchmark's workloads, shaped like kube-scheduler's scheduler_perf, and the objects they create.

Why these four shapes: SchedulingBasic is the plain filter/score/bind
path; SchedulingWithResourceClaimTemplate adds DRA allocation and claim writes;
SchedulingGated shows that thousands of gated pods cost nothing while other
pods schedule, and how fast ungated pods bind; the claim burst is the case
PreQueueingHints exist for: N pods wait for claims that all appear at once, and
without narrowing every claim event runs a hint for every waiting pod (N^2).

Objects follow scheduler_perf's templates: nodes have 4 CPU, 32Gi, 110 pods;
pods request 100m CPU and 500Mi. Pods never run (no kubelet, no kwok): the
benchmark measures binding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from e2e.dra_driver import DRIVER, claim, claim_template, device_class, node_slice

#: Label on every benchmark pod: which phase created it (init, measured, gated).
PHASE_LABEL = "bench.usher.dev/phase"
#: Scheduling gate held by the gated workload's pods until the ungate phase.
GATE = "bench.usher.dev/hold"
CLASS_NAME = "bench-gpu"
TEMPLATE_NAME = "one-gpu"
#: scheduler_perf's node-default.yaml.
NODE_CAPACITY = {"cpu": "4", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
#: scheduler_perf's pod-default.yaml.
POD_REQUESTS = {"cpu": "100m", "memory": "500Mi"}
#: scheduler_perf's pod-low-priority.yaml (priority 0) and pod-high-priority.yaml (priority 10).
LOW_PRIORITY_REQUESTS = {"cpu": "900m", "memory": "500Mi"}
HIGH_PRIORITY_REQUESTS = {"cpu": "3000m", "memory": "500Mi"}
HIGH_PRIORITY_CLASS = "bench-high"
HIGH_PRIORITY = 10


class Kind(StrEnum):
    """What a workload's measured phase does."""

    BASIC = "basic"
    CLAIM_TEMPLATE = "claim_template"
    GATED = "gated"
    CLAIM_BURST = "claim_burst"
    PREEMPTION = "preemption"


@dataclass(frozen=True)
class Workload:
    """One benchmark workload and its sizes.

    ``init_pods`` are created and bound before measuring (they fill the cache
    and the nodes, as in scheduler_perf); ``measured_pods`` are counted by the
    throughput collector. ``gated_pods`` (GATED) wait behind a scheduling gate
    from the start, and ``ungate`` of them are released after the measured
    phase. ``devices_per_node`` > 0 publishes one ResourceSlice per node.
    """

    name: str
    kind: Kind
    nodes: int
    init_pods: int
    measured_pods: int
    devices_per_node: int = 0
    gated_pods: int = 0
    ungate: int = 0
    description: str = ""

    @property
    def uses_dra(self) -> bool:
        return self.devices_per_node > 0

    @property
    def limit_applies(self) -> bool:
        """The bind limit places pods without preempting: it has no number for a preemption workload."""
        return self.kind is not Kind.PREEMPTION

    @property
    def needs_kcm(self) -> bool:
        """Only templates need kube-controller-manager (its resourceclaim-controller makes the claims)."""
        return self.kind is Kind.CLAIM_TEMPLATE

    def scaled(self, *, nodes: int, pods: int) -> Workload:
        """The same shape at smoke-test size: ``nodes`` nodes and about ``pods`` pods per phase."""
        devices = max(1, -(-2 * pods // nodes)) if self.uses_dra else 0  # every init + measured pod gets a device
        if self.kind is Kind.PREEMPTION:  # the nodes must stay full: four low-priority pods each
            return replace(self, nodes=nodes, init_pods=4 * nodes, measured_pods=min(pods, nodes))
        return replace(
            self,
            nodes=nodes,
            init_pods=pods if self.init_pods else 0,
            measured_pods=pods,
            devices_per_node=devices,
            gated_pods=2 * pods if self.gated_pods else 0,
            ungate=pods if self.ungate else 0,
        )


WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "SchedulingBasic_500Nodes", Kind.BASIC, nodes=500, init_pods=500, measured_pods=1000,
        description="500 nodes, 500 init pods, 1000 measured pods; no constraints (scheduler_perf 500Nodes).",
    ),
    Workload(
        "SchedulingBasic_5000Nodes", Kind.BASIC, nodes=5000, init_pods=1000, measured_pods=1000,
        description="5000 nodes, 1000 init pods, 1000 measured pods (scheduler_perf 5000Nodes): "
        "per-node work dominates.",
    ),
    Workload(
        "SchedulingWithResourceClaimTemplate_2000pods_100nodes", Kind.CLAIM_TEMPLATE, nodes=100,
        init_pods=1000, measured_pods=1000, devices_per_node=20,
        description="100 nodes with a ResourceSlice of 20 devices each; 1000 init + 1000 measured pods, "
        "each with one claim from a ResourceClaimTemplate (scheduler_perf 2000pods_100nodes).",
    ),
    Workload(
        "SchedulingGated_5000gated_1000pods", Kind.GATED, nodes=500, init_pods=0, measured_pods=1000,
        gated_pods=5000, ungate=1000,
        description="500 nodes; 5000 pods held by a scheduling gate, then 1000 plain measured pods; "
        "then the gate is removed from 1000 of the held pods (the `ungate` row: time from gate removal "
        "to binding).",
    ),
    Workload(
        "ClaimBurst_500", Kind.CLAIM_BURST, nodes=100, init_pods=0, measured_pods=500, devices_per_node=20,
        description="100 nodes x 20 devices; 500 pods each naming its own ResourceClaim, created before "
        "the claims; then the 500 claims are created at once and the pods measured.",
    ),
    Workload(
        "ClaimBurst_2000", Kind.CLAIM_BURST, nodes=100, init_pods=0, measured_pods=2000, devices_per_node=20,
        description="As ClaimBurst_500 with 2000 pods and claims (every device used).",
    ),
    Workload(
        "PreemptionBasic_1000Nodes", Kind.PREEMPTION, nodes=1000, init_pods=4000, measured_pods=1000,
        description="1000 nodes each filled by 4 low-priority pods (900m CPU); 1000 measured pods of priority 10 "
        "asking 3 CPU, each preempting 3 of them (scheduler_perf PreemptionBasic 1000Nodes).",
    ),
)  # fmt: skip


def by_name(names: list[str] | None) -> list[Workload]:
    """The named workloads (all when ``names`` is empty); unknown names are an error naming the choices."""
    if not names:
        return list(WORKLOADS)
    known = {w.name: w for w in WORKLOADS}
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"unknown workload(s) {missing}; choose from {sorted(known)}")
    return [known[n] for n in names]


# --------------------------------------------------------------------------- objects


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def node(index: int) -> dict[str, Any]:
    """A plain Node that is Ready; nothing keeps it alive, and nothing needs to (pods never run)."""
    name = node_name(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"},
        },
        "spec": {},
        "status": {
            "capacity": dict(NODE_CAPACITY),
            "allocatable": dict(NODE_CAPACITY),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
        },
    }


def pod(
    name: str,
    scheduler: str,
    phase: str,
    *,
    template: str | None = None,
    claim_name: str | None = None,
    gated: bool = False,
    requests: dict[str, str] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """A pod that never runs: no token volume (nothing would mount it), no grace period."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": dict(requests or POD_REQUESTS)},
    }
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if template or claim_name:
        entry = {"name": "gpu", **({"resourceClaimTemplateName": template} if template else {})}
        if claim_name:
            entry["resourceClaimName"] = claim_name
        spec["resourceClaims"] = [entry]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {PHASE_LABEL: phase}}, "spec": spec}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def burst_claim_name(index: int) -> str:
    return f"claim-{index:05d}"


__all__ = [
    "CLASS_NAME",
    "DRIVER",
    "GATE",
    "HIGH_PRIORITY",
    "HIGH_PRIORITY_CLASS",
    "HIGH_PRIORITY_REQUESTS",
    "LOW_PRIORITY_REQUESTS",
    "PHASE_LABEL",
    "TEMPLATE_NAME",
    "WORKLOADS",
    "Kind",
    "Workload",
    "burst_claim_name",
    "by_name",
    "claim",
    "claim_template",
    "device_class",
    "node",
    "node_name",
    "node_slice",
    "pod",
    "priority_class",
]
