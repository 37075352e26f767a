"""The conformance harness: a local control plane made to look like a small real cluster.

Why a module of its own: this is the only place the conformance run touches
``e2e.controlplane`` (``start``, ``ControlPlane`` and its methods, ``wait_for``),
so when that module changes shape only these imports need adapting.

What a kwok cluster lacks for Kubernetes' sig-scheduling specs, and what this
harness does about it:

- kwok reports InternalIP 127.0.0.1 for every node: the hostPort specs need a
  node address other than 127.0.0.1. Each node gets its own 127.0.1.N address
  (loopback, so a stray connection is refused at once instead of hanging).
- Extended resources a spec writes into ``status.capacity`` only (the
  pod-overhead spec's ``example.com/beardsecond``) stay out of
  ``status.allocatable``, because kubelet is what copies them. `AllocatableMirror`
  does that kubelet job: extended resources in capacity are mirrored into
  allocatable, and dropped from it when they leave capacity.
- Controllers the specs rely on beyond the e2e defaults (which include PV/PVC
  binding and protection, needed by the PVC node-affinity spec and by namespaces
  with PVCs finishing their deletion): ReplicationControllers (Multi-AZ,
  SchedulerPredicates cleanup), PodGroup protection (GenericWorkload),
  ResourceQuota (the DRA claim-quota specs) and DaemonSets (the DRA admin-access
  DaemonSet spec).
- Feature gates and APIs: ``GenericWorkload`` on the API server,
  kube-controller-manager and kube-scheduler, and ``scheduling.k8s.io/v1beta1``
  served, for the GangScheduling, Workload and WorkloadAwarePreemption specs.
- Per-node system pods: the framework's WaitForTotalHealthy (SchedulerPreemption,
  SchedulerPriorities and Multi-AZ call it before every spec) waits up to a
  minute for kube-proxy, fluentd-elasticsearch and node-problem-detector pods
  running in kube-system on every node. Each node gets those three, bound by
  the harness (DaemonSet pods are bound to their node too), BestEffort so that
  no resource arithmetic of a spec changes.
- Graceful termination: kwok deletes a terminating pod at once, where a
  kubelet first runs its preStop hook, for up to the grace period. The
  async-preemption spec gives its victims an 80 s grace period and a 79 s
  preStop sleep so they stay Terminating while it checks them. An extra kwok
  stage (`GRACEFUL_DELETE_STAGE`, outweighing kwok's own pod-delete) keeps pods
  with a preStop hook until their deletionTimestamp; others still go at once,
  as pause containers do under a kubelet.
- Zones: nodes alternate between two zones (``topology.kubernetes.io/zone``) so
  the Multi-AZ specs run instead of skipping.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e import controlplane
from e2e.controlplane import ControlPlane, wait_for
from e2e.image import archive
from e2e.node import RealNode
from e2e.node import apiserver_args as node_apiserver_args

__all__ = [
    "ALPHA_BETA_APIS",
    "DRA_APIS",
    "EXTRA_CONTROLLERS",
    "FEATURE_GATES",
    "AllocatableMirror",
    "Cluster",
    "NodeSpec",
    "RealNodeCluster",
    "add_node_daemons",
    "binary_path",
    "node_specs",
    "start_cluster",
    "start_real_node_cluster",
    "wait_for",
]

REPO = Path(__file__).resolve().parents[2]
VERSIONS_FILE = REPO / "e2e" / "versions.env"

#: Feature gates the spec groups need, for kube-apiserver, kube-controller-manager and kube-scheduler.
FEATURE_GATES = "GenericWorkload=true"
#: Beta APIs are off by default: PodGroup and Workload live in scheduling.k8s.io/v1beta1.
ALPHA_BETA_APIS = "scheduling.k8s.io/v1beta1=true"
#: Controllers the specs need besides e2e.controlplane's defaults (see the module docstring).
EXTRA_CONTROLLERS: tuple[str, ...] = (
    "replicationcontroller-controller",
    "podgroup-protection-controller",
    "resourcequota-controller",
    "daemonset-controller",
)
#: The DRA specs also read resource.k8s.io's older versions ("with v1beta1/v1beta2 API"), as upstream's
#: test/e2e/dra/kind.yaml serves them.
DRA_APIS = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
ZONES = ("zone-a", "zone-b")
#: The per-node kube-system pods test/e2e/framework/node/wait.go requires (requiredPerNodePods).
NODE_DAEMONS = ("kube-proxy", "fluentd-elasticsearch", "node-problem-detector")


#: See the module docstring. kwok picks among matching stages by weight; its fast
#: pod-delete stage has none, so this one wins wherever its selector matches.
GRACEFUL_DELETE_STAGE = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete-after-prestop
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.spec.containers.[].lifecycle.preStop'
      operator: 'Exists'
  weight: 1
  delay:
    # the delay is the smaller of the two: the time left until deletionTimestamp
    durationMilliseconds: 3600000
    jitterDurationFrom:
      expressionFrom: '.metadata.deletionTimestamp'
  next:
    delete: true
"""


