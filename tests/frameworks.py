"""Test doubles for the framework's ports, and builders of frameworks and queues.

The binder and waiting-pods ports are the only fakes: everything else
(plugins, config, queue) is the real thing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from usher.config import default_config, parse_config
from usher.core.cache import Cache, DisruptionBudget, NodeInfo
from usher.core.clock import FakeClock
from usher.core.dra.state import DraState
from usher.core.framework.building import build_framework
from usher.core.framework.registry import Registry
from usher.core.framework.runtime import Framework
from usher.core.plugins.registry import in_tree_registry
from usher.core.podgroups import PodGroupStates
from usher.core.queue import Nominator, QueueOptions, SchedulingQueue
from usher.core.types import NodeName, PodInfo, PodKey, Status, WriteResult
from usher.core.volumes.state import VolumeState
from usher.scheduling.preemption import Evictions


@dataclass
class RecordingBinder:
    bound: list[tuple[str, str]] = field(default_factory=list)

    async def bind(self, pod: PodInfo, node: NodeName) -> Status:
        self.bound.append((pod.key, node))
        return Status()


@dataclass
class NoWaiting:
    def allow(self, key: PodKey, plugin: str) -> None:
        pass

    def reject(self, key: PodKey, plugin: str, message: str) -> None:
        pass


def scripted_write(
    writes: list[tuple[str, dict[str, Any]]], answers: list[int], kind: str, obj: Mapping[str, Any]
) -> WriteResult:
    """Record a write and answer it: the next scripted status, else 200 with the object and its
    resourceVersion bumped, as the API server would."""
    body = copy.deepcopy(dict(obj))
    writes.append((kind, body))
    status = answers.pop(0) if answers else 200
    if status != 200:
        return WriteResult(status, {"message": f"HTTP {status}"})
    meta = body.setdefault("metadata", {})
    meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
    return WriteResult(200, body)


@dataclass
class ScriptedChanges:
    """A writer's ``changed``: each call runs the next of ``script`` (a test's stand-in for the watch event the
    wait is for) and returns True; with the script used up it returns False at once, as the deadline would:
    nothing waits for the wall clock."""

    script: list[Callable[[], None]] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    async def changed(self, within: float) -> bool:
        self.waits.append(within)
        if not self.script:
            return False
        self.script.pop(0)()
        return True


@dataclass
class RecordingClaimWriter(ScriptedChanges):
    """Records claim writes; answers them with the written object and a bumped resourceVersion; waits as
    :class:`ScriptedChanges`."""

    writes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    removed: list[tuple[str, str, str]] = field(default_factory=list)
    deallocated: list[tuple[str, str, str]] = field(default_factory=list)
    deallocation_failures: list[Callable[[], None]] = field(default_factory=list)
    """The ``failed`` callback of each deallocation, for a test to play the write's failure."""
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    created: int = 0
    deleted: list[tuple[str, str]] = field(default_factory=list)

    def _answer(self, kind: str, claim: Mapping[str, Any]) -> WriteResult:
        result = scripted_write(self.writes, self.answers, kind, claim)
        if result.ok:
            meta = result.body["metadata"]
            self.stored[f"{meta.get('namespace')}/{meta.get('name')}"] = dict(result.body)
        return result

    async def get(self, namespace: str, name: str) -> WriteResult:
        stored = self.stored.get(f"{namespace}/{name}")
        return WriteResult(200, stored) if stored else WriteResult(404, {"message": "not found"})

    async def update(self, claim: Mapping[str, Any]) -> WriteResult:
        return self._answer("update", claim)

    async def update_status(self, claim: Mapping[str, Any]) -> WriteResult:
        return self._answer("status", claim)

    def remove_reservation(self, namespace: str, name: str, claim_uid: str, pod_uid: str) -> None:
        self.removed.append((f"{namespace}/{name}", claim_uid, pod_uid))

    async def create(self, claim: Mapping[str, Any]) -> WriteResult:
        """Names the claim as the API server would (generateName + a counter) and gives it a UID."""
        body = copy.deepcopy(dict(claim))
        meta = body.setdefault("metadata", {})
        self.created += 1
        meta["name"] = f"{meta.get('generateName', '')}{self.created:05d}"
        meta["uid"] = f"created-{self.created}"
        return self._answer("create", body)

    def delete_claim(self, namespace: str, name: str, claim_uid: str) -> None:
        self.deleted.append((f"{namespace}/{name}", claim_uid))
        self.stored.pop(f"{namespace}/{name}", None)

    async def set_extended_claim_status(
        self, namespace: str, pod: str, pod_uid: str, status: Mapping[str, Any]
    ) -> WriteResult:
        return scripted_write(
            self.writes,
            self.answers,
            "pod-status",
            {"metadata": {"namespace": namespace, "name": pod, "uid": pod_uid}, "extendedResourceClaimStatus": status},
        )

    def deallocate(
        self, namespace: str, name: str, claim_uid: str, resource_version: str, failed: Callable[[], None]
    ) -> None:
        self.deallocated.append((f"{namespace}/{name}", claim_uid, resource_version))
        self.deallocation_failures.append(failed)


