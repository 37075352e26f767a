"""The hand-written workloads: what scheduler_perf's own files have no workload for, and the objects they create.

Why these three shapes: SchedulingGated shows that thousands of gated pods
cost nothing while other pods schedule (scheduler_perf's SchedulingWhileGated
workloads hold 10000 gated pods on 50000, too large here); GateRemoval times
each pod from its gate's removal to its binding as a user releasing pods would
(100 every 2 s on 20 nodes, issue 18's trial), a latency scheduler_perf does
not measure; the claim burst is the case PreQueueingHints exist for: N pods
wait for claims that all appear at once, and without narrowing every claim
event runs a hint for every waiting pod (N^2).

The hand-written SchedulingBasic (500 and 5000 nodes),
SchedulingWithResourceClaimTemplate and PreemptionBasic workloads were
replaced by their scheduler_perf originals, which bench/upstream.py runs.

Objects follow scheduler_perf's templates: nodes have 4 CPU, 32Gi, 110 pods;
pods request 100m CPU and 500Mi. Pods never run (no kubelet, no kwok): the
benchmark measures binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from e2e.dra_driver import DRIVER, claim, device_class, node_slice

#: Label on every benchmark pod: which phase created it (init, measured, gated).
PHASE_LABEL = "bench.usher.dev/phase"
#: Scheduling gate held by the gated workload's pods until the ungate phase.
GATE = "bench.usher.dev/hold"
CLASS_NAME = "bench-gpu"
#: scheduler_perf's node-default.yaml.
NODE_CAPACITY = {"cpu": "4", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
#: scheduler_perf's pod-default.yaml.
POD_REQUESTS = {"cpu": "100m", "memory": "500Mi"}


class Kind(StrEnum):
    """What a workload's measured phase does."""

    GATED = "gated"
    GATE_REMOVAL = "gate_removal"
    CLAIM_BURST = "claim_burst"


@dataclass(frozen=True)
class Workload:
    """One benchmark workload and its sizes.

    ``init_pods`` are created and bound before measuring (they fill the cache
    and the nodes, as in scheduler_perf); ``measured_pods`` are counted by the
    throughput collector. ``gated_pods`` (GATED, GATE_REMOVAL) wait behind a
    scheduling gate from the start, and ``ungate`` of them are released after
    the measured phase (if any): ``ungate_batch`` at a time every
    ``ungate_every_s`` seconds, or all at once (32 writes in flight) when 0.
    ``devices_per_node`` > 0 publishes one ResourceSlice per node.
    """

    name: str
    kind: Kind
    nodes: int
    init_pods: int
    measured_pods: int
    devices_per_node: int = 0
    gated_pods: int = 0
    ungate: int = 0
    ungate_batch: int = 0
    ungate_every_s: float = 0.0
    pod_requests: tuple[tuple[str, str], ...] = tuple(POD_REQUESTS.items())
    description: str = ""
    runs: tuple[tuple[str, int], ...] = ()
    """Contenders ``make bench`` runs fewer times than ``--repetitions`` (0: not at all) on this workload, when
    no ``-c`` names the contenders (the bind limit: ``--limit-repetitions``)."""

    @property
    def paced(self) -> bool:
        """The ungate phase releases pods at a set pace: its pods/s are the pace, its latency is the result."""
        return self.ungate_batch > 0

    @property
    def uses_dra(self) -> bool:
        return self.devices_per_node > 0

    def scaled(self, *, nodes: int, pods: int) -> Workload:
        """The same shape at smoke-test size: ``nodes`` nodes and about ``pods`` pods per phase."""
        devices = max(1, -(-2 * pods // nodes)) if self.uses_dra else 0  # every init + measured pod gets a device
        return replace(
            self,
            nodes=nodes,
            init_pods=pods if self.init_pods else 0,
            measured_pods=pods if self.measured_pods else 0,
            devices_per_node=devices,
            gated_pods=2 * pods if self.gated_pods else 0,
            ungate=pods if self.ungate else 0,
            ungate_batch=max(1, pods // 2) if self.ungate_batch else 0,
        )


#: Which contenders run how often. A target compares usher as it ships (PreQueueingHints on) with kube-scheduler:
#: those run 3 times. On the gated workloads that is kube-scheduler as it ships (PreQueueingHints off, alpha in
#: v1.37); the other setting of either scheduler would be four more runs with no target, 2.3 min of `make bench`.
#: The claim bursts are what PreQueueingHints are for: there both schedulers run with them on 3 times (the
#: faster kube-scheduler), and each with them off once, to show what the gate buys.
AS_SHIPPED: tuple[tuple[str, int], ...] = (("usher-pqh-off", 0), ("kube-scheduler-pqh-on", 0))
HINTS_ON: tuple[tuple[str, int], ...] = (("usher-pqh-off", 1), ("kube-scheduler-pqh-off", 1))

WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "SchedulingGated_5000gated_1000pods", Kind.GATED, nodes=500, init_pods=0, measured_pods=1000,
        gated_pods=5000, runs=AS_SHIPPED,
        description="500 nodes; 5000 pods held by a scheduling gate, then 1000 plain measured pods.",
    ),
    Workload(
        "GateRemoval_1000pods_20nodes", Kind.GATE_REMOVAL, nodes=20, init_pods=0, measured_pods=0,
        gated_pods=1000, ungate=1000, ungate_batch=100, ungate_every_s=2.0,
        pod_requests=(("cpu", "50m"), ("memory", "100Mi")), runs=AS_SHIPPED,
        description="20 nodes; 1000 pods held by a scheduling gate (50m cpu, 100Mi each: all fit); the gate "
        "is removed from 100 of them every 2 s (one PATCH each, 32 in flight), as a user releasing work "
        "would. Measured: each pod's time from its gate's removal (the PATCH's answer) to its binding "
        "(the watch seeing spec.nodeName).",
    ),
    Workload(
        "ClaimBurst_500", Kind.CLAIM_BURST, nodes=100, init_pods=0, measured_pods=500, devices_per_node=20,
        runs=HINTS_ON,
        description="100 nodes x 20 devices; 500 pods each naming its own ResourceClaim, created before "
        "the claims; then the 500 claims are created at once and the pods measured.",
    ),
    Workload(
        "ClaimBurst_2000", Kind.CLAIM_BURST, nodes=100, init_pods=0, measured_pods=2000, devices_per_node=20,
        runs=HINTS_ON,
        description="As ClaimBurst_500 with 2000 pods and claims (every device used).",
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
    claim_name: str | None = None,
    gated: bool = False,
    requests: Mapping[str, str] = POD_REQUESTS,
) -> dict[str, Any]:
    """A pod that never runs: no token volume (nothing would mount it), no grace period."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": dict(requests)},
    }
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if claim_name:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {PHASE_LABEL: phase}}, "spec": spec}


def burst_claim_name(index: int) -> str:
    return f"claim-{index:05d}"


__all__ = [
    "CLASS_NAME",
    "DRIVER",
    "GATE",
    "PHASE_LABEL",
    "WORKLOADS",
    "Kind",
    "Workload",
    "burst_claim_name",
    "by_name",
    "claim",
    "device_class",
    "node",
    "node_name",
    "node_slice",
    "pod",
]