def _versions() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in VERSIONS_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def binary_path(name: str) -> Path:
    """A Kubernetes binary of the pinned version in build-binaries.sh's cache (e.g. ``e2e.test``)."""
    cache = Path(os.environ.get("USHER_CACHE") or "~/.cache/usher").expanduser()
    return cache / "bin" / _versions()["KUBERNETES_VERSION"] / name


@dataclass(frozen=True)
class NodeSpec:
    """One kwok node of the harness: a name, a zone and an address of its own."""

    name: str
    zone: str
    address: str
    cpu: str = "4"
    memory: str = "8Gi"
    pods: int = 110


def node_specs(count: int) -> list[NodeSpec]:
    """``count`` nodes alternating between two zones, with addresses 127.0.1.1, 127.0.1.2, ..."""
    return [NodeSpec(f"kwok-node-{i}", ZONES[(i - 1) % len(ZONES)], f"127.0.1.{i}") for i in range(1, count + 1)]


def _is_extended_resource(name: str) -> bool:
    """kube's IsExtendedResourceName: a prefixed name that is not native (``*kubernetes.io/``) nor a quota name."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def allocatable_patch(node: Mapping[str, Any]) -> dict[str, str | None]:
    """What kubelet would change in ``status.allocatable`` for the node's extended resources ({} = nothing)."""
    status = node.get("status") or {}
    capacity: Mapping[str, str] = status.get("capacity") or {}
    allocatable: Mapping[str, str] = status.get("allocatable") or {}
    patch: dict[str, str | None] = {}
    for name, quantity in capacity.items():
        if _is_extended_resource(name) and allocatable.get(name) != quantity:
            patch[name] = quantity
    for name in allocatable:
        if _is_extended_resource(name) and name not in capacity:
            patch[name] = None
    return patch


class AllocatableMirror(threading.Thread):
    """kubelet's part in extended resources: copy them from capacity to allocatable.

    Polls the node list (a handful of nodes: cheap) rather than watching, so it
    needs nothing but ``ControlPlane.request``. Each change it makes is logged.
    """

    def __init__(self, plane: ControlPlane, log_path: Path, interval: float = 0.25) -> None:
        super().__init__(name="allocatable-mirror", daemon=True)
        self.plane = plane
        self.log_path = log_path
        self.interval = interval
        self.stopped = threading.Event()
        self.patches = 0
        self.errors = 0

    def run(self) -> None:
        with self.log_path.open("a") as log:
            while not self.stopped.wait(self.interval):
                try:
                    self._sync(log)
                except Exception as error:  # keep mirroring; a spec will show what went wrong
                    self.errors += 1
                    log.write(f"{time.strftime('%H:%M:%S')} error: {error!r}\n")
                    log.flush()

    def _sync(self, log: Any) -> None:
        for node in self.plane.request("GET", "/api/v1/nodes")["items"]:
            patch = allocatable_patch(node)
            if not patch:
                continue
            name = node["metadata"]["name"]
            self.plane.request(
                "PATCH", f"/api/v1/nodes/{name}/status", {"status": {"allocatable": patch}},
                content_type="application/merge-patch+json",
            )  # fmt: skip
            self.patches += 1
            log.write(f"{time.strftime('%H:%M:%S')} {name}: allocatable {patch}\n")
            log.flush()

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=5)