@dataclass
class RecordingVolumeWriter(ScriptedChanges):
    """Records PV/PVC writes and answers each with the object and a bumped resourceVersion, or the
    scripted status; waits as :class:`ScriptedChanges`."""

    writes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)

    def _answer(self, kind: str, obj: Mapping[str, Any]) -> WriteResult:
        return scripted_write(self.writes, self.answers, kind, obj)

    async def update_volume(self, volume: Mapping[str, Any]) -> WriteResult:
        return self._answer("volume", volume)

    async def update_claim(self, claim: Mapping[str, Any]) -> WriteResult:
        return self._answer("claim", claim)


@dataclass
class FakeHandle:
    binder: RecordingBinder = field(default_factory=RecordingBinder)
    waiting_pods: NoWaiting = field(default_factory=NoWaiting)
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)
    dra: DraState = field(default_factory=DraState)
    claims: RecordingClaimWriter = field(default_factory=RecordingClaimWriter)

    services: dict[str, list[Mapping[str, str]]] = field(default_factory=dict)
    budgets: dict[str, list[DisruptionBudget]] = field(default_factory=dict)
    preemptions: Evictions = field(default_factory=Evictions)
    volumes: VolumeState = field(default_factory=VolumeState)
    volume_writer: RecordingVolumeWriter = field(default_factory=RecordingVolumeWriter)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    """Node name -> labels, for ``node_labels``."""
    pod_groups: PodGroupStates = field(default_factory=PodGroupStates)
    cache: Cache | None = None
    """Nodes as ``node_info`` reports them (None: no node is known)."""
    nominator: Nominator = field(default_factory=Nominator)

    def node_labels(self, node: str) -> Mapping[str, str] | None:
        return self.nodes.get(node)

    def node_info(self, node: str) -> NodeInfo | None:
        return self.cache.node(node) if self.cache is not None else None

    def image(self, name: str) -> tuple[int, int] | None:
        return self.cache.image(name) if self.cache is not None else None

    def node_count(self) -> int:
        return len(self.cache.node_infos()) if self.cache is not None else 0

    def nominated_pods(self, node: str) -> Sequence[PodInfo]:
        return self.nominator.nominated_pods(node)

    def node_of_pod(self, key: PodKey) -> NodeInfo | None:
        return self.cache.node_of_pod(key) if self.cache is not None else None

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        if self.cache is not None:
            return self.cache.namespace_labels(namespace)
        return self.namespaces.get(namespace)

    def namespace_generation(self) -> int:
        if self.cache is not None:
            return self.cache.namespace_generation()
        # Tests change ``namespaces`` in place: the generation is its content.
        return hash(tuple(sorted((name, tuple(sorted(labels.items()))) for name, labels in self.namespaces.items())))

    def service_selectors(self, namespace: str) -> Sequence[Mapping[str, str]]:
        return self.services.get(namespace, [])

    def disruption_budgets(self, namespace: str) -> Sequence[DisruptionBudget]:
        return self.budgets.get(namespace, [])


def registry_with(name: str, factory: Any) -> Registry:
    """The in-tree registry with one plugin's factory replaced (a test builds that plugin with its own clocks)."""
    base, registry = in_tree_registry(), Registry()
    for plugin in base:
        registry.register(plugin, factory if plugin == name else base.factory(plugin))
    return registry


def framework_of(*plugins: str, handle: Any, registry: Registry | None = None) -> Framework:
    """A profile that runs only ``plugins`` (multiPoint, every default disabled), so the plugins a test is
    not about neither filter nor score."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "usher",
                "plugins": {
                    "multiPoint": {"disabled": [{"name": "*"}], "enabled": [{"name": name} for name in plugins]}
                },
            }
        ],
    }
    registry = registry or in_tree_registry()
    return build_framework(parse_config(config, registry=registry).profiles[0], registry=registry, handle=handle)


def framework(config: str | Mapping[str, Any] | None = None, *, name: str = "usher") -> Framework:
    """The framework of the first profile of a KubeSchedulerConfiguration (YAML or dict), or the default."""
    registry = in_tree_registry()
    if config is None:
        profile = default_config(name).profiles[0]
    else:
        data = yaml.safe_load(config) if isinstance(config, str) else config
        profile = parse_config(data, registry=registry).profiles[0]
    return build_framework(profile, registry=registry, handle=FakeHandle())


def scheduling_queue(clock: FakeClock, *frameworks: Framework, recorder: Any = None, **options: Any) -> SchedulingQueue:
    fws = frameworks or (framework(),)
    sort = fws[0].plugins.queue_sort
    assert sort is not None
    return SchedulingQueue(
        clock,
        profiles={fw.scheduler_name: fw for fw in fws},
        sort_key=sort.sort_key,
        options=QueueOptions(**options),
        recorder=recorder,
    )
