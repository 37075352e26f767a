"""Plain records the core passes around: pod keys and parsed pods.

Pure. A PodInfo is parsed once per watch event from the raw dict the API
server served; the raw object is kept for plugins that need more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, NewType

from usher.core.resources import ResourceList, pod_requests

PodKey = NewType("PodKey", str)
"""``namespace/name``: how queues and the cache address a pod."""

NodeName = NewType("NodeName", str)

PodGroupKey = NewType("PodGroupKey", str)
"""``namespace/name`` of a scheduling.k8s.io PodGroup: how the cache and the queue address a pod group."""


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a container asks for: (protocol, host IP, port); an empty IP means 0.0.0.0."""

    protocol: str
    ip: str
    port: int

    def conflicts(self, other: HostPort) -> bool:
        """Same protocol and port, and the IPs overlap (0.0.0.0 overlaps everything)."""
        if self.protocol != other.protocol or self.port != other.port:
            return False
        return self.ip in ("", "0.0.0.0") or other.ip in ("", "0.0.0.0") or self.ip == other.ip


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    ports: list[HostPort] = []
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for port in container.get("ports") or []:
            host_port = port.get("hostPort")
            if host_port:
                ports.append(
                    HostPort(str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ""), int(host_port))
                )
    return tuple(ports)


def pod_key(namespace: str, name: str) -> PodKey:
    return PodKey(f"{namespace}/{name}")


def pod_group_key(namespace: str, name: str) -> PodGroupKey:
    return PodGroupKey(f"{namespace}/{name}")


@dataclass(frozen=True, slots=True)
class PodInfo:
    """An immutable view of one version of a pod, with what scheduling needs precomputed."""

    key: PodKey
    uid: str
    namespace: str
    name: str
    resource_version: str
    priority: int
    scheduler_name: str
    node_name: str
    scheduling_gates: tuple[str, ...]
    requests: ResourceList
    terminal: bool
    deleting: bool
    preemption_policy: str
    """``PreemptLowerPriority`` (the default) or ``Never``."""
    nominated_node_name: str
    """``status.nominatedNodeName``: where preemption made room for it ("" when none)."""
    start_time: str
    """``status.startTime`` (RFC 3339, "" before the kubelet starts it): preemption prefers newer victims."""
    pod_group: str
    """``spec.schedulingGroup.podGroupName``: the PodGroup the pod belongs to ("" when none)."""
    labels: Mapping[str, str] = field(repr=False, compare=False)
    host_ports: tuple[HostPort, ...] = field(repr=False, compare=False)
    has_pod_affinity: bool = field(repr=False, compare=False)
    """Any pod affinity or anti-affinity term, required or preferred."""
    has_required_anti_affinity: bool = field(repr=False, compare=False)
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Parse a pod as served by the API server. Raises ValueError on malformed requests."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        affinity = spec.get("affinity") or {}
        pod_affinity = affinity.get("podAffinity") or {}
        anti_affinity = affinity.get("podAntiAffinity") or {}
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        return cls(
            key=pod_key(namespace, name),
            uid=str(meta.get("uid") or ""),
            namespace=namespace,
            name=name,
            resource_version=str(meta.get("resourceVersion") or ""),
            priority=int(spec.get("priority") or 0),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            node_name=str(spec.get("nodeName") or ""),
            scheduling_gates=tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or []),
            requests=pod_requests(obj),
            terminal=status.get("phase") in ("Succeeded", "Failed"),
            deleting=bool(meta.get("deletionTimestamp")),
            preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
            nominated_node_name=str(status.get("nominatedNodeName") or ""),
            start_time=str(status.get("startTime") or ""),
            pod_group=str((spec.get("schedulingGroup") or {}).get("podGroupName") or ""),
            labels=dict(meta.get("labels") or {}),
            host_ports=_host_ports(spec),
            has_pod_affinity=bool(pod_affinity or anti_affinity),
            has_required_anti_affinity=bool(anti_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")),
            raw=obj,
        )

    @property
    def assigned(self) -> bool:
        return bool(self.node_name)

    @property
    def group_key(self) -> PodGroupKey | None:
        """The key of the pod's PodGroup; None when the pod belongs to none."""
        return pod_group_key(self.namespace, self.pod_group) if self.pod_group else None

    @property
    def terminating_by_preemption(self) -> bool:
        """Being deleted, with the ``DisruptionTarget`` condition a scheduler's preemption sets (kube's
        PodTerminatingByPreemption): its preemptor is waiting for the room it frees."""
        if not self.deleting:
            return False
        for condition in (self.raw.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "DisruptionTarget":
                return bool(condition.get("status") == "True" and condition.get("reason") == "PreemptionByScheduler")
        return False

    def is_same_pod(self, obj: Mapping[str, Any] | None) -> bool:
        """Is this API object (a pod event's old or new version) this very pod, by UID?"""
        return ((obj or {}).get("metadata") or {}).get("uid") == self.uid


class Code(IntEnum):
    """The outcome of one plugin call, as in kube-scheduler's framework."""

    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6


class Cause(Enum):
    """Why a binding-cycle API call failed, where the cycle must act on the kind of failure.

    kube-scheduler keeps the API error inside its Status and asks it
    (``apierrors.IsNotFound``); usher's Status carries this instead, so no
    caller decides an outcome by matching message text.
    """

    POD_CONFLICT = "conflict"
    """409: the pod is bound already (by an earlier life of ours, or another scheduler) or was replaced
    by a pod of the same name (UID precondition): the watch says where it is; never bind again."""
    POD_NOT_FOUND = "not found"
    """404: the pod was deleted."""
    SUPERSEDED = "superseded"
    """The dispatcher dropped the call for a more relevant one about the same object."""
    GANG_ROLLED_BACK = "gang rolled back"
    """Another member of the pod's gang failed before its binding: the whole gang is retried after its backoff."""


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's verdict: a code, human reasons, the plugin that gave it, and a typed cause for errors."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    cause: Cause | None = None

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_rejection(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin == plugin else Status(self.code, self.reasons, plugin, self.cause)


SUCCESS = Status()


def reason_histogram(statuses: Iterable[Status], absent: int = 0, absent_reason: str = "") -> str:
    """kube-scheduler's FitError detail: each reason with how many nodes gave it, sorted as text
    (``2 Insufficient cpu, 1 node(s) had untolerated taint``); ``absent`` more nodes count ``absent_reason``."""
    counts: Counter[str] = Counter()
    for reasons, nodes in Counter(status.reasons for status in statuses).items():  # many nodes fail alike
        for reason in reasons:
            counts[reason] += nodes
    if absent > 0:
        counts[absent_reason] += absent
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def unschedulable(*reasons: str, resolvable: bool = True) -> Status:
    return Status(Code.UNSCHEDULABLE if resolvable else Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons)


def error(message: str, cause: Cause | None = None) -> Status:
    return Status(Code.ERROR, (message,), cause=cause)


class QueueingHint(IntEnum):
    """A QueueingHint's answer: may this event make the rejected pod schedulable?"""

    QUEUE_SKIP = 0
    QUEUE = 1


@dataclass(frozen=True, slots=True)
class WriteResult:
    """An API server's answer to a read or write of an object: the HTTP status and the body it returned."""

    status: int
    body: Mapping[str, Any]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def message(self) -> str:
        return str(self.body.get("message") or f"HTTP {self.status}")


def version_not_older(version: str, than: str) -> bool:
    """Whether resourceVersion ``version`` is at least ``than`` (numeric when both are, else equal)."""
    try:
        return int(version) >= int(than)
    except ValueError:
        return version == than