class _OnPlane:
    """What a started harness answers from its control plane."""

    plane: ControlPlane

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def logs_dir(self) -> Path:
        return self.plane.logs_dir

    def kubectl(self, *args: str) -> str:
        return self.plane.kubectl(*args, check=False)


@dataclass
class Cluster(_OnPlane):
    """A started harness: the control plane, its nodes, and the allocatable mirror."""

    plane: ControlPlane
    nodes: list[NodeSpec]
    mirror: AllocatableMirror
    kube_scheduler: bool
    started_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def e2e_args(self) -> list[str]:
        """What e2e.test must be told about the nodes: nothing, kwok nodes have no kubelet."""
        return []

    def stop(self) -> None:
        self.mirror.stop()
        self.plane.stop()


def _set_address(plane: ControlPlane, spec: NodeSpec) -> None:
    plane.request(
        "PATCH", f"/api/v1/nodes/{spec.name}/status",
        {"status": {"addresses": [{"type": "InternalIP", "address": spec.address},
                                  {"type": "Hostname", "address": spec.name}]}},
        content_type="application/merge-patch+json",
    )  # fmt: skip


def _address(plane: ControlPlane, name: str) -> str | None:
    node = plane.request("GET", f"/api/v1/nodes/{name}")
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return None


#: Nobody schedules the per-node pods: the harness binds them itself.
HARNESS_SCHEDULER = "conformance-harness"


def _daemon_pod(daemon: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{daemon}-{node}", "namespace": "kube-system", "labels": {"k8s-app": daemon}},
        "spec": {
            "schedulerName": HARNESS_SCHEDULER,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": daemon, "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def _running_daemons(plane: ControlPlane) -> int:
    pods = plane.request("GET", "/api/v1/namespaces/kube-system/pods")["items"]
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


def add_node_daemons(plane: ControlPlane, specs: Sequence[NodeSpec], timeout: float = 60.0) -> None:
    """kube-system's per-node pods (`NODE_DAEMONS`) on every node, Running.

    Bound through ``pods/binding`` as a scheduler would, not created with
    ``spec.nodeName``: the binding also sets ``PodScheduled=True``, and several
    specs fail on any pod that sits on a node without that condition.
    """
    base = "/api/v1/namespaces/kube-system/pods"
    for spec in specs:
        for daemon in NODE_DAEMONS:
            pod = _daemon_pod(daemon, spec.name)
            name = pod["metadata"]["name"]
            plane.request("POST", base, pod)
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": spec.name},
            }
            plane.request("POST", f"{base}/{name}/binding", binding)
    want = len(specs) * len(NODE_DAEMONS)
    plane.wait_for(lambda: _running_daemons(plane) >= want, timeout, f"{want} kube-system node pods Running")


def start_cluster(
    workdir: Path,
    *,
    kube_scheduler: bool,
    nodes: Sequence[NodeSpec] | None = None,
    scheduler_verbosity: int = 2,
) -> Cluster:
    """Start the control plane (with kube-scheduler when asked), add the nodes, start the mirror.

    usher is not started here (see run.py): it is a client like the e2e binary.
    """
    t0 = time.monotonic()
    specs = list(nodes) if nodes is not None else node_specs(4)
    gates = f"--feature-gates={FEATURE_GATES}"
    workdir.mkdir(parents=True, exist_ok=True)
    stages = workdir / "kwok-graceful-delete.yaml"
    stages.write_text(GRACEFUL_DELETE_STAGE)
    plane = controlplane.start(
        workdir,
        extra_apiserver_args=[gates, f"--runtime-config={ALPHA_BETA_APIS},{DRA_APIS}"],
        controllers=(*controlplane.DEFAULT_CONTROLLERS, *EXTRA_CONTROLLERS),
        extra_kcm_args=[gates],
        extra_kwok_args=[f"--config={stages}"],
        scheduler=kube_scheduler,
        # No --config: kube-scheduler's built-in default profile, `default-scheduler`.
        extra_scheduler_args=[gates, f"-v={scheduler_verbosity}"],
    )
    mirror = AllocatableMirror(plane, plane.logs_dir / "allocatable-mirror.log")
    try:
        for spec in specs:
            plane.add_kwok_node(
                spec.name, cpu=spec.cpu, memory=spec.memory, pods=spec.pods,
                labels={ZONE_LABEL: spec.zone, REGION_LABEL: "region-1"}, wait=False,
            )  # fmt: skip
            _set_address(plane, spec)
        plane.wait_for_nodes_ready([s.name for s in specs], timeout=60)
        # kwok keeps addresses it finds; check none was overwritten on the way to Ready.
        for spec in specs:
            if _address(plane, spec.name) != spec.address:
                _set_address(plane, spec)
        wait_for(
            lambda: all(_address(plane, s.name) == s.address for s in specs), 10, "node addresses to stick",
        )  # fmt: skip
        add_node_daemons(plane, specs)
        mirror.start()
    except BaseException:
        with contextlib.suppress(Exception):
            plane.stop()
        raise
    return Cluster(plane, specs, mirror, kube_scheduler, started_seconds=round(time.monotonic() - t0, 1))


@dataclass
class RealNodeCluster(_OnPlane):
    """The control plane and one real node (kubelet and containerd, e2e.node), no kwok nodes: the harness of the
    DRA specs that need a kubelet, its plugin registration and CDI."""

    plane: ControlPlane
    node: RealNode
    kube_scheduler: bool
    started_seconds: float = 0.0

    @property
    def e2e_args(self) -> list[str]:
        """What e2e.test must be told about the node: where the kubelet keeps its plugin sockets."""
        return [f"--kubelet-root-dir={self.node.kubelet_root}"]

    def stop(self) -> None:
        try:
            self.node.stop()
        finally:
            self.plane.stop()


def start_real_node_cluster(workdir: Path, *, kube_scheduler: bool, scheduler_verbosity: int = 2) -> RealNodeCluster:
    """The control plane as `start_cluster` makes it, without kwok nodes, and one real node running the images the
    DRA specs use (their test driver's proxy and busybox; e2e/image/build.sh builds them)."""
    t0 = time.monotonic()
    gates = f"--feature-gates={FEATURE_GATES}"
    workdir.mkdir(parents=True, exist_ok=True)
    plane = controlplane.start(
        workdir,
        extra_apiserver_args=[*node_apiserver_args(workdir), gates, f"--runtime-config={ALPHA_BETA_APIS},{DRA_APIS}"],
        controllers=(*controlplane.DEFAULT_CONTROLLERS, *EXTRA_CONTROLLERS),
        extra_kcm_args=[gates],
        scheduler=kube_scheduler,
        extra_scheduler_args=[gates, f"-v={scheduler_verbosity}"],
    )
    try:
        images = tuple(archive(name) for name in ("pause", "hostpathplugin", "busybox"))
        node = RealNode.start(plane, images=images)
    except BaseException:
        with contextlib.suppress(Exception):
            plane.stop()
        raise
    return RealNodeCluster(plane, node, kube_scheduler, started_seconds=round(time.monotonic() - t0, 1))
